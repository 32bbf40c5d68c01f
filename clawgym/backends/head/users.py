"""Who uses a local head: the launches listed in its record (pid + start time), and what that makes it.

The launch that starts a head is its first user; a later launch with the same settings joins;
each leaves when it ends, and the last one out stops the head unless it is kept."""

from __future__ import annotations

import os
from typing import Any, Dict, List, Mapping, Tuple

from clawgym.backends.head.processes import psutil_module, verified
from clawgym.backends.head.records import HeadError, HeadRecord, load_record, record_lock, write_record


def this_launch() -> Dict[str, float]:
    """This process as a head user: pid + start time (a pid alone may be reused)."""
    return {"pid": os.getpid(), "create_time": psutil_module().Process().create_time()}


def user_alive(user: Mapping[str, Any]) -> bool:
    return verified(int(user.get("pid", 0)), float(user.get("create_time", 0.0))) is not None


def live_users(rec: HeadRecord) -> List[Dict[str, float]]:
    """Users of the head whose launcher process still runs."""
    users = list(rec.users)
    if not users and rec.owner_pid:
        # A record from before users were listed: its owner pid, unverified.
        users = [{"pid": rec.owner_pid, "create_time": rec.start_time}]
        return [u for u in users if psutil_module().pid_exists(u["pid"])]
    return [u for u in users if user_alive(u)]


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
        current.users = [u for u in current.users if user_alive(u) and int(u["pid"]) != me["pid"]] + [me]
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
    current.users = [u for u in current.users if user_alive(u) and int(u["pid"]) != me]
    if keep:
        current.kept, current.kept_reason = True, reason or current.kept_reason
    write_record(current)
    return current, list(current.users)
