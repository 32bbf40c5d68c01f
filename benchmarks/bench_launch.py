"""Time from command to running job: clawgym (local head, existing cluster) vs the seed script.

    python benchmarks/bench_launch.py [--repeat N] [--seed PATH]

All three run for real on this machine with real ``ray`` (head, job submission) and
the recording stand-in trainer; "running" is the moment the trainer starts (the
``start`` time in its record). The seed script runs in a temp copy of a fixture
checkout, with stand-ins only for what must not run here: ``pkill`` and ``docker``
are no-ops, and ``ray`` is a wrapper that turns ``ray stop`` into a no-op (the
seed's ``ray stop --force`` would kill every Ray process on the machine) and moves
the seed's fixed ports (6379, 8265, 0.0.0.0) to free loopback ports; ``ray start``
and ``ray job submit`` go to the real ``ray``. Every head started here is stopped
through what was recorded when it started (its session), never by name.

Target: clawgym with a local head at most 0.5x the seed's time.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Dict, List, Optional

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from clawgym.backends.head import (
    ports as head_ports,
    processes as head_processes,
    start as head_start  # noqa: E402,
)
from tests.fixtures.checkout import LAUNCH_SKIPS, build_checkout, checkout_overrides  # noqa: E402

DEFAULT_SEED = Path(os.environ.get("CLAWGYM_SHARED", ROOT.parent / "shared")) / "seed" / "run_qwen3_4b.sh"

# slime's scripts/models/qwen3-4B.sh (the seed sources it for MODEL_ARGS).
MODELS_SH = """\
MODEL_ARGS=(
   --swiglu --num-layers 36 --hidden-size 2560 --ffn-hidden-size 9728 --num-attention-heads 32
   --group-query-attention --num-query-groups 8 --use-rotary-position-embeddings --disable-bias-linear
   --normalization "RMSNorm" --norm-epsilon 1e-6 --rotary-base "${MODEL_ARGS_ROTARY_BASE:-1000000}"
   --vocab-size 151936 --kv-channels 128 --qk-layernorm
)
"""

# The seed's `ray`: stop is a no-op, start/submit go to the real ray on free loopback ports.
RAY_SHIM = """\
#!{python}
import os, sys
REAL = {real!r}
state = {state!r}
args = sys.argv[1:]
if args[:1] == ["stop"]:
    print("[bench shim] ray stop: no-op (it would stop every Ray cluster on this machine)")
    sys.exit(0)
ports = dict(line.split("=") for line in open(os.path.join(state, "ports")).read().split())
def rewrite(a):
    out = []
    for x in a:
        if x.startswith("--dashboard-port="):
            x = "--dashboard-port=" + ports["dashboard"]
        elif x.startswith("--dashboard-host="):
            x = "--dashboard-host=127.0.0.1"
        elif x.startswith("--address=http://127.0.0.1:8265"):
            x = "--address=http://127.0.0.1:" + ports["dashboard"]
        out.append(x)
    return out
args = rewrite(args)
if args[:1] == ["start"]:
    args += ["--port", ports["gcs"], "--temp-dir", ports["temp"],
             "--ray-client-server-port", ports["client"], "--dashboard-agent-listen-port", ports["agent"]]
    # Its own session, so the benchmark can stop exactly this head afterwards.
    os.setsid()
    open(os.path.join(state, "head_sid"), "w").write(str(os.getpid()))
os.execv(REAL, [REAL] + args)
"""

NOOP = "#!/bin/sh\necho \"[bench shim] $(basename \"$0\") $*: no-op\"\nexit 0\n"


def _record_start(path: Path, deadline: float) -> Optional[float]:
    while time.time() < deadline:
        try:
            return float(json.loads(path.read_text())["start"])
        except (OSError, ValueError, KeyError, TypeError):
            time.sleep(0.05)
    return None


def _stop_session(sid: int) -> None:
    procs = head_processes.find_processes(sid=sid, marker=None, since=0.0)
    head_processes.terminate(procs, grace=3.0)


def run_seed(seed: Path, work: Path) -> float:
    checkout = build_checkout(work / "seed_checkout")
    (checkout / "slime" / "scripts" / "models").mkdir(parents=True, exist_ok=True)
    (checkout / "slime" / "scripts" / "models" / "qwen3-4B.sh").write_text(MODELS_SH)
    script = checkout / "run_qwen3_4b.sh"
    shutil.copyfile(seed, script)
    shims = work / "shims"
    shims.mkdir(exist_ok=True)
    state = work / "seed_state"
    state.mkdir(exist_ok=True)
    real_ray = shutil.which("ray")
    assert real_ray, "ray is not on PATH"
    temp = tempfile.mkdtemp(prefix="sd", dir="/tmp")
    ports = {"dashboard": head_ports.free_port(), "gcs": head_ports.free_port(), "client": head_ports.free_port(),
             "agent": head_ports.free_port(), "temp": temp}
    (state / "ports").write_text("\n".join(f"{k}={v}" for k, v in ports.items()) + "\n")
    (shims / "ray").write_text(RAY_SHIM.format(python=sys.executable, real=real_ray, state=str(state)))
    for name in ("pkill", "docker"):
        (shims / name).write_text(NOOP)
    for f in shims.iterdir():
        f.chmod(0o755)
    record = checkout / "exp" / "clawgym-rl-4b-instruct-2507" / "standin_record.json"
    env = {k: v for k, v in os.environ.items() if k not in ("WANDB_KEY", "WANDB_API_KEY", "RAY_ADDRESS")}
    env["PATH"] = f"{shims}:{env['PATH']}"
    t0 = time.time()
    proc = subprocess.Popen(["bash", str(script)], cwd=checkout, env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        started = _record_start(record, t0 + 300)
        proc.wait(timeout=300)
    finally:
        if proc.poll() is None:
            proc.kill()
        sid_file = state / "head_sid"
        if sid_file.exists():
            _stop_session(int(sid_file.read_text()))
        shutil.rmtree(temp, ignore_errors=True)
    if started is None:
        raise RuntimeError(f"the seed's job never started; see {work}")
    return started - t0


def run_clawgym(work: Path, name: str, extra: List[str], env_extra: Dict[str, str]) -> float:
    checkout = build_checkout(work / f"{name}_checkout")
    record = checkout / "exp" / name / "standin_record.json"
    env = {k: v for k, v in os.environ.items() if k not in ("WANDB_KEY", "WANDB_API_KEY", "RAY_ADDRESS")}
    env.update(env_extra)
    cmd = [sys.executable, str(ROOT / "train.py"), *checkout_overrides(checkout, skip_checks=LAUNCH_SKIPS),
           f"run_name={name}", f"hydra.run.dir={work}/hydra_{name}", *extra]
    t0 = time.time()
    proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    started = _record_start(record, t0 + 300)
    _, err = proc.communicate(timeout=300)
    if started is None or proc.returncode != 0:
        raise RuntimeError(f"clawgym run {name} failed ({proc.returncode}):\n{err[-2000:]}")
    return started - t0


def main(argv: Optional[List[str]] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=5, help="runs of each variant (median reported)")
    ap.add_argument("--seed", type=Path, default=DEFAULT_SEED, help="the seed script to compare against")
    args = ap.parse_args(argv)
    if not args.seed.is_file():
        print(f"seed script not found: {args.seed} (set --seed or CLAWGYM_SHARED)", file=sys.stderr)
        return 2
    results: Dict[str, List[float]] = {"seed": [], "clawgym_local_head": [], "clawgym_existing_cluster": []}
    with tempfile.TemporaryDirectory(prefix="bench_launch_") as tmp:
        work = Path(tmp)
        state = work / "clawgym_state"
        env_extra = {"CLAWGYM_STATE_DIR": str(state)}
        os.environ["CLAWGYM_STATE_DIR"] = str(state)
        failures = 0
        for i in range(args.repeat):
            for attempt in range(3):
                # On an overloaded machine the seed's own `ray start` can time out; say so and retry.
                try:
                    results["seed"].append(run_seed(args.seed, work / f"seed{i}_{attempt}"))
                    break
                except RuntimeError as exc:
                    failures += 1
                    print(f"seed run {i} attempt {attempt} failed: {exc}", file=sys.stderr, flush=True)
            else:
                raise SystemExit("the seed failed three times in a row; see the messages above")
            local = [f"ray.port={head_ports.free_port()}", f"ray.dashboard_port={head_ports.free_port()}",
                     "ray.num_gpus=8"]
            results["clawgym_local_head"].append(run_clawgym(work / f"local{i}", f"bench-local{i}", local, env_extra))
        head = head_start.start_head(
            ["ray", "start", "--head", "--node-ip-address", "127.0.0.1", "--port", str(head_ports.free_port()),
             "--num-gpus", "8", "--disable-usage-stats", "--dashboard-host", "127.0.0.1",
             "--dashboard-port", str(head_ports.free_port())], {}, secrets={}, quiet=True)
        try:
            for i in range(args.repeat):
                results["clawgym_existing_cluster"].append(
                    run_clawgym(work / f"existing{i}", f"bench-existing{i}", [f"ray.address={head.dashboard_address}"],
                                env_extra))
        finally:
            head_start.stop_head(head, quiet=True)
    med = {k: statistics.median(v) for k, v in results.items()}
    print("time from command to job running (seconds; median of "
          f"{args.repeat}, load average {os.getloadavg()[0]:.1f}):")
    for k, v in results.items():
        print(f"  {k:<26} {med[k]:6.2f}   runs: {', '.join(f'{x:.2f}' for x in v)}")
    if failures:
        print(f"  (seed runs that failed and were retried: {failures})")
    print(f"ratio clawgym local head / seed:       {med['clawgym_local_head'] / med['seed']:.2f}  (target <= 0.50)")
    print(f"ratio clawgym existing cluster / seed: {med['clawgym_existing_cluster'] / med['seed']:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
