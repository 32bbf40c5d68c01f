"""Retention's cost on a save dir of 1,000 checkpoints, as ratios against a baseline run side by side.

Two costs, each against what any tool must do anyway:

- a poll with nothing to prune (keep_last=1000: the supervisor's steady state, once per poll) against a
  bare ``os.scandir`` of the save dir with one ``stat`` per entry;
- pruning 1,000 checkpoints down to keep_last=10, keep_every=100 (each removal renamed out of the
  ``iter_*`` pattern and logged) against ``shutil.rmtree`` of the same directories.

Each checkpoint holds ``--files`` small files (a torch_dist checkpoint holds one ``.distcp`` per rank
plus metadata). Medians over ``--reps`` runs, alternated; a fresh save dir for each run.

    python benchmarks/bench_retention.py [--reps 5] [--files 8]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from clawgym.supervisor.retention import TRACKER, prune  # noqa: E402

N = 1000


def make(root: Path, files: int) -> Path:
    root.mkdir(parents=True)
    for it in range(1, N + 1):
        d = root / f"iter_{it:07d}"
        d.mkdir()
        for f in range(files):
            (d / f"__{f}_0.distcp").write_bytes(b"x" * 128)
    (root / TRACKER).write_text(str(N))
    return root


def bare_scan(root: Path) -> None:
    with os.scandir(root) as it:
        for entry in it:
            entry.stat(follow_symlinks=False)


def timed(fn) -> float:
    t = time.perf_counter()
    fn()
    return time.perf_counter() - t


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--files", type=int, default=8)
    a = ap.parse_args()
    poll, scan, pruned, rmtree = [], [], [], []
    with tempfile.TemporaryDirectory() as tmp:
        steady = make(Path(tmp) / "steady", a.files)
        for _ in range(a.reps):
            scan.append(timed(lambda: bare_scan(steady)))
            poll.append(timed(lambda: prune(steady, 1000, None)))
        for r in range(a.reps):
            ours = make(Path(tmp) / f"prune{r}", a.files)
            base = make(Path(tmp) / f"rm{r}", a.files)
            pruned.append(timed(lambda: prune(ours, 10, 100)))
            doomed = [base / f"iter_{it:07d}" for it in range(1, N - 9) if it % 100]
            rmtree.append(timed(lambda: [shutil.rmtree(d) for d in doomed]))
            shutil.rmtree(ours)
            shutil.rmtree(base)
    m = statistics.median
    print(f"save dir of {N} checkpoints x {a.files} files, medians of {a.reps}")
    print(f"  poll, nothing to prune: {m(poll) * 1e3:8.1f} ms   bare scan: {m(scan) * 1e3:8.1f} ms   "
          f"ratio {m(poll) / m(scan):.1f}x")
    print(f"  prune to keep_last=10, keep_every=100 (981 removed): {m(pruned) * 1e3:8.1f} ms   "
          f"rmtree of the same: {m(rmtree) * 1e3:8.1f} ms   ratio {m(pruned) / m(rmtree):.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
