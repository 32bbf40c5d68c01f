"""A supervised run on an existing cluster that loses a node (issue 33, "Runs that finish").

A real two-node Ray cluster that clawgym did not start (tests/fixtures/two_nodes.py): the head
declares no GPUs, the second node the 8 the run holds and the resource ``second_node``, on which the
stand-in trainer runs each rollout step (an actor there: STANDIN_RANK_RESOURCE), as slime's ranks
and engines run on every node. The test SIGKILLs the second node's processes (those its fixture
started) after a checkpoint. The run must be classed ``node-lost`` from its own evidence (Ray's
ActorDiedError cause line), the supervisor must wait for the lost GPUs (``restart.node_wait_s``)
rather than submit a resume the capacity preflight refuses, and go on from the last complete
checkpoint once the node is back; or stop, saying what to do, once the wait runs out. The cluster is
never stopped by clawgym, and nothing of the run is left running.
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

from clawgym.common.exit_codes import DONE, FAILED
from clawgym.launch.rayjob import dashboard_responds
from clawgym.snapshot.attempts import read_attempts
from clawgym.supervisor import classes as C
from clawgym.supervisor import process as sup_process
from tests.fixtures.two_nodes import SECOND_NODE_GPUS, SECOND_NODE_RESOURCE
from tests.test_supervised_launch import ROOT, _argv, _assert_nothing_left, _env, _records

#: Ray's own evidence of the lost node, whichever comes first (a race between the driver and the GCS's
#: health check): the cause line of the driver's ActorDiedError, the GCS's line to the driver once it
#: gave the node up, or, when the driver died before either (ActorUnavailableError), Ray's node table.
NODE_LOST_EVIDENCE = ("The actor died because its node has died. Node Id: ",
                      "has been marked dead because the detector has missed too many heartbeats",
                      "Ray marked node ")
TRACKER = "latest_checkpointed_iteration.txt"


def _launch(checkout: Path, tmp_path: Path, save: Path, address: str, node_wait_s: float) -> subprocess.Popen:
    argv = _argv(checkout, tmp_path, save, ["cluster=existing", f"ray.address={address}"], rollouts=12,
                 extra=[f"+extra_env.STANDIN_RANK_RESOURCE={SECOND_NODE_RESOURCE}",
                        f"restart.node_wait_s={node_wait_s}"])
    return subprocess.Popen(argv, env=_env(tmp_path), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            cwd=ROOT)


def _wait_for(what, timeout: float, proc: subprocess.Popen, why: str) -> None:
    deadline = time.time() + timeout
    while not what():
        assert proc.poll() is None, f"the launch ended before {why}: {proc.communicate()[0][-4000:]}"
        assert time.time() < deadline, f"no {why} within {timeout:.0f} s"
        time.sleep(0.3)


def _lose_the_node_after_a_checkpoint(two_nodes, proc: subprocess.Popen, save: Path) -> int:
    """Kill the second node once the run saved a checkpoint; the tracker's iteration then."""
    _wait_for(lambda: (save / TRACKER).is_file(), 120, proc, "checkpoint")
    two_nodes.kill_second()
    return int((save / TRACKER).read_text().strip())


def _supervisor_log(save: Path) -> str:
    path = sup_process.log_path(save)
    return path.read_text() if path.is_file() else ""


def test_a_run_whose_node_is_lost_waits_for_the_node_and_goes_on_from_its_last_complete_checkpoint(
        clawgym_checkout, two_nodes, tmp_path):
    save = tmp_path / "run"
    proc = _launch(clawgym_checkout, tmp_path, save, two_nodes.address, node_wait_s=120)
    try:
        _lose_the_node_after_a_checkpoint(two_nodes, proc, save)
        # The supervisor says it waits for the GPUs (none are left: the head declares none) ...
        _wait_for(lambda: "restart.node_wait_s" in _supervisor_log(save), 120, proc, "wait for the lost node")
        time.sleep(3.0)
        assert len(_records(tmp_path)) == 1, "resubmitted while the cluster had no room for the run"
        # ... until an admin (or an autoscaler) brings the node back.
        two_nodes.start_second()
        out, _ = proc.communicate(timeout=240)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == DONE, out[-5000:]
    rec = read_attempts(save)
    assert [a.cls for a in rec.attempts] == [C.NODE_LOST, C.FINISHED], out[-4000:]
    lost, again = rec.attempts
    # The class comes from the run's own evidence: Ray's line, shown on the console and recorded.
    assert any(e in lost.evidence for e in NODE_LOST_EVIDENCE) and lost.next == "resume", lost
    assert f"(evidence: {lost.evidence})" in out, out[-4000:]
    assert f"has 0 of its 0 GPUs free; the run needs {SECOND_NODE_GPUS}: waiting up to 120 s (restart.node_wait_s)" \
        in out, out[-4000:]
    assert f"has {SECOND_NODE_GPUS} of its {SECOND_NODE_GPUS} GPUs free after" in out
    # Resumed from the tracker's iteration at the loss, on the same cluster address, to the end.
    runs = _records(tmp_path)
    assert len(runs) == 2 and "--load" in runs[1]["argv"]
    assert again.resumed_from == lost.checkpoint_at_end and runs[1]["start_rollout_id"] == lost.checkpoint_at_end + 1
    assert runs[0]["exit_code"] == 1 and runs[1]["rollouts"][-1] == 11
    assert (save / TRACKER).read_text().strip() == "11" and rec.stopped["by"] == "finished"
    # clawgym never stops a cluster it did not start.
    assert dashboard_responds(two_nodes.address) and two_nodes.head.poll() is None
    assert two_nodes.alive_gpus() == SECOND_NODE_GPUS
    _assert_nothing_left(save, tmp_path, two_nodes.address)


def test_a_lost_node_that_does_not_come_back_within_node_wait_s_stops_the_run_saying_how_to_resume(
        clawgym_checkout, two_nodes, tmp_path):
    save = tmp_path / "run"
    proc = _launch(clawgym_checkout, tmp_path, save, two_nodes.address, node_wait_s=4)
    try:
        tracker = _lose_the_node_after_a_checkpoint(two_nodes, proc, save)
        out, _ = proc.communicate(timeout=240)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == FAILED, out[-5000:]
    rec = read_attempts(save)
    assert [a.cls for a in rec.attempts] == [C.NODE_LOST] and rec.attempts[0].next == "stop", out[-4000:]
    assert any(e in rec.attempts[0].evidence for e in NODE_LOST_EVIDENCE), rec.attempts[0]
    assert "\x1b" not in rec.attempts[0].evidence  # as a user reads it: no terminal colour codes
    assert rec.attempts[0].checkpoint_at_end >= tracker
    assert rec.stopped["by"] == "supervisor" and "restart.node_wait_s" in rec.stopped["why"]
    assert f"`clawgym resume {save}`" in rec.stopped["fix"]
    assert "stopped for good: node lost: after 4 s (restart.node_wait_s)" in out, out[-4000:]
    assert f"fix: once the node is back (or the cluster has the GPUs), `clawgym resume {save}`" in out
    assert "Traceback" not in out.split("stopped for good")[1]
    assert len(_records(tmp_path)) == 1, "resubmitted to a cluster without room for the run"
    assert sup_process.read_record(save)["exit_code"] == FAILED
    assert dashboard_responds(two_nodes.address) and two_nodes.head.poll() is None
    _assert_nothing_left(save, tmp_path, two_nodes.address)


RANK_JOB = '''
import time, ray
ray.init()

@ray.remote(resources={"second_node": 1}, num_cpus=0)
class Rank:
    def step(self, i):
        time.sleep(0.2)
        return i

rank = Rank.remote()
i = 0
while True:
    print("step", ray.get(rank.step.remote(i)), flush=True)
    i += 1
'''


def test_a_driver_that_dies_before_ray_gives_its_node_up_is_node_lost_once_ray_marks_the_node_dead(
        two_nodes, tmp_path):
    """The node's processes die at once: the driver's call fails on a closed socket (ActorUnavailableError)
    and the job ends before the GCS's health check marks the node dead. The runner's evidence waits for
    Ray's node table (bounded by the health check's time) rather than class it a plain crash."""
    from ray.job_submission import JobSubmissionClient

    from clawgym.supervisor.classify import classify
    from clawgym.supervisor.ray_runner import RayJobRunner

    (tmp_path / "job").mkdir()
    (tmp_path / "job" / "job.py").write_text(RANK_JOB)
    client = JobSubmissionClient(two_nodes.address)
    sid = client.submit_job(entrypoint=f"{sys.executable} job.py", runtime_env={"working_dir": str(tmp_path / "job")})
    deadline = time.time() + 120
    while "step 3" not in client.get_job_logs(sid):
        assert time.time() < deadline and not client.get_job_status(sid).is_terminal(), client.get_job_logs(sid)
        time.sleep(0.3)
    two_nodes.kill_second(wait=False)
    while not client.get_job_status(sid).is_terminal():
        time.sleep(0.1)
    runner = RayJobRunner(two_nodes.address, lambda point: "", poll_s=1.0, node_settle_s=60.0)
    ev = runner.evidence(sid)
    got = classify(ev)
    assert got.cls == C.NODE_LOST, (got, ev.lines[-5:])
    assert any(e in got.evidence for e in NODE_LOST_EVIDENCE), got
    assert dashboard_responds(two_nodes.address) and two_nodes.head.poll() is None
