"""Python stacks of a run's processes, by py-spy, written into the save dir.

``py-spy dump --pid PID`` prints every thread's Python stack of a running interpreter (it needs
ptrace rights: root, or CAP_SYS_PTRACE; shared/reference/run-supervision.md section 4). The
processes are found on this node from what the job carries: Ray gives the job's driver its
submission id in ``RAY_JOB_CONFIG_JSON_ENV_VAR``, and every process the driver starts (the
trainer script, its ranks when they are its children) is found as a descendant. A dump is written
with secrets masked (a stack line may show an argument), under ``<save>/stacks/``.

A job whose processes run on other nodes (an existing cluster, a multi-node SLURM allocation) is
dumped through Ray's own stack endpoint instead: the dashboard's ``/worker/traceback`` (what the
dashboard's "Stack Trace" button calls) runs py-spy on the node of the process, by the node's agent
(ray/dashboard/modules/reporter/reporter_head.py). The processes are the job's driver (the Jobs
API's ``driver_info``) and its actors (the state API, ``/api/v0/actors`` filtered by the job id):
slime's trainer ranks and rollout engines are actors. Ray serves the endpoint only when the head
runs with ``RAY_DASHBOARD_ENABLE_PROFILING=1`` (heads clawgym starts do, see
clawgym/plan/build.py ``head_env``); otherwise it answers 403 and the dump says how to turn it on.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import json
import time
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, Iterable, List, Optional

from clawgym.common.secrets import redact_text

#: Seconds one py-spy dump may take (a process in uninterruptible sleep can stall ptrace).
DUMP_TIMEOUT_S = 30.0


@dataclass
class StackDump:
    """One dump: the file written and, per process, the innermost frame of its main thread."""

    path: Optional[Path]
    waits: Dict[int, str] = field(default_factory=dict)  # pid -> "function (file:line)"
    errors: List[str] = field(default_factory=list)

    def summary(self) -> str:
        where = "; ".join(f"pid {pid} waits in {frame}" for pid, frame in sorted(self.waits.items()))
        return where or "no stack could be read (" + "; ".join(self.errors or ["no process found"]) + ")"


def _children() -> Dict[int, List[int]]:
    out: Dict[int, List[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as fh:
                stat = fh.read().decode("utf-8", "replace")
        except OSError:
            continue
        # comm may hold spaces and parentheses: the ppid is the second field after the last ")".
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        out.setdefault(ppid, []).append(int(entry))
    return out


def job_pids(submission_id: str) -> List[int]:
    """This node's processes of the job ``submission_id``: those whose environment names it (Ray's
    driver, through RAY_JOB_CONFIG_JSON_ENV_VAR), and their descendants."""
    needle = submission_id.encode()
    roots = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        try:
            with open(f"/proc/{entry}/environ", "rb") as fh:
                env = fh.read()
        except OSError:
            continue
        for var in env.split(b"\0"):
            if var.startswith(b"RAY_JOB_CONFIG_JSON_ENV_VAR=") and needle in var:
                roots.append(int(entry))
                break
    tree = _children()
    seen: List[int] = []
    todo = list(roots)
    while todo:
        pid = todo.pop()
        if pid in seen:
            continue
        seen.append(pid)
        todo.extend(tree.get(pid, []))
    return sorted(seen)


def _is_python(pid: int) -> bool:
    try:
        exe = os.path.basename(os.readlink(f"/proc/{pid}/exe"))
    except OSError:
        return False
    return exe.startswith("python")


_THREAD = re.compile(r'^Thread \S+ \([^)]*\): "(?P<name>[^"]*)"')


def innermost(dump: str) -> Optional[str]:
    """The innermost frame of the main thread in one ``py-spy dump`` output (the first frame line
    under ``Thread ... "MainThread"``; the first thread's when none is named so)."""
    frames: Dict[str, str] = {}
    current = None
    for line in dump.splitlines():
        m = _THREAD.match(line.strip())
        if m:
            current = m.group("name")
            continue
        if current and current not in frames and line.startswith("    ") and line.strip():
            frames[current] = line.strip()
    return frames.get("MainThread") or next(iter(frames.values()), None)


def dump(pids: Iterable[int], save_dir: Path, *, now: Optional[float] = None, label: str = "") -> StackDump:
    """py-spy dumps of ``pids`` (Python processes only) into ``<save_dir>/stacks/stacks-<UTC time>.txt``."""
    pyspy = shutil.which("py-spy")
    result = StackDump(path=None)
    if not pyspy:
        result.errors.append("py-spy is not installed (pip install py-spy)")
        return result
    parts: List[str] = []
    for pid in pids:
        if not _is_python(pid):
            continue
        try:
            done = subprocess.run([pyspy, "dump", "--pid", str(pid)], capture_output=True, text=True,
                                  timeout=DUMP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            result.errors.append(f"pid {pid}: py-spy took more than {DUMP_TIMEOUT_S:.0f} s")
            continue
        if done.returncode != 0:
            result.errors.append(f"pid {pid}: py-spy exited {done.returncode}: {done.stderr.strip()[-300:]}")
            continue
        parts.append(done.stdout)
        frame = innermost(done.stdout)
        if frame:
            result.waits[pid] = frame
    if not parts and not result.errors:
        result.errors.append("no Python process of the job on this node")
    result.path = _write(parts, result.errors, save_dir, now, label)
    return result


def _write(parts: List[str], errors: List[str], save_dir: Path, now: Optional[float], label: str) -> Path:
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(now if now is not None else time.time()))
    folder = Path(save_dir) / "stacks"
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"stacks-{stamp}{'-' + label if label else ''}.txt"
    header = f"# py-spy dump of {len(parts)} process(es) at {stamp}\n"
    body = "\n".join(parts) + ("\n# errors:\n" + "\n".join(errors) if errors else "")
    path.write_text(redact_text(header + body))
    return path


# ---------------------------------------------------------------- through Ray's dashboard

#: The environment variable that turns on the dashboard's profiling endpoints (ray/_private/ray_constants.py).
RAY_PROFILING_ENV = "RAY_DASHBOARD_ENABLE_PROFILING"


@dataclass(frozen=True)
class JobProcess:
    """One process of a Ray job, as Ray records it."""

    pid: int
    node_id: Optional[str]
    what: str  # "driver", or "actor <class> <actor id>"


def _get(address: str, path: str, timeout: float) -> str:
    with urllib.request.urlopen(address.rstrip("/") + path, timeout=timeout) as resp:  # noqa: S310 - the run's dashboard
        return resp.read().decode("utf-8", "replace")


def ray_job_processes(address: str, submission_id: str, *, timeout: float = 10.0) -> List[JobProcess]:
    """The job's driver and its live actors, with the node each runs on (Jobs API + state API)."""
    job = json.loads(_get(address, f"/api/jobs/{urllib.parse.quote(submission_id)}", timeout))
    out: List[JobProcess] = []
    driver = job.get("driver_info") or {}
    if driver.get("pid"):
        out.append(JobProcess(int(driver["pid"]), job.get("driver_node_id"), "driver"))
    job_id = job.get("job_id") or driver.get("id")
    if job_id:
        query = urllib.parse.urlencode({"filter_keys": "job_id", "filter_predicates": "=", "filter_values": job_id,
                                        "detail": "true", "limit": "10000"})
        data = json.loads(_get(address, f"/api/v0/actors?{query}", timeout)).get("data") or {}
        rows = (data.get("result") or {}).get("result") or []
        for a in rows:
            if a.get("state") == "ALIVE" and a.get("pid"):
                out.append(JobProcess(int(a["pid"]), a.get("node_id"),
                                      f"actor {a.get('class_name') or '?'} {a.get('actor_id', '')[:12]}"))
    return out


def dump_via_ray(address: str, submission_id: str, save_dir: Path, *, now: Optional[float] = None,
                 label: str = "", timeout: float = DUMP_TIMEOUT_S) -> StackDump:
    """Stacks of every process Ray knows of the job, on whatever node it runs, into the save dir."""
    result = StackDump(path=None)
    parts: List[str] = []
    try:
        procs = ray_job_processes(address, submission_id)
    except (OSError, ValueError) as exc:
        procs = []
        result.errors.append(f"the dashboard at {address} did not list the job's processes: {exc}")
    for proc in procs:
        query = urllib.parse.urlencode({"pid": proc.pid, **({"node_id": proc.node_id} if proc.node_id else {}),
                                        "native": "0", "subprocesses": "1"})
        try:
            text = _get(address, f"/worker/traceback?{query}", timeout)
        except urllib.error.HTTPError as exc:
            if exc.code == 403:
                result.errors.append(f"the dashboard at {address} serves no stacks (profiling is off): start the "
                                     f"head with {RAY_PROFILING_ENV}=1")
                break
            result.errors.append(f"{proc.what} (pid {proc.pid}): the dashboard answered {exc.code}: "
                                 f"{exc.read().decode('utf-8', 'replace').strip()[-300:]}")
            continue
        except OSError as exc:
            result.errors.append(f"{proc.what} (pid {proc.pid}): {exc}")
            continue
        node = f" on node {proc.node_id[:12]}" if proc.node_id else ""
        parts.append(f"## {proc.what}, pid {proc.pid}{node}\n{text}")
        frame = innermost(text)
        if frame:
            result.waits[proc.pid] = f"{frame} [{proc.what}{node}]"
    if not procs and not result.errors:
        result.errors.append("Ray lists no live process of the job (a driver is listed once it calls ray.init)")
    result.path = _write(parts, result.errors, save_dir, now, label)
    return result


def dump_job(submission_id: str, save_dir: Path, *, address: Optional[str] = None, now: Optional[float] = None,
             label: str = "") -> StackDump:
    """The job's stacks, wherever its processes run: through Ray's stack endpoint when the job's
    dashboard is known (every node), else, or when that reads no stack, by PID on this node."""
    if address:
        via_ray = dump_via_ray(address, submission_id, save_dir, now=now, label=label)
        if via_ray.waits:
            return via_ray
        local = dump(job_pids(submission_id), save_dir, now=now, label=label)
        if local.path and via_ray.path and local.path != via_ray.path:
            via_ray.path.unlink(missing_ok=True)
        local.errors = [f"through Ray: {e}" for e in via_ray.errors] + local.errors
        if local.path:
            # The file says why Ray's endpoint read nothing as well.
            text = local.path.read_text()
            if "# errors:" not in text and local.errors:
                local.path.write_text(text + "\n# errors:\n" + redact_text("\n".join(local.errors)))
        return local
    return dump(job_pids(submission_id), save_dir, now=now, label=label)
