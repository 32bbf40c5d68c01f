"""A local head's record: what it was started with, written to ``<state dir>/heads/<port>.json``.

Also the argv helpers that name a head (dashboard address and port, declared GPUs) and
:class:`HeadError`, the one error of the head's modules."""

from __future__ import annotations

import hashlib
import hmac
import json
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Mapping, Optional, Sequence

from clawgym.common import ownership as owners

#: Environment variable that marks every process of a head clawgym started.
MARKER_ENV = "CLAWGYM_HEAD_ID"
#: Overrides the state dir (default ``~/.cache/clawgym``).
STATE_DIR_ENV = "CLAWGYM_STATE_DIR"


class HeadError(Exception):
    """A head could not be started, reused or stopped; the message says why and what to do."""


def state_dir() -> Path:
    return owners.state_dir()


def heads_dir() -> Path:
    return state_dir() / "heads"


def record_path(dashboard_port: int) -> Path:
    return heads_dir() / f"{int(dashboard_port)}.json"


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


def declared_gpus(argv: Sequence[str]) -> Optional[float]:
    """GPUs a ``ray start`` argv declares (None: Ray detects them)."""
    value = argv_option(argv, "--num-gpus")
    return float(value) if value is not None else None


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


def remove_record(rec: HeadRecord) -> None:
    """Remove the record of ``rec``, only while the file still records that head (same marker).

    A head replaced on the same dashboard port (a lost head's successor, started by the run's
    supervisor) has its record at the same path: removing it there would leave a running head
    that nobody recorded."""
    try:
        current = json.loads(rec.path.read_text())
    except FileNotFoundError:
        return
    except (OSError, ValueError):
        current = {}  # unreadable (half-written by hand?): ours to remove, as before
    if isinstance(current, dict) and current.get("marker") not in (None, rec.marker):
        return
    try:
        rec.path.unlink()
    except FileNotFoundError:
        pass
