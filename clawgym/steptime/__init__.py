"""How long one RL step takes: a pure function of the resolved config and the GPU.

``step_time(c, gpu)`` prices one step of slime (rollout, log-prob passes, train step, weight
update, and for colocated layouts the offload/onload) from stated terms, each in :data:`CONSTANTS`
or in the GPU table (``clawgym/memory/gpus.py``: HBM bandwidth, peak dense bf16 TFLOP/s, NVLink),
with its source. It ranks layouts in ``clawgym.search``; ``clawgym layout`` prints its parts.

Workload. One step trains on ``rollout.batch_size x rollout.n_samples_per_prompt`` samples; every
sample is priced at full length (its context reaches the memory plan's ``context_len``, it
generates ``max_response_len`` tokens per turn over ``train_max_turns`` turns, the rest of its
context is prefilled: prompt and tool output). A bound, the same one the memory plan sizes for:
real trajectories are shorter, so absolute times are pessimistic while the ranking holds.

Train and log-prob passes (Megatron). FLOPs per token: 2 x the active matmul parameters per
forward (dense layers, attention, the routed experts' ``topk / num_experts`` share, shared experts,
the output layer; the embedding lookup does no matmul) plus causal attention, 4 x heads x head dim
x (sequence / 2) per layer per forward. A train step is forward + backward (3 forwards); full
recompute adds one forward (Megatron's ``--recompute-granularity full`` re-runs each unit's
forward in backward); selective recompute re-runs core attention only (left out: small). Log-prob
passes are forward only: the actor's old log-probs, and the reference model's with
``grpo.use_kl_loss``. FLOPs split evenly over the actor's GPUs; the rate is the GPU's peak dense
bf16 times :func:`clawgym.steptime.compute.achieved_fraction` (the one calibrated function).
Stated communication terms, not overlapped with compute (Megatron overlaps none of them by
default except the DP gradient reduce, counted anyway: an upper bound):

* TP: 4 collectives per layer per forward over the [tokens, hidden] activations (all-gather and
  reduce-scatter with sequence parallel, all-reduce without: the same bytes), (TP-1)/TP of them
  per GPU, on NVLink inside a node (one direction: half of ``nvlink_gbs``).
* CP: ring attention passes each rank's K/V chunk to the CP-1 others per layer (forward; backward
  twice: K/V and their gradients).
* EP: dispatch and combine all-to-all of ``topk`` copies of each token's hidden state per MoE
  layer, (EP-1)/EP of them crossing ranks.
* PP: the 1F1B bubble, (PP-1) / micro-batches of the pass's compute, plus the stage boundary's
  activations (forward) and their gradient (backward).
* DP (distributed optimizer): gradients reduce-scattered (4 bytes each with fp32 accumulation, else
  2) and bf16 parameters all-gathered, once per optimizer step.
* Optimizer step: Adam on the GPU reads and writes ~30 bytes per local parameter (memory bound);
  with ``optimizer.cpu_offload`` gradients go down and parameters up over PCIe and the CPU runs
  Adam at ``cpu_adam_params_per_s``.
Links beyond one node (``gpu_layout.num_gpus`` GPUs) use ``internode_gbs`` per GPU.

Rollout (SGLang, modelled from its own code: sgl-project/sglang ``srt/managers/scheduler.py``,
``max_running_requests = min(max_total_num_tokens // 2, req_to_token_pool.size)``; the scheduler
admits requests while the KV pool has room and ``ScheduleBatch.retract_decode`` sends running
requests back to the queue when it runs out): decode is memory-bandwidth bound. Each decode
iteration of an engine, each engine rank reads its weight shard (for MoE, only the experts the
batch's tokens route to: ``1 - (1 - topk/E)^batch`` of them) and the KV of the requests it runs
(the batch x the mean context x the KV bytes per token per rank, ``clawgym.memory.rollout.cell_bytes``)
at ``decode_bw_efficiency`` of the GPU's HBM bandwidth, or the batch's FLOPs at
``prefill_efficiency`` of peak when that is longer, plus two TP all-reduces per layer at
``allreduce_latency_s`` (engine TP > 1) and a fixed ``decode_iteration_overhead_s``. The batch per
engine is the concurrent trajectories (``rollout.train_num_workers`` with a sandbox, else the
whole rollout batch) over the engines, at most what the KV pool holds at the mean context and
SGLang's ``max_running_requests``; samples beyond the batch wait for a later wave (queueing).
Prefill: the prefilled tokens' forward FLOPs per engine at ``prefill_efficiency`` of its GPUs' peak.

Weight update (slime ``update_weights``): the bf16 parameters (2 bytes each) are gathered over TP
and EP on the actor (NVLink) and sent to every engine: CUDA IPC on the same GPUs when colocated
(one HBM copy), NCCL broadcast otherwise (NVLink when actor and engines fit one node, else
``internode_gbs``).

Colocated layouts run rollout, log-probs and training in turn and add the offload/onload: the
actor's GPU state (weights, gradients, optimizer share left on the GPU) goes to host RAM and back
over PCIe at ``pcie_gbs``; SGLang's memory saver releases its weights and KV without copying (the
weights come back through the weight update). Split layouts run slime's ``train_async.py``: the
next rollout overlaps this step's training, so a step is the longer of the two plus the update
(``train.py`` on a split layout: their sum).

Left out: kernel launch and Python overheads of the trainer, data loading and reward computation,
the sandbox's tool-call latency (agentic turns wait on tools: not GPU time), CUDA-graph limits on
the decode batch, speculative decoding, prefix caching across turns, overlap of communication with
compute, stragglers and load imbalance across DP ranks or engines, MTP layers, the linear-attention
layers' recurrent state (counted as no attention FLOPs), and network topology beyond one node.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Any, Dict, Mapping, Optional

from clawgym.trainer.effective import effective
from clawgym.memory import gpus as G
from clawgym.memory import params as P
from clawgym.memory.actor import context_len, layout, recompute, tokens_per_gpu
from clawgym.memory.rollout import cell_bytes, weights_per_rank
from clawgym.steptime.compute import achieved_fraction, optimizer_step_s

__all__ = ["CONSTANTS", "StepTime", "step_time", "active_params", "workload", "servers", "actor_times", "rollout_times"]

#: Every constant of the model with its source (GB/s = 1e9 bytes/s).
CONSTANTS: Dict[str, float] = {
    # Share of the HBM datasheet bandwidth a decode step's weight and KV reads reach: memory-bound
    # kernels reach 70-85% of peak on Hopper (STREAM-like copies); 0.7 leaves room for the attention
    # kernel's lower efficiency at long contexts. Assumption, not measured here.
    "decode_bw_efficiency": 0.7,
    # Share of peak dense bf16 that SGLang's prefill (and a compute-bound decode batch) reaches:
    # large-batch GEMMs at 50-60% MFU. Assumption, not measured here.
    "prefill_efficiency": 0.5,
    # Latency of one small all-reduce inside a node (SGLang's custom all-reduce on NVLink, a few
    # microseconds; NCCL's LL protocol ~10 us). Assumption.
    "allreduce_latency_s": 10e-6,
    # Per decode iteration: scheduling, sampling, detokenisation (SGLang's overlap scheduler hides
    # most CPU work). Assumption.
    "decode_iteration_overhead_s": 1e-3,
    # Share of the NVLink one-direction bandwidth a collective reaches (NCCL bus bandwidth on
    # 8-GPU H100 boxes: ~360-400 of 450 GB/s).
    "nvlink_efficiency": 0.8,
    # Bandwidth per GPU beyond one node: one 400 Gb/s InfiniBand NDR port per GPU (DGX H100/H200),
    # ~45 GB/s achieved of 50.
    "internode_gbs": 45.0,
    # Host <-> GPU copies (PCIe Gen5 x16: 64 GB/s per direction; ~25 GB/s for pageable or
    # many-tensor copies as in slime's offload). Assumption.
    "pcie_gbs": 25.0,
    # CPU Adam (Megatron's HybridDeviceOptimizer, torch CPU Adam, multi-threaded) parameters per
    # second per GPU process. Assumption, not measured here.
    "cpu_adam_params_per_s": 1.0e9,
}

GB = 1e9


def active_params(m: Mapping[str, Any]) -> Dict[str, float]:
    """Matmul parameters one token passes through (forward), and attention's width per layer."""
    layers = P.layer_params(m)
    experts = int(m.get("num_experts") or 0)
    topk = int(m.get("moe_router_topk") or 0)
    share = topk / experts if experts else 0.0
    body = sum(lp.tp + lp.rep + lp.expert * share for lp in layers)
    out = int(m["vocab_size"]) * int(m["hidden_size"])
    nq = int(m["num_attention_heads"])
    if m.get("multi_latent_attention"):
        qk = int(m["qk_head_dim"]) + int(m["qk_pos_emb_head_dim"])
        width = nq * (qk + int(m["v_head_dim"])) / 2.0
    else:
        width = float(nq * P.head_dim(m))
    attn_layers = len(layers)
    lin = P.LINEAR_ATTENTION.get(m.get("family") or "") if m.get("use_gated_attention") else None
    if lin is not None:
        attn_layers = sum(1 for i in range(len(layers)) if (i + 1) % lin["interval"] == 0)
    return {"active": float(body + out), "attn_width": width, "attn_layers": float(attn_layers),
            "total": float(sum(lp.total for lp in layers) + out)}


def workload(c: Mapping[str, Any]) -> Dict[str, float]:
    """Samples per step and tokens per sample (the bound the model prices; module docstring)."""
    r = c["rollout"]
    samples = int(r["batch_size"] or 0) * int(r["n_samples_per_prompt"] or 0)
    ctx = context_len(c)
    turns = max(1, int(r.get("train_max_turns") or 1))
    resp = int(r["max_response_len"] or ctx // 2)
    generated = min(ctx, resp * turns)
    return {"samples": samples, "context": ctx, "generated": generated, "prefill": ctx - generated}


@dataclass
class StepTime:
    rollout_s: float
    logprob_s: float
    train_s: float
    weight_update_s: float
    offload_s: float
    step_s: float
    tok_s_per_gpu: float
    gpus: int
    terms: Dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> Dict[str, Any]:
        return asdict(self)


def _link(n_ranks: int, per_node: int, gpu: G.Gpu) -> float:
    """Bytes/s per GPU of a collective over ``n_ranks`` consecutive ranks."""
    if n_ranks <= max(1, per_node):
        return gpu.nvlink_gbs / 2 * CONSTANTS["nvlink_efficiency"] * GB
    return CONSTANTS["internode_gbs"] * GB


def _gpu(name: Any) -> G.Gpu:
    return G.GPUS.get(str(name)) or G.GPUS[G.DEFAULT_GPU]


def actor_times(c: Mapping[str, Any], gpu: G.Gpu) -> Dict[str, float]:
    """Log-prob passes, train step and optimizer of one RL step on the actor (seconds)."""
    m, p, g = c["model"], c["perf"], c["gpu_layout"]
    lay = layout(c)
    w = workload(c)
    a = active_params(m)
    per_node = int(g["num_gpus"] or 1)
    L = w["context"]
    tokens = w["samples"] * L
    attn_fwd = 4.0 * a["attn_width"] * a["attn_layers"] * (L / 2.0)
    fwd = 2.0 * a["active"] + attn_fwd
    rc = recompute(c)
    full = rc["granularity"] == "full"
    train_flops = tokens * fwd * (4.0 if full else 3.0)
    kl = bool(c["grpo"].get("use_kl_loss"))
    lp_passes = 1 + int(kl)
    lp_flops = tokens * fwd * lp_passes
    rank = P.per_rank(m, tp=lay.tp, pp=lay.pp, ep=lay.ep, etp=lay.etp)
    T = tokens_per_gpu(c)
    peak = gpu.bf16_tflops * 1e12
    # The calibrated fraction (benchmarks/step_time_reference.json) was fitted with the active
    # parameters one rank multiplies per token and attention's share of the forward FLOPs: every
    # expert counted would make an MoE rank look saturated (about 30% too fast at 8k tokens).
    share = attn_fwd / fwd if fwd else 0.0
    per_rank_active = a["active"] / (lay.tp * lay.pp)
    f_train = achieved_fraction(per_rank_active, T, recompute=full, attention_share=share)
    f_lp = achieved_fraction(per_rank_active, T, recompute=False, attention_share=share)
    world = lay.world
    train_compute = train_flops / world / (peak * f_train)
    lp_compute = lp_flops / world / (peak * f_lp)
    # Tokens one GPU's layers see in one forward: its DP rank's share, split by CP.
    tok_gpu = tokens / lay.dp / lay.cp
    h = int(m["hidden_size"])
    layers_gpu = -(-int(m["num_layers"]) // lay.pp)
    fwd_comm = 0.0
    if lay.tp > 1:
        fwd_comm += tok_gpu * layers_gpu * 4 * h * 2 * (lay.tp - 1) / lay.tp / _link(lay.tp, per_node, gpu)
    if lay.cp > 1:
        nkv = int(m.get("num_query_groups") or m["num_attention_heads"])
        kv_tok = (2 * (int(m["kv_lora_rank"]) + int(m["qk_pos_emb_head_dim"])) if m.get("multi_latent_attention")
                  else 2 * nkv * P.head_dim(m)) * 2
        fwd_comm += tok_gpu * layers_gpu * kv_tok * (lay.cp - 1) / _link(lay.tp * lay.cp, per_node, gpu)
    if lay.ep > 1 and m.get("num_experts"):
        moe_layers = sum(P.moe_pattern(m)) / lay.pp
        topk = int(m.get("moe_router_topk") or 1)
        fwd_comm += (tok_gpu * moe_layers * 2 * topk * h * 2 * (lay.ep - 1) / lay.ep
                     / _link(lay.ep * lay.etp, per_node, gpu))
    pp_p2p = 0.0
    bubble_train = bubble_lp = 0.0
    steps = max(1, int(effective(c, "rollout.num_steps_per_rollout") or 1))
    if lay.pp > 1:
        pp_p2p = tok_gpu * h * 2 / _link(per_node + 1 if world > per_node else 1, per_node, gpu)
        micro = max(1, math.ceil(tokens / lay.dp / steps / max(1, T * lay.cp)))
        bubble_train = train_compute * (lay.pp - 1) / micro
        bubble_lp = lp_compute * (lay.pp - 1) / micro
    # Backward moves each forward collective's bytes once more (CP: twice); recompute re-runs forward.
    train_comm = fwd_comm * (2.0 + (1.0 if full else 0.0)) + pp_p2p * 2
    lp_comm = (fwd_comm + pp_p2p) * lp_passes
    grad_bytes = 4 if p["accumulate_allreduce_grads_in_fp32"] else 2
    dp_comm = 0.0
    if lay.dp > 1:
        dp_comm = steps * rank.total * (grad_bytes + 2) * (lay.dp - 1) / lay.dp / _link(world, per_node, gpu)
    shard = rank.dense / lay.dp + rank.expert / lay.edp
    if c["optimizer"]["cpu_offload"]:
        optim = steps * (shard * (grad_bytes + 2) / (CONSTANTS["pcie_gbs"] * GB)
                         + shard / CONSTANTS["cpu_adam_params_per_s"])
    else:
        # Measured on the H200 (benchmarks/step_time_reference.json): bytes per parameter plus a fixed cost.
        optim = steps * optimizer_step_s(shard, gpu.hbm_gbs)
    return {"train_compute_s": train_compute, "train_comm_s": train_comm, "pp_bubble_s": bubble_train + bubble_lp,
            "dp_comm_s": dp_comm, "optimizer_s": optim, "logprob_compute_s": lp_compute, "logprob_comm_s": lp_comm,
            "achieved_fraction_train": f_train, "achieved_fraction_logprob": f_lp,
            "train_s": train_compute + train_comm + bubble_train + dp_comm + optim,
            "logprob_s": lp_compute + lp_comm + bubble_lp, "tokens": tokens, "tokens_per_microbatch": T,
            "params_per_rank": rank.total, "active_params_per_rank": per_rank_active, "attention_share": share,
            "logprob_passes": lp_passes}


def _sglang_dp(c: Mapping[str, Any]) -> int:
    args = c.get("args") or {}
    return int(args.get("sglang_dp_size") or 1) if args.get("sglang_enable_dp_attention") else 1


def rollout_times(c: Mapping[str, Any], gpu: G.Gpu, kv_tokens_per_engine: int, engines: int) -> Dict[str, float]:
    """Decode, prefill and queueing of one RL step's generation on the SGLang engines (seconds)."""
    m, s, g, r = c["model"], c["sglang"], c["gpu_layout"], c["rollout"]
    if not g.get("rollout_engine", True) or engines <= 0:
        return {"rollout_s": 0.0, "decode_s": 0.0, "prefill_s": 0.0, "batch_per_engine": 0, "waves": 0}
    w = workload(c)
    a = active_params(m)
    tp = max(1, int(s["tp"]))
    dp = _sglang_dp(c)
    attn_tp = max(1, tp // dp)
    agentic = (c.get("sandbox") or {}).get("backend", "none") != "none"
    concurrent = int(r["train_num_workers"]) if agentic else w["samples"]
    per_engine = math.ceil(w["samples"] / engines)
    mean_ctx = w["prefill"] + w["generated"] / 2.0
    kv_fit = int(kv_tokens_per_engine // max(1.0, mean_ctx))
    max_running = max(1, kv_tokens_per_engine // 2)
    batch = max(1, min(math.ceil(concurrent / engines), per_engine, max(1, kv_fit), max_running))
    waves = math.ceil(per_engine / batch)
    total_rank = weights_per_rank(m, tp)
    experts = int(m.get("num_experts") or 0)
    expert_rank = 2.0 * sum(lp.expert for lp in P.layer_params(m)) / tp if experts else 0.0
    cell = cell_bytes(m, attn_tp)
    comm_t = 2 * int(m["num_layers"]) * CONSTANTS["allreduce_latency_s"] if tp > 1 else 0.0

    def iteration(b: int) -> Dict[str, float]:
        """One decode iteration of an engine running ``b`` requests: each rank reads its weight shard (for
        MoE only the experts the batch routes to) and the batch's KV, or computes, whichever is longer."""
        weights_read = float(total_rank)
        if experts:
            touched = 1.0 - (1.0 - int(m["moe_router_topk"] or 1) / experts) ** b
            weights_read = total_rank - expert_rank * (1.0 - touched)
        kv_read = (b / dp) * mean_ctx * cell
        mem_t = (weights_read + kv_read) / (gpu.hbm_gbs * GB * CONSTANTS["decode_bw_efficiency"])
        flops_t = b * (2.0 * a["active"] + 4.0 * a["attn_width"] * a["attn_layers"] * mean_ctx) / tp \
            / (gpu.bf16_tflops * 1e12 * CONSTANTS["prefill_efficiency"])
        return {"s": max(mem_t, flops_t) + comm_t + CONSTANTS["decode_iteration_overhead_s"],
                "bytes": weights_read + kv_read, "bound": "compute" if flops_t > mem_t else "memory"}

    full = iteration(batch)
    # Full waves of ``batch`` requests, then the rest: each wave decodes for the generated tokens.
    rest = per_engine - (waves - 1) * batch
    decode = w["generated"] * ((waves - 1) * full["s"] + iteration(rest)["s"])
    prefill_flops = per_engine * w["prefill"] * (2.0 * a["active"]
                                                  + 4.0 * a["attn_width"] * a["attn_layers"] * w["prefill"] / 2.0)
    prefill = prefill_flops / (tp * gpu.bf16_tflops * 1e12 * CONSTANTS["prefill_efficiency"])
    return {"rollout_s": decode + prefill, "decode_s": decode, "prefill_s": prefill, "batch_per_engine": batch,
            "waves": waves, "decode_iteration_s": full["s"], "decode_bytes_per_rank": full["bytes"],
            "decode_bound": full["bound"]}


def servers(c: Mapping[str, Any], engines: int) -> int:
    """SGLang servers: an engine larger than a node is one server over several nodes (slime counts
    its per-node parts as engines)."""
    g, tp = c["gpu_layout"], max(1, int(c["sglang"]["tp"]))
    per_node = int(g["num_gpus"] or 1)
    if tp <= per_node:
        return engines
    gpus = int(g["actor_gpus"]) * int(g["actor_num_nodes"]) if g["colocate"] else int(g["rollout_gpus"] or 0)
    return max(1, gpus // tp)


def step_time(c: Mapping[str, Any], gpu: Any = None, *, memory: Optional[Mapping[str, Any]] = None) -> StepTime:
    """One RL step of the effective config ``c`` (:func:`clawgym.trainer.effective.effective_config`) on
    ``gpu`` (a GPU table name; None: ``memory.gpu``, else the table's default). ``memory``: the
    run's memory plan dict (``MemoryPlan.to_dict()``), computed here when not given."""
    name = gpu or (c.get("memory") or {}).get("gpu") or G.DEFAULT_GPU
    card = _gpu(name)
    if memory is None:
        from clawgym.memory import evaluate

        memory = evaluate(c, str(name)).to_dict()
    g = c["gpu_layout"]
    lay = layout(c)
    per_node = int(g["num_gpus"] or 1)
    act = actor_times(c, card)
    ro = memory["rollout"]
    rol = rollout_times(c, card, int(ro["kv_tokens_per_engine"]), servers(c, int(ro["engines"])))
    total = P.count(c["model"]).total
    bytes_ = 2.0 * total
    colocate = bool(g["colocate"])
    gather = bytes_ / lay.world / _link(lay.world, per_node, card) if lay.world > 1 else 0.0
    if not g.get("rollout_engine", True):
        update = 0.0
    elif colocate:
        update = gather + bytes_ / max(1, int(c["sglang"]["tp"])) / (card.hbm_gbs * GB)
    else:
        span = lay.world + int(g["rollout_gpus"] or 0)
        update = gather + bytes_ / _link(span, per_node, card)
    offload = 0.0
    if colocate:
        from clawgym.memory.actor import actor_memory

        static = actor_memory(c).static_gib * float(1 << 30)
        offload = 2.0 * static / (CONSTANTS["pcie_gbs"] * GB)
    gpus = lay.world if colocate else lay.world + int(g["rollout_gpus"] or 0)
    actor = act["logprob_s"] + act["train_s"]
    if colocate or g.get("trainer_script") == "train.py":
        step = rol["rollout_s"] + actor + update + offload
        schedule = "sequential"
    else:
        step = max(rol["rollout_s"], actor) + update
        schedule = "async: rollout overlaps training"
    tokens = act["tokens"]
    terms = {**{k: v for k, v in act.items() if k not in ("train_s", "logprob_s")},
             **{k: v for k, v in rol.items() if k != "rollout_s"}, "schedule": schedule, "gpu": str(name),
             "weight_update_bytes": bytes_, **workload(c)}
    r6 = lambda x: round(float(x), 6)  # noqa: E731
    return StepTime(rollout_s=r6(rol["rollout_s"]), logprob_s=r6(act["logprob_s"]), train_s=r6(act["train_s"]),
                    weight_update_s=r6(update), offload_s=r6(offload), step_s=r6(step),
                    tok_s_per_gpu=r6(tokens / step / max(1, gpus)) if step > 0 else 0.0, gpus=gpus,
                    terms={k: (r6(v) if isinstance(v, float) else v) for k, v in terms.items()})
