"""GPU time lost to a fault: the supervisor against a user who types ``clawgym resume`` the instant the run dies.

Both sides run the same real launch, side by side in one process of this script, turn by turn: the
recording stand-in trainer of a fixture checkout on a real local Ray head (``ray.address=``), dying
once at rollout ``--fail-at`` (``STANDIN_FAIL=<mode>@K`` with ``STANDIN_FAIL_ONCE``).

- **supervised**: ``python train.py ...`` as shipped (``restart.enabled=true``): the detached
  supervisor classifies the end and resumes it, with no one typing anything.
- **user**: ``restart.enabled=false``; a watcher polls the job's status every 0.1 s (faster than any
  person) and runs ``clawgym resume <save dir>`` the moment Ray says the job ended.

``--mode lost-head``: the run starts its own local head (``ray.address=`` empty, clawgym's head on
free ports) and the head dies at rollout ``--fail-at``: its GCS, raylet and dashboard are SIGKILLed,
found through clawgym's own head record. The supervised side goes on with no one typing; the user,
the instant the head is gone, presses Ctrl-C in the launcher (whose save dir is held while it runs)
and types ``clawgym resume <save dir>`` the moment it has exited; that resume starts a new head too.
The failure is the kill; the next attempt's first training step is the first event in its own
TensorBoard folder (the old trainer may log a step or two more before what is left of the head is
stopped: those count as redone).

Measured per side, as the issue defines it: the **time lost** from the failure (the stand-in's own
record of its end) to the next attempt's first training step (the first TensorBoard event the
resumed attempt writes), and the **iterations redone** (rollouts the failed attempt logged beyond
the checkpoint the next attempt loaded). Printed: each repetition, the medians, and the ratio
supervised / user (the target is <= 1.1x, with no iteration redone beyond the last complete
checkpoint). GPU time lost is this time x the run's GPUs; the ratio is the same.

    python benchmarks/bench_restart.py [--reps 3] [--mode crash|oom|nccl|lost-head] [--fail-at 3] [--poll 1]

``--mode preemption`` runs both sides as SLURM runs (``cluster=slurm``) on a real one-node SLURM cluster
(tests/fixtures/slurm_cluster.py, started here and stopped by pid) and preempts each at rollout
``--fail-at``: the supervised job is requeued by SLURM (``scontrol requeue``, PreemptMode=REQUEUE) and
resumed by the supervisor in its next allocation; the user's job (restart.enabled=false) is cancelled at
the same point and the user runs ``clawgym resume <save dir>`` the instant ``scontrol`` shows it ended.
Each side's time lost is split into SLURM's queue (to the next allocation, from slurmctld's log) and the
start in the allocation. Its results go under ``"preemption"`` in the ``--json`` file, beside the others.

Builds the fixture checkout of the tests (clawgym/demo/checkout.py) and needs Ray; starts one local
head for the benchmark and stops exactly it at the end.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Dict, List, Optional

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "launchers"))


def _env(state: Path) -> Dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("WANDB_API_KEY", "WANDB_KEY", "RAY_ADDRESS",
                                                           "CLAWGYM_SUPERVISOR_ID")}
    env.update(PYTHONPATH=f"{ROOT}{os.pathsep}{ROOT / 'launchers'}", CLAWGYM_STATE_DIR=str(state),
               PYTHONUNBUFFERED="1")
    return env


def _argv(checkout: Path, work: Path, save: Path, address: str, *, mode: str, fail_at: int, rollouts: int,
          supervised: bool, poll: float) -> List[str]:
    from tests.fixtures.checkout import LAUNCH_SKIPS, checkout_overrides

    if mode == LOST_HEAD:
        # Its own head on free ports (8 declared GPUs, as the tests' heads); the stand-in fails by itself never.
        from clawgym.backends.head.ports import free_port

        where = [f"ray.port={free_port()}", f"ray.dashboard_port={free_port()}", "ray.num_gpus=8"]
        fail: List[str] = []
    else:
        where = [f"ray.address={address}"]
        fail = [f"+extra_env.STANDIN_FAIL={mode}@{fail_at}", f"+extra_env.STANDIN_FAIL_ONCE={work / 'failed-once'}"]
    return [sys.executable, str(ROOT / "train.py"),
            *checkout_overrides(checkout, skip_checks=LAUNCH_SKIPS, supervised=supervised),
            *where, f"paths.save={save}", f"rollout.num_rollout={rollouts}",
            f"restart.enabled={'true' if supervised else 'false'}", f"restart.poll_s={poll}",
            f"+extra_env.STANDIN_RUN_ROLLOUTS={rollouts}", "+extra_env.STANDIN_STEP_SLEEP=0.3",
            "+extra_env.STANDIN_SAVE_EVERY=2", f"+extra_env.STANDIN_RECORD_DIR={work / 'records'}",
            *fail, f"hydra.run.dir={work}/hydra"]


#: ``--mode`` of a head killed mid-run (no STANDIN_FAIL: the stand-in itself never fails).
LOST_HEAD = "lost-head"


def _records(work: Path) -> List[dict]:
    return sorted((json.loads(p.read_text()) for p in (work / "records").glob("*.json")), key=lambda r: r["start"])


def _first_step_after(save: Path, t: float) -> Optional[float]:
    """Wall time of the first step event written after ``t`` (the resumed attempt's first step; the
    stand-in's rollout mode logs a rollout's metrics once its step is done)."""
    from clawgym.runs.events import read_scalars

    walls = [p.wall_time for d in (save / "tensorboard").iterdir() if d.is_dir()
             for tag, pts in read_scalars(d).items() for p in pts if p.wall_time > t]
    return min(walls) if walls else None


def _first_step_of(save: Path, submission_id: str) -> Optional[float]:
    """Wall time of the first step event in one attempt's own TensorBoard folder."""
    from clawgym.runs.events import read_scalars

    folder = save / "tensorboard" / submission_id
    walls = [p.wall_time for tag, pts in read_scalars(folder).items() for p in pts] if folder.is_dir() else []
    return min(walls) if walls else None


def _measure(work: Path, save: Path, failed_at: Optional[float] = None) -> Dict[str, float]:
    """``failed_at``: when the failure happened, when the stand-in's own end is not it (a killed head)."""
    runs = _records(work)
    if len(runs) < 2:
        raise SystemExit(f"{work}: expected a failed attempt and a resumed one, found {len(runs)} stand-in runs")
    failed, resumed = runs[0], runs[1]
    if failed_at is None:
        failed_at = failed["end"]
        first = _first_step_after(save, failed_at)
    else:
        first = _first_step_of(save, resumed["submission_id"])
    if first is None:
        raise SystemExit(f"{save}: the resumed attempt wrote no training step")
    redone = max(0, max(failed.get("rollouts") or [-1]) + 1 - int(resumed["start_rollout_id"]))
    return {"lost_s": first - failed_at, "redone": float(redone)}


def _kill_head_at(work: Path, save: Path, launch: "subprocess.Popen", fail_at: int) -> float:
    """Once the stand-in logged rollout ``fail_at``, SIGKILL the GCS, raylet and dashboard of the head
    clawgym recorded for this run (found through its head record, pid + create time verified); the
    time of the kill."""
    import signal

    from clawgym.backends.head.processes import verified
    from clawgym.backends.head.records import HeadRecord

    deadline = time.time() + 300
    while not any(fail_at in (r.get("rollouts") or []) for r in _records(work)):
        if launch.poll() is not None or time.time() > deadline:
            raise SystemExit(f"{work}: the run never reached rollout {fail_at} (launcher exit {launch.poll()})")
        time.sleep(0.02)
    sub = json.loads(next(save.glob("clawgym/snapshots/*/submitted.json")).read_text())
    port = int(str(sub["address"]).rsplit(":", 1)[1])
    rec = HeadRecord.from_dict(json.loads((work / "state" / "heads" / f"{port}.json").read_text()))
    killed_at = time.time()
    for p in rec.processes:
        proc = verified(p.pid, p.create_time)
        if proc is not None and (p.name.startswith(("gcs_server", "raylet"))
                                 or "dashboard/dashboard.py" in " ".join(proc.cmdline())):
            proc.send_signal(signal.SIGKILL)
    return killed_at


def lost_head_once(checkout: Path, work: Path, args, *, supervised: bool) -> Dict[str, float]:
    import signal

    save = work / "run"
    env = _env(work / "state")
    with open(work / "launch.log", "w") as log:
        launch = subprocess.Popen(_argv(checkout, work, save, "", mode=LOST_HEAD, fail_at=args.fail_at,
                                        rollouts=args.rollouts, supervised=supervised, poll=args.poll),
                                  env=env, stdout=log, stderr=subprocess.STDOUT, cwd=ROOT)
        try:
            killed_at = _kill_head_at(work, save, launch, args.fail_at)
            if not supervised:
                # The instant the head is gone: Ctrl-C in the launcher (it holds the save dir while it runs) ...
                launch.send_signal(signal.SIGINT)
            rc = launch.wait(timeout=600)
        finally:
            if launch.poll() is None:
                launch.kill()
    if supervised and rc != 0:
        raise SystemExit(f"supervised launch exited {rc}: see {work / 'launch.log'}")
    if not supervised:
        # ... and `clawgym resume <save dir>` the moment it has exited (it starts a new head).
        _user_resumes(save, env, work)
    return _measure(work, save, failed_at=killed_at)


def _user_resumes(save: Path, env: Dict[str, str], work: Path) -> None:
    """The user's side: ``clawgym resume <save dir>``, typed the instant the run is seen to have died."""
    res = subprocess.run([sys.executable, "-m", "clawgym", "resume", str(save)], env=env, capture_output=True,
                         text=True, timeout=600, cwd=work)
    if res.returncode != 0:
        raise SystemExit(f"clawgym resume exited {res.returncode}:\n{(res.stdout + res.stderr)[-3000:]}")


def _leftover_heads(work: Path) -> List[str]:
    """Heads still recorded in a side's state dir once it ended (there should be none)."""
    return [str(p) for p in (work / "state" / "heads").glob("*.json")]


def supervised_once(checkout: Path, address: str, work: Path, args) -> Dict[str, float]:
    save = work / "run"
    res = subprocess.run(_argv(checkout, work, save, address, mode=args.mode, fail_at=args.fail_at,
                               rollouts=args.rollouts, supervised=True, poll=args.poll),
                         env=_env(work / "state"), capture_output=True, text=True, timeout=600, cwd=ROOT)
    if res.returncode != 0:
        raise SystemExit(f"supervised launch exited {res.returncode}:\n{(res.stdout + res.stderr)[-3000:]}")
    return _measure(work, save)


def user_once(checkout: Path, address: str, work: Path, args) -> Dict[str, float]:
    from ray.job_submission import JobSubmissionClient

    save = work / "run"
    env = _env(work / "state")
    launch = subprocess.Popen(_argv(checkout, work, save, address, mode=args.mode, fail_at=args.fail_at,
                                    rollouts=args.rollouts, supervised=False, poll=args.poll),
                              env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=ROOT)
    client = JobSubmissionClient(address)
    sid = None
    while sid is None:  # the job this launch submitted: named in the save dir's newest snapshot
        for rec in save.glob("clawgym/snapshots/*/submitted.json") if save.exists() else []:
            sid = json.loads(rec.read_text()).get("submission_id")
        time.sleep(0.1)
    while not client.get_job_status(sid).is_terminal():
        time.sleep(0.1)
    launch.wait(timeout=120)
    # The instant Ray says it ended: the user types `clawgym resume <save dir>`.
    _user_resumes(save, env, work)
    return _measure(work, save)


# ---------------------------------------------------------------- --mode preemption (SLURM)

def _slurm_job(state: Path, deadline: float) -> str:
    """The SLURM job a launch submitted: clawgym's own record of it (``<state dir>/slurm/``)."""
    while time.time() < deadline:
        for rec in sorted((state / "slurm").glob("*.json")) if (state / "slurm").is_dir() else []:
            return str(json.loads(rec.read_text())["job_id"])
        time.sleep(0.1)
    raise SystemExit(f"no SLURM job recorded under {state}")


def _wait_text(save: Path, job: str, text: str, deadline: float) -> None:
    while time.time() < deadline:
        for out in save.glob(f"clawgym/slurm/*/slurm-{job}.out"):
            if text in out.read_text(errors="replace"):
                return
        time.sleep(0.05)
    raise SystemExit(f"SLURM job {job} never printed {text!r}")


def preemption_once(cluster, checkout: Path, work: Path, args, *, supervised: bool) -> Dict[str, float]:
    """One preemption of a SLURM run at rollout ``--fail-at``, on the real one-node cluster.

    supervised: SLURM's own requeue of the job (``scontrol requeue``: what a preemption does with
    PreemptMode=REQUEUE); the supervisor in the next allocation resumes it. user: the same instant, the
    job ends (``scancel``: a preemption with PreemptMode=CANCEL, the job of a run submitted without
    supervision, restart.enabled=false, which is not requeued), and a watcher polling ``scontrol show job``
    every 0.1 s runs ``clawgym resume <save dir>`` (cluster=slurm, as recorded: a new batch job) the moment
    SLURM shows it ended."""
    from tests.fixtures.checkout import LAUNCH_SKIPS, checkout_overrides

    save = work / "run"
    env = {**_env(work / "state"), **cluster.env}
    # Rollouts enough that the run is still training when the preemption lands (it lands a moment after
    # the stand-in printed rollout --fail-at, not at a given step as STANDIN_FAIL does).
    rollouts = max(args.rollouts, args.fail_at + 8)
    argv = [sys.executable, str(ROOT / "train.py"),
            *checkout_overrides(checkout, skip_checks=LAUNCH_SKIPS, supervised=supervised), "cluster=slurm",
            f"paths.save={save}", f"rollout.num_rollout={rollouts}",
            f"restart.enabled={'true' if supervised else 'false'}", f"restart.poll_s={args.poll}",
            f"+extra_env.STANDIN_RUN_ROLLOUTS={rollouts}", "+extra_env.STANDIN_STEP_SLEEP=0.3",
            "+extra_env.STANDIN_SAVE_EVERY=2", f"+extra_env.STANDIN_RECORD_DIR={work / 'records'}",
            f"hydra.run.dir={work}/hydra"]
    deadline = time.time() + 600
    launch = subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=ROOT)
    job = _slurm_job(work / "state", deadline)
    _wait_text(save, job, f"[standin] rollout step {args.fail_at}", deadline)
    failed_at = time.time()
    if supervised:
        cluster.run("scontrol", "requeue", job)
        if launch.wait(timeout=600) != 0:
            raise SystemExit(f"the supervised launch exited {launch.returncode}; see {save}/clawgym/slurm/")
    else:
        cluster.run("scancel", job)
        while "JobState=CANCELLED" not in cluster.run("scontrol", "show", "job", "-o", job, check=False).stdout:
            time.sleep(0.1)
        # Their launcher, following the job, returns (until then it holds the save dir, as for crash mode).
        launch.wait(timeout=120)
        # The instant SLURM shows it ended: the user types `clawgym resume <save dir>`.
        _user_resumes(save, env, work)
    runs = _records(work)
    if len(runs) < 2:
        raise SystemExit(f"{work}: expected a preempted attempt and a resumed one, found {len(runs)} stand-in runs")
    failed, resumed = runs[0], runs[1]
    # The resumed attempt's own first step (the preempted one may log a step or two after the preemption).
    first = _first_step_after(save, max(failed_at, float(resumed["start"])))
    if first is None:
        raise SystemExit(f"{save}: the resumed attempt wrote no training step")
    redone = max(0, max(failed.get("rollouts") or [-1]) + 1 - int(resumed["start_rollout_id"]))
    allocated = _allocated_after(cluster, failed_at)
    return {"lost_s": first - failed_at, "redone": float(redone),
            # Where the time goes: SLURM's queue (the next allocation's start, slurmctld's log) and the start
            # in the allocation (preflight, Ray head, submission, the trainer's first step).
            "queue_s": (allocated - failed_at) if allocated else float("nan"),
            "start_s": (first - allocated) if allocated else float("nan")}


def _allocated_after(cluster, t: float) -> Optional[float]:
    """When slurmctld first allocated a job after ``t`` (``[time] sched: Allocate JobId=...``)."""
    found = None
    for line in (cluster.root / "slurmctld.log").read_text(errors="replace").splitlines():
        if "sched: Allocate JobId=" not in line or not line.startswith("["):
            continue
        stamp = line[1:line.index("]")]
        when = time.mktime(time.strptime(stamp.split(".")[0], "%Y-%m-%dT%H:%M:%S")) + float("0." + stamp.split(".")[1])
        if when > t and found is None:
            found = when
    return found


def preemption(args) -> int:
    """``--mode preemption``: both sides on one real one-node SLURM cluster (tests/fixtures/slurm_cluster.py,
    its daemons started here under a temp dir and stopped by pid at the end)."""
    from clawgym.demo.checkout import build_checkout
    from tests.fixtures.slurm_cluster import CRED_EXPIRE, start_cluster

    tmp = Path(tempfile.mkdtemp(prefix="clawgym-bench-preempt-"))
    checkout = build_checkout(tmp / "checkout")
    cluster = start_cluster(tmp / "slurm")
    rows: Dict[str, List[Dict[str, float]]] = {"supervised": [], "user": []}
    try:
        for i in range(args.reps):
            for side in ("supervised", "user"):
                work = tmp / f"{side}-{i}"
                work.mkdir()
                got = preemption_once(cluster, checkout, work, args, supervised=side == "supervised")
                rows[side].append(got)
                print(f"rep {i + 1} {side:10s} lost {got['lost_s']:6.1f} s (queue {got['queue_s']:5.1f} s, start in "
                      f"the allocation {got['start_s']:5.1f} s)  redone {got['redone']:.0f}", flush=True)
    finally:
        cluster.stop()
    med = {side: statistics.median(r["lost_s"] for r in rs) for side, rs in rows.items()}
    parts = {side: {k: statistics.median(r[k] for r in rs) for k in ("queue_s", "start_s")} for side, rs in rows.items()}
    ratio = med["supervised"] / med["user"]
    print(f"median queue / start: supervised {parts['supervised']['queue_s']:.1f} / {parts['supervised']['start_s']:.1f} s, "
          f"user {parts['user']['queue_s']:.1f} / {parts['user']['start_s']:.1f} s")
    print(f"median time lost: supervised (SLURM's requeue) {med['supervised']:.1f} s, user resubmitting at once "
          f"{med['user']:.1f} s; ratio {ratio:.2f}x (target <= 1.1x; the requeued job waits cred_expire="
          f"{CRED_EXPIRE} s before it may start again, slurm.conf(5)); iterations redone: supervised "
          f"{max(r['redone'] for r in rows['supervised']):.0f}, user {max(r['redone'] for r in rows['user']):.0f}")
    if args.json:
        # Beside the other modes' results in the same file.
        try:
            data = json.loads(args.json.read_text())
        except (OSError, ValueError):
            data = {}
        data["preemption"] = {"mode": "preemption", "fail_at": args.fail_at, "poll_s": args.poll,
                              "cred_expire_s": CRED_EXPIRE, "rows": rows, "median_lost_s": med, "median_parts_s": parts,
                              "ratio": ratio}
        args.json.write_text(json.dumps(data, indent=2) + "\n")
    return 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--mode", default="crash", help=f"STANDIN_FAIL mode: crash, oom, nccl; or preemption (SLURM); or "
                    f"{LOST_HEAD} (the run's own local head killed at rollout --fail-at)")
    ap.add_argument("--fail-at", type=int, default=3)
    ap.add_argument("--rollouts", type=int, default=5)
    ap.add_argument("--poll", type=float, default=1.0, help="restart.poll_s of both sides")
    ap.add_argument("--json", type=Path, help="write the results here")
    args = ap.parse_args()
    if args.mode == "preemption":
        return preemption(args)

    from clawgym.backends.head import ports, start
    from tests.fixtures.ray_cluster import head_argv
    from clawgym.demo.checkout import build_checkout

    tmp = Path(tempfile.mkdtemp(prefix="clawgym-bench-restart-"))
    checkout = build_checkout(tmp / "checkout")
    lost = args.mode == LOST_HEAD
    # A lost head's runs start their own heads; the other modes share one for the benchmark.
    rec = None if lost else start.start_head(head_argv(port=ports.free_port(), dashboard_port=ports.free_port()), {},
                                             secrets={}, quiet=True)
    rows: Dict[str, List[Dict[str, float]]] = {"supervised": [], "user": []}
    try:
        for i in range(args.reps):
            for side, fn in (("supervised", supervised_once), ("user", user_once)):
                work = tmp / f"{side}-{i}"
                work.mkdir()
                if lost:
                    got = lost_head_once(checkout, work, args, supervised=side == "supervised")
                    left = _leftover_heads(work)
                    if left:
                        raise SystemExit(f"{side}: head records left after the run: {left}")
                else:
                    got = fn(checkout, rec.dashboard_address, work, args)
                rows[side].append(got)
                print(f"rep {i + 1} {side:10s} lost {got['lost_s']:6.1f} s  redone {got['redone']:.0f}", flush=True)
    finally:
        if rec is not None:
            start.stop_head(rec, quiet=True)
    med = {side: statistics.median(r["lost_s"] for r in rs) for side, rs in rows.items()}
    ratio = med["supervised"] / med["user"]
    print(f"median time lost: supervised {med['supervised']:.1f} s, user typing resume {med['user']:.1f} s; "
          f"ratio {ratio:.2f}x (target <= 1.1x); iterations redone: supervised "
          f"{max(r['redone'] for r in rows['supervised']):.0f}, user {max(r['redone'] for r in rows['user']):.0f}")
    if args.json:
        # One file for every mode: the crash's results at the top (as before), another mode's under its
        # name beside them (as "preemption").
        result = {"mode": args.mode, "fail_at": args.fail_at, "poll_s": args.poll, "rows": rows,
                  "median_lost_s": med, "ratio": ratio}
        try:
            data = json.loads(args.json.read_text())
        except (OSError, ValueError):
            data = {}
        if args.mode == "crash":
            data.update(result)
        else:
            data[args.mode] = result
        args.json.write_text(json.dumps(data, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
