"""Achieved matmul throughput of Megatron's train and log-prob passes, as a fraction of the GPU's
peak dense bf16 FLOP/s: the one calibration point of the step-time model's compute terms.

The step-time model (:mod:`clawgym.steptime`) asks only :func:`achieved_fraction`; a fit to
Megatron steps timed on a real GPU replaces this module (same signature) without touching the
model.

Initial value, before any measurement here: a constant 0.40. Why: large-model Megatron training on
Hopper reports a model FLOPs utilisation of about 35-45% (NVIDIA's Megatron-LM README table of GPT
runs on H100: 41-48% MFU at 175B-462B; Meta's Llama 3 paper: 38-43% BF16 MFU on H100), and RL
train passes are at the lower end (short, variable-length micro-batches packed by slime's dynamic
batching, no overlap tuning). Full recompute does not change the matmul rate (its extra forward is
counted as FLOPs by the model), so ``recompute`` does not change the value yet.
"""

from __future__ import annotations

#: The constant fraction of peak dense bf16 FLOP/s (see the module docstring for its source).
INITIAL_FRACTION = 0.40


def achieved_fraction(params_per_rank: float, tokens_per_microbatch: int, *, recompute: bool) -> float:
    """Fraction (0, 1] of the GPU's peak dense bf16 FLOP/s that a Megatron train or log-prob pass
    achieves on one rank holding ``params_per_rank`` parameters with ``tokens_per_microbatch`` tokens
    per micro-batch (``recompute``: full activation recompute on). Initial value: a constant."""
    del params_per_rank, tokens_per_microbatch, recompute  # the fitted version reads them
    return INITIAL_FRACTION
