"""One test per validation rule (named after the rule's code), all violations at once,
and the CLI contract: a bad config exits non-zero with the report alone and writes nothing."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from typing import Any, Dict, List, NamedTuple

import pytest

from clawgym.config.compose import compose
from clawgym.validate import ConfigError, Violation, check, validate, violations
from tests.conftest import ROOT


class Case(NamedTuple):
    # Overrides that break exactly this rule (other rules may follow from them).
    overrides: List[str]
    # Key paths the violation must name, in order.
    keys: List[str]
    # The offending values it must report, by key path.
    values: Dict[str, Any]
    # Folders to create under the test's tmp dir first; "{tmp}" in overrides/values is that dir.
    makedirs: List[str] = []
    # Environment variables the launcher sees (e.g. a secret).
    env: Dict[str, str] = {}
    # A rule about this machine (validate.HERE_RULES): run as train.py and the sweep run them.
    here: bool = False


#: Rule code -> a config breaking it. Codes are those of clawgym/validate/.
CASES: Dict[str, Case] = {
    # issue 35: paths.root=/nonexistent/RL dry_run=true printed a whole plan and exited 0.
    "checkout-exists": Case(["paths.root={tmp}/nonexistent/RL"], ["paths.root"],
                            {"paths.root": "{tmp}/nonexistent/RL"}, here=True),
    # --- issue 2 §6 rules
    # Over one node's GPUs is a warning on a cluster of several nodes (existing, SLURM, KubeRay) ...
    "split-gpus-fit": Case(["gpu_layout.actor_gpus=6", "ray.address=http://10.0.0.1:8265"],
                           ["gpu_layout.actor_gpus", "gpu_layout.rollout_gpus", "gpu_layout.num_gpus"],
                           {"gpu_layout.actor_gpus": 6, "gpu_layout.rollout_gpus": 4, "gpu_layout.num_gpus": 8}),
    "colocated-gpus-fit": Case(["gpu_layout=colocate_8", "gpu_layout.actor_gpus=16", "ray.address=http://10.0.0.1:8265"],
                               ["gpu_layout.actor_gpus", "gpu_layout.num_gpus"],
                               {"gpu_layout.actor_gpus": 16, "gpu_layout.num_gpus": 8}),
    "sglang-context-holds-rollout-context": Case(["sglang.context_length=32768"],
                                                 ["sglang.context_length", "rollout.max_context_len"],
                                                 {"sglang.context_length": 32768, "rollout.max_context_len": 65536}),
    "context-exceeds-response": Case(["rollout.max_response_len=65536"],
                                     ["rollout.max_context_len", "rollout.max_response_len"],
                                     {"rollout.max_context_len": 65536, "rollout.max_response_len": 65536}),
    "temperature-positive": Case(["rollout.temperature=0"], ["rollout.temperature"], {"rollout.temperature": 0.0}),
    "eps-clip-high-at-least-low": Case(["grpo.eps_clip_high=0.1"], ["grpo.eps_clip_high", "grpo.eps_clip"],
                                       {"grpo.eps_clip_high": 0.1, "grpo.eps_clip": 0.2}),
    "save-interval-needs-save-dir": Case(["paths.save=null"], ["checkpoint.save_interval", "paths.save"],
                                         {"checkpoint.save_interval": 5, "paths.save": None}),
    "dynamic-batch-needs-max-tokens": Case(["perf.max_tokens_per_gpu=null"],
                                           ["perf.use_dynamic_batch_size", "perf.max_tokens_per_gpu"],
                                           {"perf.use_dynamic_batch_size": True, "perf.max_tokens_per_gpu": None}),
    "gpu-counts-positive": Case(["gpu_layout.rollout_gpus=0"], ["gpu_layout.rollout_gpus"],
                                {"gpu_layout.rollout_gpus": 0}),
    # Issue 28, finding 11: refused before any plan is built (3,000,000 layers ran > 5 min, 2**40 a MemoryError).
    "model-sizes-sane": Case(["model.num_layers=1099511627776"], ["model.num_layers"],
                             {"model.num_layers": 1099511627776}),
    "model-sizes-positive": Case(["model.hidden_size=0"], ["model.hidden_size"], {"model.hidden_size": 0}),
    "rollout-sizes-positive": Case(["rollout.batch_size=0"], ["rollout.batch_size"], {"rollout.batch_size": 0}),
    "paths-absolute": Case(["paths.root=."], ["paths.root"], {"paths.root": "."}),
    "args-value-looks-like-flag": Case(["+args.data_path=[--lr,0.5]"], ["args.data_path"],
                                       {"args.data_path": ["--lr", 0.5]}),
    "numbers-finite": Case(["rollout.temperature=nan"], ["rollout.temperature"], {}),
    "numbers-in-range": Case(["rollout.batch_size=10000000000000000000000"], ["rollout.batch_size"],
                             {"rollout.batch_size": 10 ** 22}),
    "parallel-sizes-positive": Case(["perf.pipeline_parallel=0"], ["perf.pipeline_parallel"],
                                    {"perf.pipeline_parallel": 0}),
    "eval-sizes-positive": Case(["eval.num_workers=0"], ["eval.num_workers"], {"eval.num_workers": 0}),
    "sglang-sizes-positive": Case(["sglang.tp=0"], ["sglang.tp"], {"sglang.tp": 0}),
    "chroot-needs-rootfs": Case(["sandbox=chroot"], ["sandbox.backend", "sandbox.rootfs"],
                                {"sandbox.backend": "chroot", "sandbox.rootfs": None}),
    # --- further rules
    "query-groups-divide-heads": Case(["model.num_query_groups=5"],
                                      ["model.num_attention_heads", "model.num_query_groups"],
                                      {"model.num_query_groups": 5}),
    "moe-complete": Case(["model=qwen3_30b_a3b", "model.moe_router_topk=null"],
                         ["model.num_experts", "model.moe_router_topk"], {"model.moe_router_topk": None}),
    "moe-topk-within-experts": Case(["model=qwen3_30b_a3b", "model.moe_router_topk=200"],
                                    ["model.moe_router_topk", "model.num_experts"], {"model.moe_router_topk": 200}),
    "eps-clip-positive": Case(["grpo.eps_clip=0"], ["grpo.eps_clip"], {"grpo.eps_clip": 0.0}),
    "kl-loss-type-known": Case(["grpo.kl_loss_type=k4"], ["grpo.kl_loss_type"], {"grpo.kl_loss_type": "k4"}),
    "lr-positive": Case(["optimizer.lr=0"], ["optimizer.lr"], {"optimizer.lr": 0.0}),
    "cpu-offload-needs-precision-aware": Case(
        ["optimizer.use_precision_aware_optimizer=false"],
        ["optimizer.cpu_offload", "optimizer.use_precision_aware_optimizer"],
        {"optimizer.use_precision_aware_optimizer": False}),
    "mem-fraction-in-range": Case(["sglang.mem_fraction_static=1.5"], ["sglang.mem_fraction_static"],
                                  {"sglang.mem_fraction_static": 1.5}),
    "api-port-in-range": Case(["sglang.api_port=70000"], ["sglang.api_port"], {"sglang.api_port": 70000}),
    "sandbox-backend-known": Case(["sandbox.backend=podman"], ["sandbox.backend"], {"sandbox.backend": "podman"}),
    "sandbox-none-without-openclaw-hooks": Case(
        ["sandbox=none", "rollout.reward_function_path=clawgym_rl_api_server.reward_func"],
        ["sandbox.backend", "rollout.reward_function_path"],
        {"sandbox.backend": "none", "rollout.reward_function_path": "clawgym_rl_api_server.reward_func"}),
    "mla-complete": Case(["model=deepseek_v3", "model.v_head_dim=null"],
                         ["model.multi_latent_attention", "model.v_head_dim"],
                         {"model.multi_latent_attention": True, "model.v_head_dim": None}),
    "spec-module-and-function": Case(["model=glm4_9b", "model.spec=[slime_plugins.models.glm4]"], ["model.spec"],
                                     {"model.spec": ["slime_plugins.models.glm4"]}),
    "docker-needs-image": Case(["sandbox.image=''"], ["sandbox.backend", "sandbox.image"], {"sandbox.image": ""}),
    "container-prefix-nonempty": Case(["sandbox.container_prefix=''"], ["sandbox.container_prefix"],
                                      {"sandbox.container_prefix": ""}),
    "names-are-folder-names": Case(["exp_name=a/b"], ["exp_name"], {"exp_name": "a/b"}),
    "name-within-name-max": Case(["run_name=" + "r" * 240], ["run_name"], {"run_name": "r" * 240}),
    "save-dir-not-checkout": Case(["exp_name=.."], ["paths.save", "paths.root"], {}),
    "save-dir-inside-another-run": Case(["paths.save={tmp}/exp/old/sub"], ["paths.save"],
                                        {"paths.save": "{tmp}/exp/old/sub"}, makedirs=["exp/old/clawgym/snapshots/clawgym-old-20260101_000000"]),
    # Issue 28, finding 8: the save dir is no input of the run (a real launch wrote iter_* into the tasks).
    "save-dir-not-an-input": Case(["paths.root={tmp}", "paths.save={tmp}/data/clawgym_train"],
                                  ["paths.save", "paths.train_tasks"],
                                  {"paths.save": "{tmp}/data/clawgym_train", "paths.train_tasks": "{tmp}/data/clawgym_train"}),
    "save-dir-above-another-run": Case(["paths.save={tmp}/exp"], ["paths.save"], {"paths.save": "{tmp}/exp"},
                                       makedirs=["exp/old/clawgym/snapshots/clawgym-old-20260101_000000"]),
    "no-secret-values-in-config": Case(["+extra_env.FOO=${oc.env:WANDB_API_KEY}"], ["extra_env.FOO"],
                                       {"extra_env.FOO": "<redacted>"}, env={"WANDB_API_KEY": "sentinel-key-789"}),
    "ray-port-in-range": Case(["ray.dashboard_port=0"], ["ray.dashboard_port"], {"ray.dashboard_port": 0}),
    "ray-gpus-nonnegative": Case(["ray.num_gpus=-1"], ["ray.num_gpus"], {"ray.num_gpus": -1}),
    "save-interval-positive": Case(["checkpoint.save_interval=0"], ["checkpoint.save_interval"],
                                   {"checkpoint.save_interval": 0}),
    "save-dir-needs-interval": Case(["checkpoint.save_interval=null"], ["paths.save", "checkpoint.save_interval"],
                                    {"checkpoint.save_interval": None}),
    "extra-args-not-generated": Case(["extra_args=[--lr,'1e-5']"], ["extra_args"], {"extra_args": ["--lr", "1e-5"]}),
    "no-secrets-in-argv": Case(["extra_args=[--wandb-key,abc]"], ["extra_args"], {"extra_args": "<redacted>"}),
    "no-secrets-in-extra-env": Case(["+extra_env.WANDB_API_KEY=sentinel-key-123"], ["extra_env.WANDB_API_KEY"],
                                    {"extra_env.WANDB_API_KEY": "<redacted>"}),
    # --- trainer flags: args.<dest>, extra_args and flavours, against the flavour's flag registry
    "args-unknown-flag": Case(["args.lr_warmup_iter=10"], ["args.lr_warmup_iter"], {"args.lr_warmup_iter": 10}),
    "args-type": Case(["args.lr_warmup_iters=ten"], ["args.lr_warmup_iters"], {"args.lr_warmup_iters": "ten"}),
    "args-choices": Case(["args.transformer_impl=tensorrt"], ["args.transformer_impl"],
                         {"args.transformer_impl": "tensorrt"}),
    "args-owned-by-key": Case(["args.rollout_batch_size=16"], ["args.rollout_batch_size"],
                              {"args.rollout_batch_size": 16}),
    "args-switch-takes-bool": Case(["args.moe_enable_deepep=1"], ["args.moe_enable_deepep"],
                                   {"args.moe_enable_deepep": 1}),
    "args-nargs-takes-list": Case(["args.eval_prompt_data=aime"], ["args.eval_prompt_data"],
                                  {"args.eval_prompt_data": "aime"}),
    "args-not-settable": Case(["args.sglang_hybrid_kvcache_ratio=0.5"], ["args.sglang_hybrid_kvcache_ratio"],
                              {"args.sglang_hybrid_kvcache_ratio": 0.5}),
    "args-set-twice": Case(["args.sglang_ep_size=2", "args.sglang_expert_parallel_size=2"],
                           ["args.sglang_ep_size", "args.sglang_expert_parallel_size"],
                           {"args.sglang_ep_size": 2, "args.sglang_expert_parallel_size": 2}),
    "trainer-flavour-known": Case(["trainer.flavour=verl"], ["trainer.flavour"], {"trainer.flavour": "verl"}),
    "trainer-flag-fork-only": Case(["trainer=slime", "grpo.dynamic_history=true"],
                                   ["grpo.dynamic_history", "trainer.flavour"],
                                   {"grpo.dynamic_history": True, "trainer.flavour": "slime"}),
    "trainer-flag-upstream-only": Case(["args.sglang_release_hicache=true"], ["args.sglang_release_hicache", "trainer.flavour"],
                                       {"args.sglang_release_hicache": True, "trainer.flavour": "clawgym"}),
    "extra-args-unknown-flag": Case(["extra_args=[--lr-warmup-itrs,3]"], ["extra_args"],
                                    {"extra_args": ["--lr-warmup-itrs", "3"]}),
    "extra-args-value": Case(["extra_args=[--seed,x]"], ["extra_args"], {"extra_args": ["--seed", "x"]}),
    "extra-args-set-in-args": Case(["args.seed=3", "extra_args=[--seed,4]"], ["extra_args", "args.seed"],
                                   {"extra_args": ["--seed", "4"], "args.seed": 3}),
    "extra-args-once": Case(["extra_args=[--seed,3,--seed,4]"], ["extra_args"],
                            {"extra_args": ["--seed", "3", "--seed", "4"]}),
    "extra-args-value-without-flag": Case(["extra_args=[7,--seed,3]"], ["extra_args"],
                                          {"extra_args": ["7", "--seed", "3"]}),
    "resolves": Case(["paths.root=${oc.env:CLAWGYM_TEST_UNSET_VARIABLE}"], ["paths.root"],
                     {"paths.root": "${oc.env:CLAWGYM_TEST_UNSET_VARIABLE}"}),
    "value-required": Case(["model=base_model"], ["model.name"], {"model.name": "???"}),
}

# --- issue 11: the cluster group and its backends' settings
CASES.update({
    "cluster-backend-known": Case(["cluster.backend=nowhere"], ["cluster.backend"], {"cluster.backend": "nowhere"}),
    "existing-cluster-needs-address": Case(["cluster=existing"], ["cluster.backend", "ray.address"],
                                           {"cluster.backend": "existing", "ray.address": None}),
    "cluster-starts-its-own-ray": Case(["cluster=slurm", "ray.address=http://head:8265"],
                                       ["cluster.backend", "ray.address"],
                                       {"cluster.backend": "slurm", "ray.address": "http://head:8265"}),
    "slurm-sizes-positive": Case(["cluster=slurm", "slurm.nodes=0"], ["slurm.nodes"], {"slurm.nodes": 0}),
    "slurm-times-positive": Case(["cluster=slurm", "slurm.signal_delay_s=-5"], ["slurm.signal_delay_s"],
                                 {"slurm.signal_delay_s": -5}),
    "slurm-time-format": Case(["cluster=slurm", "slurm.time=4h"], ["slurm.time"], {"slurm.time": "4h"}),
    "slurm-mem-format": Case(["cluster=slurm", "slurm.mem_per_node=480GB"], ["slurm.mem_per_node"],
                             {"slurm.mem_per_node": "480GB"}),
    "slurm-job-name-one-word": Case(["cluster=slurm", "slurm.job_name='my job'"], ["slurm.job_name"],
                                    {"slurm.job_name": "my job"}),
    "slurm-extra-sbatch-options": Case(["cluster=slurm", "slurm.extra_sbatch=[exclusive]"], ["slurm.extra_sbatch"],
                                       {"slurm.extra_sbatch": ["exclusive"]}),
    "slurm-allocation-fits-run": Case(["cluster=slurm", "slurm.gpus_per_node=4"],
                                      ["slurm.nodes", "slurm.gpus_per_node"],
                                      {"slurm.nodes": None, "slurm.gpus_per_node": 4}),
    "slurm-gpus-per-node-is-layouts": Case(["cluster=slurm", "slurm.nodes=2", "slurm.gpus_per_node=4"],
                                           ["slurm.gpus_per_node", "gpu_layout.num_gpus"],
                                           {"slurm.gpus_per_node": 4, "gpu_layout.num_gpus": 8}),
    "kuberay-needs-image": Case(["cluster=kuberay", "kuberay.pvc=save"], ["kuberay.image"], {"kuberay.image": None}),
    "kuberay-needs-pvc": Case(["cluster=kuberay", "kuberay.image=img:1"], ["kuberay.pvc"], {"kuberay.pvc": None}),
    "kuberay-names-dns1123": Case(["cluster=kuberay", "kuberay.image=img:1", "kuberay.pvc=save", "kuberay.name=My_Job"],
                                  ["kuberay.name"], {"kuberay.name": "My_Job"}),
    "kuberay-active-deadline-positive": Case(["cluster=kuberay", "kuberay.image=img:1", "kuberay.pvc=save",
                                              "kuberay.active_deadline_seconds=0"],
                                             ["kuberay.active_deadline_seconds"], {"kuberay.active_deadline_seconds": 0}),
    "kuberay-ttl-nonnegative": Case(["cluster=kuberay", "kuberay.image=img:1", "kuberay.pvc=save",
                                     "kuberay.ttl_seconds_after_finished=-5"],
                                    ["kuberay.ttl_seconds_after_finished"], {"kuberay.ttl_seconds_after_finished": -5}),
    "kuberay-resource-quantity": Case(["cluster=kuberay", "kuberay.image=img:1", "kuberay.pvc=save",
                                       "kuberay.worker_memory=-1Gi"],
                                      ["kuberay.worker_memory"], {"kuberay.worker_memory": "-1Gi"}),
    "kuberay-secret-name-dns1123": Case(["cluster=kuberay", "kuberay.image=img:1", "kuberay.pvc=save",
                                         "kuberay.secret_name=Bad_Secret"],
                                        ["kuberay.secret_name"], {"kuberay.secret_name": "Bad_Secret"}),
    "kuberay-wait-positive": Case(["cluster=kuberay", "kuberay.image=img:1", "kuberay.pvc=save",
                                   "kuberay.wait_dashboard_s=0"], ["kuberay.wait_dashboard_s"],
                                  {"kuberay.wait_dashboard_s": 0}),
    "kuberay-dashboard-address-form": Case(["cluster=kuberay", "kuberay.image=img:1", "kuberay.pvc=save",
                                            "kuberay.dashboard_address='http://a b:8265'"],
                                           ["kuberay.dashboard_address"],
                                           {"kuberay.dashboard_address": "http://a b:8265"}),
    "kuberay-save-dir-on-pvc": Case(["cluster=kuberay", "kuberay.image=img:1", "kuberay.pvc=save",
                                     "kuberay.mount_path=/mnt/elsewhere", "paths.save=/data/run1"],
                                    ["paths.save", "kuberay.mount_path"],
                                    {"paths.save": "/data/run1", "kuberay.mount_path": "/mnt/elsewhere"}),
})

# --- issue 15: the memory group and colocation's offload
CASES.update({
    "memory-gpu-known": Case(["memory.gpu=h100"], ["memory.gpu"], {"memory.gpu": "h100"}),
    "memory-gpu-memory-positive": Case(["memory.gpu_memory_gib=0"], ["memory.gpu_memory_gib"],
                                       {"memory.gpu_memory_gib": 0.0}),
    "colocate-needs-offload": Case(["gpu_layout=colocate_8", "args.offload_train=false"],
                                   ["gpu_layout.colocate", "args.offload_train"],
                                   {"gpu_layout.colocate": True, "args.offload_train": False}),
})


#: Rules mirroring the trainer have their tests in tests/test_trainer_rules.py (one per code).
TRAINER_RULES_MODULE = "trainer_rules.py"


def rule_codes_in_source(*, trainer: bool = False) -> set:
    """Every rule code the modules of clawgym/validate/ can report (``trainer``: those of trainer_rules.py only)."""
    src = "\n".join(p.read_text() for p in sorted((ROOT / "clawgym" / "validate").glob("*.py"))
                    if (p.name == TRAINER_RULES_MODULE) == trainer)
    codes = set(re.findall(r"v\.(?:add|positive|warn)\(\s*\"([a-z0-9-]+)\"", src))
    codes |= set(re.findall(r"Violation\([^)]*?\"([a-z0-9-]+)\"\)", src, re.S))
    return codes


#: --sglang-config engine groups (sglang.models), checked as slime reads them.
_GROUPS = "sglang.models=[{name: default, server_groups: [{worker_type: %s, num_gpus: %d}]}]"
CASES.update({
    # A + override the typed schema does not define (issue 27): refused with the closest key.
    "unknown-key": Case(["+rollout.temprature=0.8"], ["rollout.temprature"], {"rollout.temprature": 0.8}),
    # ... and an error on the one node of a head clawgym starts (issue 28, finding 13).
    "local-head-gpus-fit": Case(["gpu_layout=colocate_8", "gpu_layout.colocate=false"],
                                ["gpu_layout.actor_gpus", "gpu_layout.rollout_gpus", "gpu_layout.num_gpus",
                                 "gpu_layout.colocate"],
                                {"gpu_layout.actor_gpus": 8, "gpu_layout.rollout_gpus": 8, "gpu_layout.num_gpus": 8,
                                 "gpu_layout.colocate": False}),
    "ray-lost-contact-positive": Case(["ray.lost_contact_s=0"], ["ray.lost_contact_s"], {"ray.lost_contact_s": 0.0}),
    # The supervisor's budget and poll (issue 33).
    "restart-attempts-non-negative": Case(["restart.max_attempts=-1"], ["restart.max_attempts"],
                                          {"restart.max_attempts": -1}),
    "restart-poll-positive": Case(["restart.poll_s=0"], ["restart.poll_s"], {"restart.poll_s": 0.0}),
    "restart-node-wait-non-negative": Case(["restart.node_wait_s=-1"], ["restart.node_wait_s"],
                                           {"restart.node_wait_s": -1.0}),
    # sbatch splits a directive at a newline and expands '%' (issue 28, finding 9).
    "slurm-values-plain": Case(["cluster=slurm", "slurm.partition='gpu\n#SBATCH --x'"], ["slurm.partition"],
                               {"slurm.partition": "gpu\n#SBATCH --x"}),
    "slurm-output-path-plain": Case(["cluster=slurm", "exp_name='sl%u'"], ["paths.save", "exp_name"],
                                    {"exp_name": "sl%u"}),
    "sglang-config-worker-type": Case([_GROUPS % ("prefil", 4)],
                                      ["sglang.models[0].server_groups[0].worker_type"],
                                      {"sglang.models[0].server_groups[0].worker_type": "prefil"}),
    "sglang-config-gpus-match-rollout": Case([_GROUPS % ("prefill", 2)], ["sglang.models", "gpu_layout.rollout_gpus"],
                                             {"gpu_layout.rollout_gpus": 4}),
    "sglang-config-needs-save": Case([_GROUPS % ("regular", 4), "paths.save=null", "checkpoint.save_interval=null"],
                                     ["sglang.models", "paths.save"], {"paths.save": None}),
})


CASES.update({
    # Issue 34: the supervisor's settings.
    "health-action-choice": Case(["health.nan_action=restart"], ["health.nan_action"], {"health.nan_action": "restart"}),
    "health-threshold-positive": Case(["health.stall_s=0"], ["health.stall_s"], {"health.stall_s": 0.0}),
    "checkpoint-keep-positive": Case(["checkpoint.keep_last=0"], ["checkpoint.keep_last"], {"checkpoint.keep_last": 0}),
})


def test_every_rule_has_a_test():
    assert rule_codes_in_source() == set(CASES), (
        f"rules without a case: {sorted(rule_codes_in_source() - set(CASES))}; "
        f"cases without a rule: {sorted(set(CASES) - rule_codes_in_source())}"
    )


def test_defaults_are_valid():
    assert violations(compose([])) == []


@pytest.mark.parametrize("code", list(CASES))
def test_rule(code: str, tmp_path, monkeypatch):
    case = CASES[code]
    for d in case.makedirs:
        (tmp_path / d).mkdir(parents=True)
    for name, value in case.env.items():
        monkeypatch.setenv(name, value)

    def at_tmp(x: Any) -> Any:
        return x.replace("{tmp}", str(tmp_path)) if isinstance(x, str) else x

    errors, warned = check(compose([at_tmp(o) for o in case.overrides]), here=case.here)
    found = errors + warned
    mine = [v for v in found if v.code == code]
    assert mine, f"{code} not reported for {case.overrides}; got {[v.code for v in found]}"
    v: Violation = mine[0]
    assert v.keys == case.keys
    for key, value in case.values.items():
        assert v.values[key] == at_tmp(value), (key, v.values)
    # The report names key path, value, rule and fix.
    text = ConfigError(found).report()
    assert f"[{code}]" in text
    for key in v.keys:
        assert f"{key}={v.values[key]!r}" in text
    assert v.rule and f"rule: {v.rule}" in text
    assert v.fix and f"fix:  {v.fix}" in text
    # The fix points at a key the user can set.
    assert any(k in v.fix for k in v.keys) or "=" in v.fix or "export" in v.fix


def test_all_violations_reported_together():
    # gpu_layout.actor_gpus=6: TP 6 holds no whole heads (a split layout over one node is only a warning now).
    overrides = ["rollout.temperature=0", "grpo.eps_clip_high=0.1", "sandbox=chroot", "gpu_layout.actor_gpus=6",
                 "sglang.context_length=1024"]
    with pytest.raises(ConfigError) as info:
        validate(compose(overrides))
    codes = [v.code for v in info.value.violations]
    for code in ("temperature-positive", "eps-clip-high-at-least-low", "chroot-needs-rootfs", "tp-divides-heads",
                 "sglang-context-holds-rollout-context"):
        assert code in codes
    report = info.value.report()
    assert f"{len(codes)} problems" in report.splitlines()[0]
    for i in range(1, len(codes) + 1):
        assert f"  {i}. [" in report


def test_cli_reports_violations_without_traceback_and_writes_nothing(tmp_path):
    run_dir = tmp_path / "run"
    proc = subprocess.run(
        [sys.executable, "train.py", "rollout.temperature=0", "sandbox=chroot", "grpo.eps_clip_high=0.1",
         "dry_run=true", f"hydra.run.dir={run_dir}"],
        cwd=ROOT, capture_output=True, text=True, timeout=120,
        env={**os.environ, "HYDRA_FULL_ERROR": "0"},
    )
    assert proc.returncode != 0
    assert "Traceback" not in proc.stdout + proc.stderr
    assert proc.stdout.strip() == ""
    err = proc.stderr.strip()
    assert err.startswith("clawgym: invalid configuration"), err
    for code in ("temperature-positive", "chroot-needs-rootfs", "eps-clip-high-at-least-low"):
        assert f"[{code}]" in err
    # Every line of the output belongs to the report.
    assert all(re.match(r"^(clawgym: invalid configuration|  \d+\. \[|      (rule|fix):)", line)
               for line in err.splitlines()), err
    assert not list(tmp_path.rglob("launch_plan.json"))


@pytest.mark.parametrize("override, secret", [("extra_args=[--wandb-key,sentinel-key-123]", "sentinel-key-123"),
                                              ("+extra_env.SGLANG_API_KEY=sentinel-key-456", "sentinel-key-456")])
def test_secret_values_typed_into_the_config_are_never_echoed_in_the_report(override, secret):
    found = violations(compose([override]))
    assert {v.code for v in found} & {"no-secrets-in-argv", "no-secrets-in-extra-env"}
    assert secret not in ConfigError(found).report()


@pytest.mark.parametrize("save,key", [
    ("{tmp}/data", "paths.train_tasks"),                            # holds the task folders
    ("{tmp}/local/models/ckpt", "paths.hf_checkpoint"),             # the HF checkpoint (= --ref-load)
    ("{tmp}/slime", "paths.slime"),                                 # the trainer's working dir
    ("/etc", None), ("/", None), ("/usr/local/x", None),            # system folders
])
def test_a_save_dir_that_is_or_holds_an_input_or_a_system_folder_is_refused_with_a_working_path(save, key, tmp_path):
    """Issue 28, finding 8: each of these was accepted; the fix names a save dir that validates."""
    over = [f"paths.root={tmp_path}", f"paths.hf_checkpoint={tmp_path}/local/models/ckpt", f"paths.save={save}"]
    over = [o.replace("{tmp}", str(tmp_path)) for o in over]
    mine = [v for v in violations(compose(over)) if v.code == "save-dir-not-an-input"]
    assert mine, over
    assert key is None or key in mine[0].keys
    fixed = mine[0].fix.split("set ", 1)[1].split(" ", 1)[0]
    assert fixed.startswith("paths.save=")
    assert not [v for v in violations(compose([*over, fixed])) if v.code.startswith("save-dir")], fixed


def test_resuming_from_the_save_dir_itself_is_not_an_input_clash(tmp_path):
    over = [f"paths.root={tmp_path}", "run_name=r", f"checkpoint.load={tmp_path}/exp/r"]
    assert "save-dir-not-an-input" not in {v.code for v in violations(compose(over))}


@pytest.mark.parametrize("name", ["run\x1b[2J", "run\rx", "a\x7fb", "tab\there"])
def test_control_characters_in_a_name_are_refused_and_never_reach_the_terminal(name):
    """ESC and other control characters would become folder names and, printed, drive the
    terminal (issue 28, finding 13): refused, and the report shows them escaped."""
    errors, _ = check(compose([f"exp_name='{name}'"]))
    mine = [v for v in errors if v.code == "names-are-folder-names" and v.keys == ["exp_name"]]
    assert mine and "control character" in mine[0].rule
    report = ConfigError(errors).report()
    assert "\x1b" not in report and "\r" not in report and "\x7f" not in report
