"""Checkpoint retention on a real save dir: Megatron's layout (iter_%07d/ and the tracker
latest_checkpointed_iteration.txt), with a half-written iter_* newer than the tracker."""

from __future__ import annotations

import os
import time
from pathlib import Path

from clawgym.supervisor.retention import (SAVE_QUIET_S, TRACKER, RetentionMonitor, keep_set, protected, prune,
                                          scan)
from clawgym.supervisor.monitor import RunState


def _save_dir(root: Path, complete, tracker, half=(), half_age_s=0.0) -> Path:
    for it in complete:
        d = root / f"iter_{it:07d}"
        d.mkdir(parents=True)
        (d / "common.pt").write_bytes(b"x" * 64)
    for it in half:
        d = root / f"iter_{it:07d}"
        d.mkdir(parents=True)
        f = d / "__0_0.distcp"
        f.write_bytes(b"partial")
        old = time.time() - half_age_s
        os.utime(f, (old, old))
        os.utime(d, (old, old))
    (root / TRACKER).write_text(str(tracker))
    return root


def _iters(root: Path):
    return sorted(int(p.name[5:]) for p in root.glob("iter_*"))


def test_keeps_the_last_n_and_every_kth_and_reports_the_half_written_one(tmp_path):
    root = _save_dir(tmp_path, range(1, 11), tracker=10, half=[11], half_age_s=SAVE_QUIET_S + 60)
    got = prune(root, keep_last=2, keep_every=4)
    assert _iters(root) == [4, 8, 9, 10, 11]
    assert got.removed == [1, 2, 3, 5, 6, 7]
    assert any("iter_0000011" in n and "not deleted" in n for n in got.notes)
    log = (root / "retention.log").read_text().splitlines()
    assert len(log) == 6 and "removed iter_0000001" in log[0]
    assert not list(root.glob(".pruning-*"))


def test_nothing_is_pruned_while_a_save_is_running(tmp_path):
    root = _save_dir(tmp_path, range(1, 6), tracker=5, half=[6], half_age_s=0.0)
    got = prune(root, keep_last=1, keep_every=None)
    assert _iters(root) == [1, 2, 3, 4, 5, 6]
    assert got.removed == [] and any("a save is running" in n for n in got.notes)


def test_the_newest_complete_is_kept_even_with_keep_last_zero_and_nothing_without_a_tracker(tmp_path):
    root = _save_dir(tmp_path / "a", range(1, 4), tracker=3)
    prune(root, keep_last=0, keep_every=None)
    assert _iters(root) == [3]
    bare = tmp_path / "b"
    _save_dir(bare, range(1, 4), tracker=3)
    (bare / TRACKER).unlink()
    got = prune(bare, keep_last=1, keep_every=None)
    assert _iters(bare) == [1, 2, 3] and "nothing pruned" in got.notes[0]


def test_a_checkpoint_a_resume_may_load_is_kept(tmp_path):
    root = _save_dir(tmp_path, range(1, 6), tracker=5)
    config = {"checkpoint": {"keep_last": 1, "keep_every": None, "load": None}, "args": {"ckpt_step": 2}}
    RetentionMonitor(config).poll(RunState(save_dir=root, submission_id="s", attempt=1, started=0.0,
                                           now=time.time(), config=config))
    assert _iters(root) == [2, 5]
    assert protected({"checkpoint": {"load": str(root / "iter_0000003")}}, root) == {3}


def test_keep_set_keeps_every_kth_and_the_tracker():
    assert keep_set(range(1, 21), 20, 3, 5) == {5, 10, 15, 18, 19, 20}
    assert scan(Path("/nonexistent")).tracker is None
