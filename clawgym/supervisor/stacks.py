"""Python stacks of a run's processes, by py-spy, written into the save dir.

``py-spy dump --pid PID`` prints every thread's Python stack of a running interpreter (it needs
ptrace rights: root, or CAP_SYS_PTRACE; shared/reference/run-supervision.md section 4). The
processes are found on this node from what the job carries: Ray gives the job's driver its
submission id in ``RAY_JOB_CONFIG_JSON_ENV_VAR``, and every process the driver starts (the
trainer script, its ranks when they are its children) is found as a descendant. A dump is written
with secrets masked (a stack line may show an argument), under ``<save>/stacks/``.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import time
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
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(now if now is not None else time.time()))
    folder = Path(save_dir) / "stacks"
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"stacks-{stamp}{'-' + label if label else ''}.txt"
    header = f"# py-spy dump of {len(parts)} process(es) at {stamp}\n"
    body = "\n".join(parts) + ("\n# errors:\n" + "\n".join(result.errors) if result.errors else "")
    path.write_text(redact_text(header + body))
    result.path = path
    return result
