"""A supervised run (restart.enabled, the default) on the real one-node SLURM cluster
(tests/fixtures/slurm_cluster.py): each launch is ``python train.py ... cluster=slurm`` running the
recording stand-in trainer in a real allocation with its own Ray head, dying the way its env says.

- a trainer crash inside the allocation is resubmitted to the same allocation's head from the last
  complete checkpoint, and the run finishes (two attempts recorded);
- SLURM's time-limit lead (the USR1 of ``--signal=B:USR1@N``, sent here with ``scancel --signal=USR1
  --batch``) ends the attempt as a time limit, the job is requeued (``scontrol requeue``) and its next
  allocation resumes from the tracker;
- a requeue by SLURM itself (``scontrol requeue``, as a preemption with PreemptMode=REQUEUE) is a
  preemption, and the next allocation resumes from the tracker;
- a deterministic startup failure is never retried;
- a user's ``scancel`` stops the run for good: no requeue, exit 130.

Each test checks that no process of the job is left once it ended. Like the other SLURM tests they
skip where the cluster cannot start, and fail instead with CLAWGYM_REQUIRE_SLURM=1 (CI).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Dict, List

import pytest

from clawgym.snapshot.attempts import read_attempts
from clawgym.supervisor import classes as C
from tests.fixtures.slurm_cluster import KILL_WAIT
from tests.test_slurm_cluster import base, marker_processes

ROOT = Path(__file__).resolve().parent.parent
#: Seconds a whole supervised launch may take here (two allocations, each starting a Ray head).
LAUNCH_TIMEOUT = 420


@pytest.fixture()
def env(slurm_cluster, tmp_path) -> Dict[str, str]:
    e = {k: v for k, v in os.environ.items() if k not in ("RAY_ADDRESS", "WANDB_API_KEY", "SGLANG_API_KEY")}
    e.update(slurm_cluster.env)
    e["CLAWGYM_STATE_DIR"] = str(tmp_path / "state")
    return e


class Launch:
    """``python train.py ... cluster=slurm`` in the background, its output collected line by line."""

    def __init__(self, checkout: Path, env: Dict[str, str], tmp_path: Path, run_name: str, *overrides: str):
        self.save = checkout / "exp" / run_name
        cmd = [sys.executable, str(ROOT / "train.py"), *base(checkout), f"run_name={run_name}",
               "restart.poll_s=0.5", "checkpoint.save_interval=1", f"hydra.run.dir={tmp_path}/run", *overrides]
        self.proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                     text=True)
        self.lines: List[str] = []
        self.reader = threading.Thread(target=lambda: self.lines.extend(iter(self.proc.stdout.readline, "")),
                                       daemon=True)
        self.reader.start()

    @property
    def output(self) -> str:
        return "".join(self.lines)

    def wait_for(self, text: str, timeout: float = LAUNCH_TIMEOUT) -> None:
        deadline = time.time() + timeout
        while text not in self.output:
            if self.proc.poll() is not None or time.time() > deadline:
                self.kill()
                pytest.fail(f"never saw {text!r}:\n{self.output}\n{self.job_output()}")
            time.sleep(0.25)

    def job_id(self) -> str:
        m = re.search(r"submitted SLURM job (\d+)", self.output)
        assert m, self.output
        return m.group(1)

    def job_output(self) -> str:
        outs = sorted((self.save / "clawgym" / "slurm").glob("*/slurm-*.out"))
        return "".join(f"--- {p}\n{p.read_text(errors='replace')[-6000:]}" for p in outs)

    def wait(self, timeout: float = LAUNCH_TIMEOUT) -> int:
        try:
            rc = self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            pytest.fail(f"the launch did not end in {timeout} s:\n{self.output}\n{self.job_output()}")
        self.reader.join(timeout=10)
        return rc

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()


def assert_nothing_left(slurm_cluster, job_id: str) -> None:
    """SLURM holds no job, and no process of the job's Ray cluster is left (after SLURM's KillWait at most)."""
    slurm_cluster.wait_idle(timeout=60)
    deadline = time.time() + KILL_WAIT + 30
    while marker_processes(job_id) and time.time() < deadline:
        time.sleep(0.5)
    assert not marker_processes(job_id), f"processes of SLURM job {job_id} left: {marker_processes(job_id)}"


def rollouts(n: int, sleep: float = 0.05) -> List[str]:
    return [f"rollout.num_rollout={n}", f"+extra_env.STANDIN_RUN_ROLLOUTS={n}", f"+extra_env.STANDIN_STEP_SLEEP={sleep}",
            "+extra_env.STANDIN_SAVE_EVERY=1"]


def test_a_crash_inside_the_allocation_is_resumed_there_from_the_last_complete_checkpoint(
        slurm_cluster, clawgym_checkout, env, tmp_path):
    run = Launch(clawgym_checkout, env, tmp_path, f"slcrash{os.getpid()}", *rollouts(5),
                 "+extra_env.STANDIN_FAIL=crash@3", f"+extra_env.STANDIN_FAIL_ONCE={tmp_path}/failed-once")
    rc = run.wait()
    job = run.job_id()
    out = run.output + run.job_output()
    assert rc == 0, out
    rec = read_attempts(run.save)
    assert [a.cls for a in rec.attempts] == [C.CRASHED, C.FINISHED], out
    # Resumed in the same allocation (one SLURM job, never requeued) from iter_0000002, the last complete save.
    assert rec.attempts[1].resumed_from == 2 and "resuming from iter_0000002" in out, out
    assert "requeued" not in run.output
    record = json.loads((run.save / "standin_record.json").read_text())
    assert record["start_rollout_id"] == 3 and record["env"]["SLURM_JOB_ID"] == job
    assert record["argv"][record["argv"].index("--load") + 1] == str(run.save)
    assert (run.save / "latest_checkpointed_iteration.txt").read_text().strip() == "4"
    assert_nothing_left(slurm_cluster, job)


def test_slurms_time_limit_lead_requeues_the_job_and_its_next_allocation_resumes_from_the_tracker(
        slurm_cluster, clawgym_checkout, env, tmp_path):
    run = Launch(clawgym_checkout, env, tmp_path, f"sllead{os.getpid()}", *rollouts(30, sleep=0.4))
    run.wait_for("[standin] saved checkpoint iter_0000003")
    job = run.job_id()
    # What SLURM sends slurm.signal_delay_s before the time limit (sbatch --signal=B:USR1@N), now.
    slurm_cluster.run("scancel", "--signal=USR1", "--batch", job)
    rc = run.wait()
    out = run.output + run.job_output()
    assert rc == 0, out
    rec = read_attempts(run.save)
    assert [a.cls for a in rec.attempts] == [C.TIME_LIMIT, C.FINISHED], out
    assert "--signal=B:USR1@120" in rec.attempts[0].evidence
    first_end = rec.attempts[0].checkpoint_at_end
    assert first_end is not None and first_end >= 3 and rec.attempts[1].resumed_from == first_end
    assert f"requeued SLURM job {job}" in out and f"SLURM requeued job {job}" in run.output, out
    # The next allocation (SLURM_RESTART_COUNT=1) started after the tracker, in the same save dir.
    record = json.loads((run.save / "standin_record.json").read_text())
    assert record["env"]["SLURM_RESTART_COUNT"] == "1" and record["start_rollout_id"] == first_end + 1
    assert (run.save / "latest_checkpointed_iteration.txt").read_text().strip() == "29"
    assert_nothing_left(slurm_cluster, job)


def test_a_requeue_by_slurm_is_a_preemption_and_the_next_allocation_resumes_from_the_tracker(
        slurm_cluster, clawgym_checkout, env, tmp_path):
    run = Launch(clawgym_checkout, env, tmp_path, f"slrequeue{os.getpid()}", *rollouts(30, sleep=0.4))
    run.wait_for("[standin] saved checkpoint iter_0000003")
    job = run.job_id()
    # What a preemption with PreemptMode=REQUEUE or an admin does: SLURM TERMs the job and queues it again.
    slurm_cluster.run("scontrol", "requeue", job)
    rc = run.wait()
    out = run.output + run.job_output()
    assert rc == 0, out
    rec = read_attempts(run.save)
    assert [a.cls for a in rec.attempts] == [C.PREEMPTED, C.FINISHED], out
    # Recorded by the allocation that was cut (SLURM's record says it is requeuing the job), or else by the
    # next one from slurmstepd's line: either way SLURM's own words.
    assert ("SLURM is requeuing job" in rec.attempts[0].evidence
            or "DUE TO JOB REQUEUE" in rec.attempts[0].evidence), rec.attempts[0].evidence
    assert rec.attempts[1].resumed_from == rec.attempts[0].checkpoint_at_end >= 3
    record = json.loads((run.save / "standin_record.json").read_text())
    assert record["env"]["SLURM_RESTART_COUNT"] == "1"
    assert record["start_rollout_id"] == rec.attempts[1].resumed_from + 1
    assert_nothing_left(slurm_cluster, job)


def test_a_lost_ray_head_in_the_allocation_requeues_the_job_to_resume_in_a_new_allocation(
        slurm_cluster, clawgym_checkout, env, tmp_path):
    import signal

    from tests.test_slurm_cluster import _cmdline

    run = Launch(clawgym_checkout, env, tmp_path, f"slhead{os.getpid()}", *rollouts(30, sleep=0.4))
    run.wait_for("[standin] saved checkpoint iter_0000003")
    job = run.job_id()
    # The allocation's own Ray head (started by this launch's batch script, in a process group of its own)
    # dies, as on a lost node: no restart can run in this allocation any more.
    heads = [pid for pid in marker_processes(job) if "ray.scripts.scripts start --head" in _cmdline(pid)]
    assert len(heads) == 1, [(p, _cmdline(p)) for p in marker_processes(job)]
    os.killpg(os.getpgid(heads[0]), signal.SIGKILL)
    rc = run.wait()
    out = run.output + run.job_output()
    assert rc == 0, out
    rec = read_attempts(run.save)
    assert [a.cls for a in rec.attempts] == [C.NODE_LOST, C.FINISHED], out
    assert f"requeued SLURM job {job}" in out
    record = json.loads((run.save / "standin_record.json").read_text())
    assert record["env"]["SLURM_RESTART_COUNT"] == "1"
    assert record["start_rollout_id"] == rec.attempts[1].resumed_from + 1 >= 4
    assert_nothing_left(slurm_cluster, job)


def test_a_startup_failure_in_slurm_is_never_retried(slurm_cluster, clawgym_checkout, env, tmp_path):
    run = Launch(clawgym_checkout, env, tmp_path, f"slstartup{os.getpid()}", *rollouts(5),
                 "+extra_env.STANDIN_FAIL=startup")
    rc = run.wait()
    job = run.job_id()
    out = run.output + run.job_output()
    assert rc == 1, out
    rec = read_attempts(run.save)
    assert [a.cls for a in rec.attempts] == [C.STARTUP_FAILURE], out
    assert "unrecognized arguments: --no-such-flag" in out and "stopped for good" in out
    assert rec.stopped["by"] == "supervisor" and "requeued" not in out
    assert_nothing_left(slurm_cluster, job)


def test_a_users_scancel_stops_a_supervised_slurm_run_for_good(slurm_cluster, clawgym_checkout, env, tmp_path):
    run = Launch(clawgym_checkout, env, tmp_path, f"slstop{os.getpid()}", *rollouts(100000, sleep=0.2))
    run.wait_for("[standin] rollout step 2")
    job = run.job_id()
    slurm_cluster.run("scancel", job)
    rc = run.wait()
    out = run.output + run.job_output()
    assert rc == 130, out
    rec = read_attempts(run.save)
    assert [a.cls for a in rec.attempts] == [C.STOPPED_BY_USER], out
    assert rec.stopped["by"] == "user" and "requeued" not in out
    state = slurm_cluster.run("scontrol", "show", "job", "-o", job, check=False).stdout
    assert "JobState=CANCELLED" in state and "Restarts=0" in state, state
    assert_nothing_left(slurm_cluster, job)
