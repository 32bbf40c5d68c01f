"""Host RAM per node: what the actor processes of one node pin or keep in host memory.

* the CPU-offloaded optimizer (``--optimizer-cpu-offload``): fp32 main params and Adam moments of
  the rank's shard, plus the fp32 gradient copy the hybrid CPU optimizer steps on (4 bytes);
* slime's weight backups (``TensorBackuper``): a pinned bf16 copy of each rank's weights for the
  actor, and one for the reference model when a KL term or ``--ref-load`` needs it (and for the
  old actor with ``--keep-old-actor``);
* the rollout data of one step (token ids, log-probs, masks; small);
* a base for each actor process (Python, torch, Megatron, CUDA host allocations).
"""

from __future__ import annotations

from typing import Any, Dict, Mapping

GIB = float(1 << 30)
#: Resident host memory of one Megatron actor process before model state (Python, torch, CUDA).
PROCESS_BASE_GIB = 3.0
#: Bytes per rollout token kept on the host between rollout and training (ids, log-probs, masks, rewards).
ROLLOUT_BYTES_PER_TOKEN = 24


def needs_ref(c: Mapping[str, Any]) -> bool:
    """slime's ``with_ref = kl_coef != 0 or use_kl_loss`` (placement_group.create_actor_model)."""
    g = c["grpo"]
    args = c.get("args") or {}
    return bool(g["use_kl_loss"]) or float(args.get("kl_coef") or 0.0) != 0.0


def host_memory(c: Mapping[str, Any], actor: Any, rollout_tokens: int) -> Dict[str, Any]:
    g = c["gpu_layout"]
    args = c.get("args") or {}
    per_node = int(g["actor_gpus"])
    shard_params = actor.optimizer_host_gib
    grads_copy = 0.0
    if actor.terms["optimizer_offload_fraction"] > 0 and actor.terms["optimizer_bytes_per_param"]:
        grads_copy = shard_params * 4 / actor.terms["optimizer_bytes_per_param"]
    backups = 1 + (1 if needs_ref(c) else 0) + (1 if args.get("keep_old_actor") else 0)
    pinned = actor.weights_gib * backups
    per_gpu = shard_params + grads_copy + pinned + PROCESS_BASE_GIB
    rollout = rollout_tokens * ROLLOUT_BYTES_PER_TOKEN / GIB
    return {"ram_gib_per_node": round(per_gpu * per_node + rollout, 2),
            "optimizer_offload_gib_per_gpu": round(shard_params + grads_copy, 3),
            "pinned_weight_backups_gib_per_gpu": round(pinned, 3), "weight_backups": backups,
            "rollout_data_gib": round(rollout, 3), "process_base_gib_per_gpu": PROCESS_BASE_GIB}
