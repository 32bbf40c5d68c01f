"""Composition: every option of every group, the defaults, compose-time errors, and the
issue-2 override keys moving the plan as they should."""

from __future__ import annotations

import functools
from typing import Any, Callable, Dict, List, Tuple

import pytest
from hydra.errors import ConfigCompositionException

from clawgym.config.compose import compose, group_options, to_plain
from clawgym.plan.build import LaunchPlan, build_plan
from clawgym.config.schema import GROUPS
from clawgym.validate import violations

TS = "20260101_000000"
ROOT = "/ckpt/ClawGym-RL"


def flags(plan: LaunchPlan) -> Dict[str, Any]:
    """Trainer flags of a plan: flag -> value (True for switches)."""
    out: Dict[str, Any] = {}
    args = plan.entrypoint[2:]
    i = 0
    while i < len(args):
        if i + 1 < len(args) and not args[i + 1].startswith("--"):
            out[args[i]] = args[i + 1]
            i += 2
        else:
            out[args[i]] = True
            i += 1
    return out


def plan_for(overrides: List[str]) -> Tuple[dict, LaunchPlan]:
    """Plain config and plan (empty environ) of valid overrides; cached, composing is slow."""
    return _plan_for(tuple(overrides))


@functools.lru_cache(maxsize=None)
def _plan_for(overrides: Tuple[str, ...]) -> Tuple[dict, LaunchPlan]:
    cfg = compose([f"paths.root={ROOT}", *overrides])
    found = violations(cfg)
    assert found == [], [v.format() for v in found]
    return to_plain(cfg), build_plan(cfg, environ={}, timestamp=TS)


def assert_flags_once(plan: LaunchPlan) -> None:
    seen = [a for a in plan.entrypoint[2:] if a.startswith("--")]
    assert len(seen) == len(set(seen)), sorted(a for a in seen if seen.count(a) > 1)


OPTIONS = [(group, option) for group in GROUPS for option in group_options(group)]


def test_every_group_has_options():
    for group in GROUPS:
        assert group_options(group), f"conf/{group}/ has no option"


#: (group, option) -> (violation codes it reports alone, the settings that satisfy them).
NEEDS_SETTING = {
    ("sandbox", "chroot"): (["chroot-needs-rootfs"], ["sandbox.rootfs=/srv/rootfs"]),
    ("cluster", "existing"): (["existing-cluster-needs-address"], ["ray.address=http://head:8265"]),
    ("cluster", "kuberay"): (["kuberay-needs-image", "kuberay-needs-pvc"],
                             ["kuberay.image=registry.example/clawgym:1", "kuberay.pvc=clawgym-save"]),
}


#: Trainer refusals that depend on the model's architecture and the layout (clawgym/validate/trainer_rules.py).
ARCHITECTURE_CODES = {"tp-divides-heads", "tp-divides-query-groups", "sglang-context-within-model-window"}


@pytest.mark.parametrize("group, option", OPTIONS, ids=[f"{g}={o}" for g, o in OPTIONS])
def test_option_composes_validates_and_plans(group: str, option: str):
    cfg = compose([f"{group}={option}"])
    found = violations(cfg)
    if (group, option) in NEEDS_SETTING:
        # Options that cannot know a site's value: exactly that is reported, and setting it is enough.
        codes, settings = NEEDS_SETTING[(group, option)]
        assert [v.code for v in found] == codes
        cfg = compose([f"{group}={option}", *settings])
        found = violations(cfg)
    if (group, option) in (("model", "glm5_744b_a40b"), ("model", "glm5_2_744b_a40b")):
        # GLM-5 needs --allgather-cp, which only upstream slime has: exactly that is reported under the
        # default trainer=clawgym, and trainer=slime is enough.
        assert [v.code for v in found] == ["trainer-flag-upstream-only"]
        cfg = compose([f"{group}={option}", "trainer=slime"])
        found = violations(cfg)
    if group == "model" and found and {v.code for v in found} <= ARCHITECTURE_CODES:
        # What the default layout cannot give this architecture, refused as the trainer would (14 heads or
        # 2 query groups over TP 4; a rollout context beyond a 32k window): the zoo's TP and context are enough.
        from tests.test_model_zoo import overrides_for

        cfg = compose(overrides_for(option))
        found = violations(cfg)
    assert found == [], [v.format() for v in found]
    plan = build_plan(cfg, environ={}, timestamp=TS)
    assert_flags_once(plan)
    assert plan.entrypoint[:2] == ["python3", to_plain(cfg)["gpu_layout"]["trainer_script"]]


def test_model_options_are_the_models_they_name():
    for option in group_options("model"):
        c = to_plain(compose([f"model={option}"]))
        assert c["model"]["name"] == option
        org, _, repo = c["model"]["hf_repo"].partition("/")
        assert org and repo and c["model"]["checkpoint_dirname"] and c["model"]["family"], option


def test_defaults_are_the_seeds():
    cfg = compose([], return_hydra_config=True)
    choices = cfg.hydra.runtime.choices
    assert (choices.model, choices.gpu_layout, choices.sandbox) == ("qwen3_4b", "split_4_4", "docker")
    c, _ = plan_for([])
    assert (c["gpu_layout"]["num_gpus"], c["gpu_layout"]["actor_gpus"], c["gpu_layout"]["rollout_gpus"]) == (8, 4, 4)
    assert c["gpu_layout"]["colocate"] is False and c["sandbox"]["image"] == "clawgym-rl:v0.1"
    assert c["model"]["rotary_base"] == 5000000 and c["dry_run"] is False


@pytest.mark.parametrize("override, words", [
    ("model.foo=1", ["model.foo", "foo"]),
    ("rollout.batch_size=abc", ["rollout.batch_size", "abc"]),
    ("gpu_layout.colocate=maybe", ["gpu_layout.colocate", "maybe"]),
    ("no_such_group=x", ["no_such_group"]),
    ("model=qwen3_5t", ["qwen3_5t"]),
])
def test_bad_keys_and_types_fail_at_compose(override: str, words: List[str]):
    with pytest.raises(ConfigCompositionException) as info:
        compose([override])
    text = str(info.value) + str(info.value.__cause__ or "")
    for word in words:
        assert word in text


# Each issue-2 key: overrides and a check of the (plain config, plan) they produce.
Check = Callable[[dict, LaunchPlan], None]


def _env(plan: LaunchPlan) -> Dict[str, str]:
    return plan.runtime_env["env_vars"]


KEY_CASES: Dict[str, Tuple[List[str], Check]] = {
    "gpu_layout.num_gpus": (["gpu_layout.num_gpus=16"], lambda c, p: (
        flags(p)["--num-gpus-per-node"] == "16" and p.ray_start[p.ray_start.index("--num-gpus") + 1] == "16")),
    "gpu_layout.actor_gpus": (["gpu_layout.actor_gpus=2"], lambda c, p: (
        flags(p)["--actor-num-gpus-per-node"] == "2" and flags(p)["--tensor-model-parallel-size"] == "2")),
    "gpu_layout.rollout_gpus": (["gpu_layout.rollout_gpus=2"], lambda c, p: flags(p)["--rollout-num-gpus"] == "2"),
    "gpu_layout.colocate": (["gpu_layout.colocate=true"], lambda c, p: (
        flags(p)["--colocate"] is True and p.entrypoint[1] == "train.py")),
    "rollout.batch_size": (["rollout.batch_size=16"], lambda c, p: flags(p)["--rollout-batch-size"] == "16"),
    "rollout.n_samples_per_prompt": (["rollout.n_samples_per_prompt=4"],
                                     lambda c, p: flags(p)["--n-samples-per-prompt"] == "4"),
    "rollout.max_context_len": (["rollout.max_context_len=32768"], lambda c, p: (
        flags(p)["--rollout-max-context-len"] == "32768" and flags(p)["--sglang-context-length"] == "32768"
        and _env(p)["OPENCLAW_CONTEXT_WINDOW"] == "32768")),
    "rollout.max_response_len": (["rollout.max_response_len=4096"], lambda c, p: (
        flags(p)["--rollout-max-response-len"] == "4096" and _env(p)["OPENCLAW_MAX_TOKENS"] == "4096")),
    "rollout.temperature": (["rollout.temperature=1.0"], lambda c, p: flags(p)["--rollout-temperature"] == "1.0"),
    "rollout.train_num_workers": (["rollout.train_num_workers=32"],
                                  lambda c, p: _env(p)["OPENCLAW_TRAIN_NUM_WORKERS"] == "32"),
    "sglang.tp": (["sglang.tp=2"], lambda c, p: flags(p)["--rollout-num-gpus-per-engine"] == "2"),
    "sglang.context_length": (["sglang.context_length=131072"], lambda c, p: (
        flags(p)["--sglang-context-length"] == "131072" and flags(p)["--rollout-max-context-len"] == "65536")),
    "grpo.eps_clip": (["grpo.eps_clip=0.1"], lambda c, p: flags(p)["--eps-clip"] == "0.1"),
    "grpo.eps_clip_high": (["grpo.eps_clip_high=0.3"], lambda c, p: flags(p)["--eps-clip-high"] == "0.3"),
    "eval.skip_before_train": (["eval.skip_before_train=true"],
                               lambda c, p: flags(p)["--skip-eval-before-train"] is True),
    "sandbox.image": (["sandbox.image=gw:v2"], lambda c, p: _env(p)["OPENCLAW_GATEWAY_IMAGE"] == "gw:v2"),
    "sandbox.rootfs": (["sandbox=chroot", "sandbox.rootfs=/srv/rootfs"],
                       lambda c, p: _env(p)["OPENCLAW_ROOTFS"] == "/srv/rootfs"),
    "wandb.enabled": (["wandb.enabled=true"], lambda c, p: (
        flags(p)["--use-wandb"] is True and flags(p)["--wandb-project"] == "clawgym_rl"
        and "WANDB_API_KEY" in p.secret_env)),
    "ray.address": (["ray.address=http://head:8265"], lambda c, p: p.ray_start is None and p.address == "http://head:8265"),
    "exp_name": (["exp_name=my-exp"], lambda c, p: (
        flags(p)["--save"] == f"{ROOT}/exp/my-exp" and p.run_name == "my-exp"
        and p.submission_id == f"clawgym-my-exp-{TS}")),
    "dry_run": (["dry_run=true"], lambda c, p: c["dry_run"] is True),
}


@pytest.mark.parametrize("key", list(KEY_CASES))
def test_issue_override_key(key: str):
    overrides, check = KEY_CASES[key]
    c, plan = plan_for(overrides)
    _, default = plan_for([])
    assert check(c, plan), f"{overrides} did not move the plan as expected"
    assert plan.to_dict() != default.to_dict() or key == "dry_run"


def test_paths_root_moves_every_derived_path():
    c, plan = plan_for(["paths.root=/elsewhere/RL"])
    for name, value in c["paths"].items():
        assert value == "/elsewhere/RL" if name == "root" else value.startswith("/elsewhere/RL/"), (name, value)
    f, env = flags(plan), _env(plan)
    assert plan.working_dir == "/elsewhere/RL/slime"
    assert env["PYTHONPATH"] == "/elsewhere/RL/Megatron-LM:/elsewhere/RL:/elsewhere/RL/slime"
    assert f["--hf-checkpoint"] == f["--ref-load"] == "/elsewhere/RL/local/models/Qwen3-4B-Instruct-2507"
    assert f["--save"] == "/elsewhere/RL/exp/clawgym-rl-4b-instruct-2507"
    assert env["OPENCLAW_TRAIN_TASKS"] == "/elsewhere/RL/data/clawgym_train"
    assert env["OPENCLAW_EVAL_TASKS"] == "/elsewhere/RL/data/clawgym_eval"
    assert env["OPENCLAW_RECORD_FILE"] == "/elsewhere/RL/results/qwen3_4b_record.jsonl"
    assert plan.log_file.startswith("/elsewhere/RL/exp/")


# paths.<name> -> where it shows in the plan.
PATH_USES: Dict[str, Callable[[LaunchPlan], List[str]]] = {
    "slime": lambda p: [p.working_dir, _env(p)["PYTHONPATH"].split(":")[2]],
    "megatron": lambda p: [_env(p)["PYTHONPATH"].split(":")[0]],
    "hf_checkpoint": lambda p: [flags(p)["--hf-checkpoint"]],
    "ref_load": lambda p: [flags(p)["--ref-load"]],
    "save": lambda p: [flags(p)["--save"], p.save_dir],
    "train_tasks": lambda p: [_env(p)["OPENCLAW_TRAIN_TASKS"]],
    "eval_tasks": lambda p: [_env(p)["OPENCLAW_EVAL_TASKS"]],
    "record_file": lambda p: [_env(p)["OPENCLAW_RECORD_FILE"]],
}


def test_every_path_is_in_the_table():
    assert set(PATH_USES) | {"root"} == set(to_plain(compose([]))["paths"])


@pytest.mark.parametrize("name", list(PATH_USES))
def test_each_path_overridable_alone(name: str):
    c0, default = plan_for([])
    c, plan = plan_for([f"paths.{name}=/custom/{name}"])
    assert all(use == f"/custom/{name}" for use in PATH_USES[name](plan))
    # Only this path moved (ref_load follows hf_checkpoint, as in the seed).
    followers = {"hf_checkpoint": {"ref_load"}}.get(name, set())
    for other, value in c["paths"].items():
        if other not in followers | {name}:
            assert value == c0["paths"][other], other
    for other in followers:
        assert c["paths"][other] == f"/custom/{name}"


def test_sglang_context_length_follows_rollout_by_default():
    c, _ = plan_for(["rollout.max_context_len=100000"])
    assert c["sglang"]["context_length"] == 100000
    c, _ = plan_for(["rollout.max_context_len=100000", "sglang.context_length=131072"])
    assert c["sglang"]["context_length"] == 131072


def test_tensor_parallel_follows_actor_gpus_by_default():
    for layout, tp in (("split_4_4", 4), ("split_2_6", 2), ("colocate_8", 8), ("split_1_1", 1)):
        c, plan = plan_for([f"gpu_layout={layout}"])
        assert c["perf"]["tensor_parallel"] == tp and flags(plan)["--tensor-model-parallel-size"] == str(tp)
    c, plan = plan_for(["gpu_layout=colocate_8", "perf.tensor_parallel=2"])
    assert flags(plan)["--tensor-model-parallel-size"] == "2"


def test_colocated_layouts_follow_num_gpus():
    c, plan = plan_for(["gpu_layout=colocate_8", "gpu_layout.num_gpus=4"])
    g = c["gpu_layout"]
    assert (g["actor_gpus"], g["rollout_gpus"], g["trainer_script"]) == (4, 4, "train.py")
    assert flags(plan)["--colocate"] is True and flags(plan)["--tensor-model-parallel-size"] == "4"


@pytest.mark.parametrize("line, words", [("foo: 1", ["foo"]), ("kv_channels: abc", ["kv_channels", "abc"])])
def test_yaml_option_is_checked_against_the_schema(tmp_path, line: str, words: List[str]):
    """A typo or wrong type inside an option file fails at compose time, like on the command line."""
    import shutil

    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir
    from hydra.errors import HydraException

    from clawgym.config.compose import config_dir

    conf = tmp_path / "conf"
    shutil.copytree(config_dir(), conf)
    (conf / "model" / "qwen3_bad.yaml").write_text((conf / "model" / "qwen3_4b.yaml").read_text() + f"{line}\n")
    with initialize_config_dir(config_dir=str(conf), version_base="1.3"):
        hydra_compose("config", overrides=["model=qwen3_4b"])
        with pytest.raises(HydraException) as info:
            hydra_compose("config", overrides=["model=qwen3_bad"])
    text = str(info.value) + str(info.value.__cause__ or "")
    for word in words:
        assert word in text


def test_the_run_name_follows_the_model():
    seed = compose([])
    assert (seed.exp_name, seed.sglang.served_model_name) == ("clawgym-rl-4b-instruct-2507", "qwen3-4b-instruct")
    other = compose(["model=qwen3_32b"])
    plan = build_plan(other, environ={}, timestamp="20260101_000000")
    assert other.exp_name == other.run_name == "clawgym-rl-qwen3_32b"
    assert other.paths.save.endswith("/exp/clawgym-rl-qwen3_32b") and other.wandb.group == "clawgym-rl-qwen3_32b"
    assert plan.runtime_env["env_vars"]["SERVED_MODEL_NAME"] == "qwen3-32b"
    # Every model option gets a save dir of its own by default, even two sharing a checkpoint folder.
    names = [compose([f"model={m}"]).paths.save for m in group_options("model")]
    assert len(set(names)) == len(names)
    # What the user sets still wins.
    assert compose(["model=qwen3_32b", "exp_name=mine"]).paths.save.endswith("/exp/mine")
