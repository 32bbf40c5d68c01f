"""One owner per resource: what a launch takes is recorded when it takes it, and everyone asks here.

Resources and how they are held:

- **a launch** (``<state dir>/launches/<launch id>.json``): the launcher process (pid + start
  time, so a reused pid is never mistaken for it), the save dirs its jobs write, the sandbox
  containers its jobs may start (engine, name prefix, image), and the jobs it submitted
  (a Ray submission on a dashboard, or a SLURM job on a named cluster). The record is taken
  before preflight and removed when the launch ends with nothing of it running; a launch whose
  jobs outlive it (detached, lost terminal) keeps its record until those jobs end.
- **a save dir**: held by a live launch that claims it (above); :func:`claim` refuses a save
  dir another live launch holds, under one lock, so two launches started together cannot
  both pass.
- **sandbox containers**: carry :data:`LAUNCH_LABEL` (the launch id) when the rollout starts
  them under a launch; the leftover cleanup removes a container only when its launch has
  ended, and an unlabelled one only when no live launch uses that prefix and image.
- **a port being reserved for a head** (``<state dir>/ports/<port>.lock``): an exclusive
  ``flock`` held from the reservation until the head listens on it; a second launch
  reserving the same port in the same second is refused with who holds it.

A launch is *live* while its launcher runs or a job it recorded has not ended (asked from the
job's cluster: the Ray Jobs API over HTTP, SLURM's ``scontrol`` on the cluster the record
names). When a cluster does not answer, the launch counts as live: nothing is removed and
no save dir is shared on a guess; the refusal names the record to remove when the job is
known to be gone.

Standard library only (psutil is used when importable, as Ray ships it).
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import shutil
import subprocess
import sys
import time
import urllib.error
import urllib.request
import uuid
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Dict, Iterator, List, Mapping, Optional, Sequence

#: Overrides the state dir (default ``~/.cache/clawgym``).
STATE_DIR_ENV = "CLAWGYM_STATE_DIR"
#: Docker label naming the launch that started a sandbox container.
LAUNCH_LABEL = "io.clawgym.launch.rayjob"
#: Job environment variable carrying this launch's id (the rollout labels its containers with it).
LAUNCH_ENV = "CLAWGYM_LAUNCH_ID"
#: Set in a run's supervisor and in what it runs (its ``clawgym resume``): the supervisor's id. A
#: launch carrying it is the supervisor's own restart: it starts no second supervisor, and the save
#: dir the supervised launch holds is its to use (:func:`save_dir_holder`).
SUPERVISOR_ENV = "CLAWGYM_SUPERVISOR_ID"


class Held(Exception):
    """A resource is held by someone else; ``str()`` says by whom and what to do."""


def state_dir() -> Path:
    return Path(os.environ.get(STATE_DIR_ENV) or Path.home() / ".cache" / "clawgym")


def _atomic_json(path: Path, data: Mapping[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}-{uuid.uuid4().hex[:6]}")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as fh:
        fh.write(json.dumps(dict(data), indent=2) + "\n")
    os.replace(tmp, path)


# ---------------------------------------------------------------- processes

def process_start(pid: int) -> Optional[float]:
    """Start time of a live process (seconds since the epoch, as psutil gives it), or None."""
    try:
        import psutil  # type: ignore

        proc = psutil.Process(pid)
        if proc.status() == psutil.STATUS_ZOMBIE:
            return None
        return float(proc.create_time())
    except ImportError:
        pass
    except Exception:  # noqa: BLE001 - NoSuchProcess, AccessDenied: not a process we can vouch for
        return None
    # Without psutil: /proc/<pid>/stat's start time in clock ticks after boot.
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        if fields[0] == "Z":
            return None
        boot = next(float(line.split()[1]) for line in Path("/proc/stat").read_text().splitlines()
                    if line.startswith("btime "))
        return boot + int(fields[19]) / os.sysconf("SC_CLK_TCK")
    except (OSError, IndexError, ValueError, StopIteration):
        return None


def me() -> Dict[str, float]:
    """This process: pid + start time."""
    return {"pid": os.getpid(), "create_time": process_start(os.getpid()) or 0.0}


def process_alive(ident: Mapping[str, Any]) -> bool:
    """The process with that pid and start time still runs (a reused pid does not count)."""
    started = process_start(int(ident.get("pid") or 0)) if ident.get("pid") else None
    return started is not None and abs(started - float(ident.get("create_time") or 0.0)) < 1.0


# ---------------------------------------------------------------- jobs

def ray_job_state(address: str, submission_id: str, timeout: float = 3.0) -> Optional[str]:
    """Ray's status of a job (``RUNNING``, ``SUCCEEDED``, ...), "GONE" when the dashboard does
    not know it, None when no dashboard answers. Plain HTTP: no Ray import."""
    url = f"{address.rstrip('/')}/api/jobs/{submission_id}"
    try:
        with urllib.request.urlopen(url, timeout=timeout) as resp:
            return str(json.load(resp).get("status") or "") or None
    except urllib.error.HTTPError as exc:
        return "GONE" if exc.code == 404 else None
    except (urllib.error.URLError, OSError, ValueError):
        return None


def slurm_cluster() -> Dict[str, str]:
    """This login node's SLURM cluster: ``ClusterName`` and controller (``SlurmctldHost``) of
    ``scontrol show config``; {} when scontrol does not answer."""
    exe = shutil.which("scontrol")
    if exe is None:
        return {}
    try:
        res = subprocess.run([exe, "show", "config"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return {}
    if res.returncode != 0:
        return {}
    out: Dict[str, str] = {}
    for line in res.stdout.splitlines():
        key, sep, value = line.partition("=")
        key, value = key.strip(), value.strip()
        if sep and key == "ClusterName":
            out["cluster"] = value
        elif sep and key.startswith("SlurmctldHost") and "controller" not in out:
            out["controller"] = value
    return out


def same_slurm_cluster(recorded: Mapping[str, Any], here: Optional[Mapping[str, str]] = None) -> Optional[bool]:
    """True when the cluster ``scontrol`` answers for now is the one a record names, False when
    it is another one, None when either side is unknown (a record from before clusters were named)."""
    want = {k: str(recorded.get(k) or "") for k in ("cluster", "controller")}
    if not want["cluster"]:
        return None
    here = slurm_cluster() if here is None else here
    if not here.get("cluster"):
        return None
    return here.get("cluster") == want["cluster"] and (not want["controller"] or
                                                       here.get("controller") == want["controller"])


_SLURM_ENDED = ("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "PREEMPTED", "OUT_OF_MEMORY",
                "BOOT_FAIL", "DEADLINE", "SPECIAL_EXIT")


def job_running(job: Mapping[str, Any]) -> Optional[bool]:
    """Whether a recorded job still runs: True, False (ended or unknown to its cluster), None
    (its cluster does not answer, or is not the one recorded)."""
    kind = job.get("kind")
    if kind == "ray":
        if not str(job.get("address") or "").startswith(("http://", "https://")):
            return False  # never reached a cluster (e.g. a manifest written, not applied)
        state = ray_job_state(str(job.get("address") or ""), str(job.get("submission_id") or ""))
        if state is None:
            from urllib.parse import urlparse

            # A head clawgym started on this machine and stopped since (its record is gone): the
            # job went with it. Any other silent cluster may still run it.
            u = urlparse(str(job["address"]))
            local = u.hostname in ("127.0.0.1", "localhost", "::1")
            if local and u.port and not (state_dir() / "heads" / f"{u.port}.json").exists():
                return False
            return None
        return state in ("PENDING", "RUNNING")
    if kind == "slurm":
        if same_slurm_cluster(job) is not True:
            return None
        exe = shutil.which("scontrol")
        try:
            res = subprocess.run([exe or "scontrol", "show", "job", "-o", str(job.get("job_id"))],
                                 capture_output=True, text=True, timeout=30)
        except (OSError, subprocess.TimeoutExpired):
            return None
        if res.returncode != 0:
            return False if "Invalid job id" in res.stderr else None
        state = next((t.split("=", 1)[1] for t in res.stdout.split() if t.startswith("JobState=")), "")
        return bool(state) and state not in _SLURM_ENDED
    return False  # nothing clawgym runs (e.g. a KubeRay manifest written, not applied)


# ---------------------------------------------------------------- launches

@dataclass
class Launch:
    """One launch's record: ``<state dir>/launches/<id>.json``."""

    id: str
    pid: int
    create_time: float
    started: float
    # What it is, for messages: the run names of its jobs.
    runs: List[str] = field(default_factory=list)
    # Real paths of the save dirs its jobs write.
    save_dirs: List[str] = field(default_factory=list)
    # Sandbox containers its jobs may start: [{"engine", "prefix", "image"}].
    sandboxes: List[Dict[str, str]] = field(default_factory=list)
    # Jobs it submitted: {"kind": "ray", "address", "submission_id"} or {"kind": "slurm", "job_id", "cluster", ...}.
    jobs: List[Dict[str, Any]] = field(default_factory=list)
    # The supervisors it started, one per supervised save dir: {"id", "pid", "create_time", "save_dir"}.
    # A live one holds the launch (and its save dirs) as a running job does, also between attempts.
    supervisors: List[Dict[str, Any]] = field(default_factory=list)
    # The id of the supervisor whose restart this launch is ("" for a launch a person started).
    supervised_by: str = ""

    @property
    def path(self) -> Path:
        return launches_dir() / f"{self.id}.json"

    def describe(self) -> str:
        when = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(self.started))
        runs = f" (run {', '.join(self.runs)})" if self.runs else ""
        return f"clawgym launch pid {self.pid}{runs}, started {when}"

    def launcher_alive(self) -> bool:
        return process_alive({"pid": self.pid, "create_time": self.create_time})

    def state(self) -> str:
        """"running" (its launcher runs), "jobs running" (a job it recorded runs), "unknown"
        (a job's cluster does not answer) or "ended"."""
        if self.launcher_alive():
            return "running"
        if any(process_alive(s) for s in self.supervisors):
            return "jobs running"
        answers = [job_running(j) for j in self.jobs]
        if any(a is True for a in answers):
            return "jobs running"
        if any(a is None for a in answers):
            return "unknown"
        return "ended"


def launches_dir() -> Path:
    return state_dir() / "launches"


@contextlib.contextmanager
def file_lock(path: Path) -> Iterator[None]:
    """An exclusive ``flock`` on ``path`` (made if missing) for the block: one process at a time
    reads-modifies-writes the records it guards."""
    import fcntl

    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def _lock(name: str):
    return file_lock(state_dir() / f".{name}.lock")


def launches() -> List[Launch]:
    out = []
    base = launches_dir()
    for path in sorted(base.glob("*.json")) if base.is_dir() else []:
        try:
            out.append(Launch(**json.loads(path.read_text())))
        except (OSError, ValueError, TypeError):
            continue
    return out


def _others() -> List[Launch]:
    mine = os.getpid()
    return [rec for rec in launches() if rec.pid != mine or not rec.launcher_alive()]


def _real(path: str) -> str:
    return os.path.realpath(os.path.expanduser(str(path)))


def _overlaps(a: str, b: str) -> bool:
    return a == b or a.startswith(b.rstrip("/") + "/") or b.startswith(a.rstrip("/") + "/")


def save_dir_holder(save_dir: str) -> Optional[str]:
    """Who else holds ``save_dir`` (or a folder inside or around it) now, or None.

    Held: a live launch claims it (its launcher runs, or a job it recorded still runs; a
    launch whose jobs' cluster does not answer holds it too: never shared on a guess), or
    the latest launch recorded in the save dir itself (``submitted.json`` without a recorded
    end: a launcher of another machine or state dir) has a job its cluster reports running.
    Ended launches' records are removed on the way."""
    return _launch_holding(save_dir) or _recorded_job_holding(save_dir)


def _recorded_job_holding(save_dir: str) -> Optional[str]:
    from clawgym.common.savedir import ENDED_FILE, SNAPSHOTS_RELPATH, SUBMITTED_FILE

    base = Path(save_dir) / SNAPSHOTS_RELPATH
    try:
        snaps = sorted(p for p in base.iterdir() if p.is_dir() and not p.name.startswith("."))
    except OSError:
        return None
    mine = {str(j.get("submission_id") or j.get("job_id")) for j in (_CURRENT.jobs if _CURRENT else [])}
    for snap in reversed(snaps):
        if not (snap / SUBMITTED_FILE).is_file():
            continue
        if (snap / ENDED_FILE).is_file():
            return None  # the latest launch's end is recorded
        try:
            sub = json.loads((snap / SUBMITTED_FILE).read_text())
        except (OSError, ValueError):
            return None
        sid = str(sub.get("submission_id") or "")
        job = sub.get("job") if isinstance(sub.get("job"), dict) else None
        if job is None:
            job = {"kind": "ray", "address": str(sub.get("address") or ""), "submission_id": sid}
        if sid in mine or job_running(job) is not True:
            return None
        where = job.get("address") or (f"SLURM cluster {job.get('cluster')}" if job.get("kind") == "slurm" else "")
        return f"job {sid} of the launch recorded in {snap} still running" + (f" on {where}" if where else "")
    return None


def _supervised_by_me(rec: Launch) -> bool:
    """The launch is the one this process's supervisor follows, or one of its restarts."""
    mine = os.environ.get(SUPERVISOR_ENV)
    return bool(mine) and (rec.supervised_by == mine or any(s.get("id") == mine for s in rec.supervisors))


def _launch_holding(save_dir: str) -> Optional[str]:
    want = _real(save_dir)
    for rec in _others():
        if not any(_overlaps(want, d) for d in rec.save_dirs):
            continue
        if _supervised_by_me(rec):
            continue  # this process is that launch's supervisor's restart: the save dir is the run's own
        state = rec.state()
        if state == "ended":
            _forget(rec)
            continue
        if state == "unknown":
            return (f"{rec.describe()}: its launcher is gone and its job's cluster does not answer, so the job "
                    f"may still write there (if it is gone for sure, remove {rec.path})")
        jobs = ", ".join(str(j.get("submission_id") or j.get("job_id")) for j in rec.jobs)
        return rec.describe() + (f", job(s) {jobs}" if jobs else "") + (
            " still running" if state == "running" else " still running after their launcher ended")
    return None


def sandbox_owners(engine: str, prefix: str, image: str) -> List[Launch]:
    """Live launches (other than this process's) whose jobs may run containers of that prefix and image."""
    out = []
    for rec in _others():
        if any(s.get("engine") == engine and s.get("prefix") == prefix and s.get("image") == image
               for s in rec.sandboxes) and rec.state() != "ended":
            out.append(rec)
    return out


def launch_ended(launch_id: str) -> bool:
    """A container labelled with ``launch_id`` may go: its launch's record is gone or has ended."""
    path = launches_dir() / f"{launch_id}.json"
    try:
        rec = Launch(**json.loads(path.read_text()))
    except FileNotFoundError:
        return True
    except (OSError, ValueError, TypeError):
        return False  # unreadable: never removed on a guess
    return rec.state() == "ended"


_CURRENT: Optional[Launch] = None


def current() -> Optional[Launch]:
    """This process's launch, once :func:`claim` took it."""
    return _CURRENT


def claim(*, runs: Sequence[str], save_dirs: Sequence[str], sandboxes: Sequence[Mapping[str, str]]) -> Launch:
    """Record this launch and what it takes; raises :class:`Held` (nothing recorded) when
    another live launch holds one of the save dirs. Checked and written under one lock."""
    global _CURRENT
    wanted = sorted({_real(d) for d in save_dirs if d})
    with _lock("launches"):
        held = []
        for d in wanted:
            who = save_dir_holder(d)
            if who is not None:
                held.append(f"  paths.save={d} is held by {who}")
        if held:
            raise Held("\n".join(held))
        rec = _CURRENT or Launch(id=uuid.uuid4().hex[:16], pid=os.getpid(),
                                 create_time=me()["create_time"], started=time.time(),
                                 supervised_by=os.environ.get(SUPERVISOR_ENV, ""))
        rec.runs = list(dict.fromkeys([*rec.runs, *runs]))
        rec.save_dirs = sorted({*rec.save_dirs, *wanted})
        for s in sandboxes:
            item = {k: str(s[k]) for k in ("engine", "prefix", "image")}
            if item not in rec.sandboxes:
                rec.sandboxes.append(item)
        _atomic_json(rec.path, asdict(rec))
        _CURRENT = rec
    return rec


def add_job(job: Mapping[str, Any]) -> None:
    """Record a job this launch submitted (so its save dir and containers stay held while it runs)."""
    rec = _CURRENT
    if rec is None:
        return
    with _lock("launches"):
        rec.jobs.append(dict(job))
        _atomic_json(rec.path, asdict(rec))


def add_supervisor(supervisor: Mapping[str, Any]) -> None:
    """Record the supervisor this launch started for one save dir ({"id", "pid", "create_time",
    "save_dir"}): the launch's record stays while it runs, and stop finds it here."""
    rec = _CURRENT
    if rec is None:
        return
    with _lock("launches"):
        rec.supervisors.append(dict(supervisor))
        _atomic_json(rec.path, asdict(rec))


def supervisors_of(submission_id: str) -> List[Dict[str, Any]]:
    """The live supervisors recorded by launches that submitted ``submission_id`` (or by a
    launch that a supervisor's restart belongs to)."""
    out = []
    recs = launches()
    by_id = {s.get("id"): s for r in recs for s in r.supervisors}
    for rec in recs:
        if not any(str(j.get("submission_id") or "") == submission_id for j in rec.jobs):
            continue
        for s in rec.supervisors + ([by_id[rec.supervised_by]] if rec.supervised_by in by_id else []):
            if process_alive(s) and s not in out:
                out.append(s)
    return out


def release(*, jobs_left: bool = False) -> None:
    """The launch ends: its record goes, unless ``jobs_left`` (jobs it submitted keep running:
    the record then holds their save dirs and containers until they end)."""
    global _CURRENT
    rec, _CURRENT = _CURRENT, None
    if rec is None or jobs_left:
        return
    _forget(rec)


def _forget(rec: Launch) -> None:
    try:
        rec.path.unlink()
    except FileNotFoundError:
        pass


# ---------------------------------------------------------------- ports

class PortLock:
    """An exclusive lock on one port number, held by this process until :meth:`release`.

    A port reserved for a head is a bound socket that never listens, and two such sockets
    with SO_REUSEADDR can share a port: the lock makes the reservation exclusive between
    launches on this machine (``<state dir>/ports/<port>.lock``, holding the holder's pid)."""

    def __init__(self, port: int, what: str) -> None:
        import fcntl

        self.port = int(port)
        path = state_dir() / "ports" / f"{self.port}.lock"
        path.parent.mkdir(parents=True, exist_ok=True)
        self.fd: Optional[int] = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(self.fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            holder = ""
            try:
                holder = os.pread(self.fd, 200, 0).decode(errors="replace").strip()
            except OSError:
                pass
            os.close(self.fd)
            self.fd = None
            if exc.errno not in (errno.EAGAIN, errno.EACCES, errno.EWOULDBLOCK):
                raise
            raise Held(f"{what}={self.port}: reserved by {holder or 'another clawgym launch'} for a Ray head it is "
                       f"starting") from None
        os.ftruncate(self.fd, 0)
        os.pwrite(self.fd, f"clawgym launch pid {os.getpid()} ({' '.join(sys.argv[:1])})".encode(), 0)

    def release(self) -> None:
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None


def port_holder(port: int) -> Optional[str]:
    """Who (another process) holds the reservation lock of ``port`` now, or None."""
    try:
        lock = PortLock(port, "port")
    except Held as exc:
        return str(exc).split(": reserved by ", 1)[-1].split(" for a Ray head", 1)[0]
    except OSError:
        return None
    lock.release()
    return None
