"""A local Ray head that clawgym starts, records, and stops through that record only.

``ray stop`` and ``pkill`` stop every Ray process on the machine, including other
people's clusters. Instead, a head started here is made identifiable and written
down, and stopping it touches nothing else:

- ``ray start`` runs in a new session (``setsid``): the head's daemons share that
  session id, and a terminal's Ctrl-C does not reach them directly.
- The head's environment carries a unique marker, ``CLAWGYM_HEAD_ID``; every process
  of the head inherits it, including job drivers that Ray moves into sessions of
  their own.
- It gets a dedicated short ``--temp-dir`` (its sockets, logs and
  ``ray_current_cluster`` stay out of the shared ``/tmp/ray``) and free ports for the
  services that otherwise default to fixed ones, so it coexists with other heads.
- The record, ``<state dir>/heads/<dashboard port>.json``, holds the pids with their
  create times, the session id, marker, temp dir and addresses.

Stopping verifies each process (pid + create time, or marker + start time) before
SIGTERM, then SIGKILLs what is left after a grace period, then removes the record.

Ownership: a head is *shared* by the launches that use it, and the record lists them
(``users``: pid + process start time, so a reused pid is not mistaken for a user).
The launch that starts a head is its first user; a later launch with the same settings
joins the list while it runs. Each launch leaves the list when it ends, and the last
one out stops the head, unless the head is *kept* (``ray.keep_head``, detached jobs, a
lost terminal, or jobs still running that a launcher no longer follows: ``kept`` and
``kept_reason`` in the record), in which case only ``clawgym jobs stop-head`` stops it.
A head that is neither kept nor used by a live launch is *orphaned* (its launcher was
killed): the next launch on it says so, lists what runs there and how to stop it.
Record updates are serialised by a lock file next to the record.
"""

from __future__ import annotations

import contextlib
import dataclasses
import errno
import hashlib
import hmac
import json
import os
import secrets as _secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable, Dict, Iterable, Iterator, List, Mapping, Optional, Sequence, Tuple

# (aliased: this module's own ``ownership(rec)`` answers who uses a head)
from clawgym.common import ownership as owners
from clawgym.launch.rayjob import dashboard_responds

#: Environment variable that marks every process of a head clawgym started.
MARKER_ENV = "CLAWGYM_HEAD_ID"
#: Overrides the state dir (default ``~/.cache/clawgym``).
STATE_DIR_ENV = "CLAWGYM_STATE_DIR"
#: Unix sockets live under the temp dir; Linux caps their path at 107 bytes, and Ray
#: appends ``/session_<date>_<time>_<us>_<pid>/sockets/plasma_store`` (~62 bytes).
MAX_TEMP_DIR_LEN = 44


class HeadError(Exception):
    """A head could not be started, reused or stopped; the message says why and what to do."""


def psutil_module():
    """psutil, from site-packages or the copy Ray ships (``ray/thirdparty_files``)."""
    try:
        import psutil  # type: ignore
    except ImportError:
        import importlib.util

        spec = importlib.util.find_spec("ray")
        if spec is None or spec.origin is None:
            raise
        sys.path.append(str(Path(spec.origin).parent / "thirdparty_files"))
        import psutil  # type: ignore
    return psutil


def state_dir() -> Path:
    return owners.state_dir()


def heads_dir() -> Path:
    return state_dir() / "heads"


def record_path(dashboard_port: int) -> Path:
    return heads_dir() / f"{int(dashboard_port)}.json"


def free_port(host: str = "127.0.0.1") -> int:
    """A port the OS considers free right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


def argv_option(argv: Sequence[str], name: str) -> Optional[str]:
    """Value of ``--name value`` or ``--name=value`` in an argv (last wins)."""
    value = None
    for i, arg in enumerate(argv):
        if arg == name and i + 1 < len(argv):
            value = argv[i + 1]
        elif arg.startswith(name + "="):
            value = arg.split("=", 1)[1]
    return value


def dashboard_address_of(argv: Sequence[str]) -> str:
    host = argv_option(argv, "--dashboard-host") or "127.0.0.1"
    host = "127.0.0.1" if host in ("0.0.0.0", "::", "") else host
    return f"http://{host}:{argv_option(argv, '--dashboard-port') or 8265}"


def dashboard_port_of(argv: Sequence[str]) -> int:
    return int(argv_option(argv, "--dashboard-port") or 8265)


def spec_digest(argv: Sequence[str], env: Mapping[str, str], secrets: Mapping[str, str], salt: str) -> str:
    """Identity of what a head was started with; secrets enter only through a salted HMAC."""
    secret_mac = hmac.new(salt.encode(), json.dumps(dict(secrets), sort_keys=True).encode(), hashlib.sha256)
    spec = {"argv": list(argv), "env": dict(env), "secrets": secret_mac.hexdigest()}
    return hashlib.sha256(json.dumps(spec, sort_keys=True).encode()).hexdigest()


@dataclass
class ProcessId:
    """A process as recorded: a pid alone could be reused by someone else's process."""

    pid: int
    create_time: float
    name: str = ""


@dataclass
class HeadRecord:
    """What clawgym started for one local head; ``<state dir>/heads/<dashboard port>.json``."""

    # Dashboard http address (what jobs are submitted to).
    dashboard_address: str
    dashboard_port: int
    # GCS address (``node_ip:port``).
    gcs_address: str
    # Dedicated Ray temp dir of this head, and its session dir inside.
    temp_dir: str
    session_dir: Optional[str]
    # Session id shared by the head's daemons (``ray start`` ran under setsid).
    sid: Optional[int]
    # Value of CLAWGYM_HEAD_ID in every process of the head.
    marker: str
    # Wall-clock start; processes created before it are never ours.
    start_time: float
    # The ``ray start`` argv as run (plan argv plus the options clawgym appends).
    argv: List[str]
    # The plan's ``ray start`` argv (what reuse compares).
    plan_argv: List[str]
    # Salt and digest of argv + head env + secrets (see spec_digest).
    salt: str
    digest: str
    # Processes of the head found right after start.
    processes: List[ProcessId] = field(default_factory=list)
    # Pid of the clawgym process that started it.
    owner_pid: int = 0
    # Launches using the head now: [{"pid": ..., "create_time": ...}]; the last one out stops it.
    users: List[Dict[str, float]] = field(default_factory=list)
    # Left running on purpose (keep_head, detached jobs, lost terminal); only stop-head stops it.
    kept: bool = False
    # Why it was kept, for ``clawgym jobs heads``.
    kept_reason: str = ""
    # "starting": recorded before `ray start` ran (its processes are found by marker; the
    # launcher starting it is ``users[0]``); "started" once its dashboard answered.
    status: str = "started"

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=2) + "\n"

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "HeadRecord":
        data = dict(data)
        data["processes"] = [ProcessId(**p) for p in data.get("processes", [])]
        return cls(**data)

    @property
    def path(self) -> Path:
        return record_path(self.dashboard_port)

    def matches(self, argv: Sequence[str], env: Mapping[str, str], secrets: Mapping[str, str]) -> bool:
        return hmac.compare_digest(self.digest, spec_digest(argv, env, secrets, self.salt))


def write_record(rec: HeadRecord) -> Path:
    """Write the record atomically, readable by the owner only."""
    path = rec.path
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as fh:
        fh.write(rec.to_json())
    os.replace(tmp, path)
    return path


def load_record(dashboard_port: int) -> Optional[HeadRecord]:
    path = record_path(dashboard_port)
    try:
        return HeadRecord.from_dict(json.loads(path.read_text()))
    except FileNotFoundError:
        return None
    except (ValueError, TypeError, KeyError) as exc:
        raise HeadError(f"unreadable head record {path}: {exc}; remove it if no head of clawgym runs there") from exc


def list_records() -> List[HeadRecord]:
    out = []
    for path in sorted(heads_dir().glob("*.json")):
        try:
            out.append(HeadRecord.from_dict(json.loads(path.read_text())))
        except (OSError, ValueError, TypeError, KeyError):
            continue
    return out


def record_lock(dashboard_port: int):
    """Serialise read-modify-write of one head's record between launches."""
    return owners.file_lock(heads_dir() / f".{int(dashboard_port)}.lock")


def this_launch() -> Dict[str, float]:
    """This process as a head user: pid + start time (a pid alone may be reused)."""
    return {"pid": os.getpid(), "create_time": psutil_module().Process().create_time()}


def _user_alive(user: Mapping[str, Any]) -> bool:
    return _verified(int(user.get("pid", 0)), float(user.get("create_time", 0.0))) is not None


def live_users(rec: HeadRecord) -> List[Dict[str, float]]:
    """Users of the head whose launcher process still runs."""
    users = list(rec.users)
    if not users and rec.owner_pid:
        # A record from before users were listed: its owner pid, unverified.
        users = [{"pid": rec.owner_pid, "create_time": rec.start_time}]
        return [u for u in users if psutil_module().pid_exists(u["pid"])]
    return [u for u in users if _user_alive(u)]


def ownership(rec: HeadRecord) -> str:
    """"kept", "in use" (a live launch uses it) or "orphaned" (no live launch, not kept)."""
    if live_users(rec):
        return "in use"
    return "kept" if rec.kept else "orphaned"


def join_head(rec: HeadRecord) -> HeadRecord:
    """Add this launch to the head's users (the record on disk is re-read under the lock)."""
    with record_lock(rec.dashboard_port):
        current = load_record(rec.dashboard_port)
        if current is None or current.marker != rec.marker:
            # Its last user stopped it between our check and now.
            raise HeadError(f"the Ray head at {rec.dashboard_address} was stopped by the launch that used it last "
                            f"while this launch was getting ready\n  fix: run the command again")
        me = this_launch()
        current.users = [u for u in current.users if _user_alive(u) and int(u["pid"]) != me["pid"]] + [me]
        write_record(current)
    return current


def leave_head(rec: HeadRecord, *, keep: bool = False, reason: str = "") -> Tuple[HeadRecord, List[Dict[str, float]]]:
    """Remove this launch from the users (marking the head kept when ``keep``); returns the
    record and the users still alive. The caller stops the head when none are left and it
    is not kept (under :func:`record_lock`)."""
    current = load_record(rec.dashboard_port)
    if current is None or current.marker != rec.marker:
        return rec, []
    me = os.getpid()
    current.users = [u for u in current.users if _user_alive(u) and int(u["pid"]) != me]
    if keep:
        current.kept, current.kept_reason = True, reason or current.kept_reason
    write_record(current)
    return current, list(current.users)


def remove_record(rec: HeadRecord) -> None:
    try:
        rec.path.unlink()
    except FileNotFoundError:
        pass


# ---------------------------------------------------------------- processes

def _alive(proc) -> bool:
    psutil = psutil_module()
    try:
        return proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE
    except (psutil.NoSuchProcess, psutil.AccessDenied):
        return False


def _verified(pid: int, create_time: float):
    """The live process with that pid and create time, or None (gone, or pid reused)."""
    psutil = psutil_module()
    try:
        proc = psutil.Process(pid)
        if abs(proc.create_time() - create_time) > 0.05:
            return None
        return proc if _alive(proc) else None
    except (psutil.NoSuchProcess, psutil.AccessDenied):
        return None


def protected_pids() -> set:
    """This process and its ancestors are never stopped, whatever they inherited."""
    psutil = psutil_module()
    pids = {os.getpid()}
    try:
        pids.update(p.pid for p in psutil.Process().parents())
    except psutil.Error:
        pass
    return pids


def find_processes(*, sid: Optional[int], marker: Optional[str], since: float,
                   known: Iterable[ProcessId] = ()) -> Dict[int, Any]:
    """Live processes of one head: recorded ones (verified), members of its session and
    carriers of its marker created after it started, plus all their descendants."""
    psutil = psutil_module()
    found: Dict[int, Any] = {}
    known = list(known)
    for p in known:
        proc = _verified(p.pid, p.create_time)
        if proc is not None:
            found[proc.pid] = proc
    if known and sid is not None:
        # A session id is a pid, and pids get reused: trust it only while a verified
        # process of ours is still in that session (then nobody else can own it).
        def in_session(pid: int) -> bool:
            try:
                return os.getsid(pid) == sid
            except OSError:
                return False
        if not any(in_session(pid) for pid in found):
            sid = None
    want = f"{MARKER_ENV}={marker}"
    for proc in psutil.process_iter(["pid", "create_time"]):
        try:
            if proc.info["create_time"] is None or proc.info["create_time"] < since - 1.0:
                continue
            if proc.pid in found:
                continue
            if sid is not None and os.getsid(proc.pid) == sid:
                found[proc.pid] = proc
                continue
            if marker:
                with open(f"/proc/{proc.pid}/environ", "rb") as fh:
                    if want.encode() in fh.read().split(b"\0"):
                        found[proc.pid] = proc
        except (psutil.Error, OSError):
            continue
    for proc in list(found.values()):
        try:
            for child in proc.children(recursive=True):
                found.setdefault(child.pid, child)
        except psutil.Error:
            continue
    for pid in protected_pids():
        found.pop(pid, None)
    return {pid: proc for pid, proc in found.items() if _alive(proc)}


def terminate(procs: Mapping[int, Any], *, grace: float = 5.0) -> List[int]:
    """SIGTERM, wait up to ``grace`` seconds, SIGKILL the rest. Returns the pids signalled."""
    psutil = psutil_module()
    targets = list(procs.values())
    for proc in targets:
        try:
            proc.send_signal(signal.SIGTERM)
        except psutil.Error:
            pass
    _, alive = psutil.wait_procs(targets, timeout=grace)
    alive = [p for p in alive if _alive(p)]
    for proc in alive:
        try:
            proc.send_signal(signal.SIGKILL)
        except psutil.Error:
            pass
    if alive:
        psutil.wait_procs(alive, timeout=5.0)
    return [p.pid for p in targets]


def record_processes(rec: HeadRecord) -> Dict[int, Any]:
    """Live processes of a recorded head (the session id counts only with recorded processes to verify it)."""
    return find_processes(sid=rec.sid if rec.processes else None, marker=rec.marker, since=rec.start_time,
                          known=rec.processes)


# ---------------------------------------------------------------- liveness

def agent_answers(host: str, port: int, timeout: float = 1.0) -> bool:
    """The dashboard agent of a head serves HTTP on ``host:port`` (any HTTP answer counts)."""
    try:
        with urllib.request.urlopen(f"http://{host}:{port}/api/local_raylet_healthz", timeout=timeout):
            return True
    except urllib.error.HTTPError:
        return True
    except (urllib.error.URLError, OSError, ValueError):
        return False


def agent_registered(address: str, node_ip: str, timeout: float = 2.0) -> bool:
    """The dashboard at ``address`` knows the agent of the node at ``node_ip``.

    The agent writes its address to the GCS just after its HTTP server starts; Ray's job API
    finds the agent only through that entry, and so does the State API's log listing, which
    answers 404 ("Cannot find matching node_id for a given node ip") until it is there."""
    url = f"{address.rstrip('/')}/api/v0/logs?node_ip={node_ip}&glob=raylet.out"
    try:
        with urllib.request.urlopen(url, timeout=timeout) as resp:
            return resp.status == 200
    except (urllib.error.URLError, OSError, ValueError):
        return False


def cluster_gpus(address: str, timeout: float = 30.0, *, wait_for_node: bool = False) -> float:
    """GPUs declared by the alive nodes of the cluster whose dashboard is at ``address``.

    ``wait_for_node``: a head whose dashboard just came up may not list its own node yet; ask
    again (up to ``timeout`` seconds) until one node is alive."""
    # The dashboard's node list is one HTTP call; ray.init would start a driver.
    url = f"{address.rstrip('/')}/api/v0/nodes?limit=10000&detail=1"
    deadline = time.time() + timeout
    while True:
        with urllib.request.urlopen(url, timeout=timeout) as resp:
            data = json.load(resp)
        nodes = [n for n in data.get("data", {}).get("result", {}).get("result", []) if n.get("state") == "ALIVE"]
        if nodes or not wait_for_node or time.time() > deadline:
            return float(sum((n.get("resources_total") or {}).get("GPU", 0.0) for n in nodes))
        time.sleep(0.2)


def head_state(rec: HeadRecord, *, patience: float = 10.0) -> str:
    """"alive", "unresponsive" (GCS and raylet run, the dashboard does not answer within
    ``patience`` seconds, e.g. on an overloaded machine) or "dead" (GCS or raylet gone)."""
    core = [p for p in rec.processes if p.name.startswith(("gcs_server", "raylet"))]
    if not core or any(_verified(p.pid, p.create_time) is None for p in core):
        return "dead"
    deadline = time.time() + patience
    while True:
        if dashboard_responds(rec.dashboard_address, timeout=min(5.0, max(0.5, deadline - time.time()))):
            return "alive"
        if time.time() >= deadline:
            return "unresponsive"
        time.sleep(0.5)


def is_alive(rec: HeadRecord, *, patience: float = 10.0) -> bool:
    """The recorded GCS and raylet still run and the dashboard answers."""
    return head_state(rec, patience=patience) == "alive"


# ---------------------------------------------------------------- start / stop

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


def _ray_executable() -> List[str]:
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
LOOPBACK_HOSTS = ("127.0.0.1", "::1", "localhost")

#: ``ray start`` options naming a port one of the head's services binds, with the config key
#: that sets it (None: clawgym picks a free one and reserves it).
PORT_OPTIONS: Tuple[Tuple[str, Optional[str]], ...] = (
    ("--port", "ray.port"),
    ("--dashboard-port", "ray.dashboard_port"),
    ("--ray-client-server-port", None),
    ("--dashboard-agent-listen-port", None),
    ("--dashboard-agent-grpc-port", None),
    ("--runtime-env-agent-port", None),
    ("--node-manager-port", None),
    ("--object-manager-port", None),
    ("--metrics-export-port", None),
)
#: Metrics servers of the dashboard and the autoscaler monitor: fixed default ports (44227,
#: 44217 in ray/dashboard/consts.py, ray/autoscaler/_private/constants.py) set by environment
#: only; two heads on one machine would collide on them.
PORT_ENV = ("DASHBOARD_METRIC_PORT", "AUTOSCALER_METRIC_PORT")

# Ports this process reserved for heads it is starting: port -> (host, what), until each head
# is up or stopped. Preflight's ports check reports these as the head's own.
_STARTING: Dict[int, Tuple[str, str]] = {}
_STARTING_LOCK = threading.Lock()


def is_loopback(host: str) -> bool:
    return host in LOOPBACK_HOSTS or host.startswith("127.")


def starting_ports() -> Dict[int, Tuple[str, str]]:
    """Ports reserved by heads this process is starting: port -> (host, option or variable)."""
    with _STARTING_LOCK:
        return dict(_STARTING)


def declared_gpus(argv: Sequence[str]) -> Optional[float]:
    """GPUs a ``ray start`` argv declares (None: Ray detects them)."""
    value = argv_option(argv, "--num-gpus")
    return float(value) if value is not None else None


class PortReservation:
    """Ports held for a head from before ``ray start`` until the head listens on them.

    A reserved port is a socket bound with SO_REUSEADDR and never listening. On Linux that
    keeps every other bind without SO_REUSEADDR off the port, and the kernel's choice of free
    ports (bind to port 0, Ray's own port picking) skips it; the head's servers, which all set
    SO_REUSEADDR (gRPC, aiohttp, Python's http.server), can still bind and listen on it. A
    server of someone else that also sets SO_REUSEADDR could still take it before the head
    does: the reservation narrows that window to nothing for ephemeral-port users, not for them.
    """

    def __init__(self) -> None:
        self.sockets: Dict[int, socket.socket] = {}
        self.what: Dict[int, Tuple[str, str]] = {}
        # Two never-listening SO_REUSEADDR sockets can share a port: each reserved port is also
        # locked (clawgym.common.ownership.PortLock) until the head listens on it, so two launches
        # started in the same second cannot both reserve it.
        self.locks: Dict[int, "owners.PortLock"] = {}

    def hold(self, host: str, port: int, what: str, *, keep: bool = True) -> int:
        """Reserve ``host:port`` (port 0: a free one); returns the port. Raises HeadError when taken.

        ``keep=False`` only checks that the port is free now (and lists it in :func:`starting_ports`):
        a server binding all interfaces (gRPC binds ``[::]``) cannot share a port with a socket
        bound to one address, so beyond loopback the port is checked, not held."""
        try:
            family = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0][0]
        except socket.gaierror as exc:
            raise HeadError(f"{what}: host {host!r} does not resolve ({exc})") from None
        sock = socket.socket(family, socket.SOCK_STREAM)
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.bind((host, port))
        except OSError as exc:
            sock.close()
            why = "in use" if exc.errno == errno.EADDRINUSE else str(exc)
            raise HeadError(f"{what}={port} on {host}: {why}\n  fix: free the port (ss -ltnp 'sport = :{port}' "
                            f"shows who holds it) or choose another") from None
        got = int(sock.getsockname()[1])
        if got not in self.locks:
            try:
                self.locks[got] = owners.PortLock(got, what)
            except owners.Held as exc:
                sock.close()
                raise HeadError(f"{exc}\n  fix: wait for that launch (its head is then shared by launches with "
                                f"the same ray.* settings) or choose another {what}") from None
        if keep:
            self.sockets[got] = sock
        else:
            sock.close()
        self.what[got] = (host, what)
        with _STARTING_LOCK:
            _STARTING[got] = (host, what)
        return got

    def release_sockets(self) -> None:
        """Close the sockets (the head listens on the ports now, or never will)."""
        for sock in self.sockets.values():
            sock.close()
        self.sockets.clear()

    def forget(self) -> None:
        """Release everything, including the ports' listing in :func:`starting_ports`."""
        self.release_sockets()
        with _STARTING_LOCK:
            for port in self.what:
                _STARTING.pop(port, None)
        self.what.clear()
        for lock in self.locks.values():
            lock.release()
        self.locks.clear()


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
        exe = _ray_executable()
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
            found = [ProcessId(p.pid, p.create_time(), _proc_name(p)) for p in procs.values()]
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


def interrupt_on_signals() -> None:
    """From the moment a launch may start a head: SIGTERM and SIGHUP act as Ctrl-C (raise
    KeyboardInterrupt in the main thread), so whatever runs then stops the head it began
    through its record (the launch's ``except``/``atexit`` paths) instead of the process dying
    with the head left behind. The pipeline's own handlers take over while jobs run
    (:func:`clawgym.launch.rayjob._sigterm_as_interrupt`) and give these back. Handlers someone else
    installed are left alone."""
    if threading.current_thread() is not threading.main_thread():
        return

    def on_signal(signum, frame):  # noqa: ARG001
        raise KeyboardInterrupt

    for sig in (signal.SIGTERM, signal.SIGHUP):
        if signal.getsignal(sig) in (signal.SIG_DFL, None):
            signal.signal(sig, on_signal)
    if signal.getsignal(signal.SIGINT) in (signal.SIG_DFL, None):
        signal.signal(signal.SIGINT, signal.default_int_handler)


@contextlib.contextmanager
def signals_deferred() -> Iterator[None]:
    """While stopping a head: SIGINT/SIGTERM/SIGHUP wait until it is stopped (nothing half-stopped)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    old = {sig: signal.signal(sig, signal.SIG_IGN) for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)}
    try:
        yield
    finally:
        for sig, handler in old.items():
            signal.signal(sig, handler)


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


def _proc_name(proc) -> str:
    try:
        return proc.name()
    except Exception:
        return ""


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


def running_jobs(address: str) -> List[str]:
    """Submission ids of jobs on a cluster that have not finished."""
    from ray.job_submission import JobSubmissionClient

    client = JobSubmissionClient(address)
    return [j.submission_id or j.job_id for j in client.list_jobs()
            if j.type.name == "SUBMISSION" and not j.status.is_terminal()]


def settle(argv: Sequence[str], env: Mapping[str, str], secrets: Mapping[str, str]) -> Optional[HeadRecord]:
    """Deal with what an earlier clawgym launch left on this head's dashboard port.

    Returns the recorded head when it is alive and was started with the same argv,
    environment and secrets (to be reused). A dead or half-dead recorded head is
    cleaned up; a live one started differently is replaced when no job runs on it,
    and refused otherwise. Nothing without a record is touched.
    """
    rec = load_record(dashboard_port_of(argv))
    if rec is None:
        return None
    if rec.status == "starting":
        rec = _wait_while_starting(rec)
        if rec is None:
            return None
    state = head_state(rec)
    if state == "unresponsive":
        # Its jobs may still run: never stopped on a guess.
        raise HeadError(
            f"the Ray head clawgym started earlier at {rec.dashboard_address} runs but its dashboard does not "
            f"answer.\n  fix: stop it (clawgym jobs stop-head --address {rec.dashboard_address} --force) or pick "
            f"another ray.port/ray.dashboard_port")
    if state == "dead":
        leftovers = record_processes(rec)
        if leftovers:
            print(f"[clawgym] cleaning up {len(leftovers)} leftover processes of the dead Ray head "
                  f"clawgym started at {rec.dashboard_address}", flush=True)
        stop_head(rec, grace=3.0, quiet=True)
        return None
    if rec.matches(argv, env, secrets):
        return rec
    busy = running_jobs(rec.dashboard_address)
    if busy:
        raise HeadError(
            f"the Ray head clawgym started earlier at {rec.dashboard_address} was started with other settings "
            f"(ray start argv, head environment or secrets) and still runs job(s) {', '.join(busy)}.\n"
            f"  fix: stop them (clawgym jobs stop <id> --address {rec.dashboard_address}), submit to that head "
            f"with ray.address={rec.dashboard_address}, or pick another ray.port/ray.dashboard_port")
    users = [u for u in live_users(rec) if int(u["pid"]) != os.getpid()]
    if users:
        raise HeadError(
            f"the Ray head clawgym started earlier at {rec.dashboard_address} was started with other settings "
            f"(ray start argv, head environment or secrets) and is in use by clawgym launch(es) "
            f"{', '.join('pid ' + str(int(u['pid'])) for u in users)}.\n"
            f"  fix: wait for them, submit to that head with ray.address={rec.dashboard_address}, "
            f"or pick another ray.port/ray.dashboard_port")
    print(f"[clawgym] replacing the idle Ray head clawgym started at {rec.dashboard_address} "
          f"(it was started with other settings)", flush=True)
    stop_head(rec, quiet=True)
    return None


def _wait_while_starting(rec: HeadRecord, timeout: float = 180.0) -> Optional[HeadRecord]:
    """A head recorded as "starting": this launch's own (None: adopted later), another live
    launch's (wait until its dashboard answers, then it is settled as any other), or one whose
    launcher is gone before it came up (stopped through the record: None)."""
    deadline = time.time() + timeout
    while True:
        starter = rec.users[0] if rec.users else {"pid": rec.owner_pid, "create_time": 0.0}
        if int(starter.get("pid", 0)) == os.getpid():
            return None
        if not _user_alive(starter):
            procs = record_processes(rec)
            if procs:
                print(f"[clawgym] stopping the Ray head at {rec.dashboard_address} whose launcher (pid "
                      f"{int(starter.get('pid', 0))}) was killed while starting it ({len(procs)} processes)",
                      flush=True)
            stop_head(rec, grace=3.0, quiet=True)
            return None
        if time.time() > deadline:
            raise HeadError(f"the Ray head at {rec.dashboard_address} is still being started by clawgym launch pid "
                            f"{int(starter['pid'])} after {timeout:.0f}s\n  fix: wait for it, or pick another "
                            f"ray.port/ray.dashboard_port")
        time.sleep(0.3)
        current = load_record(rec.dashboard_port)
        if current is None:
            return None  # it failed and was removed by its launcher: nothing is there any more
        if current.status != "starting":
            return current
        rec = current


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
