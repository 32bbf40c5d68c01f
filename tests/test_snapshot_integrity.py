"""Snapshot integrity: a manifest (sizes and sha256) written last; show, diff, resume and
stamp refuse a snapshot that is incomplete, truncated or altered; a launch stopped before
its job was submitted leaves no snapshot that counts as a launch."""

from __future__ import annotations

import hashlib
import json
import shutil

import pytest

from clawgym.snapshot import write as snap_write
from clawgym.cli import main as cli
from clawgym.snapshot.layout import (MANIFEST_FILE, META_FILE, RESOLVED_FILE, SNAPSHOTS_RELPATH, SUBMITTED_FILE, SnapshotError)
from clawgym.snapshot.manifest import verify_snapshot
from clawgym.snapshot.marks import discard_unsubmitted, mark_submitted
from clawgym.snapshot.read import find_snapshot, list_snapshots, load_snapshot
from tests.test_snapshot import SNAPSHOT_FILES, launch_snapshot
from tests.test_snapshot_watcher import write_checkpoint


def test_manifest_records_size_and_sha256_of_every_file_and_is_written_last(tmp_path, monkeypatch):
    order = []
    real = snap_write.write_synced
    monkeypatch.setattr(snap_write, "write_synced", lambda path, text: (order.append(path.name), real(path, text)))
    _, _, path = launch_snapshot(tmp_path / "run", submitted=False)
    assert order[-1] == MANIFEST_FILE and set(order[:-1]) == SNAPSHOT_FILES
    files = json.loads((path / MANIFEST_FILE).read_text())["files"]
    assert set(files) == SNAPSHOT_FILES
    for name, entry in files.items():
        data = (path / name).read_bytes()
        assert entry == {"size": len(data), "sha256": hashlib.sha256(data).hexdigest()}
    assert verify_snapshot(path)["files"] == files


def damage(path, how: str) -> None:
    target = path / RESOLVED_FILE
    if how == "truncated":
        target.write_bytes(target.read_bytes()[:40])
    elif how == "altered":
        data = bytearray(target.read_bytes())
        data[-2] = ord("X") if data[-2] != ord("X") else ord("Y")
        target.write_bytes(bytes(data))
    elif how == "missing file":
        target.unlink()
    elif how == "no manifest":
        (path / MANIFEST_FILE).unlink()


HOW = {"truncated": "truncated", "altered": "altered", "missing file": "missing", "no manifest": "incomplete"}


@pytest.mark.parametrize("how", list(HOW))
@pytest.mark.parametrize("command", ["show", "diff", "resume", "stamp"])
def test_damaged_snapshot_is_refused_with_a_clear_error(tmp_path, capsys, how, command):
    save = tmp_path / "run"
    _, _, path = launch_snapshot(save)
    write_checkpoint(save, 1)
    damage(path, how)
    argv = {"show": ["show", str(save)], "diff": ["diff", str(save), "rollout.temperature=0.5"],
            "resume": ["resume", str(save), "--dry-run"], "stamp": ["stamp", str(save)]}[command]
    assert cli(argv) == 2
    err = capsys.readouterr().err
    assert f"snapshot {path}" in err and HOW[how] in err, err
    assert "fix:" in err and "Traceback" not in err and "KeyError" not in err
    # Nothing was stamped from it.
    assert not (save / "iter_0000001" / "clawgym_snapshot").exists()


def test_damaged_snapshot_dir_is_refused_when_named_directly(tmp_path):
    _, _, path = launch_snapshot(tmp_path / "run")
    damage(path, "truncated")
    with pytest.raises(SnapshotError, match="truncated"):
        load_snapshot(path)


def test_snapshot_never_submitted_is_not_a_launch(tmp_path, capsys):
    save = tmp_path / "run"
    _, _, first = launch_snapshot(save, timestamp="20260101_000000")
    # The launcher died between writing the snapshot and submitting (no cleanup ran).
    _, _, orphan = launch_snapshot(save, ["rollout.temperature=0.5"], timestamp="20260101_010000", submitted=False)
    assert [s.path for s in list_snapshots(save)] == [first]
    assert find_snapshot(save)[0].path == first
    assert cli(["show", str(save), "--no-config"]) == 0
    out = capsys.readouterr().out
    assert "launches (1 snapshot" in out
    assert f"not launches (stopped before their job was submitted, no run): {orphan.name}" in out
    # resume continues the last real launch, not the one that never ran.
    write_checkpoint(save, 1)
    assert cli(["resume", str(save), "--dry-run"]) == 0
    assert f"latest snapshot {first.name}" in capsys.readouterr().out


def test_only_unsubmitted_snapshots_means_no_launch(tmp_path, capsys):
    save = tmp_path / "run"
    launch_snapshot(save, submitted=False)
    assert cli(["show", str(save)]) == 2
    assert "holds no launch" in capsys.readouterr().err


def test_discard_unsubmitted_removes_only_a_snapshot_never_submitted(tmp_path):
    save = tmp_path / "run"
    _, plan, submitted = launch_snapshot(save, timestamp="20260101_000000")
    _, _, stopped = launch_snapshot(save, timestamp="20260101_010000", submitted=False)
    assert discard_unsubmitted(stopped) is True and not stopped.exists()
    assert discard_unsubmitted(submitted) is False and submitted.is_dir()
    assert json.loads((submitted / SUBMITTED_FILE).read_text())["submission_id"] == plan.submission_id
    assert sorted(p.name for p in (save / SNAPSHOTS_RELPATH).iterdir()) == [submitted.name]


def test_marking_submitted_keeps_the_snapshot_verifiable(tmp_path):
    _, plan, path = launch_snapshot(tmp_path / "run", submitted=False)
    mark_submitted(path, plan.submission_id, address="http://127.0.0.1:8265")
    assert verify_snapshot(path) and load_snapshot(path).id == path.name
    # A stray file in a snapshot is an alteration.
    (path / "notes.txt").write_text("x")
    with pytest.raises(SnapshotError, match="notes.txt is not part of the snapshot"):
        verify_snapshot(path)


def test_stamped_copy_in_a_checkpoint_is_verified_too(tmp_path, capsys):
    save = tmp_path / "run"
    launch_snapshot(save)
    write_checkpoint(save, 1)
    assert cli(["stamp", str(save)]) == 0
    stamped = save / "iter_0000001" / "clawgym_snapshot"
    assert load_snapshot(stamped).meta["id"] == json.loads((stamped / META_FILE).read_text())["id"]
    damage(stamped, "altered")
    capsys.readouterr()
    assert cli(["show", str(save / "iter_0000001")]) == 2
    assert "altered" in capsys.readouterr().err
    shutil.rmtree(stamped)


@pytest.mark.parametrize("stop", [KeyboardInterrupt, "refused"])
def test_launch_stopped_before_submission_leaves_no_snapshot(clawgym_checkout, tmp_path, monkeypatch, stop):
    """The real launch path: preflight, then snapshots while the cluster comes up, then the
    cluster step fails or Ctrl-C arrives before the job is submitted."""
    from clawgym.pipeline.single import launch_single
    from clawgym.backends import BackendError
    from clawgym.backends.existing import ExistingCluster
    from clawgym.config.compose import compose
    from clawgym.plan.build import build_plan
    from tests.fixtures.checkout import checkout_overrides

    save = tmp_path / "run"
    cfg = compose([*checkout_overrides(clawgym_checkout, skip_checks=["docker", "image", "gpus", "ports", "cluster"]),
                   f"paths.save={save}", "sandbox.cleanup_leftovers=false", "ray.address=http://127.0.0.1:1"])
    plan = build_plan(cfg, environ={}, timestamp="20260101_000000")
    written = []

    def start(self, secrets, *, on_address=None, while_waiting=None):
        # The cluster is "coming up": the pipeline writes the snapshots meanwhile, then it fails.
        while_waiting()
        written.extend((save / SNAPSHOTS_RELPATH).iterdir())
        if stop == "refused":
            raise BackendError("no Ray dashboard answers at http://127.0.0.1:1")
        raise KeyboardInterrupt

    monkeypatch.setattr(ExistingCluster, "answers", lambda self: False)
    monkeypatch.setattr(ExistingCluster, "start", start)
    with pytest.raises(SystemExit):
        launch_single(cfg, plan)
    assert written, "the snapshot was never written: the test did not reach the step it checks"
    # Nothing is left that would mark the folder as a run's save dir: not even an empty snapshots dir.
    assert not (save / SNAPSHOTS_RELPATH).exists()


def _as_format_1(path) -> None:
    """Turn a snapshot into what clawgym wrote before manifests: meta format 1, no manifest,
    no submission record."""
    meta = json.loads((path / META_FILE).read_text())
    meta["format"] = 1
    (path / META_FILE).write_text(json.dumps(meta))
    (path / MANIFEST_FILE).unlink()
    (path / SUBMITTED_FILE).unlink(missing_ok=True)


def test_format_1_snapshot_without_manifest_still_reads_as_a_launch(tmp_path, capsys):
    save = tmp_path / "run"
    _, _, path = launch_snapshot(save)
    _as_format_1(path)
    assert load_snapshot(path).config["exp_name"]
    assert cli(["show", str(save)]) == 0
    assert "not a launch" not in capsys.readouterr().out
    # Never discarded as an unsubmitted launch: that format did not record submission.
    assert discard_unsubmitted(path) is False and path.is_dir()


def test_cut_short_format_2_snapshot_is_not_taken_for_format_1(tmp_path):
    _, _, path = launch_snapshot(tmp_path / "run")
    (path / MANIFEST_FILE).unlink()
    with pytest.raises(SnapshotError, match="incomplete"):
        load_snapshot(path)


def test_an_interrupted_launch_leaves_no_snapshots_dir_that_marks_the_folder_as_a_run(tmp_path):
    from clawgym.config.compose import compose
    from clawgym.validate import violations

    save = tmp_path / "exp" / "interrupted"
    _, _, stopped = launch_snapshot(save, submitted=False)
    assert discard_unsubmitted(stopped) is True
    assert not (save / SNAPSHOTS_RELPATH).exists() and not (save / "clawgym").exists()
    # A launch killed while writing leaves only its hidden temp dir: still no run's save dir.
    (save / SNAPSHOTS_RELPATH / ".tmp-clawgym-x-host-1").mkdir(parents=True)
    for target in (save / "sub", tmp_path / "exp"):
        codes = {v.code for v in violations(compose([f"paths.save={target}"]))}
        assert not codes & {"save-dir-inside-another-run", "save-dir-above-another-run"}, (target, codes)


@pytest.mark.parametrize("command", ["show", "diff", "resume", "stamp"])
def test_format_1_snapshot_with_a_truncated_config_is_refused_naming_the_file(tmp_path, capsys, command):
    save = tmp_path / "run"
    _, _, path = launch_snapshot(save)
    write_checkpoint(save, 1)
    _as_format_1(path)
    # Cut at a line end before paths: (format 1 has no manifest to tell its size); it still parses as YAML.
    lines = (path / RESOLVED_FILE).read_text().splitlines(keepends=True)
    cut = next(i for i, ln in enumerate(lines) if ln.startswith("paths:"))
    (path / RESOLVED_FILE).write_text("".join(lines[:cut]))
    argv = {"show": ["show", str(save)], "diff": ["diff", str(save), "rollout.temperature=0.5"],
            "resume": ["resume", str(save), "--dry-run"], "stamp": ["stamp", str(save)]}[command]
    assert cli(argv) == 2
    err = capsys.readouterr().err
    assert f"snapshot {path}" in err and RESOLVED_FILE in err and "paths" in err and "truncated" in err, err
    assert "fix:" in err and "Traceback" not in err and "KeyError" not in err
    assert not (save / "iter_0000001" / "clawgym_snapshot").exists()
