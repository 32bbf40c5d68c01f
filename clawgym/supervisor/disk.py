"""The disk guard: a checkpoint's size, and a run stopped cleanly before a save would fill the disk.

A save that fills the filesystem fails part-way and leaves an ``iter_*`` that is not loadable, and
a full disk makes everything else in the run fail oddly too (trajectoryRL PR #203: every sample
scored 0). One checkpoint's size comes from the memory plan (clawgym/preflight/disk.py, which
also refuses a save dir too small before launch); once a checkpoint is on disk, its measured size
is used instead.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Mapping, Optional

from clawgym.preflight.disk import CheckpointSize, free_bytes, gib, planned_size
from clawgym.supervisor import classes as C
from clawgym.supervisor.monitor import RunState, Verdict
from clawgym.supervisor.retention import iter_dir, scan


def measured_size(save_dir: Path) -> Optional[CheckpointSize]:
    """The newest complete checkpoint's bytes on disk, if there is one."""
    s = scan(save_dir)
    if not s.complete:
        return None
    path = iter_dir(save_dir, s.complete[-1])
    total = 0
    for root, _, files in os.walk(path):
        for name in files:
            try:
                total += os.lstat(os.path.join(root, name)).st_size
            except OSError:
                continue
    return CheckpointSize(total, f"{path.name} on disk is {gib(total)}")


class DiskGuard:
    """A ``disk-full`` verdict (stopped for good) while free space is below one more checkpoint."""

    name = "disk-guard"

    def __init__(self, config: Mapping[str, Any], size: Optional[CheckpointSize] = None) -> None:
        self.config = config
        self._size = size

    def size(self, save_dir: Path) -> Optional[CheckpointSize]:
        got = measured_size(save_dir)
        if got is not None:
            return got
        if self._size is None:
            try:
                self._size = planned_size(self.config)
            except Exception:  # noqa: BLE001 - a config the plan cannot size: guard with what is measured
                return None
        return self._size

    def poll(self, state: RunState) -> Optional[Verdict]:
        if (self.config.get("checkpoint") or {}).get("save_interval") is None:
            return None  # no saves: nothing to fill the disk with
        size = self.size(Path(state.save_dir))
        if size is None or size.bytes <= 0:
            return None
        where, free = free_bytes(Path(state.save_dir))
        if free >= size.bytes:
            return None
        return Verdict(cls=C.DISK_FULL, action="stop",
                       evidence=(f"disk guard: {where} has {gib(free)} free, the next checkpoint needs "
                                 f"{gib(size.bytes)} ({size.how}); stopped before a save fills the disk "
                                 "(free space, or set checkpoint.keep_last, then resume)"))
