"""Achieved throughput of Megatron's train and log-prob passes, as a fraction of the GPU's peak
dense bf16 FLOP/s: the calibrated part of the step-time model's compute terms.

Fitted to Megatron-core passes timed on an NVIDIA H200 (``benchmarks/step_time_reference.json``,
made by ``benchmarks/measure_memory.py --time-all``: 26 points, 2026-12-03; torch 2.11 cu130,
Megatron-LM 1dcf0daf, slime v0.3.1's loss and log-prob code, world size 1, flash SDPA attention;
the card's 8192^3 bf16 matmul ran at 787-789 TFLOP/s there). ``tests/test_step_time_reference.py``
holds the fit to every point.

The FLOPs the fraction divides are counted as the step-time model counts them
(``clawgym.steptime``): per token and forward, 2 x the active matmul parameters (the output layer
included, the embedding lookup not, routed experts at ``topk / num_experts``) plus causal attention,
4 x heads x head_dim x (sequence / 2) per layer; a train pass is 3 forwards, 4 with full recompute;
a log-prob pass is 1. Peak: the datasheet's dense bf16, :data:`PEAK_BF16_TFLOPS` for the H200.

The fraction is a harmonic mix of two rates, scaled by how full the GPU is kept::

    f = saturation / ((1 - s) / F_LINEAR + s / F_ATTENTION)  x  (RECOMPUTE_FACTOR if recompute)
    saturation = 1 / (1 + (W0 / (params_per_rank x tokens_per_microbatch)) ** K)

* ``s`` is attention's share of the pass's FLOPs (``attention_share``). The GEMMs (Megatron's
  column/row-parallel linears, the output layer, the experts' grouped GEMM) run at ``F_LINEAR`` of
  peak, flash attention at ``F_ATTENTION``: the split of the measured points into the two rates.
  Forward-only passes fitted the same attention rate as train passes (0.251 both), so one constant.
* ``saturation`` is the per-layer launch and host overhead, which small passes do not amortise:
  it depends on the work of one micro-batch, active parameters x tokens (the 0.6B model at 2k tokens
  reaches a fifth of the 0.6B model at 32k; a 4B one is saturated from 4k).
* ``RECOMPUTE_FACTOR``: full recompute is counted as a 4th forward of the whole model, but
  Megatron re-runs the transformer layers only (not the output layer and loss), so the counted FLOPs
  overstate the work and the fraction reads higher: fitted, 1.12.

Fitted how: the 5 constants by least squares on log(predicted / measured) of both passes of every
point (52 residuals), then refined to the minimax of the relative error (p-norm continuation, p up
to 128, Nelder-Mead), and rounded to the values below; with them, max |error| 15.1 % over the
train passes (RMS 8.0 %) and 15.0 % over the log-prob passes (RMS 8.8 %). Repeating one point on a
second machine moved it by 0.2 %.

Without ``attention_share`` (``None``) the share is guessed from the micro-batch alone,
``s = T / (T + T_ATTENTION_HALF)``, a Qwen3-like shape's: within 24 % of the points (RMS 14 %),
worse because attention's share depends on the width and depth the arguments do not carry.

``params_per_rank`` is the ACTIVE matmul parameters one rank multiplies per token (dense layers
/ TP, routed experts at ``topk / num_experts``, the output layer, over PP stages); with every expert
counted an MoE would look saturated at small micro-batches (about 30 % too fast at 8k tokens).

The optimizer step (Megatron's DistributedOptimizer at DP=1: fused AdamW on fp32 main params and
moments, gradient-norm clipping, bf16 copy-back, zeroing the grad buffer) was timed at each point
too: :func:`optimizer_step_s`, memory bound, ``ADAM_BYTES_PER_PARAM`` bytes per local parameter at
the GPU's HBM bandwidth plus a fixed ``OPTIMIZER_FIXED_S`` (launches, the norm's host sync); fitted
the same way (minimax of the relative error over the 26 points, 4.8 TB/s datasheet bandwidth):
max |error| 16 %.

What the points do not cover (said, not modelled): Transformer Engine's fused kernels (the
device has no TE: Megatron's local spec, unfused norms and RoPE; production is somewhat faster, so
estimates lean pessimistic); TP/CP/EP/PP (communication and bubbles are the model's stated terms,
not this fraction); FP8; micro-batches packed from several samples (timed as one causal sequence
of T tokens: the FLOP count uses the same sequence length the model gives it); MLA attention.
"""

from __future__ import annotations

from typing import Optional

#: Peak dense bf16 TFLOP/s the fraction is relative to (NVIDIA H100/H200 SXM datasheet, no
#: sparsity; the GPU table's ``bf16_tflops``).
PEAK_BF16_TFLOPS = 989.0

#: Fraction of peak of the GEMMs (linears, output layer, grouped expert GEMMs) once saturated.
F_LINEAR = 0.532
#: Fraction of peak of flash attention (torch SDPA's flash backend, causal, GQA), train and forward.
F_ATTENTION = 0.251
#: Work of one micro-batch (active params x tokens) at which the saturation is one half.
W0 = 3.6e12
#: Sharpness of the saturation knee.
K = 1.33
#: Full recompute's fraction relative to the same pass without (FLOP-convention effect, docstring).
RECOMPUTE_FACTOR = 1.124
#: Tokens per micro-batch at which attention would take half the FLOPs (fallback without
#: ``attention_share``): fitted (minimax) over the same points with the constants above fixed.
T_ATTENTION_HALF = 31900.0


def achieved_fraction(params_per_rank: float, tokens_per_microbatch: int, *, recompute: bool,
                      attention_share: Optional[float] = None) -> float:
    """Fraction (0, 1) of the GPU's peak dense bf16 FLOP/s that a Megatron train or log-prob pass
    achieves on one rank multiplying ``params_per_rank`` active parameters per token, with
    ``tokens_per_microbatch`` tokens per micro-batch (``recompute``: full activation recompute of a
    train pass). ``attention_share``: attention's share of the pass's FLOPs (0..1); ``None`` guesses
    it from the micro-batch (less accurate: module docstring)."""
    work = max(1.0, float(params_per_rank)) * max(1, int(tokens_per_microbatch))
    if attention_share is None:
        t = float(max(1, int(tokens_per_microbatch)))
        attention_share = t / (t + T_ATTENTION_HALF)
    s = min(1.0, max(0.0, float(attention_share)))
    saturation = 1.0 / (1.0 + (W0 / work) ** K)
    f = saturation / ((1.0 - s) / F_LINEAR + s / F_ATTENTION)
    if recompute:
        f *= RECOMPUTE_FACTOR
    return min(1.0, f)


#: Bytes moved per local parameter by one optimizer step at the datasheet HBM bandwidth (the fit's
#: 10.15 ps per parameter on the H200's 4,800 GB/s; the plain Adam count is ~30, clipping, the
#: norm, bf16 copy-back and zeroing add the rest).
ADAM_BYTES_PER_PARAM = 48.7
#: Fixed time of one optimizer step (seconds): kernel launches and the grad norm's host sync.
OPTIMIZER_FIXED_S = 0.0094


def optimizer_step_s(params_on_gpu: float, hbm_gbs: float) -> float:
    """Seconds of one GPU optimizer step over ``params_on_gpu`` local parameters (the distributed
    optimizer's shard) on a GPU with ``hbm_gbs`` GB/s (1e9 bytes/s) of memory bandwidth."""
    return max(0.0, float(params_on_gpu)) * ADAM_BYTES_PER_PARAM / (float(hbm_gbs) * 1e9) + OPTIMIZER_FIXED_S
