"""The layout search itself: ``search(c, gpus=N, ...) -> SearchResult`` (the package docstring,
:mod:`clawgym.search`, tells its four stages), the ranking with ties inside the step-time model's error,
and the refusals and lifts it explains."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

from clawgym.trainer.effective import effective_config
from clawgym.memory import MemoryPlan, evaluate
from clawgym.memory import gpus as G
from clawgym.memory.actor import actor_memory, context_len
from clawgym.memory.rollout import SGLANG_OFFLOADED_RESIDUE_GIB, rollout_memory
from clawgym.search.space import get_value
from clawgym.search.surgery import actor_values, engine_values, render, split_values, with_values
from clawgym.search.space import ActorMem, Parallel, Refusals, Space, splits
from clawgym.registry import load_registry
from clawgym.steptime import active_params, actor_times, rollout_times, servers, step_time, workload
from clawgym.validate import check
from clawgym.validate.core import Collector, run_rule
from clawgym.validate.trainer_rules import RULES, model_window

#: Rules about the one-node head ``cluster=local`` starts: a layout over several nodes is launched on a
#: cluster of them (``ray.address=...``, ``cluster=slurm``, ``cluster=kuberay``), where they do not apply.
MULTI_NODE_ONLY_RULES = ("local-head-gpus-fit",)


#: Keys of a layout, rendered in this order on its override line.
LAYOUT_KEYS = ["gpu_layout.colocate", "gpu_layout.num_gpus", "gpu_layout.actor_num_nodes", "gpu_layout.actor_gpus",
               "gpu_layout.rollout_gpus", "perf.tensor_parallel", "perf.sequence_parallel", "perf.pipeline_parallel",
               "perf.context_parallel", "perf.expert_parallel", "perf.expert_tensor_parallel",
               "perf.recompute_granularity", "perf.recompute_method", "perf.recompute_num_layers",
               "optimizer.cpu_offload", "optimizer.use_precision_aware_optimizer", "perf.max_tokens_per_gpu",
               "perf.log_probs_chunk_size", "sglang.tp", "args.sglang_enable_dp_attention", "args.sglang_dp_size",
               "args.sglang_ep_size", "sglang.mem_fraction_static"]
#: Keys interpolated from another layout key in the schema: always written, so the line means the same
#: whatever the base config's interpolation would give.
_ALWAYS = {"perf.tensor_parallel"}
#: The fastest candidates of each side carried into the join.
KEEP_PER_SIDE = 3

#: The step-time model's stated error per pass: its calibration (``clawgym/steptime/compute.py``) is
#: within 15.1% of every measured train pass and 15.0% of every log-prob pass of
#: ``benchmarks/step_time_reference.json`` (26 real Megatron-core steps on an H200). Two estimated steps
#: closer than this are a tie: the model cannot order them.
STEP_TIME_ERROR = 0.15

#: The lowest ratio of the memory plan's GPU peak (actor peak + overhead) to the real one (torch's
#: ``max_memory_reserved`` + memory outside the allocator) over the 42 points of
#: ``benchmarks/memory_reference.json``: 0.871 (q06_t16k_full_nochunk, log-prob pass), rounded down. A
#: layout whose planned actor peak is above this share of the GPU may really not fit: it is inside the margin,
#: listed after those outside it, and ``gpu_layout=auto`` never picks it
#: (``tests/test_layout_rankings.py`` recomputes the ratio from the data).
MEMORY_PLAN_LOW_RATIO = 0.87

#: The most GPUs one search covers: 512 nodes of 8 (the parallel sizes it tries stop at 256, and the
#: split layouts it enumerates grow with the GPU count).
MAX_SEARCH_GPUS = 4096


@dataclass
class Layout:
    overrides: List[str]
    fits: bool
    gpu: str
    gpu_memory_gib: float
    gpu_peak_gib: float
    headroom_gib: float
    trajectories_fit: int
    concurrent_trajectories: int
    step_s: float
    rollout_s: float
    logprob_s: float
    train_s: float
    weight_update_s: float
    offload_s: float
    tok_s_per_gpu: float
    gpus: int
    settings: Dict[str, Any] = field(default_factory=dict)
    #: Layouts whose steps are within :data:`STEP_TIME_ERROR` of their group's fastest share a rank.
    rank: int = 0
    #: The actor's planned peak per GPU (training and log-prob passes, with their overhead).
    actor_peak_gib: float = 0.0
    #: The actor's planned peak is above :data:`MEMORY_PLAN_LOW_RATIO` of the GPU: it may not fit.
    in_margin: bool = False

    def to_dict(self) -> Dict[str, Any]:
        d = asdict(self)
        d["step"] = {k: d[k] for k in ("rollout_s", "logprob_s", "train_s", "weight_update_s", "offload_s")}
        return d


@dataclass
class SearchResult:
    layouts: List[Layout]
    refused: List[Dict[str, Any]]
    gpus: int
    gpus_per_node: int
    gpu: str
    user_overrides: List[str] = field(default_factory=list)
    binding: Optional[str] = None
    lifts: List[str] = field(default_factory=list)
    considered: int = 0

    def to_dict(self) -> Dict[str, Any]:
        return {"gpus": self.gpus, "gpus_per_node": self.gpus_per_node, "gpu": self.gpu,
                "layouts": [x.to_dict() for x in self.layouts], "refused": self.refused, "binding": self.binding,
                "lifts": self.lifts, "considered": self.considered}


# ---------------------------------------------------------------- the search

def _actor_flops(c: Mapping[str, Any]) -> float:
    """FLOPs of one step's log-prob passes and train step, the least any layout does (no recompute)."""
    w, a = workload(c), active_params(c["model"])
    L = w["context"]
    fwd = 2.0 * a["active"] + 4.0 * a["attn_width"] * a["attn_layers"] * (L / 2.0)
    passes = 3 + 1 + int(bool(c["grpo"].get("use_kl_loss")))
    return w["samples"] * L * fwd * passes


def _trainer_errors(c: Mapping[str, Any]) -> List[Any]:
    """Errors of the trainer rules (the validation's own rules, through its public collector)."""
    col = Collector(c, {})
    for rule in RULES:
        run_rule(col, rule, cross=True)
    return [v for v in col.out if v.severity == "error"]


def _flavour_dests(c: Mapping[str, Any]) -> List[str]:
    reg = load_registry(str((c.get("trainer") or {}).get("flavour") or "clawgym"))
    return [d for d in ("sglang_dp_size", "sglang_ep_size") if reg.by_dest(d) is not None]


def _gpu_entry(c: Mapping[str, Any], gpu: Optional[str]) -> Tuple[str, float]:
    mem = c.get("memory") or {}
    name = gpu or mem.get("gpu") or G.DEFAULT_GPU
    if name not in G.GPUS:
        raise ValueError(f"memory.gpu={name!r}: the GPU table knows {', '.join(G.GPUS)}")
    usable = float(mem["gpu_memory_gib"]) if mem.get("gpu_memory_gib") is not None else G.GPUS[name].usable_gib
    return name, usable


def search(c: Mapping[str, Any], *, gpus: int, gpus_per_node: Optional[int] = None, gpu: Optional[str] = None,
           constraints: Sequence[str] = (), top: int = 5, user_overrides: Sequence[str] = (),
           explain: bool = True, actor_ratio: float = MEMORY_PLAN_LOW_RATIO) -> SearchResult:
    """Rank the layouts of the resolved plain config ``c`` on ``gpus`` GPUs (module docstring).

    The actor side is first held to ``actor_ratio`` of the GPU (the memory margin); only when no layout
    keeps it are the layouts inside the margin searched and returned, each marked ``in_margin``."""
    r = _search(c, gpus=gpus, gpus_per_node=gpus_per_node, gpu=gpu, constraints=constraints, top=top,
                user_overrides=user_overrides, explain=explain and actor_ratio >= 1.0, actor_ratio=actor_ratio)
    if r.layouts or actor_ratio >= 1.0:
        return r
    return _search(c, gpus=gpus, gpus_per_node=gpus_per_node, gpu=gpu, constraints=constraints, top=top,
                   user_overrides=user_overrides, explain=explain, actor_ratio=1.0)


def _search(c: Mapping[str, Any], *, gpus: int, gpus_per_node: Optional[int], gpu: Optional[str],
            constraints: Sequence[str], top: int, user_overrides: Sequence[str], explain: bool,
            actor_ratio: float) -> SearchResult:
    per_node = int(gpus_per_node or min(gpus, 8))
    if gpus <= 0 or per_node <= 0:
        raise ValueError("--gpus and --gpus-per-node must be positive")
    if gpus > MAX_SEARCH_GPUS:
        raise ValueError(f"--gpus {gpus}: the layout search covers at most {MAX_SEARCH_GPUS} GPUs (512 nodes of 8); "
                         f"give --gpus {MAX_SEARCH_GPUS} or fewer")
    bad = model_errors(c)
    if bad:
        raise ValueError("; ".join(bad))
    if gpus > per_node and gpus % per_node:
        raise ValueError(f"--gpus {gpus} is not a whole number of nodes of {per_node} GPUs (--gpus-per-node)")
    name, usable = _gpu_entry(c, gpu)
    base = effective_config(c)
    base = with_values(base, {"memory.gpu": name})
    fixed = set(constraints)
    space = Space(base, sorted(fixed), _flavour_dests(base))
    refused = Refusals()
    ctx = context_len(base)
    actor_cache: Dict[Tuple[int, bool], List[Tuple[float, float, Dict[str, Any]]]] = {}
    engine_cache: Dict[Tuple[int, bool], List[Tuple[float, float, Dict[str, Any]]]] = {}
    card = G.GPUS[name]
    smallest_actor = [math.inf]
    smallest_budget = [0.0]
    # The first validation error of a layout that fits both sides (a rule no layout knob lifts).
    blocking: Dict[str, Any] = {}
    # Actor sides where some shape passed the divisibility rules (a failure there is the memory's).
    memory_tried: set = set()
    largest_kv = [0]

    def _actor_try(par: Parallel, mem: ActorMem, lay_v: Dict[str, Any],
                   budget: float) -> Optional[Tuple[float, float, Dict[str, Any]]]:
        vals = {**lay_v, **actor_values(par, mem, base, space)}
        cand = with_values(base, vals)
        am = actor_memory(cand)
        peak = max(am.train_peak_gib, am.logprob_peak_gib) + am.overhead_gib
        if peak > budget:
            if peak - budget < smallest_actor[0] - smallest_budget[0]:
                smallest_actor[0], smallest_budget[0] = peak, budget
            refused.add("memory-actor-peak", f"{_brief(vals)}: the actor needs {peak:.1f} GiB per GPU of "
                                             f"{budget:.1f}")
            return None
        t = actor_times(cand, card)
        return (t["logprob_s"] + t["train_s"], peak, vals)

    def actor_side(world: int, nodes: int, per: int, col: bool) -> List[Tuple[float, float, Dict[str, Any]]]:
        key = (world, col)
        if key in actor_cache:
            return actor_cache[key]
        budget = usable * actor_ratio - (SGLANG_OFFLOADED_RESIDUE_GIB if col else 0.0)
        lay_v = {"gpu_layout.actor_gpus": per, "gpu_layout.actor_num_nodes": nodes, "gpu_layout.num_gpus": per_node,
                 "gpu_layout.colocate": col}
        found: List[Tuple[float, float, Dict[str, Any]]] = []
        mems = space.actor_mems()
        frugal = mems[0]
        chains = space.actor_chains(mems, base["perf"].get("log_probs_chunk_size"))
        smaller_chunk = any(v.chunk == 512 for v in mems)
        for par in space.parallels(world, per_node, refused):
            memory_tried.add(key)
            if _actor_try(par, frugal, lay_v, budget) is None:
                continue  # the most frugal variant does not fit: none of this shape's do
            for chain in chains:
                for mem in chain:
                    got = _actor_try(par, mem, lay_v, budget)
                    if got is None and smaller_chunk and mem.chunk != 512:
                        # A smaller log-prob chunk only lowers the log-prob pass's peak: tried when needed.
                        got = _actor_try(par, ActorMem(mem.recompute, mem.offload, mem.tokens_factor, 512), lay_v,
                                         budget)
                    if got is not None:
                        found.append(got)
                        break
        found.sort(key=lambda x: _rank(x, base))
        actor_cache[key] = _distinct(found, ("perf.tensor_parallel", "perf.pipeline_parallel", "perf.context_parallel",
                                             "perf.expert_parallel", "perf.expert_tensor_parallel"))[:KEEP_PER_SIDE]
        return actor_cache[key]

    def engine_side(rgpus: int, col: bool, nodes: int, per: int) -> List[Tuple[float, float, Dict[str, Any]]]:
        key = (rgpus, col)
        if key in engine_cache:
            return engine_cache[key]
        found: List[Tuple[float, float, Dict[str, Any]]] = []
        lay_v = {"gpu_layout.colocate": col, "gpu_layout.rollout_gpus": rgpus, "gpu_layout.actor_gpus": per,
                 "gpu_layout.actor_num_nodes": nodes, "gpu_layout.num_gpus": per_node}
        for e in space.engines(rgpus, per_node, col, refused):
            vals = {**lay_v, **engine_values(e, space)}
            cand = with_values(base, vals)
            ro = rollout_memory(cand, usable, ctx)
            largest_kv[0] = max(largest_kv[0], ro.kv_tokens_per_engine)
            if ro.kv_tokens_per_engine < ctx:
                refused.add("memory-kv-below-one-trajectory",
                            f"{_engines(vals)}: an engine's KV cache holds {ro.kv_tokens_per_engine:,} tokens, one "
                            f"trajectory needs {ctx:,}")
                continue
            # SGLang's static pool plus its working memory (CUDA graphs, a chunked prefill's activations:
            # memory.rollout.working_mib), on a colocated GPU also beside what the offloaded actor leaves.
            need = ro.static_gib + getattr(ro, "working_gib", 0.0) + (SGLANG_OFFLOADED_RESIDUE_GIB if col else 0.0)
            if need > usable:
                refused.add("memory-engine-peak",
                            f"{_engines(vals)}: SGLang holds {ro.static_gib:.1f} GiB and works in "
                            f"{getattr(ro, 'working_gib', 0.0):.1f} more, of {usable:.1f}")
                continue
            t = rollout_times(cand, card, ro.kv_tokens_per_engine, servers(cand, ro.engines))
            found.append((t["rollout_s"], ro.static_gib, vals))
        found.sort(key=lambda x: _rank(x, base))
        shapes = ("sglang.tp", "args.sglang_dp_size", "args.sglang_ep_size")
        engine_cache[key] = _distinct(found, shapes)[:KEEP_PER_SIDE]
        return engine_cache[key]

    joined: List[Tuple[float, Dict[str, Any], Dict[str, Any], MemoryPlan, Any]] = []
    considered = 0
    # Split layouts from the largest actor down: an actor that fits no layout on A GPUs fits none on fewer.
    layouts_to_try = sorted(splits(gpus, per_node, base, space), key=lambda x: (not x[0], -x[1] * x[2]))
    split_actor_failed = False
    # A lower bound of any actor's log-prob + train time on ``world`` GPUs: their FLOPs at the GPU's
    # peak (no calibration, no communication). A split whose bound exceeds the best step found is skipped.
    flops_per_step = _actor_flops(base)
    for col, per, nodes, rgpus in layouts_to_try:
        world = per * nodes
        if not col and split_actor_failed:
            continue
        if not col and joined and flops_per_step / (world * card.bf16_tflops * 1e12) > min(j[0] for j in joined):
            refused.add("step-time-bound", f"split, {world} actor GPUs: their FLOPs alone take longer than the best "
                                           f"step found")
            continue
        actors = actor_side(world, nodes, per, col)
        if not actors:
            # Out of memory on A GPUs: fewer fit no better. (No shape tiling A says nothing of fewer.)
            split_actor_failed = split_actor_failed or (not col and (world, col) in memory_tried)
            continue
        engines = engine_side(rgpus, col, nodes, per) if base["gpu_layout"].get("rollout_engine", True) \
            else [(0.0, 0.0, {})]
        for _, _, av in actors:
            for _, _, ev in engines:
                vals = {**split_values(col, per, nodes, rgpus, per_node, base, space), **av, **ev}
                cand = with_values(base, vals)
                considered += 1
                errors = _trainer_errors(cand)
                if errors:
                    refused.add(errors[0].code, f"{_describe(vals)}: {errors[0].rule}")
                    blocking.setdefault("rule", errors[0])
                    continue
                plan = evaluate(cand, name)
                if not plan.fits:
                    refused.add("memory-plan", f"{_describe(vals)}: {plan.problems[0]}")
                    continue
                st = step_time(cand, name, memory={"rollout": plan.rollout})
                joined.append((st.step_s, vals, cand, plan, st))
    joined.sort(key=lambda x: (_rank((x[0], x[3].phases["peak_gib"], x[1]), base)))
    layouts: List[Layout] = []
    seen = set()
    for step_s, vals, cand, plan, st in joined:
        # More than ``top`` are validated: ties and the margin may reorder them (_order).
        if len(layouts) >= 2 * top + 2:
            break
        line = _overrides(vals, c, fixed, base)
        if tuple(line) in seen:
            continue
        errors, _ = check(with_values(c, {k: v for k, v in vals.items()}))
        if gpus > per_node:
            # More GPUs than one node: the layout runs on a cluster of several nodes (ray.address,
            # SLURM, KubeRay), never on the one-node head cluster=local starts; that rule speaks of
            # where it launches, which the search does not choose (format_result says so).
            errors = [e for e in errors if e.code not in MULTI_NODE_ONLY_RULES]
        if errors:
            refused.add(errors[0].code, f"{_describe(vals)}: {errors[0].rule}")
            blocking.setdefault("rule", errors[0])
            continue
        seen.add(tuple(line))
        r = plan.rollout
        layouts.append(Layout(
            overrides=[*user_overrides, *line], fits=plan.fits, gpu=name, gpu_memory_gib=plan.gpu_memory_gib,
            gpu_peak_gib=round(plan.phases["peak_gib"], 2),
            headroom_gib=round(plan.gpu_memory_gib - plan.phases["peak_gib"], 2),
            trajectories_fit=int(r["kv_tokens_per_engine"] // max(1, ctx)) * servers(cand, int(r["engines"]))
            if r["engines"] else 0, concurrent_trajectories=int(r["concurrent_trajectories"]),
            step_s=round(st.step_s, 2), rollout_s=round(st.rollout_s, 2), logprob_s=round(st.logprob_s, 2),
            train_s=round(st.train_s, 2), weight_update_s=round(st.weight_update_s, 2),
            offload_s=round(st.offload_s, 2), tok_s_per_gpu=round(st.tok_s_per_gpu, 1), gpus=st.gpus,
            settings={k: vals[k] for k in LAYOUT_KEYS if k in vals},
            # The margin is the actor's: the measured points are actor phases; SGLang's pool is the share of
            # the GPU that mem_fraction_static asks for, no estimate.
            # Colocated, the actor's phase is the train phase (beside SGLang's offloaded residue).
            actor_peak_gib=round(plan.actor_peak_gib, 2),
            in_margin=plan.actor_peak_gib > plan.gpu_memory_gib * MEMORY_PLAN_LOW_RATIO + 1e-6))
    layouts = _order(layouts)[:top]
    result = SearchResult(layouts=layouts, refused=refused.summary(), gpus=gpus, gpus_per_node=per_node, gpu=name,
                          user_overrides=list(user_overrides), considered=considered)
    if not layouts:
        _explain(result, c, refused, smallest_actor[0], largest_kv[0], ctx, smallest_budget[0] or usable,
                 explain=explain, per_node_given=gpus_per_node is not None,
                 constraints=sorted(fixed), top=top, any_actor=any(actor_cache.values()),
                 any_engine=any(engine_cache.values()), blocking=blocking.get("rule"))
    return result


def usable_gib(c: Mapping[str, Any], gpu: Optional[str] = None) -> float:
    """The GPU memory a layout of ``c`` may plan with (``memory.gpu_memory_gib`` or the GPU table's)."""
    return _gpu_entry(c, gpu)[1]


def actor_peak_gib(c: Mapping[str, Any], gpu: Optional[str] = None) -> float:
    """The memory plan's actor peak per GPU (training and log-prob passes) of resolved config ``c``."""
    from clawgym.memory import memory_plan as plain_memory_plan

    return plain_memory_plan(effective_config(c), gpu).actor_peak_gib


def model_errors(c: Mapping[str, Any]) -> List[str]:
    """Model shapes no layout can tile, each with its key, value, rule and a value that works."""
    m = c.get("model") or {}
    out = []
    for key in ("num_layers", "num_attention_heads", "hidden_size"):
        v = m.get(key)
        if v is not None and (not isinstance(v, int) or v < 1):
            out.append(f"model.{key}={v}: a model has at least one (set model.{key} to the checkpoint's "
                       f"config.json value, e.g. choose a model= option)")
    experts, topk = m.get("num_experts"), m.get("moe_router_topk")
    if experts and (not isinstance(topk, int) or not 1 <= topk <= int(experts)):
        out.append(f"model.moe_router_topk={topk}: an MoE routes each token to 1 to num_experts ({experts}) experts "
                   f"(set it to the checkpoint's num_experts_per_tok, e.g. model.moe_router_topk=1)")
    return out


def _order(layouts: List[Layout]) -> List[Layout]:
    """Layouts outside the memory margin first, then those inside it; within each, groups of ties: from the
    fastest left, every layout within :data:`STEP_TIME_ERROR` of it shares its rank, most headroom first
    (whole GiB: finer is the plan's noise), then the shortest override line, then the faster. Every later
    rank is slower than all of an earlier one, so the list order agrees with the printed times."""
    out: List[Layout] = []
    for part in ([x for x in layouts if not x.in_margin], [x for x in layouts if x.in_margin]):
        rest = sorted(part, key=lambda x: x.step_s)
        while rest:
            bound = rest[0].step_s * (1 + STEP_TIME_ERROR)
            group = [x for x in rest if x.step_s <= bound]
            rest = rest[len(group):]
            rank = len(out) + 1
            for x in sorted(group, key=lambda x: (-math.floor(x.headroom_gib), len(x.overrides), x.step_s)):
                x.rank = rank
                out.append(x)
    return out


def _rank(x: Tuple[float, float, Dict[str, Any]], base: Mapping[str, Any]) -> Tuple[int, int, float]:
    """Faster first (times within 0.5% are equal: the model is not that precise), then the fewest keys
    changed from the config, then the lowest memory."""
    changed = sum(1 for k, v in x[2].items() if get_value(base, k) != v)
    return (int(math.log(max(x[0], 1e-3)) / math.log(1.005)), changed, x[1])


Candidate = Tuple[float, float, Dict[str, Any]]


def _distinct(found: List[Candidate], keys: Sequence[str]) -> List[Candidate]:
    """The best candidate of each parallel shape (variants of one shape differ only in memory knobs)."""
    seen, out = set(), []
    for x in found:
        shape = tuple(x[2].get(k) for k in keys)
        if shape not in seen:
            seen.add(shape)
            out.append(x)
    return out


def _brief(vals: Mapping[str, Any]) -> str:
    """A candidate's actor side in a few words (refusal examples)."""
    g = lambda k: vals.get(k)  # noqa: E731
    rc = g("perf.recompute_granularity") or "no"
    world = int(g("gpu_layout.actor_gpus")) * int(g("gpu_layout.actor_num_nodes"))
    return (f"{'colocated' if g('gpu_layout.colocate') else 'split'}, {world} actor GPUs, "
            f"TP {g('perf.tensor_parallel')} PP {g('perf.pipeline_parallel')} "
            f"CP {g('perf.context_parallel')} EP {g('perf.expert_parallel')} ETP {g('perf.expert_tensor_parallel')}, "
            f"{rc} recompute, optimizer {'offloaded' if g('optimizer.cpu_offload') else 'on GPU'}"
            + (f", {g('perf.max_tokens_per_gpu')} tokens/GPU" if g("perf.max_tokens_per_gpu") else ""))


def _engines(vals: Mapping[str, Any]) -> str:
    """A candidate's engine side in a few words (refusal examples)."""
    dp = vals.get("args.sglang_dp_size")
    ep = vals.get("args.sglang_ep_size")
    where = " (colocated)" if vals.get("gpu_layout.colocate") else ""
    return (f"{vals.get('gpu_layout.rollout_gpus')} rollout GPUs{where}"
            f", engine TP {vals.get('sglang.tp')}" + (f" DP attention {dp}" if dp else "") + (f" EP {ep}" if ep else "")
            + f", mem_fraction_static {vals.get('sglang.mem_fraction_static')}")


def _describe(vals: Mapping[str, Any]) -> str:
    return f"{_brief(vals)}; {_engines(vals)}"


def _overrides(vals: Mapping[str, Any], c: Mapping[str, Any], fixed: set,
               effective: Optional[Mapping[str, Any]] = None) -> List[str]:
    """The override line of a layout against the user's resolved config: every key whose value
    differs (a null key counts with the value the trainer uses for it), and the keys the schema
    interpolates from another layout key."""
    out = []
    for k in LAYOUT_KEYS:
        if k not in vals or k in fixed:
            continue
        v = vals[k]
        if effective is not None and k not in _ALWAYS and get_value(c, k) is None and get_value(effective, k) == v:
            continue
        if k.startswith("args."):
            if v is None and k.split(".", 1)[1] not in (c.get("args") or {}):
                continue
            if v is None:
                out.append(f"~{k}")
                continue
        if k in _ALWAYS or get_value(c, k) != v:
            out.append(f"{k}={render(v)}")
    return out


def shorter_contexts(ctx: int, model: Mapping[str, Any]) -> List[int]:
    """The shorter rollout contexts a lift tries, longest first: half, an eighth and 4096 tokens of ``ctx``,
    never above the checkpoint's window (``model.context_window``; the window itself is tried when half of
    ``ctx`` is still above it), so the search never proposes a context SGLang refuses."""
    window, _ = model_window(model)
    tries = {max(4096, ctx // 2), max(4096, ctx // 8), 4096}
    if window:
        tries = {min(t, window) for t in tries}
    return sorted((t for t in tries if t < ctx), reverse=True)


def _explain(result: SearchResult, c: Mapping[str, Any], refused: Refusals, smallest_actor: float, largest_kv: int,
             ctx: int, usable: float, *, explain: bool, constraints: List[str], top: int, any_actor: bool,
             any_engine: bool, per_node_given: bool = True, blocking: Any = None) -> None:
    """With no layout: the binding constraint, and what lifts it (tried, not guessed)."""
    if not any_actor and smallest_actor < math.inf:
        result.binding = (f"the actor's memory: its smallest footprint over every parallel layout and memory knob "
                          f"is {smallest_actor:.1f} GiB per GPU, {usable:.1f} GiB of the {result.gpu} are left for it")
    if not any_engine and refused.counts.get("memory-kv-below-one-trajectory"):
        kv = (f"the engines' KV cache: at most {largest_kv:,} tokens per engine, one trajectory at full context "
              f"needs {ctx:,} (rollout.max_context_len)")
        result.binding = kv if result.binding is None else result.binding + "; and " + kv
    if result.binding is None and blocking is not None:
        # Both sides fit somewhere, but the config breaks a rule no layout changes.
        result.binding = f"the rule {blocking.code} refuses every layout that fits: {blocking.rule}"
        result.lifts.append(f"fix: {blocking.fix}")
        return
    if result.binding is None and refused.counts.get("memory-plan"):
        result.binding = (f"the whole memory plan (actor and engines together): "
                          f"{refused.examples['memory-plan']}")
    if result.binding is None:
        rule = refused.summary()[0]["rule"] if refused.counts else "no layout tiles these GPUs"
        result.binding = f"every candidate was refused, most by {rule}"
    if not explain:
        return
    base_overrides = list(result.user_overrides)

    def fits(cfg: Mapping[str, Any], gpus: int, gpu: str) -> Optional[Layout]:
        user = [o for o in base_overrides if not o.startswith("memory.gpu=")]
        if gpu != result.gpu or any(o.startswith("memory.gpu=") for o in base_overrides):
            user.append(f"memory.gpu={gpu}")
        r = search(cfg, gpus=gpus, gpus_per_node=result.gpus_per_node if per_node_given else None, gpu=gpu,
                   constraints=constraints, top=1, explain=False, user_overrides=user)
        return r.layouts[0] if r.layouts else None

    # Each lift is one search (a few tried, cheapest first): more GPUs, the biggest GPU, a shorter context.
    for gpus in (result.gpus * 2, result.gpus * 4):
        found = fits(c, gpus, result.gpu)
        if found is not None:
            result.lifts.append(f"more GPUs: {gpus} x {result.gpu} fit ({' '.join(found.overrides)})")
            break
    biggest = max(G.GPUS.values(), key=lambda g: g.usable_gib)
    if biggest.usable_gib > usable + 1:
        found = fits(with_values(c, {"memory.gpu_memory_gib": None}), result.gpus, biggest.name)
        if found is not None:
            result.lifts.append(f"a bigger GPU: {result.gpus} x {biggest.name} fit ({' '.join(found.overrides)})")
    if "rollout.max_context_len" not in constraints and ctx > 4096:
        for shorter in shorter_contexts(ctx, c.get("model") or {}):
            vals: Dict[str, Any] = {"rollout.max_context_len": shorter}
            if (c.get("sglang") or {}).get("context_length") == ctx:
                vals["sglang.context_length"] = shorter
            response = int((c.get("rollout") or {}).get("max_response_len") or 0)
            if response >= shorter:
                # The context must hold more than one response (rule context-exceeds-response): a shorter
                # context comes with responses of half of it.
                vals["rollout.max_response_len"] = shorter // 2
            found = fits(with_values(c, vals), result.gpus, result.gpu)
            if found is not None:
                keys = " ".join(f"{k}={v}" for k, v in vals.items() if k != "sglang.context_length")
                result.lifts.append(f"a shorter context: {keys} fits on {result.gpus} x {result.gpu} "
                                    f"({' '.join(found.overrides)})")
                break
    if not result.lifts:
        eighth = max(4096, ctx // 8)
        window, _ = model_window(c.get("model") or {})
        result.lifts.append(f"no single lift tried fits: {result.gpus * 4} GPUs, the biggest GPU of the table, a "
                            f"context of {min(eighth, window) if window else eighth} tokens; combine them or use "
                            f"more nodes")
