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


def clawgym(env: Dict[str, str], *argv: str, timeout: float = 180) -> subprocess.CompletedProcess:
    """``python -m clawgym ...`` with the launch's environment (its state dir: clawgym's SLURM records)."""
    return subprocess.run([sys.executable, "-m", "clawgym", *argv], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=timeout)


def job_state(slurm_cluster, job: str) -> Dict[str, str]:
    from clawgym.backends.slurm import parse_scontrol

    return parse_scontrol(slurm_cluster.run("scontrol", "show", "job", "-o", job, check=False).stdout)


def wait_state(slurm_cluster, job: str, ok, what: str, timeout: float = 120) -> Dict[str, str]:
    deadline = time.time() + timeout
    while True:
        info = job_state(slurm_cluster, job)
        if ok(info):
            return info
        assert time.time() < deadline, f"SLURM job {job} never {what}: {info}"
        time.sleep(0.2)


def test_clawgym_jobs_stop_of_a_slurm_run_records_the_users_stop_and_cancels_it_for_good(
        slurm_cluster, clawgym_checkout, env, tmp_path):
    run = Launch(clawgym_checkout, env, tmp_path, f"sljobstop{os.getpid()}", *rollouts(100000, sleep=0.2))
    run.wait_for("[standin] rollout step 2")
    job = run.job_id()
    # The id the launch and `clawgym runs` show for a SLURM run.
    res = clawgym(env, "jobs", "stop", f"slurm:{job}")
    assert res.returncode == 0 and f"slurm:{job}: CANCELLED" in res.stdout, res.stdout + res.stderr
    rc = run.wait()
    out = run.output + run.job_output()
    # The exit-code table: a run a person stopped is "interrupted".
    assert rc == 130, out
    rec = read_attempts(run.save)
    assert [a.cls for a in rec.attempts] == [C.STOPPED_BY_USER], out
    # Classified from clawgym's own record of the stop (the most trusted evidence), not from SLURM's TERM.
    assert rec.attempts[0].evidence == "clawgym recorded the user's stop", rec.attempts[0].evidence
    assert rec.stopped["by"] == "user" and rec.attempts[0].next == "stop" and "requeued" not in out
    stop = json.loads((run.save / "clawgym" / "user_stopped.json").read_text())
    assert stop["slurm_job"] == job and stop["by"] == "user"
    info = job_state(slurm_cluster, job)
    assert info["JobState"] == "CANCELLED" and info["Restarts"] == "0", info
    assert_nothing_left(slurm_cluster, job)


def test_clawgym_jobs_stop_refuses_a_slurm_job_clawgym_did_not_submit(slurm_cluster, env, tmp_path):
    # A job of someone else's on the same cluster: never cancelled by clawgym.
    job = slurm_cluster.run("sbatch", "--parsable", "-o", "/dev/null", "--wrap", "sleep 120").stdout.strip()
    try:
        res = clawgym(env, "jobs", "stop", f"slurm:{job}")
        assert res.returncode == 2, res.stdout + res.stderr
        assert f"no SLURM job {job} submitted by clawgym is recorded" in res.stderr and "fix:" in res.stderr
        assert "Traceback" not in res.stderr
        assert job_state(slurm_cluster, job)["JobState"] in ("PENDING", "RUNNING")
    finally:
        slurm_cluster.run("scancel", job, check=False)  # the test's own job
    slurm_cluster.wait_idle(timeout=60)


@pytest.mark.parametrize("how", ["scancel, read by runs", "scancel, read by show", "clawgym jobs stop"])
def test_a_cancel_while_the_job_is_requeued_between_allocations_is_recorded_as_the_users_stop(
        slurm_cluster, clawgym_checkout, env, tmp_path, how):
    run = Launch(clawgym_checkout, env, tmp_path, f"slpend{how.split()[-1]}{os.getpid()}", *rollouts(30, sleep=0.4))
    run.wait_for("[standin] saved checkpoint iter_0000003")
    job = run.job_id()
    slurm_cluster.run("scancel", "--signal=USR1", "--batch", job)
    # Requeued by its supervisor at the lead: pending, no supervisor runs until its next allocation. Held
    # there (scontrol hold), so that the cancel surely lands between the two allocations.
    wait_state(slurm_cluster, job, lambda i: i.get("JobState") == "PENDING" and i.get("Restarts") == "1",
               "went back to the queue")
    slurm_cluster.run("scontrol", "hold", job)
    if how.startswith("scancel"):
        slurm_cluster.run("scancel", job)
    else:
        res = clawgym(env, "jobs", "stop", f"slurm:{job}")
        assert res.returncode == 0 and "attempts.json" in res.stdout, res.stdout + res.stderr
    rc = run.wait()
    out = run.output + run.job_output()
    assert rc == 130, out
    if how.startswith("scancel"):
        # Nobody recorded it yet (no supervisor ran): the first reader does, from SLURM's CANCELLED.
        assert read_attempts(run.save).stopped is None
        read = clawgym(env, "runs", str(run.save), "--json") if how.endswith("runs") else \
            clawgym(env, "show", str(run.save), "--no-config")
        assert read.returncode == 0, read.stdout + read.stderr
        if how.endswith("show"):
            assert "CANCELLED between two allocations" in read.stdout, read.stdout
    rec = read_attempts(run.save)
    assert [a.cls for a in rec.attempts] == [C.TIME_LIMIT], out
    # The resume the lead promised never came: what came next is the user's stop.
    assert rec.attempts[0].next == "stop" and rec.stopped["by"] == "user", rec.to_dict()
    assert f"SLURM job {job} CANCELLED between two allocations (requeued, Restarts=1)" in rec.stopped["why"]
    info = job_state(slurm_cluster, job)
    assert info["JobState"] == "CANCELLED" and info["Restarts"] == "1", info
    assert_nothing_left(slurm_cluster, job)


def test_slurms_lead_before_the_first_submission_requeues_the_job_and_its_next_allocation_starts_the_run(
        slurm_cluster, clawgym_checkout, env, tmp_path):
    run = Launch(clawgym_checkout, env, tmp_path, f"slearly{os.getpid()}", *rollouts(4))
    run.wait_for("submitted SLURM job")
    job = run.job_id()
    # The moment the batch shell starts the allocation's Ray head (its log appears), long before the
    # runner can submit the run: SLURM's lead (what --signal=B:USR1@N sends near the time limit) now.
    deadline = time.time() + 120
    while not list((run.save / "clawgym" / "slurm").glob(f"*/ray-head-{job}.log")):
        assert time.time() < deadline and run.proc.poll() is None, run.output
        time.sleep(0.05)
    slurm_cluster.run("scancel", "--signal=USR1", "--batch", job)
    rc = run.wait()
    out = run.output + run.job_output()
    assert rc == 0, out
    rec = read_attempts(run.save)
    assert [a.cls for a in rec.attempts] == [C.TIME_LIMIT, C.FINISHED], out
    first = rec.attempts[0]
    assert first.submission_id is None and "before the run was submitted" in first.evidence, rec.to_dict()
    assert first.next == "resume" and f"requeued SLURM job {job}" in out, out
    # No trainer of the job ran before: the next allocation starts the run, as the launch would have.
    record = json.loads((run.save / "standin_record.json").read_text())
    assert record["env"]["SLURM_RESTART_COUNT"] == "1" and record["start_rollout_id"] == 0, record
    assert "Traceback" not in out
    assert_nothing_left(slurm_cluster, job)


def test_after_an_oom_the_moved_layout_runs_in_the_same_allocation_when_it_fits(
        slurm_cluster, clawgym_checkout, env, tmp_path):
    from clawgym.config.compose import compose, to_plain
    from clawgym.supervisor.oom import after_oom

    # A layout the memory plan finds tight (tests/test_supervisor_oom.py): the move after an OOM keeps the
    # GPU count, so the 1 node x 8 GPUs this batch job was granted fit it.
    typed = ["model=qwen3_8b", "gpu_layout=colocate_8", "memory.gpu=h100_80gb", "health.disk_guard=false"]
    expected = after_oom(to_plain(compose(typed)), typed, gpu="h100_80gb")
    assert expected.overrides, expected.why
    from tests.fixtures.checkout import LAUNCH_SKIPS

    # The fixture checkout has no 8B weights (the stand-in reads none).
    skips = f"skip_checks=[{','.join([*LAUNCH_SKIPS, 'checkpoint'])}]"
    run = Launch(clawgym_checkout, env, tmp_path, f"sloom{os.getpid()}", *rollouts(6), *typed, skips,
                 "+extra_env.STANDIN_FAIL=oom@3", f"+extra_env.STANDIN_FAIL_ONCE={tmp_path}/failed-once")
    rc = run.wait()
    job = run.job_id()
    out = run.output + run.job_output()
    assert rc == 0, out
    rec = read_attempts(run.save)
    assert [a.cls for a in rec.attempts] == [C.CUDA_OOM, C.FINISHED], out
    moves = " ".join(expected.overrides)
    assert f"the next attempt runs with {moves} in this SLURM allocation (the same 1 node(s) x 8 GPU(s))" in out, out
    assert "requeued" not in run.output and "needs a new batch job" not in out
    # The resumed trainer got the moved layout's flags, in the same SLURM job, from the last complete save.
    record = json.loads((run.save / "standin_record.json").read_text())
    argv = record["argv"]
    assert argv[argv.index("--max-tokens-per-gpu") + 1] == "40960", argv
    assert record["env"]["SLURM_JOB_ID"] == job and record["start_rollout_id"] == rec.attempts[1].resumed_from + 1
    assert_nothing_left(slurm_cluster, job)
