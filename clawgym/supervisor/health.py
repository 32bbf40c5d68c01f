"""The monitors a run's supervisor polls (hangs, health rules, retention, disk): see monitor.py."""

from __future__ import annotations

from typing import Any, List, Mapping

from clawgym.supervisor.monitor import Monitor


def monitors_for(config: Mapping[str, Any]) -> List[Monitor]:
    """The monitors for a run of this resolved plain config: retention first (a prune frees room
    the disk guard then sees), then the disk guard, the hang monitor and the health rules."""
    from clawgym.supervisor.disk import DiskGuard
    from clawgym.supervisor.hang import hang_monitor
    from clawgym.supervisor.retention import RetentionMonitor
    from clawgym.supervisor.rules import HealthRules

    health = config.get("health") or {}
    out: List[Monitor] = []
    ck = config.get("checkpoint") or {}
    if ck.get("keep_last") is not None or ck.get("keep_every") is not None:
        out.append(RetentionMonitor(config))
    if health.get("disk_guard", True):
        out.append(DiskGuard(config))
    out.append(hang_monitor(config))
    out.append(HealthRules(config))
    return out
