"""The layouts clawgym's search proposes start on both trainers (issue 25's proof).

tests/data/layout_starts.json holds a seeded sample of the layouts ``clawgym layout`` finds over the
model zoo x {8, 16, 32, 64} GPUs x {h100_80gb, h200_141gb} (the top layout and two runners-up per
case), each judged by each trainer flavour's own startup code on CPU (tools/gen_layout_starts.py with
tools/trainer_judge.py: parser, slime's and Megatron's validation, the driver up to GPU placement,
SGLang's ServerArgs for engine 0, rank 0's process groups, micro-batch calculator and
TransformerConfig). Here: the sample is large and spread over the zoo, every recorded layout started
on both trainers, and the data is still today's -- every layout passes clawgym's validation and fits
its memory plan, and for a sample of cases the search still returns exactly the recorded layouts.
"""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

from clawgym.config.compose import compose, to_plain
from clawgym.trainer.effective import effective_config
from clawgym.memory import evaluate
from clawgym.validate import check

ROOT = Path(__file__).parent.parent
DATA = Path(__file__).parent / "data" / "layout_starts.json"
FLAVOURS = ("clawgym", "slime")
#: Issue 25: "at least 100 found layouts across the zoo".
MIN_LAYOUTS = 100
#: Models of the zoo the sample covers at least: all 38. (Before issue 35 capped the default context at
#: the checkpoint's window, glm4_32b and mimo_7b_rl, window 32768, had no layout at the context 65536.)
MIN_MODELS = 38
#: Cases whose search is re-run here (the search takes seconds per case on a loaded machine).
RECHECKED_CASES = 12


def _tool():
    spec = importlib.util.spec_from_file_location("gen_layout_starts", ROOT / "tools" / "gen_layout_starts.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.fixture(scope="module")
def data():
    return json.loads(DATA.read_text())


@pytest.fixture(scope="module")
def tool():
    return _tool()


@pytest.fixture(scope="module")
def composer(tool):
    return tool.Composer()


def _layouts(data, flavour):
    return [(e, e["flavours"][flavour]) for e in data["entries"] if flavour in e["flavours"]]


def test_sample_covers_the_zoo_and_is_recorded_from_the_trainers(data, tool):
    meta = data["meta"]
    assert meta["generator"] == "tools/gen_layout_starts.py" and meta["seed"] == tool.SEED
    assert meta["generated_at"] and meta["gpu_counts"] == [8, 16, 32, 64] and meta["gpus"] == ["h100_80gb", "h200_141gb"]
    models = {e["model"] for e in data["entries"]}
    assert len(models) >= MIN_MODELS, f"the sample covers {len(models)} models of the zoo, want >= {MIN_MODELS}"
    for fl in FLAVOURS:
        m = meta["flavours"][fl]
        assert m["environment"]["torch"] and m["environment"]["sglang"], "the trainer environment's versions"
        assert m["stand_ins"], "every stand-in of the judge is listed"
        n = len(_layouts(data, fl))
        assert n >= MIN_LAYOUTS, f"{fl}: {n} layouts judged, issue 25 asks for >= {MIN_LAYOUTS}"
    for e in data["entries"]:
        assert e["gpus"] in meta["gpu_counts"] and e["gpu"] in meta["gpus"]
        for fl, r in e["flavours"].items():
            assert f"model={e['model']}" in r["overrides"] and f"memory.gpu={e['gpu']}" in r["overrides"]
            assert r["verdict"] in ("starts", "refused", "not judged")


def test_every_sampled_layout_starts_on_both_trainers(data):
    refused = []
    for fl in FLAVOURS:
        for e, r in _layouts(data, fl):
            if r["verdict"] != "starts":
                t = r.get("trainer") or {}
                where = t.get("where") or {}
                refused.append(f"  #{e['id']} {fl} {r['verdict']} [{t.get('stage')}] "
                               f"{where.get('file')}:{where.get('line')} "
                               f"{(t.get('message') or where.get('code') or '')[:200]}\n"
                               f"      {' '.join(r['overrides'])}")
    total = sum(len(_layouts(data, fl)) for fl in FLAVOURS)
    assert not refused, f"{len(refused)}/{total} found layouts do not start:\n" + "\n".join(refused)


def test_a_stage_left_unjudged_is_only_an_accelerator_probe(data, tool):
    """A layout may start with one stage not judged only when the trainer's refusing statement probes
    the accelerator kind (SGLang's is_cuda() & co., false on the CPU torch of the judge): a real
    refusal must never hide as "not judged". The rest of the startup path ran for it."""
    import sys

    sys.path.insert(0, str(ROOT / "tools"))
    import trainer_judge

    for fl in FLAVOURS:
        for e, r in _layouts(data, fl):
            for nj in r.get("not_judged") or []:
                assert nj["stage"] == "sglang-engine" and trainer_judge._probes_hardware(nj["where"]), (e["id"], fl, nj)


def test_every_recorded_layout_passes_validation_and_fits_today(data, composer):
    """A layout that clawgym's validation or memory plan refuses today is stale data (regenerate)."""
    stale = []
    for fl in FLAVOURS:
        for e, r in _layouts(data, fl):
            over = list(r["overrides"])
            if e["gpus"] > e.get("gpus_per_node", 8):
                # Over one node: launched on a cluster of several nodes, never cluster=local's one-node head.
                over.append("ray.address=http://127.0.0.1:8265")
            c = composer.plain(over)
            errors, _warnings = check(c, environ={})
            plan = evaluate(effective_config(c))
            if errors or not plan.fits:
                why = ", ".join(sorted({v.code for v in errors})) or "memory plan: " + "; ".join(plan.problems)[:200]
                stale.append(f"  #{e['id']} {fl}: {why}\n      {' '.join(r['overrides'])}")
    assert not stale, "recorded layouts clawgym refuses today:\n" + "\n".join(stale)


def test_recorded_layouts_are_what_the_search_returns_today(data, tool, composer):
    """The search re-run for a spread of recorded cases (first, last and between) returns the same
    layouts in the same order: a change to the search shows here as stale data."""
    cases = []
    for e in data["entries"]:
        key = (e["model"], e["gpus"], e["gpu"])
        if key not in cases:
            cases.append(key)
    step = max(1, (len(cases) - 1) // (RECHECKED_CASES - 1))
    picked = sorted({min(i, len(cases) - 1) for i in range(0, len(cases) + step, step)})[:RECHECKED_CASES]
    differ = []
    for i in picked:
        model, gpus, gpu = cases[i]
        recorded = [x for x in data["entries"] if (x["model"], x["gpus"], x["gpu"]) == cases[i]]
        for fl in FLAVOURS:
            want = [x["flavours"][fl]["overrides"] for x in sorted(recorded, key=lambda x: x["rank"])
                    if fl in x["flavours"]]
            got = [x["overrides"] for x in
                   tool.found_layouts(fl, {"model": model, "gpus": gpus, "gpu": gpu}, composer)["layouts"]]
            if got != want:
                differ.append(f"  {fl} {model} {gpus} x {gpu}:\n    recorded {want}\n    today    {got}")
    assert not differ, "the search returns other layouts than recorded (regenerate the data):\n" + "\n".join(differ)


def test_fast_composition_equals_hydra_composition(data, composer):
    """The template path the data and this test use gives what a full Hydra compose gives."""
    entries = data["entries"]
    for e in (entries[0], entries[len(entries) // 2], entries[-1]):
        for r in e["flavours"].values():
            assert composer.plain(r["overrides"]) == to_plain(compose(r["overrides"]))
