"""``clawgym demo [DIR]``: a real 2-job sweep on this machine, no GPUs needed, then its runs table and report.

    clawgym demo [DIR] [--steps N]

Makes a throwaway ClawGym-RL-shaped checkout in DIR (default ``./clawgym-demo``; it must not
exist or be empty) whose trainer is a stand-in (``clawgym/demo/standin_trainer.py``: it logs
slime's metric keys to TensorBoard events, as slime does, and trains nothing). Then it runs
``python train.py -m`` over two learning rates with ``paths.root`` at that checkout: the
normal pipeline (validation, preflight, snapshots, a local Ray head declaring 4 GPUs that Ray
only counts, both jobs side by side, the head stopped at the end), prints ``clawgym runs`` and
writes ``clawgym report`` into ``DIR/report.html``. Each step is said as it goes. Nothing is
left running; DIR stays for you to look at (remove it when done).

The preflight checks that need what a laptop lacks are skipped and named: ``gpus`` (no GPU),
``docker`` and ``image`` (the stand-in starts no agent sandbox), ``memory`` (the plan is for
the real Qwen3-4B).
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import signal
import socket
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import List

from clawgym.common.exit_codes import INTERRUPTED, REFUSED
from clawgym.common.ownership import me

#: The file in DIR that says which demo owns it (pid + start time), made exclusively.
OWNER_FILE = ".clawgym-demo-owner.json"

#: Learning rates of the two jobs (the stand-in's reward rises faster with a higher one).
LRS = ("1e-6", "4e-6")
#: Preflight checks a machine without GPUs, Docker engine or gateway image cannot pass; and the disk
#: check, which sizes a real model's checkpoints (the stand-in's are a few bytes).
SKIPS = ("gpus", "docker", "image", "memory", "disk")
#: GPUs the demo's head declares: two jobs of gpu_layout=split_1_1 (1 actor + 1 rollout GPU) side by side.
HEAD_GPUS = 4


def add_parser(subparsers) -> None:
    p = subparsers.add_parser("demo", help="a real 2-job sweep on this machine without GPUs, then runs + report",
                              description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("dir", nargs="?", default="clawgym-demo", metavar="DIR",
                   help="where the demo's checkout, runs and report go (default: ./clawgym-demo; "
                        "must not exist or be empty)")
    p.add_argument("--steps", type=int, default=4, help="rollout steps each stand-in trainer logs (default 4)")
    p.set_defaults(func=run)


def _free_port() -> int:
    """A loopback port the OS considers free now (the demo's head must not take 6379/8265 from a real one)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _say(text: str) -> None:
    print(f"\n==> {text}", flush=True)


def sweep_command(root: Path, work: Path, steps: int) -> List[str]:
    """The demo's ``train.py -m`` argv (its Hydra app from the package: an installed clawgym has no train.py)."""
    return [sys.executable, "-m", "clawgym.demo.train", "-m",
            f"paths.root={root}", f"skip_checks=[{','.join(SKIPS)}]",
            "gpu_layout=split_1_1", f"ray.num_gpus={HEAD_GPUS}",
            f"ray.port={_free_port()}", f"ray.dashboard_port={_free_port()}",
            "wandb.enabled=false", "sandbox.cleanup_leftovers=false", "eval.interval=2",
            # The stand-in logs rollouts 0..steps-1: the run's last rollout, so its supervisor sees it finish.
            f"rollout.num_rollout={steps}",
            f"+extra_env.STANDIN_ROLLOUT_STEPS={steps}", "+extra_env.STANDIN_STEP_SLEEP=0.5",
            # Two checkpoints each, so `clawgym show` lists them and `clawgym resume` has one to load.
            "+extra_env.STANDIN_CHECKPOINTS=2", "+extra_env.STANDIN_CHECKPOINT_EVERY=0.3", "checkpoint.save_interval=1",
            f"hydra.sweep.dir={work / 'multirun'}", "hydra.launcher.poll_interval=0.5",
            f"optimizer.lr={','.join(LRS)}"]


def _take(work: Path) -> str:
    """Make DIR this demo's (one owner): an owner file created exclusively in an empty or new
    folder, so two demos started together cannot both pass. A refusal's text, or "" when taken."""
    fix_new = f"clawgym demo {shlex.quote(str(work))}-2 (a new folder), or remove it"
    if work.exists() and (not work.is_dir() or any(p.name != OWNER_FILE for p in work.iterdir())):
        return (f"clawgym demo: {work} exists and is not an empty folder; the demo writes a throwaway checkout "
                f"there.\n  fix: {fix_new}")
    try:
        work.mkdir(parents=True, exist_ok=True)
        fd = os.open(work / OWNER_FILE, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    except FileExistsError:
        return (f"clawgym demo: {work} is taken by another clawgym demo ({work / OWNER_FILE} names it); "
                f"one demo per folder.\n  fix: clawgym demo {shlex.quote(str(work))}-2 (a new folder), "
                "or wait for that demo to end")
    except OSError as exc:
        return (f"clawgym demo: cannot write in {work} ({exc.strerror}); the demo writes a throwaway checkout "
                f"there.\n  fix: clawgym demo DIR with a DIR you can write, e.g. clawgym demo "
                f"{shlex.quote(str(Path(tempfile.gettempdir()) / 'clawgym-demo'))}")
    with os.fdopen(fd, "w") as fh:
        fh.write(json.dumps(me()) + "\n")
    return ""


def _follow(cmd: List[str], cwd: Path, env: dict) -> int:
    """Run the sweep in its own session and wait; Ctrl-C or SIGTERM of the demo is forwarded to it
    as SIGINT (once per signal), so the sweep stops its jobs and its head through what it recorded.
    Never SIGKILL (``subprocess.call`` kills its child on an interrupt, orphaning the head)."""
    proc = subprocess.Popen(cmd, cwd=cwd, env=env, start_new_session=True)
    interrupted = False

    def forward(signum, frame):  # noqa: ARG001
        nonlocal interrupted
        interrupted = True
        if proc.poll() is None:
            proc.send_signal(signal.SIGINT)

    old = {sig: signal.signal(sig, forward) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        rc = proc.wait()
    finally:
        for sig, handler in old.items():
            signal.signal(sig, handler)
    return INTERRUPTED if interrupted else rc


def run(args: argparse.Namespace) -> int:
    work = Path(args.dir).expanduser().resolve()
    if args.steps < 1:
        print(f"clawgym demo: --steps {args.steps}: the stand-in must log at least one step, e.g. --steps 4",
              file=sys.stderr)
        return REFUSED
    refusal = _take(work)
    if refusal:
        print(refusal, file=sys.stderr)
        return REFUSED
    try:
        return _demo(args, work)
    finally:
        (work / OWNER_FILE).unlink(missing_ok=True)  # the demo ended: DIR is the user's again


def _demo(args: argparse.Namespace, work: Path) -> int:
    from clawgym.cli import main as cli_main
    from clawgym.demo.checkout import build_checkout

    root = work / "ClawGym-RL"

    _say(f"1/4 a throwaway ClawGym-RL checkout in {root}")
    build_checkout(root)
    print("    slime/train.py and slime/train_async.py are a stand-in trainer: it logs slime's metric keys\n"
          "    (rollout/raw_reward, eval/*, perf/*) to TensorBoard events and trains nothing")

    cmd = sweep_command(root, work, args.steps)
    _say(f"2/4 a 2-job sweep over optimizer.lr={','.join(LRS)} on a local Ray head (no GPUs: it declares "
         f"{HEAD_GPUS} that Ray only counts)")
    print("    what you would type in a real checkout on a GPU machine:\n"
          f"    python train.py -m gpu_layout=split_1_1 optimizer.lr={','.join(LRS)}\n"
          f"    the demo adds skip_checks=[{','.join(SKIPS)}]: this machine may have no GPU, Docker engine or\n"
          "    sandbox image, and the memory plan is for the real Qwen3-4B, which the stand-in never loads",
          flush=True)
    env = dict(os.environ)
    # The plan runs the trainer with ``python3``: this interpreter's, so the stand-in finds what clawgym has.
    env["PATH"] = os.pathsep.join([os.path.dirname(sys.executable), env.get("PATH", "")])
    env.pop("RAY_ADDRESS", None)  # the demo starts its own head, never submits to another cluster
    rc = _follow(cmd, work, env)
    if rc == INTERRUPTED:
        print(f"clawgym demo: interrupted; the sweep stopped its jobs and its head. What it wrote is in {work}",
              file=sys.stderr)
        return INTERRUPTED
    if rc != 0:
        print(f"clawgym demo: the sweep exited {rc}; its output is above, its runs under {root / 'exp'}",
              file=sys.stderr)
        return rc

    exp = root / "exp"
    _say(f"3/4 clawgym runs {exp}")
    rc = cli_main(["runs", str(exp)])
    if rc != 0:
        return rc
    report = work / "report.html"
    _say(f"4/4 clawgym report {exp} --out {report}")
    rc = cli_main(["report", str(exp), "--out", str(report)])
    if rc != 0:
        return rc
    print(f"\ndone: open {report} in a browser. The sweep's head is stopped; nothing is left running.\n"
          f"Next: clawgym show {shlex.quote(str(next(exp.iterdir())))}   (what one run ran: config, argv, versions)\n"
          f"Remove the demo with: rm -r {shlex.quote(str(work))}")
    return 0
