"""Time ``python train.py dry_run=true`` against a minimal Hydra app with as many config groups.

Both run as fresh subprocesses (interpreter start, imports, compose, write Hydra's output
dir), alternating, several times; the medians and their ratio are printed. Target: < 1.3x.

    python benchmarks/bench_dry_run.py [--reps 9]
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import List, Tuple

ROOT = Path(__file__).resolve().parent.parent
TARGET = 1.3

MINIMAL_APP = '''\
import hydra
from omegaconf import DictConfig


@hydra.main(version_base="1.3", config_path="conf", config_name="config")
def main(cfg: DictConfig) -> None:
    print(cfg.g0.value)


if __name__ == "__main__":
    main()
'''


def group_count() -> int:
    sys.path.insert(0, str(ROOT))
    from clawgym.schema import GROUPS

    return len(GROUPS)


def write_minimal_app(folder: Path, groups: int) -> Path:
    """A Hydra app with ``groups`` config groups of one YAML option each, selected in its defaults list."""
    conf = folder / "conf"
    conf.mkdir(parents=True)
    defaults = []
    for i in range(groups):
        (conf / f"g{i}").mkdir()
        (conf / f"g{i}" / "default.yaml").write_text(f"value: {i}\nname: group{i}\nsize: 8\n")
        defaults.append(f"  - g{i}: default")
    (conf / "config.yaml").write_text("defaults:\n" + "\n".join(defaults) + "\n  - _self_\n")
    app = folder / "app.py"
    app.write_text(MINIMAL_APP)
    return app


def time_once(argv: List[str], cwd: Path) -> Tuple[float, float]:
    """Wall time and CPU time (user + system) of one run of ``argv``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("WANDB", "SGLANG_API_KEY"))}
    cpu0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    proc = subprocess.run(argv, cwd=cwd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    elapsed = time.perf_counter() - start
    cpu1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(argv)} failed:\n{proc.stderr}")
    return elapsed, (cpu1.ru_utime - cpu0.ru_utime) + (cpu1.ru_stime - cpu0.ru_stime)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=9, help="runs of each app (median is reported)")
    args = parser.parse_args()
    groups = group_count()
    with tempfile.TemporaryDirectory(prefix="clawgym-bench-") as tmp:
        tmp_path = Path(tmp)
        app = write_minimal_app(tmp_path / "minimal", groups)
        ours: List[Tuple[float, float]] = []
        base: List[Tuple[float, float]] = []
        # One warm-up run of each (file cache), then alternate so both see the same machine load.
        for i in range(-1, args.reps):
            t_ours = time_once([sys.executable, str(ROOT / "train.py"), "dry_run=true",
                                f"hydra.run.dir={tmp_path / 'out' / f'ours{i}'}"], ROOT)
            t_base = time_once([sys.executable, str(app), f"hydra.run.dir={tmp_path / 'out' / f'base{i}'}"],
                               app.parent)
            if i >= 0:
                ours.append(t_ours)
                base.append(t_base)
    wall = statistics.median(t for t, _ in ours), statistics.median(t for t, _ in base)
    cpu = statistics.median(c for _, c in ours), statistics.median(c for _, c in base)
    ratio = wall[0] / wall[1]
    print(f"config groups: {groups}; medians over {args.reps} alternating runs")
    print(f"  python train.py dry_run=true:  wall {wall[0] * 1000:6.0f} ms   cpu {cpu[0] * 1000:6.0f} ms")
    print(f"  minimal Hydra app:             wall {wall[1] * 1000:6.0f} ms   cpu {cpu[1] * 1000:6.0f} ms")
    # CPU time is less sensitive to other load on the machine than wall time.
    print(f"  cpu ratio: {cpu[0] / cpu[1]:.2f}x")
    print(f"ratio: {ratio:.2f}x (wall; target < {TARGET}x) {'OK' if ratio < TARGET else 'OVER TARGET'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
