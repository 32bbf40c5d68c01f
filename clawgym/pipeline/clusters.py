"""What the face may ask about clusters, on the pipeline's floor: it names no backend itself.

The backend a launch's config asks for (``backend_for``), a dry run's artefact, the local head a
single run begins before validation, and the records ``clawgym jobs`` reads (local heads clawgym
started, SLURM jobs it submitted). Backend modules are imported inside the functions that need
them: a dry run of a local head or an existing cluster imports none of them
(tests/test_dry_run_imports.py).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

from clawgym.plan.allocation import backend_name
from clawgym.backends import Backend, BackendError, renders_dry_run_artefact


class ClusterError(Exception):
    """A cluster refused or failed what was asked; the message says why (and the fix)."""


def backend_for(cfg: Any, plans: Sequence[Any], cfgs: Optional[Sequence[Any]] = None) -> Backend:
    """The backend the launch's config asks for (every job of a launch shares one cluster)."""
    plan = plans[0]
    cfgs = list(cfgs) if cfgs is not None else [cfg] * len(plans)
    if backend_name(cfg) == "slurm":
        from clawgym.backends.slurm import SlurmBackend

        return SlurmBackend(plans, cfgs)
    if backend_name(cfg) == "kuberay":
        from clawgym.backends.kuberay import KubeRayBackend

        return KubeRayBackend(plans, cfgs)
    if plan.ray_start is not None:
        from clawgym.backends.local import LocalHead

        return LocalHead(plans, cfgs)
    from clawgym.backends.existing import ExistingCluster

    return ExistingCluster(plans, cfgs)


def dry_run_artefact(plan: Any, cfg: Any, plain: Mapping[str, Any], where: Path) -> Optional[Tuple[str, str]]:
    """(file name, text) the config's backend hands its cluster besides the plan (SLURM's batch
    script, the RayJob manifest), or None; raises :class:`ClusterError` when the backend refuses."""
    if not renders_dry_run_artefact(cfg):
        return None
    try:
        return backend_for(cfg, [plan]).dry_run_artefact(plan, plain, where)
    except BackendError as err:
        raise ClusterError(str(err)) from None


def begin_head_early(c: Mapping[str, Any], environ: Mapping[str, str]) -> None:
    """Begin a single run's local head before its config is validated (``backends.local.speculate``)."""
    from clawgym.backends.local import speculate  # the head's modules and subprocess: not on a dry run's path

    speculate(c, environ)


def drop_early_head() -> None:
    """Stop the head :func:`begin_head_early` began and no launch adopted."""
    from clawgym.backends.local import drop

    drop()


# ---------------------------------------------------------------- records for `clawgym jobs`


def recorded_heads() -> List[Any]:
    """The local Ray heads clawgym started and recorded."""
    from clawgym.backends.head import records as head_records

    return _guarded(head_records.list_records)


def live_heads(patience: float) -> List[Any]:
    from clawgym.backends.head import liveness as head_liveness

    return [r for r in recorded_heads() if _guarded(head_liveness.is_alive, r, patience=patience)]


def dashboard_answers(address: str, timeout: float) -> bool:
    from clawgym.launch import rayjob

    return _guarded(rayjob.dashboard_responds, address, timeout=timeout)


def head_state(rec: Any, patience: float) -> str:
    """``alive``, ``unresponsive`` or ``dead``."""
    from clawgym.backends.head import liveness as head_liveness

    return _guarded(head_liveness.head_state, rec, patience=patience)


def live_users(rec: Any) -> List[Dict[str, float]]:
    """The live clawgym launches a head's record names (also while it is being started)."""
    from clawgym.backends.head import users as head_users

    return _guarded(head_users.live_users, rec)


def head_owner(rec: Any) -> Tuple[str, List[Dict[str, float]]]:
    """Who holds the head (``in use``, ``kept`` or not), and the live launches using it."""
    from clawgym.backends.head import users as head_users

    owner = _guarded(head_users.ownership, rec)
    return owner, (_guarded(head_users.live_users, rec) if owner == "in use" else [])


def running_jobs(address: str) -> List[str]:
    from clawgym.backends.head import jobs as head_jobs

    return _guarded(head_jobs.running_jobs, address)


def stop_head(rec: Any) -> None:
    """Stop a head clawgym started, through its record."""
    from clawgym.backends.head import start as head_start

    _guarded(head_start.stop_head, rec)


def slurm_jobs() -> List[Tuple[Dict[str, Any], str]]:
    """The SLURM batch jobs clawgym submitted (their records) with their state (``?`` unknown)."""
    from clawgym.backends import slurm

    out = []
    for r in slurm.list_records():
        job = slurm.SlurmJob(str(r["job_id"]), output=r.get("output"))
        try:
            state = job.state()
        except slurm.SlurmError:
            state = "?"
        out.append((r, state))
    return out


def _guarded(fn: Any, *args: Any, **kwargs: Any) -> Any:
    """``fn``'s answer; a head's error (an unreadable record, a head that will not stop) as ClusterError."""
    from clawgym.backends.head.records import HeadError

    try:
        return fn(*args, **kwargs)
    except HeadError as err:
        raise ClusterError(str(err)) from None


def _recorded_save(rec: Mapping[str, Any]) -> str:
    """The save dir of a recorded SLURM job: recorded since it was; for an older record, the batch script's
    place (``<save>/clawgym/slurm/<snapshot>/slurm_batch.sh``, clawgym.backends.slurm.job_dir)."""
    if rec.get("save_dir"):
        return str(rec["save_dir"])
    where = Path(str(rec.get("script") or "")).parent
    if where.parent.name == "slurm" and where.parent.parent.name == "clawgym":
        return str(where.parent.parent.parent)
    return ""


def stop_slurm_run(job_id: str, *, timeout: float, say: Any = print) -> str:
    """``clawgym jobs stop slurm:<id>``: stop a SLURM run clawgym submitted for good; SLURM's final state
    of the job (``UNKNOWN`` when it did not end within ``timeout``).

    Only a job of clawgym's records (``clawgym jobs slurm``), on the cluster they name. The user's stop is
    recorded first (``user_stopped.json`` naming the job, as ``clawgym jobs stop`` of a Ray run does), so
    the supervisor in the allocation reads SLURM's SIGTERM as a stop for good and never requeues it; then
    ``scancel <id>`` (scancel(1): the job, pending or running, is cancelled; its steps and batch shell get
    SIGTERM, then SIGKILL after KillWait). A job cancelled while it was pending between two allocations
    has no supervisor to record that: its record is closed here once SLURM says CANCELLED."""
    import time

    from clawgym.backends import slurm
    from clawgym.common.ownership import same_slurm_cluster
    from clawgym.supervisor import process

    rec = slurm.recorded_job(job_id)
    if rec is None:
        raise ClusterError(f"no SLURM job {job_id} submitted by clawgym is recorded; clawgym stops only the jobs it "
                           f"submitted\n  fix: `clawgym jobs slurm` lists them (another job: scancel {job_id} "
                           f"yourself)")
    if same_slurm_cluster(rec) is False:
        raise ClusterError(f"SLURM job {job_id} was submitted to cluster {rec.get('cluster')} "
                           f"({rec.get('controller')}); scontrol here answers for another cluster, whose job "
                           f"{job_id} is not clawgym's\n  fix: run clawgym jobs stop on a login node of "
                           f"{rec.get('cluster')}")
    job = slurm.SlurmJob(job_id, output=rec.get("output"))
    try:
        info = job.info()
    except slurm.SlurmError as err:
        raise ClusterError(str(err)) from None
    state = info.get("JobState", "")
    if not state:
        raise ClusterError(f"SLURM does not answer about job {job_id} (scontrol show job)\n"
                           f"  fix: try again once `squeue -j {job_id}` answers")
    save = _recorded_save(rec)
    if state in slurm.TERMINAL_STATES:
        say(f"slurm:{job_id}: already {state}")
        return state
    if save:
        process.request_stop(save, by="user", why=f"clawgym jobs stop slurm:{job_id}", slurm_job=job_id)
    say(f"slurm:{job_id}: stopping the run {rec.get('run_name') or ''} for good (scancel {job_id}; it was {state})")
    try:
        job.cancel()
    except slurm.SlurmError as err:
        raise ClusterError(str(err)) from None
    deadline = time.time() + timeout
    while True:
        info = job.info()
        state = info.get("JobState", "")
        if state in slurm.TERMINAL_STATES or time.time() > deadline:
            break
        time.sleep(0.5)
    if state not in slurm.TERMINAL_STATES:
        return "UNKNOWN"
    closed = slurm.close_cancelled(save, str(rec.get("script") or ""), job_id, info,
                                   why=f"clawgym jobs stop slurm:{job_id}") if save else None
    if closed:
        say(f"slurm:{job_id}: recorded in {save}/clawgym/attempts.json: {closed}")
    return state
