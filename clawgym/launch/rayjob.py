"""Ray jobs: submit a plan, follow its output, stop it; the signal rules of a launch.

The launch pipeline (:mod:`clawgym.pipeline.pipeline`) and the Ray-based cluster backends
(:mod:`clawgym.backends`) use these pieces; ``clawgym jobs`` attaches to jobs submitted
earlier through :meth:`JobHandle.attach`.

- :func:`submit`: ``JobSubmissionClient.submit_job`` with exactly the plan's entrypoint,
  working dir and runtime env; the job's metadata records its run name, save dir, log
  file, GPUs and ports (so a later launch can check free GPUs and port clashes).
- :meth:`JobHandle.follow`: the job's output to the console and ``plan.log_file``; the exit
  status is the job's (0 succeeded, 1 failed, 130 stopped). A dashboard that stops
  answering is reported at once and retried with a countdown for ``lost_contact_after``
  seconds (``ray.lost_contact_s``), then given up with how to check the job.
- A failed job is reported with the trainer's exit code and the last lines of its log,
  with the log's path (not Ray's 20,000-character tail).
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
from typing import Any, Callable, Dict, Iterator, List, Mapping, Optional, Sequence

from clawgym.plan.build import LaunchPlan

#: Job states after which nothing changes.
TERMINAL = ("SUCCEEDED", "FAILED", "STOPPED")
#: Exit status of a run that was interrupted or stopped (128 + SIGINT, as shells report Ctrl-C).
EXIT_STOPPED = 130


def dashboard_responds(address: str, timeout: float = 2.0) -> bool:
    """The Ray dashboard at ``address`` answers its version endpoint (the Jobs API lives there)."""
    import urllib.error
    import urllib.request

    try:
        with urllib.request.urlopen(f"{address.rstrip('/')}/api/version", timeout=timeout) as resp:
            return resp.status == 200
    except (urllib.error.URLError, OSError, ValueError):
        return False


class LaunchError(Exception):
    """A launch could not proceed; the message names the cause and the fix."""


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

class TerminalLost(BaseException):
    """SIGHUP: the launcher lost its terminal (e.g. an ssh session dropped) while jobs run.

    Not an interrupt: the jobs keep running, as with ``ray.detach=true`` (see
    :mod:`clawgym.pipeline.pipeline`)."""


#: Exit status after a lost terminal (128 + SIGHUP, as shells report it).
EXIT_HANGUP = 129


@contextlib.contextmanager
def sigterm_as_interrupt() -> Iterator[None]:
    """While jobs run: SIGTERM acts as Ctrl-C (stop them rather than orphan them), SIGHUP
    raises :class:`TerminalLost` (they keep running; the terminal is gone, not the user's intent)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def on_term(signum, frame):
        raise KeyboardInterrupt

    def on_hup(signum, frame):
        raise TerminalLost()

    old = signal.signal(signal.SIGTERM, on_term)
    old_hup = signal.signal(signal.SIGHUP, on_hup)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, old)
        signal.signal(signal.SIGHUP, old_hup)


@contextlib.contextmanager
def uninterruptible() -> Iterator[None]:
    """Defer Ctrl-C/SIGTERM/SIGHUP while stopping what we started, so nothing is left half-stopped."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    pending: List[int] = []
    handler = lambda signum, frame: pending.append(signum)  # noqa: E731
    old = {sig: signal.signal(sig, handler) for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)}
    try:
        yield
    finally:
        for sig, h in old.items():
            signal.signal(sig, h)
    if pending and pending != [signal.SIGHUP]:
        print("[clawgym] interrupt received while cleaning up; cleanup finished first", file=sys.stderr, flush=True)


class _SafeStream:
    """A console stream that may have lost its terminal: writes that fail are dropped."""

    def __init__(self, stream: Any) -> None:
        self._stream = stream

    def write(self, text: str) -> int:
        try:
            return self._stream.write(text)
        except (OSError, ValueError):
            return len(text)

    def flush(self) -> None:
        try:
            self._stream.flush()
        except (OSError, ValueError):
            pass

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)


def survive_lost_terminal() -> None:
    """After SIGHUP the terminal may be gone (writes fail with EIO): keep going without it."""
    if not isinstance(sys.stdout, _SafeStream):
        sys.stdout = _SafeStream(sys.stdout)  # type: ignore[assignment]
    if not isinstance(sys.stderr, _SafeStream):
        sys.stderr = _SafeStream(sys.stderr)  # type: ignore[assignment]


# ---------------------------------------------------------------- cluster

def warm_ray_import() -> None:
    """Import Ray's job SDK (about a second) while ``ray start`` runs anyway."""
    import ray.job_submission  # noqa: F401


#: Ray's loggers that print INFO lines of their own (package uploads, websocket closes, "Submitted job")
#: into clawgym's output: packaging.py, dashboard_sdk.py, sdk.py.
RAY_CHATTY_LOGGERS = ("ray._private.runtime_env.packaging", "ray.dashboard.modules.dashboard_sdk",
                      "ray.dashboard.modules.job.sdk")


def quiet_ray_sdk() -> None:
    """Keep Ray's job SDK INFO lines out of clawgym's output (warnings still show). The SDK modules set
    their own level to INFO when imported, so they are imported first."""
    import importlib
    import logging

    for name in RAY_CHATTY_LOGGERS:
        try:
            importlib.import_module(name)
        except ImportError:
            continue
        logging.getLogger(name).setLevel(logging.WARNING)


def jobs_client(address: str):
    from ray.job_submission import JobSubmissionClient

    quiet_ray_sdk()

    try:
        return JobSubmissionClient(address)
    except Exception as exc:  # Ray raises ConnectionError / RuntimeError / ValueError variants
        raise LaunchError(
            f"no Ray dashboard answers at {address} ({type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''})\n"
            f"  fix: start the cluster, or correct ray.address (the dashboard's http address, e.g. http://head:8265)"
        ) from exc


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
        # Ray's terminal status once ``follow`` returned (None: unknown, e.g. contact lost).
        self.final_status: Optional[str] = None
        self._log: Any = None

    @property
    def client(self):
        if self._client_obj is None:
            self._client_obj = jobs_client(self.address)
        return self._client_obj

    @classmethod
    def attach(cls, address: str, submission_id: str, *, log_file: Optional[str] = None) -> "JobHandle":
        """A handle on a job submitted earlier (``clawgym jobs``)."""
        return cls(address, submission_id, None, log_file=log_file)

    def status(self) -> str:
        return str(self.client.get_job_status(self.submission_id).value)

    def message(self) -> str:
        try:
            return self.client.get_job_info(self.submission_id).message or ""
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
        with uninterruptible():
            try:
                self.client.stop_job(self.submission_id)
            except Exception:
                pass  # already finished
            st = self.wait(timeout=timeout, poll=0.3)
            if st not in TERMINAL:
                print(f"[clawgym] job {self.submission_id} did not stop within {timeout:.0f}s (status {st})",
                      file=sys.stderr, flush=True)
            return st

    def stop_interrupted(self) -> int:
        """Ctrl-C on a followed job: say so on stderr, stop it, say how it ended (one wording, whether the
        interrupt came while following the job or a moment before, while the launcher still set it up)."""
        print(f"\n[clawgym] interrupted: stopping job {self.submission_id} ...", file=sys.stderr, flush=True)
        status = self.stop()
        print(f"[clawgym] job {self.submission_id} {str(status).lower()}", file=sys.stderr, flush=True)
        return EXIT_STOPPED

    def _mask(self, text: str) -> str:
        for value in self._redact:
            text = text.replace(value, "***")
        return text

    def _tail(self, out: "queue.Queue[Any]") -> None:
        """Thread body: push log chunks from Ray's log stream onto ``out``, then None."""
        try:
            async def run() -> None:
                async for chunk in self.client.tail_job_logs(self.submission_id):
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
                text = self.client.get_job_logs(self.submission_id)
                if len(text) > seen:
                    out.put(text[seen:])
                    seen = len(text)
            except Exception:
                pass
            stop.wait(2.0)

    def _status_or_none(self) -> Optional[str]:
        # A dashboard that accepts connections but never answers would hang the SDK's call.
        if not dashboard_responds(self.address, timeout=5.0):
            return None
        try:
            return self.status()
        except Exception:
            return None

    def follow(self, *, echo: bool = True, lost_contact_after: float = 300.0, stop_on_interrupt: bool = True,
               log_mode: str = "a", say: Any = None, handed_over: Optional[Callable[[], Optional[str]]] = None) -> int:
        """Stream the job's output to the console and ``plan.log_file`` until it ends.

        Returns 0 (succeeded), 1 (failed), 130 (stopped, or Ctrl-C here, which stops the
        job first unless ``stop_on_interrupt`` is false) or :data:`EXIT_LOST_CONTACT` (the
        cluster stopped answering for ``lost_contact_after`` seconds; the job may still
        run). Losing contact is said at once, with a countdown while retrying; ``say``
        (default: stderr) receives those lines. Ray streams the log from its start:
        ``log_mode="w"`` rewrites the log file.

        ``handed_over``: asked while the dashboard does not answer; a line (said, then
        :data:`EXIT_LOST_CONTACT` returned at once) when someone else has taken the job's end
        in hand: the run's supervisor knows the head is dead, or has ended the attempt, so there
        is nothing left to wait ``lost_contact_after`` for.
        """
        say = say or _stderr_line
        log = None
        if self.log_file:
            Path(self.log_file).parent.mkdir(parents=True, exist_ok=True)
            log = open(self.log_file, log_mode, encoding="utf-8")
            sys.stdout.write(f"[clawgym] training log: {self.log_file}\n")  # one write: sweeps print from threads
            sys.stdout.flush()
        self._log = log
        chunks: "queue.Queue[Any]" = queue.Queue()
        threading.Thread(target=self._tail, args=(chunks,), daemon=True, name="clawgym-log-tail").start()
        stop_polling = threading.Event()
        emitted = 0  # characters of the job's log shown so far (before masking)
        status: Optional[str] = None
        lost_since: Optional[float] = None
        next_countdown = 0.0

        def show(text: str) -> None:
            nonlocal emitted
            emitted += len(text)
            self._emit(text, echo, log)

        try:
            streaming, polling = True, False
            last_check = 0.0
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
                now = time.time()
                if status is None:
                    taken = handed_over() if handed_over is not None else None
                    if taken:
                        say(taken)
                        return EXIT_LOST_CONTACT
                    if lost_since is None:
                        lost_since, next_countdown = now, now + _countdown_step(lost_contact_after)
                        say(f"[clawgym] lost contact with the Ray dashboard at {self.address} (job "
                            f"{self.submission_id}); retrying for {lost_contact_after:.0f}s (ray.lost_contact_s)")
                    elif now - lost_since > lost_contact_after:
                        break
                    elif now >= next_countdown:
                        next_countdown = now + _countdown_step(lost_contact_after)
                        left = lost_contact_after - (now - lost_since)
                        say(f"[clawgym] still no answer from {self.address}; giving up in {left:.0f}s")
                    time.sleep(1.0)
                    continue
                if lost_since is not None:
                    say(f"[clawgym] the Ray dashboard at {self.address} answers again after "
                        f"{now - lost_since:.0f}s; following job {self.submission_id}")
                    lost_since = None
                    if not streaming and not polling:
                        # Ray's log stream died with the dashboard: poll from what was shown.
                        polling = True
                        threading.Thread(target=self._poll, args=(chunks, emitted, stop_polling), daemon=True,
                                         name="clawgym-log-poll").start()
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
                            text = self.client.get_job_logs(self.submission_id)
                            show(text[emitted:])
                        except Exception:
                            pass
                    break
                if not streaming and not polling:
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
            return self.stop_interrupted()
        finally:
            stop_polling.set()
            self._log = None
            if log:
                log.close()
        self.final_status = status
        if status is None:
            say(f"[clawgym] gave up: no answer from the Ray dashboard at {self.address} for "
                f"{lost_contact_after:.0f}s (ray.lost_contact_s); the job may still run.\n"
                f"  check it:  clawgym jobs status {self.submission_id} --address {self.address}\n"
                f"  follow it: clawgym jobs logs {self.submission_id} --follow --address {self.address}"
                + (f"\n  log so far: {self.log_file}" if self.log_file else ""))
            return EXIT_LOST_CONTACT
        if status == "SUCCEEDED":
            if echo:
                print(f"[clawgym] job {self.submission_id} succeeded", flush=True)
            return 0
        if status == "STOPPED":
            if echo:
                print(f"[clawgym] job {self.submission_id} was stopped", file=sys.stderr, flush=True)
            return EXIT_STOPPED
        if echo:
            print(self.failure_report(), file=sys.stderr, flush=True)
        return 1

    def failure_report(self, *, lines: int = 15) -> str:
        """The trainer's exit code, the last lines of its output and the log path (not Ray's long tail)."""
        message = self._mask(self.message().strip())
        code = trainer_exit_code(message)
        why = f"the trainer exited with code {code}" if code is not None else \
            (message.splitlines()[0][:300] if message else "no reason given by Ray")
        out = [f"[clawgym] job {self.submission_id} FAILED: {why}"]
        tail = _last_lines(self.log_file, lines) if self.log_file else []
        if tail:
            out.append(f"[clawgym] last {len(tail)} lines of the job's output:")
            out += ["  | " + ln for ln in tail]
        if self.log_file:
            out.append(f"[clawgym] log: {self.log_file}")
        return "\n".join(out)

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

    def note_in_log(self, text: str) -> None:
        """Append a clawgym line to the job's log file (e.g. why the launcher stopped following)."""
        if not self.log_file:
            return
        try:
            with open(self.log_file, "a", encoding="utf-8") as fh:
                fh.write(text.rstrip("\n") + "\n")
        except OSError:
            pass


#: Exit status when the cluster stopped answering while following (the job may still run).
EXIT_LOST_CONTACT = 3


def _stderr_line(text: str) -> None:
    sys.stderr.write(text + "\n")
    sys.stderr.flush()


def _countdown_step(total: float) -> float:
    """Seconds between countdown lines: about six lines over the whole wait, 5..30 s apart."""
    return max(5.0, min(30.0, total / 6.0))


def trainer_exit_code(message: str) -> Optional[int]:
    """The entrypoint's exit code in Ray's failure message ("... failed with exit code 3 ...")."""
    import re

    found = re.search(r"exit code (-?\d+)", message)
    return int(found.group(1)) if found else None


def _last_lines(path: str, n: int) -> List[str]:
    try:
        with open(path, "rb") as fh:
            fh.seek(0, os.SEEK_END)
            size = fh.tell()
            fh.seek(max(0, size - 64 * 1024))
            text = fh.read().decode("utf-8", errors="replace")
    except OSError:
        return []
    return [ln.rstrip() for ln in text.splitlines() if ln.strip()][-n:]


def ports_of(plan: LaunchPlan) -> List[int]:
    """Ports the job's own servers listen on: the API server (``PORT``) and every
    ``--*-port N`` trainer flag (e.g. an SGLang router port)."""
    found: List[int] = []
    port = (plan.runtime_env.get("env_vars") or {}).get("PORT")
    if port and str(port).isdigit():
        found.append(int(port))
    # The trainer's flags, then each service's command (a teacher server's --port).
    argv = list(plan.entrypoint) + [a for svc in (getattr(plan, "services", None) or []) for a in svc["argv"]]
    for i, arg in enumerate(argv):
        value = None
        if arg.startswith("--") and arg.endswith("-port") and i + 1 < len(argv):
            value = argv[i + 1]
        elif arg.startswith("--") and "-port=" in arg:
            value = arg.split("=", 1)[1]
        if value is not None and value.isdigit() and int(value) not in found:
            found.append(int(value))
    return found


#: Ray's job head's answer while it knows no agent of the head node to run a job (its
#: ray/dashboard/modules/job/job_head.py submit_job, after waiting WAIT_AVAILABLE_AGENT_TIMEOUT = 10 s
#: of its own): a cluster whose head agent is not registered yet, e.g. seconds after `ray start` on a
#: loaded node. Ray says to try again.
NO_AGENT_YET = "No available agent to submit job, please try again later"
#: How long a submission is posted again while Ray answers :data:`NO_AGENT_YET`.
AGENT_WAIT_S = 60.0


def post_when_agent_ready(post: Callable[[], str], *, wait_s: float = AGENT_WAIT_S,
                          say: Callable[[str], None] = lambda line: None) -> str:
    """``post()`` (a submission), posted again while Ray answers that no agent is there yet, for up to
    ``wait_s`` seconds; any other answer, or that one past ``wait_s``, is raised as it came."""
    end = time.monotonic() + wait_s
    said = False
    while True:
        try:
            return post()
        except Exception as exc:
            if NO_AGENT_YET not in str(exc) or time.monotonic() >= end:
                raise
            if not said:
                say(f"[clawgym] Ray's job API has no agent to run the job yet (\"{NO_AGENT_YET}\"); "
                    f"posting it again for up to {wait_s:.0f} s")
                said = True
            time.sleep(1.0)


def refusal_fix(exc: Exception, address: str) -> str:
    """What to do about Ray's refusal ``exc`` of a submission to ``address``."""
    if NO_AGENT_YET in str(exc):
        # Seen here: a head whose agent port (ray start --dashboard-agent-listen-port, 52365 by default)
        # was taken by another process never got an agent and refused every job this way.
        return (f"the head node's dashboard agent did not register within {AGENT_WAIT_S:.0f} s: read "
                f"dashboard_agent.log in the head's Ray session logs (<ray temp dir>/session_latest/logs/); a port "
                f"it needs may be taken (--dashboard-agent-listen-port, 52365 by default)")
    return (f"check paths.slime (the job's working dir) and the cluster's state "
            f"(clawgym jobs list --address {address})")


def submit(address: str, plan: LaunchPlan, *, secrets: Mapping[str, str], pass_secrets: bool = False,
           started_here: bool = False, working_dir_package: Optional[str] = None,
           before_post: Optional[Callable[[], None]] = None) -> JobHandle:
    """Submit the plan's job to the cluster at ``address``.

    ``started_here``: the head was started by clawgym with the secrets in its environment,
    so the job inherits them. Otherwise secrets are added to the runtime env only with
    ``pass_secrets`` (``ray.pass_secrets_in_runtime_env=true``: Ray stores the runtime env
    in the job's metadata and writes it to the cluster's ``runtime_env_agent.log``, so this
    is opt-in and warned about). ``working_dir_package``: the working dir already packaged
    (a zip of what Ray would upload, :mod:`clawgym.backends.workdir`); Ray then only uploads it.
    ``before_post()``: runs after the working dir is uploaded and before the job is posted (a
    head being started: wait for the agent that will run it).
    """
    runtime_env = copy.deepcopy(plan.runtime_env)
    runtime_env.setdefault("working_dir", working_dir_package or plan.working_dir)
    if secrets and not started_here:
        if pass_secrets:
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
        # What a later launch on this cluster checks free GPUs and port clashes against.
        "clawgym_gpus": str(int(plan.gpus_required)),
        "clawgym_ports": ",".join(str(p) for p in ports_of(plan)),
        "clawgym_launcher_pid": str(os.getpid()),
    }
    client = jobs_client(address)
    try:
        if before_post is not None:
            # The upload needs only the dashboard; the SDK then finds the package's URI in the
            # runtime env and uploads nothing more. Without that method Ray uploads at submission.
            upload = getattr(client, "_upload_working_dir_if_needed", None)
            if upload is not None:
                upload(runtime_env)
            before_post()
        sid = post_when_agent_ready(
            lambda: client.submit_job(entrypoint=shlex.join(plan.job_entrypoint), submission_id=plan.submission_id,
                                      runtime_env=runtime_env, metadata=metadata),
            say=lambda line: print(line, flush=True))
    except Exception as exc:
        raise LaunchError(f"Ray refused job {plan.submission_id} at {address}: {exc}\n"
                          f"  fix: {refusal_fix(exc, address)}") from exc
    sys.stdout.write(f"[clawgym] submitted job {sid} to {address}\n")
    sys.stdout.flush()
    handle = JobHandle(address, sid, plan, redact=list(secrets.values()))
    handle._client_obj = client
    return handle
