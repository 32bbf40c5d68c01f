"""Config surgery for the layout search: a candidate's values rendered and written into a config."""

from __future__ import annotations

from typing import Any, Dict, Mapping

from clawgym.memory.actor import context_len
from clawgym.search.space import ActorMem, Engine, Parallel, Space


def render(v: Any) -> str:
    if v is True:
        return "true"
    if v is False:
        return "false"
    if v is None:
        return "null"
    if isinstance(v, float):
        return repr(round(v, 4))
    return str(v)


def with_values(c: Mapping[str, Any], values: Mapping[str, Any]) -> Dict[str, Any]:
    """``c`` with ``values`` set (dotted keys); groups touched are copied, the rest shared."""
    out = dict(c)
    copied: set = set()
    for key, v in values.items():
        group, _, leaf = key.partition(".")
        if group not in copied:
            out[group] = dict(out.get(group) or {})
            copied.add(group)
        if v is None and group == "args":
            out[group].pop(leaf, None)
        else:
            out[group][leaf] = v
    return out


def actor_values(par: Parallel, mem: ActorMem, c: Mapping[str, Any], space: Space) -> Dict[str, Any]:
    v: Dict[str, Any] = {"perf.tensor_parallel": par.tp, "perf.pipeline_parallel": par.pp,
                         "perf.context_parallel": par.cp, "perf.expert_parallel": par.ep,
                         "perf.expert_tensor_parallel": par.etp}
    if not space.is_fixed("perf.sequence_parallel"):
        v["perf.sequence_parallel"] = par.tp > 1
    if not space.is_fixed("perf.recompute_granularity"):
        if mem.recompute == "full":
            v.update({"perf.recompute_granularity": "full", "perf.recompute_method": "uniform",
                      "perf.recompute_num_layers": 1})
        else:
            v.update({"perf.recompute_granularity": mem.recompute, "perf.recompute_method": None,
                      "perf.recompute_num_layers": None})
    if not space.is_fixed("optimizer.cpu_offload"):
        v["optimizer.cpu_offload"] = mem.offload
        if mem.offload:
            v["optimizer.use_precision_aware_optimizer"] = True
    if mem.tokens_factor:
        longest = -(-context_len(c) // par.cp)
        v["perf.max_tokens_per_gpu"] = longest * mem.tokens_factor
    if not space.is_fixed("perf.log_probs_chunk_size"):
        v["perf.log_probs_chunk_size"] = mem.chunk
    return v


def engine_values(e: Engine, space: Space) -> Dict[str, Any]:
    v: Dict[str, Any] = {"sglang.tp": e.tp, "sglang.mem_fraction_static": e.frac}
    if "sglang_dp_size" in space.dests and not space.is_fixed("args.sglang_dp_size"):
        v["args.sglang_enable_dp_attention"] = True if e.dp > 1 else None
        v["args.sglang_dp_size"] = e.dp if e.dp > 1 else None
    if "sglang_ep_size" in space.dests and not space.is_fixed("args.sglang_ep_size"):
        v["args.sglang_ep_size"] = e.ep if e.ep > 1 else None
    return v


def split_values(col: bool, per: int, nodes: int, rollout: int, per_node: int, c: Mapping[str, Any],
                  space: Space) -> Dict[str, Any]:
    v: Dict[str, Any] = {"gpu_layout.colocate": col, "gpu_layout.num_gpus": per_node,
                         "gpu_layout.actor_num_nodes": nodes, "gpu_layout.actor_gpus": per}
    if c["gpu_layout"].get("rollout_engine", True):
        v["gpu_layout.rollout_gpus"] = rollout  # (no engine, SFT: the config's value stays)
    if not space.is_fixed("gpu_layout.trainer_script"):
        v["gpu_layout.trainer_script"] = "train.py" if col else "train_async.py"
    return v
