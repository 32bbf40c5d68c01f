"""Time from a hang's start to the hang verdict (stacks written), against the stated ``stall_s``.

The stand-in trainer (STANDIN_HANG=1) prints its start lines and hangs silent in a named function;
its log's last write is the hang's start. The hang monitor is polled every ``--poll`` seconds, as
the supervisor's loop would; the verdict comes after ``stall_s`` plus at most one poll plus the
py-spy dump. Printed: the median time to the verdict, its ratio to stall_s, and the dump's share.
The loop's own stop (what frees the GPUs) is the supervisor's and is not timed here.

    python benchmarks/bench_hang.py [--stall 3] [--poll 0.5] [--reps 3]
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from clawgym.demo.checkout import STANDIN  # noqa: E402
from clawgym.supervisor.hang import HangMonitor  # noqa: E402
from clawgym.supervisor.monitor import RunState  # noqa: E402


def once(stall: float, poll: float, tmp: Path, i: int):
    sid = f"raysubmit_benchhang{os.getpid()}_{i}"
    save = tmp / f"save{i}"
    save.mkdir()
    log = tmp / f"job{i}.log"
    env = {**os.environ, "STANDIN_HANG": "1",
           "RAY_JOB_CONFIG_JSON_ENV_VAR": json.dumps({"metadata": {"job_submission_id": sid}})}
    with open(log, "w") as out:
        proc = subprocess.Popen([sys.executable, str(STANDIN), "--save", str(save)], stdout=out,
                                stderr=subprocess.STDOUT, env=env)
    try:
        while "record:" not in log.read_text():
            time.sleep(0.05)
        started = time.time()
        monitor = HangMonitor(stall, "bench")
        while True:
            now = time.time()
            t = time.perf_counter()
            v = monitor.poll(RunState(save_dir=save, submission_id=sid, attempt=1, started=started, now=now,
                                      config={}, log_file=log))
            if v is not None:
                hang_start = os.stat(log).st_mtime
                return time.time() - hang_start, time.perf_counter() - t
            time.sleep(poll)
    finally:
        proc.send_signal(signal.SIGKILL)  # the process this run started
        proc.wait()


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--stall", type=float, default=3.0)
    ap.add_argument("--poll", type=float, default=0.5)
    ap.add_argument("--reps", type=int, default=3)
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        got = [once(a.stall, a.poll, Path(tmp), i) for i in range(a.reps)]
    total = statistics.median(g[0] for g in got)
    dump = statistics.median(g[1] for g in got)
    print(f"stall_s {a.stall:g} s, poll every {a.poll:g} s, medians of {a.reps}")
    print(f"  hang start -> verdict with stacks: {total:.2f} s = {total / a.stall:.2f} x stall_s "
          f"(the last poll, with the py-spy dump: {dump:.2f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
