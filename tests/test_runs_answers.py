"""``clawgym runs`` answers the same whoever still answers: where it looked when it finds nothing, a
duration from what the launcher recorded, a stopped run shown as stopped, an overrides column without
plumbing and of bounded width."""

from __future__ import annotations

import json
import time

from clawgym.cli import main as cli
from clawgym.runs import find_runs
from clawgym.runs.table import OVERRIDES_WIDTH, build_rows, format_table
from clawgym.snapshot.marks import mark_ended
from clawgym.snapshot.records import LaunchRecord
from tests.test_snapshot import launch_snapshot


def _record_times(snap, submitted: float, ended: float, status: str) -> None:
    sub = json.loads((snap / "submitted.json").read_text())
    (snap / "submitted.json").write_text(json.dumps({**sub, "submitted_unix": submitted}))
    mark_ended(snap, status, 130 if status == "stopped" else 0)
    data = json.loads((snap / "ended.json").read_text())
    (snap / "ended.json").write_text(json.dumps({**data, "ended_unix": ended}))


def test_nothing_found_says_where_it_looked(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("CLAWGYM_RL_ROOT", raising=False)
    assert cli(["runs"]) == 0
    out = capsys.readouterr().out
    assert f"no runs found under {tmp_path}" in out and "clawgym/snapshots" in out
    assert cli(["runs", str(tmp_path)]) == 0 and str(tmp_path) in capsys.readouterr().out


def test_a_finished_runs_duration_is_the_recorded_one_whether_or_not_ray_answers(tmp_path):
    _, _, snap = launch_snapshot(tmp_path / "run")
    t0 = time.time() - 3600
    _record_times(snap, t0, t0 + 42, "succeeded")
    # Ray gone: nobody to ask.
    rows, _ = build_rows(find_runs([tmp_path]))
    assert rows[0]["duration"] == 42 and rows[0]["status"] == "succeeded"
    # Ray answers (as status.resolve fills run.job): its later view of the job does not move the duration.
    run = find_runs([tmp_path])[0]
    run.status, run.job = "succeeded", {"start_time": t0 + 3, "end_time": t0 + 60}
    rows, _ = build_rows([run], resolve_status=False)
    assert rows[0]["duration"] == 42


def test_a_stopped_run_is_stopped_not_unknown(tmp_path, capsys):
    _, _, snap = launch_snapshot(tmp_path / "run")
    t0 = time.time() - 100
    _record_times(snap, t0, t0 + 5, "stopped")
    rows, _ = build_rows(find_runs([tmp_path]))
    assert rows[0]["status"] == "stopped"


def test_the_overrides_column_leaves_out_plumbing_and_is_width_bounded(tmp_path):
    long_value = "x" * 200
    for n, temp in enumerate(("0.5", "0.9")):
        save = tmp_path / f"run{n}"
        ov = [f"rollout.temperature={temp}", f"paths.root=/ckpt/{n}", f"ray.port={6379 + n}",
              f"sglang.api_port={30001 + n}", f"exp_name=e{n}{long_value}"]
        record = LaunchRecord(overrides=[f"paths.save={save}", *ov], choices={"model": "qwen3_4b"})
        launch_snapshot(save, ov, record=record)
    rows, columns = build_rows(find_runs([tmp_path]), resolve_status=False)
    assert sorted(r["overrides"] for r in rows) == ["rollout.temperature=0.5", "rollout.temperature=0.9"]
    # A long override is cut in the text table (--json keeps it whole).
    rows[0]["overrides"] = "rollout.temperature=0.5 " + "model.name=" + long_value
    header = format_table(rows, columns).splitlines()[0]
    start = header.index("overrides")
    cell = format_table(rows, columns).splitlines()[2][start:start + OVERRIDES_WIDTH + 5]
    assert "..." in cell and len(max(format_table(rows, columns).splitlines(), key=len)) < 400


def _two_attempts(save):
    from clawgym.snapshot.attempts import read_attempts

    rec = read_attempts(save)
    rec.start("raysubmit_a", now=1000.0)
    rec.end("cuda-oom", "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 20.00 GiB.", 20, "resume",
            now=2000.0)
    rec.start("raysubmit_b", resumed_from=20, now=2010.0)
    rec.end("startup-failure", "train.py: error: unrecognized arguments: --x", 20, "stop", now=2020.0)
    rec.stop("supervisor", "deterministic startup failure: never restarted", "fix what the message names")


def test_runs_shows_the_attempts_and_the_last_class_only_when_a_run_has_them(tmp_path):
    _, _, snap = launch_snapshot(tmp_path / "run")
    rows, columns = build_rows(find_runs([tmp_path]), resolve_status=False)
    assert "attempts" not in format_table(rows, columns).splitlines()[0]
    _two_attempts(tmp_path / "run")
    rows, columns = build_rows(find_runs([tmp_path]), resolve_status=False)
    assert (rows[0]["attempts"], rows[0]["last_class"]) == (2, "startup-failure")
    header, _, line = format_table(rows, columns).splitlines()[:3]
    assert "attempts" in header and "last class" in header and "startup-failure" in line


def test_show_lists_each_attempt_with_its_class_evidence_and_resume_point(tmp_path, capsys):
    _, _, snap = launch_snapshot(tmp_path / "run")
    _two_attempts(tmp_path / "run")
    assert cli(["show", str(tmp_path / "run")]) == 0
    out = capsys.readouterr().out
    assert "attempts (2;" in out and "raysubmit_b" in out and "iter_0000020" in out
    assert "torch.OutOfMemoryError: CUDA out of memory." in out and "cuda-oom" in out
    assert "stopped (supervisor): deterministic startup failure: never restarted" in out
def test_the_runs_rows_carry_the_supervisors_view_checkpoints_disk_and_step_age(tmp_path):
    save = tmp_path / "run"
    launch_snapshot(save)
    for it in (1, 2, 3):
        (save / f"iter_{it:07d}").mkdir()
    (save / "latest_checkpointed_iteration.txt").write_text("2")  # iter 3: a save not finalized
    rows, _ = build_rows(find_runs([tmp_path]), resolve_status=False)
    assert rows[0]["checkpoints_complete"] == 2
    assert rows[0]["disk_free_bytes"] > 0
    assert rows[0]["last_step_age_s"] is None  # nothing logged yet
