"""One test per rule of clawgym/validate/trainer_rules.py (the trainers' own startup checks), named
after the rule, and the false refusals they replaced (configs upstream starts)."""

from __future__ import annotations

import re
from typing import Dict, List, NamedTuple

import pytest

from clawgym.config.compose import compose
from clawgym.validate import ConfigError, check, format_warnings
from tests.conftest import ROOT
from tests.test_validation import rule_codes_in_source


class Case(NamedTuple):
    # Overrides that break exactly this rule.
    overrides: List[str]
    # Key paths the report names, in order.
    keys: List[str]
    # Text the fix must hold: the value that works.
    fix: str
    # "error" refuses, "warning" is printed only.
    severity: str = "error"


_SPLIT_16 = ["gpu_layout.num_gpus=16", "gpu_layout.rollout_gpus=8"]

CASES: Dict[str, Case] = {
    "model-parallel-divides-actor-gpus": Case(
        ["gpu_layout.actor_gpus=6", "perf.tensor_parallel=4"],
        ["perf.tensor_parallel", "perf.pipeline_parallel", "perf.context_parallel", "gpu_layout.actor_gpus"],
        "perf.tensor_parallel=3"),
    "expert-parallel-divides-actor-gpus": Case(
        ["model=qwen3_30b_a3b", "gpu_layout=split_4_4", "perf.expert_parallel=8"],
        ["perf.expert_parallel", "perf.expert_tensor_parallel", "perf.pipeline_parallel", "gpu_layout.actor_gpus"],
        "perf.expert_parallel=4"),
    # issue 35: args.sglang_ep_size=8 on the dense seed model passed without comment.
    "sglang-ep-on-dense-model": Case(["args.sglang_ep_size=8"], ["args.sglang_ep_size", "model.num_experts"],
                                     "set it to 1", "warning"),
    "expert-parallel-needs-moe": Case(["perf.expert_parallel=2"], ["perf.expert_parallel", "model.num_experts"],
                                      "perf.expert_parallel=1"),
    "expert-parallel-divides-experts": Case(
        ["model=qwen3_30b_a3b", "gpu_layout.actor_gpus=6", "gpu_layout.num_gpus=16", "perf.tensor_parallel=1",
         "perf.expert_parallel=3", "rollout.batch_size=6"],
        ["perf.expert_parallel", "model.num_experts"], "perf.expert_parallel=2"),
    "pipeline-divides-layers": Case(
        ["perf.pipeline_parallel=5", "perf.tensor_parallel=1", "gpu_layout.actor_gpus=5", "rollout.batch_size=5"],
        ["perf.pipeline_parallel", "model.num_layers"], "perf.pipeline_parallel=1"),
    "uneven-pipeline-needs-pipeline": Case(["+args.decoder_first_pipeline_num_layers=4"],
                                           ["perf.pipeline_parallel", "args"], "perf.pipeline_parallel"),
    "virtual-pipeline-divides-stage": Case(
        ["perf.pipeline_parallel=2", "perf.tensor_parallel=2", "+args.num_layers_per_virtual_pipeline_stage=5"],
        ["args.num_layers_per_virtual_pipeline_stage", "perf.pipeline_parallel"], "divisor of 18"),
    "virtual-pipeline-needs-pipeline": Case(
        ["perf.pipeline_parallel=2", "perf.tensor_parallel=2", "+args.num_layers_per_virtual_pipeline_stage=6",
         "+args.no_overlap_p2p_communication=true"], ["perf.pipeline_parallel"], "perf.pipeline_parallel=3"),
    "context-parallel-divides-seq-length": Case(
        ["perf.context_parallel=3", "gpu_layout.actor_gpus=3", "perf.tensor_parallel=1", "rollout.batch_size=3"],
        ["perf.context_parallel", "model.seq_length"], "perf.context_parallel=1"),
    "tp-divides-heads": Case(["gpu_layout.actor_gpus=3"], ["perf.tensor_parallel", "model.num_attention_heads"],
                             "perf.tensor_parallel=1"),
    "tp-divides-query-groups": Case(["model=qwen3_14b", "gpu_layout.actor_gpus=5", "gpu_layout.rollout_gpus=3"],
                                    ["perf.tensor_parallel", "model.num_query_groups"], "perf.tensor_parallel=1"),
    # A context asked for above the window (the default is capped at it, so it is asked explicitly).
    "sglang-context-within-model-window": Case(["model=glm4_32b", "perf.tensor_parallel=2",
                                                "rollout.max_context_len=65536"],
                                               ["sglang.context_length", "rollout.max_context_len",
                                                "model.context_window"],
                                               "rollout.max_context_len=32768"),
    "rollout-context-within-model-window": Case(
        ["model=glm4_32b", "perf.tensor_parallel=2", "sglang.context_length=null", "rollout.max_context_len=65536"],
        ["rollout.max_context_len", "model.context_window"], "rollout.max_context_len=32768", "warning"),
    "recompute-granularity-known": Case(["perf.recompute_granularity=partial"], ["perf.recompute_granularity"],
                                        "perf.recompute_granularity to full"),
    "selective-recompute-no-method": Case(["perf.recompute_granularity=selective"],
                                          ["perf.recompute_granularity", "perf.recompute_method"],
                                          "perf.recompute_method=null"),
    "full-recompute-needs-method": Case(["trainer=slime", "perf.recompute_method=null"],
                                        ["perf.recompute_granularity", "perf.recompute_method"],
                                        "perf.recompute_method=uniform"),
    "full-recompute-needs-num-layers": Case(["trainer=slime", "perf.recompute_num_layers=null"],
                                            ["perf.recompute_granularity", "perf.recompute_num_layers"],
                                            "perf.recompute_num_layers=1"),
    "selective-recompute-no-num-layers": Case(
        ["trainer=slime", "perf.recompute_granularity=selective", "perf.recompute_method=null"],
        ["perf.recompute_granularity", "perf.recompute_num_layers"], "perf.recompute_num_layers=null"),
    # The default follows TP (off at 1): the rule is for a user who turns it on at TP 1.
    "sequence-parallel-off-at-tp1": Case(["perf.tensor_parallel=1", "perf.sequence_parallel=true"],
                                         ["perf.sequence_parallel", "perf.tensor_parallel"],
                                         "perf.sequence_parallel=false", "warning"),
    "global-batch-matches-rollout": Case(
        ["rollout.batch_size=3", "rollout.n_samples_per_prompt=3", "+args.global_batch_size=4"],
        ["args.global_batch_size", "rollout.batch_size", "rollout.n_samples_per_prompt",
         "rollout.num_steps_per_rollout"], "slime sets 9"),
    "global-batch-positive": Case(
        ["rollout.num_steps_per_rollout=100", "rollout.batch_size=2", "rollout.n_samples_per_prompt=2"],
        ["rollout.num_steps_per_rollout", "rollout.batch_size", "rollout.n_samples_per_prompt"],
        "rollout.num_steps_per_rollout to at most 4"),
    "global-batch-divides-micro-batches": Case(
        ["perf.tensor_parallel=1", "rollout.batch_size=3", "rollout.n_samples_per_prompt=3"],
        ["rollout.batch_size", "rollout.n_samples_per_prompt", "rollout.num_steps_per_rollout"], "= 12"),
    "grpo-needs-several-samples": Case(["rollout.n_samples_per_prompt=1"],
                                       ["grpo.advantage_estimator", "rollout.n_samples_per_prompt"],
                                       "rollout.n_samples_per_prompt to 2"),
    "trainer-matches-colocation": Case(["gpu_layout=colocate_8", "gpu_layout.trainer_script=train_async.py"],
                                       ["gpu_layout.colocate", "gpu_layout.trainer_script"],
                                       "gpu_layout.trainer_script=train.py"),
    "rollout-engine-fits": Case(["sglang.tp=8"], ["sglang.tp", "gpu_layout.rollout_gpus"], "sglang.tp=4"),
    # Issue 28, finding 12: an engine wider than the colocated GPUs starts nowhere (1 GPU, TP 2; 4 GPUs, TP 8).
    "colocated-engine-fits": Case(["gpu_layout=colocate_1", "sglang.tp=2"],
                                  ["sglang.tp", "gpu_layout.actor_gpus", "gpu_layout.colocate"], "sglang.tp=1"),
    "sglang-tp-divides-rollout-gpus": Case(["gpu_layout.rollout_gpus=3", "sglang.tp=2"],
                                           ["sglang.tp", "gpu_layout.rollout_gpus"], "sglang.tp=", "warning"),
    "sglang-pp-divides-engine": Case(["+args.sglang_pp_size=3", "sglang.tp=4"], ["sglang.tp", "args"],
                                     "multiple of 3"),
    "sglang-dp-needs-dp-attention": Case(["+args.sglang_dp_size=2", "sglang.tp=4"], ["sglang.tp", "args"],
                                         "args.sglang_enable_dp_attention=true"),
    "sglang-dp-divides-tp": Case(["+args.sglang_dp_size=3", "sglang.tp=4", "+args.sglang_enable_dp_attention=true"],
                                 ["sglang.tp", "args"], "1, 2, 4"),
    "sglang-tp-divides-heads": Case(["gpu_layout.rollout_gpus=3", "sglang.tp=3"],
                                    ["sglang.tp", "model.num_attention_heads"], "sglang.tp=1"),
    "reinforce-needs-normalized-advantages": Case(["grpo.advantage_estimator=reinforce_plus_plus"],
                                                  ["grpo.advantage_estimator"], "args.normalize_advantages=true"),
    "one-kl-coefficient": Case(["+args.kl_coef=0.1", "grpo.kl_loss_coef=0.1"], ["grpo.kl_loss_coef", "args.kl_coef"],
                               "grpo.kl_loss_coef=0"),
    "rollout-logprobs-exclude-tis": Case(["+args.use_rollout_logprobs=true", "+args.use_tis=true"], ["args.use_tis"],
                                         "remove one"),
    "over-sampling-at-least-rollout-batch": Case(["+args.over_sampling_batch_size=4"],
                                                 ["args.over_sampling_batch_size", "rollout.batch_size"],
                                                 "args.over_sampling_batch_size=8"),
    "prompt-shorter-than-context": Case(["+args.rollout_max_prompt_len=65536"],
                                        ["args.rollout_max_prompt_len", "rollout.max_context_len"],
                                        "args.rollout_max_prompt_len=65535"),
}


def test_every_trainer_rule_has_a_test():
    codes = rule_codes_in_source(trainer=True)
    assert codes == set(CASES), (f"rules without a case: {sorted(codes - set(CASES))}; "
                                 f"cases without a rule: {sorted(set(CASES) - codes)}")


def test_every_trainer_rule_names_the_code_it_mirrors():
    src = (ROOT / "clawgym" / "validate" / "trainer_rules.py").read_text()
    for match in re.finditer(r"^def (rule_\w+)\(v: Collector\) -> None:\n    \"\"\"(.*?)\"\"\"", src, re.S | re.M):
        name, doc = match.groups()
        assert "Mirrors:" in doc or "clawgym refuses" in doc or "Not a trainer check" in doc, name


@pytest.mark.parametrize("code", list(CASES))
def test_trainer_rule(code: str):
    case = CASES[code]
    errors, warned = check(compose(case.overrides))
    pool = errors if case.severity == "error" else warned
    mine = [v for v in pool if v.code == code]
    assert mine, f"{code} not reported as {case.severity} for {case.overrides}; errors {[v.code for v in errors]}, " \
                 f"warnings {[v.code for v in warned]}"
    v = mine[0]
    assert v.severity == case.severity
    assert v.keys == case.keys
    assert case.fix in v.fix, v.fix
    if case.severity == "error":
        assert f"[{code}]" in ConfigError(errors).report()
    else:
        assert code not in {e.code for e in errors}
        assert f"[{code}]" in format_warnings(warned)


@pytest.mark.parametrize("overrides", [
    # slime's train.py has no colocate assert: upstream runs split layouts with it (scripts/run-glm4-9B.sh).
    ["gpu_layout=split_4_4", "gpu_layout.trainer_script=train.py"],
    # DP attention shards attention over TP / DP = 1 (scripts/run-qwen3-235B-A22B.sh style).
    ["gpu_layout.num_gpus=16", "gpu_layout.rollout_gpus=6", "sglang.tp=6", "+args.sglang_dp_size=6",
     "+args.sglang_enable_dp_attention=true"],
    # An SFT loss has no GRPO group.
    ["rollout.n_samples_per_prompt=1", "+args.loss_type=sft_loss"],
    # Engine TP leaving GPUs idle starts: a warning only.
    ["gpu_layout.rollout_gpus=3", "sglang.tp=2"],
    # Upstream Megatron takes TP a multiple of the query groups (4 groups over TP 8); the fork's does not.
    # (Its rollout context within the checkpoint's window, 40960: rule sglang-context-within-model-window.)
    ["trainer=slime", "model=qwen3_30b_a3b", "gpu_layout=colocate_8", "rollout.max_context_len=40960"],
    # SGLang may run past the window when told to.
    ["model=glm4_32b", "perf.tensor_parallel=2", "+extra_env.SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN=1"],
    # log_probs_chunk_size <= 0 means no chunking (the trainer's default is -1).
    ["perf.log_probs_chunk_size=-1"],
    # A layout over more than one node's GPUs is placed by Ray; the preflight counts the cluster.
    # 16 GPUs: a cluster of two nodes (on cluster=local's one-node head clawgym refuses it, a rule of its
    # own cluster, local-head-gpus-fit, not the trainer's).
    ["gpu_layout.actor_gpus=8", "gpu_layout.rollout_gpus=8", "ray.address=http://127.0.0.1:8265"],
])
def test_trainer_accepts_what_upstream_starts(overrides: List[str]):
    errors, _ = check(compose(overrides))
    assert errors == [], [e.code for e in errors]


def test_query_groups_per_flavour():
    fork, _ = check(compose(["model=qwen3_30b_a3b", "gpu_layout=colocate_8"]))
    assert "tp-divides-query-groups" in {e.code for e in fork}


def test_sglang_heads_refused_without_dp_attention():
    errors, _ = check(compose(["gpu_layout.num_gpus=16", "gpu_layout.rollout_gpus=6", "sglang.tp=6"]))
    assert "sglang-tp-divides-heads" in {e.code for e in errors}


@pytest.mark.parametrize("overrides,fix", [(["gpu_layout=colocate_1", "sglang.tp=2"], "sglang.tp=1"),
                                           (["gpu_layout=colocate_4", "sglang.tp=8"], "sglang.tp=4"),
                                           (["trainer=slime", "gpu_layout=colocate_4", "sglang.tp=8"], "sglang.tp=4")])
def test_a_colocated_engine_wider_than_its_gpus_is_refused_with_a_width_that_fits(overrides, fix):
    errors, _ = check(compose(overrides))
    mine = [v for v in errors if v.code == "colocated-engine-fits"]
    assert mine and fix in mine[0].fix, [v.code for v in errors]
    # ... and the width that the fix names is accepted.
    assert "colocated-engine-fits" not in {v.code for v in check(compose([*overrides, fix]))[0]}
