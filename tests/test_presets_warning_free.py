"""Every shipped layout preset on its own is warning-free (issue 35: the one-GPU presets warned
``sequence-parallel-off-at-tp1``, since perf.sequence_parallel defaulted to true whatever the TP)."""

from __future__ import annotations

import pytest

from clawgym.config.compose import compose, group_options, to_plain
from clawgym.validate import check

PRESETS = [o for o in group_options("gpu_layout") if o != "auto"]


@pytest.mark.parametrize("preset", PRESETS)
def test_a_shipped_layout_preset_gives_no_warning(preset):
    errors, warned = check(compose([f"gpu_layout={preset}"]), environ={})
    assert not [w.code for w in warned], [w.report() if hasattr(w, "report") else str(w) for w in warned]


def test_sequence_parallel_follows_tensor_parallel_unless_set():
    assert to_plain(compose(["gpu_layout=split_1_1"]))["perf"]["sequence_parallel"] is False
    assert to_plain(compose(["gpu_layout=split_4_4"]))["perf"]["sequence_parallel"] is True
    assert to_plain(compose(["gpu_layout=split_4_4", "perf.tensor_parallel=1"]))["perf"]["sequence_parallel"] is False
    # Said by the user, it stays theirs: and at TP 1 Megatron's own warning is mirrored.
    cfg = compose(["gpu_layout=split_1_1", "perf.sequence_parallel=true"])
    assert to_plain(cfg)["perf"]["sequence_parallel"] is True
    assert "sequence-parallel-off-at-tp1" in [w.code for w in check(cfg, environ={})[1]]
