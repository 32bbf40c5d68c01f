"""``clawgym jobs``: follow, inspect and stop Ray jobs, and the local heads clawgym started.

    clawgym jobs list [--address A]
    clawgym jobs status ID [--address A]
    clawgym jobs logs ID [--follow] [--address A]
    clawgym jobs stop ID [--address A]
    clawgym jobs stack ID [--address A] [--out DIR]
    clawgym jobs heads
    clawgym jobs stop-head --address A [--force]
    clawgym jobs slurm

``stack`` dumps the Python stacks of the job's processes on this node (py-spy, as the supervisor
does at a hang) into the job's save dir (``<save>/stacks/``; ``--out`` elsewhere) and says where
each waits.

``stop`` of a supervised run's job (restart.enabled=true) stops the run for good: its supervisor
records the user's stop, stops the job it follows and is never restarted (docs/guide/when-a-run-dies.md).
``stop slurm:<SLURM id>`` (the id a SLURM run shows) records the user's stop and cancels that batch job
(only one clawgym submitted): the supervisor in its allocation never requeues it.

``slurm`` lists the SLURM batch jobs clawgym submitted (cluster=slurm) with their state.

Without ``--address`` (not for stop-head): ``$RAY_ADDRESS`` when it is an http address,
else the only live head that clawgym started and recorded.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from typing import List, Optional
from clawgym.common.exit_codes import FAILED, REFUSED

from clawgym.pipeline import clusters


class _UserError(Exception):
    pass


def add_parser(subparsers) -> None:
    p = subparsers.add_parser("jobs", help="follow, inspect and stop Ray jobs; list and stop clawgym's local heads",
                              description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="jobs_command", metavar="ACTION")
    sub.required = True

    def with_address(sp):
        sp.add_argument("--address", help="dashboard http address of the cluster (default: see above)")
        return sp

    with_address(sub.add_parser("list", help="jobs on the cluster"))
    sp = with_address(sub.add_parser("status", help="status of a job"))
    sp.add_argument("submission_id")
    sp = with_address(sub.add_parser("logs", help="print a job's output"))
    sp.add_argument("submission_id")
    sp.add_argument("--follow", "-f", action="store_true",
                    help="stream until the job ends (tees to its log file; exit status is the job's; "
                         "Ctrl-C stops following, not the job)")
    sp = with_address(sub.add_parser("stop", help="stop a job and wait until it has stopped"))
    sp.add_argument("submission_id")
    sp.add_argument("--timeout", type=float, default=60.0, help="seconds to wait for the job to stop")
    sp = with_address(sub.add_parser("stack", help="dump the Python stacks of a job's processes on this node (py-spy)"))
    sp.add_argument("submission_id")
    sp.add_argument("--out", help="folder to write the dump under (default: the job's save dir)")
    sub.add_parser("heads", help="local Ray heads clawgym started and recorded")
    sp = sub.add_parser("stop-head", help="stop a local Ray head that clawgym started")
    # Always explicit: stopping a head is never guessed.
    sp.add_argument("--address", required=True, help="dashboard http address of the head (see: clawgym jobs heads)")
    sp.add_argument("--force", action="store_true", help="stop it even while jobs run on it")
    sub.add_parser("slurm", help="SLURM batch jobs clawgym submitted (cluster=slurm), with their state")
    p.set_defaults(func=run)


def resolve_address(given: Optional[str]) -> str:
    if given:
        return given if "://" in given else f"http://{given}"
    env = os.environ.get("RAY_ADDRESS", "")
    if env.startswith(("http://", "https://")):
        return env
    live = clusters.live_heads(patience=2.0)
    if len(live) == 1:
        return live[0].dashboard_address
    if not live:
        raise _UserError("no --address given and no live Ray head started by clawgym is recorded\n"
                         "  fix: pass --address http://<head>:<dashboard port> (or set RAY_ADDRESS)")
    raise _UserError("no --address given and several Ray heads started by clawgym run: "
                     + ", ".join(r.dashboard_address for r in live) + "\n  fix: pick one with --address")


def _answering(address: str) -> str:
    """The address, once its dashboard answers: a dead address is not "no such job"."""
    if not clusters.dashboard_answers(address, timeout=5.0):
        raise _UserError(f"no Ray dashboard answers at {address}\n"
                         f"  fix: check --address (the dashboard's http address, e.g. http://<head>:8265); "
                         f"`clawgym jobs heads` lists the heads clawgym started")
    return address


def _cmd_list(args) -> int:
    from clawgym.launch.rayjob import jobs_client

    client = jobs_client(_answering(resolve_address(args.address)))
    jobs = sorted(client.list_jobs(), key=lambda j: j.start_time or 0)
    print(f"{'submission id':<48} {'status':<10} {'started':<19} entrypoint")
    for j in jobs:
        started = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(j.start_time / 1000)) if j.start_time else "-"
        print(f"{(j.submission_id or j.job_id or '-'):<48} {j.status.value:<10} {started:<19} {j.entrypoint[:60]}")
    return 0


def _handle(args, *, log_file: Optional[str] = None):
    from clawgym.launch.rayjob import JobHandle

    address = _answering(resolve_address(args.address))
    handle = JobHandle.attach(address, args.submission_id, log_file=log_file)
    try:
        info = handle.client.get_job_info(args.submission_id)
    except Exception as exc:
        raise _UserError(f"no job {args.submission_id} at {address} ({str(exc).splitlines()[0] if str(exc) else exc})\n"
                         f"  fix: check the id with: clawgym jobs list --address {address}")
    return handle, info


def _cmd_status(args) -> int:
    handle, info = _handle(args)
    msg = f" ({info.message})" if info.message else ""
    print(f"{args.submission_id}: {info.status.value}{msg}")
    return 0


def _cmd_logs(args) -> int:
    handle, info = _handle(args)
    if not args.follow:
        sys.stdout.write(handle.client.get_job_logs(args.submission_id))
        return 0
    handle.log_file = (info.metadata or {}).get("clawgym_log_file") or None
    # Ctrl-C here only stops following; `clawgym jobs stop` stops the job.
    return handle.follow(stop_on_interrupt=False, log_mode="w")


def _cmd_stop(args) -> int:
    if args.submission_id.startswith("slurm:"):
        return _cmd_stop_slurm(args)
    handle, info = _handle(args)
    save = (info.metadata or {}).get("clawgym_save_dir")
    if save:
        from clawgym.supervisor import process

        sup = process.running(save)
        if sup is not None:
            # A supervised run: stopped for good through its supervisor (never restarted), which
            # stops the job it follows now (a restart may have replaced the id given).
            print(f"{args.submission_id}: stopping the supervised run in {save} for good (supervisor pid "
                  f"{sup['pid']})")
            rc = process.stop_for_good(save, by="user", why=f"clawgym jobs stop {args.submission_id}",
                                       wait_s=args.timeout + 30.0)
            if rc is None:
                print(f"{args.submission_id}: the supervisor did not end within {args.timeout + 30.0:.0f}s; "
                      f"see {process.log_path(save)}", file=sys.stderr)
                return FAILED
            info = handle.client.get_job_info(args.submission_id)
    if info.status.is_terminal():
        print(f"{args.submission_id}: already {info.status.value}")
        return 0
    status = handle.stop(timeout=args.timeout)
    print(f"{args.submission_id}: {status}")
    return 0 if status in ("STOPPED", "SUCCEEDED", "FAILED") else 1


def _cmd_stop_slurm(args) -> int:
    """``clawgym jobs stop slurm:<id>``: the id the launch and ``clawgym runs`` show for a SLURM run."""
    job_id = args.submission_id.split(":", 1)[1]
    if not job_id.isdigit():
        raise _UserError(f"{args.submission_id} is not a SLURM job id (slurm:<number>)\n"
                         f"  fix: clawgym jobs slurm lists the SLURM jobs clawgym submitted")
    if args.address:
        raise _UserError(f"--address names a Ray dashboard; {args.submission_id} is a SLURM job\n"
                         f"  fix: drop --address")
    state = clusters.stop_slurm_run(job_id, timeout=args.timeout)
    if state == "UNKNOWN":
        print(f"{args.submission_id}: SLURM did not report the job ended within {args.timeout:.0f}s; "
              f"see squeue -j {job_id}", file=sys.stderr)
        return FAILED
    print(f"{args.submission_id}: {state}")
    return 0


def _cmd_stack(args) -> int:
    from pathlib import Path

    from clawgym.supervisor import stacks

    handle, info = _handle(args)
    if info.status.is_terminal():
        raise _UserError(f"job {args.submission_id} is {info.status.value}: no process to dump\n"
                         f"  fix: clawgym jobs list shows the jobs still running")
    out = args.out or (info.metadata or {}).get("clawgym_save_dir")
    if not out:
        raise _UserError(f"job {args.submission_id} names no save dir in its metadata\n"
                         f"  fix: pass --out DIR")
    # Every node's processes through Ray's stack endpoint; by PID on this node where that reads nothing.
    dumped = stacks.dump_job(args.submission_id, Path(out), address=handle.address, label="on-demand")
    if not dumped.waits and not stacks.job_pids(args.submission_id):
        if dumped.path:
            dumped.path.unlink(missing_ok=True)  # a refusal leaves no file behind
        raise _UserError(f"no stack of job {args.submission_id} could be read: "
                         + "; ".join(dumped.errors or ["no process found"])
                         + f"\n  fix: start the head with {stacks.RAY_PROFILING_ENV}=1 (heads clawgym starts have it), "
                         f"or run clawgym jobs stack on the node of the job's driver")
    print(f"{args.submission_id}: {dumped.summary()}")
    print(f"stacks: {dumped.path}")
    return 0 if dumped.waits else REFUSED


def _cmd_heads(args) -> int:
    records = clusters.recorded_heads()
    if not records:
        print("no Ray heads started by clawgym are recorded")
        return 0
    for r in records:
        if r.status == "starting":
            # Recorded before `ray start` ran: its processes carry the record's marker.
            state = "starting" if clusters.live_users(r) else \
                "left half-started (its launcher was killed while starting it)"
        else:
            state = {"alive": "alive", "unresponsive": "running, dashboard not answering",
                     "dead": "dead (cleaned up at the next launch on its port)"}[clusters.head_state(r, patience=2.0)]
        started = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(r.start_time))
        owner, users = clusters.head_owner(r)
        if owner == "in use":
            owner += " by clawgym launch(es) " + ", ".join(f"pid {int(u['pid'])}" for u in users)
        elif owner == "kept":
            owner += f" ({r.kept_reason or 'ray.keep_head'})"
        else:
            owner += f" (its launcher, pid {r.owner_pid}, is gone; stop it: clawgym jobs stop-head --address " \
                     f"{r.dashboard_address})"
        print(f"{r.dashboard_address}  GCS {r.gcs_address}  started {started}  {state}  {owner}")
    return 0


def _cmd_stop_head(args) -> int:
    address = resolve_address(args.address)
    rec = next((r for r in clusters.recorded_heads() if r.dashboard_address == address), None)
    if rec is None:
        raise _UserError(f"no Ray head started by clawgym is recorded at {address}; clawgym stops only heads it "
                         f"started\n  fix: see clawgym jobs heads")
    if rec.status == "starting" and clusters.live_users(rec) and not args.force:
        raise _UserError(f"the head at {address} is being started by clawgym launch pid "
                         f"{int(clusters.live_users(rec)[0]['pid'])}\n  fix: stop that launch (Ctrl-C stops its head), "
                         f"or pass --force")
    state = "dead" if args.force or rec.status == "starting" else clusters.head_state(rec, patience=5.0)
    if state == "unresponsive":
        raise _UserError(f"the head at {address} runs but its dashboard does not answer, so its jobs are unknown\n"
                         f"  fix: pass --force to stop it anyway")
    if state == "alive":
        busy = clusters.running_jobs(address)
        if busy:
            raise _UserError(f"jobs still run on {address}: {', '.join(busy)}\n"
                             f"  fix: stop them first (clawgym jobs stop <id> --address {address}) or pass --force")
    clusters.stop_head(rec)
    return 0


def _cmd_slurm(args) -> int:
    records = clusters.slurm_jobs()
    if not records:
        print("no SLURM jobs submitted by clawgym are recorded")
        return 0
    print(f"{'SLURM id':<10} {'state':<12} {'run name':<40} output")
    for r, state in records:
        print(f"{r['job_id']:<10} {state:<12} {r.get('run_name', ''):<40} {r.get('output') or '-'}")
    print("  stop one for good: clawgym jobs stop slurm:<SLURM id>;  follow one: tail -f <output>")
    return 0


_COMMANDS = {"list": _cmd_list, "status": _cmd_status, "logs": _cmd_logs, "stop": _cmd_stop, "stack": _cmd_stack,
             "heads": _cmd_heads, "stop-head": _cmd_stop_head, "slurm": _cmd_slurm}


def run(args) -> int:
    from clawgym.launch.rayjob import LaunchError

    try:
        return _COMMANDS[args.jobs_command](args)
    except (_UserError, LaunchError, clusters.ClusterError) as err:
        print(f"clawgym jobs {args.jobs_command}: {err}", file=sys.stderr)
        return REFUSED
