"""The supervisor's loop on the real stand-in trainer, dying the ways real runs die.

The runner here starts the stand-in (clawgym/demo/standin_trainer.py) as a process of its own
session in a real save dir, the way a job's driver runs it, and stops it through the pid it
recorded; the Ray-job runner of a launch is not built yet, so these tests hold the loop, the
classes, the resume point and the guard together, not the place the supervisor runs.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Dict, List

import pytest

import clawgym.demo.standin_trainer as standin
from clawgym.supervisor import classes as C
from clawgym.snapshot.attempts import read_attempts
from clawgym.supervisor.classify import Evidence
from clawgym.supervisor.loop import supervise
from clawgym.supervisor.resume_point import ResumePoint

STANDIN = standin.__file__


class ProcessRunner:
    """The stand-in as the job: ``--save`` and ``--load`` the same save dir, as a resumed run has."""

    backend = "local"

    def __init__(self, save: Path, env: Dict[str, str]):
        self.save, self.env = save, env
        self.procs: Dict[str, subprocess.Popen] = {}
        self.logs: Dict[str, Path] = {}
        self.loads: List[object] = []
        self.moves: List[object] = []
        self.stopped_by_user = False

    def start(self, load: bool) -> str:
        sub = f"attempt-{len(self.procs) + 1}"
        argv = [sys.executable, STANDIN, "--save", str(self.save)] + (["--load", str(self.save)] if load else [])
        log = self.save.parent / f"{sub}.log"
        env = {**os.environ, **self.env, "STANDIN_RECORD_DIR": str(self.save.parent / "records"),
               "RAY_JOB_CONFIG_JSON_ENV_VAR": json.dumps({"metadata": {"job_submission_id": sub}})}
        with open(log, "w") as out:
            self.procs[sub] = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, env=env,
                                               start_new_session=True)
        self.logs[sub] = log
        return sub

    def submit(self, resume: ResumePoint) -> str:
        assert resume.iteration is not None, "the loop resubmitted without a complete checkpoint"
        self.loads.append(resume.iteration)
        self.moves.append(resume.overrides)
        return self.start(load=True)

    def running(self, sub: str) -> bool:
        return self.procs[sub].poll() is None

    def record(self, sub: str) -> dict:
        path = self.save.parent / "records" / f"{sub}.json"
        # A job stopped before its first line has written no record.
        return json.loads(path.read_text()) if path.exists() else {}

    def evidence(self, sub: str) -> Evidence:
        rc = self.procs[sub].wait()
        rollouts = self.record(sub).get("rollouts") or []
        return Evidence(exit_code=rc if rc >= 0 else 128 - rc, lines=self.logs[sub].read_text().splitlines()[-200:],
                        last_rollout=rollouts[-1] if rollouts else None)

    def stop(self, sub: str) -> None:
        p = self.procs[sub]
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGTERM)  # the session this runner started, by its recorded pid
            p.wait(timeout=30)

    def user_stopped(self, sub: str) -> bool:
        return self.stopped_by_user

    def nothing_running(self) -> bool:
        return all(p.poll() is not None for p in self.procs.values())


def _run(tmp_path, env, *, max_attempts=3, num_rollout=6):
    save = tmp_path / "save"
    save.mkdir()
    runner = ProcessRunner(save, {"STANDIN_RUN_ROLLOUTS": str(num_rollout), "STANDIN_STEP_SLEEP": "0.05",
                                  "STANDIN_FAIL_ONCE": str(tmp_path / "failed-once"), **env})
    lines: List[str] = []
    config = {"restart": {"enabled": True, "max_attempts": max_attempts, "poll_s": 0.05},
              "rollout": {"num_rollout": num_rollout}}
    rc = supervise(save, config, runner, runner.start(load=False), say=lines.append)
    assert runner.nothing_running()
    return rc, runner, read_attempts(save), "\n".join(lines)


def test_a_crash_at_step_n_resumes_from_the_last_complete_checkpoint_with_no_one_typing(tmp_path):
    rc, runner, rec, out = _run(tmp_path, {"STANDIN_FAIL": "oom@3", "STANDIN_SAVE_EVERY": "2"})
    assert rc == 0
    # Saved after rollouts 1 (every 2), died at 3: resumed from iter_0000001, trained 2..5.
    assert runner.loads == [1]
    assert runner.record("attempt-2")["start_rollout_id"] == 2 and runner.record("attempt-2")["rollouts"] == [2, 3, 4, 5]
    assert [(a.number, a.cls, a.resumed_from, a.checkpoint_at_end, a.next) for a in rec.attempts] == [
        (1, C.CUDA_OOM, None, 1, "resume"), (2, C.FINISHED, 1, 5, "done")]
    assert rec.attempts[0].evidence.startswith("torch.OutOfMemoryError: CUDA out of memory.")
    assert "attempt 1 of 4: CUDA out of memory at iteration 2 (evidence: torch.OutOfMemoryError" in out
    assert "; resuming from iter_0000001" in out and rec.stopped["by"] == "finished"


def test_a_startup_failure_is_never_retried_and_its_message_is_shown(tmp_path):
    rc, runner, rec, out = _run(tmp_path, {"STANDIN_FAIL": "startup"})
    assert rc == 1 and runner.loads == [] and len(rec.attempts) == 1
    assert rec.attempts[0].cls == C.STARTUP_FAILURE
    assert "error: unrecognized arguments: --no-such-flag" in out and "stopped for good" in out


def test_an_incomplete_iter_is_reported_and_never_loaded(tmp_path):
    rc, runner, rec, out = _run(tmp_path, {"STANDIN_FAIL": "incomplete@3"})
    assert rc == 0
    assert runner.loads == [2]  # iter_0000003 was written without the tracker: never the resume point
    assert "iter_0000003" in out and "not loaded" in out
    assert rec.attempts[0].cls == C.CRASHED and rec.attempts[0].evidence == "the trainer exited 137"


def test_an_nccl_timeout_is_classified_from_the_watchdog_line(tmp_path):
    rc, runner, rec, out = _run(tmp_path, {"STANDIN_FAIL": "nccl@2"})
    assert rc == 0 and rec.attempts[0].cls == C.COLLECTIVE_TIMEOUT
    assert "Watchdog caught collective operation timeout" in rec.attempts[0].evidence


def test_megatrons_exit_zero_is_not_taken_for_finished(tmp_path):
    rc, runner, rec, out = _run(tmp_path, {"STANDIN_FAIL": "megatron-exit0@2"})
    assert rec.attempts[0].cls == C.STARTUP_FAILURE and rc == 1 and runner.loads == []


def test_max_attempts_is_respected(tmp_path):
    # Fails at every attempt (no STANDIN_FAIL_ONCE file is kept), each after a new save: the budget ends it.
    env = {"STANDIN_FAIL": "crash@100", "STANDIN_SAVE_EVERY": "1"}
    save = tmp_path / "save"
    save.mkdir()
    runner = ProcessRunner(save, {"STANDIN_RUN_ROLLOUTS": "100", "STANDIN_STEP_SLEEP": "0.05", **env})
    # Each attempt dies a little later than the one before (crash@<start + 2>): progress, no repeat.
    original_submit = runner.submit

    def submit(resume):
        runner.env["STANDIN_FAIL"] = f"crash@{resume.iteration + 3}"
        return original_submit(resume)

    runner.submit = submit
    runner.env["STANDIN_FAIL"] = "crash@2"
    lines: List[str] = []
    config = {"restart": {"max_attempts": 2, "poll_s": 0.05}, "rollout": {"num_rollout": 100}}
    rc = supervise(save, config, runner, runner.start(load=False), say=lines.append)
    rec = read_attempts(save)
    assert rc == 1 and len(rec.attempts) == 3 and runner.loads == [1, 3]
    assert "2 restart(s)" in rec.stopped["why"] and runner.nothing_running()


def test_a_user_stop_stops_the_run_for_good(tmp_path):
    save = tmp_path / "save"
    save.mkdir()
    runner = ProcessRunner(save, {"STANDIN_RUN_ROLLOUTS": "1000", "STANDIN_STEP_SLEEP": "0.05"})
    polls = [0]

    def sleep(s):
        time.sleep(s)
        polls[0] += 1
        if polls[0] == 5:
            runner.stopped_by_user = True  # what `clawgym jobs stop` records

    config = {"restart": {"max_attempts": 3, "poll_s": 0.05}, "rollout": {"num_rollout": 1000}}
    rc = supervise(save, config, runner, runner.start(load=False), say=lambda s: None, sleep=sleep)
    rec = read_attempts(save)
    assert rc == 130 and len(rec.attempts) == 1 and rec.attempts[0].cls == C.STOPPED_BY_USER
    assert rec.stopped["by"] == "user" and runner.nothing_running()


def test_a_new_supervision_of_the_same_save_dir_has_its_own_budget_and_keeps_the_history(tmp_path):
    rc, runner, rec, out = _run(tmp_path, {"STANDIN_FAIL": "startup"})
    assert rc == 1 and rec.stopped["by"] == "supervisor"
    # The user fixes the cause and launches again into the same save dir with a budget of one restart,
    # which this supervision needs (a crash once at rollout 2): the earlier attempt does not count.
    runner.env.update({"STANDIN_FAIL": "crash@2", "STANDIN_FAIL_ONCE": str(tmp_path / "second-once"),
                       "STANDIN_SAVE_EVERY": "1"})
    lines: List[str] = []
    config = {"restart": {"max_attempts": 1, "poll_s": 0.05}, "rollout": {"num_rollout": 6}}
    rc = supervise(runner.save, config, runner, runner.start(load=False), say=lines.append)
    rec = read_attempts(runner.save)
    assert rc == 0, lines
    assert [a.cls for a in rec.attempts] == [C.STARTUP_FAILURE, C.CRASHED, C.FINISHED]
    assert [a.number for a in rec.attempts] == [1, 2, 3] and rec.stopped["by"] == "finished"
    assert "attempt 1 of 2: crashed" in "\n".join(lines)


def test_after_an_oom_the_next_attempt_moves_to_the_layout_search_s_next_layout_with_more_headroom(tmp_path):
    """The resume point carries the move (clawgym/supervisor/oom.py) the runner resubmits with, and the
    console says it; the run's own config is the shipped one the move was computed from."""
    from clawgym.config.compose import compose, to_plain
    from clawgym.supervisor.oom import after_oom

    typed = ["model=qwen3_8b", "gpu_layout=colocate_8", "memory.gpu=h100_80gb"]
    config = to_plain(compose(typed))
    config["restart"].update({"enabled": True, "max_attempts": 3, "poll_s": 0.05})
    config["rollout"]["num_rollout"] = 6
    config["health"]["disk_guard"] = False  # an 8B checkpoint is bigger than this test's disk may hold
    expected = after_oom(config, [], gpu="h100_80gb")
    assert expected.overrides
    save = tmp_path / "save"
    save.mkdir()
    runner = ProcessRunner(save, {"STANDIN_RUN_ROLLOUTS": "6", "STANDIN_STEP_SLEEP": "0.05",
                                  "STANDIN_FAIL_ONCE": str(tmp_path / "failed-once"), "STANDIN_FAIL": "oom@3",
                                  "STANDIN_SAVE_EVERY": "2"})
    lines: List[str] = []
    rc = supervise(save, config, runner, runner.start(load=False), say=lines.append)
    assert rc == 0 and runner.nothing_running()
    assert runner.moves == [tuple(expected.overrides)]
    out = "\n".join(lines)
    assert f"after the OOM the next attempt moves to {' '.join(expected.overrides)}" in out
    assert f"{expected.before_gib:.1f} -> {expected.after_gib:.1f} GiB" in out


def test_a_second_oom_at_the_same_point_stops_with_the_memory_plans_advice(tmp_path):
    from clawgym.config.compose import compose, to_plain
    from clawgym.supervisor.oom import advice_after_oom

    # The stand-in goes out of memory at rollout 3 on every attempt (no STANDIN_FAIL_ONCE), moved or not.
    typed = ["model=qwen3_4b", "gpu_layout=split_4_4", "memory.gpu=h100_80gb"]
    config = to_plain(compose(typed))
    config["restart"].update({"enabled": True, "max_attempts": 3, "poll_s": 0.05})
    config["rollout"]["num_rollout"] = 6
    config["health"]["disk_guard"] = False
    save = tmp_path / "save"
    save.mkdir()
    runner = ProcessRunner(save, {"STANDIN_RUN_ROLLOUTS": "6", "STANDIN_STEP_SLEEP": "0.05", "STANDIN_FAIL": "oom@3",
                                  "STANDIN_SAVE_EVERY": "2"})
    lines: List[str] = []
    rc = supervise(save, config, runner, runner.start(load=False), say=lines.append)
    assert rc == 1 and runner.nothing_running()
    rec = read_attempts(save)
    assert [a.cls for a in rec.attempts] == [C.CUDA_OOM, C.CUDA_OOM] and "twice at iteration" in rec.stopped["why"]
    advice = advice_after_oom(config, str(save), gpu="h100_80gb")
    out = "\n".join(lines)
    assert "the memory plan's advice" in out and all(ln in out for ln in advice), out
    assert all(ln in rec.stopped["fix"] for ln in advice)


class LostHeadRunner(ProcessRunner):
    """The first attempt's head is lost at rollout 1 while its trainer runs on (a driver orphaned by
    its head) and saves the run's last rollout before anything stops it."""

    def evidence(self, sub: str) -> Evidence:
        ev = super().evidence(sub)
        if sub == "attempt-1":
            return Evidence(head_alive=False, head_lost="its gcs_server pid 1 is gone", last_rollout=1)
        return ev


def test_a_lost_head_whose_trainer_saved_the_last_rollout_is_done_not_resumed_into_an_empty_attempt(tmp_path):
    save = tmp_path / "save"
    save.mkdir()
    runner = LostHeadRunner(save, {"STANDIN_RUN_ROLLOUTS": "4", "STANDIN_STEP_SLEEP": "0.02"})
    lines: List[str] = []
    config = {"restart": {"enabled": True, "max_attempts": 3, "poll_s": 0.05}, "rollout": {"num_rollout": 4}}
    rc = supervise(save, config, runner, runner.start(load=False), say=lines.append)
    rec, out = read_attempts(save), "\n".join(lines)
    assert rc == 0 and runner.loads == [], out
    assert [(a.cls, a.checkpoint_at_end, a.next) for a in rec.attempts] == [(C.NODE_LOST, 3, "done")]
    assert rec.stopped["by"] == "finished"
    assert "node or head lost" in out and "iter_0000003 is the run's last rollout" in out, out
