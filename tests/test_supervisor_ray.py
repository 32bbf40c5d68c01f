"""The supervisor's loop on a real Ray head: the stand-in trainer submitted as a Ray job dies, its
end is classified from Ray's record of the job and its logs, and the loop resubmits it from the
last complete checkpoint with no one typing anything.

The resubmission here posts the same entrypoint with ``--load``; what is held is the runner's
evidence and stop, and the loop end to end on Ray. The launch path (the supervisor the pipeline
starts, its restarts through ``clawgym resume``) is tests/test_supervised_launch.py's.
"""

from __future__ import annotations

import json
import sys
import time
import uuid
from pathlib import Path
from typing import Dict, List

import clawgym.demo.standin_trainer as standin
from clawgym.supervisor import classes as C
from clawgym.snapshot.attempts import read_attempts
from clawgym.supervisor.loop import supervise
from clawgym.supervisor.ray_runner import RayJobRunner


def _submitter(address: str, save: Path, env: Dict[str, str]):
    from ray.job_submission import JobSubmissionClient

    client = JobSubmissionClient(address)
    subs: List[str] = []

    def submit(load: bool) -> str:
        sub = f"supervise-{uuid.uuid4().hex[:8]}"
        argv = [sys.executable, standin.__file__, "--save", str(save)] + (["--load", str(save)] if load else [])
        client.submit_job(entrypoint=" ".join(argv), submission_id=sub,
                          runtime_env={"env_vars": {**env, "STANDIN_RECORD_DIR": str(save.parent / "records")}})
        subs.append(sub)
        return sub

    return submit, subs


def test_a_ray_job_that_dies_at_step_n_is_resumed_from_its_last_complete_checkpoint(ray_cluster, tmp_path):
    save = tmp_path / "save"
    save.mkdir()
    env = {"STANDIN_RUN_ROLLOUTS": "5", "STANDIN_STEP_SLEEP": "0.05", "STANDIN_SAVE_EVERY": "2",
           "STANDIN_FAIL": "nccl@3", "STANDIN_FAIL_ONCE": str(tmp_path / "failed-once")}
    submit, subs = _submitter(ray_cluster.address, save, env)
    loads: List[int] = []

    def resubmit(point):
        loads.append(point.iteration)
        return submit(load=True)

    def last_rollout():
        # The rollouts the latest attempt logged (slime's would come from its TensorBoard events).
        path = save.parent / "records" / f"{subs[-1]}.json"
        rollouts = json.loads(path.read_text()).get("rollouts") if path.exists() else None
        return rollouts[-1] if rollouts else None

    runner = RayJobRunner(ray_cluster.address, resubmit, backend="existing", last_rollout=last_rollout)
    lines: List[str] = []
    config = {"restart": {"max_attempts": 2, "poll_s": 0.5}, "rollout": {"num_rollout": 5}}
    rc = supervise(save, config, runner, submit(load=False), say=lines.append)
    rec = read_attempts(save)
    out = "\n".join(lines)
    assert [a.cls for a in rec.attempts] == [C.COLLECTIVE_TIMEOUT, C.FINISHED], out
    assert "Watchdog caught collective operation timeout" in rec.attempts[0].evidence
    assert loads == [1] and "resuming from iter_0000001" in out and rc == 0
    # The second attempt trained rollouts 2..4 and saved iter_0000004: nothing redone before iter_0000001.
    assert (save / "latest_checkpointed_iteration.txt").read_text() == "4"
    assert [runner.handle(s).status() for s in subs] == ["FAILED", "SUCCEEDED"]


def test_a_startup_failure_on_ray_is_never_retried(ray_cluster, tmp_path):
    save = tmp_path / "save"
    save.mkdir()
    submit, subs = _submitter(ray_cluster.address, save, {"STANDIN_RUN_ROLLOUTS": "5", "STANDIN_FAIL": "startup"})
    runner = RayJobRunner(ray_cluster.address, lambda point: submit(load=True), backend="existing")
    lines: List[str] = []
    rc = supervise(save, {"restart": {"max_attempts": 3, "poll_s": 0.5}, "rollout": {"num_rollout": 5}},
                   runner, submit(load=False), say=lines.append)
    rec = read_attempts(save)
    assert rc == 1 and len(subs) == 1 and rec.attempts[0].cls == C.STARTUP_FAILURE
    assert "unrecognized arguments: --no-such-flag" in "\n".join(lines)


def test_clawgym_jobs_stop_stops_a_supervised_run_for_good(ray_cluster, tmp_path):
    from clawgym.cli import main as cli

    save = tmp_path / "save"
    save.mkdir()
    submit, subs = _submitter(ray_cluster.address, save, {"STANDIN_RUN_ROLLOUTS": "100000",
                                                         "STANDIN_STEP_SLEEP": "0.1"})
    runner = RayJobRunner(ray_cluster.address, lambda point: submit(load=True), backend="existing")
    polls = [0]

    def sleep(s):
        time.sleep(s)
        polls[0] += 1
        if polls[0] == 4:  # the job runs: a user stops it as the docs say
            assert cli(["jobs", "stop", subs[0], "--address", ray_cluster.address]) == 0

    lines: List[str] = []
    rc = supervise(save, {"restart": {"max_attempts": 3, "poll_s": 0.5}, "rollout": {"num_rollout": 100000}},
                   runner, submit(load=False), say=lines.append, sleep=sleep)
    rec = read_attempts(save)
    assert rc == 130 and len(subs) == 1, lines
    assert rec.attempts[0].cls == C.STOPPED_BY_USER and rec.stopped["by"] == "user"
    assert runner.handle(subs[0]).status() == "STOPPED"
