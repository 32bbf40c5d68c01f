"""A sweep composes each distinct set of group choices once; every job's config is Hydra's own."""

from __future__ import annotations

import pytest
from omegaconf import OmegaConf

from clawgym.config.compose import config_dir
from clawgym.sweep.core import compose_jobs

SWEEPS = {
    "values only": [["rollout.temperature=0.5"], ["rollout.temperature=0.9"], ["rollout.temperature=1.0"]],
    "groups and values": [["gpu_layout=split_4_4", "rollout.train_num_workers=32"],
                          ["gpu_layout=colocate_8", "rollout.train_num_workers=32"],
                          ["gpu_layout=split_4_4", "rollout.train_num_workers=64"],
                          ["gpu_layout=colocate_8", "rollout.train_num_workers=64"]],
    "adds, deletes, dicts and lists": [["+extra_env.FOO=1", "args.seed=1", "extra_args=[--seed,3]"],
                                       ["+extra_env.FOO=2", "++args.seed=2", "extra_env={}"]],
    "model choice and value on its group": [["model=qwen3_8b", "model.num_layers=4"], ["model=qwen3_0_6b"],
                                            ["model.num_layers=2"]],
    "hydra overrides": [["hydra.job.name=a", "sandbox=none"], ["hydra.job.name=b", "sandbox=chroot",
                                                               "sandbox.rootfs=/r"]],
}


@pytest.fixture()
def loader():
    from hydra import initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    with initialize_config_dir(config_dir=str(config_dir()), version_base="1.3"):
        yield GlobalHydra.instance().config_loader()


def _master(loader, overrides=()):
    from hydra.types import RunMode

    return loader.load_configuration(config_name="config", overrides=list(overrides), run_mode=RunMode.MULTIRUN)


@pytest.mark.parametrize("name", list(SWEEPS))
def test_each_job_config_equals_hydras_own_compose(loader, name):
    master = _master(loader, ["hydra.sweep.dir=/tmp/somewhere"])
    jobs = SWEEPS[name]
    ours = compose_jobs(loader, master, jobs)
    for overrides, cfg in zip(jobs, ours):
        theirs = loader.load_sweep_config(master, list(overrides))
        assert OmegaConf.to_yaml(cfg) == OmegaConf.to_yaml(theirs), overrides
        assert OmegaConf.is_struct(cfg) == OmegaConf.is_struct(theirs)
        assert OmegaConf.to_container(cfg.hydra.overrides) == OmegaConf.to_container(theirs.hydra.overrides)
        assert cfg.hydra.job.override_dirname == theirs.hydra.job.override_dirname


def test_values_only_sweep_composes_once(loader, monkeypatch):
    master = _master(loader)
    calls = []
    original = type(loader).load_configuration

    def counted(self, *a, **k):
        calls.append(k.get("overrides"))
        return original(self, *a, **k)

    monkeypatch.setattr(type(loader), "load_configuration", counted)
    compose_jobs(loader, master, [[f"rollout.temperature=0.{i}"] for i in range(1, 9)])
    assert len(calls) == 1
    calls.clear()
    compose_jobs(loader, master, SWEEPS["groups and values"])
    assert len(calls) == 2  # one per gpu_layout choice


def test_a_typo_in_a_job_is_still_hydras_error(loader):
    from hydra.errors import ConfigCompositionException

    master = _master(loader)
    with pytest.raises(ConfigCompositionException):
        compose_jobs(loader, master, [["rollout.temperatur=0.5"]])


def test_the_sweepers_validation_compose_is_shared_and_handed_to_the_launcher(loader, monkeypatch):
    from hydra_plugins.clawgym_launcher._core import _ComposeOnce

    master = _master(loader, ["hydra.sweep.dir=/tmp/somewhere"])
    calls = []
    original = type(loader).load_configuration

    def counted(self, *a, **k):
        calls.append(k.get("overrides"))
        return original(self, *a, **k)

    monkeypatch.setattr(type(loader), "load_configuration", counted)
    wrapped = _ComposeOnce(loader)
    jobs = SWEEPS["groups and values"]
    # What Hydra's sweeper does (validate_batch_is_legal), then what the launcher does.
    validated = [wrapped.load_sweep_config(master, list(o)) for o in jobs]
    assert len(calls) == 2  # one tree per gpu_layout choice, not one per job
    launched = compose_jobs(wrapped, master, jobs)
    assert len(calls) == 2 and all(a is b for a, b in zip(validated, launched))
    monkeypatch.setattr(type(loader), "load_configuration", original)
    for overrides, cfg in zip(jobs, launched):
        assert OmegaConf.to_yaml(cfg) == OmegaConf.to_yaml(loader.load_sweep_config(master, list(overrides)))


@pytest.mark.parametrize("name", list(SWEEPS))
def test_a_jobs_resolved_values_are_those_of_its_task_config(loader, name):
    from clawgym.config.compose import to_plain
    from clawgym.sweep.core import resolved_task, task_config

    master = _master(loader, ["hydra.sweep.dir=/tmp/somewhere"])
    for cfg in compose_jobs(loader, master, SWEEPS[name]):
        ours, theirs = resolved_task(cfg), to_plain(task_config(cfg))
        assert ours == theirs and list(ours) == list(theirs)


def test_an_experiment_on_hydras_searchpath_is_composed_into_each_job_as_hydra_does(loader, tmp_path):
    """``+experiment=NAME`` whose file only a ``hydra.searchpath`` folder holds (where ``clawgym import``
    writes): the loader's repository does not know that group, and the job was composed with a plain
    key ``experiment`` instead of the file (its settings silently lost)."""
    (tmp_path / "experiment").mkdir()
    (tmp_path / "experiment" / "mine.yaml").write_text("# @package _global_\nrollout:\n  temperature: 0.93\n")
    master = _master(loader, [f"hydra.searchpath=[file://{tmp_path}]", "hydra.sweep.dir=/tmp/somewhere"])
    jobs = [["+experiment=mine", "optimizer.lr=1e-6"], ["+experiment=mine", "optimizer.lr=2e-6"]]
    ours = compose_jobs(loader, master, jobs)
    for overrides, cfg in zip(jobs, ours):
        assert "experiment" not in cfg and cfg.rollout.temperature == 0.93
        theirs = loader.load_sweep_config(master, list(overrides))
        assert OmegaConf.to_yaml(cfg) == OmegaConf.to_yaml(theirs), overrides
