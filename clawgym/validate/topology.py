"""GPU topology: node and GPU counts, colocation, and how TP/PP/CP/EP tile the actor and rollout GPUs."""

from __future__ import annotations


from clawgym.validate.core import Collector


def rule_gpu_counts_positive(v: Collector) -> None:
    # Without a rollout engine (SFT) there are no rollout GPUs to count.
    rollout = ["gpu_layout.rollout_gpus"] if v.c["gpu_layout"].get("rollout_engine", True) else []
    v.positive("gpu-counts-positive",
               ["gpu_layout.num_gpus", "gpu_layout.actor_num_nodes", "gpu_layout.actor_gpus", *rollout],
               "GPU and node counts")


def rule_perf_sizes_positive(v: Collector) -> None:
    v.positive("parallel-sizes-positive",
               [f"perf.{k}" for k in ("tensor_parallel", "pipeline_parallel", "context_parallel", "expert_parallel",
                                     "expert_tensor_parallel", "max_tokens_per_gpu")],
               "parallel sizes and batch limits")
    # log_probs_chunk_size <= 0 (the trainer's default -1) means no chunking: any int is accepted.


def rule_gpus_fit_node(v: Collector) -> None:
    """GPUs asked per node against the node's GPUs: a warning, not a refusal.

    slime places the actor and the engines through Ray placement groups of one GPU per bundle
    (slime/ray/placement_group.py): a layout larger than one node needs more nodes, which the
    preflight's capacity check (clawgym/preflight/) counts; the trainer's startup checks accept it.
    Under colocate the fork sets rollout_num_gpus to the actor's GPUs (slime_validate_args).
    """
    g = v.c["gpu_layout"]
    if min(g["num_gpus"], g["actor_gpus"], g["rollout_gpus"]) <= 0:
        return
    if str((v.c.get("cluster") or {}).get("backend", "local")) == "local" and not v.c["ray"]["address"]:
        # A head clawgym starts (cluster=local) is this one node: no other node can take the rest.
        need = max(g["actor_gpus"], g["rollout_gpus"]) if g["colocate"] else g["actor_gpus"] + g["rollout_gpus"]
        need = max(need, g["actor_gpus"] * g["actor_num_nodes"])
        if need > g["num_gpus"]:
            what = (f"colocated actor and rollout share {need}" if g["colocate"] else
                    f"actor + rollout GPUs ({g['actor_gpus']} + {g['rollout_gpus']})")
            v.add("local-head-gpus-fit", ["gpu_layout.actor_gpus", "gpu_layout.rollout_gpus", "gpu_layout.num_gpus",
                                          "gpu_layout.colocate"],
                  f"cluster=local starts a Ray head on this one node: {what} exceed its gpu_layout.num_gpus="
                  f"{g['num_gpus']}, and there is no other node for Ray to place the rest on",
                  "choose a layout that fits the node (e.g. gpu_layout=split_4_4 or gpu_layout=colocate_8 on 8 GPUs), "
                  "or run on a cluster with more nodes: ray.address=<dashboard> or cluster=slurm")
        return
    if g["colocate"]:
        for k in ("actor_gpus", "rollout_gpus"):
            if g[k] > g["num_gpus"] * (g["actor_num_nodes"] if k == "rollout_gpus" else 1):
                v.warn("colocated-gpus-fit", [f"gpu_layout.{k}", "gpu_layout.num_gpus"],
                       f"colocated training and inference share the node's GPUs: {k} {g[k]} > the node's "
                       f"{g['num_gpus']}", f"lower gpu_layout.{k} to at most gpu_layout.num_gpus")
    elif g["actor_num_nodes"] == 1 and g["actor_gpus"] + g["rollout_gpus"] > g["num_gpus"]:
        v.warn("split-gpus-fit", ["gpu_layout.actor_gpus", "gpu_layout.rollout_gpus", "gpu_layout.num_gpus"],
               f"actor + rollout GPUs ({g['actor_gpus']} + {g['rollout_gpus']}) exceed one node's "
               f"{g['num_gpus']}: Ray must place the rest on other nodes (the preflight checks the cluster has them)",
               "lower gpu_layout.actor_gpus or gpu_layout.rollout_gpus to fit one node, or choose gpu_layout=colocate_8")
    elif g["actor_gpus"] > g["num_gpus"]:
        v.warn("split-gpus-fit", ["gpu_layout.actor_gpus", "gpu_layout.num_gpus"],
               "actor GPUs per node exceed the node's GPUs", "lower gpu_layout.actor_gpus")
