"""The disk guard on a small real filesystem: a tmpfs of a few MiB, mounted for the test and unmounted after.

The preflight check ``disk`` sizes a checkpoint from the memory plan (parameters x (bf16 weights +
optimizer bytes per parameter)) and refuses a save dir that cannot hold checkpoint.keep_last + 1; the
supervisor's guard stops a live run before the next save would fill the disk.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from clawgym.config.compose import compose, to_plain
from clawgym.demo.checkout import STANDIN
from clawgym.preflight.core import CheckFailed, Context
from clawgym.preflight.disk import check_disk, planned_size
from clawgym.supervisor.disk import DiskGuard
from clawgym.supervisor.monitor import RunState

MIB = 1 << 20


@pytest.fixture
def small_fs(tmp_path):
    """A 4 MiB tmpfs (needs root: mount), unmounted after the test."""
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root")
    mnt = tmp_path / "fs"
    mnt.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=4m", "tmpfs", str(mnt)], check=True)
    try:
        yield mnt
    finally:
        subprocess.run(["umount", str(mnt)], check=True)


def _plan(params: int, per_param: float = 12):
    """A launch plan's memory section as the pipeline carries it (MemoryPlan.to_dict()["actor"])."""
    return SimpleNamespace(memory={"actor": {"params_total": params, "terms": {"optimizer_bytes_per_param": per_param}}})


def _config(save: Path, keep_last):
    return {"paths": {"save": str(save)}, "checkpoint": {"save_interval": 5, "keep_last": keep_last},
            "health": {"disk_guard": True}}


def test_preflight_refuses_a_save_dir_that_cannot_hold_keep_last_plus_one_and_names_a_keep_last_that_fits(small_fs):
    plan = _plan(100_000)  # 100k x (2 + 12) bytes = 1.3 MiB a checkpoint
    ok = check_disk(Context(c=_config(small_fs / "run", 1), plan=plan, local_head=True))
    assert "for 2 checkpoint(s) of 1.3 MiB" in ok
    with pytest.raises(CheckFailed) as err:
        check_disk(Context(c=_config(small_fs / "run", 3), plan=plan, local_head=True))
    assert "4 checkpoint(s) of 1.3 MiB need 5.3 MiB" in err.value.problem
    assert "100,000 parameters x (2 bytes bf16 weights + 12 bytes optimizer state)" in err.value.problem
    assert err.value.fix.startswith("checkpoint.keep_last=1")
    # Every checkpoint kept: room for the next save is what can be checked.
    assert "for 1 checkpoint(s)" in check_disk(Context(c=_config(small_fs / "run", None), plan=plan, local_head=True))
    with pytest.raises(CheckFailed) as err:
        check_disk(Context(c=_config(small_fs / "run", None), plan=_plan(400_000), local_head=True))
    assert "a paths.save on a filesystem with at least 5.3 MiB free" in err.value.fix


def test_the_size_comes_from_the_memory_plan_of_the_chosen_layout():
    c = to_plain(compose(["model=qwen3_4b"]))
    size = planned_size(c)
    # Qwen3-4B: about 4e9 parameters, each with bf16 weights and at least fp16 optimizer moments.
    assert 3.5e9 * 6 < size.bytes < 4.5e9 * 14, size


def test_the_guard_stops_a_live_run_before_a_save_would_fill_the_disk(small_fs):
    save = small_fs / "run"
    save.mkdir()
    # The stand-in writes 1 MiB checkpoints: after two, room for one more is left ...
    subprocess.run([sys.executable, str(STANDIN), "--save", str(save)], check=True, capture_output=True,
                   env={**os.environ, "STANDIN_CHECKPOINTS": "2", "STANDIN_CHECKPOINT_EVERY": "0",
                        "STANDIN_CHECKPOINT_BYTES": str(MIB)})
    config = _config(save, None)
    guard = DiskGuard(config)
    state = RunState(save_dir=save, submission_id="s", attempt=1, started=0.0, now=time.time(), config=config)
    assert guard.poll(state) is None
    # ... until something else fills the disk: less than a checkpoint left.
    (small_fs / "filler").write_bytes(b"\0" * (3 * MIB // 2))
    v = guard.poll(state)
    assert v is not None and v.cls == "disk-full" and v.action == "stop"
    assert "iter_0000002 on disk is 1.0 MiB" in v.evidence and "free" in v.evidence, v.evidence
