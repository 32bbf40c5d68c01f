"""The layout search's result as ``clawgym layout`` prints it."""

from __future__ import annotations

from clawgym.search.layout import SearchResult


def format_result(r: SearchResult) -> str:
    lines = [f"layouts for {r.gpus} x {r.gpu} ({r.gpus_per_node} per node), best first "
             f"(step time estimated by clawgym.steptime; {r.considered} joined layouts priced):"]
    if r.gpus > r.gpus_per_node and r.layouts:
        lines.append(f"  ({r.gpus // r.gpus_per_node} nodes: launch on a cluster of them, e.g. add ray.address=<its "
                     f"dashboard> or cluster=slurm; cluster=local starts a one-node head)")
    for i, x in enumerate(r.layouts, 1):
        lines += [f"{i}. {' '.join(x.overrides) if x.overrides else '(the config as it is)'}",
                  f"   GPU peak {x.gpu_peak_gib:.1f} of {x.gpu_memory_gib:.1f} GiB (headroom {x.headroom_gib:.1f}); "
                  f"{x.trajectories_fit} of {x.concurrent_trajectories} trajectories fit in the KV cache at full "
                  f"context",
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
