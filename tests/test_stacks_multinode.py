"""Stacks of a job whose processes run on two nodes, through Ray's own stack endpoint.

A real two-node Ray cluster on this machine (tests/fixtures/two_nodes.py): a head with the
environment clawgym's heads get, so the dashboard serves stacks, and a second raylet joined to it
with its own agent ports. The job's driver waits in one named function on the head node and its actor
waits in another on the second node; :func:`stacks.dump_via_ray` must name both, each with its
node. A head without profiling answers 403, and the dump says how to turn it on.
"""

from __future__ import annotations

import os
import shutil
import sys
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


def test_dump_via_ray_names_where_the_driver_and_a_rank_on_another_node_wait(two_nodes, tmp_path):
    work = tmp_path / "job"
    work.mkdir()
    (work / "job.py").write_text(JOB)
    sid = f"clawgym-stacks-{os.getpid()}"
    address = two_nodes.address
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
