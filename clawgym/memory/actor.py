"""The Megatron actor on one GPU: static state, a train step's peak, a log-prob pass's peak.

Terms (bytes; GiB = 2^30 bytes), for the largest pipeline stage of one rank:

* weights: bf16, 2 bytes per parameter the rank holds.
* gradients: Megatron's DDP grad buffer, 4 bytes (``--accumulate-allreduce-grads-in-fp32``) or 2.
* optimizer (distributed optimizer, which slime forces on): fp32 main params and Adam's two
  moments, 4 + 4 + 4 bytes, sharded over data parallel (dense parameters over TP x PP's DP
  group, expert parameters over the expert-DP group); the precision-aware optimizer's
  ``--main-params-dtype`` / ``--exp-avg-dtype`` / ``--exp-avg-sq-dtype`` change the widths.
  ``--optimizer-cpu-offload`` moves ``--optimizer-offload-fraction`` (1.0) of it to host RAM.
* activations of the tokens one GPU holds in a micro-batch (``max_tokens_per_gpu`` with dynamic
  batching, else micro-batch x sequence; a sample longer than the budget is a micro-batch of its
  own), divided by CP, by TP for the tensor-parallel parts and, with sequence parallel, for the
  hidden-size parts too; saved for backward per layer, or only each recompute unit's input.
* logits: the output layer's [T, V/TP] bf16 result, slime's fp32 copy of it (``logits.float()`` in
  ``model_provider``), a second fp32 copy for the rollout temperature (``logits / temperature`` in
  ``loss.get_log_probs_and_entropy``), the per-chunk softmax scratch of
  ``ppo_utils.calculate_log_probs_and_entropy`` (``--log-probs-chunk-size``), and in training the
  fp32 gradient of the logits.
* overhead (``overhead_gib``, outside torch's max_memory_allocated): CUDA context, NCCL buffers,
  and allocator fragmentation as a share of the peak.

The coefficients of the activation and logit terms are calibrated against the H200 reference
points (benchmarks/memory_reference.json; see tests/test_memory_reference.py).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Dict, Mapping

from clawgym.trainer.effective import effective
from clawgym.memory import params as P

GIB = float(1 << 30)

#: Documented constants (GiB or ratios); the calibration points hold the estimate to them.
CONSTANTS: Dict[str, float] = {
    # CUDA context + cuBLAS workspaces of one torch process (outside the allocator): measured 2.42 GiB
    # on the H200 reference points (benchmarks/memory_reference.json, outside_allocator_gib).
    "cuda_context_gib": 2.4,
    # NCCL communicator buffers per process-group kind in use beyond one GPU (TP, DP, PP, CP, EP).
    "nccl_per_group_gib": 0.25,
    # Allocator fragmentation: reserved over allocated at the peak, as a share of the peak
    # (reference points: 0% to 9%, median 4%).
    "fragmentation": 0.06,
    # Saved-for-backward activations relative to the tensor count in _layer_act_bytes (reference
    # points without recompute: 0.99x to 1.13x of it).
    "act_scale": 1.08,
    # Bytes per token per vocabulary entry (of the TP shard) at a train step's peak (the logits'
    # backward: fp32 logits and their fp32 gradient; the bf16 output is freed): reference 8.0.
    "train_logit_bytes": 8.0,
    # ... of a no-grad log-prob pass: the bf16 output and its fp32 copy (reference 6.0); past the
    # copy, the fp32 logits and a chunk's softmax (4 + 4 x chunk / T).
    "logprob_logit_bytes": 6.0,
    # Another fp32 [T, V/TP] when the rollout temperature is not 1 (``logits / temperature`` in
    # slime's get_log_probs_and_entropy): reference points at 0.7 show it in both phases.
    "temperature_copy_bytes": 4.0,
}


@dataclass
class Layout:
    tp: int
    pp: int
    cp: int
    ep: int
    etp: int
    sp: bool
    world: int
    dp: int
    edp: int


def layout(c: Mapping[str, Any]) -> Layout:
    p, g = c["perf"], c["gpu_layout"]
    tp, pp, cp = int(p["tensor_parallel"]), int(p["pipeline_parallel"]), int(p["context_parallel"])
    ep, etp = int(p["expert_parallel"] or 1), int(p["expert_tensor_parallel"] or 1)
    world = int(g["actor_gpus"]) * int(g["actor_num_nodes"])
    return Layout(tp, pp, cp, ep, etp, bool(p["sequence_parallel"]) and tp > 1, world,
                  max(1, world // max(1, tp * pp * cp)), max(1, world // max(1, ep * etp * pp)))


def _dtype_bytes(name: Any, default: int) -> int:
    return {"fp32": 4, "float32": 4, "bf16": 2, "fp16": 2, "fp8": 1, "uint8": 1}.get(str(name), default) \
        if name is not None else default


def context_len(c: Mapping[str, Any]) -> int:
    """The longest sample: rollout.max_context_len, else a response plus slime's default prompt bound."""
    r, m = c["rollout"], c["model"]
    if r["max_context_len"]:
        return int(r["max_context_len"])
    if r["max_response_len"]:
        return int(r["max_response_len"]) + 4096
    # No response bound (null): SGLang generates up to the model's context.
    return int(c["sglang"].get("context_length") or m.get("max_position_embeddings") or m.get("seq_length") or 4096)


def tokens_per_gpu(c: Mapping[str, Any]) -> int:
    """Tokens one GPU holds in its largest micro-batch."""
    lay = layout(c)
    longest = -(-context_len(c) // lay.cp)
    if c["perf"]["use_dynamic_batch_size"]:
        budget = effective(c, "perf.max_tokens_per_gpu")
        if budget:
            # slime packs samples up to the budget; one longer sample is a micro-batch of its own.
            return max(int(budget), longest)
    mbs = int((c.get("args") or {}).get("micro_batch_size") or 1)
    return mbs * longest


def _layer_act_bytes(m: Mapping[str, Any], lay: Layout, moe: bool) -> float:
    """Saved-for-backward bytes of one layer per token (bf16), no recompute, flash attention: the
    norms' inputs, the linear layers' inputs, QKV's output, the QK-normed and rotated q/k, the
    attention's inputs and output, the MLP's fc1 output and activation (per routed copy for MoE)."""
    h, nq = int(m["hidden_size"]), int(m["num_attention_heads"])
    hs = h / (lay.tp if lay.sp else 1)
    if m.get("multi_latent_attention"):
        qk, rope, vd = int(m["qk_head_dim"]), int(m["qk_pos_emb_head_dim"]), int(m["v_head_dim"])
        q, k, v = nq * (qk + rope), nq * (qk + rope), nq * vd
        latent = int(m.get("q_lora_rank") or 0) + int(m["kv_lora_rank"]) + rope
    else:
        d = P.head_dim(m)
        nkv = int(m["num_query_groups"] or nq)
        q, k, v = nq * d * (2 if m.get("attention_output_gate") else 1), nkv * d, nkv * d
        latent = 0
    # QKV output, normed q/k, rotated q/k, attention inputs, attention output (and its copy).
    attn = ((q + 2 * k) + (q + k) + (q + k) + (q + k + v) + 2 * q) / lay.tp + latent
    width = 4 * hs + attn
    up = 2 if m.get("swiglu", True) else 1
    if moe:
        f, topk = int(m["moe_ffn_hidden_size"]), int(m["moe_router_topk"] or 1)
        # Routed copies in and out, fc1 output, activation output; router logits in fp32.
        width += topk * (2 * h + (up + 1) * f) / lay.etp + 2 * int(m["num_experts"])
        s = m.get("moe_shared_expert_intermediate_size")
        if s:
            width += (up + 1) * int(s) / lay.tp
    else:
        width += (up + 1) * int(m["ffn_hidden_size"]) / lay.tp
    return 2.0 * width * CONSTANTS["act_scale"]


@dataclass
class ActorMemory:
    params_total: int
    params_per_gpu: int
    weights_gib: float
    grads_gib: float
    optimizer_gpu_gib: float
    optimizer_host_gib: float
    static_gib: float
    activations_gib: float
    logits_train_gib: float
    logits_logprob_gib: float
    train_peak_gib: float
    logprob_peak_gib: float
    overhead_gib: float
    tokens_per_gpu: int
    terms: Dict[str, Any] = field(default_factory=dict)


def recompute(c: Mapping[str, Any]) -> Dict[str, Any]:
    p = c["perf"]
    gran = effective(c, "perf.recompute_granularity")
    return {"granularity": gran, "method": effective(c, "perf.recompute_method") if gran == "full" else None,
            "num_layers": int(effective(c, "perf.recompute_num_layers") or 1) if gran == "full" else None,
            "raw": p.get("recompute_granularity")}


def actor_memory(c: Mapping[str, Any]) -> ActorMemory:
    m, o, p = c["model"], c["optimizer"], c["perf"]
    args = c.get("args") or {}
    lay = layout(c)
    counts = P.count(m)
    rank = P.per_rank(m, tp=lay.tp, pp=lay.pp, ep=lay.ep, etp=lay.etp)
    weights = 2.0 * rank.total
    grads = (4.0 if p["accumulate_allreduce_grads_in_fp32"] else 2.0) * rank.total
    if o["use_precision_aware_optimizer"]:
        per_param = (_dtype_bytes(args.get("main_params_dtype"), 4) + _dtype_bytes(args.get("exp_avg_dtype"), 4)
                     + _dtype_bytes(args.get("exp_avg_sq_dtype"), 4))
    else:
        per_param = 12
    optim = per_param * (rank.dense / lay.dp + rank.expert / lay.edp)
    frac = float(args.get("optimizer_offload_fraction") or 1.0) if o["cpu_offload"] else 0.0
    optim_gpu, optim_host = optim * (1 - frac), optim * frac
    static = weights + grads + optim_gpu

    T = tokens_per_gpu(c)
    layers = P.moe_pattern(m)
    per_stage = -(-len(layers) // lay.pp)
    stage = layers[:per_stage]
    # One value per kind of layer (dense, MoE): the layout search calls this thousands of times.
    kinds = {k: _layer_act_bytes(m, lay, bool(k)) for k in set(stage)}
    acts = [kinds[x] for x in stage]
    h = int(m["hidden_size"])
    layer_in = 2.0 * h / (lay.tp if lay.sp else 1)
    rc = recompute(c)
    vshard = P.padded_vocab(m, lay.tp) / lay.tp
    temp = CONSTANTS["temperature_copy_bytes"] if float(c["rollout"]["temperature"]) != 1.0 else 0.0
    chunk = effective(c, "perf.log_probs_chunk_size")
    chunk = int(chunk) if chunk and int(chunk) > 0 else T
    chunk = min(chunk, T)
    # The loss's peak is in its backward: logits, their gradient and the hidden-state gradient.
    logits_train = T * vshard * (CONSTANTS["train_logit_bytes"] + temp) + T * 2 * layer_in
    # Log-prob pass: the bf16 output beside its fp32 copy, or later the fp32 logits, the temperature's
    # copy (the bf16 output is gone by then) and one chunk's softmax.
    logits_lp = T * vshard * max(CONSTANTS["logprob_logit_bytes"], 4.0 + temp + 4.0 * chunk / T)
    # Pipeline schedules keep up to PP micro-batches in flight on the first stage.
    in_flight = lay.pp
    if rc["granularity"] == "full":
        n = max(1, rc["num_layers"] or 1)
        if rc["method"] == "block":
            kept = T * (min(n, len(acts)) * layer_in + sum(acts[n:]))
            recomputed = T * max(acts[:n] or [0])
        else:
            kept = T * -(-len(acts) // n) * layer_in
            recomputed = T * n * max(acts)
        # Each unit's input is kept; backward recomputes one unit at a time once the loss's
        # buffers are gone: the peak is the larger of the two moments.
        activations = kept * in_flight
        train_extra = max(logits_train, recomputed)
    else:
        # Selective recompute of core attention saves nothing more with flash attention.
        activations = T * sum(acts) * in_flight
        train_extra = logits_train
    # A no-grad pass holds one layer's working set at a time, never beside the logits.
    lp_work = T * (2 * layer_in + max(acts))

    train_peak = static + activations + train_extra
    logprob_peak = static + max(lp_work, logits_lp)
    groups = sum(1 for x in (lay.tp, lay.dp, lay.pp, lay.cp, lay.ep) if x > 1)
    overhead = CONSTANTS["cuda_context_gib"] + CONSTANTS["nccl_per_group_gib"] * groups \
        + CONSTANTS["fragmentation"] * max(train_peak, logprob_peak) / GIB
    g = lambda b: round(b / GIB, 3)  # noqa: E731
    return ActorMemory(
        params_total=counts.total + counts.mtp, params_per_gpu=rank.total,
        weights_gib=g(weights), grads_gib=g(grads), optimizer_gpu_gib=g(optim_gpu), optimizer_host_gib=g(optim_host),
        static_gib=g(static), activations_gib=g(activations), logits_train_gib=g(logits_train),
        logits_logprob_gib=g(logits_lp), train_peak_gib=g(train_peak), logprob_peak_gib=g(logprob_peak),
        overhead_gib=round(overhead, 3), tokens_per_gpu=T,
        terms={"tp": lay.tp, "pp": lay.pp, "cp": lay.cp, "ep": lay.ep, "etp": lay.etp, "dp": lay.dp,
               "expert_dp": lay.edp, "sequence_parallel": lay.sp, "recompute": rc["granularity"],
               "recompute_method": rc["method"], "recompute_num_layers": rc["num_layers"],
               "log_probs_chunk_size": chunk, "padded_vocab": P.padded_vocab(m, lay.tp),
               "grad_bytes": 4 if p["accumulate_allreduce_grads_in_fp32"] else 2,
               "optimizer_bytes_per_param": per_param, "optimizer_offload_fraction": frac,
               "params_dense_per_gpu": rank.dense, "params_expert_per_gpu": rank.expert,
               "params_mtp": counts.mtp})


def ceil_div(a: float, b: float) -> int:
    return int(math.ceil(a / b))
