"""What happens to a snapshot after it is written: the launch submitted its job (until then it is
not a launch), how the followed job ended, how a tuner's trial ended, or its removal when the
launch stopped before submitting."""

from __future__ import annotations

import json
import os
import shutil
import time
from pathlib import Path
from typing import Any, Dict, Mapping, Optional

from clawgym.common.fsutil import atomic_write_text
from clawgym.snapshot.layout import ENDED_FILE, SUBMITTED_FILE, TRIAL_FILE
from clawgym.snapshot.manifest import is_legacy_snapshot


def is_submitted(path: str | os.PathLike) -> bool:
    """True once the launch that wrote the snapshot submitted its job (:func:`mark_submitted`).

    A format-1 snapshot counts as a launch, as it did when it was written (that format did not
    record submission)."""
    return (Path(path) / SUBMITTED_FILE).is_file() or is_legacy_snapshot(path)


def mark_submitted(snapshot_dir: str | os.PathLike, submission_id: str, *, address: str = "",
                   job: Optional[Mapping[str, Any]] = None) -> None:
    """Record that the job of this snapshot's launch was submitted; call right after Ray
    accepted it. Until then the snapshot is not listed as a launch. ``job``: where the job
    runs, as :mod:`clawgym.common.ownership` asks about it (a SLURM job names its cluster: ``cluster``
    and ``controller`` of ``scontrol show config``)."""
    if not snapshot_dir:
        return
    record: Dict[str, Any] = {"submission_id": submission_id, "address": address, "submitted_unix": time.time()}
    if job:
        record["job"] = dict(job)
    atomic_write_text(Path(snapshot_dir) / SUBMITTED_FILE, json.dumps(record) + "\n")


def mark_ended(snapshot_dir: Optional[str | os.PathLike], status: str, exit_code: Optional[int]) -> None:
    """Record how the followed job ended (succeeded / failed / stopped), for when no cluster can say."""
    if not snapshot_dir or not Path(snapshot_dir).is_dir():
        return
    atomic_write_text(Path(snapshot_dir) / ENDED_FILE,
                      json.dumps({"status": status, "exit_code": exit_code, "ended_unix": time.time()}) + "\n")


def mark_trial(snapshot_dir: Optional[str | os.PathLike], trial: Mapping[str, Any]) -> None:
    """Record how the tuner's trial that this launch ran ended (:data:`TRIAL_FILE`)."""
    if not snapshot_dir or not Path(snapshot_dir).is_dir():
        return
    atomic_write_text(Path(snapshot_dir) / TRIAL_FILE, json.dumps(dict(trial), indent=2) + "\n")


def discard_unsubmitted(snapshot_dir: Optional[str | os.PathLike]) -> bool:
    """Remove the snapshot of a launch that stopped before submitting its job; True when removed.

    A snapshot already marked submitted is never removed.
    """
    if not snapshot_dir:
        return False
    p = Path(snapshot_dir)
    if not p.is_dir() or is_submitted(p) or p.parent.name not in ("snapshots", "clawgym_snapshots"):
        return False
    # Rename first (atomic), so no reader sees a half-removed snapshot.
    gone = p.parent / f".discarded-{p.name}-{os.getpid()}"
    try:
        os.rename(p, gone)
    except OSError:
        return False
    shutil.rmtree(gone, ignore_errors=True)
    # The launch wrote nothing else there: leave no empty clawgym/snapshots/ (nor clawgym/) that
    # would mark the folder as a run's save dir (rmdir removes only empty dirs).
    for empty in (p.parent, p.parent.parent):
        try:
            empty.rmdir()
        except OSError:
            break
    return True
