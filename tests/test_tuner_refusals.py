"""A study that cannot work is refused cleanly before anything starts: exit 2, no traceback, the
key, the rule and a fix, and no sweep dir left behind. Real Hydra, real Optuna storage; nothing
reaches a Ray head (each refusal comes before one would start)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.test_tuner import LR_SPACE, run, tune_argv


def refused(proc, tmp: Path) -> str:
    out = proc.stdout + proc.stderr
    assert proc.returncode == 2, out[-4000:]
    assert "Traceback" not in out, out[-4000:]
    assert not (tmp / "multirun").exists(), "a refused study leaves no sweep dir"
    return out


def test_an_interval_with_an_infinite_end_is_refused_with_a_fix(clawgym_checkout, tmp_path) -> None:
    out = refused(run(tune_argv(clawgym_checkout, tmp_path, "http://127.0.0.1:9", "optimizer.lr=interval(1e-7,inf)"),
                      tmp_path), tmp_path)
    assert "optimizer.lr=interval(1e-07, inf): Optuna samples between two finite ends" in out and "fix:" in out


def test_every_bad_search_override_is_reported_at_once(clawgym_checkout, tmp_path) -> None:
    out = refused(run(tune_argv(clawgym_checkout, tmp_path, "http://127.0.0.1:9", "optimizer.lr=interval(1e-7,inf)",
                                "rollout.temperature=interval(1.2, 0.6)"), tmp_path), tmp_path)
    assert "optimizer.lr=interval" in out and "rollout.temperature=interval(1.2, 0.6)" in out


def test_a_secret_named_key_in_the_search_space_is_refused_and_its_values_never_printed(clawgym_checkout,
                                                                                     tmp_path) -> None:
    out = refused(run(tune_argv(clawgym_checkout, tmp_path, "http://127.0.0.1:9", LR_SPACE,
                                "+extra_env.MY_API_KEY=choice(sk-first-4711,sk-second-4712)"), tmp_path), tmp_path)
    assert "extra_env.MY_API_KEY: names a secret" in out
    assert "sk-first-4711" not in out and "sk-second-4712" not in out


def test_an_unwritable_storage_is_refused_with_a_fix(clawgym_checkout, tmp_path) -> None:
    out = refused(run(tune_argv(clawgym_checkout, tmp_path, "http://127.0.0.1:9", LR_SPACE,
                                "hydra.sweeper.storage=/proc/clawgym/study.journal"), tmp_path), tmp_path)
    assert "hydra.sweeper.storage" in out and "/proc/clawgym/study.journal" in out and "fix:" in out


def test_a_damaged_journal_is_refused_with_a_fix(clawgym_checkout, tmp_path) -> None:
    journal = tmp_path / "damaged.journal"
    journal.write_text("this is not an optuna journal\n{\"op_code\": \n")
    out = refused(run(tune_argv(clawgym_checkout, tmp_path, "http://127.0.0.1:9", LR_SPACE,
                                f"hydra.sweeper.storage={journal}"), tmp_path), tmp_path)
    assert f"storage {journal} cannot be opened" in out and "fix:" in out


def test_a_misspelled_key_in_the_search_space_refuses_the_study_once_before_any_trial(clawgym_checkout,
                                                                                    tmp_path) -> None:
    out = refused(run(tune_argv(clawgym_checkout, tmp_path, "http://127.0.0.1:9", LR_SPACE,
                                "rollout.temprature=interval(0.6, 1.2)", "hydra.sweeper.n_trials=3"), tmp_path),
                  tmp_path)
    # Said once, for the study (not once per trial), and no trial was stored: the fixed command
    # starts the study afresh with all its trials.
    assert out.count("temprature") >= 1 and "trial 0" not in out and "told FAIL" not in out, out[-3000:]
    assert "the search space does not compose" in out and "fix:" in out
