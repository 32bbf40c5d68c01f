"""The SLURM batch script (cluster=slurm): golden files, ``bash -n``, and the rules it must keep.

The script is a pure function of the plan and the resolved config; the multi-node
paths (srun workers, head address) cannot run on the one-node test cluster, so they are
checked here. After an intended change, regenerate the goldens and review the diff:

    CLAWGYM_UPDATE_GOLDEN=1 python -m pytest tests/test_slurm_script.py -q
    git diff tests/golden/
"""

from __future__ import annotations

import functools
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Dict, List, Tuple

import pytest

from clawgym.backends.slurm import allocation, batch_script, sbatch_directives
from clawgym.config.compose import compose, to_plain
from clawgym.plan.build import build_plan_from_dict
from clawgym.validate import violations

GOLDEN = Path(__file__).resolve().parent / "golden"
UPDATE = os.environ.get("CLAWGYM_UPDATE_GOLDEN") == "1"
TS = "20260101_000000"
ROOT = "/shared/ClawGym-RL"
PYTHON = "/shared/venv/bin/python"
SNAP = f"{ROOT}/exp/run/clawgym/snapshots/clawgym-run-{TS}"
SECRETS = {"WANDB_API_KEY": "wandb-api-secret-1234567890", "SGLANG_API_KEY": "sglang-secret-abcdef"}

#: Golden file -> overrides.
MULTI_NODE = ["model=qwen3_32b", "gpu_layout.actor_num_nodes=2", "gpu_layout.actor_gpus=8",
              "gpu_layout.rollout_gpus=8", "slurm.partition=gpu", "slurm.account=rl", "slurm.qos=high",
              "slurm.time=2-00:00:00", "slurm.cpus_per_node=96", "slurm.mem_per_node=0", "slurm.gpu_type=h100",
              "slurm.extra_sbatch=[--exclusive]", "slurm.setup=['module load cuda/12.4']"]
GOLDENS: Dict[str, List[str]] = {
    "slurm_one_node": [],
    "slurm_multi_node": MULTI_NODE,
    "slurm_unsupervised": ["restart.enabled=false"],
}


@functools.lru_cache(maxsize=None)
def resolved(overrides: Tuple[str, ...]) -> dict:
    cfg = compose([f"paths.root={ROOT}", "cluster=slurm", "run_name=run", *overrides])
    assert violations(cfg) == [], [v.format() for v in violations(cfg)]
    return to_plain(cfg)


def script_for(overrides: List[str], environ: Dict[str, str] | None = None) -> str:
    c = resolved(tuple(overrides))
    plan = build_plan_from_dict(c, environ=environ or {}, timestamp=TS)
    return batch_script(plan, c, plan_file=f"{SNAP}/launch_plan.json",
                        output=f"{ROOT}/exp/run/clawgym/slurm/clawgym-run-{TS}/slurm-%j.out",
                        python=PYTHON, snapshot=SNAP)


def sbatch_lines(script: str) -> List[str]:
    return [ln[len("#SBATCH "):] for ln in script.splitlines() if ln.startswith("#SBATCH ")]


@pytest.mark.parametrize("name", list(GOLDENS))
def test_golden_batch_script(name: str):
    text = script_for(GOLDENS[name])
    path = GOLDEN / f"{name}.sh"
    if UPDATE:
        path.write_text(text)
    assert path.is_file(), f"{path} missing: run with CLAWGYM_UPDATE_GOLDEN=1 to create it"
    assert text == path.read_text()


@pytest.mark.skipif(shutil.which("bash") is None, reason="bash is not installed")
@pytest.mark.parametrize("name", list(GOLDENS))
def test_batch_script_is_valid_bash(name: str, tmp_path: Path):
    script = tmp_path / "batch.sh"
    script.write_text(script_for(GOLDENS[name]))
    res = subprocess.run(["bash", "-n", str(script)], capture_output=True, text=True)
    assert res.returncode == 0, res.stderr


def test_continued_command_lines_hold_no_comment():
    # A comment line inside a backslash-continued command ends the command there (bash -n cannot tell).
    lines = script_for(MULTI_NODE).splitlines()
    for prev, line in zip(lines, lines[1:]):
        if prev.rstrip().endswith("\\"):
            assert not line.lstrip().startswith("#"), (prev, line)


def test_sbatch_directives_come_before_any_command():
    # sbatch stops reading #SBATCH lines at the first command.
    lines = script_for(MULTI_NODE).splitlines()
    last_directive = max(i for i, ln in enumerate(lines) if ln.startswith("#SBATCH"))
    assert all(ln.startswith("#") for ln in lines[:last_directive + 1])


def test_allocation_is_sized_from_the_layout():
    # 2 actor nodes x 8 GPUs + 8 rollout GPUs = 24 GPUs = 3 nodes of 8.
    c = resolved(tuple(MULTI_NODE))
    assert (allocation(c).nodes, allocation(c).gpus_per_node) == (3, 8)
    lines = sbatch_lines(script_for(MULTI_NODE))
    assert "--nodes=3" in lines and "--gres=gpu:h100:8" in lines and "--ntasks-per-node=1" in lines
    # One node: only the GPUs the run holds, so small sweep jobs share a node.
    one = resolved(("gpu_layout=split_1_1",))
    assert (allocation(one).nodes, allocation(one).gpus_per_node) == (1, 2)


def test_unset_slurm_settings_are_left_to_the_cluster():
    lines = sbatch_lines(script_for([]))
    for option in ("--partition", "--account", "--qos", "--time", "--mem", "--cpus-per-task"):
        assert not any(ln.startswith(option) for ln in lines), (option, lines)
    c = resolved(())
    assert sbatch_directives(c, allocation(c), output="o") == [
        "--job-name=run", "--nodes=1", "--ntasks-per-node=1", "--gres=gpu:8", "--requeue", "--signal=B:USR1@120",
        "--open-mode=append", "--output=o"]


def test_set_slurm_settings_become_directives():
    lines = sbatch_lines(script_for(MULTI_NODE))
    for expected in ("--partition=gpu", "--account=rl", "--qos=high", "--time=2-00:00:00", "--cpus-per-task=96",
                     "--mem=0", "--exclusive", "--signal=B:USR1@120"):
        assert expected in lines, (expected, lines)
    assert "module load cuda/12.4" in script_for(MULTI_NODE).splitlines()


def test_workers_start_through_srun_only_on_several_nodes():
    multi, one = script_for(MULTI_NODE), script_for([])
    srun = [ln for ln in multi.splitlines() if ln.startswith("srun ")]
    assert len(srun) == 1 and "--nodes=$((NODES - 1))" in srun[0] and '--exclude="$SLURMD_NODENAME"' in srun[0]
    assert not any(ln.startswith("srun ") for ln in one.splitlines())
    # The multi-node head binds the node's address (not loopback) unless slurm.head_ip says otherwise.
    assert "--head-ip" not in multi.split("preflight", 1)[1].split("\n", 1)[0]
    assert "--head-ip 10.0.0.5" in script_for([*MULTI_NODE, "slurm.head_ip=10.0.0.5"])


def test_head_environment_and_cleanup_on_signal():
    text = script_for([])
    # The plan's head environment.
    assert "export RAY_health_check_failure_threshold=20" in text
    # SIGTERM (scancel, time limit) stops everything: the whole head process group with SIGKILL,
    # then whatever carries the job's marker.
    assert "trap 'on_signal SIGTERM' TERM" in text
    assert 'kill -KILL -- "-$head_pid"' in text and '"${RUNNER[@]}" reap' in text
    assert re.search(r'^setsid "\$\{RAY\[@\]\}" start --head --block', text, re.M)
    # The job's status is the script's.
    assert text.rstrip().endswith('exit "$rc"')


def test_batch_script_holds_no_secret():
    text = script_for([], environ=SECRETS)
    for value in SECRETS.values():
        assert value not in text
    # The plan names the secrets; the job gets them from sbatch's environment.
    assert "WANDB_API_KEY" not in text.split("\n#SBATCH", 1)[1]


def test_dry_run_prints_and_writes_the_script(tmp_path: Path):
    from tests.conftest import ROOT as REPO

    out = tmp_path / "out"
    res = subprocess.run([os.sys.executable, str(REPO / "train.py"), "cluster=slurm", "dry_run=true",
                          "slurm.partition=gpu", f"hydra.run.dir={out}"], capture_output=True, text=True,
                         cwd=REPO, timeout=120)
    assert res.returncode == 0, res.stderr
    written = (out / "slurm_batch.sh").read_text()
    assert "#SBATCH --partition=gpu" in res.stdout and written in res.stdout
    assert f"PLAN={out}/launch_plan.json" in written and (out / "launch_plan.json").is_file()


def _marked(marker: str) -> List[int]:
    want = f"CLAWGYM_HEAD_ID={marker}".encode()
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if want in (entry / "environ").read_bytes().split(b"\0"):
                    found.append(int(entry.name))
            except OSError:
                pass
    return found


def test_reap_also_kills_what_a_dying_process_forked_after_the_listing(tmp_path: Path):
    """A marked shell that keeps starting detached children (as a raylet starts workers, or a
    driver's shell its next command): a single list-then-kill pass misses the child forked in
    between, which is re-parented to init and outlives the job."""
    import sys
    import time

    marker = f"reaptest-{os.getpid()}-{time.time_ns()}"
    env = {**os.environ, "CLAWGYM_HEAD_ID": marker}
    spawner = subprocess.Popen(["bash", "-c", "while :; do (sleep 30 &); done"], env=env,
                               start_new_session=True)
    try:
        deadline = time.time() + 30
        while len(_marked(marker)) < 20 and time.time() < deadline:
            time.sleep(0.05)
        assert len(_marked(marker)) >= 20, "the spawner should have started marked children"
        res = subprocess.run([sys.executable, "-m", "clawgym.backends.slurm_run", "reap"], env=env,
                             capture_output=True, text=True, timeout=60)
        assert res.returncode == 0, res.stderr
        spawner.wait(timeout=10)
        time.sleep(0.3)
        assert _marked(marker) == [], "reap left marked processes behind"
        assert "leftover process(es) of this job" in res.stdout
    finally:
        # Only what this test started: its marker is unique to it.
        for pid in _marked(marker):
            try:
                os.kill(pid, 9)
            except OSError:
                pass
        if spawner.poll() is None:
            spawner.kill()


def test_a_supervised_run_is_requeueable_and_gets_usr1_before_its_time_limit():
    # restart.enabled (the default): SLURM may requeue the job, the lead is USR1 (a TERM is also an scancel,
    # which stops the run for good), every allocation appends to one output, and the supervisor runs the job.
    lines = sbatch_lines(script_for(["slurm.signal_delay_s=300"]))
    assert "--requeue" in lines and "--signal=B:USR1@300" in lines and "--open-mode=append" in lines
    text = script_for(["slurm.signal_delay_s=300"])
    assert "trap 'on_lead' USR1" in text and '"${SUPERVISED[@]}" run "$PLAN"' in text
    assert "-m clawgym.supervisor.slurm_runner" in text and "--slurm-output" in text


def test_an_unsupervised_run_is_neither_requeued_nor_signalled_usr1():
    lines = sbatch_lines(script_for(["restart.enabled=false"]))
    assert "--requeue" not in lines and "--signal=B:TERM@120" in lines
    assert not any(ln.startswith("--signal=B:USR1") for ln in lines)
    text = script_for(["restart.enabled=false"])
    assert "clawgym.supervisor" not in text and "on_lead" not in text


def test_reap_kills_a_process_once_and_does_not_wait_for_it_to_die():
    """A process reap already killed is passed over by its next passes: one that takes long to die (its
    memory being freed, a disk that stalls) keeps its environment meanwhile, and waiting for it spent
    reap's whole timeout of the teardown's time before SLURM's SIGKILL."""
    import time

    from clawgym.backends import slurm_run

    marker = f"reaponce-{os.getpid()}-{time.time_ns()}"
    proc = subprocess.Popen(["sleep", "60"], env={**os.environ, "CLAWGYM_HEAD_ID": marker})
    try:
        who = (proc.pid, slurm_run._start_time(str(proc.pid)))
        # Already killed by an earlier pass: passed over, nothing signalled.
        assert slurm_run._kill_marked(marker, set(), {who: None}) == []
        assert proc.poll() is None
        done: dict = {}
        assert slurm_run._kill_marked(marker, set(), done) == [proc.pid] and who in done
        assert proc.wait(timeout=10) == -9
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
