"""Time ``clawgym layout model=M --gpus N`` for every model of the zoo at 8, 16, 32 and 64 GPUs,
side by side with a plain dry run of the same model (the baseline), and what ``gpu_layout=auto``
adds to a dry run.

Each command runs as a fresh subprocess (interpreter start, imports, compose, the search), the
baseline right after it; the CPU time of each (user + system, from the kernel's accounting of the
child: the machine is shared, wall time is not a measure here) is printed with their ratio.
Targets: ``clawgym layout`` within 3 s for every model and GPU count; ``gpu_layout=auto`` adds at
most 1 s to a dry run (``python train.py model=M gpu_layout=auto dry_run=true`` against
``python train.py model=M dry_run=true``, both with ``memory.gpu=h100_80gb``).

    python benchmarks/bench_layout.py [--models qwen3_4b,qwen3_30b_a3b] [--gpus 8,64] [--reps 1]
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import List, Tuple

ROOT = Path(__file__).resolve().parent.parent
LAYOUT_TARGET_S = 3.0
AUTO_TARGET_S = 1.0


def cpu_of(argv: List[str]) -> Tuple[float, int]:
    """(CPU seconds of the child, its exit status)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    proc = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime), proc.returncode


def median_cpu(argv: List[str], reps: int) -> Tuple[float, int]:
    runs = [cpu_of(argv) for _ in range(reps)]
    return statistics.median(r[0] for r in runs), runs[-1][1]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    models = sorted(p.stem for p in (ROOT / "conf" / "model").glob("*.yaml"))
    ap.add_argument("--models", default=",".join(models))
    ap.add_argument("--gpus", default="8,16,32,64")
    ap.add_argument("--reps", type=int, default=1)
    ap.add_argument("--auto-models", default="qwen3_4b,qwen3_32b,qwen3_30b_a3b,qwen3_235b_a22b",
                    help="models whose gpu_layout=auto dry run is timed against the plain one")
    a = ap.parse_args()
    gpus = [int(x) for x in a.gpus.split(",")]
    py = sys.executable
    out = tempfile.mkdtemp(prefix="bench_layout_")
    worst = 0.0
    print(f"{'model':24s} {'GPUs':>4s} {'layout CPU s':>12s} {'dry run CPU s':>13s} {'ratio':>6s} exit")
    for model in a.models.split(","):
        base, _ = median_cpu([py, "train.py", f"model={model}", "memory.gpu=h100_80gb", "dry_run=true",
                              f"hydra.run.dir={out}/dry"], a.reps)
        for n in gpus:
            t, rc = median_cpu([py, "-m", "clawgym", "layout", f"model={model}", "--gpus", str(n), "--gpu",
                                "h100_80gb"], a.reps)
            worst = max(worst, t)
            print(f"{model:24s} {n:4d} {t:12.2f} {base:13.2f} {t / base:6.2f} {rc}", flush=True)
    print(f"\nclawgym layout: slowest {worst:.2f} s CPU (target <= {LAYOUT_TARGET_S} s)")
    print(f"\n{'model':24s} {'auto dry run CPU s':>18s} {'plain dry run CPU s':>19s} {'added s':>8s}")
    added = 0.0
    for model in a.auto_models.split(","):
        plain, _ = median_cpu([py, "train.py", f"model={model}", "memory.gpu=h100_80gb", "dry_run=true",
                               f"hydra.run.dir={out}/plain"], a.reps)
        auto, rc = median_cpu([py, "train.py", f"model={model}", "gpu_layout=auto", "memory.gpu=h100_80gb",
                               "dry_run=true", f"hydra.run.dir={out}/auto"], a.reps)
        added = max(added, auto - plain)
        print(f"{model:24s} {auto:18.2f} {plain:19.2f} {auto - plain:8.2f}  exit {rc}", flush=True)
    print(f"\ngpu_layout=auto: adds at most {added:.2f} s CPU to a dry run (target <= {AUTO_TARGET_S} s)")
    print(f"(load average {os.getloadavg()[0]:.1f})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
