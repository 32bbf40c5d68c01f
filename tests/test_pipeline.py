"""The launch pipeline's pure parts and the backend interface (no Ray needed)."""

from __future__ import annotations

from pathlib import Path

from clawgym.launch.rayjob import ports_of, trainer_exit_code
from clawgym.plan.build import LaunchPlan


def _plan(argv, env=None, ray_start=None, address="http://127.0.0.1:1") -> LaunchPlan:
    return LaunchPlan(entrypoint=argv, working_dir="/w", runtime_env={"env_vars": env or {}}, ray_start=ray_start,
                      ray_start_env={}, submission_id="x", address=address)


def test_a_jobs_claimed_ports_are_the_api_port_and_every_port_flag():
    plan = _plan(["python3", "train.py", "--sglang-router-port", "30100", "--x", "1", "--metrics-port=9100"],
                 env={"PORT": "30001"})
    assert ports_of(plan) == [30001, 30100, 9100]
    assert ports_of(_plan(["python3", "train.py"])) == []


def test_the_trainer_exit_code_is_read_from_rays_failure_message():
    msg = "Job entrypoint command failed with exit code 3, last available logs (truncated to 20,000 chars):\n..."
    assert trainer_exit_code(msg) == 3
    assert trainer_exit_code("Job was stopped") is None


def test_backend_for_picks_a_local_head_or_an_existing_cluster_from_the_plan():
    from clawgym.backends import Backend
    from clawgym.pipeline.clusters import backend_for
    from clawgym.backends.existing import ExistingCluster
    from clawgym.backends.local import LocalHead

    local = backend_for(None, [_plan([], ray_start=["ray", "start", "--head", "--dashboard-port", "1"])])
    existing = backend_for(None, [_plan([])])
    assert isinstance(local, LocalHead) and isinstance(existing, ExistingCluster)
    assert isinstance(local, Backend) and isinstance(existing, Backend)
    # Before settling, a local head is one this machine starts: preflight checks its GPUs and ports.
    assert local.checks_this_machine() and not existing.checks_this_machine()


def test_the_pipeline_has_no_backend_specific_branches():
    import inspect

    import importlib

    for module in ("active", "checks", "jobs", "marks", "pipeline", "report", "single"):
        source = inspect.getsource(importlib.import_module(f"clawgym.pipeline.{module}"))
        for name in ("LocalHead", "ExistingCluster", "ray_start", "backends.head", "head_start", "isinstance(", ".name =="):
            assert name not in source, (module, name)


def test_backends_render_their_dry_run_artefacts_and_never_reach_into_the_pipeline():
    import inspect

    import clawgym.app as app
    import clawgym.backends.slurm_run as slurm_run
    from clawgym.backends import Backend
    from clawgym.pipeline.clusters import backend_for
    from clawgym.backends.kuberay import KubeRayBackend
    from clawgym.backends.slurm import SlurmBackend
    from clawgym.config.compose import compose, to_plain
    from clawgym.plan.build import build_plan

    source = inspect.getsource(app)
    for name in ("slurm", "kuberay", "batch_script", "manifest_yaml"):
        assert name not in source, name
    assert "clawgym.pipeline" not in inspect.getsource(slurm_run)
    for overrides, kind, artefact in ((["cluster=slurm"], SlurmBackend, "slurm_batch.sh"),
                                      (["cluster=kuberay", "kuberay.image=i:1", "kuberay.pvc=p"], KubeRayBackend,
                                       "rayjob.yaml"),
                                      ([], None, None)):
        cfg = compose(overrides)
        plan = build_plan(cfg, environ={}, timestamp="20260101_000000")
        backend = backend_for(cfg, [plan])
        assert isinstance(backend, Backend) and (kind is None or isinstance(backend, kind))
        got = backend.dry_run_artefact(plan, to_plain(cfg), Path("/tmp/out"))
        assert (got[0] if got else None) == artefact
