"""clawgym.backends.head: a head is stopped through its record, and nothing else ever is."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import uuid

import pytest

from clawgym.backends.head import (
    liveness as head_liveness,
    ports as head_ports,
    processes as head_processes,
    records as head_records,
    settle as head_settle,
    start as head_start,
)
from clawgym.launch.rayjob import resolve_secrets
from clawgym.plan.build import LaunchPlan


@pytest.fixture(autouse=True)
def private_state(tmp_path, monkeypatch):
    monkeypatch.setenv("CLAWGYM_STATE_DIR", str(tmp_path / "state"))
    return tmp_path / "state"


def _sleeper(env=None) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", "import time; time.sleep(300)"], start_new_session=True,
                            env={**os.environ, **(env or {})})


def _record(port: int, tmp_path, **kw) -> head_records.HeadRecord:
    base = dict(dashboard_address=f"http://127.0.0.1:{port}", dashboard_port=port, gcs_address="127.0.0.1:1",
                temp_dir=str(tmp_path / f"temp{port}"), session_dir=None, sid=None, marker=uuid.uuid4().hex[:16],
                start_time=time.time() - 60, argv=[], plan_argv=[], salt="s", digest="d", processes=[])
    base.update(kw)
    return head_records.HeadRecord(**base)


def _alive(proc: subprocess.Popen) -> bool:
    return proc.poll() is None


def test_a_recorded_pid_now_owned_by_someone_else_is_not_stopped(tmp_path):
    other = _sleeper()
    try:
        ps = head_processes.psutil_module().Process(other.pid)
        # Same pid, different create time: the pid was reused after our process died.
        rec = _record(head_ports.free_port(), tmp_path, sid=other.pid,
                      processes=[head_records.ProcessId(other.pid, ps.create_time() - 30, "raylet")])
        head_records.write_record(rec)
        head_start.stop_head(rec, grace=1.0, quiet=True)
        time.sleep(0.2)
        assert _alive(other)
        assert head_records.load_record(rec.dashboard_port) is None
    finally:
        other.kill()
        other.wait()


def test_processes_carrying_the_heads_marker_are_stopped_and_others_are_not(tmp_path):
    marker = uuid.uuid4().hex[:16]
    # A job driver in a session of its own, possibly reparented: found by the inherited marker.
    ours = _sleeper({head_records.MARKER_ENV: marker})
    theirs = _sleeper({head_records.MARKER_ENV: uuid.uuid4().hex[:16]})
    plain = _sleeper()
    try:
        rec = _record(head_ports.free_port(), tmp_path, marker=marker)
        stopped = head_start.stop_head(rec, grace=2.0, quiet=True)
        assert ours.wait(timeout=10) is not None
        assert ours.pid in stopped
        assert _alive(theirs) and _alive(plain)
    finally:
        for p in (ours, theirs, plain):
            p.kill()
            p.wait()


def test_a_dead_heads_record_is_cleaned_up_and_nothing_is_reused(tmp_path):
    port = head_ports.free_port()
    rec = _record(port, tmp_path, processes=[head_records.ProcessId(2 ** 22 - 7, 1.0, "gcs_server")])
    head_records.write_record(rec)
    assert head_settle.settle(["ray", "start", "--head", "--dashboard-port", str(port)], {}, {}) is None
    assert head_records.load_record(port) is None


def test_a_failed_ray_start_leaves_no_record_temp_dir_or_process(private_state):
    port = head_ports.free_port()
    argv = ["ray", "start", "--head", "--port", str(head_ports.free_port()), "--dashboard-port", str(port),
            "--num-gpus", "not-a-number"]
    before = set(os.listdir("/tmp/clawgym")) if os.path.isdir("/tmp/clawgym") else set()
    with pytest.raises(head_records.HeadError) as info:
        head_start.start_head(argv, {}, secrets={}, quiet=True)
    assert "fix:" in str(info.value) and f"failed-{port}.log" in str(info.value)
    assert head_records.load_record(port) is None
    after = set(os.listdir("/tmp/clawgym")) if os.path.isdir("/tmp/clawgym") else set()
    assert not [d for d in after - before if d.startswith(f"h{port}-")]


def test_record_of_a_started_head_identifies_its_processes(ray_cluster):
    rec = ray_cluster.record
    names = {p.name for p in rec.processes}
    assert {"gcs_server", "raylet"} <= names
    assert rec.temp_dir.startswith(("/tmp/", tempfile_root())) and len(rec.temp_dir) <= head_start.MAX_TEMP_DIR_LEN
    assert head_liveness.is_alive(rec)
    # Every recorded process is verified by pid and create time.
    found = head_processes.record_processes(rec)
    assert all(p.pid in found for p in rec.processes if p.name in ("gcs_server", "raylet"))


def tempfile_root() -> str:
    import tempfile

    return tempfile.gettempdir()


def _existing(address: str):
    from clawgym.backends.existing import ExistingCluster

    plan = LaunchPlan(entrypoint=["python3", "train.py"], working_dir="/nonexistent", runtime_env={},
                      ray_start=None, ray_start_env={}, submission_id="x", address=address)
    return ExistingCluster([plan], [None])


def test_existing_cluster_reports_the_gpus_its_head_declares(ray_cluster):
    assert _existing(ray_cluster.address).total_gpus() == ray_cluster.num_gpus


def test_closing_an_existing_cluster_leaves_it_running(ray_cluster):
    backend = _existing(ray_cluster.address)
    backend.start({})
    backend.close(keep=False)
    assert head_liveness.is_alive(ray_cluster.record)


def test_unreachable_existing_cluster_is_a_clear_error():
    from clawgym.backends import BackendError

    with pytest.raises(BackendError) as info:
        _existing(f"http://127.0.0.1:{head_ports.free_port()}").start({})
    assert "ray.address" in str(info.value) and "fix" in str(info.value)


def test_secrets_resolve_from_the_first_set_variable_in_plan_order():
    plan = LaunchPlan(entrypoint=[], working_dir="", runtime_env={}, ray_start=None, ray_start_env={},
                      submission_id="x", address="",
                      secret_env={"WANDB_API_KEY": ["WANDB_KEY", "WANDB_API_KEY"], "SGLANG_API_KEY": ["SGLANG_API_KEY"]})
    env = {"WANDB_KEY": "", "WANDB_API_KEY": "second", "SGLANG_API_KEY": "sg"}
    assert resolve_secrets(plan, env) == {"WANDB_API_KEY": "second", "SGLANG_API_KEY": "sg"}
    assert resolve_secrets(plan, {"WANDB_KEY": "first", "WANDB_API_KEY": "second"}) == {"WANDB_API_KEY": "first"}
    assert json.dumps(plan.to_dict()).count("second") == 0


def test_a_live_head_started_differently_is_replaced_only_when_idle(tmp_path):
    from ray.job_submission import JobSubmissionClient

    from tests.fixtures.ray_cluster import head_argv

    argv = head_argv(port=head_ports.free_port(), dashboard_port=head_ports.free_port())
    rec = head_start.start_head(argv, {"RAY_health_check_period_ms": "5000"}, secrets={}, quiet=True)
    try:
        # Same settings: reused as it is.
        assert head_settle.settle(argv, {"RAY_health_check_period_ms": "5000"}, {}).marker == rec.marker
        client = JobSubmissionClient(rec.dashboard_address)
        job = client.submit_job(entrypoint="python3 -c 'import time; time.sleep(120)'")
        deadline = time.time() + 60
        while client.get_job_status(job).value != "RUNNING":
            assert time.time() < deadline
            time.sleep(0.2)
        # Other settings (here: other secrets) while a job runs: refused, with the fix.
        with pytest.raises(head_records.HeadError) as info:
            head_settle.settle(argv, {"RAY_health_check_period_ms": "5000"}, {"SGLANG_API_KEY": "other"})
        assert job in str(info.value) and "clawgym jobs stop" in str(info.value)
        assert head_liveness.is_alive(rec)
        # Once idle, it is replaced: stopped through its record, nothing of it left.
        client.stop_job(job)
        while not client.get_job_status(job).is_terminal():
            time.sleep(0.2)
        assert head_settle.settle(argv, {"RAY_health_check_period_ms": "5000"}, {"SGLANG_API_KEY": "other"}) is None
        assert head_records.load_record(rec.dashboard_port) is None
        assert head_processes.record_processes(rec) == {}
    finally:
        if head_records.load_record(rec.dashboard_port) is not None:
            head_start.stop_head(rec, quiet=True)
