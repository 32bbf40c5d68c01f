"""What every backend whose jobs are Ray jobs submitted from here shares (local, existing)."""

from __future__ import annotations

from typing import Any, Dict, List, Mapping, Optional, Sequence

from clawgym.backends import Backend


class RayJobsBackend(Backend):
    """Jobs go to a Ray dashboard at ``self.address`` through Ray's job SDK."""

    #: True when the head was started by clawgym with the secrets in its environment.
    started_here = False

    def total_gpus(self) -> float:
        from clawgym.backends.head import liveness as head_liveness

        return head_liveness.cluster_gpus(self.address)

    def _running(self) -> List[Any]:
        from clawgym.backends.head import jobs as head_jobs

        return head_jobs.running_job_details(self.address)

    def free_gpus(self) -> Optional[float]:
        # Declared GPUs minus what running jobs hold: Ray's own "available" count misses a job
        # whose trainer has not created its placement groups yet. clawgym's jobs record their GPUs;
        # another job's count is unknown (listed by running_elsewhere).
        held = sum(j.gpus or 0 for j in self._running())
        return max(0.0, self.total_gpus() - held)

    def ports_in_use(self) -> Dict[int, str]:
        return {port: j.describe() for j in self._running() for port in j.ports}

    def running_elsewhere(self) -> List[str]:
        return [j.describe() for j in self._running()]

    def submit(self, plan: Any, cfg: Any, snapshot: Optional[str], secrets: Mapping[str, str]) -> Any:
        from clawgym.launch import rayjob as launch

        return launch.submit(self.address, plan, secrets=secrets, started_here=self.started_here,
                             pass_secrets=bool(cfg.ray.pass_secrets_in_runtime_env))

    def hints(self, handles: Sequence[Any]) -> List[str]:
        addr = self.address
        lines = []
        for h in handles:
            lines += [f"  follow:  clawgym jobs logs {h.submission_id} --follow --address {addr}",
                      f"  status:  clawgym jobs status {h.submission_id} --address {addr}",
                      f"  stop:    clawgym jobs stop {h.submission_id} --address {addr}"]
            if h.plan is not None and h.plan.save_dir:
                # Nobody stamps checkpoints of a job we do not follow: this does.
                lines.append(f"  config snapshots into checkpoints: clawgym stamp {h.plan.save_dir} --follow")
        return lines
