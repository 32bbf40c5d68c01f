"""Find runs: save dirs with clawgym snapshots, under the paths given."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, Iterable, List, Optional, Sequence

from clawgym.plan.build import TENSORBOARD_DIR_ENV, TENSORBOARD_RELPATH
from clawgym.snapshot.layout import SNAPSHOTS_RELPATH, SnapshotError
from clawgym.snapshot.marks import is_submitted
from clawgym.snapshot.read import Snapshot, load_snapshot, snapshot_dirs

#: How deep below a given path save dirs are looked for (``<root>/exp/<run>`` is 2 below a checkout).
MAX_DEPTH = 4
#: Folders never searched for save dirs: checkpoints, events, logs, clawgym's own records.
_SKIP_PREFIXES = ("iter_", ".")
_SKIP_NAMES = {"tensorboard", "logs", "clawgym", "node_modules", "__pycache__", "openclaw_logs", "rollout"}


class RunsError(Exception):
    """Bad input to ``clawgym runs`` / ``report`` (a path that does not exist); ``str()`` says what to do."""


@dataclass
class Run:
    """One save dir and every launch recorded in it."""

    save_dir: Path
    # Submitted launches (snapshots), oldest first; may be empty when all are damaged.
    snapshots: List[Snapshot] = field(default_factory=list)
    # What could not be read (a damaged snapshot), for the table's notes.
    problems: List[str] = field(default_factory=list)
    # Filled by clawgym.runs.status / events on demand.
    status: Optional[str] = None
    status_detail: str = ""
    job: Dict[str, Any] = field(default_factory=dict)
    _scalars: Optional[Dict[str, List[Any]]] = field(default=None, repr=False)
    _by_submission: Dict[str, Dict[str, List[Any]]] = field(default_factory=dict, repr=False)

    @property
    def latest(self) -> Optional[Snapshot]:
        return self.snapshots[-1] if self.snapshots else None

    @property
    def config(self) -> Dict[str, Any]:
        return self.latest.config if self.latest else {}

    @property
    def name(self) -> str:
        if self.latest is not None:
            return str(self.latest.meta.get("run_name") or self.config.get("run_name") or self.save_dir.name)
        return self.save_dir.name

    @property
    def submission_id(self) -> Optional[str]:
        if self.latest is None:
            return None
        submitted = self.latest.path / "submitted.json"
        try:
            import json

            return str(json.loads(submitted.read_text())["submission_id"])
        except (OSError, ValueError, KeyError, TypeError):
            return self.latest.meta.get("submission_id") or self.latest.plan.get("submission_id")

    def events_dirs(self) -> List[Path]:
        """Event folders of this save dir, oldest launch first: one per launch under
        ``<save>/tensorboard/``, plus any ``TENSORBOARD_DIR`` a launch's plan named elsewhere."""
        found: List[Path] = []
        for snap in self.snapshots:
            env = (snap.plan.get("runtime_env") or {}).get("env_vars") or {}
            if not env.get(TENSORBOARD_DIR_ENV):
                continue
            folder, saved_at = Path(env[TENSORBOARD_DIR_ENV]), snap.plan.get("save_dir")
            # Inside the save dir as it was at launch: the same place in the save dir as it is now
            # (a save dir copied off the cluster reads its own events, not the original's).
            if saved_at and folder.is_relative_to(Path(saved_at)):
                folder = self.save_dir / folder.relative_to(Path(saved_at))
            found.append(folder)
        base = self.save_dir / TENSORBOARD_RELPATH
        try:
            others = sorted((p for p in base.iterdir() if p.is_dir()), key=lambda p: p.stat().st_mtime)
        except OSError:
            others = []
        for p in others:
            if p not in found:
                found.append(p)
        return [p for p in found if p.is_dir()]

    def scalars_of(self, submission_id: Optional[str]) -> Dict[str, List[Any]]:
        """One launch's (or attempt's) own scalars, ``<save>/tensorboard/<submission id>/``, cached;
        {} when it has no events folder."""
        if not submission_id:
            return {}
        if submission_id not in self._by_submission:
            from clawgym.runs.events import read_scalars

            folder = self.save_dir / TENSORBOARD_RELPATH / submission_id
            self._by_submission[submission_id] = read_scalars(folder) if folder.is_dir() else {}
        return self._by_submission[submission_id]

    def scalars(self) -> Dict[str, List[Any]]:
        """tag -> [(step, value, wall_time)] over every launch (a later launch wins a step), cached."""
        if self._scalars is None:
            from clawgym.runs.events import read_run_scalars

            self._scalars = read_run_scalars(self.events_dirs())
        return self._scalars


def default_paths() -> List[Path]:
    """Where ``clawgym runs`` looks without arguments: this checkout's save dirs and the current directory.

    The checkout is ``$CLAWGYM_RL_ROOT`` else the current directory, as ``paths.root``'s default;
    its save dirs are ``<root>/exp/<run name>`` (``paths.save``'s default)."""
    cwd = Path.cwd()
    root = Path(os.environ.get("CLAWGYM_RL_ROOT") or cwd)
    out = []
    for p in (root / "exp", cwd):
        if p.is_dir() and p not in out:
            out.append(p)
    return out


def is_save_dir(path: Path) -> bool:
    return (path / SNAPSHOTS_RELPATH).is_dir()


def _walk(path: Path, depth: int) -> Iterable[Path]:
    if is_save_dir(path):
        yield path
        return
    if depth >= MAX_DEPTH:
        return
    try:
        children = sorted(p for p in path.iterdir() if p.is_dir() and not p.is_symlink())
    except OSError:
        return
    for child in children:
        if child.name.startswith(_SKIP_PREFIXES) or child.name in _SKIP_NAMES:
            continue
        yield from _walk(child, depth + 1)


def load_run(save_dir: Path) -> Run:
    """A save dir's submitted launches; a damaged snapshot is noted, never raised."""
    run = Run(save_dir=save_dir)
    for p in snapshot_dirs(save_dir):
        if not is_submitted(p):
            continue
        try:
            run.snapshots.append(load_snapshot(p))
        except SnapshotError as exc:
            run.problems.append(str(exc).splitlines()[0].replace("clawgym: ", ""))
    run.snapshots.sort(key=lambda s: (s.created, s.id))
    return run


def find_runs(paths: Sequence[str | os.PathLike] = ()) -> List[Run]:
    """Every run under ``paths`` (default: :func:`default_paths`), by save dir.

    Raises :class:`RunsError` for a path that does not exist. Save dirs that hold only
    snapshots of launches stopped before submitting are not runs."""
    given = [Path(p).expanduser() for p in paths] or default_paths()
    missing = [str(p) for p in given if not p.exists()]
    if missing:
        raise RunsError(f"no such path: {', '.join(missing)}\n  fix: give save dirs (paths.save of a launch) "
                        "or folders above them, e.g. <paths.root>/exp")
    seen: Dict[Path, Run] = {}
    for p in given:
        for save in _walk(p.resolve(), 0):
            if save not in seen:
                run = load_run(save)
                if run.snapshots or run.problems:
                    seen[save] = run
    return list(seen.values())
