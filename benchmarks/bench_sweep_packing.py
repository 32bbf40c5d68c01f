"""Makespan of a packed sweep against the ideal (total GPU-seconds / cluster GPUs).

    python benchmarks/bench_sweep_packing.py [--sleep 6]

Starts a real local Ray head declaring 8 GPUs (free loopback ports; stopped at the end
through its record), builds the fixture ClawGym-RL checkout whose stand-in trainers
sleep ``--sleep`` seconds, and runs

    python train.py -m gpu_layout=split_4_4,split_2_2,split_1_1 rollout.temperature=0.6,0.7,0.8,0.9

against it: 12 jobs, four each holding 8, 4 and 2 GPUs (packed: 4 x one, 2 x two, 1 x four). GPU-seconds are what Ray reports each job
held (submission to end, so Ray's per-job start cost is the job's, not the packer's);
the makespan runs from the first submission to the last end. A second ratio uses only
the trainers' own run times (stand-in records), i.e. it also charges Ray's job start
latency to the packing. Target: packed / ideal <= 1.15.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

GPUS = 8
SWEEP = ["gpu_layout=split_4_4,split_2_2,split_1_1", "rollout.temperature=0.6,0.7,0.8,0.9"]


def job_gpus(argv: list) -> int:
    """GPUs a job holds, from its trainer argv (as clawgym.plan.build.gpus_required computes it)."""
    def flag(name: str) -> int:
        return int(argv[argv.index(name) + 1])

    actor, rollout = flag("--actor-num-gpus-per-node") * flag("--actor-num-nodes"), flag("--rollout-num-gpus")
    return max(actor, rollout) if "--colocate" in argv else actor + rollout


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sleep", type=float, default=6.0, help="seconds each stand-in trainer runs")
    ap.add_argument("--keep", action="store_true", help="keep the work dir (checkout, job dirs, logs)")
    args = ap.parse_args()

    from ray.job_submission import JobSubmissionClient

    from clawgym.backends.head import ports as head_ports, start as head_start
    from tests.fixtures.checkout import build_checkout
    from tests.fixtures.ray_cluster import head_argv

    work = Path(tempfile.mkdtemp(prefix="clawgym-bench-packing-"))
    checkout = build_checkout(work / "checkout")
    argv = head_argv(port=head_ports.free_port(), dashboard_port=head_ports.free_port(), num_gpus=GPUS)
    rec = head_start.start_head(argv, {}, secrets={}, quiet=True)
    try:
        overrides = [f"paths.root={checkout}", "skip_checks=[gpus,docker,image]", "sandbox.cleanup_leftovers=false",
                     f"paths.save={work}/exp/${{run_name}}", f"+extra_env.STANDIN_RECORD_DIR={work}/records",
                     f"+extra_env.STANDIN_SLEEP={args.sleep}", f"ray.address={rec.dashboard_address}",
                     f"hydra.sweep.dir={work}/multirun", "hydra.launcher.poll_interval=0.5", *SWEEP]
        t0 = time.monotonic()
        proc = subprocess.run([sys.executable, str(ROOT / "train.py"), "-m", *overrides], cwd=work,
                              capture_output=True, text=True)
        wall = time.monotonic() - t0
        if proc.returncode != 0:
            print(proc.stdout[-3000:], proc.stderr[-3000:], sep="\n")
            print(f"sweep failed with exit code {proc.returncode}")
            return 1
        records = [json.loads(p.read_text()) for p in (work / "records").glob("*.json")]
        client = JobSubmissionClient(rec.dashboard_address)
        held, ran = [], []
        for r in records:
            info = client.get_job_info(r["submission_id"])
            g = job_gpus(r["argv"])
            held.append((g, info.start_time / 1000.0, info.end_time / 1000.0))
            ran.append((g, r["start"], r["end"]))
    finally:
        head_start.stop_head(rec, quiet=True)
        try:
            rec.path.unlink()
        except FileNotFoundError:
            pass
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)

    def ratio(spans: list) -> tuple:
        gpu_seconds = sum(g * (e - s) for g, s, e in spans)
        makespan = max(e for _, _, e in spans) - min(s for _, s, _ in spans)
        ideal = gpu_seconds / GPUS
        return makespan, ideal, makespan / ideal

    if os.environ.get("BENCH_TIMELINE"):
        t = min(s for _, s, _ in held)
        for (g, s, e), (_, rs, re_) in sorted(zip(held, ran), key=lambda x: x[0][1]):
            print(f"  {g} GPUs  held {s - t:6.1f} -> {e - t:6.1f}   ran {rs - t:6.1f} -> {re_ - t:6.1f}")
    m1, i1, r1 = ratio(held)
    m2, i2, r2 = ratio(ran)
    print(f"sweep: {len(records)} jobs ({', '.join(SWEEP)}), stand-ins sleep {args.sleep:.1f}s, "
          f"cluster {GPUS} GPUs; command wall time {wall:.1f}s")
    print(f"GPU time as Ray held it : makespan {m1:6.1f}s  ideal {i1:6.1f}s  ratio {r1:.2f}x  (target <= 1.15x)")
    print(f"trainer run time only   : makespan {m2:6.1f}s  ideal {i2:6.1f}s  ratio {r2:.2f}x  "
          f"(includes Ray's job start latency)")
    return 0 if r1 <= 1.15 else 1


if __name__ == "__main__":
    sys.exit(main())
