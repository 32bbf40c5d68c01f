"""Preflight check ``disk``: the save dir's filesystem can hold ``checkpoint.keep_last`` + 1 checkpoints
(one, the next save, when every checkpoint is kept).

A save that fills the filesystem fails part-way and leaves an ``iter_*`` that is not loadable
(and a full disk makes the rest of a run fail oddly: trajectoryRL PR #203 scored every sample 0).
One checkpoint's size comes from the memory plan: every parameter once in bf16 (2 bytes) plus the
distributed optimizer's state (the plan's ``optimizer_bytes_per_param``: fp32 main params and
Adam's two moments, narrower with the precision-aware optimizer), summed over the ranks of the
chosen layout. The same numbers drive the supervisor's disk guard while the run is alive.
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping, Optional, Tuple

from clawgym.preflight.core import CheckFailed, Context, NotApplicable

#: bf16 weights: 2 bytes per parameter (the memory plan's weights term, clawgym/memory/actor.py).
WEIGHT_BYTES = 2


@dataclass(frozen=True)
class CheckpointSize:
    bytes: int
    how: str  # how it was found, shown with it


def gib(n: float) -> str:
    if n >= 1 << 30:
        return f"{n / (1 << 30):.1f} GiB"
    return f"{n / (1 << 20):.1f} MiB"


def planned_size(config: Mapping[str, Any], plan: Optional[Mapping[str, Any]] = None) -> CheckpointSize:
    """One checkpoint's bytes from the memory plan (``plan``: ``MemoryPlan.to_dict()``, made here if None)."""
    if plan is None:
        from clawgym.memory import memory_plan

        plan = memory_plan(config).to_dict()
    actor = plan["actor"]
    params = int(actor["params_total"])
    per_param = float(actor["terms"]["optimizer_bytes_per_param"])
    size = int(params * (WEIGHT_BYTES + per_param))
    return CheckpointSize(size, f"{params:,} parameters x ({WEIGHT_BYTES} bytes bf16 weights + {per_param:g} "
                                f"bytes optimizer state) = {gib(size)}")


def free_bytes(path: Path) -> Tuple[Path, int]:
    """(the folder measured: the save dir or its nearest existing parent, its filesystem's free bytes)."""
    p = Path(path)
    while not p.exists() and p != p.parent:
        p = p.parent
    return p, shutil.disk_usage(p).free


def needed(config: Mapping[str, Any]) -> int:
    """Checkpoints the save dir must hold at once: keep_last + 1 (the next save lands before the
    oldest kept one is pruned). With every checkpoint kept (keep_last null) no number is enough:
    room for the first save is checked, and the live guard stops the run before a later one fails."""
    keep = (config.get("checkpoint") or {}).get("keep_last")
    return int(keep) + 1 if keep is not None else 1


def check_disk(ctx: Context) -> str:
    c = ctx.c
    if (c.get("checkpoint") or {}).get("save_interval") is None or not (c.get("paths") or {}).get("save"):
        raise NotApplicable("no checkpoints are saved (checkpoint.save_interval null)")
    if not (c.get("health") or {}).get("disk_guard", True):
        raise NotApplicable("health.disk_guard=false")
    size = planned_size(c, getattr(ctx.plan, "memory", None))
    n = needed(c)
    where, free = free_bytes(Path(c["paths"]["save"]))
    want = n * size.bytes
    keep = (c.get("checkpoint") or {}).get("keep_last")
    room = (f"checkpoint.keep_last={keep} + 1" if keep is not None else
            "checkpoint.keep_last=null keeps every one: room for the next is checked, set it to check room for all")
    detail = f"{where} has {gib(free)} free for {n} checkpoint(s) of {gib(size.bytes)} ({size.how}; {room})"
    if free >= want:
        return detail
    fits = free // size.bytes - 1 if size.bytes else 0
    fix = (f"checkpoint.keep_last={int(fits)}" if fits >= 1 else
           f"a paths.save on a filesystem with at least {gib(want)} free")
    raise CheckFailed(f"{where} has {gib(free)} free, {n} checkpoint(s) of {gib(size.bytes)} need {gib(want)} "
                      f"({size.how})", f"{fix} (or free space; skip_checks=[disk] to launch anyway)")
