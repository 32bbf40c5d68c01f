"""Following a job whose cluster stops answering (real Ray: the dashboard process is frozen).

The test starts its own head (so freezing its dashboard touches nobody else's cluster),
freezes the dashboard with SIGSTOP and thaws it with SIGCONT, through the pids recorded
when the head was started.
"""

from __future__ import annotations

import signal
import time
import uuid
from typing import Any

import pytest

from clawgym.backends.head import ports as head_ports, processes as head_processes, start as head_start
from clawgym.launch.rayjob import EXIT_LOST_CONTACT, JobHandle, submit
from clawgym.plan.build import LaunchPlan
from tests.fixtures.ray_cluster import head_argv


@pytest.fixture()
def own_head(tmp_path, monkeypatch):
    monkeypatch.setenv("CLAWGYM_STATE_DIR", str(tmp_path / "state"))
    rec = head_start.start_head(head_argv(port=head_ports.free_port(), dashboard_port=head_ports.free_port()), {},
                              secrets={}, quiet=True)
    try:
        yield rec
    finally:
        for proc in head_processes.record_processes(rec).values():
            try:
                proc.send_signal(signal.SIGCONT)
            except Exception:
                pass
        head_start.stop_head(rec, quiet=True)


def dashboard_process(rec) -> Any:
    for proc in head_processes.record_processes(rec).values():
        try:
            if any("dashboard.py" in part for part in proc.cmdline()):
                return proc
        except Exception:
            continue
    raise AssertionError("no dashboard process among the head's recorded processes")


def sleeper_plan(rec, tmp_path, seconds: float) -> LaunchPlan:
    work = tmp_path / "wd"
    work.mkdir(exist_ok=True)
    code = f"import time\nprint('started', flush=True)\ntime.sleep({seconds})\nprint('done', flush=True)\n"
    return LaunchPlan(entrypoint=["python3", "-c", code], working_dir=str(work), runtime_env={"env_vars": {}},
                      ray_start=None, ray_start_env={}, submission_id=f"clawgym-lost-{uuid.uuid4().hex[:8]}",
                      address=rec.dashboard_address, log_file=str(tmp_path / "logs" / "train.log"))


def wait_running(handle: JobHandle) -> None:
    deadline = time.time() + 90
    while handle.status() != "RUNNING":
        assert time.time() < deadline
        time.sleep(0.3)


def test_a_silent_dashboard_is_reported_at_once_counted_down_and_given_up_with_how_to_check(
        own_head, tmp_path, capsys):
    handle = submit(own_head.dashboard_address, sleeper_plan(own_head, tmp_path, 300), secrets={})
    wait_running(handle)
    dash = dashboard_process(own_head)
    dash.send_signal(signal.SIGSTOP)
    try:
        t0 = time.time()
        rc = handle.follow(lost_contact_after=20)
        took = time.time() - t0
    finally:
        dash.send_signal(signal.SIGCONT)
    err = capsys.readouterr().err
    assert rc == EXIT_LOST_CONTACT
    assert 20 <= took < 60
    lines = err.splitlines()
    assert any("lost contact with the Ray dashboard" in ln and "retrying for 20s" in ln for ln in lines), err
    assert any("giving up in" in ln for ln in lines), err
    assert f"clawgym jobs status {handle.submission_id} --address {own_head.dashboard_address}" in err
    assert "ray.lost_contact_s" in err
    handle.stop()


def test_a_dashboard_that_answers_again_is_followed_to_the_end(own_head, tmp_path, capsys):
    handle = submit(own_head.dashboard_address, sleeper_plan(own_head, tmp_path, 25), secrets={})
    wait_running(handle)
    dash = dashboard_process(own_head)
    dash.send_signal(signal.SIGSTOP)
    import threading

    thaw = threading.Timer(12.0, lambda: dash.send_signal(signal.SIGCONT))
    thaw.start()
    try:
        rc = handle.follow(lost_contact_after=120)
    finally:
        thaw.cancel()
        dash.send_signal(signal.SIGCONT)
    captured = capsys.readouterr()
    assert rc == 0, captured.err
    assert "lost contact with the Ray dashboard" in captured.err
    assert "answers again" in captured.err
    assert "done" in (tmp_path / "logs" / "train.log").read_text()
