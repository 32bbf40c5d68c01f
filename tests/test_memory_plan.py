"""The per-GPU memory plan (clawgym/memory/): a pure function of the resolved config, golden-tested,
and the behaviours the issue asks of it (the seed fits an 80 GB GPU; the two configs of issue 15's
Why are refused with advice that, followed, fits)."""

from __future__ import annotations

import copy
import json
import os
import subprocess
import sys
from functools import lru_cache
from pathlib import Path
from typing import Any, Dict, List, Tuple

import pytest

from clawgym.config.compose import compose, to_plain
from clawgym.search.advice import memory_plan
from clawgym.memory import params as P
from clawgym.memory.rollout import auto_fraction, cell_bytes
from clawgym.validate import violations
from tests.conftest import ROOT

GOLDEN = Path(__file__).resolve().parent / "golden" / "memory_plans.json"
UPDATE = os.environ.get("CLAWGYM_UPDATE_GOLDEN") == "1"

#: Configs of issue 15's Why: accepted without a word before the memory plan.
WHY = {
    "qwen3_235b_colocate_8": ["model=qwen3_235b_a22b", "gpu_layout=colocate_8", "optimizer.cpu_offload=false"],
    "qwen3_4b_colocate_1_128k": ["model=qwen3_4b", "gpu_layout=colocate_1", "optimizer.cpu_offload=false",
                                 "rollout.max_context_len=131072"],
}

GOLDENS: Dict[str, List[str]] = {
    "seed_default": ["memory.gpu=h100_80gb"],
    "qwen3_30b_a3b_tp4_ep4_h200": ["model=qwen3_30b_a3b", "perf.expert_parallel=4", "memory.gpu=h200_141gb"],
    "deepseek_v3_5layer_mla": ["model=deepseek_v3_5layer", "gpu_layout=colocate_8", "perf.tensor_parallel=8",
                               "perf.expert_parallel=8", "sglang.tp=8", "memory.gpu=h200_141gb"],
    "qwen3_4b_no_recompute_a100": ["perf.recompute_granularity=null", "perf.recompute_method=null",
                                   "perf.recompute_num_layers=null", "memory.gpu=a100_80gb"],
    **{f"why_{k}": [*v, "memory.gpu=h100_80gb"] for k, v in WHY.items()},
}


@lru_cache(maxsize=None)
def plain(overrides: Tuple[str, ...]) -> Dict[str, Any]:
    return to_plain(compose(list(overrides)))


def plan(*overrides: str, gpu: Any = None):
    return memory_plan(plain(tuple(overrides)), gpu)


def test_memory_plans_match_their_goldens():
    got = {name: plan(*ov).to_dict() for name, ov in GOLDENS.items()}
    if UPDATE:
        GOLDEN.write_text(json.dumps(got, indent=1, sort_keys=True) + "\n")
    want = json.loads(GOLDEN.read_text())
    for name in GOLDENS:
        assert got[name] == want[name], f"{name}: regenerate with CLAWGYM_UPDATE_GOLDEN=1 and review the diff"


def test_the_seeds_default_run_fits_an_80gb_gpu_and_says_how_many_of_its_64_trajectories_fit():
    p = plan("memory.gpu=h100_80gb")
    assert p.fits, p.problems
    r = p.rollout
    assert r["concurrent_trajectories"] == 64 and r["context_len"] == 65536
    assert 0 < r["trajectories_fit"] < 64
    assert r["trajectories_fit"] == r["engines"] * (r["kv_tokens_per_engine"] // 65536)
    assert any(f"{r['trajectories_fit']} of 64 concurrent trajectories fit" in n for n in p.notes), p.notes


@pytest.mark.parametrize("name", list(WHY))
def test_the_configs_of_the_issue_are_refused_with_advice_that_when_followed_fits(name):
    overrides = [*WHY[name], "memory.gpu=h100_80gb"]
    p = plan(*overrides)
    assert not p.fits and p.problems
    assert p.advice and p.advice_overrides, p.advice
    for extra in p.advice_overrides:
        followed = compose([*overrides, *extra])
        # Advice may move to several nodes (the layout search's best layout): that runs on a cluster of
        # them, which cluster=local's one-node head is not (local-head-gpus-fit says so).
        found = [v.code for v in violations(followed) if v.code != "local-head-gpus-fit"]
        assert found == [], (extra, found)
        after = memory_plan(to_plain(followed))
        assert after.fits, (extra, after.problems)


def test_params_total_is_the_architectures_count_and_per_gpu_the_megatron_shard():
    p = plan("memory.gpu=h100_80gb")
    assert p.actor["params_total"] == 4_022_468_096
    # TP 4: the linear layers and the (padded) vocabulary split four ways, norms replicated.
    m = plain(())["model"]
    layers = P.layer_params(m)
    h = m["hidden_size"]
    want = sum(lp.tp // 4 + lp.rep for lp in layers) + P.padded_vocab(m, 4) // 4 * h + h
    assert p.actor["params_per_gpu"] == want


def test_experts_split_over_expert_parallel_ranks_and_stages_over_pipeline_ranks():
    m = plain(("model=qwen3_30b_a3b",))["model"]
    one = P.per_rank(m, tp=1)
    assert P.per_rank(m, tp=1, ep=8).expert * 8 == one.expert
    assert P.per_rank(m, tp=1, ep=8).dense == one.dense
    two = P.per_rank(m, tp=1, pp=2)
    # Untied: each stage holds one of embedding/output and half the layers.
    assert two.total < one.total * 0.55 and two.total > one.total * 0.45


def test_the_gpu_is_memory_gpu_else_this_nodes_else_an_assumption_the_plan_names():
    assert plan("memory.gpu=h200_141gb").gpu == "h200_141gb"
    detected = {"device": "NVIDIA H200", "gpu": "h200_141gb", "gpu_memory_gib": 140.4}
    p = plan(gpu=detected)
    assert p.gpu == "h200_141gb" and "detected on this node" in p.gpu_source
    p = plan()
    assert p.gpu == "h100_80gb" and "assumed" in p.gpu_source and "memory.gpu" in p.gpu_source
    assert plan("memory.gpu=h100_80gb", "memory.gpu_memory_gib=40").gpu_memory_gib == 40.0


def test_cpu_offload_moves_the_optimizer_state_from_the_gpu_to_host_ram():
    on, off = plan("memory.gpu=h100_80gb"), plan("memory.gpu=h100_80gb", "optimizer.cpu_offload=false",
                                                  "optimizer.use_precision_aware_optimizer=false")
    assert on.actor["optimizer_gpu_gib"] == 0 and off.actor["optimizer_gpu_gib"] > 0
    assert off.actor["static_gib"] - on.actor["static_gib"] == pytest.approx(off.actor["optimizer_gpu_gib"], abs=0.01)
    assert on.host["ram_gib_per_node"] > off.host["ram_gib_per_node"]


def test_full_recompute_keeps_less_activation_memory_than_none():
    full = plan("memory.gpu=h100_80gb")
    none = plan("memory.gpu=h100_80gb", "perf.recompute_granularity=null", "perf.recompute_method=null",
                "perf.recompute_num_layers=null")
    assert none.actor["activations_gib"] > 5 * full.actor["activations_gib"]


def test_a_colocated_peak_is_the_largest_phase_plus_what_offload_leaves_not_the_sum():
    p = plan("model=qwen3_1_7b", "gpu_layout=colocate_1", "perf.max_tokens_per_gpu=8192",
             "rollout.max_context_len=16384", "memory.gpu=h200_141gb")
    ph = p.phases
    assert ph["peak_gib"] == max(ph["rollout_phase_gib"], ph["train_phase_gib"])
    assert ph["peak_gib"] < p.rollout["static_gib"] + p.actor["train_peak_gib"]


def test_kv_bytes_per_token_follow_sglangs_formula_for_gqa_mla_and_hybrid_attention():
    qwen = plain(())["model"]
    assert cell_bytes(qwen, 1) == 8 * (128 + 128) * 36 * 2
    assert cell_bytes(qwen, 4) == 2 * (128 + 128) * 36 * 2
    assert cell_bytes(qwen, 16) == 1 * (128 + 128) * 36 * 2  # at least one KV head per rank
    ds = plain(("model=deepseek_v3",))["model"]
    assert cell_bytes(ds, 8) == (512 + 64) * 61 * 2  # MLA's latent: not split by TP
    nxt = plain(("model=qwen3_next_80b_a3b",))["model"]
    assert cell_bytes(nxt, 1) == 2 * (256 + 256) * 12 * 2  # only the 12 full-attention layers


def test_a_null_mem_fraction_static_is_sglangs_own_choice():
    # H100 tier: chunked prefill 8192, CUDA-graph max batch 256 (TP < 4).
    gpu_mib = 79.15 * 1024
    want = round((gpu_mib - (512 + 8192 * 1.5 + 256 * 2 + 1 / 8 * 1024)) / gpu_mib, 3)
    assert auto_fraction("clawgym", gpu_mib, 1) == want
    # (A null sglang.mem_fraction_static, where the schema allows it, leaves SGLang's default.)
    c = copy.deepcopy(plain(("memory.gpu=h100_80gb",)))
    c["sglang"]["mem_fraction_static"] = None
    p = memory_plan(c)
    assert p.rollout["mem_fraction_auto"] and p.rollout["mem_fraction_static"] == want
    # Small GPUs have no 10 GiB floor; large ones do.
    assert auto_fraction("slime", 40 * 1024, 1) > auto_fraction("slime", 80 * 1024, 1) - 0.2


def test_the_plan_imports_no_torch_megatron_or_sglang():
    code = ("import sys; from clawgym.config.compose import compose, to_plain; from clawgym.memory import memory_plan; "
            "memory_plan(to_plain(compose([]))); "
            "bad = [m for m in ('torch', 'megatron', 'sglang') if m in sys.modules]; assert not bad, bad")
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr


def test_sglangs_working_memory_is_counted_so_a_static_fraction_of_one_does_not_fit():
    """Issue 28, finding 11: mem_fraction_static=1.0 "fit" at 79.2 of 79.2 GiB; SGLang keeps its CUDA
    graphs and activations outside the static share (as its own automatic fraction reserves them)."""
    p = plan("sglang.mem_fraction_static=1.0", "memory.gpu=h100_80gb")
    assert not p.fits
    assert p.rollout["working_gib"] > 10
    assert any("working memory outside it (CUDA graphs, activations" in x for x in p.problems), p.problems
    # The advice it gives, followed, fits.
    assert p.advice_overrides and plan("sglang.mem_fraction_static=1.0", "memory.gpu=h100_80gb",
                                       *p.advice_overrides[0]).fits


def test_the_real_blocker_of_a_model_whose_engine_weights_fill_the_gpu_is_named():
    """Issue 28, finding 11: kimi_k2 on 8 H200 said the closest combination "still needs 121.8 GiB" of
    139.9, hiding that SGLang's weights alone (1,911 GiB per rank) leave no KV cache."""
    p = plan("model=kimi_k2", "gpu_layout=colocate_8", "memory.gpu=h200_141gb")
    assert not p.fits
    assert p.problems[0].startswith("SGLang's weights are 1,911.8 GiB per engine rank") and \
        "no room for a KV cache" in p.problems[0], p.problems
    assert "even the widest engine of these GPUs (sglang.tp=8)" in p.problems[0]
    assert not any("still needs" in a for a in p.advice), p.advice
    assert any("no room for a KV cache" in a for a in p.advice), p.advice
