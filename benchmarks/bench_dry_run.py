"""Time ``python train.py dry_run=true`` against a minimal Hydra app with as many config groups.

Both run as fresh subprocesses (interpreter start, imports, compose, write Hydra's output
dir), alternating, several times; the medians and their ratio are printed. Target: <= 1.2x,
for the defaults and for a run with 20 ``args.*`` overrides (each checked against the flag
registry and rendered into the argv). The flag registry's cold load time (fresh process,
JSON parse and index) is printed too; target < 30 ms. So is what the memory plan adds to a dry run
(fresh process, after compose and validation: import of clawgym.memory, the GPU look-up, the plan, its table), as a
delta in ms and as a share of the dry run; target <= 50 ms. A plan that does not fit also searches
for advice (every suggestion re-evaluated): that case is printed beside it.

    python benchmarks/bench_dry_run.py [--reps 9]

Bytecode caches are on (``PYTHONDONTWRITEBYTECODE`` is dropped for the timed runs). The same pair can be
timed from outside with farm-bench (``--vs``, pairwise ratios); measured figures: ``bench_dry_run.md``.
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
from typing import Dict, List, Tuple

ROOT = Path(__file__).resolve().parent.parent
TARGET = 1.2

MINIMAL_APP = '''\
import hydra
from omegaconf import DictConfig


@hydra.main(version_base="1.3", config_path="conf", config_name="config")
def main(cfg: DictConfig) -> None:
    print(cfg.g0.value)


if __name__ == "__main__":
    main()
'''


#: 20 trainer flags outside the curated groups, of Megatron, slime and SGLang, as users set them.
ARGS_OVERRIDES = [
    "args.lr_warmup_iters=10", "args.global_batch_size=64", "args.seed=42", "args.sglang_ep_size=1",
    "args.eval_top_p=0.7", "args.prompt_data=/data/train.jsonl", "args.input_key=prompt", "args.label_key=label",
    "args.rollout_shuffle=true", "args.apply_chat_template=true", "args.rm_type=math", "args.balance_data=true",
    "args.eval_max_response_len=1024", "args.n_samples_per_eval_prompt=4",
    "args.eval_prompt_data=[aime,/data/aime.jsonl]", "args.kl_coef=0.0", "args.min_lr=1e-7", "args.clip_grad=1.0",
    "args.sglang_dp_size=1", "args.eval_temperature=0.6",
]
#: Registry load target (lazy, cached, per process).
REGISTRY_TARGET_MS = 30.0

REGISTRY_PROBE = (
    "import time; t0 = time.perf_counter(); from clawgym.registry import load_registry; "
    "t1, c1 = time.perf_counter(), time.process_time(); load_registry({flavour!r}); "
    "t2, c2 = time.perf_counter(), time.process_time(); "
    "print((t1 - t0) * 1000, (t2 - t1) * 1000, (c2 - c1) * 1000)"
)


def registry_load_ms(flavour: str, reps: int) -> Tuple[float, float, float]:
    """Medians of (import of the loader, wall and CPU time of the first load of a flavour's
    registry) in a fresh process, in ms.

    The import is mostly stdlib modules (dataclasses, pathlib) a dry run has imported already;
    the load (read the file, parse, index) is what validation adds.
    """
    rows = []
    for _ in range(reps):
        proc = subprocess.run([sys.executable, "-c", REGISTRY_PROBE.format(flavour=flavour)], cwd=ROOT,
                              capture_output=True, text=True, check=True)
        rows.append([float(x) for x in proc.stdout.split()])
    imp, wall, cpu = (statistics.median(col) for col in zip(*rows))
    return imp, wall, cpu


#: What the memory plan may add to a dry run (ms, CPU).
MEMORY_TARGET_MS = 50.0

MEMORY_PROBE = (
    "import time; from clawgym.config.compose import compose, to_plain; c = to_plain(compose({overrides!r})); "
    # A dry run has validated the config first (the flag registry is loaded by then).
    "from clawgym.validate import violations; violations(c); "
    "t0, c0 = time.perf_counter(), time.process_time(); "
    "from clawgym.memory import format_memory, memory_plan, this_node_gpu; "
    "d = memory_plan(c, this_node_gpu(c)).to_dict(); format_memory(d); "
    "t1, c1 = time.perf_counter(), time.process_time(); print((t1 - t0) * 1000, (c1 - c0) * 1000)"
)


def memory_plan_ms(overrides: List[str], reps: int) -> Tuple[float, float]:
    """Medians of (wall, CPU) ms the memory plan adds after compose, in a fresh process."""
    rows = []
    for _ in range(reps):
        proc = subprocess.run([sys.executable, "-c", MEMORY_PROBE.format(overrides=overrides)], cwd=ROOT,
                              capture_output=True, text=True, check=True)
        rows.append([float(x) for x in proc.stdout.split()])
    wall, cpu = (statistics.median(col) for col in zip(*rows))
    return wall, cpu


def group_count() -> int:
    sys.path.insert(0, str(ROOT))
    from clawgym.config.schema import GROUPS

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
    # Bytecode caches on, as a user's install has them (the warm-up run writes them): a machine that sets
    # PYTHONDONTWRITEBYTECODE would otherwise compile clawgym's modules on every run and measure that.
    env = {k: v for k, v in os.environ.items() if not k.startswith(("WANDB", "SGLANG_API_KEY"))
           and k != "PYTHONDONTWRITEBYTECODE"}
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
        cases = {"python train.py dry_run=true": [],
                 f"  ... with {len(ARGS_OVERRIDES)} args.* overrides": ARGS_OVERRIDES}
        ours: Dict[str, List[Tuple[float, float]]] = {name: [] for name in cases}
        base: List[Tuple[float, float]] = []
        # One warm-up run of each (file cache), then alternate so all see the same machine load.
        for i in range(-1, args.reps):
            for n, (name, extra) in enumerate(cases.items()):
                t_ours = time_once([sys.executable, str(ROOT / "train.py"), "dry_run=true", *extra,
                                    f"hydra.run.dir={tmp_path / 'out' / f'ours{n}_{i}'}"], ROOT)
                if i >= 0:
                    ours[name].append(t_ours)
            t_base = time_once([sys.executable, str(app), f"hydra.run.dir={tmp_path / 'out' / f'base{i}'}"],
                               app.parent)
            if i >= 0:
                base.append(t_base)
    base_wall, base_cpu = statistics.median(t for t, _ in base), statistics.median(c for _, c in base)
    print(f"config groups: {groups}; medians over {args.reps} alternating runs")
    worst = 0.0
    for name, runs in ours.items():
        wall, cpu = statistics.median(t for t, _ in runs), statistics.median(c for _, c in runs)
        ratio = wall / base_wall
        worst = max(worst, ratio)
        # CPU time is less sensitive to other load on the machine than wall time.
        print(f"  {name:<34} wall {wall * 1000:6.0f} ms   cpu {cpu * 1000:6.0f} ms   "
              f"ratio {ratio:.2f}x (cpu {cpu / base_cpu:.2f}x)")
    print(f"  {'minimal Hydra app':<34} wall {base_wall * 1000:6.0f} ms   cpu {base_cpu * 1000:6.0f} ms")
    print(f"ratio: {worst:.2f}x (worst case, wall; target <= {TARGET}x) {'OK' if worst <= TARGET else 'OVER TARGET'}")
    for flavour in ("clawgym", "slime"):
        imp, wall, cpu = registry_load_ms(flavour, args.reps)
        # CPU time is the cost; wall time adds whatever else the machine runs.
        print(f"flag registry load (trainer={flavour}, fresh process, median): cpu {cpu:.1f} ms, wall {wall:.1f} ms "
              f"(target < {REGISTRY_TARGET_MS:.0f} ms cpu) {'OK' if cpu < REGISTRY_TARGET_MS else 'OVER TARGET'}; "
              f"import of the loader {imp:.1f} ms")
    dry_cpu = statistics.median(c for _, c in ours["python train.py dry_run=true"])
    for label, ov in (("seed run (fits)", []),
                      ("qwen3_235b_a22b colocate_8 (advice search)",
                       # TP 4: 4 query groups do not split over the layout's TP 8 (a refused config plans nothing).
                      ["model=qwen3_235b_a22b", "gpu_layout=colocate_8", "perf.tensor_parallel=4",
                       "optimizer.cpu_offload=false"])):
        wall, cpu = memory_plan_ms(ov, args.reps)
        verdict = ("OK" if cpu <= MEMORY_TARGET_MS else "OVER TARGET") if not ov else "(informational)"
        print(f"memory plan added to a dry run, {label}: cpu {cpu:.1f} ms, wall {wall:.1f} ms = "
              f"{cpu / (dry_cpu * 1000) * 100:.1f}% of the dry run's cpu (target <= {MEMORY_TARGET_MS:.0f} ms) {verdict}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
