"""Checkpoint retention: keep the last ``checkpoint.keep_last`` complete checkpoints and every
``checkpoint.keep_every``-th, prune the rest, and never lose a checkpoint that may still be loaded.

Megatron writes ``<save>/iter_%07d/`` and then, after every rank finished (a barrier, or the async
save's finalize), overwrites ``latest_checkpointed_iteration.txt`` with the new iteration
(shared/reference/run-supervision.md section 2): an ``iter_*`` at or below the tracker is complete,
one above it is a save not finalized (running, or cut). slime ships no retention (section 6). So:

- only iterations *below* the tracker are pruned; the tracker's own (the newest complete, the one
  a resume loads) is always kept;
- nothing is pruned while a save may be running: an ``iter_*`` newer than the tracker whose files
  changed within ``SAVE_QUIET_S``; an older one (a cut save) is reported, never deleted;
- an iteration another attempt or a resume may still load (``checkpoint.load``'s, ``args.ckpt_step``,
  or one the caller names) is kept; a symlinked ``iter_*`` is left alone (as Megatron's own
  ``--save-retain-interval`` skips them);
- each removal is logged (``<save>/retention.log``, and returned); a directory is first renamed out
  of the ``iter_*`` pattern, so a removal cut half-way never leaves a partial checkpoint that looks
  loadable.
"""

from __future__ import annotations

import os
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, List, Mapping, Optional, Set

from clawgym.snapshot.checkpoints import ITER_RE as _ITER, read_tracker
from clawgym.snapshot.layout import TRACKER_FILE as TRACKER

#: An iter_* newer than the tracker whose files changed this recently is taken for a running save.
SAVE_QUIET_S = 300.0


@dataclass
class Scan:
    tracker: Optional[int]  # None: no tracker (or "release": not a training iteration)
    complete: List[int] = field(default_factory=list)  # at or below the tracker, oldest first
    newer: List[int] = field(default_factory=list)  # above the tracker: not finalized
    links: List[int] = field(default_factory=list)  # symlinked iter_* (left alone)


def scan(save_dir: Path) -> Scan:
    tracker = read_tracker(save_dir)
    out = Scan(tracker=tracker)
    try:
        names = sorted(os.listdir(save_dir))
    except OSError:
        return out
    for name in names:
        m = _ITER.match(name)
        if not m:
            continue
        it = int(m.group(1))
        path = Path(save_dir) / name
        if path.is_symlink():
            out.links.append(it)
        elif not path.is_dir():
            continue
        elif tracker is not None and it <= tracker:
            out.complete.append(it)
        else:
            out.newer.append(it)
    return out


def iter_dir(save_dir: Path, it: int) -> Path:
    return Path(save_dir) / f"iter_{it:07d}"


def _newest_mtime(path: Path) -> float:
    newest = 0.0
    for root, dirs, files in os.walk(path):
        for name in [*dirs, *files]:
            try:
                newest = max(newest, os.lstat(os.path.join(root, name)).st_mtime)
            except OSError:
                continue
    try:
        newest = max(newest, os.lstat(path).st_mtime)
    except OSError:
        pass
    return newest


def keep_set(complete: Iterable[int], tracker: int, keep_last: Optional[int], keep_every: Optional[int],
             protect: Iterable[int] = ()) -> Set[int]:
    """The complete iterations to keep: the newest ``keep_last`` (None: all), every multiple of
    ``keep_every``, the tracker's, and ``protect``."""
    done = sorted(complete)
    keep = set(done if keep_last is None else done[-max(1, int(keep_last)):])
    if keep_every:
        keep |= {i for i in done if i % int(keep_every) == 0}
    return keep | {tracker} | set(protect)


@dataclass
class Pruned:
    removed: List[int] = field(default_factory=list)
    kept: List[int] = field(default_factory=list)
    notes: List[str] = field(default_factory=list)  # what was seen and left alone, and why


def protected(config: Mapping[str, Any], save_dir: Path) -> Set[int]:
    """Iterations the config may still load: ``args.ckpt_step``, and ``checkpoint.load``'s tracker
    when it is this save dir."""
    out: Set[int] = set()
    step = (config.get("args") or {}).get("ckpt_step")
    if step is not None:
        out.add(int(step))
    load = (config.get("checkpoint") or {}).get("load")
    if load:
        m = _ITER.match(Path(load).name)
        if m:
            out.add(int(m.group(1)))
        elif Path(load).resolve() == Path(save_dir).resolve():
            t = read_tracker(Path(load))
            if t is not None:
                out.add(t)
    return out


def prune(save_dir: Path, keep_last: Optional[int], keep_every: Optional[int], *, protect: Iterable[int] = (),
          now: Optional[float] = None) -> Pruned:
    """Prune ``save_dir`` by the rules above; every removal and every refusal is in the result."""
    now = time.time() if now is None else now
    save_dir = Path(save_dir)
    s = scan(save_dir)
    out = Pruned()
    if s.tracker is None:
        out.notes.append(f"no {TRACKER} with an iteration in {save_dir}: nothing is known complete, nothing pruned")
        return out
    for it in s.links:
        out.notes.append(f"{iter_dir(save_dir, it)} is a symlink: left alone")
    for it in s.newer:
        age = now - _newest_mtime(iter_dir(save_dir, it))
        if age < SAVE_QUIET_S:
            out.notes.append(f"{iter_dir(save_dir, it)} is newer than the tracker ({s.tracker}) and changed "
                             f"{age:.0f} s ago: a save is running, nothing pruned")
            out.kept = list(s.complete)
            return out
        out.notes.append(f"{iter_dir(save_dir, it)} is newer than the tracker ({s.tracker}) and unchanged for "
                         f"{age:.0f} s: an incomplete save, not loadable; reported, not deleted")
    keep = keep_set(s.complete, s.tracker, keep_last, keep_every, protect)
    log = save_dir / "retention.log"
    for it in s.complete:
        if it in keep or it >= s.tracker:
            out.kept.append(it)
            continue
        path = iter_dir(save_dir, it)
        # Out of the iter_* pattern first (one rename): a removal cut half-way leaves no partial
        # checkpoint that Megatron or clawgym could take for a loadable one.
        doomed = save_dir / f".pruning-{path.name}"
        try:
            os.rename(path, doomed)
            shutil.rmtree(doomed)
        except OSError as exc:
            out.notes.append(f"{path}: could not be removed ({exc.strerror or exc})")
            continue
        out.removed.append(it)
        with open(log, "a") as fh:
            fh.write(f"{time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime(now))} removed {path.name} "
                     f"(tracker {s.tracker}, keep_last {keep_last}, keep_every {keep_every})\n")
    return out


class RetentionMonitor:
    """Prunes at each poll; never answers a verdict (retention is not a reason to end a run)."""

    name = "retention"

    def __init__(self, config: Mapping[str, Any], *, protect: Iterable[int] = ()) -> None:
        ck = config.get("checkpoint") or {}
        self.keep_last, self.keep_every = ck.get("keep_last"), ck.get("keep_every")
        self.config = config
        self.protect = set(protect)
        self.last: Optional[Pruned] = None

    def poll(self, state: Any) -> None:
        self.last = prune(Path(state.save_dir), self.keep_last, self.keep_every,
                          protect=self.protect | protected(self.config, Path(state.save_dir)), now=state.now)
        return None
