"""Starting a local head (``ray start --head`` in the background, recorded) and stopping it through its record.

``ray start`` runs in a session of its own (``setsid``) with a marker in its environment, a
dedicated short temp dir and reserved ports (:mod:`clawgym.backends.head.ports`); the record is
written before it runs and again as it comes up. Stopping signals exactly the recorded head's
processes."""

from __future__ import annotations

import dataclasses
import os
import secrets as _secrets
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Callable, Dict, List, Mapping, Optional, Sequence

from clawgym.backends.head.liveness import agent_answers, agent_registered
from clawgym.backends.head.ports import PORT_ENV, PORT_OPTIONS, PortReservation, is_loopback
from clawgym.backends.head.processes import find_processes, proc_name, record_processes, terminate
from clawgym.backends.head.records import (
    MARKER_ENV,
    HeadError,
    HeadRecord,
    ProcessId,
    argv_option,
    dashboard_address_of,
    dashboard_port_of,
    heads_dir,
    load_record,
    record_lock,
    remove_record,
    spec_digest,
    write_record,
)
from clawgym.backends.head.users import this_launch
from clawgym.launch.rayjob import dashboard_responds

#: Unix sockets live under the temp dir; Linux caps their path at 107 bytes, and Ray
#: appends ``/session_<date>_<time>_<us>_<pid>/sockets/plasma_store`` (~62 bytes).
MAX_TEMP_DIR_LEN = 44


def _temp_root() -> str:
    base = tempfile.gettempdir()
    return base if len(base) <= 20 else "/tmp"


def _installed_ray_script() -> Optional[str]:
    """The ``ray`` console script installed with the Ray package this interpreter imports.

    Found from where the package lives (site-packages of this environment or of the base
    interpreter a venv extends) without importing it: the scripts dir of that scheme."""
    import importlib.util
    import sysconfig

    spec = importlib.util.find_spec("ray")
    if spec is None or spec.origin is None:
        return None
    site = os.path.realpath(os.path.dirname(os.path.dirname(spec.origin)))
    schemes = [{}, {"base": sys.base_prefix, "platbase": sys.base_exec_prefix}]
    for scheme in schemes:
        libs = {os.path.realpath(sysconfig.get_path(k, vars=scheme)) for k in ("purelib", "platlib")}
        if site in libs:
            script = os.path.join(sysconfig.get_path("scripts", vars=scheme), "ray")
            if os.path.isfile(script) and os.access(script, os.X_OK):
                return script
    return None


def ray_executable() -> List[str]:
    """What runs ``ray start``: the Ray whose job SDK this launcher speaks to the head with.

    Not a PATH lookup: ``ray`` on PATH may be another environment's, or a version manager's
    shim (pyenv's runs bash and ``pyenv exec`` first: about 0.3 s before Ray even starts
    importing, on the head's critical path)."""
    script = _installed_ray_script()
    if script is not None:
        return [script]
    # No console script next to the package (e.g. an unusual install): the same CLI, in-process.
    return [sys.executable, "-c", "import sys; from ray.scripts.scripts import main; sys.exit(main())"]


# Loopback: Ray picks the address its servers bind from the node IP. In cluster mode (its
# default on Linux) `ray start` replaces a loopback --node-ip-address by the machine's routable
# address (ray/_private/services.py:resolve_ip_for_localhost via get_node_ip_address), and the
# GCS and raylet gRPC servers then listen on 0.0.0.0 (src/ray/rpc/grpc_server.cc:GrpcServer::Run
# binds 127.0.0.1 only when the node IP is loopback). RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0 keeps
# the loopback node IP, so every server of a single-node head binds loopback; it only disables
# adding worker nodes to this head (ray/scripts/scripts.py refuses `ray start --address` then),
# which a local head does not do.
SINGLE_NODE_ENV = "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"
# When the first driver registers, the raylet prestarts one idle Python worker per CPU for it
# (ray_config_def.h: prestart_worker_first_driver). On a head clawgym starts, that driver is
# the dashboard agent's job manager, whose only actors (job supervisors) carry a runtime env,
# so those workers never run anything: they only take CPU (one `import ray` each) while the
# agent and the first job's supervisor start. Without them nothing else changes: every worker
# is started on demand, as those of the job's own driver always are.
PRESTART_ENV = "RAY_prestart_worker_first_driver"


class HeadStart:
    """A ``ray start --head`` running in the background, from before preflight to a record.

    :func:`begin_head` reserves every port the head will bind and starts ``ray start`` at
    once; the caller does what does not need the head meanwhile (preflight, snapshots,
    packaging the working dir), then :meth:`finish` waits for it and writes the record, or
    :meth:`abort` stops whatever it started (by its session and marker) and releases the ports.
    """

    def __init__(self, argv: Sequence[str], env: Mapping[str, str], *, secrets: Mapping[str, str],
                 timeout: float, quiet: bool) -> None:
        argv = list(argv)
        if argv[:2] != ["ray", "start"] or "--head" not in argv:
            raise HeadError(f"not a 'ray start --head' command: {argv}")
        self.plan_argv = argv
        self.env = dict(env)
        self.secrets = dict(secrets)
        self.timeout = timeout
        self.quiet = quiet
        self.port = dashboard_port_of(argv)
        self.address = dashboard_address_of(argv)
        self.marker = _secrets.token_hex(8)
        self.temp_dir = os.path.join(_temp_root(), "clawgym", f"h{self.port}-{self.marker[:6]}")
        if len(self.temp_dir) > MAX_TEMP_DIR_LEN:
            raise HeadError(f"Ray temp dir {self.temp_dir} is too long for Ray's unix sockets "
                            f"(max {MAX_TEMP_DIR_LEN})")
        self.node_ip = argv_option(argv, "--node-ip-address") or "127.0.0.1"
        self.ports = PortReservation()
        self.proc: Optional[subprocess.Popen] = None
        self.sid: Optional[int] = None
        self.start = time.time()
        self.log_path = os.path.join(self.temp_dir, "ray_start.log")
        self.record: Optional[HeadRecord] = None
        try:
            self._launch()
        except BaseException:
            self.abort()
            raise

    def _reserve(self, argv: List[str], head_env: Dict[str, str]) -> List[str]:
        """Every port the head binds, reserved; the argv gets the ones clawgym picked."""
        dash_host = argv_option(argv, "--dashboard-host") or "127.0.0.1"
        extra: List[str] = []
        for option, key in PORT_OPTIONS:
            host = dash_host if option == "--dashboard-port" else self.node_ip
            given = argv_option(argv, option)
            if given is None and key is not None:
                given = "6379" if option == "--port" else "8265"  # Ray's defaults
            port = self.ports.hold(host, int(given) if given is not None else 0, key or option,
                                   keep=self.loopback and is_loopback(host))
            if given is None:
                extra += [option, str(port)]
        for name in PORT_ENV:
            given = head_env.get(name)
            head_env[name] = str(self.ports.hold(self.node_ip, int(given) if given else 0, name, keep=self.loopback))
        return extra

    def _launch(self) -> None:
        exe = ray_executable()
        head_env = {k: v for k, v in os.environ.items() if k not in ("RAY_ADDRESS",)}
        head_env.update(self.env)
        head_env.update(self.secrets)
        head_env[MARKER_ENV] = self.marker
        if is_loopback(self.node_ip):
            head_env.setdefault(SINGLE_NODE_ENV, "0")
        head_env.setdefault(PRESTART_ENV, "0")
        # Ray binds loopback addresses only in single-node mode; otherwise its gRPC servers bind [::].
        self.loopback = is_loopback(self.node_ip) and head_env.get(SINGLE_NODE_ENV) == "0"
        extra = self._reserve(self.plan_argv, head_env)
        full = exe + self.plan_argv[1:] + ["--temp-dir", self.temp_dir] + extra
        if argv_option(self.plan_argv, "--min-worker-port") is None and \
                argv_option(self.plan_argv, "--worker-port-list") is None:
            full += ["--min-worker-port", "0", "--max-worker-port", "0"]
        self.full_argv = ["ray", *full[len(exe):]]
        os.makedirs(self.temp_dir, mode=0o700, exist_ok=True)
        if not self.quiet:
            print(f"[clawgym] starting a Ray head at {self.address} ...", flush=True)
        self.start = time.time()
        # Recorded before `ray start` runs: a launcher killed from here on (SIGKILL included)
        # leaves a head `clawgym jobs heads` lists (its processes carry the marker) and
        # `clawgym jobs stop-head` stops, never an unrecorded one.
        self._record(starting=True)
        with open(self.log_path, "wb") as log:
            self.proc = subprocess.Popen(full, env=head_env, stdin=subprocess.DEVNULL, stdout=log,
                                         stderr=subprocess.STDOUT, start_new_session=True)
        self.sid = self.proc.pid
        self._record(starting=True)

    def dashboard_answers(self) -> bool:
        return dashboard_responds(self.address, timeout=1.0)

    @property
    def agent_port(self) -> Optional[int]:
        """The HTTP port of the head's dashboard agent (clawgym picks it: ``--dashboard-agent-listen-port``)."""
        value = argv_option(self.full_argv, "--dashboard-agent-listen-port")
        return int(value) if value else None

    def wait_for_agent(self, timeout: float = 30.0) -> bool:
        """Wait until the head's dashboard agent answers (True), or ``timeout`` seconds (False).

        Ray's job API takes a submission as soon as the dashboard answers, then looks for the
        head's agent (which runs the job) every 0.5 s (JobHead._get_head_node_agent): a job
        posted early waits for the next look, a quarter of a second on average. Posted the moment
        the agent is registered, it is found at the first. The agent's port is known (clawgym
        chose it), so asking costs one refused connection every 20 ms until it answers; then
        the dashboard is asked until it knows the agent (tens of milliseconds later: the agent
        registers right after its HTTP server starts, see :func:`agent_registered`)."""
        port = self.agent_port
        if port is None:
            return False
        deadline = time.time() + timeout
        while not agent_answers(self.node_ip, port, timeout=1.0):
            if time.time() > deadline or (self.proc is not None and self.proc.poll() not in (None, 0)):
                return False  # not in time, or `ray start` failed (finish() reports it)
            time.sleep(0.02)
        registered = time.time() + 2.0
        while not agent_registered(self.address, self.node_ip):
            if time.time() > min(deadline, registered):
                return False
            time.sleep(0.02)
        return True

    def finish(self, on_dashboard: Optional[Callable[[str], None]] = None) -> HeadRecord:
        """Wait for ``ray start`` to finish and record the head. ``on_dashboard(address)`` is
        called once the dashboard answers, which is seconds before ``ray start`` has finished.
        On failure (also from the callback, or Ctrl-C) the head is stopped (:meth:`abort`)."""
        try:
            return self._finish(on_dashboard)
        except BaseException:
            self.abort()
            raise

    def _finish(self, on_dashboard: Optional[Callable[[str], None]]) -> HeadRecord:
        assert self.proc is not None
        deadline = self.start + self.timeout
        while True:
            rc = self.proc.poll()
            if rc is not None:
                break
            if time.time() > deadline:
                self.proc.kill()
                raise HeadError(f"'ray start' did not finish within {self.timeout:.0f}s; see {self.log_path}")
            if on_dashboard is not None and self.dashboard_answers():
                callback, on_dashboard = on_dashboard, None
                # Recorded before any job can go in: a launcher killed from here on (its job
                # running, `ray start` not yet done) leaves a head that `clawgym jobs heads`
                # lists as orphaned and `stop-head` stops, not an unowned one.
                self._record()
                callback(self.address)
                continue
            # Jobs go in the moment the dashboard answers: ask often until then (a refused
            # connection costs well under a millisecond).
            time.sleep(0.05 if on_dashboard is not None else 0.1)
        if rc != 0:
            # The temp dir goes away with the failed head; keep ray start's output for the user.
            kept = heads_dir() / f"failed-{self.port}.log"
            kept.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(self.log_path, kept)
            lines = Path(self.log_path).read_text(errors="replace").strip().splitlines()
            causes = [ln.strip() for ln in lines if "Error" in ln or "error" in ln or "Failed" in ln][-3:]
            raise HeadError(f"'ray start' failed (exit {rc}): " + ("\n  ".join(causes) or "(no error line)") +
                            f"\n  full output: {kept}"
                            f"\n  fix: free the ports (ray.port, ray.dashboard_port) or choose others, "
                            f"or check the options in ray.*")
        deadline = time.time() + 60
        while not dashboard_responds(self.address):
            if time.time() > deadline:
                raise HeadError(f"the Ray dashboard at {self.address} did not come up; see "
                                f"{self.temp_dir}/session_latest/logs")
            time.sleep(0.2)
        if on_dashboard is not None:
            self._record()
            on_dashboard(self.address)
        rec = self._record()
        # The head listens on its ports now: the reservation has done its job.
        self.ports.forget()
        if not self.quiet:
            print(f"[clawgym] started Ray head at {self.address} (GCS {rec.gcs_address}, temp dir "
                  f"{self.temp_dir})", flush=True)
        return rec

    def _record(self, *, starting: bool = False) -> HeadRecord:
        """Write (or bring up to date) the head's record: its processes as found now.

        Written as "starting" before ``ray start`` runs (no processes yet: they are found by
        the marker) and right after (its session id), then when the dashboard first answers
        and again once ``ray start`` is done; later writes keep what launches changed
        meanwhile (users joining, kept)."""
        if starting:
            found: List[ProcessId] = []
            session_dir = None
        else:
            procs = find_processes(sid=self.sid, marker=self.marker, since=self.start)
            session = os.path.join(self.temp_dir, "session_latest")
            found = [ProcessId(p.pid, p.create_time(), proc_name(p)) for p in procs.values()]
            session_dir = os.path.realpath(session) if os.path.exists(session) else None
        status = "starting" if starting else "started"
        with record_lock(self.port):
            current = load_record(self.port) if self.record is not None else None
            if current is not None and current.marker == self.marker:
                rec = dataclasses.replace(current, processes=found, session_dir=session_dir, sid=self.sid,
                                          status=status)
            else:
                salt = _secrets.token_hex(16)
                rec = HeadRecord(
                    dashboard_address=self.address,
                    dashboard_port=self.port,
                    gcs_address=f"{self.node_ip}:{argv_option(self.plan_argv, '--port') or 6379}",
                    temp_dir=self.temp_dir,
                    session_dir=session_dir,
                    sid=self.sid,
                    marker=self.marker,
                    start_time=self.start,
                    argv=self.full_argv,
                    plan_argv=self.plan_argv,
                    salt=salt,
                    digest=spec_digest(self.plan_argv, self.env, self.secrets, salt),
                    processes=found,
                    owner_pid=os.getpid(),
                    users=[this_launch()],
                    status=status,
                )
            write_record(rec)
        self.record = rec
        return rec

    def abort(self) -> List[int]:
        """Stop whatever this start began (by session and marker), remove its temp dir and
        record, release its ports. Returns the pids signalled."""
        pids: List[int] = []
        if self.sid is not None or self.proc is not None or self.record is not None:
            # (By marker too: an interrupt may land between `ray start` being spawned and its sid noted.)
            sid = self.sid if self.sid is not None else (self.proc.pid if self.proc is not None else None)
            pids = terminate(find_processes(sid=sid, marker=self.marker, since=self.start - 1.0), grace=3.0)
            # Processes a still-running `ray start` spawned while we signalled.
            late = find_processes(sid=None, marker=self.marker, since=self.start - 1.0)
            if late:
                pids += terminate(late, grace=2.0)
        if self.proc is not None:
            try:
                self.proc.wait(timeout=5.0)
            except subprocess.TimeoutExpired:
                pass
        if self.record is not None:
            remove_record(self.record)
            self.record = None
        shutil.rmtree(self.temp_dir, ignore_errors=True)
        self.ports.forget()
        return pids


def begin_head(argv: Sequence[str], env: Mapping[str, str], *, secrets: Mapping[str, str],
               timeout: float = 180.0, quiet: bool = False) -> HeadStart:
    """Reserve the head's ports and start ``ray start`` in the background (see :class:`HeadStart`).

    Raises HeadError, with nothing started, when a port cannot be reserved."""
    return HeadStart(argv, env, secrets=secrets, timeout=timeout, quiet=quiet)


def start_head(argv: Sequence[str], env: Mapping[str, str], *, secrets: Mapping[str, str],
               timeout: float = 180.0, quiet: bool = False,
               while_waiting: Optional[Callable[[], None]] = None,
               on_dashboard: Optional[Callable[[str], None]] = None) -> HeadRecord:
    """Run ``ray start`` (``argv`` from the plan) and record what it started.

    ``env`` is added to this process's environment for the head, then ``secrets``;
    their values never reach the record (only a salted digest). ``while_waiting``
    runs while ``ray start`` does (e.g. warming imports); ``on_dashboard(address)``
    is called once the dashboard answers, which is seconds before ``ray start`` has
    finished (Ray's job API waits for the rest of the head by itself). On any
    failure, including Ctrl-C or an exception from a callback, whatever had started
    is stopped again.
    """
    start = begin_head(argv, env, secrets=secrets, timeout=timeout, quiet=quiet)
    try:
        if while_waiting is not None:
            while_waiting()
    except BaseException:
        start.abort()
        raise
    return start.finish(on_dashboard)


def stop_head(rec: HeadRecord, *, grace: float = 3.0, keep_temp_dir: bool = False, quiet: bool = False) -> List[int]:
    """Stop exactly the processes of a recorded head, then remove the record and temp dir."""
    procs = record_processes(rec)
    pids = terminate(procs, grace=grace) if procs else []
    # Workers that were being spawned while we signalled.
    late = record_processes(rec)
    if late:
        pids += terminate(late, grace=2.0)
    remove_record(rec)
    if not keep_temp_dir:
        shutil.rmtree(rec.temp_dir, ignore_errors=True)
    if not quiet:
        print(f"[clawgym] stopped Ray head at {rec.dashboard_address} ({len(pids)} processes)", flush=True)
    return pids
