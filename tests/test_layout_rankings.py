"""The layout search claims no more than its models know (issue 35): rankings inside the step-time
model's measured error read as ties, a top pick keeps the memory plan's measured margin, and bad
input is a clean refusal naming the key."""

from __future__ import annotations

import json
import subprocess
import sys
from functools import lru_cache

import pytest

from clawgym.config.compose import compose, to_plain
from clawgym.search.layout import MEMORY_PLAN_LOW_RATIO, STEP_TIME_ERROR, search
from tests.conftest import ROOT


@lru_cache(maxsize=None)
def plain(*overrides: str) -> dict:
    return to_plain(compose(list(overrides)))


def cli(*args: str, timeout: int = 300) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "clawgym", *args], capture_output=True, text=True, cwd=ROOT,
                          timeout=timeout)


def _ranked(model: str, gpus: int, top: int = 5):
    return search(plain(f"model={model}"), gpus=gpus, gpu="h100_80gb", top=top, explain=False).layouts


@pytest.mark.parametrize("model,gpus", [("qwen3_4b", 8), ("qwen3_30b_a3b", 8), ("qwen3_32b", 16)])
def test_a_layout_ranked_above_another_is_faster_by_more_than_the_model_error_or_shares_its_rank(model, gpus):
    layouts = _ranked(model, gpus)
    assert layouts
    for a, b in zip(layouts, layouts[1:]):
        if a.in_margin != b.in_margin:
            continue
        if a.rank == b.rank:
            # A tie: the slower is within the model's error of its group's fastest.
            assert b.step_s <= min(x.step_s for x in layouts if x.rank == a.rank) * (1 + STEP_TIME_ERROR) + 1e-6
        else:
            # A ranking: every layout of the later rank is slower than all of the earlier one by more than the error.
            assert b.rank > a.rank
            assert b.step_s > min(x.step_s for x in layouts if x.rank == a.rank) * (1 + STEP_TIME_ERROR)
            assert b.step_s >= max(x.step_s for x in layouts if x.rank == a.rank)


def test_the_top_layout_keeps_the_memory_margin_measured_for_the_plan():
    layouts = _ranked("qwen3_235b_a22b", 32)
    assert layouts
    best = layouts[0]
    assert not best.in_margin
    assert best.actor_peak_gib <= best.gpu_memory_gib * MEMORY_PLAN_LOW_RATIO + 1e-2
    for x in layouts:
        assert x.in_margin == (x.actor_peak_gib > x.gpu_memory_gib * MEMORY_PLAN_LOW_RATIO + 1e-2)


def test_the_memory_margin_covers_every_measured_point_of_the_reference(tmp_path):
    # The margin's ratio is no higher than the lowest plan/real ratio of benchmarks/memory_reference.json.
    from clawgym.memory import memory_plan
    from tests.test_memory_reference import overrides, reference

    data = reference()
    lowest = 1.0
    for p in data["points"]:
        a = memory_plan(to_plain(compose(overrides(p, data["meta"])))).actor
        est = (a["train_peak_gib"] if p["phase"] == "train" else a["logprob_peak_gib"]) + a["overhead_gib"]
        m = p["measured"]
        lowest = min(lowest, est / (m["peak_reserved_gib"] + m["outside_allocator_gib"]))
    assert MEMORY_PLAN_LOW_RATIO <= lowest


def test_clawgym_layout_says_ties_and_the_margin_and_never_that_more_trajectories_fit_than_exist():
    proc = cli("layout", "model=qwen3_30b_a3b", "--gpus", "8", "--gpu", "h100_80gb")
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    assert f"{round(STEP_TIME_ERROR * 100)}%" in out and "tie" in out
    assert "per node" in out and "in total" in out
    import re
    for held, batch in re.findall(r"(\d+) of (\d+) trajectories fit", out):
        assert int(held) <= int(batch), out


def test_gpu_layout_auto_picks_outside_the_margin_and_records_ties():
    from clawgym.search.auto import resolve_auto

    overrides = ["model=qwen3_30b_a3b", "gpu_layout=auto", "memory.gpu=h100_80gb"]
    _, rec = resolve_auto(plain(*overrides), overrides)
    assert rec["actor_peak_gib"] <= rec["gpu_memory_gib"] * MEMORY_PLAN_LOW_RATIO + 1e-2
    for x in rec["runners_up"]:
        assert "rank" in x


@pytest.mark.parametrize("overrides,names", [
    (["model.num_layers=0"], "model.num_layers"),
    (["model=qwen3_30b_a3b", "model.moe_router_topk=0"], "model.moe_router_topk"),
])
def test_clawgym_layout_refuses_an_impossible_model_naming_the_key(overrides, names):
    proc = cli("layout", *overrides, "--gpus", "8")
    assert proc.returncode == 2 and names in proc.stderr and "Traceback" not in proc.stderr, proc.stderr
    assert "empty sequence" not in proc.stderr


def test_clawgym_layout_refuses_more_gpus_than_it_searches():
    proc = cli("layout", "model=qwen3_4b", "--gpus", str(10 ** 8), timeout=60)
    assert proc.returncode == 2 and "--gpus" in proc.stderr and "Traceback" not in proc.stderr, proc.stderr


def test_gpu_layout_auto_with_zero_gpus_is_refused_naming_the_key(tmp_path):
    run = subprocess.run([sys.executable, "train.py", "gpu_layout=auto", "gpu_layout.num_gpus=0",
                          "memory.gpu=h100_80gb", "dry_run=true", f"hydra.run.dir={tmp_path}/out"],
                         capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert run.returncode == 2 and "gpu_layout.num_gpus" in run.stderr, run.stderr[-2000:]
    assert "Traceback" not in run.stderr


def test_clawgym_layout_on_one_gpu_proposes_a_shorter_context():
    proc = cli("layout", "--gpus", "1", "--gpu", "h100_80gb")
    assert proc.returncode == 2
    assert "a shorter context: rollout.max_context_len=" in proc.stdout, proc.stdout
