"""The layout search's result as ``clawgym layout`` prints it."""

from __future__ import annotations

from clawgym.search.layout import MEMORY_PLAN_LOW_RATIO, STEP_TIME_ERROR, Layout, SearchResult


def rank_label(x: Layout, layouts: "list[Layout]") -> str:
    """``3.``, or ``3= (tie)`` when another layout shares its rank (steps within the model's error)."""
    tied = sum(1 for y in layouts if y.rank == x.rank) > 1
    return f"{x.rank}= (tie)" if tied else f"{x.rank}."


def _kv(x: Layout) -> str:
    # The KV cache may hold more trajectories than the rollout runs at once: never "84 of 64".
    if x.trajectories_fit >= x.concurrent_trajectories:
        return (f"all {x.concurrent_trajectories} trajectories of a rollout fit in the KV cache at once at full context "
                f"(room for {x.trajectories_fit})")
    return (f"{x.trajectories_fit} of the rollout's {x.concurrent_trajectories} trajectories fit in the KV cache at "
            f"once at full context (the rest wait)")


def _gpus(x: Layout) -> str:
    s = x.settings
    per, nodes, rollout = s.get("gpu_layout.actor_gpus"), s.get("gpu_layout.actor_num_nodes"), s.get(
        "gpu_layout.rollout_gpus")
    if per is None or nodes is None:
        return ""
    where = "the same GPUs, colocated" if s.get("gpu_layout.colocate") else f"{rollout} GPUs in total"
    return (f"   GPUs: actor {per} per node (gpu_layout.actor_gpus) x {nodes} node(s) = {int(per) * int(nodes)}; "
            f"rollout {where} (gpu_layout.rollout_gpus counts in total)")


def format_result(r: SearchResult) -> str:
    err = round(STEP_TIME_ERROR * 100)
    margin = round((1 - MEMORY_PLAN_LOW_RATIO) * 100)
    lines = [f"layouts for {r.gpus} x {r.gpu} ({r.gpus_per_node} per node), best first "
             f"(step time estimated by clawgym.steptime; {r.considered} joined layouts priced).",
             f"Steps within {err}% of each other (the step-time model's measured error per pass) are a tie and share "
             f"a rank, most headroom first; a layout's actor keeps {margin}% of the GPU free (the memory plan "
             f"measured as low as {MEMORY_PLAN_LOW_RATIO:.2f}x of real actor peaks) or is listed after, inside the "
             f"margin:"]
    if r.gpus > r.gpus_per_node and r.layouts:
        lines.append(f"  ({r.gpus // r.gpus_per_node} nodes: launch on a cluster of them, e.g. add ray.address=<its "
                     f"dashboard> or cluster=slurm; cluster=local starts a one-node head)")
    shown_margin = False
    for x in r.layouts:
        if x.in_margin and not shown_margin:
            shown_margin = True
            lines.append(f"inside the {margin}% memory margin (planned actor peak above {MEMORY_PLAN_LOW_RATIO:.2f}x of "
                         f"the GPU: may not fit; not ranked against the layouts above):")
        lines += [f"{rank_label(x, r.layouts)} {' '.join(x.overrides) if x.overrides else '(the config as it is)'}",
                  f"   GPU peak {x.gpu_peak_gib:.1f} of {x.gpu_memory_gib:.1f} GiB (headroom {x.headroom_gib:.1f}; actor "
                  f"{x.actor_peak_gib:.1f}" + (", inside the margin" if x.in_margin else "") + f"); {_kv(x)}",
                  *([_gpus(x)] if _gpus(x) else []),
                  f"   step {x.step_s:.1f} s = rollout {x.rollout_s:.1f} | log-probs {x.logprob_s:.1f} | train "
                  f"{x.train_s:.1f} | weight update {x.weight_update_s:.2f}"
                  + (f" | offload {x.offload_s:.1f}" if x.offload_s else "")
                  + f"; {x.tok_s_per_gpu:.0f} tokens/s per GPU"]
    if not r.layouts:
        lines.append(f"no layout fits: {r.binding}")
        lines += [f"  lifts it: {x}" for x in r.lifts]
    if r.refused:
        lines.append("refused (candidates per rule, one example each):")
        lines += [f"  {x['count']:6d}  {x['rule']}: {x['example']}" for x in r.refused]
    return "\n".join(lines)
