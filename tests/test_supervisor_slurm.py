"""The SLURM supervisor's decisions on a requeued start (clawgym/supervisor/slurm_runner.py), on real save
dirs and job output files; the whole path on the real SLURM cluster is tests/test_slurm_supervised.py.

The slurmstepd lines are SLURM's own: ``DUE TO JOB REQUEUE`` as the test cluster (slurm-wlm 22.05.8)
wrote it on ``scontrol requeue``, and the plain ``CANCELLED AT ... ***`` it wrote on ``scancel``.
"""

from __future__ import annotations

from pathlib import Path

from clawgym.common.exit_codes import FAILED, REFUSED
from clawgym.snapshot.attempts import read_attempts
from clawgym.supervisor import classes as C
from clawgym.supervisor.slurm_runner import (cut_evidence, first_attempt, last_stepd_line, prepare_requeued,
                                             with_load)

REQUEUE_LINE = "slurmstepd-vm: error: *** JOB 7 ON vm CANCELLED AT 2026-12-06T06:16:55 DUE TO JOB REQUEUE ***"
SCANCEL_LINE = "slurmstepd-vm: error: *** JOB 7 ON vm CANCELLED AT 2026-12-06T06:20:35 ***"
CONFIG = {"restart": {"max_attempts": 3}, "rollout": {"num_rollout": 10}}


def _save(tmp_path: Path, tracker=None) -> Path:
    save = tmp_path / "save"
    save.mkdir()
    if tracker is not None:
        (save / f"iter_{tracker:07d}").mkdir()
        (save / "latest_checkpointed_iteration.txt").write_text(str(tracker))
    return save


def test_load_is_set_to_the_save_dir_whatever_the_argv_had():
    assert with_load(["python3", "train.py", "--save", "/s"], "/s") == ["python3", "train.py", "--save", "/s",
                                                                         "--load", "/s"]
    assert with_load(["t", "--load", "/old", "--x"], "/s") == ["t", "--load", "/s", "--x"]
    assert with_load(["t", "--load=/old"], "/s") == ["t", "--load=/s"]


def test_the_end_of_a_cut_attempt_is_slurmstepds_line_in_the_jobs_output(tmp_path):
    out = tmp_path / "slurm-7.out"
    out.write_text(f"[standin] rollout step 3\n{REQUEUE_LINE}\nTerminated\n")
    assert cut_evidence(str(out), "7", 1) == (C.PREEMPTED, REQUEUE_LINE)
    # Another job's line is not this one's; no line at all is still a requeue, said so.
    cls, why = cut_evidence(str(out), "8", 1)
    assert cls == C.PREEMPTED and "SLURM requeued job 8 (SLURM_RESTART_COUNT=1)" in why
    # This allocation's part of the file only: an scancel's plain line after the requeue's.
    with open(out, "a") as fh:
        start = fh.tell()
        fh.write(f"{SCANCEL_LINE}\n")
    assert last_stepd_line(str(out), "7", since=start) == SCANCEL_LINE
    assert last_stepd_line(str(out), "7") == SCANCEL_LINE


def test_a_requeued_start_closes_the_attempt_it_interrupted_and_resumes_from_the_tracker(tmp_path):
    save = _save(tmp_path, tracker=4)
    rec = read_attempts(save)
    rec.start("clawgym-run-1", now=1.0)  # the first allocation's attempt, cut before it could record its end
    out = tmp_path / "slurm-7.out"
    out.write_text(REQUEUE_LINE + "\n")
    rc, point = prepare_requeued(str(save), CONFIG, job_id="7", restart_count=1, first=0, output=str(out))
    assert rc is None and point.iteration == 4
    a = read_attempts(save).attempts[0]
    assert (a.cls, a.evidence, a.checkpoint_at_end, a.next) == (C.PREEMPTED, REQUEUE_LINE, 4, "resume")


def test_a_requeued_start_with_no_complete_checkpoint_refuses_to_start_from_scratch(tmp_path):
    save = _save(tmp_path)
    (save / "iter_0000002").mkdir()  # a save cut short: no tracker names it
    rec = read_attempts(save)
    rec.start("clawgym-run-1", now=1.0)
    rec.end(C.TIME_LIMIT, "SLURM's --signal=B:USR1@120 reached job 7", None, "resume", now=2.0)
    rc, point = prepare_requeued(str(save), CONFIG, job_id="7", restart_count=1, first=0, output=None)
    assert rc == REFUSED and point.iteration is None
    stopped = read_attempts(save).stopped
    assert stopped["by"] == "supervisor" and "refusing to restart the run from scratch" in stopped["why"]
    assert "latest_checkpointed_iteration.txt" in stopped["why"]


def test_the_budget_counts_every_allocation_of_the_job(tmp_path):
    save = _save(tmp_path, tracker=1)
    rec = read_attempts(save)
    rec.start("an-earlier-launch", now=0.0)  # before this SLURM job: not counted
    rec.end(C.CRASHED, "x", None, "stop", now=0.5)
    for n, (cls, ckpt) in enumerate([(C.CRASHED, 1), (C.TIME_LIMIT, 1), (C.CRASHED, 1)]):
        rec.start(f"a{n}", resumed_from=ckpt - 1 if n == 0 else ckpt, now=1.0 + n)
        rec.end(cls, "x", ckpt, "resume", now=1.5 + n)
    rec.start("a3", resumed_from=1, now=5.0)  # cut by a requeue: the 4th attempt of this job
    rc, _ = prepare_requeued(str(save), CONFIG, job_id="7", restart_count=2, first=1, output=None)
    assert rc == FAILED
    after = read_attempts(save)
    assert after.attempts[-1].next == "stop" and after.stopped["by"] == "supervisor"
    # Four attempts of this job (the earlier launch's is not one of them): its 3 restarts are used up.
    assert "used its 3 restart(s) (restart.max_attempts)" in after.stopped["why"]


def test_where_the_jobs_supervision_began_is_kept_across_its_allocations(tmp_path):
    path = tmp_path / "supervision.json"
    assert first_attempt(path, "7", 0, 2) == 2  # the first allocation: from here on
    assert first_attempt(path, "7", 1, 5) == 2  # requeued: the same job's first attempt
    assert first_attempt(path, "9", 0, 5) == 5  # another job (a new launch into the save dir)
