"""Time ``python train.py dry_run=true`` against a minimal Hydra app with as many config groups.

Both run as fresh subprocesses (interpreter start, imports, compose, write Hydra's output
dir), alternating, several times; the medians and their ratio are printed. Target: < 1.3x.

    python benchmarks/bench_dry_run.py [--reps 9]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import List

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


def time_once(argv: List[str], cwd: Path) -> float:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("WANDB", "SGLANG_API_KEY"))}
    start = time.perf_counter()
    proc = subprocess.run(argv, cwd=cwd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    elapsed = time.perf_counter() - start
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(argv)} failed:\n{proc.stderr}")
    return elapsed


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=9, help="runs of each app (median is reported)")
    args = parser.parse_args()
    groups = group_count()
    with tempfile.TemporaryDirectory(prefix="clawgym-bench-") as tmp:
        tmp_path = Path(tmp)
        app = write_minimal_app(tmp_path / "minimal", groups)
        ours: List[float] = []
        base: List[float] = []
        # One warm-up run of each (file cache), then alternate so both see the same machine load.
        for i in range(-1, args.reps):
            t_ours = time_once([sys.executable, str(ROOT / "train.py"), "dry_run=true",
                                f"hydra.run.dir={tmp_path / 'out' / f'ours{i}'}"], ROOT)
            t_base = time_once([sys.executable, str(app), f"hydra.run.dir={tmp_path / 'out' / f'base{i}'}"],
                               app.parent)
            if i >= 0:
                ours.append(t_ours)
                base.append(t_base)
    m_ours, m_base = statistics.median(ours), statistics.median(base)
    ratio = m_ours / m_base
    print(f"config groups:                      {groups}")
    print(f"python train.py dry_run=true:       median {m_ours * 1000:.0f} ms over {args.reps} runs")
    print(f"minimal Hydra app ({groups} groups):    median {m_base * 1000:.0f} ms over {args.reps} runs")
    print(f"ratio: {ratio:.2f}x (target < {TARGET}x) {'OK' if ratio < TARGET else 'OVER TARGET'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
