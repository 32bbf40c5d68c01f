"""Memory settings: the GPU the memory plan targets, and colocation's offload.

Whether a run fits is the preflight's ``memory`` check (it needs the GPU of the node); what is
wrong with the config alone is here.
"""

from __future__ import annotations

from clawgym.validate.core import Collector


def rule_memory_gpu(v: Collector) -> None:
    from clawgym.memory.gpus import GPUS

    mem = v.c.get("memory") or {}
    if mem.get("gpu") is not None and str(mem["gpu"]) not in GPUS:
        v.add("memory-gpu-known", ["memory.gpu"], "the memory plan knows these GPUs: " + ", ".join(GPUS),
              "set memory.gpu to one of them (e.g. h100_80gb), or null for this node's GPU, and "
              "memory.gpu_memory_gib to its usable memory if it differs")
    v.positive("memory-gpu-memory-positive", ["memory.gpu_memory_gib"], "the GPU's usable memory")


def rule_colocate_needs_offload(v: Collector) -> None:
    """A colocated run keeps the actor and SGLang on the same GPUs and swaps them by offload.

    Not a mirror of a trainer check: slime (``slime/utils/arguments.py::slime_validate_args``, both
    the fork and v0.3.1) turns ``offload_train`` / ``offload_rollout`` on under ``--colocate`` when
    unset but accepts ``--no-offload-train`` / ``--no-offload-rollout`` and then keeps both sides
    resident at once (the setting of slime #1105's workaround; slime's own
    ``scripts/run-qwen3-4B-amd.sh`` runs so). Whether that fits is the memory plan's question (it
    counts the two sides' sum, and the preflight check ``memory`` refuses a launch that does not
    fit), so here it is a warning: the run starts, and fits only if both sides fit at once.
    v0.3.1's ``--release-train`` replaces the train offload (it releases the train actors).
    """
    from clawgym.memory.colocate import trainer_flag

    if not v.c["gpu_layout"]["colocate"]:
        return
    release = bool((v.c.get("args") or {}).get("release_train")) or "--release-train" in (v.c.get("extra_args") or [])
    for dest in ("offload_train", "offload_rollout"):
        if trainer_flag(v.c, dest) is False and not (dest == "offload_train" and release):
            key = f"args.{dest}" if dest in (v.c.get("args") or {}) else "extra_args"
            v.warn("colocate-needs-offload", ["gpu_layout.colocate", key],
                   f"a colocated run swaps the actor and SGLang through slime's offload; with {dest} off both stay "
                   f"on the GPUs at once (the memory plan counts their sum; preflight's memory check refuses it "
                   f"when the sum does not fit)",
                   f"remove {'args.' + dest + '=false' if key.startswith('args') else '--no-' + dest.replace('_', '-')}"
                   f" (slime turns it on under --colocate), or use a split gpu_layout (e.g. split_4_4)")
