"""``sandbox=none``: prompt-data runs without agent sandboxes, and their preflight.

The data files and hook modules are real files in a fixture checkout; the checks read
the flags back from the plan's trainer argv, so flags set through ``extra_args`` count
exactly like config keys.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any, List, Tuple

import pytest

from clawgym.config.compose import compose, to_plain
from clawgym.plan.build import build_plan
from clawgym.preflight import PreflightError, Report, run_preflight
from clawgym.preflight.data import trainer_flags
from clawgym.validate import violations
from tests.fixtures.checkout import build_checkout

ROOT = Path(__file__).resolve().parent.parent

#: Machine checks have their own tests; these run as for an existing cluster.
OFF = ["gpus", "ports", "cluster"]


@pytest.fixture
def checkout(tmp_path) -> Path:
    """A fixture checkout with slime's own rollout module and a reward module of the user's."""
    root = build_checkout(tmp_path / "rl")
    rollout = root / "slime" / "slime" / "rollout"
    rollout.mkdir(parents=True)
    (rollout / "__init__.py").write_text("")
    (rollout / "sglang_rollout.py").write_text("async def generate_rollout(args, rollout_id, data_buffer):\n    pass\n")
    (root / "math_reward.py").write_text("def reward(args, sample):\n    return 1.0\n")
    return root


def write_jsonl(path: Path, rows: List[Any]) -> Path:
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows))
    return path


@pytest.fixture
def data(tmp_path) -> Path:
    rows = [{"prompt": f"What is {i} + {i}?", "label": str(2 * i), "metadata": {}} for i in range(5)]
    return write_jsonl(tmp_path / "train.jsonl", rows)


def extra(*tokens: str) -> str:
    """The extra_args override, each token quoted (paths may hold Hydra's grammar characters)."""
    return "extra_args=[" + ",".join(f"'{t}'" for t in tokens) + "]"


def good_args(data: Path) -> List[str]:
    return ["--prompt-data", str(data), "--input-key", "prompt", "--label-key", "label"]


#: The user's reward hook, through its key (--custom-rm-path is owned by it, so not in extra_args).
RM = "rollout.reward_function_path=math_reward.reward"


def preflight(root: Path, *overrides: str) -> Tuple[Any, Any]:
    """(Report or PreflightError, plan) of sandbox=none on checkout ``root``."""
    cfg = compose(["sandbox=none", f"paths.root={root}", f"skip_checks=[{','.join(OFF)}]", RM, *overrides])
    found = violations(cfg)
    assert found == [], [v.format() for v in found]
    plan = build_plan(cfg, environ={}, timestamp="20260101_000000")
    try:
        return run_preflight(cfg, plan, local_head=False, echo=None), plan
    except PreflightError as err:
        return err, plan


def failed(outcome: Any, name: str) -> str:
    assert isinstance(outcome, PreflightError), f"expected check {name!r} to fail, got {outcome}"
    assert outcome.check == name, outcome.report()
    return outcome.report()


# ---------------------------------------------------------------- the plan

def test_sandbox_none_plan_has_no_openclaw_env_hooks_or_api_server_secret():
    cfg = compose(["sandbox=none"])
    assert violations(cfg) == []
    plan = build_plan(cfg, environ={}, timestamp="t")
    env = plan.runtime_env["env_vars"]
    assert not [k for k in env if k.startswith("OPENCLAW_")]
    assert not {"SERVED_MODEL_NAME", "HOST", "PORT", "TOOL_CALL_PARSER", "REASONING_PARSER"} & set(env)
    assert env["PYTHONPATH"] and env["CUDA_DEVICE_MAX_CONNECTIONS"] == "1"
    argv = plan.entrypoint
    assert argv[argv.index("--rollout-function-path") + 1] == "slime.rollout.sglang_rollout.generate_rollout"
    # slime's global dataset holds the prompts; its own generate and --rm-type reward apply.
    for flag in ("--disable-rollout-global-dataset", "--custom-generate-function-path", "--custom-rm-path",
                 "--eval-interval"):
        assert flag not in argv, flag
    assert "SGLANG_API_KEY" not in plan.secret_env


def test_sandbox_none_keeps_command_line_hooks():
    c = to_plain(compose(["sandbox=none", "rollout.reward_function_path=math_reward.reward"]))
    assert c["rollout"]["reward_function_path"] == "math_reward.reward"
    assert c["sandbox"]["backend"] == "none" and c["sandbox"]["cleanup_leftovers"] is False


def test_sandbox_none_refuses_the_openclaw_rollout_hooks():
    found = violations(compose(["sandbox=none", "rollout.function_path=clawgym_rl_rollout.generate_rollout_clawgym_rl"]))
    assert [(v.code, v.keys) for v in found] == [
        ("sandbox-none-without-openclaw-hooks", ["sandbox.backend", "rollout.function_path"]),
        ("sandbox-none-without-openclaw-hooks", ["sandbox.backend", "eval.function_path"])]


def test_unknown_sandbox_backend_lists_none_among_the_choices():
    found = violations(compose(["sandbox.backend=podman"]))
    assert any(v.code == "sandbox-backend-known" and "sandbox=none" in v.fix for v in found)


# ---------------------------------------------------------------- argv semantics

def test_trainer_flags_follow_argparse_last_value_equals_form_and_nargs():
    flags = trainer_flags(["--input-key", "a", "--colocate", "--input-key=b", "--eval-prompt-data", "aime",
                           "/d/aime.jsonl", "gsm", "/d/gsm.jsonl", "--lr", "-1e-6"])
    assert flags["--input-key"] == ["b"]
    assert flags["--colocate"] == []
    assert flags["--eval-prompt-data"] == ["aime", "/d/aime.jsonl", "gsm", "/d/gsm.jsonl"]
    assert flags["--lr"] == ["-1e-6"]


# ---------------------------------------------------------------- preflight: good data

def test_prompt_data_run_passes_without_sandbox_or_task_checks(checkout, data):
    report, _ = preflight(checkout, extra(*good_args(data)))
    assert isinstance(report, Report), report.report()
    names = report.by_name()
    assert not {"docker", "image", "rootfs", "root", "tasks"} & set(names)
    assert "prompt" in names["prompts"].detail and "label" in names["prompts"].detail
    assert "math_reward.reward" in names["functions"].detail
    assert "slime.rollout.sglang_rollout.generate_rollout" in names["functions"].detail


def test_eval_prompt_data_pairs_are_each_checked(checkout, data, tmp_path):
    aime = write_jsonl(tmp_path / "aime.jsonl", [{"question": "1+1", "answer": "2"}])
    args = good_args(data) + ["--eval-prompt-data", "aime", str(aime), "--eval-input-key", "question",
                              "--eval-label-key", "answer"]
    report, _ = preflight(checkout, "eval.interval=5", extra(*args))
    assert isinstance(report, Report), report.report()
    assert "eval aime" in report.by_name()["prompts"].detail


def test_prompt_data_slice_suffix_names_the_file(checkout, data):
    args = good_args(data)
    args[1] = f"{data}@[0:100]"
    report, _ = preflight(checkout, extra(*args))
    assert isinstance(report, Report), report.report()


def test_last_input_key_wins_as_in_argparse(checkout, data):
    """A flag given twice in the argv (clawgym's own plans never do; other routes may): the last counts."""
    from dataclasses import replace

    from clawgym.preflight.core import Context
    from clawgym.preflight.data import check_prompt_data

    _, plan = preflight(checkout, extra(*good_args(data)))
    c = to_plain(compose(["sandbox=none", f"paths.root={checkout}"]))
    last_wrong = replace(plan, entrypoint=plan.entrypoint + ["--input-key", "question"])
    with pytest.raises(Exception, match=r"has no key 'question' \(--input-key question\)"):
        check_prompt_data(Context(c=c, plan=last_wrong, local_head=False))
    i = plan.entrypoint.index("--input-key")
    first_wrong = replace(plan, entrypoint=plan.entrypoint[:i] + ["--input-key=question"] + plan.entrypoint[i:])
    assert "prompt" in check_prompt_data(Context(c=c, plan=first_wrong, local_head=False))


# ---------------------------------------------------------------- preflight: bad data

def test_missing_prompt_data_file_fails_naming_the_flag(checkout, tmp_path):
    report, _ = preflight(checkout, extra("--prompt-data", str(tmp_path / "nope.jsonl")))
    assert f"--prompt-data={tmp_path / 'nope.jsonl'}" in failed(report, "prompts")


def test_no_prompt_data_with_the_global_dataset_fails(checkout):
    text = failed(preflight(checkout)[0], "prompts")
    assert "no --prompt-data is given" in text and "args.prompt_data=" in text


def test_line_that_is_not_json_fails_with_its_number(checkout, tmp_path):
    bad = write_jsonl(tmp_path / "bad.jsonl", [{"input": "ok"}, "{not json"])
    assert "line 2 of" in failed(preflight(checkout, extra("--prompt-data", str(bad)))[0], "prompts")


def test_line_that_is_not_an_object_fails(checkout, tmp_path):
    bad = write_jsonl(tmp_path / "list.jsonl", [["a", "b"]])
    assert "is a JSON list, not an object" in failed(preflight(checkout, extra("--prompt-data", str(bad)))[0],
                                                     "prompts")


def test_missing_input_key_lists_the_keys_the_line_has(checkout, data):
    # slime's default --input-key is "input"; this data keeps its prompt under "prompt".
    text = failed(preflight(checkout, extra("--prompt-data", str(data)))[0], "prompts")
    assert "has no key 'input' (--input-key input); its keys: label, metadata, prompt" in text
    assert "args.input_key=" in text


def test_missing_label_key_fails(checkout, data):
    args = good_args(data)
    args[args.index("--label-key") + 1] = "answer"
    assert "has no key 'answer' (--label-key answer)" in failed(preflight(checkout, extra(*args))[0], "prompts")


def test_only_the_first_lines_are_read(checkout, data):
    rows = [{"prompt": "p", "label": "l"}] * 3 + ["garbage that is never read"]
    big = write_jsonl(data.parent / "big.jsonl", rows)
    args = good_args(big)
    report, _ = preflight(checkout, extra(*args))
    assert isinstance(report, Report), report.report()


def test_file_that_is_neither_jsonl_nor_parquet_fails(checkout, tmp_path):
    csv = tmp_path / "train.csv"
    csv.write_text("prompt,label\n")
    assert "only .jsonl and .parquet" in failed(preflight(checkout, extra("--prompt-data", str(csv)))[0], "prompts")


def test_eval_prompt_data_without_a_path_fails(checkout, data):
    text = failed(preflight(checkout, extra(*good_args(data), "--eval-prompt-data", "aime"))[0], "prompts")
    assert "takes name/path pairs" in text


def test_eval_interval_without_eval_data_fails(checkout, data):
    text = failed(preflight(checkout, "eval.interval=5", extra(*good_args(data)))[0], "prompts")
    assert "eval.interval=5 but no --eval-prompt-data" in text


def test_bad_second_eval_set_is_named(checkout, data, tmp_path):
    good = write_jsonl(tmp_path / "a.jsonl", [{"prompt": "p", "label": "l"}])
    bad = write_jsonl(tmp_path / "b.jsonl", [{"question": "p"}])
    args = good_args(data) + ["--eval-prompt-data", "a", str(good), "b", str(bad)]
    text = failed(preflight(checkout, "eval.interval=5", extra(*args))[0], "prompts")
    assert f"--eval-prompt-data b={bad}" in text


# ---------------------------------------------------------------- custom function paths from the argv

@pytest.mark.parametrize("flag", ["--dynamic-sampling-filter-path", "--custom-reward-post-process-path",
                                  "--rollout-data-postprocess-path", "--custom-loss-function-path"])
def test_custom_function_path_from_extra_args_must_resolve(checkout, data, flag):
    text = failed(preflight(checkout, extra(*good_args(data), flag, "my_filters.keep"))[0], "functions")
    assert f"{flag}=my_filters.keep: module my_filters is not on the job's PYTHONPATH" in text
    (checkout / "my_filters.py").write_text("def keep(args, samples):\n    return samples\n")
    report, _ = preflight(checkout, extra(*good_args(data), flag, "my_filters.keep"))
    assert isinstance(report, Report), report.report()
    assert "my_filters.keep" in report.by_name()["functions"].detail


def test_custom_function_path_missing_attribute_fails(checkout, data):
    text = failed(preflight(checkout, "rollout.reward_function_path=math_reward.score", extra(*good_args(data)))[0],
                  "functions")
    assert "rollout.reward_function_path=math_reward.score" in text and "defines no top-level score" in text


def test_function_set_by_a_config_key_is_named_by_the_key(checkout, data):
    text = failed(preflight(checkout, "rollout.reward_function_path=nowhere.rm", extra(*good_args(data)))[0],
                  "functions")
    assert "rollout.reward_function_path=nowhere.rm: module nowhere" in text


# ---------------------------------------------------------------- no Docker, no rootfs

def test_prompt_data_run_needs_no_docker_engine_or_rootfs(checkout, data, tmp_path):
    """Preflight and leftover cleanup of sandbox=none pass with no engine reachable, and never import docker."""
    script = textwrap.dedent(f"""
        import sys
        from clawgym.config.compose import compose
        from clawgym.plan.build import build_plan
        from clawgym.preflight import cleanup_leftovers, run_preflight
        from clawgym.validate import validate
        cfg = compose({["sandbox=none", f"paths.root={checkout}", "skip_checks=[gpus,ports,cluster]", RM,
                        extra(*good_args(data))]!r})
        validate(cfg)
        plan = build_plan(cfg, environ={{}}, timestamp="t")
        report = run_preflight(cfg, plan, local_head=False, echo=None)
        assert cleanup_leftovers(cfg, echo=None) == []
        print("docker imported:", "docker" in sys.modules,
              "checks:", ",".join(r.name for r in report.results if r.status == "ok"))
    """)
    env = {**os.environ, "DOCKER_HOST": f"unix://{tmp_path}/no-engine.sock"}
    env.pop("OPENCLAW_ROOTFS", None)
    out = subprocess.run([sys.executable, "-c", script], cwd=ROOT, env=env, capture_output=True, text=True,
                         timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    assert "docker imported: False" in out.stdout
    assert "checks: checkpoint,save_dir,checkout,prompts,functions" in out.stdout
