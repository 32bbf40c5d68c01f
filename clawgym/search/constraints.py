"""Constraints from overrides: the config keys a user's Hydra overrides set (kept by the search)."""

from __future__ import annotations

from typing import List, Sequence


def constraint_keys(overrides: Sequence[str]) -> List[str]:
    """The config keys a list of Hydra overrides sets (a gpu_layout option sets its group's counts)."""
    out = []
    for o in overrides:
        key = o.split("=", 1)[0].lstrip("+~")
        if key.startswith("hydra.") or "=" not in o and not o.startswith("~"):
            continue
        if key == "gpu_layout":
            if o.split("=", 1)[1].strip() != "auto":
                out += ["gpu_layout.colocate", "gpu_layout.actor_gpus", "gpu_layout.rollout_gpus",
                        "gpu_layout.num_gpus"]
            continue
        out.append(key)
    return out
