"""A lost local head's record and its successor's on the same dashboard port (no Ray needed: records only).

The run's supervisor replaces a lost head on the recorded ports; its record then sits at the same path
(``<state dir>/heads/<dashboard port>.json``) as the lost head's. Whoever still holds the lost head's
record (the launcher that started it) must never remove the successor's, and a head whose recorded
GCS or raylet is gone is known lost from its record alone.
"""

from __future__ import annotations

import dataclasses
import subprocess
import sys
import time

from clawgym.backends.head import lost
from clawgym.backends.head.liveness import core_gone
from clawgym.backends.head.processes import psutil_module
from clawgym.backends.head.records import HeadRecord, ProcessId, load_record, remove_record, write_record


def _record(marker: str, port: int = 18265, processes=()) -> HeadRecord:
    return HeadRecord(dashboard_address=f"http://127.0.0.1:{port}", dashboard_port=port, gcs_address="127.0.0.1:1",
                      temp_dir=f"/tmp/clawgym-test-{marker}", session_dir=None, sid=None, marker=marker,
                      start_time=time.time(), argv=[], plan_argv=[], salt="s", digest="d",
                      processes=list(processes))


def test_removing_a_lost_heads_record_leaves_its_successors_record_on_the_same_port(tmp_path, monkeypatch):
    monkeypatch.setenv("CLAWGYM_STATE_DIR", str(tmp_path))
    old, new = _record("old0000000000000"), _record("new0000000000000")
    write_record(new)  # the successor took the port (and the path) after the old head was cleared
    remove_record(old)
    assert load_record(new.dashboard_port).marker == new.marker
    remove_record(new)
    assert load_record(new.dashboard_port) is None


def test_a_head_whose_recorded_gcs_is_gone_is_known_lost_from_its_record(tmp_path, monkeypatch):
    monkeypatch.setenv("CLAWGYM_STATE_DIR", str(tmp_path))
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        created = psutil_module().Process(child.pid).create_time()
        alive = _record("live000000000000", processes=[ProcessId(child.pid, created, "gcs_server")])
        write_record(alive)
        assert core_gone(alive) is None and lost.why_lost(alive.dashboard_address) is None
        child.kill()
        child.wait()
        why = lost.why_lost(alive.dashboard_address)
        assert why is not None and f"gcs_server pid {child.pid}" in why and "is gone" in why, why
        # Another address, or a record still "starting": nothing is concluded.
        assert lost.why_lost("http://127.0.0.1:1") is None
        write_record(dataclasses.replace(alive, status="starting"))
        assert lost.why_lost(alive.dashboard_address) is None
    finally:
        if child.poll() is None:
            child.kill()
