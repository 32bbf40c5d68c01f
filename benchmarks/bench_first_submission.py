"""Time to the first submission of a packed sweep on a local head the sweep starts itself.

    python benchmarks/bench_first_submission.py [--repeat 3] [--sleep 1]

Runs, for real (Ray head, job submission, the fixture checkout's recording stand-in
trainers sleeping ``--sleep`` seconds), the packed sweep of ``bench_sweep_packing.py``

    python train.py -m gpu_layout=split_4_4,split_2_2,split_1_1 rollout.temperature=0.6,0.7,0.8,0.9 \\
        ray.num_gpus=8 ray.port=<free> ray.dashboard_port=<free>

(12 jobs on 8 GPUs) with no ``ray.address``, so clawgym starts the head. The benchmark
stamps, from the command's start:

- ``answers``: the head's dashboard first answers ``/api/version`` (polled every 50 ms from
  here), the baseline measured in the same run;
- ``first``: clawgym's ``submitted job`` line for the first job (Ray's ``submit_job`` returned);
- ``recorded``: clawgym's ``started Ray head`` line (``ray start`` finished, head recorded).

It prints the medians of ``first - answers`` (target <= 3 s), and the ratio ``first / answers``
(how much of the time to the first submission is the head itself; 1.0 would be submitting
the instant the head answers).
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path
from typing import Dict, List, Optional

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

SWEEP = ["gpu_layout=split_4_4,split_2_2,split_1_1", "rollout.temperature=0.6,0.7,0.8,0.9"]
TARGET_S = 3.0


def _answers(address: str) -> bool:
    try:
        with urllib.request.urlopen(f"{address}/api/version", timeout=0.5) as resp:
            return resp.status == 200
    except OSError:
        return False


def run_once(work: Path, sleep: float) -> Dict[str, float]:
    from clawgym.backends.head import ports as head_ports
    from tests.fixtures.checkout import build_checkout

    checkout = build_checkout(work / "checkout")
    port, dash = head_ports.free_port(), head_ports.free_port()
    address = f"http://127.0.0.1:{dash}"
    overrides = [f"paths.root={checkout}", "skip_checks=[gpus,docker,image,memory]", "sandbox.cleanup_leftovers=false",
                 f"paths.save={work}/exp/${{run_name}}", f"+extra_env.STANDIN_RECORD_DIR={work}/records",
                 f"+extra_env.STANDIN_SLEEP={sleep}", f"ray.port={port}", f"ray.dashboard_port={dash}",
                 "ray.num_gpus=8", f"hydra.sweep.dir={work}/multirun", "hydra.launcher.poll_interval=0.5", *SWEEP]
    env = {k: v for k, v in os.environ.items() if k not in ("RAY_ADDRESS", "WANDB_KEY", "WANDB_API_KEY")}
    env.update(PYTHONUNBUFFERED="1", CLAWGYM_STATE_DIR=str(work / "state"))
    stamps: Dict[str, float] = {}
    t0 = time.monotonic()
    proc = subprocess.Popen([sys.executable, str(ROOT / "train.py"), "-m", *overrides], cwd=work, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, bufsize=1)
    done = threading.Event()

    def watch_dashboard() -> None:
        while not done.is_set() and "answers" not in stamps:
            if _answers(address):
                stamps["answers"] = time.monotonic() - t0
            else:
                time.sleep(0.05)

    watcher = threading.Thread(target=watch_dashboard, daemon=True)
    watcher.start()
    out: List[str] = []
    assert proc.stdout is not None
    for line in proc.stdout:
        now = time.monotonic() - t0
        out.append(line)
        if "[clawgym] submitted job" in line:
            stamps.setdefault("first", now)
        elif "started Ray head" in line:
            stamps.setdefault("recorded", now)
    proc.wait()
    done.set()
    watcher.join(timeout=5)
    if proc.returncode != 0 or not {"answers", "first", "recorded"} <= set(stamps):
        raise RuntimeError(f"sweep failed ({proc.returncode}), stamps {stamps}:\n{''.join(out[-40:])}")
    stamps["total"] = time.monotonic() - t0
    return stamps


def main(argv: Optional[List[str]] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=3, help="sweeps to run (medians reported)")
    ap.add_argument("--sleep", type=float, default=1.0, help="seconds each stand-in trainer runs")
    args = ap.parse_args(argv)
    runs: List[Dict[str, float]] = []
    for i in range(args.repeat):
        work = Path(tempfile.mkdtemp(prefix="clawgym-bench-first-"))
        try:
            runs.append(run_once(work, args.sleep))
        finally:
            shutil.rmtree(work, ignore_errors=True)
        r = runs[-1]
        print(f"run {i}: head answers {r['answers']:6.2f}s  first submission {r['first']:6.2f}s  "
              f"head recorded {r['recorded']:6.2f}s  sweep done {r['total']:6.1f}s", flush=True)
    med = {k: statistics.median(r[k] for r in runs) for k in runs[0]}
    gap = statistics.median(r["first"] - r["answers"] for r in runs)
    ratio = statistics.median(r["first"] / r["answers"] for r in runs)
    print(f"packed sweep, 12 jobs on 8 GPUs, local head started by the sweep; medians of {len(runs)} runs, "
          f"load average {os.getloadavg()[0]:.1f}:")
    print(f"  command -> head answers      {med['answers']:6.2f} s   (baseline)")
    print(f"  command -> first submission  {med['first']:6.2f} s   ratio {ratio:.2f}x the baseline")
    print(f"  head answers -> first submission {gap:5.2f} s   (target <= {TARGET_S:.0f} s) "
          f"{'OK' if gap <= TARGET_S else 'OVER TARGET'}")
    print(f"  command -> head recorded     {med['recorded']:6.2f} s   (ray start finished)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
