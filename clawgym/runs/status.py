"""A run's status: from what clawgym recorded, and what Ray or SLURM still answer.

The latest launch's ``submitted.json`` names the job (a Ray submission id and dashboard
address, or ``slurm:<job id>``). Ray is asked only when its dashboard port accepts a
connection within a second (a cluster that is gone must not stall the table); SLURM only
when ``scontrol`` is installed. What nobody answers for is ``unknown``, with the reason.
"""

from __future__ import annotations

import json
import shutil
import socket
from pathlib import Path
from typing import Any, Dict, Optional, Tuple
from urllib.parse import urlparse

from clawgym.runs.discover import Run

RUNNING, SUCCEEDED, FAILED, STOPPED, UNKNOWN = "running", "succeeded", "failed", "stopped", "unknown"
#: A KubeRay manifest written for the user to apply (kuberay.apply=false): nothing ran.
NOT_APPLIED = "not applied"
STATUSES = (RUNNING, SUCCEEDED, FAILED, STOPPED, UNKNOWN, NOT_APPLIED)

_RAY = {"PENDING": RUNNING, "RUNNING": RUNNING, "SUCCEEDED": SUCCEEDED, "FAILED": FAILED, "STOPPED": STOPPED}
_SLURM = {"PENDING": RUNNING, "CONFIGURING": RUNNING, "RUNNING": RUNNING, "COMPLETING": RUNNING,
          "SUSPENDED": RUNNING, "REQUEUED": RUNNING, "COMPLETED": SUCCEEDED, "CANCELLED": STOPPED,
          "FAILED": FAILED, "TIMEOUT": FAILED, "NODE_FAIL": FAILED, "OUT_OF_MEMORY": FAILED,
          "BOOT_FAIL": FAILED, "DEADLINE": FAILED, "PREEMPTED": FAILED}


def _answers(address: str, timeout: float = 1.0) -> bool:
    u = urlparse(address if "://" in address else f"http://{address}")
    if not u.hostname:
        return False
    try:
        with socket.create_connection((u.hostname, u.port or 80), timeout=timeout):
            return True
    except OSError:
        return False


class StatusCache:
    """One Ray client per dashboard address for a whole table (clients cost a round trip each)."""

    def __init__(self) -> None:
        self._clients: Dict[str, object] = {}

    def ray_job(self, address: str, submission_id: str) -> Tuple[Optional[str], str, Dict]:
        client = self._clients.get(address)
        if client is None:
            if not _answers(address):
                return None, f"no Ray dashboard answers at {address}", {}
            from ray.job_submission import JobSubmissionClient

            from clawgym.launch.rayjob import quiet_ray_sdk

            quiet_ray_sdk()

            try:
                client = self._clients[address] = JobSubmissionClient(address)
            except Exception as exc:  # noqa: BLE001 - Ray raises several kinds; the cluster just does not say
                return None, f"Ray at {address} did not answer ({type(exc).__name__})", {}
        try:
            info = client.get_job_info(submission_id)
        except Exception:  # noqa: BLE001 - e.g. a job this cluster no longer (or never) had
            return None, f"Ray at {address} does not know job {submission_id}", {}
        job = {"start_time": (info.start_time or 0) / 1000 or None, "end_time": (info.end_time or 0) / 1000 or None,
               "ray_status": str(info.status.value), "message": info.message or ""}
        return _RAY.get(str(info.status.value)), str(info.message or ""), job


def _submitted(run: Run) -> Dict[str, str]:
    snap = run.latest
    if snap is None:
        return {}
    try:
        return json.loads((snap.path / "submitted.json").read_text())
    except (OSError, ValueError):
        # A format-1 snapshot recorded no submission: its meta and plan still name the job.
        return {"submission_id": snap.meta.get("submission_id") or snap.plan.get("submission_id") or "",
                "address": snap.plan.get("address") or ""}


def _read(path: Any) -> Dict[str, Any]:
    try:
        data = json.loads(path.read_text())
        return data if isinstance(data, dict) else {}
    except (OSError, ValueError, AttributeError):
        return {}


def recorded_times(run: Run) -> Tuple[Optional[float], Optional[float], Optional[str]]:
    """(started, ended, status) as clawgym recorded them, whoever answers now: the first launch's
    submission (``submitted.json``, else its snapshot's creation) and the latest launch's end
    (``ended.json``, written when the followed job ended). A run's duration is read from these, so it
    does not change with whether the Ray dashboard still answers."""
    started: Optional[float] = None
    for snap in run.snapshots:
        sub = _read(snap.path / "submitted.json")
        if sub.get("submitted_unix"):
            started = float(sub["submitted_unix"])
            break
    if started is None and run.snapshots:
        started = getattr(run.snapshots[0], "created", None) or None
    ended = _read(run.latest.path / "ended.json") if run.latest is not None else {}
    end = float(ended["ended_unix"]) if ended.get("ended_unix") else None
    status = str(ended["status"]) if ended.get("status") in (SUCCEEDED, FAILED, STOPPED) else None
    return started, end, status


def resolve(run: Run, cache: Optional[StatusCache] = None) -> Run:
    """Set ``run.status``, ``run.status_detail`` and ``run.job`` (Ray's start/end times when known)."""
    cache = cache or StatusCache()
    if run.latest is None:
        run.status, run.status_detail = UNKNOWN, "; ".join(run.problems) or "no readable snapshot"
        return run
    sub = _submitted(run)
    sid, address = str(sub.get("submission_id") or ""), str(sub.get("address") or "")
    if sid.startswith("slurm:"):
        job = sub.get("job") if isinstance(sub.get("job"), dict) else {}
        _close_cancelled_slurm(run.save_dir, run.latest.path, sid.split(":", 1)[1], job)
        # SLURM job ids repeat (another cluster, a controller reset): the end the launcher
        # recorded wins, and only the cluster the run was submitted to is asked.
        if _recorded_end(run) is not None:
            _from_launcher(run, "recorded by its launcher")
            return run
        from clawgym.common.ownership import same_slurm_cluster

        if same_slurm_cluster(job) is False:
            run.status = UNKNOWN
            run.status_detail = (f"submitted to SLURM cluster {job.get('cluster')} ({job.get('controller')}); "
                                 f"scontrol here answers for another cluster")
            return run
        if shutil.which("scontrol") is None:
            run.status, run.status_detail = UNKNOWN, "scontrol is not installed here, so SLURM cannot be asked"
            return run
        from clawgym.backends.slurm import SlurmJob

        state = SlurmJob(sid.split(":", 1)[1]).state()
        run.status, run.status_detail = _SLURM.get(state, UNKNOWN), f"SLURM: {state}"
        return run
    if not sid or not address or not address.startswith(("http://", "https://")):
        run.status, run.status_detail = UNKNOWN, "the launch recorded no Ray dashboard to ask"
        _from_launcher(run, run.status_detail)
        return run
    status, detail, job = cache.ray_job(address, sid)
    run.status, run.status_detail, run.job = status or UNKNOWN, detail, job
    if status is None:
        _from_launcher(run, detail)
    return run


def settle_slurm_record(save_dir: Any, snapshot: Any) -> None:
    """What :func:`resolve` does for a SLURM run's record, for a reader that reads only the save dir
    (``clawgym show``): ``snapshot`` is the latest launch's snapshot dir."""
    try:
        sub = json.loads((Path(snapshot) / "submitted.json").read_text())
    except (OSError, ValueError):
        return
    sid = str(sub.get("submission_id") or "")
    if sid.startswith("slurm:"):
        _close_cancelled_slurm(Path(save_dir), Path(snapshot), sid.split(":", 1)[1],
                               sub.get("job") if isinstance(sub.get("job"), dict) else {})


def _close_cancelled_slurm(save_dir: Path, snapshot: Path, job_id: str, job: Dict[str, Any]) -> None:
    """A supervised SLURM run whose job was cancelled while pending between two allocations (requeued):
    no supervisor ran to record it, so the first reader that finds SLURM's CANCELLED for a job whose
    record is still open records it as the user's stop (clawgym.backends.slurm.close_cancelled). SLURM is
    asked only when the record is open, and only the cluster the run was submitted to."""
    from clawgym.snapshot.attempts import read_attempts

    record = read_attempts(save_dir)
    last = record.last
    if record.stopped is not None or last is None or (last.ended is not None and last.next != "resume"):
        return
    if shutil.which("scontrol") is None:
        return
    from clawgym.backends.slurm import SCRIPT_FILE, SlurmJob, close_cancelled, job_dir
    from clawgym.common.ownership import same_slurm_cluster

    if same_slurm_cluster(job) is not True:
        return
    try:
        close_cancelled(str(save_dir), str(job_dir(str(snapshot)) / SCRIPT_FILE), job_id, SlurmJob(job_id).info())
    except OSError:
        pass  # a read-only save dir: the record stays as the supervisor left it


def _recorded_end(run: Run) -> Optional[Dict[str, Any]]:
    try:
        ended = json.loads((run.latest.path / "ended.json").read_text())
    except (OSError, ValueError, AttributeError):
        return None
    return ended if isinstance(ended, dict) and ended.get("status") in (SUCCEEDED, FAILED, STOPPED,
                                                                        NOT_APPLIED) else None


def _from_launcher(run: Run, why: str) -> None:
    """The end the launcher recorded (``ended.json``) when the cluster cannot say any more."""
    ended = _recorded_end(run)
    if ended is None:
        return
    if ended.get("status") == NOT_APPLIED:
        run.status, run.status_detail = NOT_APPLIED, "manifest written, not applied (kuberay.apply=false)"
        return
    if ended.get("status") in (SUCCEEDED, FAILED, STOPPED):
        run.status = str(ended["status"])
        run.status_detail = f"as the launcher saw it end ({why})"
        if ended.get("ended_unix"):
            run.job = {**run.job, "end_time": float(ended["ended_unix"])}
