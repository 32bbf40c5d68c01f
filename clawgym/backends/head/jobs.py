"""The jobs still running on a cluster (Ray's job API), with what clawgym recorded in their metadata."""

from __future__ import annotations

from dataclasses import dataclass
from typing import List, Optional


def running_jobs(address: str) -> List[str]:
    """Submission ids of jobs on a cluster that have not finished."""
    from ray.job_submission import JobSubmissionClient

    client = JobSubmissionClient(address)
    return [j.submission_id or j.job_id for j in client.list_jobs()
            if j.type.name == "SUBMISSION" and not j.status.is_terminal()]


@dataclass
class RunningJob:
    """A job that has not finished on a cluster, with what clawgym recorded in its metadata."""

    submission_id: str
    # clawgym's run name, or "" for a job clawgym did not submit.
    run_name: str
    # GPUs the job holds (clawgym jobs record it); None when unknown.
    gpus: Optional[int]
    # Ports its servers listen on (clawgym jobs record them).
    ports: List[int]
    # Pid of the clawgym launch that submitted it (0 when unknown).
    launcher_pid: int

    def describe(self) -> str:
        what = f"job {self.submission_id}" + (f" (run {self.run_name})" if self.run_name else " (not from clawgym)")
        return what + (f", {self.gpus} GPUs" if self.gpus is not None else ", GPUs unknown")


def running_job_details(address: str) -> List[RunningJob]:
    """Jobs on a cluster that have not finished, with their recorded GPUs and ports."""
    from ray.job_submission import JobSubmissionClient

    out = []
    for j in JobSubmissionClient(address).list_jobs():
        if j.type.name != "SUBMISSION" or j.status.is_terminal():
            continue
        md = j.metadata or {}
        gpus = md.get("clawgym_gpus")
        ports = [int(p) for p in (md.get("clawgym_ports") or "").split(",") if p.strip().isdigit()]
        pid = md.get("clawgym_launcher_pid") or "0"
        out.append(RunningJob(submission_id=j.submission_id or j.job_id or "?",
                              run_name=md.get("clawgym_run_name", ""),
                              gpus=int(gpus) if gpus and gpus.isdigit() else None, ports=ports,
                              launcher_pid=int(pid) if pid.isdigit() else 0))
    return out
