"""Snapshots read back: one snapshot dir (checked against its manifest), every launch of a save
dir, and the snapshot a save dir, snapshot dir or checkpoint dir stands for."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

import yaml

from clawgym.snapshot.layout import (CHOICES_FILE, CONFIG_FILE, MANIFEST_FILE, META_FILE, OVERRIDES_FILE,
                                     PLAN_FILE, RESOLVED_FILE, SNAPSHOTS_RELPATH, STAMP_DIRNAME, SnapshotError)
from clawgym.snapshot.manifest import is_snapshot_dir, verify_snapshot
from clawgym.snapshot.marks import is_submitted


@dataclass
class Snapshot:
    """A snapshot read back from disk."""

    path: Path
    meta: Dict[str, Any]
    # Resolved config, as the run used it.
    config: Dict[str, Any]
    # Composed config with interpolations kept.
    config_unresolved: Dict[str, Any]
    overrides: Optional[List[str]]
    choices: Optional[Dict[str, str]]
    # launch_plan.json.
    plan: Dict[str, Any]

    @property
    def id(self) -> str:
        return str(self.meta.get("id") or self.path.name)

    @property
    def created(self) -> float:
        return float(self.meta.get("created_unix") or 0.0)



def load_snapshot(path: str | os.PathLike) -> Snapshot:
    """Read a snapshot after checking it against its manifest (:class:`SnapshotError` if damaged)."""
    p = Path(path)
    if not is_snapshot_dir(p):
        raise SnapshotError(f"clawgym: {p} is not a clawgym snapshot (no {META_FILE} / {MANIFEST_FILE})")
    verify_snapshot(p)
    try:
        return Snapshot(
            path=p,
            meta=json.loads((p / META_FILE).read_text()),
            config=yaml.safe_load((p / RESOLVED_FILE).read_text()),
            config_unresolved=yaml.safe_load((p / CONFIG_FILE).read_text()),
            overrides=yaml.safe_load((p / OVERRIDES_FILE).read_text()),
            choices=yaml.safe_load((p / CHOICES_FILE).read_text()),
            plan=json.loads((p / PLAN_FILE).read_text()),
        )
    except (OSError, ValueError, yaml.YAMLError) as exc:
        raise SnapshotError(f"clawgym: snapshot {p} is unreadable: {exc}") from None


def snapshot_dirs(save_dir: str | os.PathLike) -> List[Path]:
    """Every snapshot dir of a save dir, whatever its state (temp dirs are skipped), by name."""
    base = Path(save_dir) / SNAPSHOTS_RELPATH
    try:
        return sorted(e for e in base.iterdir() if not e.name.startswith(".") and e.is_dir() and is_snapshot_dir(e))
    except OSError:
        return []


def unsubmitted_snapshots(save_dir: str | os.PathLike) -> List[Path]:
    """Snapshot dirs of launches that never submitted their job (interrupted in between)."""
    return [p for p in snapshot_dirs(save_dir) if not is_submitted(p)]


def list_snapshots(save_dir: str | os.PathLike) -> List[Snapshot]:
    """Every launch of a save dir, oldest first: its submitted snapshots.

    Snapshots never submitted are left out (:func:`unsubmitted_snapshots`); a damaged
    submitted one raises :class:`SnapshotError`, since which launch wrote which
    checkpoint depends on all of them.
    """
    snaps = [load_snapshot(p) for p in snapshot_dirs(save_dir) if is_submitted(p)]
    return sorted(snaps, key=lambda s: (s.created, s.id))


def find_snapshot(target: str | os.PathLike) -> Tuple[Snapshot, Optional[Path]]:
    """(snapshot, save dir or None) for a save dir (its latest launch), snapshot dir or checkpoint dir.

    Raises :class:`SnapshotError` for a damaged snapshot (see :func:`verify_snapshot`).
    """
    p = Path(target).expanduser()
    if not p.exists():
        raise SnapshotError(f"clawgym: {p} does not exist")
    if is_snapshot_dir(p):
        save = p.parent.parent.parent if p.parent.name == "snapshots" else None
        return load_snapshot(p), save
    if is_snapshot_dir(p / STAMP_DIRNAME):
        return load_snapshot(p / STAMP_DIRNAME), p.parent
    snaps = list_snapshots(p)
    if not snaps and unsubmitted_snapshots(p):
        raise SnapshotError(f"clawgym: {p} holds no launch: its only snapshot(s) "
                            f"({', '.join(x.name for x in unsubmitted_snapshots(p))}) belong to launches stopped "
                            "before their job was submitted\n  fix:  launch the run (python train.py ...)")
    if not snaps:
        raise SnapshotError(f"clawgym: no clawgym snapshot in {p} (looked for {p / SNAPSHOTS_RELPATH}/*/{META_FILE}); "
                            "it is not a save dir of a clawgym launch, a snapshot dir or a checkpoint dir")
    return snaps[-1], p
