"""The SGLang rollout engines on their GPUs: weights per engine TP rank, the KV pool, and how
many trajectories fit in it at full context.

SGLang sizes the KV pool from ``mem_fraction_static`` (both flavours' versions, recorded from
their source by tools/gen_sglang_memory.py into data/sglang_memory.json)::

    kv_pool = free_after_weights - free_before_weights x (1 - mem_fraction_static)
            = mem_fraction_static x free_before_weights - weights_per_rank
    kv_tokens = kv_pool // cell_bytes
    cell_bytes (MHA/GQA) = kv_heads_per_attention_tp_rank x (head_dim + v_head_dim) x attention layers x 2
    cell_bytes (MLA)     = (kv_lora_rank + qk_rope_head_dim) x layers x 2

With ``mem_fraction_static`` null SGLang picks it: (gpu_mem - reserved) / gpu_mem, reserved =
512 MiB + 1.5 MiB x max(chunked_prefill_size, 2048) + 2 MiB x cuda_graph_max_bs + TP x PP / 8 GiB,
at least 10 GiB on GPUs over 60 GiB. Hybrid linear-attention models keep KV only for their full
attention layers (their recurrent state pool is left out). DP attention (``args.sglang_enable_dp_attention``,
``args.sglang_dp_size``) divides the attention TP size by the DP size.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any, Dict, Mapping, Optional

from clawgym.memory import params as P

GIB = float(1 << 30)
#: Memory outside the KV pool and weights that a SGLang process holds anyway (CUDA context).
SGLANG_CONTEXT_GIB = 0.75
#: What an engine offloaded by its memory saver (colocated runs) leaves on the GPU: CUDA context
#: and CUDA graphs' private pools.
SGLANG_OFFLOADED_RESIDUE_GIB = 2.0


@lru_cache(maxsize=1)
def sglang_data() -> Dict[str, Any]:
    return json.loads((Path(__file__).parent / "data" / "sglang_memory.json").read_text())


def working_mib(flavour: str, gpu_mib: float, tp: int, pp: int = 1) -> float:
    """SGLang's working memory outside ``mem_fraction_static`` (MiB), as SGLang sizes it: what
    ``ServerArgs._handle_gpu_memory_settings`` (sglang/srt/server_args.py, 0.5.9 lines 1022-1031; the
    lines of each flavour's version are in data/sglang_memory.json "found") reserves for metadata, the
    activations of one chunked prefill (1.5 MiB per token of max(chunked_prefill_size, 2048)), the CUDA
    graphs (2 MiB per batch size up to cuda_graph_max_bs) and TP x PP / 8 GiB of parallel buffers, with
    its per-GPU-size defaults of chunked_prefill_size and cuda_graph_max_bs. The KV pool is sized from
    the rest (model_runner_kv_cache_mixin.py: free_after_weights - free_before x (1 - mem_fraction_static)),
    so a fraction that leaves less than this starts without room to capture its CUDA graphs or run a
    prefill."""
    d = sglang_data()["flavours"].get(flavour) or sglang_data()["flavours"]["clawgym"]
    a = d["auto_fraction"]
    chunk, bs = 4096, 160
    for upper, ch, bs_small, bs_large in a["tiers"]:
        if upper is None or gpu_mib < upper:
            chunk, bs = ch, (bs_small if tp < 4 else bs_large)
            break
    return a["reserved_base_mib"] + max(chunk, a["prefill_min_tokens"]) * a["prefill_per_token_mib"] \
        + bs * a["cuda_graph_per_bs_mib"] + tp * pp / 8 * a["per_tp_pp_over_8_mib"]


def auto_fraction(flavour: str, gpu_mib: float, tp: int, pp: int = 1) -> float:
    """SGLang's own ``mem_fraction_static`` when it is None (``ServerArgs._handle_gpu_memory_settings``):
    its working memory (:func:`working_mib`) kept back, at least 10 GiB on GPUs over 60 GiB."""
    a = (sglang_data()["flavours"].get(flavour) or sglang_data()["flavours"]["clawgym"])["auto_fraction"]
    reserved = working_mib(flavour, gpu_mib, tp, pp)
    if gpu_mib > a["floor_above_mib"]:
        reserved = max(reserved, a["floor_mib"])
    return round((gpu_mib - reserved) / gpu_mib, 3)


def cell_bytes(m: Mapping[str, Any], attn_tp: int, kv_bytes: int = 2) -> int:
    """KV bytes per token on one engine rank, all layers."""
    layers = int(m["num_layers"])
    fam = m.get("family") or ""
    lin = P.LINEAR_ATTENTION.get(fam) if m.get("use_gated_attention") else None
    if lin is not None:
        layers = sum(1 for i in range(layers) if (i + 1) % lin["interval"] == 0)
    if m.get("multi_latent_attention"):
        cell = (int(m["kv_lora_rank"]) + int(m["qk_pos_emb_head_dim"])) * layers * kv_bytes
        idx = P.DSA_INDEXER.get(fam)
        if idx is not None:
            # DSA indexer keys in fp8 with one fp32 scale per 128 values.
            cell += (idx["head_dim"] + idx["head_dim"] // 128 * 4) * layers
        return cell
    nkv = int(m["num_query_groups"] or m["num_attention_heads"])
    heads = max(1, nkv // max(1, attn_tp))
    d = P.head_dim(m)
    return heads * (d + d) * layers * kv_bytes


@dataclass
class RolloutMemory:
    engines: int
    engine_tp: int
    attention_tp: int
    mem_fraction_static: float
    mem_fraction_auto: bool
    weights_gib: float
    kv_pool_gib: float
    kv_cell_bytes: int
    kv_tokens_per_engine: int
    kv_tokens_needed: int
    concurrent_trajectories: int
    context_len: int
    trajectories_fit_per_engine: int
    trajectories_fit: int
    static_gib: float
    # SGLang's working memory outside the static fraction (CUDA graphs, activations; working_mib).
    working_gib: float = 0.0
    notes: list = field(default_factory=list)


def weights_per_rank(m: Mapping[str, Any], tp: int) -> int:
    """bf16 weight bytes on one engine rank (SGLang splits attention, MLP, experts and vocab by TP)."""
    layers = P.layer_params(m)
    h = int(m["hidden_size"])
    emb = P.padded_vocab(m, tp) // tp * h
    out = emb if m.get("untie_embeddings_and_output_weights") else 0
    body = sum(lp.tp // tp + lp.rep + lp.expert // tp for lp in layers)
    return 2 * (emb + out + body + h)


def rollout_memory(c: Mapping[str, Any], gpu_gib: float, context_len: int) -> RolloutMemory:
    m, s, g, r = c["model"], c["sglang"], c["gpu_layout"], c["rollout"]
    args = c.get("args") or {}
    tp = max(1, int(s["tp"]))
    gpus = int(g["actor_gpus"]) * int(g["actor_num_nodes"]) if g["colocate"] else int(g["rollout_gpus"])
    # slime: num_engines = rollout GPUs // min(gpus per engine, GPUs per node).
    engines = max(1, gpus // min(tp, int(g["num_gpus"]) or tp))
    dp = int(args.get("sglang_dp_size") or 1) if args.get("sglang_enable_dp_attention") else 1
    attn_tp = max(1, tp // dp)
    flavour = str((c.get("trainer") or {}).get("flavour") or "clawgym")
    frac = s.get("mem_fraction_static")
    auto = frac is None
    if auto:
        frac = auto_fraction(flavour, gpu_gib * 1024, tp)
    free_before = gpu_gib - SGLANG_CONTEXT_GIB
    weights = weights_per_rank(m, tp)
    kv_pool = max(0.0, float(frac) * free_before - weights / GIB)
    cell = cell_bytes(m, attn_tp)
    kv_tokens = int(kv_pool * GIB) // cell
    # DP attention: each attention-DP rank has its own pool of that size.
    kv_tokens_engine = kv_tokens * dp
    agentic = (c.get("sandbox") or {}).get("backend", "none") != "none"
    concurrent = int(r["train_num_workers"]) if agentic else int(r["batch_size"] or 0) * int(r["n_samples_per_prompt"])
    if not g.get("rollout_engine", True):
        # SFT (--debug-train-only): no engine starts, nothing is generated.
        return RolloutMemory(
            engines=0, engine_tp=tp, attention_tp=attn_tp, mem_fraction_static=0.0, mem_fraction_auto=False,
            weights_gib=0.0, kv_pool_gib=0.0, kv_cell_bytes=cell, kv_tokens_per_engine=0, kv_tokens_needed=0,
            concurrent_trajectories=0, context_len=context_len, trajectories_fit_per_engine=0, trajectories_fit=0,
            static_gib=0.0, notes=["no rollout engine (gpu_layout.rollout_engine=false): nothing is generated"])
    fit_engine = kv_tokens_engine // max(1, context_len)
    notes = []
    if fit_engine * engines < concurrent:
        notes.append(f"{fit_engine * engines} of {concurrent} concurrent trajectories fit in the KV cache at full "
                     f"context ({context_len} tokens); past that SGLang queues new requests and retracts running "
                     f"ones (recomputing them later) as contexts grow")
    return RolloutMemory(
        engines=engines, engine_tp=tp, attention_tp=attn_tp, mem_fraction_static=float(frac), mem_fraction_auto=auto,
        weights_gib=round(weights / GIB, 3), kv_pool_gib=round(kv_pool, 3), kv_cell_bytes=cell,
        kv_tokens_per_engine=kv_tokens_engine, kv_tokens_needed=concurrent * context_len,
        concurrent_trajectories=concurrent, context_len=context_len, trajectories_fit_per_engine=fit_engine,
        trajectories_fit=fit_engine * engines,
        static_gib=round(float(frac) * free_before + SGLANG_CONTEXT_GIB, 3),
        working_gib=round(working_mib(flavour, gpu_gib * 1024, tp) / 1024, 3), notes=notes)


def engine_tp_choices(c: Mapping[str, Any]) -> list:
    g = c["gpu_layout"]
    gpus = int(g["actor_gpus"]) if g["colocate"] else int(g["rollout_gpus"])
    return [t for t in (1, 2, 4, 8) if t <= max(1, min(gpus, int(g["num_gpus"])))]


