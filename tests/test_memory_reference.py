"""The estimator against real peaks: every point of benchmarks/memory_reference.json (measured on an
NVIDIA H200 by benchmarks/measure_memory.py) is within 10% of the plan.

``actor.train_peak_gib`` / ``actor.logprob_peak_gib`` estimate torch's ``max_memory_allocated`` in
that phase (``measured.peak_allocated_gib``); the CUDA context, NCCL and fragmentation are the
plan's ``actor.overhead_gib``, outside this comparison. Parameters per GPU are exact.
"""

from __future__ import annotations

import json
from typing import Any, Dict, List

import pytest

from clawgym.config.compose import compose, to_plain
from clawgym.memory import memory_plan
from tests.conftest import ROOT

REFERENCE = ROOT / "benchmarks" / "memory_reference.json"
TOLERANCE = 0.10


def reference() -> Dict[str, Any]:
    assert REFERENCE.is_file(), f"{REFERENCE} is missing: run benchmarks/measure_memory.py on the H200"
    return json.loads(REFERENCE.read_text())


def _points() -> List[Dict[str, Any]]:
    try:
        return list(reference()["points"])
    except AssertionError:
        return []


def overrides(point: Dict[str, Any], meta: Dict[str, Any]) -> List[str]:
    ov = [str(o) for o in point["overrides"]]
    # The measurement's sampling temperature, when the point's overrides leave it at the default.
    temp = meta.get("rollout_temperature")
    if temp is not None and not any(o.startswith("rollout.temperature=") for o in ov):
        ov.append(f"rollout.temperature={temp}")
    # The measured micro-batch packs samples of 4096 tokens (meta.stand_ins); without this the plan
    # takes the config's longest possible sample (rollout.max_context_len) as one micro-batch.
    if not any(o.startswith("rollout.max_context_len=") for o in ov):
        ov += ["rollout.max_context_len=4096", "rollout.max_response_len=3072"]
    return [*ov, "memory.gpu=h200_141gb"]


def test_the_reference_file_has_train_and_logprob_points_of_several_models():
    data = reference()
    points = data["points"]
    assert {p["phase"] for p in points} == {"train", "logprob"}
    assert len({next(o for o in p["overrides"] if o.startswith("model=")) for p in points}) >= 2
    assert "gpu" in json.dumps(data["meta"]).lower()


@pytest.mark.parametrize("point", _points(), ids=lambda p: f"{p['id']}-{p['phase']}")
def test_estimated_peak_is_within_ten_percent_of_the_measured_one(point):
    meta = reference().get("meta", {})
    plan = memory_plan(to_plain(compose(overrides(point, meta))))
    measured = point["measured"]
    assert plan.actor["params_per_gpu"] == measured["params"]
    assert plan.actor["static_gib"] == pytest.approx(measured["static_allocated_gib"], rel=TOLERANCE)
    key = "train_peak_gib" if point["phase"] == "train" else "logprob_peak_gib"
    assert plan.actor[key] == pytest.approx(measured["peak_allocated_gib"], rel=TOLERANCE), (
        point["id"], point["phase"], plan.actor)
