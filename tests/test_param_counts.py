"""Every model option's parameter count is exact: clawgym.memory.params.count (from the model group's
fields) against transformers' own model built on the meta device (tools/gen_param_counts.py,
recorded in tests/data/param_counts.json)."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest
import yaml

from clawgym.memory.params import count
from clawgym.config.schema import ModelConfig
from tests.conftest import ROOT

DATA = json.loads((Path(__file__).resolve().parent / "data" / "param_counts.json").read_text())
OPTIONS = sorted(p.stem for p in (ROOT / "conf" / "model").glob("*.yaml"))


def fields(name: str) -> dict:
    base = {f.name: (f.default if f.default is not dataclasses.MISSING else None)
            for f in dataclasses.fields(ModelConfig)}
    base.update(yaml.safe_load((ROOT / "conf" / "model" / f"{name}.yaml").read_text()))
    return base


def test_every_model_option_has_an_independent_count():
    assert sorted(DATA["models"]) == OPTIONS, "regenerate tests/data/param_counts.json (tools/gen_param_counts.py)"


@pytest.mark.parametrize("name", OPTIONS)
def test_param_count_equals_transformers_meta_device_count(name):
    entry = DATA["models"][name]
    if entry["params"] is None:
        pytest.fail(f"{name}: no independent count recorded ({entry['note']})")
    # transformers builds no multi-token-prediction layers: compare without them.
    assert count(fields(name)).total == entry["params"], entry
