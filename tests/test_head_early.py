"""Getting a local head going sooner: begun before validation (and stopped when it refuses),
``ray start`` run without a PATH lookup, the launch's preparation at a lower priority.

No Ray head starts here (``begin_head`` is replaced by a recording stand-in); the real
refusal, with a real head, is in tests/test_launch.py.
"""

from __future__ import annotations

import os
import stat
import threading
from typing import Any, Dict, List

import pytest

from clawgym.backends.head import ports as head_ports, records as head_records, start as head_start
from clawgym.backends import local
from clawgym.config.compose import compose
from clawgym.plan.build import build_plan


class FakeStart:
    """What ``begin_head`` returns, recording what it was begun with and whether it was stopped."""

    def __init__(self, argv, env, *, secrets, quiet, timeout=180.0) -> None:
        self.plan_argv, self.env, self.secrets, self.quiet = list(argv), dict(env), dict(secrets), quiet
        self.address = head_records.dashboard_address_of(argv)
        self.aborted = False

    def abort(self) -> List[int]:
        self.aborted = True
        return []


@pytest.fixture
def begun(monkeypatch, tmp_path) -> List[FakeStart]:
    monkeypatch.setenv("CLAWGYM_STATE_DIR", str(tmp_path / "state"))
    started: List[FakeStart] = []

    def fake_begin(argv, env, *, secrets, quiet=False, timeout=180.0):
        started.append(FakeStart(argv, env, secrets=secrets, quiet=quiet))
        return started[-1]

    monkeypatch.setattr(head_start, "begin_head", fake_begin)
    for name in ("SGLANG_API_KEY", "WANDB_KEY", "WANDB_API_KEY"):
        monkeypatch.delenv(name, raising=False)
    local.drop()
    yield started
    local.drop()


def _early(overrides: List[str]) -> None:
    from clawgym import app

    app._begin_head_early(compose(overrides))


def test_the_head_begun_before_validation_is_exactly_the_launchs_and_is_adopted(begun, monkeypatch):
    overrides = [f"ray.port={head_ports.free_port()}", f"ray.dashboard_port={head_ports.free_port()}", "ray.num_gpus=8"]
    monkeypatch.setenv("SGLANG_API_KEY", "sg-secret")
    environ = dict(os.environ)
    _early(overrides)
    assert len(begun) == 1 and begun[0].quiet, "begun quietly, before anything is reported"
    plan = build_plan(compose(overrides), environ=environ, timestamp="t")
    head = begun[0]
    assert (head.plan_argv, head.env) == (plan.ray_start, plan.ray_start_env)
    assert head.secrets == {"SGLANG_API_KEY": "sg-secret"}
    # The launch with the same settings takes it over instead of starting a second head.
    assert local.adopt(plan.ray_start, plan.ray_start_env, {"SGLANG_API_KEY": "sg-secret"}) is head
    assert not head.aborted and local.adopt(plan.ray_start, plan.ray_start_env, {}) is None


def test_a_head_begun_with_other_settings_than_the_launchs_is_stopped(begun):
    overrides = [f"ray.port={head_ports.free_port()}", f"ray.dashboard_port={head_ports.free_port()}"]
    _early(overrides)
    plan = build_plan(compose(overrides), environ={}, timestamp="t")
    assert local.adopt(plan.ray_start, plan.ray_start_env, {"SGLANG_API_KEY": "changed"}) is None
    assert begun[0].aborted


def test_dropping_the_head_begun_before_a_refusal_stops_it(begun):
    _early([f"ray.port={head_ports.free_port()}", f"ray.dashboard_port={head_ports.free_port()}"])
    local.drop()
    assert begun[0].aborted
    assert local.adopt(begun[0].plan_argv, begun[0].env, begun[0].secrets) is None


@pytest.mark.parametrize("overrides", [["dry_run=true"], ["preflight_only=true"], ["ray.address=http://10.0.0.1:8265"],
                                       ["cluster=slurm"]], ids=["dry_run", "preflight_only", "existing", "slurm"])
def test_nothing_is_begun_early_for_what_starts_no_local_head(begun, overrides):
    try:
        _early([f"ray.dashboard_port={head_ports.free_port()}", *overrides])
    except Exception as exc:  # a config group this checkout lacks is not what this test is about
        pytest.skip(f"cannot compose {overrides}: {exc}")
    assert begun == []


def test_nothing_is_begun_early_on_a_port_an_earlier_head_is_recorded_on(begun):
    dport = head_ports.free_port()
    path = head_records.record_path(dport)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("{}")  # whatever is there is the pipeline's to settle, after validation
    _early([f"ray.dashboard_port={dport}"])
    assert begun == []


def test_ray_start_runs_the_ray_of_this_interpreter_not_a_ray_found_on_path(tmp_path, monkeypatch):
    shim = tmp_path / "ray"
    shim.write_text("#!/bin/sh\nexit 99\n")
    shim.chmod(shim.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")
    exe = head_start.ray_executable()
    assert str(shim) not in exe
    import importlib.util

    ray_dir = os.path.dirname(importlib.util.find_spec("ray").origin)
    if len(exe) == 1:
        # The console script installed with that package: its interpreter imports the same Ray.
        first = open(exe[0]).readline()
        assert first.startswith("#!") and "ray.scripts.scripts" in open(exe[0]).read()
        assert os.path.isfile(os.path.join(ray_dir, "scripts", "scripts.py"))
    else:
        assert exe[0] == __import__("sys").executable


def test_the_preparation_runs_at_a_lower_priority_in_its_own_thread_and_raises_here():
    seen: Dict[str, Any] = {}

    def work() -> None:
        seen["thread"] = threading.get_native_id()
        seen["nice"] = os.getpriority(os.PRIO_PROCESS, seen["thread"])

    mine = os.getpriority(os.PRIO_PROCESS, threading.get_native_id())
    local.yielding(work)
    assert seen["thread"] != threading.get_native_id()
    assert seen["nice"] == min(19, mine + local.PREPARE_NICENESS)
    # The caller keeps its priority.
    assert os.getpriority(os.PRIO_PROCESS, threading.get_native_id()) == mine

    def fails() -> None:
        raise ValueError("snapshot refused")

    with pytest.raises(ValueError, match="snapshot refused"):
        local.yielding(fails)
