"""Preflight check ``memory``: the run's per-GPU memory plan fits the GPU it will run on.

The plan (``clawgym/memory/``) is the launch plan's ``memory`` when ``memory.gpu`` names the GPU, else
made again against the GPU this node shows; a plan that does not fit is refused with its problems and the
advice that, re-evaluated, makes it fit.
"""

from __future__ import annotations

from clawgym.preflight.core import CheckFailed, Context


def check_memory(ctx: Context) -> str:
    plan = getattr(ctx.plan, "memory", None)
    if plan is None or (ctx.c.get("memory") or {}).get("gpu") is None:
        # Against the GPU of the node the check runs on (a SLURM job's plan was made on the login
        # node, which may have assumed one); the plan is pure and takes milliseconds.
        from clawgym.memory import this_node_gpu
        from clawgym.search.advice import memory_plan

        plan = memory_plan(ctx.c, this_node_gpu(ctx.c)).to_dict()
    from clawgym.memory import trajectories_text

    r, ph = plan["rollout"], plan["phases"]
    detail = (f"{ph['peak_gib']:.1f} of {plan['gpu_memory_gib']:.1f} GiB per GPU on {plan['gpu']} "
              f"({plan['gpu_source']}); trajectories in the KV cache: {trajectories_text(r)}")
    if plan["fits"]:
        return detail
    advice = plan.get("advice") or []
    raise CheckFailed("the memory plan does not fit: " + "; ".join(plan.get("problems") or []),
                      ("; or ".join(advice) if advice else "use more GPUs or a larger GPU")
                      + " (dry_run=true prints the whole plan; memory.gpu names the target GPU)")
