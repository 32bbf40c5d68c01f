"""Stacks of a job whose processes run on two nodes, through Ray's own stack endpoint.

A real two-node Ray cluster on this machine: a head clawgym starts (with the environment
clawgym's heads get, so the dashboard serves stacks) and a second raylet joined to it with its
own agent ports. The job's driver waits in one named function on the head node and its actor
waits in another on the second node; :func:`stacks.dump_via_ray` must name both, each with its
node. A head without profiling answers 403, and the dump says how to turn it on.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from clawgym.supervisor import stacks

pytestmark = pytest.mark.skipif(shutil.which("py-spy") is None, reason="py-spy is a dependency (pyproject.toml)")

JOB = '''
import time, ray
ray.init()

@ray.remote(resources={"second_node": 1}, num_cpus=0)
class Rank:
    def rank_waits_in_collective(self):
        while True:
            time.sleep(0.2)

rank = Rank.remote()
rank.rank_waits_in_collective.remote()

def driver_waits_for_ranks():
    while True:
        time.sleep(0.2)

driver_waits_for_ranks()
'''


def _submit(address: str, workdir: Path, sid: str) -> None:
    from ray.job_submission import JobSubmissionClient

    JobSubmissionClient(address).submit_job(entrypoint=f"{sys.executable} job.py", submission_id=sid,
                                            runtime_env={"working_dir": str(workdir)})


def _stop(address: str, sid: str) -> None:
    from ray.job_submission import JobSubmissionClient

    client = JobSubmissionClient(address)
    client.stop_job(sid)
    deadline = time.time() + 60
    while not client.get_job_status(sid).is_terminal() and time.time() < deadline:
        time.sleep(0.5)


def _ray_start(args, env) -> subprocess.Popen:
    # --block keeps `ray start` in the foreground: stopping its process group stops that node only.
    return subprocess.Popen(["ray", "start", *args, "--disable-usage-stats", "--block"], env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)


def _stop_group(proc: subprocess.Popen) -> None:
    if proc.poll() is not None:
        return
    os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


@pytest.fixture
def two_nodes():
    """A head in cluster mode with the environment clawgym's heads get (the dashboard serves
    stacks), and a second node joined to it; each stopped through the process this fixture started.

    (A head clawgym starts for one machine is single-node and binds loopback only, so it takes
    no second node: clawgym/backends/head/start.py SINGLE_NODE_ENV.)"""
    from clawgym.backends.head import ports
    from clawgym.launch.rayjob import dashboard_responds
    from clawgym.plan.build import PROFILING_ENV

    temp = tempfile.mkdtemp(prefix="cgst-", dir="/tmp")  # short: Ray's unix socket paths have a length limit
    env = {**os.environ, **PROFILING_ENV}
    env.pop("RAY_ADDRESS", None)
    port, dash = ports.free_port(), ports.free_port()
    head = _ray_start(["--head", "--port", str(port), "--dashboard-port", str(dash), "--dashboard-host", "127.0.0.1",
                       "--num-cpus", "2", "--num-gpus", "0", "--temp-dir", temp], env)
    nodes = [head]
    try:
        address = f"http://127.0.0.1:{dash}"
        deadline = time.time() + 120
        while not dashboard_responds(address) and time.time() < deadline:
            time.sleep(1)
        agent = [str(ports.free_port()) for _ in range(4)]
        nodes.append(_ray_start(["--address", f"127.0.0.1:{port}", "--num-cpus", "1", "--num-gpus", "0",
                                 "--resources", '{"second_node": 1}',
                                 "--dashboard-agent-listen-port", agent[0], "--dashboard-agent-grpc-port", agent[1],
                                 "--metrics-export-port", agent[2], "--runtime-env-agent-port", agent[3]], env))
        yield address
    finally:
        for proc in reversed(nodes):
            _stop_group(proc)
        shutil.rmtree(temp, ignore_errors=True)


def test_dump_via_ray_names_where_the_driver_and_a_rank_on_another_node_wait(two_nodes, tmp_path):
    work = tmp_path / "job"
    work.mkdir()
    (work / "job.py").write_text(JOB)
    sid = f"clawgym-stacks-{os.getpid()}"
    address = two_nodes
    _submit(address, work, sid)
    try:
        dumped = None
        deadline = time.time() + 120
        while time.time() < deadline:
            dumped = stacks.dump_via_ray(address, sid, tmp_path / "save", label="test")
            if len(dumped.waits) >= 2:
                break
            time.sleep(2)
        assert dumped is not None and len(dumped.waits) >= 2, (dumped.summary() if dumped else None)
        text = dumped.path.read_text()
        assert "driver_waits_for_ranks" in text and "rank_waits_in_collective" in text
        summary = dumped.summary()
        assert "driver_waits_for_ranks" in summary and "actor Rank" in summary
        nodes = {w.split(" on node ")[1] for w in dumped.waits.values()}
        assert len(nodes) == 2, dumped.waits  # the two processes were dumped on two different nodes
        assert dumped.path.parent == tmp_path / "save" / "stacks"
    finally:
        _stop(address, sid)


def test_a_head_without_profiling_says_how_to_turn_it_on(ray_cluster, tmp_path):
    work = tmp_path / "job"
    work.mkdir()
    # The driver is known to Ray (and listed) once it connects: ray.init, as slime's driver does.
    (work / "job.py").write_text("import time, ray\nray.init()\ndef driver_waits():\n    time.sleep(600)\n"
                                 "driver_waits()\n")
    sid = f"clawgym-stacks-off-{os.getpid()}"
    _submit(ray_cluster.address, work, sid)
    try:
        deadline = time.time() + 180
        while time.time() < deadline:
            dumped = stacks.dump_via_ray(ray_cluster.address, sid, tmp_path / "save")
            if any("profiling is off" in e for e in dumped.errors):
                break
            time.sleep(1)
        assert any(f"{stacks.RAY_PROFILING_ENV}=1" in e for e in dumped.errors), dumped.errors
        assert not dumped.waits
        assert "profiling is off" in dumped.path.read_text()
    finally:
        _stop(ray_cluster.address, sid)


def test_heads_clawgym_starts_serve_stacks():
    """The plan gives every head clawgym starts the variable the dashboard's stack endpoint needs."""
    from clawgym.config.compose import compose
    from clawgym.plan.build import build_plan

    plan = build_plan(compose([]), environ={}, timestamp="t")
    assert plan.ray_start_env.get(stacks.RAY_PROFILING_ENV) == "1"
