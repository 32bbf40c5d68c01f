"""A real launch of one plan: preflight, cluster, Ray job submission, logs, exit status.

``launch_single(cfg, plan)`` is what ``python train.py`` runs when not dry-running:

1. ``prepare``: preflight checks, cleanup of what an earlier launch left behind, and
   the launch snapshot, all before anything starts.
2. ``Cluster.connect_or_start``: the existing cluster at ``ray.address``, or a local
   head that clawgym starts (or reuses, when an earlier launch kept one with the same
   settings) with the secrets in the head's process environment, which is how they
   reach the job without being stored anywhere.
3. ``submit``: ``JobSubmissionClient.submit_job`` with exactly the plan's entrypoint,
   working dir and runtime env.
4. ``JobHandle.follow``: the job's output to the console and ``plan.log_file``; the
   exit status is the job's (0 succeeded, 1 failed, 130 stopped). Ctrl-C stops the job.
5. ``Cluster.close``: a head started here is stopped unless it is to be kept.

The Hydra launcher plugin reuses the pieces for sweeps; while it runs one it installs
a session (``set_active_session``) and ``launch_single`` hands each job to it.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import os
import queue
import shlex
import signal
import sys
import threading
import time
from pathlib import Path
from typing import Any, Dict, Iterator, List, Mapping, Optional, Sequence

from clawgym import ray_head
from clawgym.plan import LaunchPlan

#: Job states after which nothing changes.
TERMINAL = ("SUCCEEDED", "FAILED", "STOPPED")
#: Exit status of a run that was interrupted or stopped (128 + SIGINT, as shells report Ctrl-C).
EXIT_STOPPED = 130


class LaunchError(Exception):
    """A launch could not proceed; the message names the cause and the fix."""


# ---------------------------------------------------------------- sweep session hook

_ACTIVE_SESSION: Any = None


def active_session() -> Any:
    """The sweep session the launcher plugin installed, or None outside a sweep."""
    return _ACTIVE_SESSION


def set_active_session(obj: Any) -> None:
    """Install (or, with None, remove) the session that ``launch_single`` delegates to."""
    global _ACTIVE_SESSION
    _ACTIVE_SESSION = obj


# ---------------------------------------------------------------- secrets

def resolve_secrets(plan: LaunchPlan, environ: Mapping[str, str]) -> Dict[str, str]:
    """Target variable -> value, read from the first set variable named in ``plan.secret_env``.

    The values live only in memory (and in the environment of a head clawgym starts).
    """
    out: Dict[str, str] = {}
    for target, sources in plan.secret_env.items():
        for name in sources:
            value = environ.get(name)
            if value:
                out[target] = value
                break
    return out


# ---------------------------------------------------------------- signals

@contextlib.contextmanager
def _sigterm_as_interrupt() -> Iterator[None]:
    """Treat SIGTERM like Ctrl-C while a job runs, so it is stopped rather than orphaned."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def handler(signum, frame):
        raise KeyboardInterrupt

    old = signal.signal(signal.SIGTERM, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, old)


@contextlib.contextmanager
def _uninterruptible() -> Iterator[None]:
    """Defer Ctrl-C/SIGTERM while stopping what we started, so nothing is left half-stopped."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    pending: List[int] = []
    handler = lambda signum, frame: pending.append(signum)  # noqa: E731
    old_int = signal.signal(signal.SIGINT, handler)
    old_term = signal.signal(signal.SIGTERM, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, old_int)
        signal.signal(signal.SIGTERM, old_term)
    if pending:
        print("[clawgym] interrupt received while cleaning up; cleanup finished first", file=sys.stderr, flush=True)


# ---------------------------------------------------------------- cluster

def _warm_ray_import() -> None:
    """Import Ray's job SDK (about a second) while ``ray start`` runs anyway."""
    import ray.job_submission  # noqa: F401


def _client(address: str):
    from ray.job_submission import JobSubmissionClient

    try:
        return JobSubmissionClient(address)
    except Exception as exc:  # Ray raises ConnectionError / RuntimeError / ValueError variants
        raise LaunchError(
            f"no Ray dashboard answers at {address} ({type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''})\n"
            f"  fix: start the cluster, or correct ray.address (the dashboard's http address, e.g. http://head:8265)"
        ) from exc


class Cluster:
    """The Ray cluster a launch submits to, and whether clawgym started its head."""

    def __init__(self, address: str, started_by_us: bool, record: Optional[ray_head.HeadRecord] = None):
        # Dashboard http address used with JobSubmissionClient.
        self.address = address
        # True when this process started the head (then ``close`` may stop it).
        self.started_by_us = started_by_us
        # The head's record when clawgym started it (now or in an earlier launch).
        self.record = record
        self._closed = False

    def __repr__(self) -> str:
        return f"Cluster(address={self.address!r}, started_by_us={self.started_by_us})"

    @classmethod
    def connect_or_start(cls, plan: LaunchPlan, *, secrets: Mapping[str, str]) -> "Cluster":
        """Connect to ``plan.address``, or reuse / start the local head the plan describes."""
        if plan.ray_start is None:
            _client(plan.address)  # reachable, or a clear error
            return cls(plan.address, started_by_us=False)
        rec = ray_head.settle(plan.ray_start, plan.ray_start_env, secrets)
        if rec is not None:
            print(f"[clawgym] reusing the Ray head clawgym started earlier at {rec.dashboard_address} (it keeps "
                  f"running; stop it with: clawgym jobs stop-head --address {rec.dashboard_address})", flush=True)
            return cls(rec.dashboard_address, started_by_us=False, record=rec)
        rec = ray_head.start_head(plan.ray_start, plan.ray_start_env, secrets=secrets,
                                  while_waiting=_warm_ray_import)
        return cls(rec.dashboard_address, started_by_us=True, record=rec)

    def total_gpus(self) -> float:
        """GPUs declared by the cluster's alive nodes."""
        return ray_head.cluster_gpus(self.address)

    def close(self, *, keep_head: bool, ignore_jobs: Sequence[str] = ()) -> None:
        """Stop the head if this process started it, it is not to be kept, and no job runs on it.

        Jobs in ``ignore_jobs`` (ours, already asked to stop) do not keep the head alive.
        """
        if self._closed:
            return
        self._closed = True
        if not self.started_by_us or self.record is None:
            return
        if keep_head:
            print(f"[clawgym] keeping the Ray head at {self.address} "
                  f"(stop it later: clawgym jobs stop-head --address {self.address})", flush=True)
            return
        with _uninterruptible():
            try:
                busy = [j for j in ray_head.running_jobs(self.address) if j not in ignore_jobs]
            except Exception:
                busy = []
            if busy:
                print(f"[clawgym] keeping the Ray head at {self.address}: job(s) still running there: "
                      f"{', '.join(busy)}", flush=True)
                return
            ray_head.stop_head(self.record)


# ---------------------------------------------------------------- jobs

class JobHandle:
    """One submitted Ray job."""

    def __init__(self, address: str, submission_id: str, plan: Optional[LaunchPlan], *,
                 redact: Optional[List[str]] = None, log_file: Optional[str] = None):
        self.address = address
        # Ray submission id (recorded in the launch snapshot and printed).
        self.submission_id = submission_id
        # Where ``follow`` tees the output.
        self.log_file = log_file if log_file is not None else (plan.log_file if plan is not None else None)
        # The plan it was submitted from (None when attached later by id).
        self.plan = plan
        # Secret values masked in streamed output; memory only.
        self._redact = [v for v in (redact or []) if v]
        self._client_obj = None

    @property
    def _client(self):
        if self._client_obj is None:
            self._client_obj = _client(self.address)
        return self._client_obj

    @classmethod
    def attach(cls, address: str, submission_id: str, *, log_file: Optional[str] = None) -> "JobHandle":
        """A handle on a job submitted earlier (``clawgym jobs``)."""
        return cls(address, submission_id, None, log_file=log_file)

    def status(self) -> str:
        return str(self._client.get_job_status(self.submission_id).value)

    def message(self) -> str:
        try:
            return self._client.get_job_info(self.submission_id).message or ""
        except Exception:
            return ""

    def wait(self, timeout: Optional[float] = None, poll: float = 0.5) -> str:
        """Block until the job is terminal (or timeout); returns the last status."""
        deadline = None if timeout is None else time.time() + timeout
        while True:
            st = self.status()
            if st in TERMINAL or (deadline is not None and time.time() > deadline):
                return st
            time.sleep(poll)

    def stop(self, *, timeout: float = 60.0) -> str:
        """Ask Ray to stop the job and wait until it has (Ray sends SIGTERM, then SIGKILL)."""
        with _uninterruptible():
            try:
                self._client.stop_job(self.submission_id)
            except Exception:
                pass  # already finished
            st = self.wait(timeout=timeout, poll=0.3)
            if st not in TERMINAL:
                print(f"[clawgym] job {self.submission_id} did not stop within {timeout:.0f}s (status {st})",
                      file=sys.stderr, flush=True)
            return st

    def _mask(self, text: str) -> str:
        for value in self._redact:
            text = text.replace(value, "***")
        return text

    def _tail(self, out: "queue.Queue[Any]") -> None:
        """Thread body: push log chunks from Ray's log stream onto ``out``, then None."""
        try:
            async def run() -> None:
                async for chunk in self._client.tail_job_logs(self.submission_id):
                    out.put(chunk)

            asyncio.run(run())
        except Exception:
            pass  # follow() notices the stream ended early and polls instead
        finally:
            out.put(None)

    def _poll(self, out: "queue.Queue[Any]", start: int, stop: threading.Event) -> None:
        """Thread body, fallback: poll the whole log and push what is past ``start``."""
        seen = start
        while not stop.is_set():
            try:
                text = self._client.get_job_logs(self.submission_id)
                if len(text) > seen:
                    out.put(text[seen:])
                    seen = len(text)
            except Exception:
                pass
            stop.wait(2.0)

    def _status_or_none(self) -> Optional[str]:
        try:
            return self.status()
        except Exception:
            return None

    def follow(self, *, echo: bool = True, lost_contact_after: float = 300.0, stop_on_interrupt: bool = True,
               log_mode: str = "a") -> int:
        """Stream the job's output to the console and ``plan.log_file`` until it ends.

        Returns 0 (succeeded), 1 (failed, or the cluster stopped answering for
        ``lost_contact_after`` seconds; the log path is printed) or 130 (stopped, or
        Ctrl-C here, which stops the job first unless ``stop_on_interrupt`` is false).
        Ray streams the log from its start: ``log_mode="w"`` rewrites the log file.
        """
        log = None
        if self.log_file:
            Path(self.log_file).parent.mkdir(parents=True, exist_ok=True)
            log = open(self.log_file, log_mode, encoding="utf-8")
            sys.stdout.write(f"[clawgym] training log: {self.log_file}\n")  # one write: sweeps print from threads
            sys.stdout.flush()
        chunks: "queue.Queue[Any]" = queue.Queue()
        threading.Thread(target=self._tail, args=(chunks,), daemon=True, name="clawgym-log-tail").start()
        stop_polling = threading.Event()
        emitted = 0  # characters of the job's log shown so far (before masking)
        status: Optional[str] = None

        def show(text: str) -> None:
            nonlocal emitted
            emitted += len(text)
            self._emit(text, echo, log)

        try:
            streaming, polling = True, False
            last_check, last_contact = 0.0, time.time()
            while True:
                try:
                    chunk = chunks.get(timeout=0.5)
                except queue.Empty:
                    chunk = ""
                if chunk is None:
                    streaming = False
                elif chunk:
                    show(chunk)
                if streaming and time.time() - last_check < 2.0:
                    continue
                last_check = time.time()
                status = self._status_or_none()
                if status is None:
                    if time.time() - last_contact > lost_contact_after:
                        break
                else:
                    last_contact = time.time()
                if status in TERMINAL and not streaming:
                    if polling:
                        # Drain what the poller queued, then fetch the end of the log once more.
                        stop_polling.set()
                        while True:
                            try:
                                pending = chunks.get_nowait()
                            except queue.Empty:
                                break
                            if pending:
                                show(pending)
                        try:
                            text = self._client.get_job_logs(self.submission_id)
                            show(text[emitted:])
                        except Exception:
                            pass
                    break
                if not streaming and not polling and status is not None:
                    # The log stream ended while the job runs on (e.g. a dashboard restart): poll instead.
                    polling = True
                    threading.Thread(target=self._poll, args=(chunks, emitted, stop_polling), daemon=True,
                                     name="clawgym-log-poll").start()
                if not streaming:
                    time.sleep(0.3)
        except KeyboardInterrupt:
            stop_polling.set()
            if not stop_on_interrupt:
                print(f"\n[clawgym] stopped following; job {self.submission_id} keeps running", file=sys.stderr,
                      flush=True)
                return EXIT_STOPPED
            print(f"\n[clawgym] interrupted: stopping job {self.submission_id} ...", file=sys.stderr, flush=True)
            status = self.stop()
            print(f"[clawgym] job {self.submission_id} {status.lower()}", file=sys.stderr, flush=True)
            return EXIT_STOPPED
        finally:
            stop_polling.set()
            if log:
                log.close()
        if status is None:
            print(f"[clawgym] lost contact with the Ray dashboard at {self.address} for {lost_contact_after:.0f}s; "
                  f"the job may still run: clawgym jobs status {self.submission_id} --address {self.address}",
                  file=sys.stderr, flush=True)
            if self.log_file:
                print(f"[clawgym] log: {self.log_file}", file=sys.stderr, flush=True)
            return 1
        if status == "SUCCEEDED":
            print(f"[clawgym] job {self.submission_id} succeeded", flush=True)
            return 0
        if status == "STOPPED":
            print(f"[clawgym] job {self.submission_id} was stopped", file=sys.stderr, flush=True)
            return EXIT_STOPPED
        msg = self._mask(self.message().strip())
        print(f"[clawgym] job {self.submission_id} FAILED" + (f": {msg}" if msg else ""), file=sys.stderr, flush=True)
        if self.log_file:
            print(f"[clawgym] log: {self.log_file}", file=sys.stderr, flush=True)
        return 1

    def _emit(self, text: str, echo: bool, log: Any) -> None:
        if not text:
            return
        text = self._mask(text)
        if echo:
            sys.stdout.write(text)
            sys.stdout.flush()
        if log:
            log.write(text)
            log.flush()


def submit(cluster: Cluster, plan: LaunchPlan, *, secrets: Mapping[str, str], cfg: Any = None) -> JobHandle:
    """Submit the plan's job to the cluster.

    Secrets are added to the runtime env only with an existing cluster and
    ``ray.pass_secrets_in_runtime_env=true`` in ``cfg`` (Ray stores the runtime env in
    the job's metadata, so this is opt-in and warned about). With a head clawgym
    started, the job inherits them from the head's environment.
    """
    runtime_env = copy.deepcopy(plan.runtime_env)
    runtime_env.setdefault("working_dir", plan.working_dir)
    opt_in = bool(cfg is not None and cfg.ray.pass_secrets_in_runtime_env)
    if secrets and plan.ray_start is None:
        if opt_in:
            print(f"[clawgym] WARNING: passing {', '.join(sorted(secrets))} in the job's runtime env "
                  f"(ray.pass_secrets_in_runtime_env=true): Ray keeps the runtime env in the job's metadata, "
                  f"readable by anyone with access to the cluster's dashboard, and writes it in plain text to "
                  f"the cluster's runtime_env_agent.log (<ray temp dir>/session_*/logs/ on the node that runs "
                  f"the job)", file=sys.stderr, flush=True)
            runtime_env.setdefault("env_vars", {}).update(secrets)
        else:
            print(f"[clawgym] note: {', '.join(sorted(secrets))} not passed to the existing cluster; the cluster's "
                  f"environment must provide them (or set ray.pass_secrets_in_runtime_env=true)", flush=True)
    metadata = {
        "clawgym_run_name": plan.run_name,
        "clawgym_save_dir": str(plan.save_dir or ""),
        "clawgym_log_file": str(plan.log_file or ""),
    }
    client = _client(cluster.address)
    try:
        sid = client.submit_job(entrypoint=shlex.join(plan.entrypoint), submission_id=plan.submission_id,
                                runtime_env=runtime_env, metadata=metadata)
    except Exception as exc:
        raise LaunchError(f"Ray refused job {plan.submission_id} at {cluster.address}: {exc}\n"
                          f"  fix: check paths.slime (the job's working dir) and the cluster's state "
                          f"(clawgym jobs list --address {cluster.address})") from exc
    print(f"[clawgym] submitted job {sid} to {cluster.address}", flush=True)
    handle = JobHandle(cluster.address, sid, plan, redact=list(secrets.values()))
    handle._client_obj = client
    return handle


# ---------------------------------------------------------------- preparation

def prepare(cfg: Any, plan: LaunchPlan, *, local_head: bool) -> str:
    """Checks and cleanup before anything starts, then the launch snapshot.

    Raises ``clawgym.preflight.PreflightError`` (with ``.report()``) when a check fails,
    ``clawgym.snapshot.SnapshotError`` when the snapshot cannot be written. Returns the
    snapshot dir.
    """
    from clawgym.preflight import cleanup_leftovers, run_preflight
    from clawgym.snapshot import write_launch_snapshot

    run_preflight(cfg, plan, local_head=local_head)
    cleanup_leftovers(cfg)
    return str(write_launch_snapshot(cfg, plan))


def _start_watcher(plan: LaunchPlan, snapshot: Optional[str]):
    """Stamp the launch snapshot into each checkpoint the job writes while we follow it."""
    from clawgym.snapshot import CheckpointWatcher

    if not plan.save_dir or not snapshot:
        return None
    watcher = CheckpointWatcher(plan.save_dir, snapshot)
    watcher.start()
    return watcher


def _detach_message(handle: JobHandle, cluster: Cluster) -> str:
    sid, addr = handle.submission_id, cluster.address
    lines = [f"[clawgym] job {sid} submitted (detached); it runs on {addr}",
             f"  follow:  clawgym jobs logs {sid} --follow --address {addr}",
             f"  status:  clawgym jobs status {sid} --address {addr}",
             f"  stop:    clawgym jobs stop {sid} --address {addr}"]
    if handle.plan is not None and handle.plan.save_dir:
        # No watcher follows a detached job: checkpoints get their config snapshot this way.
        lines.append(f"  config snapshots into checkpoints: clawgym stamp {handle.plan.save_dir} --follow")
    if cluster.record is not None:
        lines.append(f"  the Ray head keeps running; when done: clawgym jobs stop-head --address {addr}")
    return "\n".join(lines)


def launch_single(cfg: Any, plan: LaunchPlan) -> Any:
    """Launch one plan for real (the task function's path); see the module doc.

    Returns 0 when the job succeeded or was detached; exits with the job's status
    otherwise, so ``python train.py`` reports it. In a sweep, returns what the
    plugin's session returns.
    """
    session = active_session()
    if session is not None:
        return session.submit_job(cfg, plan)
    try:
        rc = _launch(cfg, plan)
    except (LaunchError, ray_head.HeadError) as err:
        from clawgym.secrets import redact

        print(redact(f"clawgym: {err}"), file=sys.stderr, flush=True)
        sys.exit(1)
    except KeyboardInterrupt:
        # Before a head or job existed (later interrupts are handled where they can stop things).
        print("\n[clawgym] interrupted; nothing was left running", file=sys.stderr, flush=True)
        sys.exit(EXIT_STOPPED)
    if rc:
        sys.exit(rc)
    return 0


def _connect_and_submit(plan: LaunchPlan, secrets: Mapping[str, str], cfg: Any):
    """``Cluster.connect_or_start`` then ``submit``; a head started here gets the job as
    soon as its dashboard answers, while ``ray start`` is still finishing."""
    if plan.ray_start is None or ray_head.settle(plan.ray_start, plan.ray_start_env, secrets) is not None:
        cluster = Cluster.connect_or_start(plan, secrets=secrets)
        return cluster, submit(cluster, plan, secrets=secrets, cfg=cfg)
    early: Dict[str, Any] = {}

    def submit_early(address: str) -> None:
        try:
            early["handle"] = submit(Cluster(address, started_by_us=True), plan, secrets=secrets, cfg=cfg)
        except LaunchError as err:
            # Retried once the head is complete; a real problem shows up again there.
            early["error"] = err

    rec = ray_head.start_head(plan.ray_start, plan.ray_start_env, secrets=secrets,
                              while_waiting=_warm_ray_import, on_dashboard=submit_early)
    cluster = Cluster(rec.dashboard_address, started_by_us=True, record=rec)
    handle = early.get("handle")
    if handle is not None:
        return cluster, handle
    try:
        client = _client(cluster.address)
        try:
            client.get_job_info(plan.submission_id)  # the early attempt got as far as registering it
            handle = JobHandle(cluster.address, plan.submission_id, plan, redact=list(secrets.values()))
        except Exception:
            handle = submit(cluster, plan, secrets=secrets, cfg=cfg)
    except BaseException:
        # The caller never got hold of the head: stop it here.
        with _uninterruptible():
            ray_head.stop_head(rec)
        raise
    return cluster, handle


def _launch(cfg: Any, plan: LaunchPlan) -> int:
    secrets = resolve_secrets(plan, os.environ)
    detach = bool(cfg.ray.detach)
    keep = bool(cfg.ray.keep_head) or detach
    reusable = None
    if plan.ray_start is not None:
        # Our own leftovers go first, so the preflight port checks see the machine as the launch will.
        reusable = ray_head.settle(plan.ray_start, plan.ray_start_env, secrets)
    from clawgym.preflight import PreflightError
    from clawgym.snapshot import SnapshotError, discard_unsubmitted, mark_submitted

    try:
        snapshot = prepare(cfg, plan, local_head=plan.ray_start is not None and reusable is None)
    except PreflightError as err:
        # run_preflight already printed the checklist with the failing lines and their fixes.
        from clawgym.preflight.core import failure_line

        sys.stdout.flush()
        print(failure_line(err), file=sys.stderr, flush=True)
        return 2
    except SnapshotError as err:
        print(str(err), file=sys.stderr, flush=True)
        return 2
    cluster: Optional[Cluster] = None
    handle: Optional[JobHandle] = None
    watcher = None
    rc = 1
    with _sigterm_as_interrupt():
        try:
            cluster, handle = _connect_and_submit(plan, secrets, cfg)
            mark_submitted(snapshot, handle.submission_id, address=cluster.address)
            if detach:
                print(_detach_message(handle, cluster), flush=True)
                return 0
            try:
                watcher = _start_watcher(plan, snapshot)
            except Exception as exc:  # the run matters more than the stamps
                print(f"[clawgym] checkpoint watcher not started ({exc}); stamp later with: clawgym stamp "
                      f"{plan.save_dir} --follow", file=sys.stderr, flush=True)
            rc = handle.follow()
        except KeyboardInterrupt:
            print("\n[clawgym] interrupted", file=sys.stderr, flush=True)
            if handle is not None:
                handle.stop()
            rc = EXIT_STOPPED
        finally:
            with _uninterruptible():
                if handle is None:
                    # Stopped before the job was submitted: its snapshot records no launch.
                    discard_unsubmitted(snapshot)
                if watcher is not None:
                    watcher.stop()
                if cluster is not None:
                    cluster.close(keep_head=keep, ignore_jobs=[handle.submission_id] if handle and rc else [])
    return rc
