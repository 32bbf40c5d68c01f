"""The pipeline's checks before anything is submitted, as a mixin of :class:`clawgym.pipeline.pipeline.Pipeline`:
one cluster for all jobs, one owner per save dir and sandbox, no port shared inside the launch,
capacity and ports of the running cluster, preflight, then cleanup of leftovers and the snapshots.

The methods read the pipeline's ``jobs``, ``options``, ``backend``, ``detach`` and ``_sweep`` and
set its ``capacity``."""

from __future__ import annotations

import sys
from typing import Dict, Sequence

from clawgym.pipeline.jobs import PipelineJob, Refused
from clawgym.pipeline.report import say


class LaunchChecks:
    """Checks of a launch's jobs (module doc); every refusal is a :class:`Refused`."""

    def _refuse(self, what: str, lines: Sequence[str], *, submitted: bool = False) -> Refused:
        nothing = "nothing was submitted" if submitted else "nothing was started"
        head = f"clawgym: sweep refused, {what}; {nothing}" if self._sweep else f"clawgym: {what}; {nothing}"
        return Refused("\n".join([head, *lines]))

    def _claim(self) -> None:
        """One owner per save dir and per sandbox: recorded before preflight (clawgym.common.ownership),
        refused when another live launch (its launcher, or a job it submitted) holds a save dir."""
        from clawgym.common import ownership
        from clawgym.preflight.sandbox import engine_address

        sandboxes = [{"engine": engine_address(), "prefix": str(j.cfg.sandbox.container_prefix),
                      "image": str(j.cfg.sandbox.image)} for j in self.jobs if j.cfg.sandbox.backend == "docker"]
        try:
            ownership.claim(runs=[j.plan.run_name for j in self.jobs],
                            save_dirs=[str(j.plan.save_dir) for j in self.jobs if j.plan.save_dir],
                            sandboxes=sandboxes)
        except ownership.Held as err:
            raise self._refuse("a save dir is in use by another launch", [
                str(err), "  rule: one trainer per save dir (two would overwrite each other's iter_* checkpoints)",
                "  fix:  wait for that run to end (or stop it: clawgym jobs stop <id>), or give this launch its "
                "own save dir: run_name=<new name> or paths.save=<new dir>"]) from None

    # -------------------------------------------------------- checks

    def _one_cluster(self) -> None:
        from clawgym.backends import cluster_key, describe_cluster

        if len({cluster_key(j.plan) for j in self.jobs}) > 1:
            raise self._refuse("its jobs ask for different Ray clusters", [
                *(f"  job #{j.num} ({j.label}): {describe_cluster(j.plan)}" for j in self.jobs),
                "  rule: one sweep runs on one cluster",
                "  fix:  set the same ray.* for every job (e.g. ray.num_gpus=<node GPUs> for all,"
                " or ray.address=<cluster>)"])
        if len({bool(j.cfg.ray.detach) for j in self.jobs}) > 1:
            raise self._refuse("ray.detach differs between jobs", ["  fix:  set ray.detach once for the whole sweep"])

    def _check_own_ports(self) -> None:
        """One owner per port inside the launch: two jobs that may run at once on the backend's
        one head claim no common port (the second API server would fail to bind mid-run), as
        :meth:`_check_capacity` refuses against jobs of other launches. Checked before anything
        starts; a backend whose jobs each get a cluster of their own (``packs_jobs`` False) and
        ``max_concurrent=1`` (one job at a time) have nothing to check."""
        if len(self.jobs) < 2 or not getattr(self.backend, "packs_jobs", True) or self.options.max_concurrent == 1:
            return
        from clawgym.launch.rayjob import ports_of

        owner: Dict[int, PipelineJob] = {}
        clashes = []
        for j in self.jobs:
            for port in ports_of(j.plan):
                if port in owner:
                    first = owner[port]
                    clashes.append(f"  job #{j.num} ({j.label}) and job #{first.num} ({first.label}) both claim "
                                   f"port {port}")
                else:
                    owner[port] = j
        if clashes:
            raise self._refuse("two of its jobs would share a port on one Ray head", [
                *clashes, "  rule: jobs running side by side on one node cannot share an API server (or router) "
                          "port",
                "  fix:  leave sglang.api_port unset (the sweep gives each job its own), or sweep it with one "
                "port per job (e.g. sglang.api_port=30001,30002), and the same for any --*-port in extra_args; "
                "or run one job at a time: hydra.launcher.max_concurrent=1"])

    def _check_capacity(self, *, after_start: bool = False) -> None:
        """Every job fits the cluster's declared GPUs and, next to the jobs already running
        there, its free GPUs; no job claims a port that a running job claimed."""
        b = self.backend
        try:
            free = b.free_gpus()
            total = b.total_gpus() if free is not None else None
            ports = b.ports_in_use()
            running = b.running_elsewhere()
        except Exception:
            if after_start:
                raise
            return  # the preflight's cluster check reports a cluster that does not answer
        if free is None:
            self.capacity = None
            return
        jobs = self.jobs
        big = [j for j in jobs if j.plan.gpus_required > total]
        if big and total == 0 and b.checks_this_machine():
            raise self._refuse("the local Ray head sees no GPUs on this node", [
                "  rule: jobs are packed onto the GPUs the head declares",
                "  fix:  run on a GPU node, or declare them: ray.num_gpus=<GPUs of the node>"], submitted=True)
        if big:
            raise self._refuse(f"the cluster has {total:g} GPUs", [
                *(f"  job #{j.num} ({j.label}) needs {j.plan.gpus_required} GPUs" for j in big),
                "  rule: a job's gpu_layout must fit the cluster",
                "  fix:  choose a smaller gpu_layout, or run on a cluster with more GPUs (ray.address / ray.num_gpus)"],
                submitted=True)
        where = self.backend.address
        waiting = [j for j in jobs if j.plan.gpus_required > free]
        if waiting:
            raise self._refuse(f"the cluster at {where} has {free:g} of its {total:g} GPUs free", [
                *(f"  job #{j.num} ({j.label}) needs {j.plan.gpus_required} GPUs" for j in waiting),
                "  running there now:", *(f"    {line}" for line in running),
                f"  rule: a job starts only on GPUs no running job holds",
                f"  fix:  wait for those jobs, stop them (clawgym jobs stop <id> --address {where}), "
                f"or use another cluster (ray.address, or ray.port/ray.dashboard_port for a head of its own)"],
                submitted=True)
        need = sum(j.plan.gpus_required for j in jobs)
        if self.detach and need > free:
            raise self._refuse(
                f"ray.detach=true needs every job to run at once, but the jobs need {need} GPUs and the cluster has "
                f"{free:g} free", ["  fix:  drop ray.detach (the sweep then queues jobs and waits), or split the sweep"],
                submitted=True)
        clashes = []
        for j in jobs:
            from clawgym.launch.rayjob import ports_of

            for port in ports_of(j.plan):
                if port in ports:
                    clashes.append(f"  job #{j.num} ({j.label}): port {port} (e.g. sglang.api_port) is claimed by "
                                   f"{ports[port]}")
        if clashes:
            raise self._refuse(f"ports clash with jobs running on {where}", [
                *clashes, "  rule: two jobs' API servers (and routers) cannot share a port",
                "  fix:  set sglang.api_port (and any --*-port in extra_args) to ports no running job uses"],
                submitted=True)
        self.capacity = free

    def _preflight(self) -> None:
        from clawgym.preflight import PreflightError, run_preflight

        local = self.backend.checks_this_machine()
        if not self._sweep:
            j = self.jobs[0]
            try:
                run_preflight(j.cfg, j.plan, local_head=local)
            except PreflightError as err:
                # run_preflight already printed the checklist with every failing line and its fix.
                from clawgym.preflight.core import failure_line

                sys.stdout.flush()
                raise Refused(failure_line(err)) from None
            return
        failed = []
        for j in self.jobs:
            try:
                run_preflight(j.cfg, j.plan, local_head=local, echo=None)
            except PreflightError as err:
                failed.append((f"#{j.num} ({j.label})", err))
        if failed:
            from clawgym.preflight.core import sweep_failure_report

            # A finding several jobs share is printed once, naming them (issue 35).
            raise Refused(sweep_failure_report(failed, len(self.jobs)))
        say(f"[sweep] preflight passed for all {len(self.jobs)} jobs")

    def _cleanup_and_snapshot(self) -> None:
        from clawgym.preflight import PreflightError, cleanup_leftovers
        from clawgym.snapshot.layout import SnapshotError
        from clawgym.snapshot.write import write_launch_snapshot

        try:
            cleaned = set()
            for j in self.jobs:
                sb = j.cfg.sandbox
                key = (sb.backend, sb.container_prefix, sb.image)
                if key not in cleaned:
                    cleanup_leftovers(j.cfg)
                    cleaned.add(key)
            for j in self.jobs:
                j.snapshot = str(write_launch_snapshot(j.cfg, j.plan, record=j.record))
        except (PreflightError, SnapshotError) as err:
            if self._sweep:
                raise Refused(f"clawgym: sweep refused; nothing was submitted\n{err}") from None
            raise Refused(str(err)) from None
