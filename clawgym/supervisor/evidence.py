"""The run's evidence a poll reads, read once per poll and shared by the monitors."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Dict, Mapping, Tuple

from clawgym.supervisor.monitor import RunState

_cache: Dict[Tuple[str, float], Any] = {}


def run_scalars(state: RunState) -> Mapping[str, list]:
    """The attempt's scalars, read once per poll (every rule and the hang monitor share them)."""
    from clawgym.runs.events import read_scalars

    folder = Path(state.save_dir) / "tensorboard" / state.submission_id
    key = (str(folder), state.now)
    if key not in _cache:
        _cache.clear()
        _cache[key] = read_scalars(folder) if folder.is_dir() else {}
    return _cache[key]
