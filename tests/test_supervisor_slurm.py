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


def test_a_requeued_start_whose_allocations_never_submitted_the_run_starts_it(tmp_path):
    save = _save(tmp_path)  # no checkpoint: no trainer of this job ever ran
    rec = read_attempts(save)
    rec.start(None, now=1.0)  # SLURM's lead came before the first allocation submitted the run
    rec.end(C.TIME_LIMIT, "SLURM's --signal=B:USR1@120 reached job 7 (before the run was submitted)", None,
            "resume", now=2.0)
    rc, point = prepare_requeued(str(save), CONFIG, job_id="7", restart_count=1, first=0, output=None)
    assert rc is None and point.iteration is None
    # Once a submission of the job ran, no checkpoint stops the run (never a silent start over).
    rec = read_attempts(save)
    rec.start("sub-1", now=3.0)
    rc, _ = prepare_requeued(str(save), CONFIG, job_id="7", restart_count=2, first=0, output=None)
    assert rc == FAILED and "no complete checkpoint" in read_attempts(save).stopped["why"]


def test_a_cancel_between_allocations_closes_only_the_open_record_of_that_job(tmp_path):
    from clawgym.backends.slurm import close_cancelled

    save = _save(tmp_path, tracker=3)
    job_dir = tmp_path / "jobdir"
    job_dir.mkdir()
    script = str(job_dir / "slurm_batch.sh")
    rec = read_attempts(save)
    rec.start("sub-1", now=1.0)
    rec.end(C.TIME_LIMIT, "lead", 3, "resume", now=2.0)
    cancelled = {"JobState": "CANCELLED", "Restarts": "1"}
    # No allocation of job 7 recorded its supervision here: not its record to close.
    assert close_cancelled(str(save), script, "7", cancelled) is None
    (job_dir / "supervision.json").write_text('{"job_id": "7", "first_attempt": 0}\n')
    # Another job's id, or a job SLURM still has: nothing closed.
    assert close_cancelled(str(save), script, "8", cancelled) is None
    assert close_cancelled(str(save), script, "7", {"JobState": "PENDING", "Restarts": "1"}) is None
    line = close_cancelled(str(save), script, "7", cancelled)
    assert line == ("SLURM job 7 CANCELLED between two allocations (requeued, Restarts=1): scancel while it was "
                    "pending")
    after = read_attempts(save)
    assert after.attempts[-1].next == "stop" and after.stopped["by"] == "user" and after.stopped["why"] == line
    # Closed once: a second reader changes nothing.
    assert close_cancelled(str(save), script, "7", cancelled) is None


def _plan(**kw):
    from clawgym.plan.build import LaunchPlan

    base = dict(entrypoint=["python3", "train.py"], working_dir="/w", runtime_env={"env_vars": {"MASTER_ADDR": "x"}},
                ray_start=None, ray_start_env={}, submission_id="s", address="http://a", save_dir="/save")
    base.update(kw)
    return LaunchPlan(**base)


def test_a_moved_layout_runs_in_the_allocation_only_with_its_nodes_gpus_files_and_servers():
    from clawgym.supervisor.slurm_runner import fits_allocation, for_allocation

    now = _plan()
    same = {"nodes": 1, "gpus_per_node": 8}
    assert fits_allocation(now, _plan(entrypoint=["python3", "train.py", "--max-tokens-per-gpu", "40960"]), same,
                           1, 8) is None
    assert "needs 2 node(s) x 4 GPU(s) and this allocation is 1 node(s) x 8 GPU(s)" in fits_allocation(
        now, _plan(), {"nodes": 2, "gpus_per_node": 4}, 1, 8)
    assert "changes the files written at launch (/save/sglang.yaml)" in fits_allocation(
        now, _plan(files={"/save/sglang.yaml": "tp: 8"}), same, 1, 8)
    assert "servers" in fits_allocation(now, _plan(services=[{"name": "teacher"}]), same, 1, 8)
    # On this allocation's head: its address, and torch's rendezvous at its head node.
    placed = for_allocation(_plan(), "http://127.0.0.1:9", "10.0.0.5")
    assert placed.address == "http://127.0.0.1:9" and placed.runtime_env["env_vars"]["MASTER_ADDR"] == "10.0.0.5"


def test_a_cancel_that_cut_an_attempt_before_its_end_was_recorded_is_said_so(tmp_path):
    from clawgym.backends.slurm import close_cancelled

    save = _save(tmp_path, tracker=2)
    (tmp_path / "supervision.json").write_text('{"job_id": "7", "first_attempt": 0}\n')
    read_attempts(save).start("sub-1", now=1.0)  # never ended: its allocation was cut
    line = close_cancelled(str(save), str(tmp_path / "slurm_batch.sh"), "7", {"JobState": "CANCELLED",
                                                                              "Restarts": "0"})
    assert line == "SLURM job 7 CANCELLED (Restarts=0) before its supervisor recorded this attempt's end: scancel"
    a = read_attempts(save).attempts[0]
    assert (a.cls, a.checkpoint_at_end, a.next) == (C.STOPPED_BY_USER, 2, "stop")


def test_resume_writes_a_plan_file_only_for_a_dry_run(tmp_path):
    import subprocess
    import sys

    root = Path(__file__).resolve().parent.parent
    res = subprocess.run([sys.executable, "-m", "clawgym", "resume", str(tmp_path), "--plan-out",
                          str(tmp_path / "plan.json")], cwd=root, capture_output=True, text=True, timeout=120)
    assert res.returncode == REFUSED and "--plan-out writes the plan of a dry run only" in res.stderr
    assert "fix: add --dry-run" in res.stderr and "Traceback" not in res.stderr
    assert not (tmp_path / "plan.json").exists()
