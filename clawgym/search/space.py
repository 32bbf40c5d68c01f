"""The layout space of a config, and the divisibility rules that prune it before any memory plan.

Knobs (each a config key; a key the user set is a constraint, its value the only option):

* where the GPUs go: ``gpu_layout.colocate``, the actor's GPUs (``gpu_layout.actor_gpus`` per node x
  ``gpu_layout.actor_num_nodes``) and ``gpu_layout.rollout_gpus``, on nodes of
  ``gpu_layout.num_gpus`` GPUs;
* the Megatron actor: ``perf.tensor_parallel``, ``perf.pipeline_parallel``, ``perf.context_parallel``,
  ``perf.expert_parallel``, ``perf.expert_tensor_parallel``, ``perf.sequence_parallel`` (on whenever
  TP > 1: it only saves memory and TP traffic), recompute (none, selective, full uniform over 1 layer),
  ``optimizer.cpu_offload`` with ``optimizer.use_precision_aware_optimizer``,
  ``perf.max_tokens_per_gpu`` (1x, 2x, 4x the longest sample per CP rank) and
  ``perf.log_probs_chunk_size`` (the config's, or 512 when that is what makes it fit);
* the SGLang engines: ``sglang.tp``, DP attention (``args.sglang_enable_dp_attention`` with
  ``args.sglang_dp_size`` = the engine's TP) and engine EP (``args.sglang_ep_size``) where the
  trainer flavour has those flags, ``sglang.mem_fraction_static``.

The divisibility rules here are those of ``clawgym/validate/trainer_rules.py`` (same codes), stated
on plain integers so that a candidate refused by one costs no memory plan; the survivors still go
through the rules themselves.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Dict, Iterator, List, Mapping, Optional, Sequence, Tuple

POW2 = (1, 2, 4, 8, 16, 32, 64, 128, 256)


@dataclass(frozen=True)
class Parallel:
    """The actor's parallel sizes."""

    tp: int
    pp: int
    cp: int
    ep: int
    etp: int


@dataclass(frozen=True)
class ActorMem:
    """An actor memory variant: recompute, optimizer offload, token budget, log-prob chunk."""

    recompute: Optional[str]  # None, "selective", "full"
    offload: bool
    tokens_factor: int
    chunk: Optional[int]


@dataclass(frozen=True)
class Engine:
    tp: int
    dp: int
    ep: int
    frac: float


def divisors(n: int) -> List[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


class Space:
    """The options of every knob for one base config and its constraints."""

    def __init__(self, c: Mapping[str, Any], constraints: Sequence[str], flavour_dests: Sequence[str]):
        self.c = c
        self.fixed = set(constraints)
        self.dests = set(flavour_dests)
        m = c["model"]
        self.heads = int(m["num_attention_heads"])
        self.groups = int(m["num_query_groups"] or self.heads)
        self.layers = int(m["num_layers"])
        self.experts = int(m.get("num_experts") or 0)
        self.upstream = (c.get("trainer") or {}).get("flavour") == "slime"
        # Uneven pipeline stages given as trainer args shape the stages for one PP size: keep it.
        args = c.get("args") or {}
        self.uneven = any(args.get(k) is not None for k in ("decoder_first_pipeline_num_layers",
                                                             "decoder_last_pipeline_num_layers",
                                                             "pipeline_model_parallel_layout"))
        if self.uneven:
            self.fixed.add("perf.pipeline_parallel")
        # Megatron's micro-batch calculator: the global batch splits into micro-batches on every DP rank
        # (rule_global_batch); None when the trainer resizes the batch itself or no global batch is known.
        r = c["rollout"]
        steps = c["rollout"].get("num_steps_per_rollout")
        gbs = args.get("global_batch_size")
        if steps and r.get("batch_size") and r.get("n_samples_per_prompt"):
            gbs = int(r["batch_size"]) * int(r["n_samples_per_prompt"]) // int(steps)
        self.batch_unit = None if args.get("decrease_batch_size_if_needed") or not gbs else \
            (int(gbs), int(args.get("micro_batch_size") or 1))

    def options(self, key: str, default: Sequence[Any]) -> List[Any]:
        """``default``, or the config's own value when the user set ``key``."""
        if key in self.fixed:
            return [get_value(self.c, key)]
        return list(default)

    def is_fixed(self, key: str) -> bool:
        return key in self.fixed

    # ---------------------------------------------------------------- actor

    def parallels(self, world: int, per_node: int, refuse: "Refusals") -> Iterator[Parallel]:
        """TP x PP x CP x EP x ETP that tile ``world`` actor GPUs and the model (the trainer's rules)."""
        tps = self.options("perf.tensor_parallel", [t for t in POW2 if t <= min(world, per_node)])
        pps = self.options("perf.pipeline_parallel", [p for p in POW2 if p <= min(world, 16)])
        cps = self.options("perf.context_parallel", [x for x in (1, 2, 4) if x <= world])
        eps = self.options("perf.expert_parallel",
                           [e for e in POW2 if e <= world and e <= max(1, self.experts)] if self.experts else [1])
        for tp in tps:
            if self.heads % tp:
                refuse.add("tp-divides-heads", f"perf.tensor_parallel={tp}")
                continue
            if not (self.groups % tp == 0 or (self.upstream and tp % self.groups == 0)):
                refuse.add("tp-divides-query-groups", f"perf.tensor_parallel={tp}")
                continue
            etps = self.options("perf.expert_tensor_parallel", sorted({1, tp}) if self.experts else [1])
            for pp in pps:
                if self.layers % pp and not self.uneven:
                    refuse.add("pipeline-divides-layers", f"perf.pipeline_parallel={pp}")
                    continue
                for cp in cps:
                    if world % (tp * pp * cp):
                        refuse.add("model-parallel-divides-actor-gpus",
                                   f"perf.tensor_parallel={tp} perf.pipeline_parallel={pp} "
                                   f"perf.context_parallel={cp} on {world} actor GPUs")
                        continue
                    dp = world // (tp * pp * cp)
                    if self.batch_unit and self.batch_unit[0] % (self.batch_unit[1] * dp):
                        refuse.add("global-batch-divides-micro-batches",
                                   f"{world} actor GPUs at TP {tp} PP {pp} CP {cp}: DP {dp} does not divide the global "
                                   f"batch of {self.batch_unit[0]}")
                        continue
                    for ep in eps:
                        if ep > 1 and (not self.experts or self.experts % ep):
                            refuse.add("expert-parallel-divides-experts", f"perf.expert_parallel={ep}")
                            continue
                        for etp in etps:
                            if world % (etp * ep * pp):
                                refuse.add("expert-parallel-divides-actor-gpus",
                                           f"perf.expert_parallel={ep} perf.expert_tensor_parallel={etp} "
                                           f"perf.pipeline_parallel={pp} on {world} actor GPUs")
                                continue
                            yield Parallel(tp, pp, cp, ep, etp)

    def actor_mems(self) -> List[ActorMem]:
        """Memory variants, the most frugal first (a parallel layout it does not fit is refused whole).

        Recompute: none or full (uniform, 1 layer). Selective recompute is not offered: with flash
        attention it saves no memory the plan counts and costs about what none costs."""
        p, o = self.c["perf"], self.c["optimizer"]
        if self.is_fixed("perf.recompute_granularity"):
            rcs = [p["recompute_granularity"]]
        else:
            rcs = ["full", None]
        offs = [o["cpu_offload"]] if self.is_fixed("optimizer.cpu_offload") else [True, False]
        dyn = bool(p["use_dynamic_batch_size"]) and not self.is_fixed("perf.max_tokens_per_gpu")
        factors = [1, 2] if dyn else [0]
        chunk0 = p.get("log_probs_chunk_size")
        chunks = [chunk0] if self.is_fixed("perf.log_probs_chunk_size") else \
            ([512] if chunk0 is None or int(chunk0) <= 0 or int(chunk0) > 512 else []) + [chunk0]
        out = [ActorMem(rc, off, f, ch) for rc in rcs for off in offs for f in factors for ch in chunks]
        # Most frugal first: full recompute, offload, the smallest budget and chunk.
        rank = {"full": 0, "selective": 1, None: 2}
        out.sort(key=lambda v: (rank.get(v.recompute, 1), not v.offload, v.tokens_factor,
                                0 if v.chunk == 512 else 1))
        return out

    def actor_chains(self, mems: List[ActorMem], chunk: Any) -> List[List[ActorMem]]:
        """The variants in chains, each fastest first: a chain stops at its first variant that fits
        (the later ones only save memory, at a cost in time). One chain per optimizer placement and
        token budget; along a chain, recompute goes from none to full."""
        chains: Dict[Tuple[bool, int], List[ActorMem]] = {}
        order = {None: 0, "selective": 1, "full": 2}
        for v in sorted((v for v in mems if v.chunk == chunk) or mems, key=lambda v: order.get(v.recompute, 1)):
            chains.setdefault((v.offload, v.tokens_factor), []).append(v)
        return list(chains.values())

    # ---------------------------------------------------------------- engines

    def engines(self, gpus: int, per_node: int, colocate: bool, refuse: "Refusals") -> Iterator[Engine]:
        s = self.c["sglang"]
        args = self.c.get("args") or {}
        # Engines beyond one node (slime's --rollout-num-gpus-per-engine above the node's GPUs) for models
        # whose weights one node cannot hold.
        tps = self.options("sglang.tp", [t for t in (1, 2, 4, 8, 16, 32, 64)
                                         if t <= gpus and (t <= per_node or t % per_node == 0)])
        base = s.get("mem_fraction_static")
        fracs = self.options("sglang.mem_fraction_static",
                             sorted({0.6, 0.7, 0.75, 0.8, 0.85, 0.9} | ({float(base)} if base is not None else set())))
        mla = bool(self.c["model"].get("multi_latent_attention"))
        for tp in tps:
            if gpus % min(tp, per_node):
                refuse.add("sglang-tp-divides-rollout-gpus", f"sglang.tp={tp} on {gpus} rollout GPUs")
                continue
            dps = [1]
            if "sglang_dp_size" in self.dests and tp > 1 and not self.is_fixed("args.sglang_dp_size"):
                dps.append(tp)
            elif self.is_fixed("args.sglang_dp_size") and args.get("sglang_enable_dp_attention"):
                dps = [int(args.get("sglang_dp_size") or 1)]
            eps = [1]
            if "sglang_ep_size" in self.dests and self.experts and tp > 1:
                eps = [int(args["sglang_ep_size"])] if self.is_fixed("args.sglang_ep_size") else [1, tp]
            for dp in dps:
                attn_tp = tp // dp if tp % dp == 0 else 0
                if not attn_tp:
                    refuse.add("sglang-dp-divides-tp", f"sglang.tp={tp} args.sglang_dp_size={dp}")
                    continue
                if self.heads % attn_tp:
                    refuse.add("sglang-tp-divides-heads", f"sglang.tp={tp}" + (f" dp={dp}" if dp > 1 else ""))
                    continue
                if dp > 1 and not mla:
                    # DP attention pays off where attention is replicated (MLA's single latent head).
                    continue
                for ep in eps:
                    if ep > 1 and self.experts % ep:
                        refuse.add("sglang-ep-divides-experts", f"args.sglang_ep_size={ep}")
                        continue
                    for f in fracs:
                        yield Engine(tp, dp, ep, float(f))


class Refusals:
    """How many candidates each rule (or the memory plan) removed, one example each."""

    def __init__(self) -> None:
        self.counts: Dict[str, int] = {}
        self.examples: Dict[str, str] = {}

    def add(self, code: str, example: str, n: int = 1) -> None:
        self.counts[code] = self.counts.get(code, 0) + n
        self.examples.setdefault(code, example)

    def summary(self) -> List[Dict[str, Any]]:
        return [{"rule": k, "count": v, "example": self.examples[k]}
                for k, v in sorted(self.counts.items(), key=lambda kv: -kv[1])]


def get_value(c: Mapping[str, Any], key: str) -> Any:
    """The value at dotted ``key`` of a plain config, or None where the path is missing."""
    node: Any = c
    for part in key.split("."):
        if not isinstance(node, Mapping) or part not in node:
            return None
        node = node[part]
    return node


def splits(total: int, per_node: int, c: Mapping[str, Any], space: Space) -> List[Tuple[bool, int, int, int]]:
    """(colocate, actor GPUs per node, actor nodes, rollout GPUs) over ``total`` GPUs."""
    g = c["gpu_layout"]
    nodes = max(1, total // per_node)
    colocs = space.options("gpu_layout.colocate", [True, False])
    if not g.get("rollout_engine", True):
        colocs = [False]
    out = []
    for col in colocs:
        if col:
            out.append((True, min(per_node, total), nodes, min(per_node, total) * nodes))
            continue
        if not g.get("rollout_engine", True):
            out.append((False, min(per_node, total), nodes, 0))
            continue
        cands = []
        for a in range(1, total):
            if a < per_node and a in POW2 or (a >= per_node and a % per_node == 0):
                per, n = (a, 1) if a <= per_node else (per_node, a // per_node)
                cands.append((False, per, n, total - a))
        out += cands
    keep = []
    for col, per, n, r in out:
        if space.is_fixed("gpu_layout.actor_gpus") and per != int(g["actor_gpus"]):
            continue
        if space.is_fixed("gpu_layout.actor_num_nodes") and n != int(g["actor_num_nodes"]):
            continue
        if space.is_fixed("gpu_layout.rollout_gpus") and not col and r != int(g["rollout_gpus"]):
            continue
        keep.append((col, per, n, r))
    return keep
