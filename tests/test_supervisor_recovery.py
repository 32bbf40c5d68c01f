"""Where a restart resumes (the last complete checkpoint only), the attempts record, the recovery
table and the budget and progress guard; on real save dirs written the way Megatron writes them."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from clawgym.plan.allocation import BACKENDS
from clawgym.supervisor import classes as C
from clawgym.snapshot.attempts import Attempt, attempts_path, read_attempts
from clawgym.supervisor.recovery import DONE, RESUME, STOP, TABLE, decide
from clawgym.supervisor.resume_point import resume_point


def _save(tmp_path: Path, iterations, tracker) -> Path:
    save = tmp_path / "save"
    for it in iterations:
        (save / f"iter_{it:07d}").mkdir(parents=True)
        (save / f"iter_{it:07d}" / "model_optim_rng.pt").write_text("w")
    save.mkdir(exist_ok=True)
    if tracker is not None:
        (save / "latest_checkpointed_iteration.txt").write_text(str(tracker))
    return save


def test_resume_point_is_the_tracker_and_a_newer_iter_is_reported_never_loaded(tmp_path):
    point = resume_point(_save(tmp_path, [10, 20, 30], tracker=20))
    assert (point.iteration, point.name, point.incomplete, point.problem) == (20, "iter_0000020", [30], None)
    assert "iter_0000030" in point.incomplete_note() and "not loaded" in point.incomplete_note()


def test_no_tracker_is_refused_rather_than_a_silent_start_from_scratch(tmp_path):
    point = resume_point(_save(tmp_path, [10], tracker=None))
    assert point.iteration is None and point.incomplete == [10]
    assert "start over from --ref-load at rollout 0" in point.problem and "save_interval" in point.fix


def test_a_tracker_naming_a_missing_dir_is_refused(tmp_path):
    point = resume_point(_save(tmp_path, [10], tracker=20))
    assert point.iteration is None and "iter_0000020/ is not there" in point.problem


def test_attempts_are_recorded_beside_the_snapshots_whole_and_read_back(tmp_path):
    save = tmp_path / "save"
    rec = read_attempts(save)
    assert rec.attempts == [] and rec.stopped is None
    rec.start("raysubmit_1", now=100.0)
    rec.end(C.CUDA_OOM, "torch.OutOfMemoryError: ...", 20, RESUME, now=200.0)
    rec.start("raysubmit_2", resumed_from=20, now=210.0)
    rec.stop("user", "stopped by the user")
    assert attempts_path(save) == save / "clawgym" / "attempts.json"
    assert not [p for p in (save / "clawgym").iterdir() if p.name != "attempts.json"]  # no temp file left
    back = read_attempts(save)
    assert [(a.number, a.submission_id, a.cls, a.resumed_from, a.checkpoint_at_end) for a in back.attempts] == [
        (1, "raysubmit_1", C.CUDA_OOM, None, 20), (2, "raysubmit_2", None, 20, None)]
    assert back.stopped["by"] == "user"
    assert json.loads(attempts_path(save).read_text())["format"] == 1


def test_an_unreadable_record_reads_as_none(tmp_path):
    attempts_path(tmp_path).parent.mkdir(parents=True)
    attempts_path(tmp_path).write_text("{not json")
    assert read_attempts(tmp_path).attempts == []


def test_the_recovery_table_covers_every_class_on_every_backend():
    assert {(c, b) for c in C.CLASSES for b in BACKENDS} == set(TABLE)
    for b in BACKENDS:
        assert TABLE[(C.FINISHED, b)].action == DONE
        assert TABLE[(C.STOPPED_BY_USER, b)].action == STOP
        assert TABLE[(C.STARTUP_FAILURE, b)].action == STOP
        assert TABLE[(C.CUDA_OOM, b)].action == RESUME and TABLE[(C.HANG, b)].action == RESUME


def _a(n, cls=None, resumed_from=None, at_end=None):
    return Attempt(n, f"s{n}", cls=cls, resumed_from=resumed_from, checkpoint_at_end=at_end)


def test_a_crash_with_a_checkpoint_resumes():
    d = decide([_a(1)], C.CRASHED, "local", 3, 20)
    assert d.action == RESUME


def test_a_user_stop_and_a_startup_failure_are_never_restarted():
    assert decide([_a(1)], C.STOPPED_BY_USER, "local", 3, 20).action == STOP
    d = decide([_a(1)], C.STARTUP_FAILURE, "slurm", 3, 20)
    assert d.action == STOP and "never restarted" in d.why and d.fix


def test_max_attempts_is_the_number_of_restarts():
    attempts = [_a(1, C.CRASHED, None, 10), _a(2, C.CRASHED, 10, 20), _a(3, C.CRASHED, 20, 30), _a(4, None, 30)]
    assert decide(attempts[:3], C.CRASHED, "local", 3, 30).action == RESUME
    d = decide(attempts, C.CRASHED, "local", 3, 40)
    assert d.action == STOP and "3 restart(s)" in d.why and "restart.max_attempts" in d.fix
    assert decide([_a(1)], C.CRASHED, "local", 0, 10).action == STOP


def test_two_attempts_in_a_row_without_a_new_checkpoint_stop():
    attempts = [_a(1, C.CRASHED, None, 20), _a(2, C.ENGINE_DEATH, 20, 20), _a(3, None, 20)]
    assert decide(attempts[:2], C.ENGINE_DEATH, "local", 5, 20).action == RESUME  # one without progress
    d = decide(attempts, C.COLLECTIVE_TIMEOUT, "local", 5, 20)
    assert d.action == STOP and "attempts 2 and 3" in d.why and "save_interval" in d.fix


def test_the_same_class_at_the_same_iteration_twice_stops_and_an_oom_names_the_memory_plan():
    attempts = [_a(1, C.CUDA_OOM, None, 20), _a(2, C.CRASHED, 20, 30), _a(3, C.CUDA_OOM, 30, 40), _a(4, None, 40)]
    assert decide(attempts[:3], C.CUDA_OOM, "local", 9, 40).action == RESUME
    attempts = [_a(1, C.CUDA_OOM, None, 20), _a(2, None, 20)]
    d = decide(attempts, C.CUDA_OOM, "local", 9, 20)
    assert d.action == STOP and "twice at iteration 20" in d.why and "memory plan" in d.fix


def test_no_complete_checkpoint_stops_rather_than_starting_over():
    d = decide([_a(1)], C.CRASHED, "existing", 3, None)
    assert d.action == STOP and "rollout 0" in d.why


def test_restart_disabled_records_and_stops():
    d = decide([_a(1)], C.CRASHED, "local", 3, 20, enabled=False)
    assert d.action == STOP and "restart.enabled=false" in d.why and "clawgym resume" in d.fix


def test_a_negative_restart_budget_and_a_zero_poll_are_refused_with_a_value_that_works():
    from clawgym.config.compose import compose
    from clawgym.validate import check

    errors, _ = check(compose(["restart.max_attempts=-1", "restart.poll_s=0"]))
    got = {e.code: e for e in errors if e.code.startswith("restart-")}
    assert set(got) == {"restart-attempts-non-negative", "restart-poll-positive"}
    assert "restart.max_attempts=3" in got["restart-attempts-non-negative"].fix
    errors, _ = check(compose(["restart.max_attempts=0"]))
    assert not [e for e in errors if e.code.startswith("restart-")]


def test_every_class_a_monitor_gives_has_a_recovery_on_every_backend():
    """A verdict's class is decided like any end: a class missing from the table would end
    supervision with a KeyError instead of a stop that says why."""
    from clawgym.plan.allocation import BACKENDS
    from clawgym.supervisor import classes as C
    from clawgym.supervisor.recovery import STOP, decide, recovery
    from clawgym.supervisor.rules import RULES

    given = {r.cls for r in RULES} | {C.DISK_FULL, C.HANG}
    for cls in given:
        assert cls in C.CLASSES, cls
        for backend in BACKENDS:
            recovery(cls, backend)
            assert decide([], cls, backend, 3, 10).action in ("resume", STOP)
    assert recovery(C.DISK_FULL, "local").action == STOP  # a restart would fill the same disk
