"""GPU topology: node and GPU counts, colocation, and how TP/PP/CP/EP tile the actor and rollout GPUs."""

from __future__ import annotations


from clawgym.validate.core import _Collector


def rule_gpu_counts_positive(v: _Collector) -> None:
    # Without a rollout engine (SFT) there are no rollout GPUs to count.
    rollout = ["gpu_layout.rollout_gpus"] if v.c["gpu_layout"].get("rollout_engine", True) else []
    v.positive("gpu-counts-positive",
               ["gpu_layout.num_gpus", "gpu_layout.actor_num_nodes", "gpu_layout.actor_gpus", *rollout],
               "GPU and node counts")


def rule_trainer_matches_colocation(v: _Collector) -> None:
    g = v.c["gpu_layout"]
    want = "train.py" if g["colocate"] else "train_async.py"
    if g["trainer_script"] != want:
        mode = "colocated layouts run the synchronous trainer (train.py)" if g["colocate"] else \
            "split layouts run the asynchronous trainer (train_async.py), which asserts it is not colocated"
        v.add("trainer-matches-colocation", ["gpu_layout.colocate", "gpu_layout.trainer_script"], mode,
              f"set gpu_layout.trainer_script={want} or leave it unset (it follows gpu_layout.colocate)")


def rule_perf_sizes_positive(v: _Collector) -> None:
    v.positive("parallel-sizes-positive",
               [f"perf.{k}" for k in ("tensor_parallel", "pipeline_parallel", "context_parallel", "expert_parallel",
                                     "expert_tensor_parallel", "max_tokens_per_gpu")],
               "parallel sizes and batch limits")
    # log_probs_chunk_size <= 0 (the trainer's default -1) means no chunking: any int is accepted.


def rule_gpus_fit_node(v: _Collector) -> None:
    g = v.c["gpu_layout"]
    if min(g["num_gpus"], g["actor_gpus"], g["rollout_gpus"]) <= 0:
        return
    if g["colocate"]:
        for k in ("actor_gpus", "rollout_gpus"):
            if g[k] > g["num_gpus"] * (g["actor_num_nodes"] if k == "rollout_gpus" else 1):
                v.add("colocated-gpus-fit", [f"gpu_layout.{k}", "gpu_layout.num_gpus"],
                      "colocated training and inference share the node's GPUs",
                      f"lower gpu_layout.{k} to at most gpu_layout.num_gpus")
    elif g["actor_num_nodes"] == 1 and g["actor_gpus"] + g["rollout_gpus"] > g["num_gpus"]:
        v.add("split-gpus-fit", ["gpu_layout.actor_gpus", "gpu_layout.rollout_gpus", "gpu_layout.num_gpus"],
              f"in a split layout actor + rollout GPUs ({g['actor_gpus']} + {g['rollout_gpus']}) must fit "
              f"the node's {g['num_gpus']}",
              "lower gpu_layout.actor_gpus or gpu_layout.rollout_gpus, raise gpu_layout.num_gpus, "
              "or choose gpu_layout=colocate_8")
    elif g["actor_gpus"] > g["num_gpus"]:
        v.add("split-gpus-fit", ["gpu_layout.actor_gpus", "gpu_layout.num_gpus"],
              "actor GPUs per node cannot exceed the node's GPUs", "lower gpu_layout.actor_gpus")


def rule_tp_divides_actor_gpus(v: _Collector) -> None:
    g, p = v.c["gpu_layout"], v.c["perf"]
    world = g["actor_gpus"] * g["actor_num_nodes"]
    mp = p["tensor_parallel"] * p["pipeline_parallel"] * p["context_parallel"]
    if world > 0 and mp > 0 and world % mp:
        v.add("model-parallel-divides-actor-gpus",
              ["perf.tensor_parallel", "perf.pipeline_parallel", "perf.context_parallel", "gpu_layout.actor_gpus"],
              f"TP x PP x CP ({mp}) must divide the actor's GPUs ({world}); the rest is data parallel",
              "choose perf.tensor_parallel (and PP, CP) whose product divides gpu_layout.actor_gpus")


def rule_tp_fits_heads(v: _Collector) -> None:
    m, tp = v.c["model"], v.c["perf"]["tensor_parallel"]
    # Without GQA every head is its own group (Megatron sets num_query_groups = heads).
    heads = m["num_attention_heads"]
    groups = m["num_query_groups"] if m["num_query_groups"] is not None else heads
    if tp <= 0 or heads <= 0 or groups <= 0:
        return
    if heads % tp:
        v.add("tp-divides-heads", ["perf.tensor_parallel", "model.num_attention_heads"],
              f"each tensor-parallel rank holds whole attention heads: {heads} heads % TP {tp} != 0",
              "set perf.tensor_parallel to a divisor of model.num_attention_heads (and of the actor GPUs)")
    if groups % tp and tp % groups:
        v.add("tp-compatible-with-query-groups", ["perf.tensor_parallel", "model.num_query_groups"],
              f"query groups ({groups}) and TP ({tp}) must divide one another",
              "set perf.tensor_parallel to a divisor or multiple of model.num_query_groups")


def rule_sglang_tp_fits(v: _Collector) -> None:
    s, g, m = v.c["sglang"], v.c["gpu_layout"], v.c["model"]
    tp = s["tp"]
    if tp <= 0:
        return
    if g["rollout_gpus"] > 0 and g["rollout_gpus"] % tp:
        v.add("sglang-tp-divides-rollout-gpus", ["sglang.tp", "gpu_layout.rollout_gpus"],
              f"SGLang engines of {tp} GPUs must tile the {g['rollout_gpus']} rollout GPUs (slime leaves the rest idle)",
              "set sglang.tp to a divisor of gpu_layout.rollout_gpus")
    if m["num_attention_heads"] > 0 and m["num_attention_heads"] % tp:
        v.add("sglang-tp-divides-heads", ["sglang.tp", "model.num_attention_heads"],
              "SGLang shards attention heads across its tensor-parallel ranks",
              "set sglang.tp to a divisor of model.num_attention_heads")


def rule_experts_divide(v: _Collector) -> None:
    m, p = v.c["model"], v.c["perf"]
    if m["num_experts"] is not None and p["expert_parallel"] > 0 and m["num_experts"] % p["expert_parallel"]:
        v.add("expert-parallel-divides-experts", ["perf.expert_parallel", "model.num_experts"],
              "expert parallel ranks hold equal shares of the experts",
              "set perf.expert_parallel to a divisor of model.num_experts")
