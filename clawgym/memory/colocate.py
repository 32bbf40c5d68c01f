"""GPU peaks per phase: split layouts give the actor and SGLang their own GPUs; colocated
layouts run the phases in turn on the same GPUs, swapped by slime's offload, so the peak is
the largest phase plus what the offloaded side leaves resident (not the sum).

slime (``slime/utils/arguments.py::slime_validate_args``) turns ``offload_train`` and
``offload_rollout`` on under ``--colocate`` unless the user passed ``--no-offload-train`` /
``--no-offload-rollout``; the effective values are read the same way here.
"""

from __future__ import annotations

from typing import Any, Dict, Mapping, Optional

from clawgym.memory.rollout import SGLANG_OFFLOADED_RESIDUE_GIB


def trainer_flag(c: Mapping[str, Any], dest: str) -> Optional[bool]:
    args = c.get("args") or {}
    if dest in args and args[dest] is not None:
        return bool(args[dest])
    # args.no_<dest>=true names the negative option (clawgym.trainer.args.negated).
    if f"no_{dest}" in args and args[f"no_{dest}"] is not None:
        return not bool(args[f"no_{dest}"])
    flag = "--" + dest.replace("_", "-")
    extra = [str(x) for x in c.get("extra_args") or []]
    if flag in extra:
        return True
    if "--no-" + dest.replace("_", "-") in extra:
        return False
    if dest != "offload" and "--offload" in extra:
        return True
    return None


def offloads(c: Mapping[str, Any]) -> Dict[str, bool]:
    """The effective ``offload_train`` / ``offload_rollout`` slime will run with."""
    colocate = bool(c["gpu_layout"]["colocate"])
    out = {}
    for dest in ("offload_train", "offload_rollout"):
        v = trainer_flag(c, dest)
        out[dest] = colocate if v is None else v
    return out


def phase_peaks(c: Mapping[str, Any], actor: Any, rollout: Any, actor_ctx_gib: float) -> Dict[str, Any]:
    """Per-GPU peak of each phase (GiB, with overhead)."""
    actor_peak = max(actor.train_peak_gib, actor.logprob_peak_gib) + actor.overhead_gib
    if not c["gpu_layout"]["colocate"]:
        return {"actor_gpu_peak_gib": round(actor_peak, 3), "rollout_gpu_peak_gib": round(rollout.static_gib, 3),
                "peak_gib": round(max(actor_peak, rollout.static_gib), 3), "phase": "split"}
    off = offloads(c)
    # While SGLang generates, the offloaded actor keeps its CUDA context and NCCL buffers.
    actor_resident = actor_ctx_gib if off["offload_train"] else actor.static_gib + actor.overhead_gib
    rollout_resident = SGLANG_OFFLOADED_RESIDUE_GIB if off["offload_rollout"] else rollout.static_gib
    rollout_phase = rollout.static_gib + actor_resident
    train_phase = actor_peak + rollout_resident
    return {"rollout_phase_gib": round(rollout_phase, 3), "train_phase_gib": round(train_phase, 3),
            "actor_gpu_peak_gib": round(max(rollout_phase, train_phase), 3),
            "rollout_gpu_peak_gib": round(max(rollout_phase, train_phase), 3),
            "peak_gib": round(max(rollout_phase, train_phase), 3),
            "phase": "train" if train_phase >= rollout_phase else "rollout", **off}
