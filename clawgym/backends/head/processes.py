"""The processes of a local head: found (by record, session and marker), verified, terminated.

A pid alone is never trusted: each process is checked against its create time, or its
marker and start time, before a signal reaches it."""

from __future__ import annotations

import os
import signal
import sys
from pathlib import Path
from typing import Any, Dict, Iterable, List, Mapping, Optional

from clawgym.backends.head.records import MARKER_ENV, HeadRecord, ProcessId


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


def _alive(proc) -> bool:
    psutil = psutil_module()
    try:
        return proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE
    except (psutil.NoSuchProcess, psutil.AccessDenied):
        return False


def verified(pid: int, create_time: float):
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
        proc = verified(p.pid, p.create_time)
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


def proc_name(proc) -> str:
    try:
        return proc.name()
    except Exception:
        return ""
