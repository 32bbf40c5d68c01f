"""A local head clawgym starts listens on loopback only, every one of its services.

Started the way a launch starts it (the plan's ``ray start`` argv and head environment,
through :mod:`clawgym.backends.head.start`), with a job running on it so the job's supervisor actor and
driver are there too; then every listening TCP socket and every bound UDP socket of the
head's processes (found by its session and marker, as stopping it finds them) must be on
127.0.0.0/8 or ::1 (IPv4-mapped loopback included).
"""

from __future__ import annotations

import ipaddress
import socket
import sys
import time

import pytest

from clawgym.backends.head import ports as head_ports, processes as head_processes, start as head_start


@pytest.fixture(autouse=True)
def private_state(tmp_path, monkeypatch):
    monkeypatch.setenv("CLAWGYM_STATE_DIR", str(tmp_path / "state"))


def _loopback(ip: str) -> bool:
    addr = ipaddress.ip_address(ip.split("%")[0])
    if isinstance(addr, ipaddress.IPv6Address) and addr.ipv4_mapped is not None:
        addr = addr.ipv4_mapped
    return addr.is_loopback


def _bound_sockets(pids):
    psutil = head_processes.psutil_module()
    out = []
    for conn in psutil.net_connections(kind="inet"):
        if conn.pid not in pids or not conn.laddr:
            continue
        listening = conn.type == socket.SOCK_STREAM and conn.status == psutil.CONN_LISTEN
        bound_udp = conn.type == socket.SOCK_DGRAM and not conn.raddr
        if listening or bound_udp:
            out.append((conn.laddr.ip, conn.laddr.port, conn.pid))
    return out


def test_every_socket_a_started_head_listens_on_is_loopback(tmp_path):
    from clawgym.config.compose import compose
    from clawgym.launch.rayjob import submit
    from clawgym.plan.build import build_plan

    gcs, dash = head_ports.free_port(), head_ports.free_port()
    plan = build_plan(compose([f"ray.port={gcs}", f"ray.dashboard_port={dash}", "ray.num_gpus=8"]),
                      environ={}, timestamp="loopback")
    assert plan.ray_start is not None
    rec = head_start.start_head(plan.ray_start, plan.ray_start_env, secrets={}, quiet=True)
    try:
        # The head is up: nothing of it is reserved any more.
        assert head_ports.starting_ports() == {}
        (tmp_path / "wd").mkdir()
        plan.entrypoint = [sys.executable, "-c", "import time; time.sleep(60)"]
        plan.working_dir = str(tmp_path / "wd")
        plan.runtime_env = {}
        plan.log_file = None
        handle = submit(rec.dashboard_address, plan, secrets={})
        deadline = time.time() + 120
        while handle.status() != "RUNNING":
            assert time.time() < deadline, "the job never ran"
            time.sleep(0.5)
        procs = head_processes.record_processes(rec)
        names = {head_processes.proc_name(p) for p in procs.values()}
        assert {"gcs_server", "raylet"} <= names, names
        sockets = _bound_sockets(set(procs))
        ports = {port for _ip, port, _pid in sockets}
        # The test looks at the head's real servers: its GCS, its dashboard and many more.
        assert {gcs, dash} <= ports and len(sockets) >= 10, sockets
        wide = [(ip, port, head_processes.proc_name(procs[pid])) for ip, port, pid in sockets if not _loopback(ip)]
        assert wide == [], f"listening beyond loopback: {wide}"
        handle.client.stop_job(handle.submission_id)
    finally:
        head_start.stop_head(rec, quiet=True)
