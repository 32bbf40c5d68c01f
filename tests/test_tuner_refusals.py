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


def test_a_refused_study_leaves_no_empty_sweep_folders_above_its_sweep_dir(clawgym_checkout, tmp_path) -> None:
    """Issue 35: Hydra's default sweep dir is multirun/<date>/<time>; a refused study removed only the
    innermost folder it made and left the empty ones above it."""
    out = refused(run(tune_argv(clawgym_checkout, tmp_path, "http://127.0.0.1:9", "optimizer.lr=interval(1e-7,inf)",
                                f"hydra.sweep.dir={tmp_path}/multirun/2026-12-06/06-30-00/tune"), tmp_path), tmp_path)
    assert "fix:" in out


@pytest.mark.parametrize("url", ["postgresql://tuner:pg-pass-4711@127.0.0.1:9/studies",
                                 "sqlite://tuner:sq-pass-4712@/{tmp}/no/such/dir/study.db"])
def test_an_rdb_storage_password_is_masked_in_every_message_and_file(clawgym_checkout, tmp_path, url) -> None:
    """Issue 35: an RDB URL's password never reaches the terminal or a file, whether the storage is
    refused before it connects or the connection fails (no server, or no driver, here)."""
    url = url.format(tmp=tmp_path)
    password = url.split(":")[2].split("@")[0]
    proc = run(tune_argv(clawgym_checkout, tmp_path, "http://127.0.0.1:9", LR_SPACE,
                         f"hydra.sweeper.storage={url}"), tmp_path)
    out = refused(proc, tmp_path)
    assert "hydra.sweeper.storage" in out and "fix:" in out, out[-3000:]
    assert password not in out, out[-3000:]
    assert "tuner:***@" in out or "***" in out
    for f in tmp_path.rglob("*"):
        if f.is_file():
            assert password.encode() not in f.read_bytes(), f
