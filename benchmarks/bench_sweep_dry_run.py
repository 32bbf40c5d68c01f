"""Time an N-job dry-run sweep of clawgym against Hydra's basic launcher on a minimal app.

    python benchmarks/bench_sweep_dry_run.py [--jobs 8 32 128] [--reps 3]

Side by side, alternating, as fresh subprocesses on the same machine:

- ``python train.py -m rollout.temperature=<N values> dry_run=true`` (clawgym's launcher:
  every job composed, named, validated and planned, one ``launch_plan.json`` per job dir);
- ``python app.py -m g0.value=<N values>`` with Hydra's basic launcher, where ``app.py``
  is a minimal Hydra app with as many config groups as clawgym (one YAML option each).

Both write Hydra's job dirs (``.hydra/``) for every job. Medians of wall and CPU time per
N and their ratio are printed, with the load average. Target: at most 0.9x for N = 8, 32 and 128.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
from pathlib import Path
from typing import List, Tuple

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_dry_run import ROOT, group_count, time_once, write_minimal_app  # noqa: E402

TARGET = 0.9


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, nargs="+", default=[8, 32, 128], help="sweep sizes")
    parser.add_argument("--reps", type=int, default=3, help="runs of each sweep per size (median is reported)")
    args = parser.parse_args()
    groups = group_count()
    worst = 0.0
    with tempfile.TemporaryDirectory(prefix="clawgym-bench-sweep-") as tmp:
        tmp_path = Path(tmp)
        app = write_minimal_app(tmp_path / "minimal", groups)
        print(f"config groups: {groups}; medians over {args.reps} alternating runs per size")
        for n in args.jobs:
            temps = ",".join(f"{0.5 + i / 1000:.3f}" for i in range(n))
            values = ",".join(str(i) for i in range(n))
            ours: List[Tuple[float, float]] = []
            base: List[Tuple[float, float]] = []
            for i in range(-1 if n == args.jobs[0] else 0, args.reps):  # one warm-up (file cache)
                t_ours = time_once([sys.executable, str(ROOT / "train.py"), "-m", f"rollout.temperature={temps}",
                                    "dry_run=true", f"hydra.sweep.dir={tmp_path / 'out' / f'ours{n}_{i}'}"], ROOT)
                t_base = time_once([sys.executable, str(app), "-m", f"g0.value={values}",
                                    f"hydra.sweep.dir={tmp_path / 'out' / f'base{n}_{i}'}"], app.parent)
                if i >= 0:
                    ours.append(t_ours)
                    base.append(t_base)
            wall = statistics.median(t for t, _ in ours), statistics.median(t for t, _ in base)
            cpu = statistics.median(c for _, c in ours), statistics.median(c for _, c in base)
            ratio = wall[0] / wall[1]
            worst = max(worst, ratio)
            print(f"N={n:4d}  clawgym sweep: wall {wall[0]:7.2f} s cpu {cpu[0]:7.2f} s | basic launcher: wall "
                  f"{wall[1]:7.2f} s cpu {cpu[1]:7.2f} s | ratio {ratio:.2f}x wall, {cpu[0] / cpu[1]:.2f}x cpu")
    print(f"load average (1 min) at the end: {os.getloadavg()[0]:.1f}")
    print(f"worst ratio: {worst:.2f}x (wall; target <= {TARGET}x) {'OK' if worst <= TARGET else 'OVER TARGET'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
