"""The SGLang KV-pool formula the memory plan uses was found, verbatim, in both flavours' SGLang
source (tools/gen_sglang_memory.py recorded where; data/sglang_memory.json)."""

from __future__ import annotations

import importlib.util

from clawgym.memory.rollout import sglang_data
from tests.conftest import ROOT


def _needles():
    spec = importlib.util.spec_from_file_location("gen_sglang_memory", ROOT / "tools" / "gen_sglang_memory.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)  # type: ignore[union-attr]
    return mod


def test_both_flavours_record_every_expression_the_plan_relies_on_with_its_sglang_version():
    gen = _needles()
    data = sglang_data()["flavours"]
    assert {f: d["sglang"] for f, d in data.items()} == gen.VERSIONS
    for flavour, d in data.items():
        assert set(d["found"]) == {what for what, _, _ in gen.NEEDLES}, flavour
        assert all(w["line"] > 0 and w["file"].startswith("sglang/srt/") for w in d["found"].values())
        assert d["auto_fraction"]["tiers"] == gen.TIERS
