"""Golden launch plans and the plan's invariants (flags once, secrets never, head or cluster).

The goldens are the ``launch_plan.json`` content for the defaults and for
``gpu_layout=colocate_8``, with ``paths.root=/ckpt/ClawGym-RL``, a fixed timestamp and an
empty environment. After an intended change of the plan, regenerate them and review the diff:

    CLAWGYM_UPDATE_GOLDEN=1 python -m pytest tests/test_plan_golden.py -q
    git diff tests/golden/
"""

from __future__ import annotations

import functools
import json
import os
from pathlib import Path
from typing import Dict, List, Tuple

import pytest

from clawgym.config.compose import compose
from clawgym.plan.build import LaunchPlan, build_plan, format_plan
from clawgym.validate import violations

GOLDEN = Path(__file__).resolve().parent / "golden"
TS = "20260101_000000"
ROOT = "/ckpt/ClawGym-RL"
UPDATE = os.environ.get("CLAWGYM_UPDATE_GOLDEN") == "1"

#: Golden file -> overrides.
GOLDENS: Dict[str, List[str]] = {
    "defaults": [],
    "colocate_8": ["gpu_layout=colocate_8"],
    # args.<dest> of several parts and actions (int, alias option, store_true, nargs '+', store_false,
    # BooleanOptionalAction, choices) after the curated flags, then checked extra_args.
    "args": ["args.lr_warmup_iters=10", "args.sglang_ep_size=8", "args.moe_enable_deepep=true",
             "args.eval_prompt_data=[aime,/data/aime.jsonl]", "args.gradient_accumulation_fusion=false",
             "args.offload_train=false", "args.transformer_impl=local", "extra_args=[--seed,7]"],
    # Upstream slime: its own hooks and no fork flags or OpenClaw env; a prompt-data run through args.
    "slime": ["trainer=slime", "args.prompt_data=/data/dapo-math-17k.jsonl", "args.input_key=prompt",
              "args.label_key=label", "args.apply_chat_template=true", "args.rollout_shuffle=true",
              "args.rm_type=deepscaler", "args.global_batch_size=64", "args.eval_prompt_data=[aime,/data/aime.jsonl]",
              "eval.interval=20"],
}

SECRETS = {"WANDB_API_KEY": "wandb-api-secret-1234567890", "WANDB_KEY": "wandb-key-secret-0987654321",
           "SGLANG_API_KEY": "sglang-secret-abcdef"}


@functools.lru_cache(maxsize=None)
def composed(overrides: Tuple[str, ...]):
    """A valid composed config (cached: composing is the slow part; plans are built fresh)."""
    cfg = compose([f"paths.root={ROOT}", *overrides])
    assert violations(cfg) == []
    return cfg


def make_plan(overrides: List[str], environ: Dict[str, str] | None = None) -> LaunchPlan:
    return build_plan(composed(tuple(overrides)), environ=environ or {}, timestamp=TS)


@pytest.mark.parametrize("name", list(GOLDENS))
def test_golden_plan(name: str):
    plan = make_plan(GOLDENS[name])
    path = GOLDEN / f"{name}.json"
    if UPDATE:
        tmp = path.with_suffix(".json.tmp")
        tmp.write_text(plan.to_json())
        os.replace(tmp, path)
    assert path.is_file(), f"{path} missing: run with CLAWGYM_UPDATE_GOLDEN=1 to create it"
    expected = json.loads(path.read_text())
    assert plan.to_dict() == expected, (
        f"plan for {GOLDENS[name]} differs from {path}; if intended, regenerate with "
        "CLAWGYM_UPDATE_GOLDEN=1 python -m pytest tests/test_plan_golden.py and review git diff"
    )
    # The launch_plan.json keys of issue 2.
    for key in ("entrypoint", "working_dir", "runtime_env", "ray_start", "ray_start_env", "submission_id"):
        assert key in expected
    assert "env_vars" in expected["runtime_env"]


def test_goldens_are_distinct_and_sensible():
    defaults = json.loads((GOLDEN / "defaults.json").read_text())
    colocate = json.loads((GOLDEN / "colocate_8.json").read_text())
    assert defaults["entrypoint"][:2] == ["python3", "train_async.py"]
    assert colocate["entrypoint"][:2] == ["python3", "train.py"] and "--colocate" in colocate["entrypoint"]
    assert defaults["working_dir"] == f"{ROOT}/slime"


@pytest.mark.parametrize("overrides", [[], ["gpu_layout=colocate_8"], ["model=qwen3_30b_a3b", "rollout.max_context_len=40960"],
                                       ["wandb.enabled=true"],
                                       ["sglang.reasoning_parser=qwen3", "eval.skip_before_train=true"]])
def test_every_flag_emitted_once(overrides: List[str]):
    plan = make_plan(overrides, SECRETS)
    seen = [a for a in plan.entrypoint if a.startswith("--")]
    assert len(seen) == len(set(seen)), sorted({a for a in seen if seen.count(a) > 1})


def test_no_secret_value_in_the_plan():
    plan = make_plan([], SECRETS)
    text = plan.to_json() + format_plan(plan)
    for value in SECRETS.values():
        assert value not in text
    # The plan names where the secrets come from.
    assert plan.secret_env["SGLANG_API_KEY"] == ["SGLANG_API_KEY"]
    assert plan.secret_env["WANDB_API_KEY"] == ["WANDB_KEY", "WANDB_API_KEY"]


@pytest.mark.parametrize("key_var", ["WANDB_KEY", "WANDB_API_KEY"])
def test_wandb_key_turns_wandb_on_without_wandb_key_flag(key_var: str):
    off = make_plan([], {})
    assert "--use-wandb" not in off.entrypoint and "WANDB_API_KEY" not in off.secret_env
    plan = make_plan([], {key_var: SECRETS[key_var]})
    args = plan.entrypoint
    assert "--use-wandb" in args
    assert args[args.index("--wandb-project") + 1] == "clawgym_rl"
    assert args[args.index("--wandb-group") + 1] == "clawgym-rl-4b-instruct-2507"
    assert "--wandb-key" not in args
    assert SECRETS[key_var] not in plan.to_json()
    # Forced off wins over a key in the environment.
    assert "--use-wandb" not in make_plan(["wandb.enabled=false"], SECRETS).entrypoint


def test_existing_cluster_has_no_local_head():
    plan = make_plan(["ray.address=http://head:8265"])
    assert plan.ray_start is None
    assert plan.address == "http://head:8265"
    assert make_plan(["ray.address=head:8265"]).address == "http://head:8265"
    assert make_plan([]).ray_start[:3] == ["ray", "start", "--head"]


def test_plan_round_trips_through_json():
    plan = make_plan([])
    assert LaunchPlan.from_dict(json.loads(plan.to_json())) == plan
