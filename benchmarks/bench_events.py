"""Read one large event file with clawgym's reader against TensorBoard's ``EventAccumulator``.

The file: N scalars (default 600,000: a long run's every metric, one tag per 20 metrics) written
by a real ``SummaryWriter`` (tensorboardX), about 33 MB at the default. Each reader runs in a
fresh subprocess, alternating, ``--reps`` times; the medians of wall time and peak RSS and their
ratios (clawgym / TensorBoard's accumulator as clawgym used it before: every point kept,
``size_guidance={scalars: 0}``) are printed. Without TensorFlow, TensorBoard's accumulator checks each
record's CRC-32C in pure Python; clawgym's reader checks it with ``google-crc32c`` and keeps at most
TensorBoard's default size guidance of points per tag (a reservoir, the last point always kept).

    python benchmarks/bench_events.py [--scalars 600000] [--reps 3]
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

WRITE = '''
import sys
from tensorboardX import SummaryWriter
n, tags = int(sys.argv[2]), 20
w = SummaryWriter(sys.argv[1], max_queue=10000, flush_secs=600)
for i in range(n):
    w.add_scalar(f"perf/metric_{i % tags}", float(i), i // tags)
w.close()
'''

READERS = {
    "tensorboard": '''
import logging, resource, sys, time
from tensorboard.backend.event_processing.event_accumulator import SCALARS, EventAccumulator
logging.getLogger("tensorboard").setLevel(logging.ERROR)
t = time.perf_counter()
acc = EventAccumulator(sys.argv[1], size_guidance={SCALARS: 0}, purge_orphaned_data=False)
acc.Reload()
n = sum(len(acc.Scalars(tag)) for tag in acc.Tags()["scalars"])
print(time.perf_counter() - t, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, n)
''',
    "clawgym": '''
import resource, sys, time
from pathlib import Path
from clawgym.runs.events import read_scalars
t = time.perf_counter()
s = read_scalars(Path(sys.argv[1]), limit_s=3600)
n = sum(len(v) for v in s.values())
print(time.perf_counter() - t, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, n)
''',
}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--scalars", type=int, default=600_000)
    ap.add_argument("--reps", type=int, default=3)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        subprocess.run([sys.executable, "-c", WRITE, tmp, str(args.scalars)], check=True)
        size = sum(p.stat().st_size for p in Path(tmp).iterdir())
        print(f"event file: {args.scalars} scalars, {size / 1e6:.1f} MB")
        got = {name: [] for name in READERS}
        for _ in range(args.reps):
            for name, code in READERS.items():
                out = subprocess.run([sys.executable, "-c", code, tmp], check=True, capture_output=True, text=True,
                                     cwd=ROOT).stdout.split()
                got[name].append((float(out[0]), float(out[1]), int(out[2])))
    med = {name: (statistics.median(t for t, _, _ in v), statistics.median(m for _, m, _ in v), v[0][2])
           for name, v in got.items()}
    for name, (t, m, n) in med.items():
        print(f"{name:12s} read {t:7.2f} s  peak RSS {m:7.1f} MB  points kept {n}")
    (tb_t, tb_m, _), (cg_t, cg_m, _) = med["tensorboard"], med["clawgym"]
    print(f"ratio clawgym/tensorboard: time {cg_t / tb_t:.2f}x, peak RSS {cg_m / tb_m:.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
