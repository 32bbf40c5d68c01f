"""A local head lost mid-run: known dead from its record, cleared away, and replaced for the run's supervisor.

A head clawgym started whose GCS or raylet is gone (killed, OOM-killed, crashed) cannot come back:
its jobs died with it. The run's supervisor (:mod:`clawgym.supervisor.daemon`) asks
:func:`why_lost` when the head stops answering, so it need not wait ``ray.lost_contact_s`` for a
head it can see is dead; then, before the restart, :func:`clear` stops what is left of the old
head through its record (its dashboard, agents, workers still holding the GPUs: found by recorded
pid + create time, session and marker, never by a process search) and waits until none is left,
and :func:`begin_replacement` starts the new head the restart runs on, on the recorded ports when
they are free.

The new head has one owner, recorded before ``ray start`` runs: the supervisor (the head's record
lists it as the head's only user). It is the one process that lives exactly as long as the run in
every way a run is launched (in the foreground, detached, after a lost terminal), and the restart
it runs (``clawgym resume``) joins the head as any later launch with the same settings would, then
leaves it to the supervisor. :func:`release` ends that ownership at the run's end, as the launch's
own head would have been ended (stopped, unless kept).
"""

from __future__ import annotations

import copy
import time
from types import SimpleNamespace
from typing import Any, Callable, List, Mapping, Optional, Tuple
from urllib.parse import urlparse

from clawgym.backends.head.jobs import running_jobs
from clawgym.backends.head.liveness import core_gone
from clawgym.backends.head.ports import free_port
from clawgym.backends.head.processes import record_processes
from clawgym.backends.head.records import HeadError, HeadRecord, load_record, record_lock
from clawgym.backends.head.start import HeadStart, begin_head, stop_head
from clawgym.backends.head.users import leave_head

#: How long :func:`clear` waits for the old head's processes to be gone after stopping them.
CLEAR_TIMEOUT_S = 60.0
#: Seconds between SIGTERM and SIGKILL for what is left of a dead head. A live head's daemons get
#: 3 s to shut down in order; without their GCS, Ray's agents and autoscaler monitor try to report
#: their end to it and outlive any grace (seen: 3 of 11 still there after 3 s), and a trainer whose
#: head is gone has nothing to save (slime saves nothing on a signal): a second is its chance to exit.
DEAD_HEAD_GRACE_S = 1.0


def recorded_head(address: str) -> Optional[HeadRecord]:
    """The head clawgym recorded with that dashboard address, or None (not ours, or no record)."""
    try:
        port = urlparse(address if "://" in address else f"http://{address}").port
        rec = load_record(int(port)) if port else None
    except (HeadError, ValueError):
        return None
    if rec is None or rec.dashboard_address.rstrip("/") != address.rstrip("/"):
        return None
    return rec


def why_lost(address: str) -> Optional[str]:
    """Why the head clawgym recorded at ``address`` is lost for good (its recorded GCS or raylet is
    gone), in words for the evidence line; None when it is not a head clawgym recorded, still being
    started, or its core processes still run (then only its silence for ``ray.lost_contact_s`` says
    it is lost)."""
    rec = recorded_head(address)
    if rec is None or rec.status == "starting":
        return None
    gone = core_gone(rec)
    return f"its {gone} ({rec.path}) {'are' if ',' in gone else 'is'} gone" if gone else None


def clear(rec: HeadRecord, *, say: Callable[[str], None], timeout: float = CLEAR_TIMEOUT_S) -> int:
    """Stop what is left of a dead head (``rec``) through its record, wait until nothing of it runs
    (its GPUs free), and remove its record; the number of its processes that were left.

    Only a head whose GCS or raylet is gone is cleared: nothing of it can work again, and its
    workers may still hold GPUs the new head needs. A record already gone or replaced (same port,
    another marker) is left as it is. Raises HeadError when processes of it outlive ``timeout``."""
    with record_lock(rec.dashboard_port):
        current = load_record(rec.dashboard_port)
        if current is None or current.marker != rec.marker:
            return 0
        if not core_gone(current):
            raise HeadError(f"the Ray head at {rec.dashboard_address} still runs its GCS and raylet: it is never "
                            "stopped on a guess")
        left = record_processes(current)
        if left:
            say(f"[clawgym] stopping the {len(left)} processes left of the lost Ray head at "
                f"{rec.dashboard_address} (through its record {rec.path}); its GPUs are free once they are gone")
        stop_head(current, grace=DEAD_HEAD_GRACE_S, quiet=True)
    deadline = time.time() + timeout
    while record_processes(rec):
        if time.time() > deadline:
            pids = ", ".join(str(pid) for pid in sorted(record_processes(rec)))
            raise HeadError(f"processes of the lost Ray head at {rec.dashboard_address} still run after "
                            f"{timeout:.0f}s (pids {pids}); its GPUs are not free\n  fix: see what holds them "
                            f"(ps -o pid,stat,cmd -p {pids}), then `clawgym resume <save dir>`")
        time.sleep(0.2)
    return len(left)


def begin_replacement(config: Mapping[str, Any], environ: Mapping[str, str]) -> Tuple[HeadStart, List[str]]:
    """Begin the head that replaces a lost one: the run's recorded config's ``ray start`` (argv,
    head environment and secrets exactly as the launch's plan has them, so the restart's
    ``clawgym resume`` finds it and joins it), owned by this process from its record on.

    Returns the head being started and the overrides the restart needs: none on the recorded ports;
    ``ray.port=P ray.dashboard_port=D`` when another process took one of them meanwhile, with free
    ports chosen as the local backend chooses the ports it is not told. Raises HeadError."""
    from clawgym.launch.rayjob import resolve_secrets
    from clawgym.plan import build as plan

    def begin(c: Mapping[str, Any]) -> HeadStart:
        argv = plan.ray_start_argv(c)
        if argv is None:
            raise HeadError("the run's config starts no local head (ray.address is set)")
        names = plan.secret_env(c, use_wandb=plan.wandb_enabled(c, environ))
        secrets = resolve_secrets(SimpleNamespace(secret_env=names), environ)
        return begin_head(argv, plan.head_env(c), secrets=secrets, quiet=True)

    try:
        return begin(config), []
    except HeadError as err:
        taken = str(err)
    c = copy.deepcopy(dict(config))
    c["ray"] = dict(c["ray"])
    host = "127.0.0.1" if c["ray"]["dashboard_host"] in ("0.0.0.0", "::", "") else c["ray"]["dashboard_host"]
    c["ray"]["port"], c["ray"]["dashboard_port"] = free_port(c["ray"]["node_ip"]), free_port(host)
    try:
        head = begin(c)
    except HeadError as err:
        raise HeadError(f"{taken}\n  and on free ports: {err}") from None
    return head, [f"ray.port={c['ray']['port']}", f"ray.dashboard_port={c['ray']['dashboard_port']}"]


def release(rec: HeadRecord, *, keep: bool, reason: str, say: Callable[[str], None]) -> None:
    """End this process's ownership of the head it started (``rec``): kept when ``keep`` (recorded
    with ``reason``), else stopped through its record once no other clawgym launch uses it and no
    job runs on it (a job still running keeps it, recorded as such, as a launch's own head is)."""
    addr = rec.dashboard_address
    with record_lock(rec.dashboard_port):
        on_disk = load_record(rec.dashboard_port)
        if on_disk is None or on_disk.marker != rec.marker:
            return  # gone already (lost too, and cleared)
        current, others = leave_head(rec, keep=keep, reason=reason)
        if keep or current.kept:
            why = reason if keep else current.kept_reason or "ray.keep_head"
            say(f"[clawgym] keeping the Ray head at {addr} ({why}); stop it later: clawgym jobs stop-head "
                f"--address {addr}")
            return
        if others:
            say(f"[clawgym] leaving the Ray head at {addr} to the clawgym launch(es) still using it "
                f"({', '.join('pid ' + str(int(u['pid'])) for u in others)}); the last one stops it")
            return
        try:
            busy = running_jobs(addr)
        except Exception:  # noqa: BLE001 - a head that does not answer runs nothing we could follow
            busy = []
        if busy:
            leave_head(current, keep=True, reason=f"jobs {', '.join(busy)} were running when the run's "
                                                  "supervisor ended")
            say(f"[clawgym] keeping the Ray head at {addr}: job(s) still running there: {', '.join(busy)}; "
                f"stop it later: clawgym jobs stop-head --address {addr}")
            return
        pids = stop_head(current, quiet=True)
    say(f"[clawgym] stopped the Ray head at {addr} that this supervisor started ({len(pids)} processes); "
        "nothing of it is left")
