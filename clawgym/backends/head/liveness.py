"""Asking a head whether it answers: its dashboard, its dashboard agent, its GPUs, its state."""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from typing import List, Optional

from clawgym.backends.head.processes import verified
from clawgym.backends.head.records import HeadRecord
from clawgym.launch.rayjob import dashboard_responds


def agent_answers(host: str, port: int, timeout: float = 1.0) -> bool:
    """The dashboard agent of a head serves HTTP on ``host:port`` (any HTTP answer counts)."""
    try:
        with urllib.request.urlopen(f"http://{host}:{port}/api/local_raylet_healthz", timeout=timeout):
            return True
    except urllib.error.HTTPError:
        return True
    except (urllib.error.URLError, OSError, ValueError):
        return False


def agent_registered(address: str, node_ip: str, timeout: float = 2.0) -> bool:
    """The dashboard at ``address`` knows the agent of the node at ``node_ip``.

    The agent writes its address to the GCS just after its HTTP server starts; Ray's job API
    finds the agent only through that entry, and so does the State API's log listing, which
    answers 404 ("Cannot find matching node_id for a given node ip") until it is there."""
    url = f"{address.rstrip('/')}/api/v0/logs?node_ip={node_ip}&glob=raylet.out"
    try:
        with urllib.request.urlopen(url, timeout=timeout) as resp:
            return resp.status == 200
    except (urllib.error.URLError, OSError, ValueError):
        return False


def nodes_dead_since(address: str, since_ms: float, timeout: float = 10.0) -> List[str]:
    """The nodes the cluster at ``address`` marked dead at or after ``since_ms`` (ms since the epoch),
    each as a line: Ray's node table (the dashboard's ``/api/v0/nodes``: ``state`` DEAD, ``end_time_ms``
    and ``state_message``, e.g. "Unexpected termination: health check failed due to missing too many
    heartbeats"), oldest first."""
    url = f"{address.rstrip('/')}/api/v0/nodes?limit=10000&detail=1"
    with urllib.request.urlopen(url, timeout=timeout) as resp:
        data = json.load(resp)
    dead = [n for n in data.get("data", {}).get("result", {}).get("result", [])
            if n.get("state") == "DEAD" and float(n.get("end_time_ms") or 0) >= since_ms]
    out = []
    for n in sorted(dead, key=lambda n: float(n.get("end_time_ms") or 0)):
        gpus = (n.get("resources_total") or {}).get("GPU")
        when = time.strftime("%H:%M:%S", time.localtime(float(n["end_time_ms"]) / 1000))
        out.append(f"Ray marked node {n.get('node_id', '?')} ({n.get('node_ip', '?')}"
                   f"{f', {gpus:g} GPUs' if gpus else ''}) dead at {when}: {n.get('state_message') or 'no reason given'}")
    return out


def cluster_gpus(address: str, timeout: float = 30.0, *, wait_for_node: bool = False) -> float:
    """GPUs declared by the alive nodes of the cluster whose dashboard is at ``address``.

    ``wait_for_node``: a head whose dashboard just came up may not list its own node yet; ask
    again (up to ``timeout`` seconds) until one node is alive."""
    # The dashboard's node list is one HTTP call; ray.init would start a driver.
    url = f"{address.rstrip('/')}/api/v0/nodes?limit=10000&detail=1"
    deadline = time.time() + timeout
    while True:
        with urllib.request.urlopen(url, timeout=timeout) as resp:
            data = json.load(resp)
        nodes = [n for n in data.get("data", {}).get("result", {}).get("result", []) if n.get("state") == "ALIVE"]
        if nodes or not wait_for_node or time.time() > deadline:
            return float(sum((n.get("resources_total") or {}).get("GPU", 0.0) for n in nodes))
        time.sleep(0.2)


#: The processes without which a head is no head: its GCS and its raylet (the node's scheduler).
CORE_PROCESSES = ("gcs_server", "raylet")


def core_gone(rec: HeadRecord) -> Optional[str]:
    """Words naming the recorded core processes of a head that are gone (``gcs_server pid 12``),
    or None while every recorded one runs, or when the record names none (a head recorded before
    they were up: nothing can be concluded from it).

    Asked by the run's supervisor when a head clawgym started stops answering: a head whose GCS or
    raylet is gone cannot come back, so there is nothing to wait ``ray.lost_contact_s`` for."""
    core = [p for p in rec.processes if p.name.startswith(CORE_PROCESSES)]
    gone = [p for p in core if verified(p.pid, p.create_time) is None]
    return ", ".join(f"{p.name} pid {p.pid}" for p in gone) or None


def head_state(rec: HeadRecord, *, patience: float = 10.0) -> str:
    """"alive", "unresponsive" (GCS and raylet run, the dashboard does not answer within
    ``patience`` seconds, e.g. on an overloaded machine) or "dead" (GCS or raylet gone)."""
    core = [p for p in rec.processes if p.name.startswith(CORE_PROCESSES)]
    if not core or core_gone(rec):
        return "dead"
    deadline = time.time() + patience
    while True:
        if dashboard_responds(rec.dashboard_address, timeout=min(5.0, max(0.5, deadline - time.time()))):
            return "alive"
        if time.time() >= deadline:
            return "unresponsive"
        time.sleep(0.5)


def is_alive(rec: HeadRecord, *, patience: float = 10.0) -> bool:
    """The recorded GCS and raylet still run and the dashboard answers."""
    return head_state(rec, patience=patience) == "alive"
