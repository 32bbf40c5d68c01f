"""A run's scalars, read with TensorBoard's own ``EventAccumulator``.

slime logs each metric dict with its step key removed and used as the event's step
(slime/utils/logging_utils.py:log): ``rollout/*`` and ``perf/*`` at the rollout step,
``train/*`` at the train step, ``eval/*`` at the eval step. Two processes write into one
folder (the rollout manager and the actor's first rank), each its own file.

``purge_orphaned_data`` is off: TensorBoard drops values it takes for a restarted run when a
step goes backwards *within one file*, but slime's actor logs ``train/step`` (which runs ahead
with several steps per rollout) and ``rollout/step`` metrics into the same file. A resumed run
gets a new folder per launch, and a later launch's value wins its step here.
A truncated last record (a writer killed mid-write, or a file still being written) is where
TensorBoard's reader stops: the values before it are read.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Dict, List, NamedTuple, Optional, Sequence


class Point(NamedTuple):
    step: int
    value: float
    wall_time: float


def read_scalars(folder: Path) -> Dict[str, List[Point]]:
    """tag -> points of one events folder, by step (the last value logged at a step wins)."""
    from tensorboard.backend.event_processing.event_accumulator import SCALARS, EventAccumulator

    # Without TensorFlow, tensorboard says so on its logger at each load; the stub it uses is enough.
    logging.getLogger("tensorboard").setLevel(logging.ERROR)
    acc = EventAccumulator(str(folder), size_guidance={SCALARS: 0}, purge_orphaned_data=False)
    try:
        acc.Reload()
    except Exception:  # noqa: BLE001 - an unreadable folder is a run without events, not a crash
        return {}
    out: Dict[str, List[Point]] = {}
    for tag in acc.Tags().get("scalars", []):
        by_step: Dict[int, Point] = {}
        for e in acc.Scalars(tag):
            by_step[int(e.step)] = Point(int(e.step), float(e.value), float(e.wall_time))
        out[tag] = [by_step[s] for s in sorted(by_step)]
    return out


def read_run_scalars(folders: Sequence[Path]) -> Dict[str, List[Point]]:
    """Scalars of every launch of a run, oldest launch first; a later launch wins a step."""
    merged: Dict[str, Dict[int, Point]] = {}
    for folder in folders:
        for tag, points in read_scalars(folder).items():
            slot = merged.setdefault(tag, {})
            for p in points:
                slot[p.step] = p
    return {tag: [slot[s] for s in sorted(slot)] for tag, slot in merged.items()}


def eval_sets(tags: Sequence[str]) -> List[str]:
    """The eval sets' reward tags: ``eval/<set>`` (slime's per-set mean reward), not their
    ``eval/<set>-<stat>`` or ``eval/<set>/<metric>`` companions."""
    direct = [t for t in tags if t.startswith("eval/") and t.count("/") == 1]
    return sorted(t for t in direct if not any(t.startswith(o + "-") for o in direct if o != t))


def latest(points: Optional[List[Point]]) -> Optional[Point]:
    return points[-1] if points else None


def mean_last(points: Optional[List[Point]], n: int) -> Optional[float]:
    if not points:
        return None
    tail = points[-n:] if n > 0 else points
    return sum(p.value for p in tail) / len(tail)


def best(points: Optional[List[Point]]) -> Optional[Point]:
    return max(points, key=lambda p: p.value) if points else None
