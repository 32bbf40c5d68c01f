"""Which knobs make a plan fit, and by how much: every suggestion is re-evaluated with the plan.

A search over knobs of one config, so it sits above both validation and the memory plan (moved
here from ``clawgym/memory/``). When no single move fits, it asks the layout search
(:func:`clawgym.search.layout.search`) for the config's own GPUs, keeping the model and rollout: its best
layout is the combined advice; only when no layout fits does the greedy combination below (which
may also shorten the context) answer.

Moves (each a set of Hydra overrides applied to the resolved config): the CPU-offloaded
optimizer, full recompute, a smaller ``perf.max_tokens_per_gpu``, more TP / PP / EP (within what
Megatron accepts for the model), more actor nodes, the SGLang ``mem_fraction_static`` and engine
TP, and a shorter ``rollout.max_context_len``. Single moves that fit are offered first; when none
does, moves are combined greedily (each step takes the one that removes most of the deficit).
"""

from __future__ import annotations

import copy
from typing import Any, Callable, Dict, List, Mapping, Optional, Tuple

from clawgym.trainer.effective import effective_config
from clawgym.memory import MemoryPlan, this_node_gpu
from clawgym.memory import evaluate as evaluate_plan
from clawgym.memory import memory_plan as plain_memory_plan
from clawgym.memory.actor import tokens_per_gpu
from clawgym.memory.gpus import GPUS
from clawgym.validate.core import Collector, run_rule
from clawgym.validate.trainer_rules import RULES, model_window

Move = List[Tuple[str, Any]]


def _set(c: Dict[str, Any], key: str, value: Any) -> None:
    node = c
    parts = key.split(".")
    for p in parts[:-1]:
        node = node[p]
    if key == "rollout.max_context_len" and c["sglang"].get("context_length") == c["rollout"]["max_context_len"]:
        c["sglang"]["context_length"] = value  # sglang.context_length interpolates it
    node[parts[-1]] = value


def _apply(c: Mapping[str, Any], move: Move) -> Dict[str, Any]:
    out = copy.deepcopy(dict(c))
    for k, v in move:
        _set(out, k, v)
    return out


def _render(v: Any) -> str:
    return "true" if v is True else "false" if v is False else "null" if v is None else str(v)


def _ok_parallel(c: Mapping[str, Any]) -> bool:
    """Whether the trainer would start this config: no error from the trainer rules
    (``clawgym/validate/trainer_rules.py``, the one statement of what Megatron, slime and SGLang
    accept), so advice never names a layout validation then refuses."""
    col = Collector(c, {})
    for rule in RULES:
        run_rule(col, rule, cross=True)
    return not any(v.severity == "error" for v in col.out)


def _moves(c: Mapping[str, Any]) -> List[Move]:
    m, p, o, g, s, r = c["model"], c["perf"], c["optimizer"], c["gpu_layout"], c["sglang"], c["rollout"]
    out: List[Move] = []
    if not o["cpu_offload"]:
        out.append([("optimizer.cpu_offload", True), ("optimizer.use_precision_aware_optimizer", True)])
    if p["recompute_granularity"] != "full":
        out.append([("perf.recompute_granularity", "full"), ("perf.recompute_method", "uniform"),
                    ("perf.recompute_num_layers", 1)])
    T = tokens_per_gpu(c)
    half = T // 2
    ctx = r.get("max_context_len")
    tokens: Move = []
    if p["use_dynamic_batch_size"] and p["max_tokens_per_gpu"] and int(p["max_tokens_per_gpu"]) > half >= 2048:
        tokens.append(("perf.max_tokens_per_gpu", half))
    window, _ = model_window(m)
    shorter = min(half, window) if window else half
    if ctx and int(ctx) > shorter > int(r["max_response_len"]) and shorter >= 2048:
        # One sample is never split across micro-batches (only CP splits it): shorten the context too,
        # never above the checkpoint's window.
        tokens.append(("rollout.max_context_len", shorter))
    if tokens:
        out.append(tokens)
    world = int(g["actor_gpus"]) * int(g["actor_num_nodes"])
    pows = [1, 2, 4, 8, 16, 32, 64, 128]
    for key in ("perf.tensor_parallel", "perf.pipeline_parallel", "perf.expert_parallel"):
        cur = int(p[key.split(".")[1]] or 1)
        for v in pows:
            if v != cur and v <= world and (key != "perf.expert_parallel" or m.get("num_experts")):
                out.append([(key, v)])
    if m.get("num_experts") and int(g["actor_num_nodes"]) < 16:
        n = int(g["actor_num_nodes"]) * 2
        ep = max(v for v in pows if v <= min(int(m["num_experts"]), world * 2) and int(m["num_experts"]) % v == 0)
        out.append([("gpu_layout.actor_num_nodes", n), ("perf.expert_parallel", ep)])
    frac = s.get("mem_fraction_static")
    if frac is not None:
        for f in (round(frac - 0.1, 2), round(frac + 0.05, 2)):
            if 0.3 <= f <= 0.92:
                out.append([("sglang.mem_fraction_static", f)])
    if int(s["tp"]) * 2 <= (world if g["colocate"] else int(g["rollout_gpus"])):
        out.append([("sglang.tp", int(s["tp"]) * 2)])
    return [mv for mv in out if _ok_parallel(_apply(c, mv))]


def _deficit(plan: Any, c: Optional[Mapping[str, Any]] = None) -> float:
    if c is not None and not _ok_parallel(c):
        return float("inf")
    usable = plan.gpu_memory_gib
    d = max(0.0, plan.phases["actor_gpu_peak_gib"] - usable) + max(0.0, plan.phases["rollout_gpu_peak_gib"] - usable)
    r = plan.rollout
    if r["kv_tokens_per_engine"] < r["context_len"]:
        d += (r["context_len"] - r["kv_tokens_per_engine"]) * r["kv_cell_bytes"] / float(1 << 30) + 0.01
    return d


def _describe(move: Move, before: Any, after: Any) -> str:
    keys = " ".join(f"{k}={_render(v)}" for k, v in move)
    return (f"{keys}: GPU peak {before.phases['peak_gib']:.1f} -> {after.phases['peak_gib']:.1f} GiB of "
            f"{after.gpu_memory_gib:.1f}, KV {after.rollout['kv_tokens_per_engine']:,} tokens/engine"
            f"{', fits' if after.fits else ''}")


def _from_layout_search(c: Mapping[str, Any], gpu: Any, plan: Any) -> Optional[Tuple[List[str], List[List[str]]]]:
    """The layout search's best layout for this config's own GPUs, as one advice line."""
    g = c["gpu_layout"]
    per_node = int(g["num_gpus"] or 8)
    if g["colocate"]:
        total = int(g["actor_gpus"]) * int(g["actor_num_nodes"])
    else:
        total = int(g["actor_gpus"]) * int(g["actor_num_nodes"]) + int(g["rollout_gpus"] or 0)
    total = -(-total // per_node) * per_node if total > per_node else total
    name = plan.gpu if plan.gpu in _gpu_names() else None
    if name is None:
        return None
    # The search's modules are loaded only for a plan that does not fit (a dry run that fits never needs them).
    from clawgym.search.layout import search

    try:
        r = search(c, gpus=total, gpus_per_node=min(per_node, total), gpu=name, top=1, explain=False)
    except ValueError:
        return None
    if not r.layouts:
        return None
    best = r.layouts[0]
    return ([f"together (the best layout of `clawgym layout --gpus {total} --gpu {name}`): "
             f"{' '.join(best.overrides)}: GPU peak {plan.phases['peak_gib']:.1f} -> {best.gpu_peak_gib:.1f} GiB of "
             f"{best.gpu_memory_gib:.1f}, fits"], [list(best.overrides)])


def _gpu_names() -> List[str]:
    return list(GPUS)


def advise(c: Mapping[str, Any], gpu: Any, plan: Any, *, max_steps: int = 12,
           evaluate: Optional[Callable[..., Any]] = None) -> Tuple[List[str], List[List[str]]]:
    """(advice lines, the Hydra overrides of each line) for a plan that does not fit."""
    if evaluate is None:
        evaluate = evaluate_plan
    fitting: List[Tuple[float, Move, Any]] = []
    for mv in _moves(c):
        after = evaluate(_apply(c, mv), gpu)
        if after.fits:
            fitting.append((after.phases["peak_gib"], mv, after))
    if fitting:
        fitting.sort(key=lambda x: (len(x[1]), -x[0]))
        chosen = fitting[:3]
        return ([_describe(mv, plan, after) for _, mv, after in chosen],
                [[f"{k}={_render(v)}" for k, v in mv] for _, mv, _a in chosen])
    layout = _from_layout_search(c, gpu, plan)
    if layout is not None:
        return layout
    # Greedy combination.
    cur, cur_plan, steps = dict(c), plan, []  # type: ignore[var-annotated]
    for _ in range(max_steps):
        best = None
        for mv in _moves(cur):
            after = evaluate(_apply(cur, mv), gpu)
            before = _deficit(cur_plan, cur)
            gain = (1e9 if before == float("inf") else before) - _deficit(after)
            if gain > 1e-6 and (best is None or gain > best[0]):
                best = (gain, mv, after)
        if best is None:
            break
        cur, cur_plan = _apply(cur, best[1]), best[2]
        steps += best[1]
        if cur_plan.fits:
            break
    merged: Dict[str, Any] = {}
    for k, v in steps:
        merged[k] = v
    overrides = [f"{k}={_render(v)}" for k, v in merged.items()]
    if cur_plan.fits:
        return ([f"together: {' '.join(overrides)}: GPU peak {plan.phases['peak_gib']:.1f} -> "
                 f"{cur_plan.phases['peak_gib']:.1f} GiB of {cur_plan.gpu_memory_gib:.1f}, fits"], [overrides])
    msg = "no combination of the knobs tried fits this GPU"
    if overrides:
        # What still blocks the closest plan, in its own words (a GPU peak below the GPU's memory is no
        # blocker: SGLang's weights leaving no KV cache is).
        msg += f"; the closest ({' '.join(overrides)}) still does not fit: {'; '.join(cur_plan.problems)}"
    return [msg + "; use more GPUs/nodes or a GPU with more memory"], []


def lower_actor_peak(c: Mapping[str, Any], gpu: Any, below_gib: float) -> List[Tuple[List[str], float, float]]:
    """Single moves of the advice that plan the actor's peak per GPU below ``below_gib`` (a run that
    went out of memory although its plan fit): (overrides, actor peak before, after) in GiB, each
    re-evaluated with the memory plan, fewest keys first, then the lowest peak."""
    ec = effective_config(c)
    base = plain_memory_plan(ec, gpu)
    before = base.actor_peak_gib
    out: List[Tuple[List[str], float, float]] = []
    for mv in _moves(ec):
        after = evaluate_plan(_apply(ec, mv), gpu)
        peak = after.actor_peak_gib
        # The actor's side lower, and the GPU's peak no higher than today's (a plan at its edge stays at it).
        if peak < below_gib and (after.fits or after.phases["peak_gib"] <= base.phases["peak_gib"]):
            out.append(([f"{k}={_render(v)}" for k, v in mv], before, peak))
    return sorted(out, key=lambda x: (len(x[0]), x[2]))


# ---------------------------------------------------------------- memory plan with advice

def memory_plan(c: Mapping[str, Any], gpu: Any = None) -> MemoryPlan:
    """:func:`clawgym.memory.memory_plan`, with advice when it does not fit (this module: the advice asks the layout search, so it sits above it)."""
    ec = effective_config(c)
    plan = plain_memory_plan(ec, gpu)
    if not plan.fits:
        plan.advice, plan.advice_overrides = advise(ec, gpu, plan)
    return plan


def attach(plan: Any, c: Mapping[str, Any], effective: Optional[Mapping[str, Any]] = None) -> Any:
    """Put the memory plan of ``c`` (with advice) into a launch plan (``plan.memory``); returns the plan.
    ``effective``: the config as the trainer runs it, when the caller derived it already."""
    if getattr(plan, "memory", None) is None:
        plan.memory = memory_plan(effective if effective is not None else c, this_node_gpu(c)).to_dict()
    return plan
