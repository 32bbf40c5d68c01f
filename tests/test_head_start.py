"""Starting a local head alongside preflight: its ports are reserved before ``ray start`` runs,
released once it is up or stopped, and a start that is abandoned leaves nothing behind.

Real ``ray start`` (no GPUs needed); nothing here waits on a clock.
"""

from __future__ import annotations

import errno
import os
import socket
from pathlib import Path

import pytest

from clawgym.backends.head import (
    liveness as head_liveness,
    ports as head_ports,
    processes as head_processes,
    records as head_records,
    start as head_start,
)
from tests.fixtures.ray_cluster import head_argv


@pytest.fixture(autouse=True)
def private_state(tmp_path, monkeypatch):
    monkeypatch.setenv("CLAWGYM_STATE_DIR", str(tmp_path / "state"))


def _plain_bind_refused(port: int) -> bool:
    """True when someone else's ordinary bind (no SO_REUSEADDR) cannot take the port."""
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError as exc:
            assert exc.errno == errno.EADDRINUSE
            return True
    return False


def _marker_processes(marker: str):
    return head_processes.find_processes(sid=None, marker=marker, since=0.0)


def test_the_heads_ports_are_reserved_before_ray_start_and_released_when_the_start_is_abandoned():
    gcs, dash = head_ports.free_port(), head_ports.free_port()
    start = head_start.begin_head(head_argv(port=gcs, dashboard_port=dash), {}, secrets={}, quiet=True)
    try:
        reserved = head_ports.starting_ports()
        what = {name for _host, name in reserved.values()}
        # Every port a head binds, including the ones Ray would otherwise pick or fix itself.
        assert {gcs, dash} <= set(reserved)
        assert what == {"ray.port", "ray.dashboard_port", *(o for o, k in head_ports.PORT_OPTIONS if k is None),
                        *head_ports.PORT_ENV}
        assert all(_plain_bind_refused(port) for port in reserved)
        # `ray start` is already running (its processes carry the head's marker).
        assert start.proc is not None and _marker_processes(start.marker)
        assert all(option in start.full_argv for option, key in head_ports.PORT_OPTIONS if key is None)
    finally:
        start.abort()
    assert head_ports.starting_ports() == {}
    assert _marker_processes(start.marker) == {}
    assert not os.path.exists(start.temp_dir)
    assert head_records.load_record(dash) is None
    assert not any(_plain_bind_refused(port) for port in reserved)


def test_a_port_in_use_refuses_the_head_before_ray_start_runs():
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        port, dash = taken.getsockname()[1], head_ports.free_port()
        with pytest.raises(head_records.HeadError) as err:
            head_start.begin_head(head_argv(port=port, dashboard_port=dash), {}, secrets={}, quiet=True)
    assert f"ray.port={port} on 127.0.0.1: in use" in str(err.value)
    assert head_ports.starting_ports() == {}
    assert not list(Path("/tmp/clawgym").glob(f"h{dash}-*"))
    assert not _plain_bind_refused(dash)


def test_preflight_counts_the_ports_of_the_head_being_started_as_its_own():
    from clawgym.config.compose import compose
    from clawgym.plan.build import build_plan
    from clawgym.preflight.core import CheckFailed, Context, plain_config
    from clawgym.preflight.machine import check_ports

    gcs, dash = head_ports.free_port(), head_ports.free_port()
    cfg = compose([f"ray.port={gcs}", f"ray.dashboard_port={dash}", "sandbox=none"])
    ctx = Context(c=plain_config(cfg), plan=build_plan(cfg, environ={}, timestamp="t"), local_head=True)
    held = head_ports.PortReservation()
    try:
        held.hold("127.0.0.1", gcs, "ray.port")
        held.hold("127.0.0.1", dash, "ray.dashboard_port")
        # The head listens on them already (it starts while preflight runs): still its own ports.
        listening = []
        for port in (gcs, dash):
            s = socket.socket()
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            s.bind(("127.0.0.1", port))
            s.listen(1)
            listening.append(s)
        line = check_ports(ctx)
        assert f"ray.port={gcs} (reserved for the head being started)" in line
    finally:
        held.forget()
    # Without the reservation, the same listeners are somebody else's.
    try:
        with pytest.raises(CheckFailed) as err:
            check_ports(ctx)
        assert f"ray.port={gcs} on 127.0.0.1: in use" in err.value.problem
    finally:
        for s in listening:
            s.close()


def test_the_agent_of_a_head_being_started_is_waited_for_on_the_port_clawgym_chose():
    gcs, dash = head_ports.free_port(), head_ports.free_port()
    start = head_start.begin_head(head_argv(port=gcs, dashboard_port=dash), {}, secrets={}, quiet=True)
    try:
        port = start.agent_port
        assert port is not None and f"--dashboard-agent-listen-port" in start.full_argv
        # Jobs are posted once it answers: Ray's job API looks for the agent only every 0.5 s.
        assert not head_liveness.agent_registered(start.address, start.node_ip, timeout=0.5) or \
            head_liveness.agent_answers(start.node_ip, port)
        assert start.wait_for_agent(timeout=120.0)
        # Answering on its port, and known to the dashboard (where Ray's job API looks for it).
        assert head_liveness.agent_answers(start.node_ip, port)
        assert head_liveness.agent_registered(start.address, start.node_ip)
    finally:
        start.abort()
    assert not head_liveness.agent_answers("127.0.0.1", port, timeout=0.5)


def test_a_head_is_recorded_before_its_first_job_can_go_in():
    """The first job is posted the moment the dashboard answers, seconds before `ray start` is done:
    a launcher killed in between (its job running) must leave a head that is recorded, hence listed
    as orphaned and stoppable by what was recorded, not an unowned one."""
    gcs, dash = head_ports.free_port(), head_ports.free_port()
    seen = {}

    def on_dashboard(address: str) -> None:
        seen["record"] = head_records.load_record(dash)
        seen["ray_start_running"] = start.proc.poll() is None

    start = head_start.begin_head(head_argv(port=gcs, dashboard_port=dash), {}, secrets={}, quiet=True)
    rec = None
    try:
        rec = start.finish(on_dashboard)
        early = seen["record"]
        assert early is not None, "no record when the dashboard answered"
        assert (early.marker, early.sid, early.owner_pid) == (start.marker, start.sid, os.getpid())
        assert [int(u["pid"]) for u in early.users] == [os.getpid()]
        # The record written once `ray start` is done is the same head, brought up to date.
        assert (rec.marker, rec.salt, rec.digest) == (early.marker, early.salt, early.digest)
        assert head_records.load_record(dash) == rec
        # Every process of the early record still alive is in the later one (the `ray start` CLI itself,
        # recorded early, may have exited meanwhile).
        from clawgym.backends.head.processes import verified

        still = {(p.pid, p.create_time) for p in early.processes if verified(p.pid, p.create_time) is not None}
        assert still <= {(p.pid, p.create_time) for p in rec.processes}, (early.processes, rec.processes)
    finally:
        if rec is not None:
            head_start.stop_head(rec, quiet=True)
        else:
            start.abort()
    assert head_records.load_record(dash) is None
    assert _marker_processes(start.marker) == {}
