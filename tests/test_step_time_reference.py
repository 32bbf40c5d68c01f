"""The step-time model's calibrated compute rate holds every Megatron pass timed on the H200
(benchmarks/step_time_reference.json, made by benchmarks/measure_memory.py --time-all) within 20 %.

Each point's FLOPs are counted the way the step-time model counts them (clawgym/steptime/compute.py's
docstring): 2 x active matmul parameters per token and forward, plus causal attention over the
micro-batch's sequence; a train pass is 3 forwards, 4 with full recompute."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from clawgym.steptime.compute import PEAK_BF16_TFLOPS, achieved_fraction, optimizer_step_s

REFERENCE = json.loads((Path(__file__).resolve().parent.parent / "benchmarks" / "step_time_reference.json").read_text())
POINTS = {p["id"]: p for p in REFERENCE["points"]}
TOLERANCE = 0.20
H200_HBM_GBS = 4800.0


def active_params(a: dict) -> float:
    """Matmul parameters one token passes through (norms and the router included, routed experts at
    topk / num_experts, the output layer; not the embedding lookup)."""
    h, d, nq, g = a["hidden_size"], a["kv_channels"], a["num_attention_heads"], a["num_query_groups"]
    attention = h * (nq * d + 2 * g * d) + nq * d * h + h + 2 * d  # qkv, proj, input norm, q/k norms
    if "num_experts" in a:
        e, k = a["num_experts"], a["moe_router_topk"]
        mlp = h + e * h + 3 * h * a["moe_ffn_hidden_size"] * k
    else:
        mlp = h + 3 * h * a["ffn_hidden_size"]
    return a["num_layers"] * (attention + mlp) + a["vocab_size"] * h


def forward_flops(p: dict) -> tuple[float, float]:
    """(FLOPs of one forward over the micro-batch, attention's share of them)."""
    a, t = p["architecture"], p["tokens_per_microbatch"]
    attention = 4.0 * a["num_attention_heads"] * a["kv_channels"] * a["num_layers"] * (t / 2.0)
    per_token = 2.0 * active_params(a) + attention
    return t * per_token, attention / per_token


def predicted(p: dict) -> dict:
    fwd, share = forward_flops(p)
    full = p["recompute"] == "full"
    peak = PEAK_BF16_TFLOPS * 1e12
    active, t = active_params(p["architecture"]), p["tokens_per_microbatch"]
    train = fwd * (4.0 if full else 3.0) / (peak * achieved_fraction(active, t, recompute=full, attention_share=share))
    logprob = fwd / (peak * achieved_fraction(active, t, recompute=False, attention_share=share))
    return {"train_fwd_bwd_s": train, "logprob_s": logprob,
            "train_optimizer_s": optimizer_step_s(p["params"], H200_HBM_GBS)}


def test_the_reference_was_measured_on_an_h200_with_dense_and_moe_points_and_both_recompute_settings():
    assert REFERENCE["meta"]["gpu"] == "NVIDIA H200"
    assert REFERENCE["meta"]["torch"] and REFERENCE["meta"]["date"]
    assert {p["recompute"] for p in POINTS.values()} == {"full", "none"}
    assert any("num_experts" in p["architecture"] for p in POINTS.values())
    assert len({p["tokens_per_microbatch"] for p in POINTS.values()}) >= 4
    # The launch-bound SequentialMLP MoE runs are recorded as excluded, with the reason.
    assert all(x["why"] for x in REFERENCE["meta"]["excluded"])


@pytest.mark.parametrize("pid", sorted(POINTS))
@pytest.mark.parametrize("phase", ["train_fwd_bwd_s", "logprob_s", "train_optimizer_s"])
def test_the_model_predicts_each_timed_pass_within_20_percent(pid, phase):
    p = POINTS[pid]
    measured = p["measured"][phase]
    pred = predicted(p)[phase]
    assert abs(pred / measured - 1.0) <= TOLERANCE, f"{pid} {phase}: predicted {pred:.4f} s, measured {measured:.4f} s"


@pytest.mark.parametrize("pid", sorted(POINTS))
def test_the_whole_train_step_forward_backward_and_optimizer_is_within_20_percent(pid):
    p = POINTS[pid]
    pred = predicted(p)
    total = pred["train_fwd_bwd_s"] + pred["train_optimizer_s"]
    assert abs(total / p["measured"]["train_s"] - 1.0) <= TOLERANCE, (pid, total, p["measured"]["train_s"])


def test_the_fraction_rises_with_work_per_micro_batch_and_falls_with_attention():
    small = achieved_fraction(0.6e9, 2048, recompute=False, attention_share=0.1)
    large = achieved_fraction(4e9, 16384, recompute=False, attention_share=0.1)
    attn_heavy = achieved_fraction(4e9, 16384, recompute=False, attention_share=0.7)
    assert small < large and attn_heavy < large
    assert 0.0 < small < 1.0 and large < 0.6


def test_without_the_attention_share_the_fraction_guesses_it_from_the_micro_batch():
    # Longer micro-batches: more attention, which runs at a lower rate than the GEMMs.
    f8 = achieved_fraction(4e9, 8192, recompute=False)
    f64 = achieved_fraction(4e9, 65536, recompute=False)
    assert f64 < f8
    assert f8 == achieved_fraction(4e9, 8192, recompute=False, attention_share=8192 / (8192 + 31900.0))
