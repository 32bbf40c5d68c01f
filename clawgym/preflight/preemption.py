"""Preflight check ``preemption`` (a warning, never a refusal): how much GPU time one preemption or
time limit of a SLURM run throws away, from ``checkpoint.save_interval`` and the step-time model.

A SLURM allocation can end at any step: its time limit (the supervisor requeues the job at
``slurm.signal_delay_s`` before it), a preemption, a lost node. slime saves nothing on a signal
(run-supervision.md section 3: it never installs Megatron's exit-signal handler), so the next
allocation resumes from the last periodic save and redoes every rollout since: at worst
``save_interval`` steps of the whole allocation's GPUs.

The bound warned about, whichever is smaller:

- :data:`MAX_LOST_FRACTION` (10 %) of ``slurm.time``, when set: a run that lives by requeueing at its
  time limit redoes up to this share of every allocation, so a tenth of the GPU time goes to work
  done twice at the most;
- :data:`MAX_LOST_S` (1 hour of the whole allocation, i.e. an hour times its GPUs of GPU time): a
  restart already costs the queue wait, the Ray start and the model load (minutes of the whole
  allocation); beyond an hour the save cadence, not the scheduler, becomes the larger cost of every
  preemption. (A bound per GPU-hour would warn on every run: one modelled step of an 8-GPU run is
  already more than a GPU-hour, and no save_interval is below one step.)

The step time is :func:`clawgym.steptime.step_time` (an upper bound: every sample priced at full
length), so the warning errs on the side of saving more often; the fix names the largest
``save_interval`` under the bound (each save itself costs time: not smaller than needed).
"""

from __future__ import annotations

import math
import re
from typing import Any, Mapping, Optional

from clawgym.preflight.core import CheckWarning, Context, NotApplicable

#: The share of a time-limited allocation a run may redo after each end (see the module doc).
MAX_LOST_FRACTION = 0.10
#: Seconds of the whole allocation a run may redo after a preemption (see the module doc).
MAX_LOST_S = 3600.0


def slurm_seconds(text: Any) -> Optional[int]:
    """sbatch's ``--time`` in seconds (sbatch(1): "minutes", "minutes:seconds", "hours:minutes:seconds",
    "days-hours", "days-hours:minutes" and "days-hours:minutes:seconds"); None when unset or unlimited."""
    if text in (None, "") or str(text).strip().upper() in ("UNLIMITED", "INFINITE"):
        return None
    t = str(text).strip()
    m = re.fullmatch(r"(\d+)-(\d+)(?::(\d+))?(?::(\d+))?", t)
    if m:
        d, h, mi, s = (int(x) if x else 0 for x in m.groups())
        return ((d * 24 + h) * 60 + mi) * 60 + s
    parts = t.split(":")
    if not all(p.isdigit() for p in parts) or not 1 <= len(parts) <= 3:
        return None
    n = [int(p) for p in parts]
    if len(n) == 1:
        return n[0] * 60
    if len(n) == 2:
        return n[0] * 60 + n[1]
    return (n[0] * 60 + n[1]) * 60 + n[2]


def _duration(s: float) -> str:
    if s >= 3600:
        return f"{s / 3600:.1f} h"
    if s >= 60:
        return f"{s / 60:.0f} min"
    return f"{s:.0f} s"


def lost_work(c: Mapping[str, Any], step_s: float, gpus: int) -> dict:
    """What one preemption loses at worst and the bound, as numbers (pure; the check words them)."""
    interval = (c.get("checkpoint") or {}).get("save_interval")
    num_rollout = (c.get("rollout") or {}).get("num_rollout")
    steps = int(interval) if interval else int(num_rollout or 1)
    lost_s = steps * step_s
    limit_s = slurm_seconds((c.get("slurm") or {}).get("time"))
    bounds = [MAX_LOST_S]
    if limit_s:
        bounds.append(MAX_LOST_FRACTION * limit_s)
    bound_s = min(bounds)
    best = max(1, int(math.floor(bound_s / step_s))) if step_s > 0 else steps
    return {"interval": interval, "steps": steps, "step_s": step_s, "lost_s": lost_s,
            "lost_gpu_h": lost_s * gpus / 3600.0, "gpus": gpus, "limit_s": limit_s, "bound_s": bound_s,
            "over": lost_s > bound_s, "suggested": best}


def check_preemption(ctx: Context) -> str:
    c = ctx.c
    if (c.get("cluster") or {}).get("backend") != "slurm":
        raise NotApplicable("only a SLURM allocation is preempted or ends at a time limit here")
    from clawgym.plan.allocation import allocation
    from clawgym.steptime import step_time
    from clawgym.trainer.effective import effective_config

    alloc = allocation(c)
    gpus = alloc.nodes * alloc.gpus_per_node
    memory = getattr(ctx.plan, "memory", None)
    st = step_time(effective_config(c), memory=memory)
    w = lost_work(c, float(st.step_s), gpus)
    what = (f"checkpoint.save_interval={w['interval']}" if w["interval"] else
            f"checkpoint.save_interval=null (no save before the end: {w['steps']} rollouts)")
    detail = (f"{what} x ~{_duration(w['step_s'])} per step (step-time model) = up to {_duration(w['lost_s'])} "
              f"of {w['gpus']} GPUs ({w['lost_gpu_h']:.1f} GPU-h) redone after a preemption or time limit")
    if not w["over"]:
        return detail
    why = (f"more than {_duration(MAX_LOST_S)} of the allocation" if w["limit_s"] is None or
           w["bound_s"] < MAX_LOST_FRACTION * w["limit_s"] else
           f"more than {MAX_LOST_FRACTION:.0%} of slurm.time={c['slurm']['time']}")
    fix = (f"checkpoint.save_interval={w['suggested']} (at most {_duration(w['suggested'] * w['step_s'])} redone); "
           "each save costs time too, so not lower than that")
    if w["suggested"] * w["step_s"] > w["bound_s"]:
        fix = (f"checkpoint.save_interval=1 still redoes {_duration(w['step_s'])} per preemption: a longer "
               "slurm.time, or a layout with a shorter step (clawgym layout)")
    raise CheckWarning(f"{detail}: {why}", fix)
