"""``gpu_layout=auto``: the layout search for the config's GPUs, its best layout applied, the choice recorded."""

from __future__ import annotations

import copy
import json
from typing import Any, Dict, Mapping, Optional, Sequence, Tuple

from clawgym.memory import gpus as G
from clawgym.search.constraints import constraint_keys
from clawgym.search.layout import MEMORY_PLAN_LOW_RATIO, STEP_TIME_ERROR, search

#: What ``gpu_layout=auto`` adds to the gpu_layout group (the search's inputs, not a layout).
AUTO_KEYS = ("gpu_layout.auto", "gpu_layout.num_nodes")


_AUTO_CACHE: Dict[str, Tuple[Dict[str, Any], Dict[str, Any]]] = {}


class NoLayout(Exception):
    """``gpu_layout=auto`` found no layout; ``str()`` says why and what lifts it."""


def is_auto(c: Mapping[str, Any]) -> bool:
    return bool((c.get("gpu_layout") or {}).get("auto"))


def resolve_auto(plain: Dict[str, Any], overrides: Sequence[str] = (), *,
                 gpu: Any = None) -> Tuple[Dict[str, Any], Optional[Dict[str, Any]]]:
    """``gpu_layout=auto``: (the config with the best layout applied, the record of the choice for the
    launch plan); the config unchanged and None without ``gpu_layout.auto``. ``overrides``: the user's
    (their keys are constraints); ``gpu``: this node's GPU (``clawgym.memory.this_node_gpu``) when
    ``memory.gpu`` is null. Raises :class:`NoLayout` when nothing fits."""
    if not is_auto(plain):
        return plain, None
    g = plain["gpu_layout"]
    gpu_name = (plain.get("memory") or {}).get("gpu")
    if gpu_name is None and isinstance(gpu, Mapping):
        gpu_name = gpu.get("gpu")
    elif gpu_name is None and isinstance(gpu, str):
        gpu_name = gpu
    if gpu_name not in G.GPUS:
        gpu_name = G.DEFAULT_GPU
    # A null count is the group's default (8 per node, 1 node); 0 or less is no GPU to search, said, not
    # silently replaced.
    per_node = 8 if g.get("num_gpus") is None else g.get("num_gpus")
    nodes = 1 if g.get("num_nodes") is None else g.get("num_nodes")
    bad = [f"gpu_layout.{k}={v}: gpu_layout=auto searches a positive whole number of them (set gpu_layout.{k}={d})"
           for k, v, d in (("num_gpus", per_node, 8), ("num_nodes", nodes, 1)) if not isinstance(v, int) or v < 1]
    if bad:
        raise NoLayout("gpu_layout=auto cannot search: " + "; ".join(bad))
    total = int(per_node) * int(nodes)
    constraints = [k for k in constraint_keys(overrides) if k not in ("gpu_layout.num_gpus", *AUTO_KEYS)]
    key = json.dumps([plain, constraints, gpu_name], sort_keys=True, default=str)
    if key in _AUTO_CACHE:
        out, rec = _AUTO_CACHE[key]
        return copy.deepcopy(out), copy.deepcopy(rec)
    try:
        r = search(plain, gpus=total, gpus_per_node=per_node, gpu=gpu_name, constraints=constraints, top=4)
    except ValueError as exc:
        raise NoLayout(f"gpu_layout=auto cannot search {total} x {gpu_name}: {exc}") from None
    if r.layouts and r.layouts[0].in_margin:
        # Never a pick inside the memory plan's measured margin (clawgym.search.layout.MEMORY_PLAN_LOW_RATIO).
        x = r.layouts[0]
        raise NoLayout(f"gpu_layout=auto found no layout for {total} x {gpu_name} outside the memory margin: the "
                       f"best plans an actor peak of {x.actor_peak_gib:.1f} GiB of {x.gpu_memory_gib:.1f}, above "
                       f"{MEMORY_PLAN_LOW_RATIO:.2f}x of the GPU (the plan measured as low as that share of real "
                       f"peaks); more GPUs or a bigger GPU keep it, or give that layout yourself: "
                       f"{' '.join(x.overrides)}")
    if not r.layouts:
        raise NoLayout(f"gpu_layout=auto found no layout for {total} x {gpu_name}: {r.binding}"
                       + "".join(f"\n  lifts it: {x}" for x in r.lifts)
                       + "".join(f"\n  refused {x['count']} by {x['rule']}: {x['example']}" for x in r.refused[:6]))
    best = r.layouts[0]
    out = copy.deepcopy(plain)
    for k, v in best.settings.items():
        group, _, leaf = k.partition(".")
        if group == "args" and v is None:
            out.setdefault("args", {}).pop(leaf, None)
        else:
            out.setdefault(group, {})[leaf] = v
    out["gpu_layout"]["trainer_script"] = "train.py" if out["gpu_layout"]["colocate"] else "train_async.py"
    # Resolved: the config now names its layout (the record says it was chosen).
    out["gpu_layout"]["auto"] = False
    if (plain.get("ray") or {}).get("num_gpus") == g.get("num_gpus"):
        out["ray"]["num_gpus"] = out["gpu_layout"]["num_gpus"]
    rec = {"auto": True, "gpu": gpu_name, "settings": dict(best.settings), "gpus": total, "gpus_per_node": per_node,
           "chosen": best.overrides, "step_s": best.step_s, "gpu_peak_gib": best.gpu_peak_gib,
           "actor_peak_gib": best.actor_peak_gib, "gpu_memory_gib": best.gpu_memory_gib, "rank": best.rank,
           "tied": sum(1 for x in r.layouts if x.rank == best.rank) > 1,
           "runners_up": [{"overrides": x.overrides, "step_s": x.step_s, "gpu_peak_gib": x.gpu_peak_gib, "rank": x.rank,
                           "in_margin": x.in_margin} for x in r.layouts[1:]]}
    _AUTO_CACHE.clear()
    _AUTO_CACHE[key] = (copy.deepcopy(out), copy.deepcopy(rec))
    return out, rec


def format_choice(rec: Mapping[str, Any]) -> str:
    """The dry run's and ``clawgym show``'s lines for a ``gpu_layout=auto`` choice."""
    lines = [f"layout (gpu_layout=auto, {rec['gpus']} x {rec['gpu']}): {' '.join(rec['chosen'])}",
             f"  estimated step {rec['step_s']:.1f} s, GPU peak {rec['gpu_peak_gib']:.1f} GiB"
             + (f" (tied with the runners-up of rank {rec['rank']}: steps within {round(STEP_TIME_ERROR * 100)}%, "
                f"the step-time model's error; chosen for its headroom, then the shortest line)"
                if rec.get("tied") else "")]
    for x in rec.get("runners_up") or []:
        what = "tie" if x.get("rank") == rec.get("rank") else f"rank {x.get('rank')}"
        what += ", inside the memory margin" if x.get("in_margin") else ""
        lines.append(f"  runner-up ({what}; {x['step_s']:.1f} s, {x['gpu_peak_gib']:.1f} GiB): {' '.join(x['overrides'])}")
    return "\n".join(lines)
