"""After a CUDA OOM: the next layout of the layout search with more memory headroom, if any.

The recovery table restarts an OOM from the last complete checkpoint (a long trajectory may not come
again). Restarting the same layout leaves the same peak, so the next attempt may move to another
layout, under three rules:

1. **Only keys the user did not set.** The user's overrides are the search's constraints
   (:func:`clawgym.search.constraints.constraint_keys`), exactly as ``gpu_layout=auto`` treats them.
2. **Only where the trainer loads the checkpoint.** slime saves Megatron's ``torch_dist`` format; its
   model state loads under another TP/PP, but the distributed optimizer's state raises on a TP/PP change
   unless the checkpoint was saved fully reshardable (``--dist-ckpt-optim-fully-reshardable``; Megatron
   ``checkpointing.py`` L1509-1526 of the fork, shared/reference/run-supervision.md section 2). A change
   of the data-parallel size is plain DP resharding, which it loads. Whether an EP change loads is not
   known, nor is a CP change stated: those stay as they are. So TP, PP, CP, EP and expert-TP are held
   (TP and PP move only when the run passes ``args.dist_ckpt_optim_fully_reshardable=true``). The
   engines' knobs are free: the layout moved to must be whole, and the search may change the engine
   side with it (the engines load no checkpoint: their weights come from the actor).
3. **Headroom beyond the memory plan's error.** The run's planned actor peak already proved too low.
   A move counts only when the candidate's planned actor peak is below the current one by more than
   the plan's measured error (it reads 0.87 to 0.98 of real peaks: :data:`MEMORY_PLAN_LOW_RATIO`),
   and it is outside the search's memory margin.

Among those, the search's own order decides (fastest within its stated error first). A second OOM at
the same iteration stops the run (the recovery guard) with the memory plan's advice
(:func:`advice_after_oom`): the knobs that plan the actor's peak below it by more than the plan's error,
each said with whether ``clawgym resume`` loads the checkpoint under it.
Pure: the same config, overrides and GPU give the same answer.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, List, Mapping, Optional, Sequence

from clawgym.search.advice import lower_actor_peak
from clawgym.search.constraints import constraint_keys
from clawgym.search.layout import MEMORY_PLAN_LOW_RATIO, actor_peak_gib, search, usable_gib

#: Keys that shape the checkpoint's shards (held unless it is fully reshardable, rule 2).
SHAPE_KEYS = ("perf.tensor_parallel", "perf.pipeline_parallel", "perf.context_parallel", "perf.expert_parallel",
              "perf.expert_tensor_parallel")
#: What a fully reshardable checkpoint frees (TP and PP; EP/CP stay: not known to load).
RESHARDABLE_KEYS = ("perf.tensor_parallel", "perf.pipeline_parallel")


@dataclass(frozen=True)
class OomMove:
    """The next attempt's layout, or why there is none (``overrides`` empty)."""

    overrides: List[str] = field(default_factory=list)
    why: str = ""
    before_gib: Optional[float] = None  # planned actor peak per GPU, now
    after_gib: Optional[float] = None  # and with the move


def fully_reshardable(c: Mapping[str, Any]) -> bool:
    args = c.get("args") or {}
    return bool(args.get("dist_ckpt_optim_fully_reshardable"))


def after_oom(c: Mapping[str, Any], user_overrides: Sequence[str], *, gpu: Optional[str] = None) -> OomMove:
    """The move for the run of resolved plain config ``c`` launched with ``user_overrides``, on ``gpu``
    (``memory.gpu`` or the launch's GPU); an :class:`OomMove` without overrides says why none."""
    g = c.get("gpu_layout") or {}
    gpus = int(g.get("num_gpus") or 0) * int(g.get("num_nodes") or 1)
    if gpus <= 0:
        return OomMove(why="the run's GPU count is not known: no layout to move to")
    held = [k for k in SHAPE_KEYS if not (fully_reshardable(c) and k in RESHARDABLE_KEYS)]
    constraints = sorted(set(constraint_keys(user_overrides)) | set(held) | {"gpu_layout.num_gpus"})
    try:
        before = actor_peak_gib(c, gpu)
        need = before * MEMORY_PLAN_LOW_RATIO
        # The search holds the actor side to a share of the GPU: here, to below `need` (the fastest
        # layouts it keeps otherwise plan the same peak as today's).
        ratio = min(MEMORY_PLAN_LOW_RATIO, need / usable_gib(c, gpu))
        r = search(c, gpus=gpus, gpus_per_node=int(g.get("num_gpus") or gpus), gpu=gpu, constraints=constraints,
                   top=8, user_overrides=list(user_overrides), explain=False, actor_ratio=ratio)
    except (ValueError, KeyError) as exc:
        return OomMove(why=f"the layout search cannot run on this config ({exc})")
    for lay in r.layouts:
        if lay.in_margin or not lay.overrides or lay.actor_peak_gib >= need:
            continue
        # The search's line repeats the user's own overrides: the move is what it adds.
        mine = set(user_overrides) | set(constraint_keys(user_overrides))
        move = [o for o in lay.overrides if o not in mine and o.split("=", 1)[0].lstrip("+~") not in mine]
        if not move:
            continue
        return OomMove(overrides=move, before_gib=before, after_gib=lay.actor_peak_gib,
                       why=(f"planned actor peak {before:.1f} -> {lay.actor_peak_gib:.1f} GiB per GPU "
                            f"(held: {', '.join(constraints)})"))
    return OomMove(before_gib=before,
                   why=(f"no layout keeps the checkpoint loadable and plans the actor's peak below "
                        f"{need:.1f} GiB ({MEMORY_PLAN_LOW_RATIO:g} x today's {before:.1f} GiB, the memory plan's "
                        f"error) with {', '.join(constraints)} held"))


def advice_after_oom(c: Mapping[str, Any], save_dir: str, *, gpu: Optional[str] = None, limit: int = 3) -> List[str]:
    """The memory plan's advice for a run that went out of memory although its plan fit: lines, each a
    move whose planned actor peak is below today's by more than the plan's error, and how to apply it
    (``clawgym resume`` where the checkpoint loads under it, a new run where it changes the shards)."""
    try:
        before = actor_peak_gib(c, gpu)
        need = before * MEMORY_PLAN_LOW_RATIO
        moves = lower_actor_peak(c, gpu, need)
    except (ValueError, KeyError) as exc:
        return [f"the memory plan cannot advise on this config ({exc})"]
    if not moves:
        return [f"no single knob plans the actor's peak below {need:.1f} GiB per GPU ({MEMORY_PLAN_LOW_RATIO:g} x "
                f"today's {before:.1f} GiB, the memory plan's error): use more GPUs, or a GPU with more memory"]
    held = [k for k in SHAPE_KEYS if not (fully_reshardable(c) and k in RESHARDABLE_KEYS)]
    out = []
    for overrides, b, a in moves[:limit]:
        keys = [o.split("=", 1)[0] for o in overrides]
        shards = [k for k in keys if k in held]
        how = (f"a new run: it changes {', '.join(shards)}, which this checkpoint does not load under" if shards
               else f"clawgym resume {save_dir} {' '.join(overrides)}")
        out.append(f"{' '.join(overrides)}: planned actor peak {b:.1f} -> {a:.1f} GiB per GPU; {how}")
    return out
