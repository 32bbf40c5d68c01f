"""Measure real GPU memory of Megatron train steps and slime log-prob passes (issue 15, item 3).

Runs on the lent H200 (``device`` tool), never in CI and never on the launcher's import path:
it needs torch, Megatron-core and slime, which clawgym itself never imports. Its results are
committed as data: ``benchmarks/memory_reference.json`` (the memory plan's test holds the
estimator to every point there).

How it was run (the device machine sends the checkout the session started in, so the sources
travel in a git-excluded folder ``.calib/`` of that checkout, named in ``carry``)::

    .calib/measure_memory.py          this file
    .calib/megatron/                  megatron/core of NVIDIA/Megatron-LM@1dcf0dafa884ad52ffb243625717a3471643e087
                                      (upstream slime v0.3.1's pin), pure Python, uncommitted
    .calib/slime/                     THUDM/slime@v0.3.1 (a6272da0), the ``slime/`` package, uncommitted

    # on the device (torch 2.11 cu130, no TE, no apex, no network):
    PYTHONPATH=.calib python3 .calib/measure_memory.py --all --out $OUT/points.jsonl

    # then, here (no torch needed): the agreed reference file from what came back under $OUT
    python3 benchmarks/measure_memory.py --assemble points1.jsonl points2.jsonl points3.jsonl \
        --out benchmarks/memory_reference.json

Step time (issue 25, item 3): ``--time-all`` runs every ``TIME_RUNS`` entry (one process per model
and recompute setting, timing several tokens-per-micro-batch in it) and ``--assemble-times`` writes
``benchmarks/step_time_reference.json`` (``tests/test_step_time_reference.py`` holds the step-time
model to every point)::

    PYTHONPATH=.devwork python3 .devwork/measure_memory.py --time-all --out $OUT/times.jsonl
    python3 benchmarks/measure_memory.py --assemble-times times.jsonl --out benchmarks/step_time_reference.json

The committed step-time points were made so on 2026-12-03 (two device calls, 17 runs, 27 points
of which 24 are kept (the 3 SequentialMLP MoE points are listed under ``meta.excluded``), 344 s + 231 s
of wall time on the device, ~12 minutes of device time with the machines' starts)::

    python3 benchmarks/measure_memory.py --assemble-times times.jsonl times2.jsonl \
        --out benchmarks/step_time_reference.json

After ``run_point`` was split into ``_Built`` for the timing runs, q06_t4k_full and q30l2_t8k_full
were measured again (2026-12-03): the same allocated static and peaks to the 4th decimal, reserved
within 0.04 GiB.

The committed memory reference was made so on 2026-12-01/02 (three device calls, 21 configurations,
~12 minutes of device time; each configuration's process takes 20-35 s, most of it imports and
the first step's torch.compile of slime's loss helpers).

``--all`` runs every point of ``POINTS`` below, each in its own process (``--point ID``) so
allocator fragmentation never carries from one configuration to the next. Each process builds
the model, runs train step 1 (Adam moments are allocated lazily there), then a log-prob pass
(measured), then train step 2 (measured: the steady state). ``torch.cuda.empty_cache()`` and
``reset_peak_memory_stats()`` come before each measured phase. The log-prob pass runs with the
optimizer state resident, as in a non-colocated slime run (slime computes the old policy's
log-probs right before training each rollout step).

What the numbers say (V = 151936; "fp32 [T, V]" = 4·T·V bytes, 9.27 GiB at T = 16384):
  * static (weights + fp32 grad buffer + fp32 main params + 2 fp32 moments) = 18.0-18.2 bytes/param;
  * log-prob pass, above static: 1.5 x fp32 [T, V] (the bf16 logits and their fp32 copy coexist at
    Float16Module's cast), chunked; 2.0 x without --log-probs-chunk-size; with a rollout
    temperature != 1 slime's ``logits / temperature`` adds a second fp32 [T, V] (2.0 x + one chunk);
  * train step, above static: 2 x fp32 [T, V] (the fp32 logits and the per-chunk softmax that
    ``_VocabParallelLogProbEntropy`` saves for backward: chunking does not lower the train peak),
    3 x with temperature != 1, plus the activations (full/uniform/1: the layer inputs plus one
    layer's; none: every layer's);
  * selective recompute (core_attn only) saves < 0.1 % against none with flash attention;
  * outside the allocator (CUDA context, NCCL, cuBLAS): 2.42 GiB, constant;
  * reserved - allocated (fragmentation): 0.04-8.5 GiB, up to 16 GiB for a log-prob pass at
    T = 32768 with temperature 0.7 (the large [T, V] blocks).

What runs is the real thing where it can run there:
  * Megatron-core's GPTModel, Float16Module (bf16 weights, fp32 logits out),
    DistributedDataParallel (fp32 grad buffer, ``grad_reduce_in_fp32``), DistributedOptimizer
    at DP=1 (fp32 main params, fp32 Adam moments), ``get_forward_backward_func()`` (the no-pipeline
    schedule), its recompute (full/uniform/N and selective core attention);
  * slime's own ``loss_function`` (-> ``policy_loss_function`` -> ``get_log_probs_and_entropy``
    -> ``calculate_log_probs_and_entropy`` with ``--log-probs-chunk-size``) for the train step,
    and slime's ``get_log_probs_and_entropy`` for the log-prob pass, imported from slime v0.3.1
    unchanged (slime's package import also applies its Megatron grad-coalesce patch).

Stand-ins (each listed in the JSON's ``meta.stand_ins`` too):
  1. Megatron's local layer spec (``get_gpt_layer_local_spec``): no Transformer Engine there.
  2. Core attention: ``torch.nn.functional.scaled_dot_product_attention`` restricted to the flash
     backend (causal, GQA), replacing the local spec's ``DotProductAttention`` (which
     materialises a [heads, T, T] score matrix, unlike production's TE flash attention).
  3. The micro-batch is one causal sequence of T tokens (``packed_seq_params=None``) instead of
     several packed samples (THD + cu_seqlens); slime's loss sees it as T/4096 samples of 4096
     tokens with 3072-token responses (memory of the logits path depends on T only).
  4. Gradient clipping: Megatron's no-apex fallback ``local_multi_tensor_scale`` copies
     ``src * scale`` out of place; replaced by an in-place ``torch._foreach_mul_`` (apex's
     multi_tensor_scale is in place, as production runs it).
  5. Adam: without TE/apex Megatron falls back to ``torch.optim.AdamW``; it is given
     ``fused=True`` (the default foreach path needs +4 bytes/param transiently in step()).
  6. MoE: SequentialMLP (``moe_grouped_gemm=False``) and ``moe_permute_fusion=False``
     (TE's grouped GEMM and fused permutation are not there); alltoall dispatcher at EP=1.
  7. slime's ``args``: an argparse.Namespace holding only the attributes the policy-loss and
     log-prob paths read, with slime's defaults (GRPO, eps_clip 0.2/0.28, entropy_coef 0,
     no KL loss, no TIS); the batch (advantages, old log-probs, loss masks) is random.
  8. Random weights and random token ids (no checkpoint); weights are bf16 throughout.
  9. No ``torch_memory_saver`` / offload (a split layout: train and rollout on different GPUs).
 10. MoE router: ``megatron.core.transformer.moe.moe_utils.te_general_gemm = None`` (Megatron's
     no-TE branch leaves the name undefined; None picks its plain-matmul path).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
import traceback

# Qwen3 shapes, from clawgym's conf/model/*.yaml (the estimator reads the same files).
MODELS = {
    "qwen3_0_6b": dict(hidden=1024, ffn=3072, heads=16, groups=8, layers=28, tied=True, rope=1000000),
    "qwen3_1_7b": dict(hidden=2048, ffn=6144, heads=16, groups=8, layers=28, tied=True, rope=1000000),
    "qwen3_4b": dict(hidden=2560, ffn=9728, heads=32, groups=8, layers=36, tied=True, rope=5000000),
    "qwen3_8b": dict(hidden=4096, ffn=12288, heads=32, groups=8, layers=36, tied=False, rope=1000000),
    "qwen3_14b": dict(hidden=5120, ffn=17408, heads=40, groups=8, layers=40, tied=False, rope=1000000),
    "qwen3_32b": dict(hidden=5120, ffn=25600, heads=64, groups=8, layers=64, tied=False, rope=1000000),
    "qwen3_30b_a3b": dict(
        hidden=2048, ffn=6144, heads=32, groups=4, layers=48, tied=False, rope=1000000,
        experts=128, moe_ffn=768, topk=8,
    ),
}
VOCAB = 151936
KV_CHANNELS = 128

# recompute shorthand -> (granularity, method, num_layers)
RECOMPUTE = {
    "full": ("full", "uniform", 1),
    "none": (None, None, None),
    "selective": ("selective", None, None),
}

# id -> (model, num_layers or None for the model's own, tokens per micro batch, recompute, chunk
#        [, rollout temperature, 1.0 when left out])
POINTS = {
    "q06_t4k_full": ("qwen3_0_6b", None, 4096, "full", 1024),
    "q06_t16k_full": ("qwen3_0_6b", None, 16384, "full", 1024),
    "q06_t32k_full": ("qwen3_0_6b", None, 32768, "full", 1024),
    "q06_t16k_none": ("qwen3_0_6b", None, 16384, "none", 1024),
    "q06_t16k_sel": ("qwen3_0_6b", None, 16384, "selective", 1024),
    "q06_t16k_full_nochunk": ("qwen3_0_6b", None, 16384, "full", -1),
    "q17_t16k_full": ("qwen3_1_7b", None, 16384, "full", 1024),
    "q17_t32k_full": ("qwen3_1_7b", None, 32768, "full", 1024),
    "q17_t8k_none": ("qwen3_1_7b", None, 8192, "none", 1024),
    "q4_t16k_full": ("qwen3_4b", None, 16384, "full", 1024),
    "q4_t32k_full": ("qwen3_4b", None, 32768, "full", 1024),
    "q4l8_t16k_none": ("qwen3_4b", 8, 16384, "none", 1024),
    "q4l8_t16k_sel": ("qwen3_4b", 8, 16384, "selective", 1024),
    "q30l2_t8k_full": ("qwen3_30b_a3b", 2, 8192, "full", 1024),
    "q30l2_t8k_none": ("qwen3_30b_a3b", 2, 8192, "none", 1024),
    "q06_t64k_full": ("qwen3_0_6b", None, 65536, "full", 1024),
    "q30l4_t16k_full": ("qwen3_30b_a3b", 4, 16384, "full", 1024),
    # clawgym's default rollout.temperature (0.7): slime divides the fp32 logits by it
    # (get_log_probs_and_entropy), a second fp32 [T, V] tensor.
    "q06_t16k_full_temp07": ("qwen3_0_6b", None, 16384, "full", 1024, 0.7),
    "q06_t16k_none_temp07": ("qwen3_0_6b", None, 16384, "none", 1024, 0.7),
    "q17_t32k_full_temp07": ("qwen3_1_7b", None, 32768, "full", 1024, 0.7),
    "q4_t16k_full_temp07": ("qwen3_4b", None, 16384, "full", 1024, 0.7),
}

GIB = float(1 << 30)


def point(pid: str):
    model, layers, tokens, rec, chunk, *rest = POINTS[pid]
    return model, layers, tokens, rec, chunk, (rest[0] if rest else 1.0)


def overrides_for(pid: str) -> list[str]:
    """clawgym overrides that describe point ``pid`` (they compose in clawgym)."""
    model, layers, tokens, rec, chunk, temp = point(pid)
    spec = MODELS[model]
    gran, meth, nl = RECOMPUTE[rec]
    out = [f"model={model}"]
    if layers is not None:
        out.append(f"model.num_layers={layers}")
        if "experts" in spec:
            out.append(f"model.moe_layer_freq='[1]*{layers}'")
    out += [
        "gpu_layout=split_1_1",
        f"perf.max_tokens_per_gpu={tokens}",
        "perf.use_dynamic_batch_size=true",
        f"perf.recompute_granularity={gran if gran else 'null'}",
        f"perf.recompute_method={meth if meth else 'null'}",
        f"perf.recompute_num_layers={nl if nl else 'null'}",
        "optimizer.cpu_offload=false",
        "optimizer.use_precision_aware_optimizer=false",
        f"perf.log_probs_chunk_size={chunk if chunk > 0 else 'null'}",
        f"rollout.temperature={temp}",
    ]
    return out


# --------------------------------------------------------------------------- device side


def _install_stand_ins():
    """Stand-ins 2, 4 and 5 of the module docstring."""
    import torch
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel

    import megatron.core.optimizer.clip_grads as clip_grads
    from megatron.core.transformer.module import MegatronModule

    # 5: fused AdamW (Megatron's optimizer/__init__ reads torch.optim.AdamW at call time).
    base_adamw = torch.optim.AdamW

    class FusedAdamW(base_adamw):
        def __init__(self, *a, **kw):
            kw["fused"] = True
            super().__init__(*a, **kw)

    torch.optim.AdamW = FusedAdamW

    # 4: in-place gradient scaling.
    def inplace_scale(_chunk, _noop, tensor_lists, scale):
        src, dst = tensor_lists
        if all(s is d for s, d in zip(src, dst)):
            torch._foreach_mul_(dst, scale)
        else:
            for s, d in zip(src, dst):
                d.copy_(s * scale)

    clip_grads.multi_tensor_scale_impl = inplace_scale

    # 10: Megatron's MoE router reads te_general_gemm, which its no-TE import branch never defines
    # (NameError); None selects the plain torch matmul path that branch is written for.
    import megatron.core.transformer.moe.moe_utils as moe_utils
    if not hasattr(moe_utils, "te_general_gemm"):
        moe_utils.te_general_gemm = None

    # 11: Megatron's legacy GroupedMLP calls the `grouped_gemm` package's ops.gmm (not on the
    # device); torch's own grouped GEMM (torch._grouped_mm, Hopper CUTLASS kernels) does the same
    # product: a [tokens, k] x b [experts, k, n], rows of a grouped by expert.
    import types

    import megatron.core.transformer.moe.grouped_gemm_util as gg

    def gmm(a, b, batch_sizes, trans_b=False):
        if trans_b:
            b = b.transpose(-2, -1)
        offs = torch.cumsum(batch_sizes.to(device=a.device), 0).to(torch.int32)
        try:
            return torch._grouped_mm(a, b, offs=offs)
        except RuntimeError:
            # Some builds want b column-major: the same values, laid out transposed.
            if not getattr(gmm, "warned", False):
                print("gmm: torch._grouped_mm wants column-major b", flush=True)
                gmm.warned = True
            return torch._grouped_mm(a, b.transpose(-2, -1).contiguous().transpose(-2, -1), offs=offs)

    stub = types.SimpleNamespace(ops=types.SimpleNamespace(gmm=gmm))
    gg.grouped_gemm = stub
    gg.ops = stub.ops

    # 2: flash SDPA core attention.
    class FlashSDPA(MegatronModule):
        def __init__(self, config, layer_number, attn_mask_type, attention_type=None,
                     attention_dropout=None, softmax_scale=None, cp_comm_type=None,
                     pg_collection=None, **_):
            super().__init__(config=config)
            self.scale = softmax_scale

        def forward(self, query, key, value, attention_mask=None, attn_mask_type=None,
                    attention_bias=None, packed_seq_params=None):
            s, b = query.shape[0], query.shape[1]
            q, k, v = (t.permute(1, 2, 0, 3) for t in (query, key, value))  # [b, h, s, d]
            with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
                try:
                    o = F.scaled_dot_product_attention(q, k, v, is_causal=True, scale=self.scale,
                                                       enable_gqa=True)
                except RuntimeError:
                    rep = q.shape[1] // k.shape[1]
                    o = F.scaled_dot_product_attention(
                        q, k.repeat_interleave(rep, 1), v.repeat_interleave(rep, 1),
                        is_causal=True, scale=self.scale)
            return o.permute(2, 0, 1, 3).reshape(s, b, -1)

    return FlashSDPA


def _slime_args(chunk: int, temp: float):
    """Stand-in 7: the attributes slime's policy-loss and log-prob paths read (slime defaults)."""
    return argparse.Namespace(
        log_probs_chunk_size=chunk, rollout_temperature=temp, entropy_coef=0.0, allgather_cp=False,
        use_rollout_logprobs=False, use_opsm=False, advantage_estimator="grpo", eps_clip=0.2,
        eps_clip_high=0.28, get_mismatch_metrics=False, use_tis=False, custom_tis_function_path=None,
        custom_pg_loss_reducer_function_path=None, use_kl_loss=False, use_unbiased_kl=False,
        kl_loss_type="low_var_kl", kl_loss_coef=0.0, calculate_per_token_loss=False,
        recompute_loss_function=False, loss_type="policy_loss", use_rollout_entropy=False,
        rollout_top_p=1.0, use_rollout_top_p_replay=False, eps_clip_c=None,
    )


def _init_distributed():
    import torch

    torch.distributed.init_process_group("nccl", world_size=1, rank=0)
    torch.cuda.set_device(0)
    from megatron.core import parallel_state, tensor_parallel
    parallel_state.initialize_model_parallel(1, 1)
    tensor_parallel.model_parallel_cuda_manual_seed(1234)
    return _install_stand_ins()


class _Built:
    """One model with its DDP wrapper and optimizer, and the two passes slime runs on it."""

    def __init__(self, FlashSDPA, model_name: str, L: int, rec: str, chunk: int, temp: float,
                 grouped_gemm: bool = False):
        import torch
        import torch.nn.functional as F

        from megatron.core.distributed import DistributedDataParallel, DistributedDataParallelConfig
        from megatron.core.models.gpt import GPTModel
        from megatron.core.models.gpt.gpt_layer_specs import get_gpt_layer_local_spec
        from megatron.core.optimizer import OptimizerConfig, get_megatron_optimizer
        from megatron.core.pipeline_parallel import get_forward_backward_func
        from megatron.core.transformer.module import Float16Module
        from megatron.core.transformer.transformer_config import TransformerConfig

        spec = MODELS[model_name]
        gran, meth, nl = RECOMPUTE[rec]
        moe = "experts" in spec
        cfg_kw = dict(
            num_layers=L, hidden_size=spec["hidden"], ffn_hidden_size=spec["ffn"],
            num_attention_heads=spec["heads"], num_query_groups=spec["groups"], kv_channels=KV_CHANNELS,
            normalization="RMSNorm", layernorm_epsilon=1e-6, add_bias_linear=False, gated_linear_unit=True,
            activation_func=F.silu, qk_layernorm=True, bf16=True, params_dtype=torch.bfloat16,
            attention_dropout=0.0, hidden_dropout=0.0, apply_rope_fusion=False, masked_softmax_fusion=False,
            bias_activation_fusion=False, bias_dropout_fusion=False, gradient_accumulation_fusion=False,
            variable_seq_lengths=True, attention_softmax_in_fp32=True,
            recompute_granularity=gran, recompute_method=meth, recompute_num_layers=nl,
            pipeline_dtype=torch.bfloat16,
            # variable_seq_lengths (slime's packed micro-batches) refuses the allgather default.
            moe_token_dispatcher_type="alltoall",
        )
        if moe:
            cfg_kw.update(
                num_moe_experts=spec["experts"], moe_ffn_hidden_size=spec["moe_ffn"],
                moe_router_topk=spec["topk"], moe_router_score_function="softmax",
                moe_grouped_gemm=grouped_gemm, moe_router_dtype="fp32",
                moe_permute_fusion=False, moe_aux_loss_coeff=0.0, moe_router_load_balancing_type="none",
                moe_layer_freq=1,
            )
        config = TransformerConfig(**cfg_kw)
        # What Megatron's training loop (and so slime) installs: the DDP grad sync after backward.
        from megatron.core.distributed import finalize_model_grads
        config.finalize_model_grads_func = finalize_model_grads
        layer_spec = get_gpt_layer_local_spec(
            num_experts=spec.get("experts"), moe_grouped_gemm=grouped_gemm, qk_layernorm=True,
            normalization="RMSNorm")
        layer_spec.submodules.self_attention.submodules.core_attention = FlashSDPA

        gpt = GPTModel(
            config=config, transformer_layer_spec=layer_spec, vocab_size=VOCAB, max_sequence_length=131072,
            pre_process=True, post_process=True, share_embeddings_and_output_weights=spec["tied"],
            position_embedding_type="rope", rotary_base=spec["rope"],
        )
        gpt.cuda(torch.cuda.current_device())
        model = Float16Module(config, gpt)
        ddp_cfg = DistributedDataParallelConfig(
            grad_reduce_in_fp32=True, overlap_grad_reduce=False, use_distributed_optimizer=True,
            check_for_nan_in_grad=False)
        self.model = DistributedDataParallel(config=config, ddp_config=ddp_cfg, module=model)
        self.params = sum(p.numel() for p in gpt.parameters())
        opt_cfg = OptimizerConfig(
            optimizer="adam", lr=1e-6, min_lr=1e-6, weight_decay=0.1, adam_beta1=0.9, adam_beta2=0.98,
            adam_eps=1e-8, bf16=True, params_dtype=torch.bfloat16, use_distributed_optimizer=True,
            clip_grad=1.0, use_precision_aware_optimizer=False)
        self.optimizer = get_megatron_optimizer(opt_cfg, [self.model], use_gloo_process_groups=False)
        self.args = _slime_args(chunk, temp)
        self.fb = get_forward_backward_func()
        self.dev = torch.cuda.current_device()

    def make_batch(self, T: int):
        import torch

        dev = self.dev
        sample = 4096 if T >= 4096 else T
        n = T // sample
        resp = sample * 3 // 4
        tokens = torch.randint(0, VOCAB, (T,), device=dev)
        return n, {
            "tokens": tokens.unsqueeze(0),
            "unconcat_tokens": list(tokens.split(sample)),
            "total_lengths": [sample] * n,
            "response_lengths": [resp] * n,
            "loss_masks": [torch.ones(resp, device=dev, dtype=torch.int32) for _ in range(n)],
            "advantages": [torch.randn(resp, device=dev) for _ in range(n)],
            "log_probs": [-torch.rand(resp, device=dev) for _ in range(n)],
            "rollout_log_probs": None, "ref_log_probs": None, "rollout_mask_sums": None,
        }

    def train_step(self, T: int, events=None):
        """forward + backward (slime's loss) + optimizer step; ``events`` = three CUDA events
        recorded before the forward, after the backward and after the optimizer step."""
        from functools import partial

        from slime.backends.megatron_utils.loss import loss_function

        n, batch = self.make_batch(T)

        def fwd(_it, m):
            out = m(input_ids=batch["tokens"], position_ids=None, attention_mask=None, labels=None)
            return out, partial(loss_function, self.args, batch, 1, n)

        self.model.train()
        if events:
            events[0].record()
        self.fb(forward_step_func=fwd, data_iterator=iter([None]), model=[self.model], num_microbatches=1,
                seq_length=T, micro_batch_size=1, forward_only=False)
        if events:
            events[1].record()
        ok, _gnorm, _ = self.optimizer.step()
        self.model.zero_grad_buffer()
        self.optimizer.zero_grad()
        if events:
            events[2].record()
        return ok

    def logprob_pass(self, T: int, events=None):
        """slime's old-policy log-prob pass: forward only, chunked log-probs."""
        from functools import partial

        import torch

        from slime.backends.megatron_utils.loss import get_log_probs_and_entropy

        n, batch = self.make_batch(T)

        def fwd(_it, m):
            out = m(input_ids=batch["tokens"], position_ids=None, attention_mask=None, labels=None)
            return out, partial(get_log_probs_and_entropy, args=self.args, unconcat_tokens=batch["unconcat_tokens"],
                                total_lengths=batch["total_lengths"], response_lengths=batch["response_lengths"],
                                with_entropy=False)

        self.model.eval()
        with torch.no_grad():
            if events:
                events[0].record()
            self.fb(forward_step_func=fwd, data_iterator=iter([None]), model=[self.model], num_microbatches=1,
                    seq_length=T, micro_batch_size=1, forward_only=True)
            if events:
                events[1].record()


def run_point(pid: str) -> dict:
    import torch

    model_name, layers, T, rec, chunk, temp = point(pid)
    L = layers or MODELS[model_name]["layers"]
    FlashSDPA = _init_distributed()
    b = _Built(FlashSDPA, model_name, L, rec, chunk, temp)
    params = b.params

    def outside():
        free, total = torch.cuda.mem_get_info()
        return (total - free) - torch.cuda.memory_reserved()

    def measure(fn):
        torch.cuda.synchronize()
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()
        static = torch.cuda.memory_allocated()
        t0 = time.time()
        fn(T)
        torch.cuda.synchronize()
        return {
            "params": params,
            "static_allocated_gib": round(static / GIB, 4),
            "peak_allocated_gib": round(torch.cuda.max_memory_allocated() / GIB, 4),
            "peak_reserved_gib": round(torch.cuda.max_memory_reserved() / GIB, 4),
            "outside_allocator_gib": round(outside() / GIB, 4),
            "seconds": round(time.time() - t0, 2),
        }

    res = {"id": pid, "tokens": T, "num_layers": L}
    res["step1"] = measure(b.train_step)
    res["logprob"] = measure(b.logprob_pass)
    res["train"] = measure(b.train_step)
    free, total = torch.cuda.mem_get_info()
    res["gpu_total_gib"] = round(total / GIB, 3)
    torch.distributed.destroy_process_group()
    return res


# ----------------------------------------------------------------- step time (issue 25, item 3)

#: Timing runs: id -> (model, num_layers or None, recompute, tokens per micro-batch to time).
#: One process per run builds the model once and times every T of its list (the step time does
#: not depend on allocator history, unlike the memory peaks). Ordered by priority: a call that
#: runs out of time still brings back the first ones.
TIME_RUNS = {
    "q06_full": ("qwen3_0_6b", None, "full", [4096, 16384, 32768]),
    "q4_full": ("qwen3_4b", None, "full", [4096, 16384, 32768]),
    "q06_none": ("qwen3_0_6b", None, "none", [4096, 16384]),
    "q4_none": ("qwen3_4b", None, "none", [8192]),
    "q17_full": ("qwen3_1_7b", None, "full", [8192, 32768]),
    "q8l18_full": ("qwen3_8b", 18, "full", [4096, 16384]),
    # MoE through Megatron's SequentialMLP (a Python loop over the 128 experts, what the local spec
    # gives without grouped GEMM): launch-bound, kept as a record, not production's speed.
    "q30l4_full": ("qwen3_30b_a3b", 4, "full", [8192, 16384]),
    "q32l6_full": ("qwen3_32b", 6, "full", [8192, 16384]),
    "q17_none": ("qwen3_1_7b", None, "none", [16384]),
    "q30l4_none": ("qwen3_30b_a3b", 4, "none", [8192]),
    # Second call (2026-12-03): MoE through GroupedMLP on torch._grouped_mm (stand-in 11), as
    # production runs grouped GEMM (TE); more dense shapes to check the fit away from its points.
    "q30l4gg_full": ("qwen3_30b_a3b", 4, "full", [4096, 8192, 16384], {"grouped_gemm": True}),
    "q30l4gg_none": ("qwen3_30b_a3b", 4, "none", [8192], {"grouped_gemm": True}),
    "q14l12_full": ("qwen3_14b", 12, "full", [8192, 16384]),
    "q06_full_small": ("qwen3_0_6b", None, "full", [2048]),
    "q8l18_full_long": ("qwen3_8b", 18, "full", [32768]),
    "q32l6_none": ("qwen3_32b", 6, "none", [4096]),
    "q4_full_repeat": ("qwen3_4b", None, "full", [16384]),  # the same point on another machine: spread
}
TIME_REPS = 3


def run_timing(rid: str, out: str) -> None:
    """Median of TIME_REPS CUDA-event timings of the train step (forward+backward, optimizer
    step) and of the log-prob pass, per T, after one warm-up of each at that T (the first warm
    train step also allocates Adam's moments and compiles slime's loss helpers)."""
    import statistics

    import torch

    model_name, layers, rec, tokens, *opts = TIME_RUNS[rid]
    opts = opts[0] if opts else {}
    spec = MODELS[model_name]
    L = layers or spec["layers"]
    FlashSDPA = _init_distributed()
    t_build = time.time()
    b = _Built(FlashSDPA, model_name, L, rec, 1024, 1.0, grouped_gemm=bool(opts.get("grouped_gemm")))
    b.train_step(tokens[0])  # step 1: Adam moments, torch.compile
    torch.cuda.synchronize()
    build_s = time.time() - t_build

    def ev(k):
        return [torch.cuda.Event(enable_timing=True) for _ in range(k)]

    for T in tokens:
        b.train_step(T)
        b.logprob_pass(T)
        train, fb, opt, lp = [], [], [], []
        for _ in range(TIME_REPS):
            e = ev(3)
            b.train_step(T, e)
            torch.cuda.synchronize()
            fb.append(e[0].elapsed_time(e[1]) / 1e3)
            opt.append(e[1].elapsed_time(e[2]) / 1e3)
            train.append(e[0].elapsed_time(e[2]) / 1e3)
        for _ in range(TIME_REPS):
            e = ev(2)
            b.logprob_pass(T, e)
            torch.cuda.synchronize()
            lp.append(e[0].elapsed_time(e[1]) / 1e3)
        row = {
            "id": f"{rid}_t{T // 1024}k", "run": rid, "model": model_name, "num_layers": L, "tokens": T,
            "recompute": rec, "params": b.params,
            "moe_experts": ("GroupedMLP (torch._grouped_mm)" if opts.get("grouped_gemm") else "SequentialMLP")
            if "experts" in spec else None,
            "train_s": round(statistics.median(train), 5), "train_fwd_bwd_s": round(statistics.median(fb), 5),
            "train_optimizer_s": round(statistics.median(opt), 5), "logprob_s": round(statistics.median(lp), 5),
            "train_samples_s": [round(x, 5) for x in train], "logprob_samples_s": [round(x, 5) for x in lp],
            "build_and_first_step_s": round(build_s, 2),
            "peak_allocated_gib": round(torch.cuda.max_memory_allocated() / GIB, 2),
        }
        with open(out, "a") as f:
            f.write(json.dumps(row) + "\n")
        print(json.dumps(row), flush=True)
    torch.distributed.destroy_process_group()


def device_ceilings() -> dict:
    """The card as found: an 8192^3 bf16 matmul on random data and a device-to-device copy."""
    import torch

    a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    bm = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    for _ in range(3):
        a @ bm
    e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    e0.record()
    for _ in range(20):
        a @ bm
    e1.record()
    torch.cuda.synchronize()
    mm = 2 * 8192 ** 3 * 20 / (e0.elapsed_time(e1) / 1e3)
    x = torch.empty(1 << 30, device="cuda", dtype=torch.float32)
    y = torch.empty_like(x)
    y.copy_(x)
    e0.record()
    for _ in range(10):
        y.copy_(x)
    e1.record()
    torch.cuda.synchronize()
    bw = 2 * x.numel() * 4 * 10 / (e0.elapsed_time(e1) / 1e3)
    return {"bf16_matmul_8192_tflops": round(mm / 1e12, 1), "d2d_copy_tb_s": round(bw / 1e12, 2)}


MEGATRON = "NVIDIA/Megatron-LM@1dcf0dafa884ad52ffb243625717a3471643e087"
SLIME = "THUDM/slime@v0.3.1 (a6272da0d4f3d0a08520c99a2f3b4f6c887960dc)"
HOW = (
    "One process per point on one NVIDIA H200 (device kind nvidia-h200), world size 1 (NCCL), "
    "TP=PP=CP=EP=DP=1: Megatron-core GPTModel (local layer spec) in Float16Module (bf16 weights, "
    "fp32 logits) in DistributedDataParallel (fp32 grad buffer) with the DistributedOptimizer (fp32 "
    "main params and Adam moments), the no-pipeline forward_backward_func with slime's own "
    "loss_function (policy loss -> chunked log-probs) for train steps and slime's "
    "get_log_probs_and_entropy in forward_only for the log-prob pass. Order per process: train step 1 "
    "(allocates Adam moments), log-prob pass (measured), train step 2 (measured, steady state); "
    "empty_cache and reset_peak_memory_stats before each measured phase. static_allocated_gib = "
    "memory_allocated before the measured phase (weights + grad buffer + optimizer state); "
    "peak_allocated_gib = max_memory_allocated; peak_reserved_gib = max_memory_reserved; "
    "outside_allocator_gib = (total - free from cudaMemGetInfo) - memory_reserved after the phase "
    "(CUDA context, NCCL, cuBLAS workspaces). GiB = 2^30 bytes."
)
STAND_INS = [
    "Megatron local layer spec (get_gpt_layer_local_spec): no Transformer Engine on the device",
    "core attention: torch scaled_dot_product_attention restricted to the flash backend (causal, GQA) "
    "in place of the local spec's DotProductAttention (which materialises [heads, T, T])",
    "micro-batch = one causal sequence of T tokens (packed_seq_params=None) instead of packed THD "
    "samples; slime's loss sees T/4096 samples of 4096 tokens with 3072-token responses",
    "gradient clipping: Megatron's no-apex local_multi_tensor_scale (out of place) replaced by "
    "in-place torch._foreach_mul_ (apex's multi_tensor_scale is in place)",
    "Adam: Megatron's no-TE/no-apex fallback torch.optim.AdamW given fused=True",
    "MoE: SequentialMLP (moe_grouped_gemm=False) and moe_permute_fusion=False (no TE grouped GEMM); "
    "alltoall dispatcher at EP=1; router load balancing 'none', aux loss 0",
    "Megatron MoE router: moe_utils.te_general_gemm = None (the no-TE import branch leaves it "
    "undefined, a NameError); None selects Megatron's plain matmul path",
    "slime args: an argparse.Namespace with only the attributes policy_loss_function / "
    "get_log_probs_and_entropy read, at slime's defaults (grpo, eps_clip 0.2/0.28, entropy_coef 0, "
    "no KL loss, no TIS, use_rollout_entropy false); rollout_temperature per point",
    "random bf16 weights and random token ids, advantages and old log-probs (no checkpoint, no rollout)",
    "no torch_memory_saver / offload (split layout: nothing colocated)",
]


def assemble(inputs: list[str], out: str, date: str) -> None:
    """Write the agreed benchmarks/memory_reference.json from the device's points*.jsonl."""
    meta_dev = {}
    rows = {}
    for path in inputs:
        mp = path + ".meta.json"
        if os.path.exists(mp):
            meta_dev = json.load(open(mp))
        for line in open(path):
            r = json.loads(line)
            if "error" not in r:
                rows[r["id"]] = r
    points = []
    for pid in POINTS:
        if pid not in rows:
            continue
        r = rows[pid]
        for phase in ("train", "logprob"):
            m = r[phase]
            points.append({
                "id": pid,
                "overrides": overrides_for(pid),
                "phase": phase,
                "measured": {k: m[k] for k in ("params", "static_allocated_gib", "peak_allocated_gib",
                                               "peak_reserved_gib", "outside_allocator_gib")},
            })
    meta = {
        "gpu": meta_dev.get("gpu", "NVIDIA H200"),
        "gpu_memory_gib": next(iter(rows.values()))["gpu_total_gib"] if rows else None,
        "torch": meta_dev.get("torch"),
        "cuda": meta_dev.get("cuda"),
        "megatron": MEGATRON,
        "slime": SLIME,
        "how": HOW,
        "stand_ins": STAND_INS,
        "script": "benchmarks/measure_memory.py",
        "date": date,
        "rollout_temperature": 1.0,
    }
    tmp = out + ".tmp"
    with open(tmp, "w") as f:
        json.dump({"meta": meta, "points": points}, f, indent=1)
        f.write("\n")
    os.replace(tmp, out)
    print(f"{out}: {len(points)} points")


def time_all(a) -> None:
    import torch

    t_start = time.time()
    meta = {"torch": torch.__version__, "cuda": torch.version.cuda, "gpu": torch.cuda.get_device_name(0),
            "sm_count": torch.cuda.get_device_properties(0).multi_processor_count}
    meta.update(device_ceilings())
    try:
        meta["nvidia_smi"] = subprocess.run(
            ["nvidia-smi", "--query-gpu=name,driver_version,clocks.max.sm,power.limit", "--format=csv,noheader"],
            capture_output=True, text=True, timeout=20).stdout.strip()
    except Exception as exc:  # the numbers stand without it
        meta["nvidia_smi"] = repr(exc)
    with open(a.out + ".meta.json", "w") as f:
        json.dump(meta, f)
    print(meta, flush=True)
    torch.cuda.empty_cache()
    ids = [i for i in a.only.split(",") if i] or list(TIME_RUNS)
    for port, rid in enumerate(ids):
        if time.time() - t_start > a.deadline:
            print(f"## deadline: {rid} and later not run", flush=True)
            break
        env = dict(os.environ, MASTER_ADDR="127.0.0.1", MASTER_PORT=str(29600 + port),
                   NCCL_SOCKET_IFNAME="lo", RANK="0", WORLD_SIZE="1", LOCAL_RANK="0",
                   NCCL_NVLS_ENABLE="0", TORCH_SYMM_MEM_DISABLE_MULTICAST="1", NVSHMEM_DISABLE_NVLS="1")
        t0 = time.time()
        try:
            subprocess.run([sys.executable, __file__, "--time-run", rid, "--out", a.out], env=env,
                           timeout=a.timeout, check=False)
        except subprocess.TimeoutExpired:
            with open(a.out, "a") as f:
                f.write(json.dumps({"run": rid, "error": f"timeout {a.timeout}s"}) + "\n")
        print(f"## {rid} {time.time() - t0:.1f}s", flush=True)
        if port == 0 and '"error"' in open(a.out).read():
            print("first run failed: stopping", flush=True)
            break
    for line in open(a.out):
        r = json.loads(line)
        if "error" in r:
            print(r["run"], "ERROR", r["error"][:300])
            continue
        print(f'{r["id"]:20s} params={r["params"] / 1e9:6.2f}B train={r["train_s"]:8.4f}s '
              f'(opt {r["train_optimizer_s"]:.4f}) logprob={r["logprob_s"]:8.4f}s')


def assemble_times(inputs: list[str], out: str, date: str) -> None:
    """Write benchmarks/step_time_reference.json from the device's timing rows."""
    meta_dev: dict = {}
    calls = []
    rows = []
    for path in inputs:
        mp = path + ".meta.json"
        if os.path.exists(mp):
            meta_dev = json.load(open(mp))
            calls.append(meta_dev)
        for line in open(path):
            r = json.loads(line)
            if "error" not in r:
                rows.append(r)
    points, excluded = [], []
    for r in rows:
        spec = MODELS[r["model"]]
        if "experts" in spec and r.get("moe_experts", "SequentialMLP") == "SequentialMLP":
            # A Python loop over 128 experts with a host sync per layer: launch-bound (8k and 16k
            # tokens take the same time), unlike production's grouped GEMM; recorded, not a point.
            excluded.append({"id": r["id"], "train_s": r["train_s"], "logprob_s": r["logprob_s"],
                             "why": "MoE through SequentialMLP (the local spec without grouped GEMM): "
                                    "launch-bound, not production's speed; see the GroupedMLP points"})
            continue
        points.append({
            "id": r["id"], "model": r["model"],
            "architecture": {"num_layers": r["num_layers"], "hidden_size": spec["hidden"],
                             "ffn_hidden_size": spec["ffn"], "num_attention_heads": spec["heads"],
                             "num_query_groups": spec["groups"], "kv_channels": KV_CHANNELS,
                             "vocab_size": VOCAB, "tied": spec["tied"],
                             **({"num_experts": spec["experts"], "moe_ffn_hidden_size": spec["moe_ffn"],
                                 "moe_router_topk": spec["topk"]} if "experts" in spec else {})},
            "params": r["params"], "tokens_per_microbatch": r["tokens"],
            "recompute": r["recompute"], "moe_experts": r.get("moe_experts"),
            "measured": {k: r[k] for k in ("train_s", "train_fwd_bwd_s", "train_optimizer_s", "logprob_s",
                                           "train_samples_s", "logprob_samples_s")},
        })
    meta = {
        "gpu": meta_dev.get("gpu", "NVIDIA H200"), "device_calls": calls,
        "torch": meta_dev.get("torch"), "cuda": meta_dev.get("cuda"),
        "megatron": MEGATRON, "slime": SLIME, "date": date, "script": "benchmarks/measure_memory.py --time-all",
        "how": ("One process per run on one NVIDIA H200 (device kind nvidia-h200), world size 1, "
                "TP=PP=CP=EP=DP=1, the same model, wrappers, optimizer and slime loss / log-prob code "
                "as the memory points (see memory_reference.json's meta.how). Per tokens-per-micro-batch T: "
                "one warm-up train step and log-prob pass, then the median of "
                f"{TIME_REPS} CUDA-event timings of each. train_s = forward + backward (slime's policy loss, "
                "one micro-batch of T tokens) + DistributedOptimizer step + zero grads; "
                "train_fwd_bwd_s and train_optimizer_s split it; logprob_s = forward_only pass with slime's "
                "chunked get_log_probs_and_entropy (chunk 1024). Full recompute = full/uniform/1."),
        "excluded": excluded,
        "stand_ins": STAND_INS + [
            "MoE points with moe_experts 'GroupedMLP (torch._grouped_mm)': Megatron's legacy GroupedMLP "
            "(moe_grouped_gemm=True in the local spec) with its grouped_gemm.ops.gmm served by "
            "torch._grouped_mm (the grouped_gemm package is not on the device); the others: SequentialMLP"],
    }
    tmp = out + ".tmp"
    with open(tmp, "w") as f:
        json.dump({"meta": meta, "points": points}, f, indent=1)
        f.write("\n")
    os.replace(tmp, out)
    print(f"{out}: {len(points)} points")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--assemble", nargs="+", metavar="POINTS_JSONL",
                    help="write --out as memory_reference.json from the device's points files")
    ap.add_argument("--date", default=time.strftime("%Y-%m-%d", time.gmtime()))
    ap.add_argument("--point")
    ap.add_argument("--all", action="store_true")
    ap.add_argument("--only", default="", help="comma-separated ids (with --all)")
    ap.add_argument("--out", default="points.jsonl")
    ap.add_argument("--timeout", type=int, default=150)
    ap.add_argument("--time-run", help="(device) one timing run of TIME_RUNS, rows appended to --out")
    ap.add_argument("--time-all", action="store_true", help="(device) every TIME_RUNS run, one process each")
    ap.add_argument("--deadline", type=float, default=480.0,
                    help="with --time-all: start no run after this many seconds (the device call's limit)")
    ap.add_argument("--assemble-times", nargs="+", metavar="TIMES_JSONL",
                    help="write --out as step_time_reference.json from the device's timing files")
    a = ap.parse_args()
    if a.assemble:
        assemble(a.assemble, a.out, a.date)
        return
    if a.assemble_times:
        assemble_times(a.assemble_times, a.out, a.date)
        return
    if a.time_run:
        try:
            run_timing(a.time_run, a.out)
        except Exception as exc:  # report, keep going with the next run
            with open(a.out, "a") as f:
                f.write(json.dumps({"run": a.time_run, "error": repr(exc),
                                    "trace": traceback.format_exc()[-3000:]}) + "\n")
            print(traceback.format_exc(), flush=True)
        return
    if a.time_all:
        time_all(a)
        return
    if a.point:
        try:
            res = run_point(a.point)
        except Exception as exc:  # report, keep going with the next point
            res = {"id": a.point, "error": repr(exc), "trace": traceback.format_exc()[-3000:]}
        with open(a.out, "a") as f:
            f.write(json.dumps(res) + "\n")
        print(json.dumps({k: v for k, v in res.items() if k != "trace"}), flush=True)
        if "trace" in res:
            print(res["trace"], flush=True)
        return
    ids = [i for i in a.only.split(",") if i] or list(POINTS)
    import torch
    meta = {"torch": torch.__version__, "cuda": torch.version.cuda,
            "gpu": torch.cuda.get_device_name(0)}
    with open(a.out + ".meta.json", "w") as f:
        json.dump(meta, f)
    print(meta, flush=True)
    for port, pid in enumerate(ids):
        env = dict(os.environ, MASTER_ADDR="127.0.0.1", MASTER_PORT=str(29500 + port),
                   NCCL_SOCKET_IFNAME="lo", RANK="0", WORLD_SIZE="1", LOCAL_RANK="0",
                   NCCL_NVLS_ENABLE="0", TORCH_SYMM_MEM_DISABLE_MULTICAST="1", NVSHMEM_DISABLE_NVLS="1")
        t0 = time.time()
        try:
            subprocess.run([sys.executable, __file__, "--point", pid, "--out", a.out], env=env,
                           timeout=a.timeout, check=False)
        except subprocess.TimeoutExpired:
            with open(a.out, "a") as f:
                f.write(json.dumps({"id": pid, "error": f"timeout {a.timeout}s"}) + "\n")
        print(f"## {pid} {time.time() - t0:.1f}s", flush=True)
        if port == 0 and '"error"' in open(a.out).read():
            print("first point failed: stopping", flush=True)
            break
    for line in open(a.out):
        r = json.loads(line)
        if "error" in r:
            print(r["id"], "ERROR", r["error"][:200])
            continue
        for ph in ("logprob", "train"):
            m = r[ph]
            print(f'{r["id"]:24s} {ph:8s} static={m["static_allocated_gib"]:8.3f} '
                  f'peak={m["peak_allocated_gib"]:8.3f} reserved={m["peak_reserved_gib"]:8.3f} '
                  f'outside={m["outside_allocator_gib"]:6.3f} t={m["seconds"]}')


if __name__ == "__main__":
    main()
