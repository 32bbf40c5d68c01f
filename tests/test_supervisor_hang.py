"""The hang monitor on a real hung process: a real py-spy names the function it hangs in.

The stand-in trainer (clawgym/demo/standin_trainer.py) with STANDIN_HANG=1 prints its start lines
and then sleeps, silent, in ``wait_in_collective_standin``; Ray's driver environment is given to it
(RAY_JOB_CONFIG_JSON_ENV_VAR with the submission id) so the monitor finds it as Ray's job driver.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time

import pytest

from clawgym.demo.checkout import STANDIN
from clawgym.supervisor import stacks
from clawgym.supervisor.hang import STALL_FLOOR_S, HangMonitor, derived_stall_s
from clawgym.supervisor.monitor import RunState

pytestmark = pytest.mark.skipif(shutil.which("py-spy") is None, reason="py-spy is a dependency (pyproject.toml)")


@pytest.fixture
def hung(tmp_path):
    """A stand-in trainer hung in a named function; stopped by the pid this test started."""
    sid = f"raysubmit_hangtest{os.getpid()}"
    save = tmp_path / "save"
    save.mkdir()
    log = tmp_path / "job.log"
    env = {**os.environ, "STANDIN_HANG": "1",
           "RAY_JOB_CONFIG_JSON_ENV_VAR": json.dumps({"metadata": {"job_submission_id": sid}})}
    with open(log, "w") as out:
        proc = subprocess.Popen([sys.executable, str(STANDIN), "--save", str(save)], stdout=out,
                                stderr=subprocess.STDOUT, env=env)
    try:
        deadline = time.time() + 30
        while "record:" not in log.read_text() and time.time() < deadline:
            time.sleep(0.1)  # its start lines are out: from here on it is silent
        yield proc, sid, save, log
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()


def _state(sid, save, log, started, now, attempt=1):
    return RunState(save_dir=save, submission_id=sid, attempt=attempt, started=started, now=now,
                    config={}, log_file=log)


def test_job_pids_finds_the_driver_by_its_submission_id(hung):
    proc, sid, _, _ = hung
    assert proc.pid in stacks.job_pids(sid)
    assert proc.pid not in stacks.job_pids(sid + "-other")


def test_hang_verdict_names_the_function_it_waits_in_and_writes_the_stacks(hung):
    proc, sid, save, log = hung
    monitor = HangMonitor(2.0, "health.stall_s")
    started = time.time()
    assert monitor.poll(_state(sid, save, log, started, time.time())) is None  # quiet for less than stall_s
    verdict = None
    deadline = time.time() + 20
    while verdict is None and time.time() < deadline:
        time.sleep(0.5)
        verdict = monitor.poll(_state(sid, save, log, started, time.time()))
    assert verdict is not None, "a process silent for stall_s was not called a hang"
    assert verdict.cls == "hang" and verdict.action == "end"
    assert "wait_in_collective_standin" in verdict.evidence, verdict.evidence
    assert f"pid {proc.pid}" in verdict.evidence
    [dump] = verdict.files
    assert dump.parent == save / "stacks" and dump.name.startswith("stacks-")
    assert "wait_in_collective_standin" in dump.read_text()
    assert str(dump) in verdict.evidence


def test_new_log_output_restarts_the_stall_clock(hung):
    _, sid, save, log = hung
    monitor = HangMonitor(5.0, "health.stall_s")
    started = time.time() - 100  # started long ago ...
    t = time.time()
    # ... but its log changed just now: the first look counts from the newest sign of life
    assert monitor.poll(_state(sid, save, log, started, t)) is None
    with open(log, "a") as fh:
        fh.write("a step\n")
    assert monitor.poll(_state(sid, save, log, started, t + 4)) is None  # output at t+4: the clock restarts
    assert monitor.poll(_state(sid, save, log, started, t + 8)) is None
    assert monitor.poll(_state(sid, save, log, started, t + 10)) is not None


def test_stall_s_is_the_override_when_set_and_never_below_the_floor_when_derived():
    assert derived_stall_s({"health": {"stall_s": 42}}) == (42.0, "health.stall_s")
    # A config the step-time model cannot estimate (no model) still gets the floor, said so.
    stall, how = derived_stall_s({"health": {"stall_s": None}})
    assert stall == STALL_FLOOR_S and "floor" in how


def test_jobs_stack_dumps_a_hung_ray_job_into_its_save_dir(ray_cluster, tmp_path):
    """``clawgym jobs stack ID`` on a real Ray job: the stand-in, submitted as Ray's job driver, hangs."""
    from ray.job_submission import JobSubmissionClient

    client = JobSubmissionClient(ray_cluster.address)
    save = tmp_path / "save"
    save.mkdir()
    sid = client.submit_job(entrypoint=f"{sys.executable} {STANDIN} --save {save}",
                            runtime_env={"env_vars": {"STANDIN_HANG": "1"}},
                            metadata={"clawgym_save_dir": str(save)})
    try:
        deadline = time.time() + 120
        while "record:" not in client.get_job_logs(sid) and time.time() < deadline:
            time.sleep(0.5)
        done = subprocess.run([sys.executable, "-m", "clawgym", "jobs", "stack", sid, "--address", ray_cluster.address],
                              capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stderr
        assert "wait_in_collective_standin" in done.stdout, done.stdout
        [dump] = (save / "stacks").glob("stacks-*-on-demand.txt")
        assert "wait_in_collective_standin" in dump.read_text()
    finally:
        client.stop_job(sid)  # the job this test submitted
        deadline = time.time() + 60
        while not client.get_job_status(sid).is_terminal() and time.time() < deadline:
            time.sleep(0.5)


def test_stall_s_derived_from_the_step_time_model_of_a_real_config_and_the_monitors_of_a_run():
    from clawgym.config.compose import compose, to_plain
    from clawgym.supervisor.health import monitors_for

    c = to_plain(compose(["model=qwen3_4b"]))
    stall, how = derived_stall_s(c)
    assert stall >= STALL_FLOOR_S and "longest phase" in how, how
    names = [m.name for m in monitors_for(c)]
    assert names == ["disk-guard", "hang", "health-rules"]  # no retention unless checkpoint.keep_* is set
    c["checkpoint"]["keep_last"] = 3
    assert [m.name for m in monitors_for(c)][0] == "retention"
