"""The supervisor as a process: started detached beside a launch, recorded, found, and stopped.

The pipeline starts one right after a supervised job's submission (:func:`spawn`): ``python -m
clawgym.supervisor <save dir>`` in a session of its own (a closed terminal's SIGHUP, Ctrl-C in the
launching shell and the launcher's own end do not reach it), its output in
``<save>/clawgym/supervisor.log``, and it is recorded as owner twice, with its pid and its process
start time (a reused pid is never mistaken for it): in the launch's ownership record
(:func:`clawgym.common.ownership.add_supervisor`) and in ``<save>/clawgym/supervisor.json`` (so
``clawgym jobs stop`` and the launcher find it from the save dir). Its argv names only the save dir
and its id: the config is read from the newest snapshot, and the secrets a restart needs come from
the environment it inherited from the launcher (never argv, never a file).

One supervisor per save dir: a supervisor holds ``<save>/clawgym/supervisor.lock`` (``flock``) for
its life, and :func:`spawn` refuses while the recorded one runs.

A user's stop is a record, then a signal: :func:`stop_for_good` writes
``<save>/clawgym/user_stopped.json`` (what the runner's ``user_stopped`` reads; the run is never
restarted), then sends SIGTERM to the recorded supervisor (pid and start time verified), which stops
the job through the Jobs API, records the attempt as stopped, and exits 130.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any, Dict, Mapping, Optional

from clawgym.common import ownership
from clawgym.common.fsutil import atomic_write_text
from clawgym.common.savedir import SUPERVISOR_LOG_RELPATH, SUPERVISOR_RELPATH, USER_STOP_RELPATH

#: The backends whose runs a supervisor beside the launch follows (a Ray head clawgym starts, an
#: existing cluster). SLURM's and KubeRay's runs are supervised where they run: the batch script,
#: the RayJob's retry policy.
SUPERVISED_BACKENDS = ("local", "existing")


def record_path(save_dir: str | os.PathLike) -> Path:
    return Path(save_dir) / SUPERVISOR_RELPATH


def log_path(save_dir: str | os.PathLike) -> Path:
    return Path(save_dir) / SUPERVISOR_LOG_RELPATH


def user_stop_path(save_dir: str | os.PathLike) -> Path:
    return Path(save_dir) / USER_STOP_RELPATH


def read_record(save_dir: str | os.PathLike) -> Dict[str, Any]:
    try:
        data = json.loads(record_path(save_dir).read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def write_record(save_dir: str | os.PathLike, data: Mapping[str, Any]) -> None:
    atomic_write_text(record_path(save_dir), json.dumps(dict(data), indent=2, sort_keys=True) + "\n")


def update_record(save_dir: str | os.PathLike, **changes: Any) -> Dict[str, Any]:
    data = read_record(save_dir)
    data.update(changes)
    write_record(save_dir, data)
    return data


def alive(record: Mapping[str, Any]) -> bool:
    """The recorded supervisor process still runs (pid and start time both match)."""
    return bool(record.get("pid")) and ownership.process_alive(record)


def running(save_dir: str | os.PathLike) -> Optional[Dict[str, Any]]:
    """The record of the save dir's supervisor while it runs, else None."""
    rec = read_record(save_dir)
    child = _CHILDREN.get(int(rec.get("pid") or 0))
    if child is not None and child.poll() is not None:
        _CHILDREN.pop(child.pid, None)
    return rec if alive(rec) else None


class AlreadySupervised(Exception):
    """A supervisor runs for that save dir already; ``str()`` names it."""


def spawn(save_dir: str | os.PathLike, environ: Mapping[str, str]) -> Dict[str, Any]:
    """Start the save dir's supervisor, detached; its record (id, pid, create_time, save_dir).

    The job must be submitted already (its submission is the newest snapshot's ``submitted.json``).
    Raises :class:`AlreadySupervised` while another supervisor of that save dir runs."""
    save = Path(save_dir).resolve()
    other = running(save)
    if other is not None:
        raise AlreadySupervised(f"the supervisor pid {other['pid']} of {save} still runs (its record: "
                                f"{record_path(save)})")
    try:
        user_stop_path(save).unlink()  # a new launch: an earlier user's stop is history
    except FileNotFoundError:
        pass
    sid = uuid.uuid4().hex[:12]
    env = dict(environ)
    env[ownership.SUPERVISOR_ENV] = sid
    env.setdefault("PYTHONUNBUFFERED", "1")
    # The clawgym this launcher runs: the supervisor and its resumes import the same code.
    root = str(Path(__file__).resolve().parents[2])
    env["PYTHONPATH"] = os.pathsep.join([root, *[p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]])
    log = log_path(save)
    log.parent.mkdir(parents=True, exist_ok=True)
    from clawgym.snapshot.attempts import read_attempts

    # Where this supervisor's part of the log starts, and the number its first attempt will get.
    offset = log.stat().st_size if log.exists() else 0
    first_attempt = len(read_attempts(save).attempts) + 1
    with open(log, "a", encoding="utf-8") as out:
        proc = subprocess.Popen([sys.executable, "-m", "clawgym.supervisor", str(save), "--id", sid],
                                stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT, env=env,
                                cwd=str(save), start_new_session=True, close_fds=True)
    created = ownership.process_start(proc.pid) or 0.0
    rec = {"id": sid, "pid": proc.pid, "create_time": created, "save_dir": str(save), "started": time.time(),
           "status": "running", "exit_code": None, "log": str(log), "log_offset": offset,
           "first_attempt": first_attempt}
    write_record(save, rec)
    ownership.add_supervisor({k: rec[k] for k in ("id", "pid", "create_time", "save_dir")})
    # Kept to reap it when it ends while this launcher runs (its exit status is in its record).
    _CHILDREN[proc.pid] = proc
    return rec


#: Supervisors this process started, by pid (reaped by :func:`running` once they end).
_CHILDREN: Dict[int, "subprocess.Popen[bytes]"] = {}


def request_stop(save_dir: str | os.PathLike, by: str = "user", why: str = "",
                 slurm_job: Optional[str] = None) -> None:
    """Record that the run is stopped for good (never restarted); what the runner's ``user_stopped`` reads.
    ``slurm_job``: the SLURM job the stop is for (``clawgym jobs stop slurm:<id>``): the supervisor in that
    job's allocation honours only a stop naming its own job (an earlier launch's stop is history)."""
    data: Dict[str, Any] = {"by": by, "why": why, "at": time.time(), "pid": os.getpid()}
    if slurm_job is not None:
        data["slurm_job"] = str(slurm_job)
    atomic_write_text(user_stop_path(save_dir), json.dumps(data) + "\n")


def stop_requested(save_dir: str | os.PathLike) -> Optional[Dict[str, Any]]:
    try:
        data = json.loads(user_stop_path(save_dir).read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else {"by": "user"}


def signal_stop(save_dir: str | os.PathLike, *, by: str = "user", why: str = "") -> bool:
    """Record a stop for good (never restarted) and signal the save dir's supervisor (pid and start
    time verified); False when no supervisor runs."""
    request_stop(save_dir, by, why)
    rec = running(save_dir)
    if rec is None:
        return False
    try:
        os.kill(int(rec["pid"]), signal.SIGTERM)
    except ProcessLookupError:
        return False
    return True


def stop_for_good(save_dir: str | os.PathLike, *, by: str = "user", why: str = "",
                  wait_s: float = 90.0) -> Optional[int]:
    """Stop a supervised run for good: :func:`signal_stop`, then wait until its supervisor has
    stopped the job and ended; its exit status (None: it did not end within ``wait_s``, or none ran
    and none recorded one)."""
    if not signal_stop(save_dir, by=by, why=why):
        return read_record(save_dir).get("exit_code")
    return wait(save_dir, timeout=wait_s)


def wait(save_dir: str | os.PathLike, timeout: Optional[float] = None, poll: float = 0.3) -> Optional[int]:
    """Wait for the save dir's supervisor to end; its recorded exit status (None: still running)."""
    deadline = None if timeout is None else time.time() + timeout
    while running(save_dir) is not None:
        if deadline is not None and time.time() > deadline:
            return None
        time.sleep(poll)
    return read_record(save_dir).get("exit_code")
