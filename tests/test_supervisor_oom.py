"""After a CUDA OOM: the layout the next attempt moves to (clawgym/supervisor/oom.py), on real configs.

Each case composes a shipped config, asks for the move and checks it against the rules the module
states: the checkpoint's shape (TP, PP, CP, EP, expert-TP) held unless it is fully reshardable, the
user's keys never moved, and the new planned actor peak below the old by more than the memory plan's
error, as the memory plan of the moved config itself says.
"""

from __future__ import annotations

import pytest

from clawgym.config.compose import compose, to_plain
from clawgym.search.layout import MEMORY_PLAN_LOW_RATIO, actor_peak_gib
from clawgym.supervisor.oom import SHAPE_KEYS, advice_after_oom, after_oom

GPU = "h100_80gb"
TIGHT = ["model=qwen3_8b", "gpu_layout=colocate_8"]


def _move(overrides):
    return after_oom(to_plain(compose(overrides)), overrides, gpu=GPU)


def test_an_oom_moves_to_a_layout_whose_planned_actor_peak_is_lower_beyond_the_plans_error():
    m = _move(TIGHT)
    assert m.overrides, m.why
    assert m.after_gib < m.before_gib * MEMORY_PLAN_LOW_RATIO
    # The stated peak is the memory plan's own for the moved config.
    moved = to_plain(compose(TIGHT + m.overrides))
    assert actor_peak_gib(moved, GPU) == pytest.approx(m.after_gib, abs=0.01)  # the search rounds to 0.01
    assert actor_peak_gib(to_plain(compose(TIGHT)), GPU) == pytest.approx(m.before_gib)
    assert f"{m.before_gib:.1f} -> {m.after_gib:.1f} GiB" in m.why


def test_the_move_keeps_the_checkpoint_shape_so_the_trainer_loads_it():
    m = _move(TIGHT)
    before = to_plain(compose(TIGHT))
    after = to_plain(compose(TIGHT + m.overrides))
    for key in SHAPE_KEYS:
        group, name = key.split(".")
        assert after[group][name] == before[group][name], key
    assert not any(o.split("=")[0] in SHAPE_KEYS for o in m.overrides)


def test_a_key_the_user_set_is_never_moved():
    free = _move(TIGHT)
    moved_key = free.overrides[0].split("=")[0]
    group, name = moved_key.split(".")
    pinned = TIGHT + [f"{moved_key}={to_plain(compose(TIGHT))[group][name]}"]
    m = _move(pinned)
    assert all(o.split("=")[0] != moved_key for o in m.overrides), m.overrides
    assert moved_key in m.why or not m.overrides


def test_a_fully_reshardable_checkpoint_frees_tp_and_pp_but_not_ep_or_cp():
    m = _move(TIGHT + ["+args.dist_ckpt_optim_fully_reshardable=true"])
    held = m.why.split("held: ", 1)[1] if "held: " in m.why else m.why.split(" with ", 1)[1]
    assert "perf.tensor_parallel" not in held and "perf.pipeline_parallel" not in held
    assert "perf.expert_parallel" in held and "perf.context_parallel" in held


def test_no_layout_with_more_headroom_is_said_with_the_numbers():
    m = _move(["model=qwen3_30b_a3b", "gpu_layout=colocate_8"])
    assert m.overrides == []
    assert "no layout keeps the checkpoint loadable" in m.why and f"{m.before_gib:.1f} GiB" in m.why


def _advised(lines):
    return [(ln.split(": planned actor peak ", 1)[0].split(), ln) for ln in lines]


def test_a_stop_after_an_oom_advises_moves_below_the_plans_error_each_with_how_to_apply_it():
    base = ["model=qwen3_14b", "gpu_layout=split_4_4", "perf.tensor_parallel=2"]
    c = to_plain(compose(base))
    before = actor_peak_gib(c, GPU)
    advised = _advised(advice_after_oom(c, "/runs/x", gpu=GPU))
    assert advised
    for overrides, line in advised:
        # Each move's own memory plan puts the actor below today's peak by more than the plan's error.
        assert actor_peak_gib(to_plain(compose(base + overrides)), GPU) < before * MEMORY_PLAN_LOW_RATIO, line
        # A move of the checkpoint's shape is a new run; any other is a resume of this save dir.
        if any(o.split("=")[0] in SHAPE_KEYS for o in overrides):
            assert "a new run: it changes perf." in line
        else:
            assert line.endswith(f"clawgym resume /runs/x {' '.join(overrides)}")
    assert any("a new run" in ln for _, ln in advised) and any("clawgym resume" in ln for _, ln in advised)


def test_a_fully_reshardable_checkpoint_is_resumed_under_a_tp_move():
    c = to_plain(compose(["model=qwen3_14b", "gpu_layout=split_4_4", "perf.tensor_parallel=2",
                          "args.dist_ckpt_optim_fully_reshardable=true"]))
    lines = advice_after_oom(c, "/runs/x", gpu=GPU)
    assert any(ln.endswith("clawgym resume /runs/x perf.tensor_parallel=4") for ln in lines), lines


def test_no_knob_with_more_headroom_is_said_with_the_numbers():
    c = to_plain(compose(["model=qwen3_30b_a3b", "gpu_layout=colocate_8"]))
    (line,) = advice_after_oom(c, "/runs/x", gpu=GPU)
    assert line.startswith("no single knob plans the actor's peak below") and "use more GPUs" in line
