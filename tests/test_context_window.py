"""The checkpoint's context window (``model.context_window``): every model file carries it with its source,
it is data only (no trainer flag), the validation holds the rollout context to it, and the layout search
never proposes a context above it (issue 35)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Dict, Optional

import pytest
import yaml

from clawgym.config.compose import compose, config_dir, to_plain
from clawgym.search.layout import search, shorter_contexts
from clawgym.trainer.flagmap import ROWS
from clawgym.validate import check
from tests.conftest import ROOT
from tests.fixtures.checkout import checkout_overrides

MODEL_DIR = Path(config_dir()) / "model"
MODELS = sorted(p.stem for p in MODEL_DIR.glob("*.yaml"))

#: Models whose checkpoint window no citable source was found for yet (null: unchecked). The set may
#: only shrink: a new model file comes with its window.
UNSOURCED = {"glm4_5_106b_a12b", "glm4_5_355b_a32b", "glm4_9b", "moonlight_16b_a3b", "qwen2_5_1_5b",
             "qwen2_5_32b", "qwen2_5_3b", "qwen3_14b", "qwen3_5_0_8b", "qwen3_5_4b", "qwen3_5_9b",
             "qwen3_next_80b_a3b"}


def window_entry(option: str) -> Dict[str, Optional[object]]:
    """The model file's context_window value, the comment block right above it, and its hf_repo."""
    text = (MODEL_DIR / f"{option}.yaml").read_text()
    data = yaml.safe_load(text)
    lines = text.splitlines()
    at = next((i for i, line in enumerate(lines) if line.startswith("context_window:")), None)
    comment = []
    if at is not None:
        i = at - 1
        while i >= 0 and lines[i].startswith("#"):
            comment.insert(0, lines[i])
            i -= 1
    return {"present": at is not None, "value": data.get("context_window"), "comment": "\n".join(comment),
            "hf_repo": data["hf_repo"], "mpe": data.get("max_position_embeddings")}


@pytest.mark.parametrize("option", MODELS)
def test_every_model_file_has_a_context_window_with_its_source_comment(option):
    e = window_entry(option)
    assert e["present"], f"conf/model/{option}.yaml sets no context_window"
    if option in UNSOURCED:
        assert e["value"] is None, f"{option} has a window now: take it out of UNSOURCED"
        assert "Not yet sourced" in e["comment"], e["comment"]
        return
    assert isinstance(e["value"], int) and e["value"] > 0, (option, e["value"])
    # The source: the Hugging Face repo and its config.json field, in the comment right above the value.
    assert f"{e['hf_repo']} config.json" in e["comment"] and "max_position_embeddings" in e["comment"], e["comment"]
    assert "source:" in e["comment"], e["comment"]


def test_the_unsourced_models_are_model_files():
    assert UNSOURCED <= set(MODELS)


@pytest.mark.parametrize("option", [o for o in MODELS if window_entry(o)["mpe"] is not None])
def test_the_window_equals_the_megatron_max_position_embeddings_where_a_file_sets_both(option):
    e = window_entry(option)
    assert e["value"] == e["mpe"], option


def test_no_trainer_flag_reads_the_context_window():
    assert not [row.flag for row in ROWS if row.key == "model.context_window"]


def test_the_window_changes_no_trainer_argv():
    from clawgym.plan.build import build_plan
    with_window = build_plan(compose(["model=qwen3_8b", "rollout.max_context_len=40960"]), environ={},
                             timestamp="20260101_000000").entrypoint
    without = build_plan(compose(["model=qwen3_8b", "rollout.max_context_len=40960", "model.context_window=123"]),
                         environ={}, timestamp="20260101_000000").entrypoint
    assert with_window == without


def codes(overrides):
    errors, warned = check(compose(overrides))
    return [v.code for v in errors], [v.code for v in warned], errors + warned


def test_a_rollout_context_above_the_window_of_a_model_without_megatron_window_is_refused():
    # qwen3_8b sets no max_position_embeddings (Megatron's flag): only the data window knows 40960.
    assert to_plain(compose(["model=qwen3_8b"]))["model"]["max_position_embeddings"] is None
    errors, _, found = codes(["model=qwen3_8b", "rollout.max_context_len=40961"])
    assert errors == ["sglang-context-within-model-window"], errors
    v = found[0]
    assert v.keys == ["sglang.context_length", "rollout.max_context_len", "model.context_window"]
    assert v.values["model.context_window"] == 40960
    assert "rollout.max_context_len=40960" in v.fix


def test_the_window_itself_is_accepted():
    errors, warned, _ = codes(["model=qwen3_8b", "rollout.max_context_len=40960"])
    assert "sglang-context-within-model-window" not in errors + warned
    assert "rollout-context-within-model-window" not in errors + warned


def test_an_explicit_sglang_context_above_the_window_is_refused():
    errors, _, _ = codes(["model=qwen3_8b", "rollout.max_context_len=32768", "sglang.context_length=65536"])
    assert "sglang-context-within-model-window" in errors


def test_a_rollout_context_above_the_window_with_sglangs_default_context_is_a_warning():
    errors, warned, _ = codes(["model=qwen3_8b", "rollout.max_context_len=65536", "sglang.context_length=null"])
    assert "sglang-context-within-model-window" not in errors
    assert "rollout-context-within-model-window" in warned


def test_sglang_told_to_run_past_the_window_is_accepted():
    errors, warned, _ = codes(["model=qwen3_8b", "rollout.max_context_len=65536",
                               "+extra_env.SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN=1"])
    assert not {"sglang-context-within-model-window", "rollout-context-within-model-window"} & set(errors + warned)


def dry_run(root: Path, run_dir: Path, *overrides: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "train.py", *overrides, "dry_run=true", f"hydra.run.dir={run_dir}",
         *checkout_overrides(root, skip_checks=["gpus", "memory"])],
        cwd=ROOT, capture_output=True, text=True, timeout=300, env={**os.environ, "HYDRA_FULL_ERROR": "0"})


def test_dry_run_of_qwen3_4b_one_token_past_its_window_exits_2_cleanly_and_the_window_itself_plans(
        clawgym_checkout, tmp_path):
    window = to_plain(compose(["model=qwen3_4b"]))["model"]["context_window"]
    assert window == 262144
    over = dry_run(clawgym_checkout, tmp_path / "over", "model=qwen3_4b", f"rollout.max_context_len={window + 1}")
    assert over.returncode == 2, over.stdout + over.stderr
    assert "Traceback" not in over.stdout + over.stderr
    assert "[sglang-context-within-model-window]" in over.stderr
    assert f"model.context_window={window}" in over.stderr and f"rollout.max_context_len={window}" in over.stderr
    at = dry_run(clawgym_checkout, tmp_path / "at", "model=qwen3_4b", f"rollout.max_context_len={window}")
    assert at.returncode == 0, at.stdout + at.stderr
    assert "context-within-model-window" not in at.stdout + at.stderr
    assert f"--sglang-context-length {window}" in at.stdout


def test_the_shorter_contexts_a_lift_tries_never_exceed_the_window():
    tries = shorter_contexts(262144, {"context_window": 40960})
    assert tries and max(tries) == 40960 and all(t <= 40960 for t in tries)
    # Without a window: half, an eighth and 4096, as before.
    assert shorter_contexts(65536, {}) == [32768, 8192, 4096]


def test_the_search_never_proposes_a_context_above_the_window():
    c = to_plain(compose(["model=qwen3_8b", "rollout.max_context_len=65536"]))
    r = search(c, gpus=8, gpu="h100_80gb", user_overrides=["model=qwen3_8b", "rollout.max_context_len=65536"])
    assert not r.layouts
    assert "sglang-context-within-model-window" in r.binding
    text = " ".join(r.lifts)
    proposed = [int(n) for n in re.findall(r"rollout\.max_context_len=(\d+)", text)]
    assert proposed and max(proposed) <= 40960, text
