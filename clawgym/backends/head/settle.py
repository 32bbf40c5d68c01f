"""What an earlier clawgym launch left on a head's dashboard port: reused, cleaned up, replaced or refused."""

from __future__ import annotations

import os
import time
from typing import Mapping, Optional, Sequence

from clawgym.backends.head.jobs import running_jobs
from clawgym.backends.head.liveness import head_state
from clawgym.backends.head.processes import record_processes
from clawgym.backends.head.records import HeadError, HeadRecord, dashboard_port_of, load_record
from clawgym.backends.head.start import stop_head
from clawgym.backends.head.users import live_users, user_alive


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
        if not user_alive(starter):
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
