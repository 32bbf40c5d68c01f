"""The callback resolves a single run's task config once; the task function reuses it only when
it must resolve to the same (clawgym/app.py: _resolve_task, _callback_resolved)."""

from __future__ import annotations

import pytest
from omegaconf import OmegaConf

import clawgym.app as app
from clawgym.config.compose import compose, to_plain


@pytest.fixture(autouse=True)
def _hydra_config_restored():
    # _resolve_task and _task_config set HydraConfig (as the callback does in a run): put it back.
    from hydra.core.hydra_config import HydraConfig

    saved = HydraConfig.instance().cfg
    yield
    HydraConfig.instance().cfg = saved


def _task(cfg):
    task = app._task_config(cfg)
    return task, to_plain(task)


def test_resolved_in_place_as_the_task_config_resolves_and_the_config_is_left_as_it_was():
    cfg = compose(["args.seed=3"], return_hydra_config=True)
    keys, hydra_node = list(cfg.keys()), cfg._get_node("hydra")
    resolved, raw, reusable = app._resolve_task(cfg)
    assert reusable
    assert list(cfg.keys()) == keys and cfg._get_node("hydra") is hydra_node
    task, plain = _task(cfg)
    assert resolved == plain
    assert raw == OmegaConf.to_container(task, resolve=False)


@pytest.mark.parametrize("override", ["+hydra.job.env_set.CLAWGYM_RL_ROOT=/tmp/elsewhere", "hydra.job.chdir=true",
                                      "run_name=${now:%H%M%S%f}", "paths.root=${hydra:job.name}"])
def test_not_reused_when_the_task_function_may_resolve_it_otherwise(override):
    cfg = compose([override], return_hydra_config=True)
    resolved, raw, reusable = app._resolve_task(cfg)
    assert not reusable


def test_an_interpolation_of_hydra_keys_fails_as_in_the_task_config():
    cfg = compose(["run_name=${hydra.job.name}"], return_hydra_config=True)
    resolved, _, _ = app._resolve_task(cfg)
    assert resolved is None
    assert "hydra" in cfg


def test_the_task_function_reuses_it_only_for_the_same_content(monkeypatch):
    cfg = compose([], return_hydra_config=True)
    resolved, raw, _ = app._resolve_task(cfg)
    task, plain = _task(cfg)
    monkeypatch.setattr(app, "_CALLBACK_RESOLVED", (raw, resolved))
    assert app._callback_resolved(task) is resolved
    # Taken once.
    assert app._callback_resolved(task) is None
    other, _ = _task(compose(["rollout.batch_size=4"], return_hydra_config=True))
    monkeypatch.setattr(app, "_CALLBACK_RESOLVED", (raw, resolved))
    assert app._callback_resolved(other) is None
