"""The monitors a run's supervisor polls (hangs, health rules, retention, disk): see monitor.py."""

from __future__ import annotations

from typing import Any, List, Mapping

from clawgym.supervisor.monitor import Monitor


def monitors_for(config: Mapping[str, Any]) -> List[Monitor]:
    """The monitors for a run of this resolved plain config (none yet)."""
    return []
