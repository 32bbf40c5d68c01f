"""The step-time model (clawgym/steptime): a pure translation config -> seconds, golden-tested, and the
directions its stated terms must move in."""

from __future__ import annotations

import json
import os
from functools import lru_cache
from pathlib import Path
from typing import Dict, List

import pytest

from clawgym.config.compose import compose, to_plain
from clawgym.trainer.effective import effective_config
from clawgym.memory import gpus as G
from clawgym.steptime import CONSTANTS, step_time
from clawgym.steptime.compute import achieved_fraction

GOLDEN = Path(__file__).resolve().parent / "golden" / "step_times.json"
UPDATE = os.environ.get("CLAWGYM_UPDATE_GOLDEN") == "1"

GOLDENS: Dict[str, List[str]] = {
    "seed_default_h100": ["memory.gpu=h100_80gb"],
    "qwen3_4b_colocate_8_h200": ["gpu_layout=colocate_8", "perf.tensor_parallel=2", "sglang.tp=2",
                                 "memory.gpu=h200_141gb"],
    "qwen3_30b_a3b_ep8_h200": ["model=qwen3_30b_a3b", "gpu_layout=colocate_8", "perf.tensor_parallel=1",
                               "perf.expert_parallel=8", "sglang.tp=4", "memory.gpu=h200_141gb"],
    "qwen3_32b_two_actor_nodes_pp2": ["model=qwen3_32b", "gpu_layout.num_gpus=8", "gpu_layout.actor_num_nodes=2",
                                      "gpu_layout.actor_gpus=8", "gpu_layout.rollout_gpus=8",
                                      "perf.tensor_parallel=4", "perf.pipeline_parallel=2", "sglang.tp=8",
                                      "memory.gpu=h100_80gb"],
    "deepseek_v3_5layer_mla_cp2": ["model=deepseek_v3_5layer", "gpu_layout=colocate_8", "perf.tensor_parallel=4",
                                   "perf.context_parallel=2", "perf.expert_parallel=8", "sglang.tp=8",
                                   "memory.gpu=h200_141gb"],
}


@lru_cache(maxsize=None)
def cfg(*overrides: str) -> dict:
    return effective_config(to_plain(compose(list(overrides))))


def st(*overrides: str):
    c = cfg(*overrides)
    return step_time(c, c["memory"]["gpu"])


def test_step_times_of_the_golden_configs_are_unchanged():
    got = {name: st(*ov).to_dict() for name, ov in GOLDENS.items()}
    if UPDATE:
        GOLDEN.write_text(json.dumps(got, indent=2, sort_keys=True) + "\n")
    want = json.loads(GOLDEN.read_text())
    for name in GOLDENS:
        assert got[name] == want[name], f"{name}: regenerate with CLAWGYM_UPDATE_GOLDEN=1 and review the diff"


def test_a_colocated_step_is_its_phases_in_turn_and_a_split_one_overlaps_rollout_and_training():
    col = st(*GOLDENS["qwen3_4b_colocate_8_h200"])
    assert col.step_s == pytest.approx(col.rollout_s + col.logprob_s + col.train_s + col.weight_update_s
                                       + col.offload_s, rel=1e-6)
    split = st("memory.gpu=h100_80gb")
    assert split.offload_s == 0
    assert split.step_s == pytest.approx(max(split.rollout_s, split.logprob_s + split.train_s)
                                         + split.weight_update_s, rel=1e-6)


def test_full_recompute_costs_one_more_forward_than_none():
    base = ["memory.gpu=h200_141gb", "gpu_layout=colocate_8", "perf.tensor_parallel=2"]
    full = st(*base)
    none = st(*base, "perf.recompute_granularity=null", "perf.recompute_method=null",
              "perf.recompute_num_layers=null")
    # Train compute: 4 forwards against 3, at the measured rate of a recomputing pass (Megatron re-runs
    # the layers only: benchmarks/step_time_reference.json fits RECOMPUTE_FACTOR).
    from clawgym.steptime.compute import RECOMPUTE_FACTOR

    assert full.terms["train_compute_s"] == pytest.approx(
        none.terms["train_compute_s"] * 4 / 3 / RECOMPUTE_FACTOR, rel=1e-6)
    assert full.logprob_s == pytest.approx(none.logprob_s, rel=1e-6)


def test_the_train_pass_takes_its_rate_from_achieved_fraction_alone():
    t = st(*GOLDENS["qwen3_4b_colocate_8_h200"]).terms
    # Terms are rounded to 6 significant digits.
    assert t["achieved_fraction_train"] == pytest.approx(achieved_fraction(
        t["active_params_per_rank"], t["tokens_per_microbatch"], recompute=True,
        attention_share=t["attention_share"]), rel=1e-5)


def test_the_h200s_bandwidth_and_kv_cache_shorten_the_rollout_and_a_kv_cache_too_small_queues_waves():
    h100 = st("memory.gpu=h100_80gb")
    h200 = st("memory.gpu=h200_141gb")
    assert G.GPUS["h200_141gb"].hbm_gbs > G.GPUS["h100_80gb"].hbm_gbs
    # A bigger batch per decode iteration (more KV) read faster: fewer waves, a shorter rollout.
    assert h200.terms["batch_per_engine"] > h100.terms["batch_per_engine"]
    assert h200.terms["waves"] < h100.terms["waves"] and h200.rollout_s < h100.rollout_s
    small = st("memory.gpu=h100_80gb", "sglang.mem_fraction_static=0.6")
    assert small.terms["waves"] > h100.terms["waves"] and small.rollout_s > h100.rollout_s


def test_tensor_parallel_communication_is_a_stated_term_that_grows_with_tp():
    one = st("memory.gpu=h200_141gb", "gpu_layout=colocate_8", "perf.tensor_parallel=1",
             "perf.sequence_parallel=false")
    four = st("memory.gpu=h200_141gb", "gpu_layout=colocate_8", "perf.tensor_parallel=4")
    assert one.terms["train_comm_s"] == 0 < four.terms["train_comm_s"]


def test_every_constant_is_positive_and_documented_in_the_module():
    import clawgym.steptime as S

    src = Path(S.__file__).read_text()
    for name, value in CONSTANTS.items():
        assert value > 0 and f'"{name}"' in src
