"""GPU time lost to a fault: the supervisor against a user who types ``clawgym resume`` the instant the run dies.

Both sides run the same real launch, side by side in one process of this script, turn by turn: the
recording stand-in trainer of a fixture checkout on a real local Ray head (``ray.address=``), dying
once at rollout ``--fail-at`` (``STANDIN_FAIL=<mode>@K`` with ``STANDIN_FAIL_ONCE``).

- **supervised**: ``python train.py ...`` as shipped (``restart.enabled=true``): the detached
  supervisor classifies the end and resumes it, with no one typing anything.
- **user**: ``restart.enabled=false``; a watcher polls the job's status every 0.1 s (faster than any
  person) and runs ``clawgym resume <save dir>`` the moment Ray says the job ended.

Measured per side, as the issue defines it: the **time lost** from the failure (the stand-in's own
record of its end) to the next attempt's first training step (the first TensorBoard event the
resumed attempt writes), and the **iterations redone** (rollouts the failed attempt logged beyond
the checkpoint the next attempt loaded). Printed: each repetition, the medians, and the ratio
supervised / user (the target is <= 1.1x, with no iteration redone beyond the last complete
checkpoint). GPU time lost is this time x the run's GPUs; the ratio is the same.

    python benchmarks/bench_restart.py [--reps 3] [--mode crash] [--fail-at 3] [--poll 1]

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

    return [sys.executable, str(ROOT / "train.py"),
            *checkout_overrides(checkout, skip_checks=LAUNCH_SKIPS, supervised=supervised),
            f"ray.address={address}", f"paths.save={save}", f"rollout.num_rollout={rollouts}",
            f"restart.enabled={'true' if supervised else 'false'}", f"restart.poll_s={poll}",
            f"+extra_env.STANDIN_RUN_ROLLOUTS={rollouts}", "+extra_env.STANDIN_STEP_SLEEP=0.3",
            "+extra_env.STANDIN_SAVE_EVERY=2", f"+extra_env.STANDIN_RECORD_DIR={work / 'records'}",
            f"+extra_env.STANDIN_FAIL={mode}@{fail_at}", f"+extra_env.STANDIN_FAIL_ONCE={work / 'failed-once'}",
            f"hydra.run.dir={work}/hydra"]


def _records(work: Path) -> List[dict]:
    return sorted((json.loads(p.read_text()) for p in (work / "records").glob("*.json")), key=lambda r: r["start"])


def _first_step_after(save: Path, t: float) -> Optional[float]:
    """Wall time of the first step event written after ``t`` (the resumed attempt's first step; the
    stand-in's rollout mode logs a rollout's metrics once its step is done)."""
    from clawgym.runs.events import read_scalars

    walls = [p.wall_time for d in (save / "tensorboard").iterdir() if d.is_dir()
             for tag, pts in read_scalars(d).items() for p in pts if p.wall_time > t]
    return min(walls) if walls else None


def _measure(work: Path, save: Path) -> Dict[str, float]:
    runs = _records(work)
    if len(runs) < 2:
        raise SystemExit(f"{work}: expected a failed attempt and a resumed one, found {len(runs)} stand-in runs")
    failed, resumed = runs[0], runs[1]
    first = _first_step_after(save, failed["end"])
    if first is None:
        raise SystemExit(f"{save}: the resumed attempt wrote no training step")
    redone = max(0, max(failed.get("rollouts") or [-1]) + 1 - int(resumed["start_rollout_id"]))
    return {"lost_s": first - failed["end"], "redone": float(redone)}


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
    res = subprocess.run([sys.executable, "-m", "clawgym", "resume", str(save)], env=env, capture_output=True,
                         text=True, timeout=600, cwd=work)
    if res.returncode != 0:
        raise SystemExit(f"clawgym resume exited {res.returncode}:\n{(res.stdout + res.stderr)[-3000:]}")
    return _measure(work, save)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--mode", default="crash", help="STANDIN_FAIL mode: crash, oom, nccl")
    ap.add_argument("--fail-at", type=int, default=3)
    ap.add_argument("--rollouts", type=int, default=5)
    ap.add_argument("--poll", type=float, default=1.0, help="restart.poll_s of both sides")
    ap.add_argument("--json", type=Path, help="write the results here")
    args = ap.parse_args()

    from clawgym.backends.head import ports, start
    from tests.fixtures.ray_cluster import head_argv
    from clawgym.demo.checkout import build_checkout

    tmp = Path(tempfile.mkdtemp(prefix="clawgym-bench-restart-"))
    checkout = build_checkout(tmp / "checkout")
    rec = start.start_head(head_argv(port=ports.free_port(), dashboard_port=ports.free_port()), {}, secrets={},
                           quiet=True)
    rows: Dict[str, List[Dict[str, float]]] = {"supervised": [], "user": []}
    try:
        for i in range(args.reps):
            for side, fn in (("supervised", supervised_once), ("user", user_once)):
                work = tmp / f"{side}-{i}"
                work.mkdir()
                got = fn(checkout, rec.dashboard_address, work, args)
                rows[side].append(got)
                print(f"rep {i + 1} {side:10s} lost {got['lost_s']:6.1f} s  redone {got['redone']:.0f}", flush=True)
    finally:
        start.stop_head(rec, quiet=True)
    med = {side: statistics.median(r["lost_s"] for r in rs) for side, rs in rows.items()}
    ratio = med["supervised"] / med["user"]
    print(f"median time lost: supervised {med['supervised']:.1f} s, user typing resume {med['user']:.1f} s; "
          f"ratio {ratio:.2f}x (target <= 1.1x); iterations redone: supervised "
          f"{max(r['redone'] for r in rows['supervised']):.0f}, user {max(r['redone'] for r in rows['user']):.0f}")
    if args.json:
        args.json.write_text(json.dumps({"mode": args.mode, "fail_at": args.fail_at, "poll_s": args.poll,
                                         "rows": rows, "median_lost_s": med, "ratio": ratio}, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
