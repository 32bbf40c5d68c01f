"""Parameters per GPU rank are exact: clawgym.memory.params.per_stage (from the model group's fields)
against Megatron's own GPTModel built per pipeline stage on the meta device under fake process groups
(tools/gen_rank_params.py, recorded in tests/data/rank_param_counts.json) for TP, PP, EP and ETP layouts
of every model family Megatron's local layer spec can build."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest
import yaml

from clawgym.memory.params import per_rank, per_stage
from clawgym.config.schema import ModelConfig
from tests.conftest import ROOT

DATA = json.loads((Path(__file__).resolve().parent / "data" / "rank_param_counts.json").read_text())
BUILT = [c for c in DATA["cases"] if c["built"]]
LAYOUTS = [(c["model"], (lay["tp"], lay["pp"], lay["ep"], lay["etp"])) for c in BUILT for lay in c["layouts"]]


def fields(case: dict) -> dict:
    base = {f.name: (f.default if f.default is not dataclasses.MISSING else None)
            for f in dataclasses.fields(ModelConfig)}
    base.update(yaml.safe_load((ROOT / "conf" / "model" / f"{case['model']}.yaml").read_text()))
    # Large models were built with fewer layers of the same architecture (the data says which).
    base["num_layers"] = case["num_layers"]
    base["moe_layer_freq"] = case["moe_layer_freq"]
    return base


def case_and_layout(model: str, layout: tuple) -> tuple:
    case = next(c for c in BUILT if c["model"] == model)
    lay = next(x for x in case["layouts"] if (x["tp"], x["pp"], x["ep"], x["etp"]) == layout)
    return case, lay


def test_every_buildable_family_has_at_least_three_layouts_with_tp_pp_ep_and_etp():
    families = {}
    for c in BUILT:
        families.setdefault(c["family"], []).extend(c["layouts"])
    assert {"qwen3", "llama3.1", "qwen2.5", "deepseek-v3", "kimi-k2", "glm4.5", "moonlight", "glm4.7", "mimo"} <= set(families)
    for fam, layouts in families.items():
        assert len(layouts) >= 3, fam
    every = [lay for c in BUILT for lay in c["layouts"]]
    for key in ("tp", "pp", "ep", "etp"):
        assert any(lay[key] > 1 for lay in every), key


def test_what_megatron_cannot_build_on_its_local_spec_says_why():
    unbuilt = [c for c in DATA["cases"] if not c["built"]]
    assert {c["family"] for c in unbuilt} >= {"glm4", "minimax-m2", "qwen3-next", "glm5"}
    assert all(c["why"] for c in unbuilt)


@pytest.mark.parametrize("model,layout", LAYOUTS, ids=[f"{m}-tp{t}pp{p}ep{e}etp{x}" for m, (t, p, e, x) in LAYOUTS])
def test_each_stage_holds_exactly_megatrons_dense_and_expert_parameters(model, layout):
    case, lay = case_and_layout(model, layout)
    tp, pp, ep, etp = layout
    ours = per_stage(fields(case), tp=tp, pp=pp, ep=ep, etp=etp)
    assert [(r.dense, r.expert) for r in ours] == [(s["dense"], s["expert"]) for s in lay["stages"]]


@pytest.mark.parametrize("model,layout", LAYOUTS[:12], ids=[f"{m}-{l}" for m, l in LAYOUTS[:12]])
def test_the_memory_plan_sizes_for_the_largest_stage(model, layout):
    case, lay = case_and_layout(model, layout)
    tp, pp, ep, etp = layout
    largest = max(lay["stages"], key=lambda s: s["dense"] + s["expert"])
    assert per_rank(fields(case), tp=tp, pp=pp, ep=ep, etp=etp).total == largest["dense"] + largest["expert"]
