"""The committed H200 memory reference (benchmarks/memory_reference.json) is usable data: its
points describe runs clawgym can compose, in the agreed format, and agree with the script that
measured them (benchmarks/measure_memory.py, importable without torch)."""

from __future__ import annotations

import importlib.util
import json

import pytest

from clawgym.config.compose import compose, to_plain
from tests.conftest import ROOT

REFERENCE = ROOT / "benchmarks" / "memory_reference.json"
MEASURED_KEYS = {"params", "static_allocated_gib", "peak_allocated_gib", "peak_reserved_gib",
                 "outside_allocator_gib"}


def _reference():
    return json.loads(REFERENCE.read_text())


def _script():
    spec = importlib.util.spec_from_file_location("measure_memory", ROOT / "benchmarks" / "measure_memory.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_reference_meta_names_gpu_sources_method_and_every_stand_in():
    meta = _reference()["meta"]
    for key in ("gpu", "torch", "cuda", "megatron", "slime", "how", "stand_ins", "script", "date"):
        assert meta.get(key), key
    assert "H200" in meta["gpu"]
    assert meta["script"] == "benchmarks/measure_memory.py"
    assert len(meta["stand_ins"]) >= 5


def test_reference_points_have_both_phases_and_every_measured_kind_of_memory():
    points = _reference()["points"]
    assert len(points) >= 12
    for p in points:
        assert p["phase"] in ("train", "logprob"), p["id"]
        assert set(p["measured"]) == MEASURED_KEYS, p["id"]
        m = p["measured"]
        assert isinstance(m["params"], int) and m["params"] > 0
        # Peak allocation can't be below what was resident before the phase, nor above what was reserved.
        assert m["static_allocated_gib"] <= m["peak_allocated_gib"] <= m["peak_reserved_gib"], p["id"]
    ids = {p["id"] for p in points}
    assert all({(i, "train"), (i, "logprob")} <= {(p["id"], p["phase"]) for p in points} for i in ids)


def test_reference_overrides_are_those_the_measurement_script_derives():
    script = _script()
    for p in _reference()["points"]:
        assert p["overrides"] == script.overrides_for(p["id"]), p["id"]


@pytest.mark.parametrize("pid", sorted({p["id"] for p in json.loads(REFERENCE.read_text())["points"]}))
def test_reference_point_composes_to_the_measured_shape(pid):
    script = _script()
    model, layers, tokens, rec, chunk, temp = script.point(pid)
    cfg = to_plain(compose(script.overrides_for(pid)))
    assert cfg["model"]["name"] == model
    assert cfg["model"]["num_layers"] == (layers or script.MODELS[model]["layers"])
    assert cfg["model"]["hidden_size"] == script.MODELS[model]["hidden"]
    assert cfg["model"]["ffn_hidden_size"] == script.MODELS[model]["ffn"]
    assert cfg["model"]["num_query_groups"] == script.MODELS[model]["groups"]
    assert cfg["model"]["num_attention_heads"] == script.MODELS[model]["heads"]
    assert cfg["model"]["untie_embeddings_and_output_weights"] is (not script.MODELS[model]["tied"])
    assert cfg["model"]["rotary_base"] == script.MODELS[model]["rope"]
    assert cfg["model"]["vocab_size"] == script.VOCAB
    assert cfg["model"].get("num_experts") == script.MODELS[model].get("experts")
    assert cfg["perf"]["max_tokens_per_gpu"] == tokens
    assert cfg["perf"]["recompute_granularity"] == script.RECOMPUTE[rec][0]
    assert cfg["optimizer"]["cpu_offload"] is False
    assert cfg["rollout"]["temperature"] == temp
