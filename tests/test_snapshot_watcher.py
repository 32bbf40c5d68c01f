"""Snapshots placed into checkpoints while a trainer writes them (CheckpointWatcher, clawgym stamp)."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path

from clawgym.cli import main as cli
from clawgym.snapshot.checkpoints import CheckpointWatcher, list_checkpoints, stamp_save_dir
from clawgym.snapshot.layout import META_FILE, STAMP_DIRNAME, STAMP_FILE, TRACKER_FILE
from tests.test_snapshot import launch_snapshot


def write_checkpoint(save: Path, it: int, *, complete: bool = True) -> Path:
    """What Megatron does: the iter dir with its files, then (when finished) the tracker."""
    ckpt = save / f"iter_{it:07d}"
    ckpt.mkdir(parents=True, exist_ok=True)
    (ckpt / "model_optim_rng.pt").write_text(f"weights {it} {time.time_ns()}\n")
    if complete:
        tmp = save / f".{TRACKER_FILE}.tmp"
        tmp.write_text(str(it))
        tmp.replace(save / TRACKER_FILE)
    return ckpt


def stamp_of(save: Path, it: int):
    meta = save / f"iter_{it:07d}" / STAMP_DIRNAME / META_FILE
    return json.loads(meta.read_text())["id"] if meta.is_file() else None


class Trainer(threading.Thread):
    """A thread writing checkpoints like a trainer, recording when each finished."""

    def __init__(self, save: Path, iterations, every: float):
        super().__init__(daemon=True)
        self.save, self.iterations, self.every = save, list(iterations), every
        self.finished_at = {}

    def run(self):
        for it in self.iterations:
            time.sleep(self.every)
            write_checkpoint(self.save, it)
            self.finished_at[it] = time.time()


def wait_for(predicate, timeout=10.0):
    deadline = time.time() + timeout
    while time.time() < deadline:
        if predicate():
            return True
        time.sleep(0.02)
    return predicate()


def test_watcher_places_snapshot_into_each_checkpoint_soon_after_it_is_written(tmp_path):
    save = tmp_path / "run"
    _, _, snap = launch_snapshot(save)
    watcher = CheckpointWatcher(save, snap, poll_interval=0.05).start()
    trainer = Trainer(save, [1, 2, 3], every=0.3)
    trainer.start()
    try:
        # While the trainer still runs, each finished checkpoint gets the snapshot.
        assert wait_for(lambda: stamp_of(save, 1) == snap.name)
        assert trainer.is_alive()
        trainer.join()
        assert wait_for(lambda: stamp_of(save, 3) == snap.name)
    finally:
        stamped = watcher.stop()
    assert stamped == [1, 2, 3] and watcher.errors == []
    for it in (1, 2, 3):
        ckpt = save / f"iter_{it:07d}"
        assert {p.name for p in (ckpt / STAMP_DIRNAME).iterdir()} >= {META_FILE, "config.resolved.yaml", STAMP_FILE}
        stamped_at = json.loads((ckpt / STAMP_DIRNAME / STAMP_FILE).read_text())["stamped_at"]
        assert 0 <= stamped_at - trainer.finished_at[it] < 2.0
        # No temp leftovers next to the checkpoint's files.
        assert not [p for p in ckpt.iterdir() if p.name.startswith(".")]


def test_incomplete_checkpoint_is_not_stamped_until_the_tracker_names_it(tmp_path):
    save = tmp_path / "run"
    _, _, snap = launch_snapshot(save)
    watcher = CheckpointWatcher(save, snap, poll_interval=60)
    write_checkpoint(save, 1)
    write_checkpoint(save, 2, complete=False)  # Megatron still writing iter 2
    assert watcher.scan() == [1]
    assert stamp_of(save, 2) is None
    (save / TRACKER_FILE).write_text("2")
    assert watcher.scan() == [2]
    assert watcher.scan() == []  # idempotent


def test_stop_does_a_final_scan(tmp_path):
    save = tmp_path / "run"
    _, _, snap = launch_snapshot(save)
    watcher = CheckpointWatcher(save, snap, poll_interval=3600).start()
    time.sleep(0.1)  # the first scan ran; the next one would be an hour away
    write_checkpoint(save, 5)
    assert watcher.stop() == [5]
    assert stamp_of(save, 5) == snap.name


def test_checkpoints_of_earlier_runs_keep_their_own_snapshot_after_resume(tmp_path):
    save = tmp_path / "run"
    _, _, first = launch_snapshot(save, timestamp="20260101_000000")
    w1 = CheckpointWatcher(save, first, poll_interval=60)
    for it in (1, 2):
        write_checkpoint(save, it)
    w1.stop()
    # A checkpoint of the first run that carries no snapshot yet (its launcher was detached).
    write_checkpoint(save, 3)
    _, _, second = launch_snapshot(save, ["checkpoint.load=" + str(save)], timestamp="20260101_010000")
    w2 = CheckpointWatcher(save, second, poll_interval=60)
    assert w2.scan() == []  # nothing new yet: old checkpoints are not the new run's
    write_checkpoint(save, 4)
    write_checkpoint(save, 5)
    assert w2.stop() == [4, 5]
    assert [stamp_of(save, i) for i in (1, 2, 3, 4, 5)] == [first.name, first.name, None, second.name, second.name]
    # After the fact, clawgym stamp gives iter 3 to the launch that preceded it.
    assert stamp_save_dir(save) == [(3, first.name)]
    assert stamp_of(save, 3) == first.name
    assert stamp_save_dir(save) == []


def test_checkpoint_rewritten_by_a_fresh_run_gets_the_new_snapshot(tmp_path):
    """A run started without --load restarts at iteration 1 and rewrites the old numbers."""
    save = tmp_path / "run"
    _, _, first = launch_snapshot(save, timestamp="20260101_000000")
    w1 = CheckpointWatcher(save, first, poll_interval=60)
    for it in (1, 2, 3):
        write_checkpoint(save, it)
    w1.stop()
    time.sleep(0.01)  # distinct mtimes
    _, _, second = launch_snapshot(save, timestamp="20260101_010000")
    w2 = CheckpointWatcher(save, second, poll_interval=60)
    write_checkpoint(save, 1)
    write_checkpoint(save, 2)  # both rewritten between two scans
    assert w2.scan() == [1, 2]
    assert [stamp_of(save, i) for i in (1, 2, 3)] == [second.name, second.name, first.name]


def test_watcher_survives_a_checkpoint_deleted_while_copying(tmp_path, monkeypatch):
    from clawgym.snapshot import checkpoints as snap_mod

    save = tmp_path / "run"
    _, _, snap = launch_snapshot(save)
    watcher = CheckpointWatcher(save, snap, poll_interval=60)
    write_checkpoint(save, 1)
    real = snap_mod.shutil.copyfile

    def vanish(src, dst, *a, **kw):
        import shutil
        if (save / "iter_0000001").exists():
            shutil.rmtree(save / "iter_0000001")  # Megatron's retention removed the checkpoint meanwhile
        return real(src, dst, *a, **kw)

    monkeypatch.setattr(snap_mod.shutil, "copyfile", vanish)
    assert watcher.scan() == []
    assert watcher.errors and "iter_0000001" in watcher.errors[0]
    assert not (save / "iter_0000001").exists()  # not recreated holding only a snapshot
    monkeypatch.setattr(snap_mod.shutil, "copyfile", real)
    write_checkpoint(save, 2)
    assert watcher.scan() == [2]


def test_stamp_command_places_snapshots_after_a_detached_run(tmp_path, capsys):
    save = tmp_path / "run"
    _, _, snap = launch_snapshot(save)
    for it in (1, 2):
        write_checkpoint(save, it)
    write_checkpoint(save, 3, complete=False)
    assert cli(["stamp", str(save)]) == 0
    out = capsys.readouterr().out
    assert f"iter_0000001: placed snapshot {snap.name}" in out and "iter_0000003" not in out
    assert [c.stamp_id for c in list_checkpoints(save)] == [snap.name, snap.name, None]
    assert cli(["stamp", str(save)]) == 0
    assert "already carries" in capsys.readouterr().out


def test_stamp_follow_stamps_new_checkpoints_until_interrupted(tmp_path):
    import os
    import signal
    import subprocess
    import sys

    root = Path(__file__).resolve().parent.parent
    save = tmp_path / "run"
    _, _, snap = launch_snapshot(save)
    proc = subprocess.Popen([sys.executable, "-m", "clawgym", "stamp", str(save), "--follow", "--interval", "0.1"],
                            cwd=tmp_path, env={**os.environ, "PYTHONPATH": str(root), "PYTHONUNBUFFERED": ""}, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline().startswith("every complete checkpoint")
        assert proc.stdout.readline().startswith("following")
        write_checkpoint(save, 1)
        assert proc.stdout.readline().strip() == f"iter_0000001: placed snapshot {snap.name}"
    finally:
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=30)
    assert proc.returncode == 0, err
    assert stamp_of(save, 1) == snap.name


def test_detached_launch_points_to_stamp_which_places_the_snapshots_afterwards(
        clawgym_checkout, ray_cluster, tmp_path):
    """Detach mode runs no watcher; the launch says how to stamp, and `clawgym stamp` does it."""
    import os
    import subprocess
    import sys

    from clawgym.snapshot.read import list_snapshots
    from tests.fixtures.checkout import LAUNCH_SKIPS, checkout_overrides

    root = Path(__file__).resolve().parent.parent
    save = tmp_path / "run"
    env = {k: v for k, v in os.environ.items() if k not in ("WANDB_API_KEY", "WANDB_KEY", "SGLANG_API_KEY")}
    env.update(PYTHONPATH=str(root), CLAWGYM_STATE_DIR=str(tmp_path / "state"))
    proc = subprocess.run(
        [sys.executable, str(root / "train.py"), *checkout_overrides(clawgym_checkout, skip_checks=LAUNCH_SKIPS),
         *ray_cluster.overrides(), f"paths.save={save}", "ray.detach=true", "+extra_env.STANDIN_CHECKPOINTS=2",
         "+extra_env.STANDIN_CHECKPOINT_EVERY=0.2", f"hydra.run.dir={tmp_path}/hydra"],
        env=env, capture_output=True, text=True, timeout=300, cwd=root)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert f"clawgym stamp {save} --follow" in proc.stdout
    assert wait_for(lambda: (save / TRACKER_FILE).is_file() and (save / TRACKER_FILE).read_text() == "2", 120)
    assert [c.stamp_id for c in list_checkpoints(save)] == [None, None]
    stamp = subprocess.run([sys.executable, "-m", "clawgym", "stamp", str(save)], env=env, capture_output=True,
                           text=True, timeout=120, cwd=tmp_path)
    assert stamp.returncode == 0, stamp.stderr
    (snap,) = list_snapshots(save)
    assert [c.stamp_id for c in list_checkpoints(save)] == [snap.id, snap.id]
