"""The tuner's pure parts: the override grammar -> Optuna distributions, the metric and its
reduction, and the settings it refuses (each with the key and a fix)."""

from __future__ import annotations

import itertools

import pytest
from hydra.core.override_parser.overrides_parser import OverridesParser
from optuna.distributions import CategoricalDistribution, FloatDistribution, IntDistribution

from clawgym.tuner.metric import MetricError, parse_metric
from clawgym.tuner.space import SpaceError, parse
from clawgym.tuner.study import Settings, SettingsError


def test_each_sweep_of_the_grammar_becomes_its_optuna_distribution() -> None:
    space = parse(["optimizer.lr=tag(log, interval(1e-7, 1e-4))", "rollout.temperature=interval(0.6, 1.2)",
                   "grpo.kl_loss_coef=choice(0, 0.001, 0.01)", "rollout.n_samples_per_prompt=range(4, 16, step=4)",
                   "perf.tensor_parallel=1,2", "rollout.top_k=tag(log, interval(1, 64))", "gpu_layout=split_1_1"])
    p = space.params
    assert p["optimizer.lr"] == FloatDistribution(1e-7, 1e-4, log=True)
    assert p["rollout.temperature"] == FloatDistribution(0.6, 1.2)
    assert p["grpo.kl_loss_coef"] == CategoricalDistribution([0, 0.001, 0.01])
    # Hydra's range excludes its end, as a -m grid expands it.
    assert p["rollout.n_samples_per_prompt"] == IntDistribution(4, 12, step=4)
    assert p["perf.tensor_parallel"] == CategoricalDistribution([1, 2])
    # Hydra reads interval bounds as floats (interval(1, 64) is 1.0..64.0): ints come from range.
    assert p["rollout.top_k"] == FloatDistribution(1.0, 64.0, log=True)
    assert space.fixed == ["gpu_layout=split_1_1"]


def test_trial_overrides_are_the_fixed_ones_then_each_sampled_value() -> None:
    space = parse(["gpu_layout=split_1_1", "optimizer.lr=interval(1e-6, 1e-5)", "+extra_env.MODE=choice(a, b)"])
    assert space.overrides({"optimizer.lr": 3e-06, "extra_env.MODE": "b"}) == [
        "gpu_layout=split_1_1", "optimizer.lr=3e-06", "+extra_env.MODE=b"]


def test_config_file_params_join_the_space_and_the_command_line_wins() -> None:
    space = parse(["rollout.temperature=interval(0.7, 1.0)"],
                  {"optimizer.lr": "tag(log, interval(1e-7, 1e-4))", "rollout.temperature": "interval(0.6, 1.2)"})
    assert space.params["rollout.temperature"] == FloatDistribution(0.7, 1.0)
    assert space.params["optimizer.lr"] == FloatDistribution(1e-7, 1e-4, log=True)


def test_grid_holds_the_combinations_a_minus_m_sweep_expands() -> None:
    overrides = ["optimizer.lr=choice(1e-6, 1e-5)", "rollout.n_samples_per_prompt=range(4, 16, step=4)"]
    grid = parse(overrides).grid()
    parser = OverridesParser.create()
    hydra = {o.key_or_group: list(o.sweep_string_iterator())
             for o in parser.parse_overrides(["optimizer.lr=1e-6,1e-5", "rollout.n_samples_per_prompt=range(4,16,4)"])}
    ours = {(str(a), str(b)) for a, b in itertools.product(*grid.values())}
    theirs = set(itertools.product(*hydra.values()))
    assert {(float(a), int(b)) for a, b in ours} == {(float(a), int(b)) for a, b in theirs}


@pytest.mark.parametrize("override, says", [
    ("rollout.temperature=interval(1.2, 0.6)", "low < high"),
    ("optimizer.lr=tag(log, interval(0, 1e-4))", "positive low end"),
    ("rollout.n_samples_per_prompt=range(16, 4, step=4)", "holds no value"),
])
def test_a_space_optuna_cannot_sample_is_refused_naming_the_key(override, says) -> None:
    with pytest.raises(SpaceError) as err:
        parse([override])
    assert override.split("=")[0] in str(err.value) and says in str(err.value) and "fix:" in str(err.value)


def test_grid_sampler_refuses_an_interval() -> None:
    with pytest.raises(SpaceError, match="rollout.temperature is an interval"):
        parse(["rollout.temperature=interval(0.6, 1.2)"]).grid()


@pytest.mark.parametrize("text, tag, values, value", [
    ("eval/aime:max", "eval/aime", [0.1, 0.5, 0.3], 0.5),
    ("rollout/raw_reward:mean_last_2", "rollout/raw_reward", [0.1, 0.5, 0.3], 0.4),
    ("reward", "rollout/raw_reward", [0.1, 0.5, 0.3], 0.3),
    ("step_s:min", "perf/step_time", [3.0, 2.0, 2.5], 2.0),
    ("eval/aime:mean", "eval/aime", [0.2, 0.4], pytest.approx(0.3)),
])
def test_metric_names_a_tag_and_reduces_its_steps(text, tag, values, value) -> None:
    m = parse_metric(text)
    assert m.tag == tag and m.reduce(values) == value


def test_pruner_is_fed_the_reduction_up_to_each_step() -> None:
    m = parse_metric("rollout/raw_reward:max")
    assert m.intermediate([(0, 0.2), (1, 0.1), (2, 0.4)]) == [(0, 0.2), (1, 0.2), (2, 0.4)]


@pytest.mark.parametrize("text", ["eval/aime:best", ":max", "x:last_last_3"])
def test_a_metric_that_cannot_be_read_is_refused_with_a_fix(text) -> None:
    with pytest.raises(MetricError, match="fix:"):
        parse_metric(text)


def test_settings_collect_every_bad_value_with_its_key_and_fix() -> None:
    with pytest.raises(SettingsError) as err:
        Settings.from_mapping({"sampler": "bohb", "pruner": "asha", "direction": "up", "n_trials": 0,
                               "on_orphan": "adopt"})
    text = str(err.value)
    for key in ("sampler", "pruner", "direction", "n_trials", "on_orphan"):
        assert f"hydra.sweeper.{key}=" in text
    assert text.count("fix:") == 5


def test_a_failed_or_refused_trial_is_never_marked_best_in_the_report() -> None:
    from clawgym.runs.report import best_rows
    from clawgym.runs.table import Column

    columns = [Column("objective", "objective", "num"), Column("reward", "reward", "num")]
    rows = [{"trial_state": "complete", "objective": 0.5, "reward": 0.5},
            {"trial_state": "failed", "objective": None, "reward": 0.9},
            {"trial_state": "complete", "objective": 0.7, "reward": 0.6}]
    # The failed trial logged the highest reward before it failed: the best is a trial that completed.
    assert best_rows(rows, columns) == {"objective": 2, "reward": 2}
    # Among one completed trial and failed ones there is no ranking to show.
    assert best_rows([rows[0], {**rows[1], "trial_state": "refused"}], columns) == {}


def test_a_minimised_studys_report_marks_the_lowest_objective_best() -> None:
    """Issue 35: a study with direction=minimize had its highest objective bolded as best."""
    from clawgym.runs.report import best_rows
    from clawgym.runs.table import Column

    columns = [Column("objective", "objective", "num")]
    rows = [{"trial_state": "complete", "objective": 0.5, "trial_direction": "minimize"},
            {"trial_state": "complete", "objective": 0.2, "trial_direction": "minimize"},
            {"trial_state": "complete", "objective": 0.9, "trial_direction": "minimize"}]
    assert best_rows(rows, columns) == {"objective": 1}
    maximised = [{**r, "trial_direction": "maximize"} for r in rows]
    assert best_rows(maximised, columns) == {"objective": 2}
    # Two studies of opposite directions in one table: no objective is "the best".
    assert best_rows(rows[:2] + maximised[2:], columns) == {}


def test_the_runs_row_of_a_trial_carries_its_studys_direction(tmp_path) -> None:
    from types import SimpleNamespace

    from clawgym.runs.table import trial_of

    snap = SimpleNamespace(meta={"origin": {"command": "sweep", "tuner": {"study": "s", "trial": 3, "metric": "m:min",
                                                                          "direction": "minimize", "params": {}}}},
                           path=tmp_path)
    assert trial_of(SimpleNamespace(latest=snap, status="succeeded"))["direction"] == "minimize"
