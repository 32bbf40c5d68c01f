"""``python -m clawgym.supervisor <save dir> --id ID``: one run's supervisor, beside its launch.

Started by the pipeline right after the job's submission (:mod:`clawgym.supervisor.process`), it
reads what to follow from the save dir: the recorded config (the newest snapshot's resolved config)
and the running job (that snapshot's ``submitted.json``: submission id and dashboard address). It
then runs :func:`clawgym.supervisor.loop.supervise` with a :class:`RayJobRunner` whose restarts are
resumes: ``python -m clawgym resume <save dir>`` run as a child with ``CLAWGYM_SUPERVISOR_ID`` set
(that launch submits detached, starts no supervisor, and may use the save dir the supervised launch
holds), after which the new submission is read from the newest snapshot, as a person's resume
would leave it. Each attempt's Ray job logs are copied, as they come, into
``<save>/clawgym/attempt-<n>.log``: the file the hang monitor watches and the classifier's lines.

Its exit status (clawgym.common.exit_codes: 0 finished, 130 stopped by a user, 1 else) and its end
go into ``<save>/clawgym/supervisor.json``; the foreground launcher, if still there, exits with it.
SIGTERM is a stop for good (the job is stopped, never restarted); SIGHUP is ignored.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any, Dict, List, Mapping, Optional, Tuple

from clawgym.common.exit_codes import FAILED, REFUSED
from clawgym.common.savedir import ATTEMPT_LOG_PATTERN, SNAPSHOTS_RELPATH, SUBMITTED_FILE
from clawgym.supervisor import process
from clawgym.supervisor.ray_runner import RayJobRunner
from clawgym.supervisor.resume_point import ResumePoint

#: How long a restart's ``clawgym resume`` may take (settle, preflight, snapshot, submit).
RESUME_TIMEOUT_S = 900.0


def say(text: str) -> None:
    stamp = time.strftime("%H:%M:%S")
    for line in str(text).splitlines() or [""]:
        sys.stdout.write(f"{stamp} {line}\n")
    sys.stdout.flush()


def newest_submission(save: Path) -> Tuple[Optional[Path], Dict[str, Any]]:
    """(the newest submitted snapshot dir, its submitted.json) of a save dir."""
    from clawgym.snapshot.read import snapshot_dirs

    for snap in reversed(snapshot_dirs(save)):
        path = snap / SUBMITTED_FILE
        if path.is_file():
            try:
                return snap, json.loads(path.read_text())
            except (OSError, ValueError):
                continue
    return None, {}


def newest_rollout(folder: Optional[Path]) -> Optional[int]:
    """The newest rollout step in a run's events (``rollout/*`` keys, as clawgym runs reads them)."""
    if folder is None or not folder.is_dir():
        return None
    try:
        from clawgym.runs.events import read_scalars

        scalars = read_scalars(folder)
    except Exception:  # noqa: BLE001 - events being written: none this poll
        return None
    steps = [p.step for tag, points in scalars.items() if tag.startswith("rollout/") for p in points]
    return max(steps) if steps else None


class SupervisedRayRunner(RayJobRunner):
    """A :class:`RayJobRunner` that also copies each attempt's Ray job logs into a file of the save
    dir (the hang monitor's ``log_file``) and reads the attempt's last rollout from its events."""

    def __init__(self, save: Path, address: str, backend: str, *, lost_contact_s: float, **room: Any) -> None:
        self.save = save
        self._logs: Dict[str, Path] = {}
        self._followers: Dict[str, threading.Thread] = {}
        self._events: Dict[str, Optional[Path]] = {}
        self.current: Optional[str] = None
        # The local head this supervisor started in place of a lost one (its record), while it owns it.
        self.head: Any = None
        super().__init__(address, self._resume, backend=backend, last_rollout=self._last_rollout,
                         user_stopped=lambda sub: process.stop_requested(self.save) is not None,
                         lost_contact_s=lost_contact_s, head_lost=self._why_lost,
                         **room)  # room: RayJobRunner's wait for a lost node

    def _why_lost(self) -> Optional[str]:
        """Why the local head the job runs on is lost for good (its recorded GCS or raylet is gone);
        None elsewhere: an existing cluster's head is not ours to judge, its silence decides."""
        if self.backend != "local" or not self.address:
            return None
        from clawgym.backends.head.lost import why_lost

        return why_lost(self.address)

    # ------------------------------------------------------------ attempts

    def adopt(self, sub: str, snap: Optional[Path]) -> None:
        """Follow ``sub`` (submitted from snapshot ``snap``) as the current attempt."""
        self.current = sub
        self._events[sub] = self._events_folder(snap, sub)
        from clawgym.snapshot.attempts import read_attempts

        # Called before the loop records the attempt: it will be the record's next one.
        n = len(read_attempts(self.save).attempts) + 1
        path = self.save / ATTEMPT_LOG_PATTERN.format(number=n)
        self._logs[sub] = path
        t = threading.Thread(target=self._copy_logs, args=(sub, path), daemon=True, name=f"clawgym-log-{sub}")
        self._followers[sub] = t
        t.start()

    def _events_folder(self, snap: Optional[Path], sub: str) -> Optional[Path]:
        from clawgym.plan.build import TENSORBOARD_DIR_ENV

        try:
            plan = json.loads((snap / "launch_plan.json").read_text()) if snap else {}
        except (OSError, ValueError):
            plan = {}
        folder = ((plan.get("runtime_env") or {}).get("env_vars") or {}).get(TENSORBOARD_DIR_ENV)
        return Path(folder) if folder else self.save / "tensorboard" / sub

    def _copy_logs(self, sub: str, path: Path) -> None:
        from clawgym.common.secrets import env_secrets
        from clawgym.launch.rayjob import JobHandle

        handle = JobHandle(self.address, sub, None, redact=list(env_secrets().values()), log_file=str(path))
        try:
            # A head known dead ends the copy at once: the classifier waits for its end (evidence()).
            handle.follow(echo=False, stop_on_interrupt=False, lost_contact_after=self.lost_contact_s,
                          say=lambda text: None, handed_over=self._why_lost)
        except Exception as exc:  # noqa: BLE001 - the log copy is a help, never the supervisor's end
            say(f"[clawgym] copying the logs of {sub} stopped: {exc}")

    def log_file(self, sub: str) -> Optional[Path]:
        return self._logs.get(sub)

    def _last_rollout(self) -> Optional[int]:
        return newest_rollout(self._events.get(self.current or ""))

    def evidence(self, sub: str):
        t = self._followers.get(sub)
        if t is not None:
            t.join(timeout=10)  # the log's end is the classifier's evidence
        self.stop_watching()  # stamps what the ended job saved, then stops
        return super().evidence(sub)

    # ------------------------------------------------------------ restarts

    def _resume(self, point: ResumePoint) -> str:
        """``clawgym resume <save dir>`` as a person would type it (submitted detached, no second
        supervisor: CLAWGYM_SUPERVISOR_ID is in our environment), then its submission."""
        before, _ = newest_submission(self.save)
        from clawgym.launch.rayjob import dashboard_responds

        # A local head that no longer answers is replaced before the restart (started here, owned
        # here); the restart's `clawgym resume` joins it as any launch with the same settings would.
        head = self._replace_head() if self.backend == "local" and not dashboard_responds(self.address) else None
        # After an OOM the resume point carries the layout with more headroom (supervisor/oom.py).
        overrides = [*point.overrides, *(head[1] if head else [])]
        argv = [sys.executable, "-m", "clawgym", "resume", str(self.save), *overrides]
        say(f"[clawgym] running: clawgym resume {' '.join([str(self.save), *overrides])}")
        try:
            res = subprocess.run(argv, stdin=subprocess.DEVNULL, stdout=sys.stdout, stderr=subprocess.STDOUT,
                                 cwd=str(self.save), timeout=RESUME_TIMEOUT_S)
        finally:
            if head is not None:
                self._head_up(head[0])
        snap, sub = newest_submission(self.save)
        if res.returncode != 0 or snap is None or snap == before or not sub.get("submission_id"):
            raise ResumeFailed(f"`clawgym resume {self.save}` exited {res.returncode} without a new submission "
                               f"(its output is above in {process.log_path(self.save)})")
        self.address = str(sub.get("address") or self.address)
        self._handles.clear()
        self.adopt(str(sub["submission_id"]), snap)
        # The restart was submitted detached: its checkpoints are stamped with its snapshot here.
        self._watch(snap)
        return str(sub["submission_id"])

    # ------------------------------------------------------------ a lost local head

    def _replace_head(self) -> Tuple[Any, List[str]]:
        """Clear the lost head away and begin its replacement, owned by this supervisor; (the head's
        start running in the background, the overrides the restart needs). Raises ResumeFailed."""
        from clawgym.backends.head import lost
        from clawgym.backends.head.records import HeadError

        old = lost.recorded_head(self.address)
        try:
            if old is not None:
                if not lost.why_lost(self.address):
                    # Silent for ray.lost_contact_s with its GCS and raylet still running: never on a guess.
                    raise HeadError(f"the Ray head at {self.address} has not answered for {self.lost_contact_s:.0f}s "
                                    "(ray.lost_contact_s) but its GCS and raylet still run: it is never stopped on a "
                                    f"guess\n  fix: stop it (clawgym jobs stop-head --address {self.address} --force), "
                                    f"then `clawgym resume {self.save}`")
                t0 = time.time()
                n = lost.clear(old, say=say)
                say(f"[clawgym] the lost Ray head at {self.address} is gone"
                    + (f" ({n} processes of it stopped in {time.time() - t0:.1f}s)" if n else "")
                    + f"; its record {old.path} removed")
            if self.head is not None and (old is None or old.marker == self.head.marker):
                self.head = None  # the head this supervisor started was the one lost
            _, snap_config = _newest_config(self.save)
            start, overrides = lost.begin_replacement(snap_config, os.environ)
        except HeadError as err:
            raise ResumeFailed(str(err)) from None
        # Owned from its record on (written before `ray start` ran: this process is its only user).
        head = {"dashboard_address": start.address, "marker": start.marker, "dashboard_port": start.port,
                "started": start.start}
        # `head`: the one this supervisor owns now; `heads_started`: every one it started (what it
        # must have left nothing of at its end).
        started = list(process.read_record(self.save).get("heads_started") or []) + [head]
        process.update_record(self.save, head=head, heads_started=started)
        ports = f" on other ports ({' '.join(overrides)}: the recorded ones are taken)" if overrides else ""
        say(f"[clawgym] starting a new local Ray head at {start.address}{ports}; this supervisor (pid "
            f"{os.getpid()}) owns it and ends it when the run ends, as the launch's own head would be")
        done: Dict[str, Any] = {}

        def finish() -> None:
            try:
                # Recorded as started the moment its dashboard answers: the restart joins it then.
                done["record"] = start.finish(lambda address: None)
            except BaseException as exc:  # noqa: BLE001 - reported once the restart is back
                done["error"] = exc

        thread = threading.Thread(target=finish, daemon=True, name="clawgym-new-head")
        thread.start()
        return (thread, done, start), overrides

    def _head_up(self, begun: Tuple[threading.Thread, Dict[str, Any], Any]) -> None:
        thread, done, start = begun
        thread.join()
        if "error" in done:
            process.update_record(self.save, head=None)
            raise ResumeFailed(f"the new local Ray head at {start.address} did not start: {done['error']}")
        self.head = done["record"]
        say(f"[clawgym] the new local Ray head at {self.head.dashboard_address} is up (GCS "
            f"{self.head.gcs_address}, {len(self.head.processes)} processes recorded in {self.head.path})")

    def release_head(self, config: Mapping[str, Any], rc: int) -> None:
        """At the run's end: the head this supervisor started ends as the launch's own head would
        have (pipeline ``_close``): kept for a detached launch and for ray.keep_head=true (unless a
        person stopped the run), stopped otherwise."""
        head, self.head = self.head, None
        if head is None:
            return
        from clawgym.backends.head import lost
        from clawgym.common.exit_codes import INTERRUPTED

        ray = config.get("ray") or {}
        if ray.get("detach"):
            keep, reason = True, "ray.detach=true: a detached run's head is kept"
        else:
            keep, reason = bool(ray.get("keep_head")) and rc != INTERRUPTED, "ray.keep_head=true"
        try:
            lost.release(head, keep=keep, reason=reason, say=say)
        finally:
            process.update_record(self.save, head=None)

    def _watch(self, snap: Path) -> None:
        from types import SimpleNamespace

        from clawgym.snapshot.checkpoints import start_checkpoint_watcher

        self.stop_watching()
        self._watcher = start_checkpoint_watcher(SimpleNamespace(save_dir=str(self.save)), str(snap))

    def stop_watching(self) -> None:
        watcher, self._watcher = getattr(self, "_watcher", None), None
        if watcher is not None:
            watcher.stop()


class ResumeFailed(Exception):
    pass


def _newest_config(save: Path) -> Tuple[Optional[Path], Dict[str, Any]]:
    """(the newest submitted snapshot, its resolved config): what a restart resumes."""
    from clawgym.snapshot.read import load_snapshot

    snap, _ = newest_submission(save)
    return snap, (load_snapshot(snap).config if snap is not None else {})


def main(argv: Optional[list] = None) -> int:
    p = argparse.ArgumentParser(prog="python -m clawgym.supervisor", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("save_dir")
    p.add_argument("--id", default="", help="this supervisor's id (CLAWGYM_SUPERVISOR_ID)")
    args = p.parse_args(argv)
    save = Path(args.save_dir).resolve()
    from clawgym.common import ownership

    if args.id:
        os.environ[ownership.SUPERVISOR_ENV] = args.id
    import fcntl

    lock_path = save / "clawgym" / "supervisor.lock"
    lock_path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(lock_path, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        say(f"[clawgym] another supervisor holds {lock_path}: this one ends (one supervisor per save dir)")
        return REFUSED
    stop = threading.Event()

    def on_term(signum, frame):  # a stop for good, never a restart
        if process.stop_requested(save) is None:
            process.request_stop(save, "user", f"signal {signal.Signals(signum).name} to the supervisor")
        stop.set()

    signal.signal(signal.SIGTERM, on_term)
    signal.signal(signal.SIGINT, on_term)
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    rc = FAILED
    try:
        rc = _supervise(save, stop)
    except Exception as exc:  # noqa: BLE001 - said and recorded: the launcher exits with our status
        from clawgym.common.secrets import redact

        say(f"[clawgym] the supervisor stopped: {redact(str(exc))}")
        rc = FAILED
        from clawgym.snapshot.attempts import read_attempts

        rec = read_attempts(save)
        if rec.attempts and not rec.stopped:
            rec.stop("supervisor", f"the supervisor stopped: {redact(str(exc))}",
                     f"see {process.log_path(save)}; then `clawgym resume {save}`")
    finally:
        process.update_record(save, status="ended", exit_code=rc, ended=time.time(), pid_ended=os.getpid())
        os.close(fd)
    return rc


def _supervise(save: Path, stop: threading.Event) -> int:
    from clawgym.plan.allocation import backend_name
    from clawgym.snapshot.attempts import read_attempts
    from clawgym.snapshot.read import load_snapshot
    from clawgym.supervisor.loop import supervise

    snap, sub = newest_submission(save)
    if snap is None or not sub.get("submission_id"):
        say(f"[clawgym] no submitted launch in {save / SNAPSHOTS_RELPATH}: nothing to supervise")
        return FAILED
    config = load_snapshot(snap).config
    backend = backend_name(config)
    address = str(sub.get("address") or "")
    lost = float((config.get("ray") or {}).get("lost_contact_s") or 300.0)
    restart = config.get("restart") or {}
    runner = SupervisedRayRunner(save, address, backend, lost_contact_s=lost, gpus_needed=_gpus_needed(config),
                                 node_wait_s=float(restart.get("node_wait_s", 1800.0)),
                                 poll_s=float(restart.get("poll_s", 10.0)), node_settle_s=_health_check_s(config))
    first = str(sub["submission_id"])
    runner.adopt(first, snap)
    say(f"[clawgym] supervising {first} on {address} ({backend}); restarts at most "
        f"{restart.get('max_attempts', 3)}; pid {os.getpid()}; log {process.log_path(save)}")

    def sleep(seconds: float) -> None:
        stop.wait(seconds)

    try:
        rc = supervise(save, config, runner, first, say=say, sleep=sleep)
    except BaseException:
        runner.release_head(config, FAILED)
        raise
    runner.release_head(config, rc)
    stopped = process.stop_requested(save)
    if stopped and stopped.get("by") not in (None, "user"):
        rec = read_attempts(save)
        if rec.stopped:  # a tuner's prune: recorded as such (never restarted either)
            rec.stop(str(stopped["by"]), str(stopped.get("why") or rec.stopped.get("why")))
    return rc


def _gpus_needed(config: Dict[str, Any]) -> Optional[float]:
    """The GPUs the recorded run holds (what the capacity preflight asks of the cluster); None when the
    recorded config cannot say (a lost node is then not waited for: the resume's preflight decides)."""
    from clawgym.plan.build import gpus_required

    try:
        return float(gpus_required(config))
    except Exception:  # noqa: BLE001 - an older snapshot's config: no wait rather than no supervisor
        return None


def _health_check_s(config: Dict[str, Any]) -> float:
    """How long Ray's GCS takes at most to give a silent node up, by the run's ray.health_check_* (the
    values clawgym's heads get; on a cluster of your own, the guess that it was started alike)."""
    ray = config.get("ray") or {}
    try:
        return (float(ray.get("health_check_period_ms", 5000)) * float(ray.get("health_check_failure_threshold", 20))
                + float(ray.get("health_check_timeout_ms", 30000))) / 1000.0
    except (TypeError, ValueError):
        return 0.0
