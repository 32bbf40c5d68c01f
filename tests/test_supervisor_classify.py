"""The classifier against the lines torch, NCCL, Megatron, slime, SGLang, Ray and SLURM print.

Each line of ``REAL_LINES`` is the text as /work/shared/reference/run-supervision.md (and
slime-facts.md) quote it from the program's source or real logs; every pattern of
``classes.PATTERNS`` must be shown by at least one of them, so a pattern nobody prints fails here.
"""

from __future__ import annotations

import re

import pytest

from clawgym.supervisor import classes as C
from clawgym.supervisor.classify import Evidence, classify, match_line

#: (class, real line, where it comes from)
REAL_LINES = [
    (C.STARTUP_FAILURE, "train.py: error: unrecognized arguments: --dynamic-history", "argparse via Megatron parse_args"),
    (C.STARTUP_FAILURE, "AssertionError: hf_validate_args failed: rope_theta in hf config 1000000.0 is not equal "
                        "to rotary_base 10000", "slime _hf_validate_args (slime #641)"),
    (C.STARTUP_FAILURE, "AssertionError: '--save' is required when save_interval is set.", "slime validate_args"),
    (C.STARTUP_FAILURE, "ERROR: Invalid metadata file /ckpt/latest_checkpointed_iteration.txt. Exiting",
     "Megatron checkpointing.py L283"),
    (C.STARTUP_FAILURE, "FileNotFoundError: No checkpoint found in load directory or pretrained directory",
     "Megatron checkpointing.py L1426"),
    (C.STARTUP_FAILURE, "RuntimeError: TP/PP changed: not supported for DistributedOptimizer with sharding type "
                        "dp_zero_gather_scatter.  Please use --ckpt-fully-parallel-save flag during checkpoint saving.",
     "Megatron checkpointing.py L1519"),
    (C.STARTUP_FAILURE, "Unable to load rng state from checkpoint /ckpt/iter_0000010. Specify --no-load-rng or "
                        "--finetune to prevent attempting to load the rng state, exiting ...", "Megatron L1814"),
    (C.STARTUP_FAILURE, "could not load the checkpoint", "Megatron ~L1198"),
    (C.STARTUP_FAILURE, ">> '--exit-on-missing-checkpoint' set ... exiting. <<", "Megatron L1141"),
    (C.CUDA_OOM, "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 20.00 GiB. GPU 3 has a total "
                 "capacity of 79.11 GiB of which 1.93 GiB is free.", "torch caching allocator"),
    (C.CUDA_OOM, "torch.cuda.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 MiB (GPU 0; 79.15 GiB "
                 "total capacity; 77.01 GiB already allocated)", "torch <= 2.0"),
    (C.ENGINE_DEATH, "Health check failed for rollout engine 2 (ray timeout or error). Killing actor. Exception: "
                     "GetTimeoutError", "slime health_monitor.py L150"),
    (C.ENGINE_DEATH, "Exception: Server process terminated unexpectedly.", "slime sglang_engine.py L88"),
    (C.ENGINE_DEATH, "Received sigquit from a child process. It usually means the child failed.", "SGLang engine.py"),
    (C.ENGINE_DEATH, "[2026-03-01 10:00:01] Scheduler hit an exception: Traceback (most recent call last):",
     "SGLang scheduler"),
    (C.ENGINE_DEATH, "[slime-router] Worker http://10.0.0.2:30000 failed 3 consecutive health checks. Marking as DEAD.",
     "slime router.py L111"),
    (C.ENGINE_DEATH, "TimeoutError: Timeout while flushing cache.", "slime sglang_engine.py L304"),
    (C.SANDBOX_FAILURE, "TimeoutError: OpenClaw chat endpoint not ready for clawgym-rl-12-3: connection refused",
     "clawgym_rl_rollout.py L628"),
    (C.SANDBOX_FAILURE, "TimeoutError: Port 18789 still occupied after 30s", "clawgym_rl_rollout.py L246"),
    (C.SANDBOX_FAILURE, "Cannot connect to the Docker daemon at unix:///var/run/docker.sock. Is the docker daemon "
                        "running?", "docker CLI (unverified wording)"),
    (C.COLLECTIVE_TIMEOUT, "[rank3]:[E1206 04:10:11.123 ProcessGroupNCCL.cpp:632] [Rank 3] Watchdog caught collective "
                           "operation timeout: WorkNCCL(SeqNum=4021, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, "
                           "Timeout(ms)=600000) ran for 600081 milliseconds before timing out.", "ProcessGroupNCCL.cpp"),
    (C.COLLECTIVE_TIMEOUT, "Some NCCL operations have failed or timed out. Due to the asynchronous nature of CUDA "
                           "kernels, subsequent GPU operations might run on corrupted/incomplete data.",
     "ProcessGroupNCCL.cpp handleException"),
    (C.COLLECTIVE_TIMEOUT, "[PG ID 0 PG GUID 0(default_pg) Rank 3] Process group watchdog thread terminated with "
                           "exception: [Rank 3] Watchdog caught collective operation timeout", "ProcessGroupNCCL.cpp"),
    (C.COLLECTIVE_TIMEOUT, "[Rank 1] NCCL watchdog thread terminated with exception: ...", "older torch"),
    (C.COLLECTIVE_TIMEOUT, "RuntimeError: NCCL error: remote process exited or there was a network error",
     "SGLang pynccl"),
    (C.NODE_LOST, "ray.exceptions.LocalRayletDiedError: The task's local raylet died. Check raylet.out for more "
                  "information.", "ray/exceptions.py"),
    (C.NODE_LOST, "slurmstepd: error: *** JOB 1234 ON gpu01 CANCELLED AT 2026-12-06T04:00:00 DUE TO NODE FAILURE ***",
     "slurmstepd"),
    (C.TIME_LIMIT, "slurmstepd: error: *** JOB 1234 ON gpu01 CANCELLED AT 2026-12-06T04:00:00 DUE TO TIME LIMIT ***",
     "slurmstepd"),
    (C.PREEMPTED, "slurmstepd: error: *** JOB 1234 ON gpu01 CANCELLED AT 2026-12-06T04:00:00 DUE TO PREEMPTION ***",
     "slurmstepd"),
    # Seen verbatim in the batch output of `scontrol requeue 1` on the test cluster (slurm-wlm 22.05.8).
    (C.PREEMPTED, "slurmstepd-vm: error: *** JOB 1 ON vm CANCELLED AT 2026-12-06T06:16:55 DUE TO JOB REQUEUE ***",
     "slurmstepd"),
    # Ray 2.60, seen verbatim in a job's log on tests/fixtures/two_nodes.py's cluster when the node of the
    # driver's actor was SIGKILLed: the cause line of the driver's ActorDiedError traceback.
    (C.NODE_LOST, "The actor died because its node has died. Node Id: 45c521eb8e91b8d689080ed3daec0df9872e2312a009a"
                  "7de8d4d6240", "Ray gcs_actor_manager.cc via ray/exceptions.py ActorDiedError"),
    # The same, a task of the lost node: the driver's NodeDiedError.
    (C.NODE_LOST, "ray.exceptions.NodeDiedError: Task failed because the node it was running on is dead or "
                  "unavailable. Node IP: 192.0.2.2, node ID: bb615dcb033774e4c8be744c30f054fbfe5f3ab339253d46ee91d147. "
                  "This can happen if the node was preempted, had a hardware failure, or its raylet crashed "
                  "unexpectedly.", "Ray core worker via ray/exceptions.py NodeDiedError"),
    # The same, what the GCS tells the driver once the node is given up.
    (C.NODE_LOST, "\x1b[33m(raylet)\x1b[0m The node with node id: 8574f2e17c89735d4f9f150b405d8886af93b70df2c8605221882b1d "
                  "and address: 192.0.2.2 and node name: 192.0.2.2 has been marked dead because the detector has "
                  "missed too many heartbeats from it. This can happen when a \t(1) raylet crashes unexpectedly "
                  "(OOM, etc.) ", "Ray gcs_node_manager.cc"),
]

#: The driver's traceback when its actor's node died (Ray 2.60, tests/fixtures/two_nodes.py's cluster), verbatim.
NODE_DIED_TRACEBACK = """\
Traceback (most recent call last):
  File "/root/.pyenv/versions/3.11.7/lib/python3.11/site-packages/ray/_private/worker.py", line 1055, in get_objects
    raise value
ray.exceptions.ActorDiedError: The actor died unexpectedly before finishing this task.
\tclass_name: Rank
\tactor_id: 82f5066969f67c86f9a7874602000000
\tpid: 23034
\tnamespace: 5a5f33ff-8a36-48c8-a7c0-b5ebd7854442
\tip: 192.0.2.2
The actor died because its node has died. Node Id: 45c521eb8e91b8d689080ed3daec0df9872e2312a009a7de8d4d6240
\tthe actor's node was terminated unexpectedly: health check failed due to missing too many heartbeats"""

#: Lines a healthy run prints that must name no class.
HEALTHY_LINES = [
    "  successfully saved checkpoint from iteration      10 to /ckpt [ t 1/4, p 1/1 ]",
    "Health monitor doing first wait after resume: 0s",
    "[ClawGym-RL] cleaned up 4 stale containers from rollout 12",
    "WARNING: could not find the metadata file /ckpt/latest_checkpointed_iteration.txt",
    "[standin] rollout step 3: raw reward 0.4000",
]


@pytest.mark.parametrize("cls,line,where", REAL_LINES, ids=[f"{c}:{w}" for c, _, w in REAL_LINES])
def test_each_real_line_names_its_class(cls, line, where):
    p = match_line(line)
    assert p is not None and p.cls == cls, (line, p)
    got = classify(Evidence(exit_code=1, lines=["some earlier output", line, "later output"]))
    # The evidence is the line as a user reads it: Ray's colour codes dropped.
    assert (got.cls, got.evidence, got.source) == (cls, re.sub(r"\x1b\[[0-9;]*m", "", line).strip()[:300], "log")


def test_every_pattern_is_shown_by_a_real_line():
    unshown = [p.regex for p in C.PATTERNS if not any(p.search(line) for _, line, _ in REAL_LINES)]
    assert unshown == []


def test_every_pattern_names_its_program_and_source_file_and_a_known_class():
    for p in C.PATTERNS:
        assert p.cls in C.CLASSES and p.program and p.source, p


@pytest.mark.parametrize("line", HEALTHY_LINES)
def test_healthy_lines_name_no_class(line):
    assert match_line(line) is None


def test_exit_zero_before_the_last_rollout_is_not_finished():
    # Megatron's fatal sys.exit() exits 0: rc alone proves nothing.
    got = classify(Evidence(exit_code=0, lines=["[standin] step 3"], last_rollout=3, final_rollout=99))
    assert got.cls == C.ENDED_EARLY and "rollout 3 of 99" in got.evidence


def test_megatron_fatal_exit_zero_is_a_startup_failure():
    got = classify(Evidence(exit_code=0, lines=["ERROR: Invalid metadata file /c/latest_checkpointed_iteration.txt. "
                                                "Exiting"]))
    assert got.cls == C.STARTUP_FAILURE and not got.restartable


def test_reaching_the_last_rollout_is_finished():
    got = classify(Evidence(exit_code=0, lines=[], last_rollout=99, final_rollout=99))
    assert got.cls == C.FINISHED


def test_a_root_cause_outranks_what_follows_from_it():
    # One rank runs out of memory, the others then time out in their collectives.
    lines = [REAL_LINES[20][1], "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has "
             "a total capacity of 79.11 GiB of which 0 bytes is free.", REAL_LINES[21][1]]
    got = classify(Evidence(exit_code=1, lines=lines))
    assert got.cls == C.CUDA_OOM and got.also == [C.COLLECTIVE_TIMEOUT]


def test_a_user_stop_recorded_by_clawgym_outranks_every_line():
    got = classify(Evidence(exit_code=143, lines=[REAL_LINES[9][1]], stopped_by_user=True, ray_status="STOPPED"))
    assert got.cls == C.STOPPED_BY_USER and not got.restartable


def test_a_monitor_verdict_is_the_class():
    got = classify(Evidence(exit_code=None, verdict_cls=C.HANG, verdict_evidence="no rollout step for 1800 s"))
    assert (got.cls, got.evidence, got.source) == (C.HANG, "no rollout step for 1800 s", "monitor")


@pytest.mark.parametrize("state,cls", [("TIMEOUT", C.TIME_LIMIT), ("PREEMPTED", C.PREEMPTED),
                                       ("NODE_FAIL", C.NODE_LOST), ("CANCELLED by 1000", C.STOPPED_BY_USER),
                                       ("  ", C.ENDED_EARLY)])
def test_slurm_states_name_the_class(state, cls):
    assert classify(Evidence(exit_code=None, slurm_state=state)).cls == cls


def test_a_lost_head_is_node_lost_and_an_unexplained_exit_is_crashed():
    assert classify(Evidence(exit_code=None, head_alive=False)).cls == C.NODE_LOST
    got = classify(Evidence(exit_code=3, lines=["[standin] step 1"]))
    assert (got.cls, got.evidence) == (C.CRASHED, "the trainer exited 3")


def test_an_actor_whose_node_died_is_node_lost_with_the_node_line_as_evidence():
    got = classify(Evidence(exit_code=1, lines=NODE_DIED_TRACEBACK.splitlines()))
    assert got.cls == C.NODE_LOST and got.restartable
    assert got.evidence.startswith("The actor died because its node has died. Node Id: 45c521eb")
    assert "gcs_actor_manager.cc" in got.pattern_source


def test_a_lost_node_outranks_the_engine_deaths_and_collective_timeouts_that_follow_it():
    # The ranks left on the other nodes time out in their collectives; slime kills the engines of the lost node.
    lines = [REAL_LINES[20][1], "Health check failed for rollout engine 3 (ray timeout or error). Killing actor.",
             *NODE_DIED_TRACEBACK.splitlines()]
    got = classify(Evidence(exit_code=1, lines=lines))
    assert got.cls == C.NODE_LOST and set(got.also) == {C.COLLECTIVE_TIMEOUT, C.ENGINE_DEATH}, got


def test_a_node_ray_marked_dead_while_the_attempt_ran_is_node_lost_when_no_line_names_the_end():
    # The driver died of ActorUnavailableError (its actor's node vanished at once) before the GCS named the node.
    unavailable = ("ray.exceptions.ActorUnavailableError: The actor a6375e113f6cc05daf8efe5b02000000 is unavailable: "
                   "The actor is temporarily unavailable: RpcError: RPC error: Socket closed rpc_code: 14. The task may "
                   "or may not have been executed on the actor.")
    dead = ("Ray marked node caad732ab00f72c6ac7b30f3451a31672cd862c08b8026b90f25d55f (192.0.2.2, 8 GPUs) dead at "
            "09:37:37: Unexpected termination: health check failed due to missing too many heartbeats")
    got = classify(Evidence(exit_code=1, lines=[unavailable], ray_status="FAILED", lost_nodes=[dead]))
    assert (got.cls, got.evidence, got.source) == (C.NODE_LOST, dead, "ray")
    assert classify(Evidence(exit_code=1, lines=[unavailable], ray_status="FAILED")).cls == C.CRASHED
    # The collectives of the ranks left time out: the node is the root cause.
    got = classify(Evidence(exit_code=1, lines=[REAL_LINES[20][1]], lost_nodes=[dead]))
    assert (got.cls, got.also) == (C.NODE_LOST, [C.COLLECTIVE_TIMEOUT])
    # A line of a cause a node does not bring about outranks it; so does a person's stop.
    oom = "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB."
    assert classify(Evidence(exit_code=1, lines=[oom], lost_nodes=[dead])).cls == C.CUDA_OOM
    assert classify(Evidence(exit_code=None, ray_status="STOPPED", lost_nodes=[dead])).cls == C.STOPPED_BY_USER
