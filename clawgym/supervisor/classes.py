"""The classes of a run's end and the evidence lines that name them, as data.

Every pattern is the text a program of the run prints, with the program and the source file it
comes from (``/work/shared/reference/run-supervision.md`` and ``slime-facts.md`` cite them; a
pattern whose wording that reference marks unverified says so in ``verified``). The classifier
(:mod:`clawgym.supervisor.classify`) reads these tables and nothing else, and
tests/test_supervisor_classify.py holds every pattern to the real lines (``REAL_LINES``).

An exit status alone proves nothing: several of Megatron's fatal paths call ``sys.exit()`` with no
argument (exit 0), so ``finished`` is "the trainer reached its last rollout", never "rc == 0".
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Dict, Tuple

# Class names: what attempts.json records and the recovery table is keyed by.
FINISHED = "finished"
STOPPED_BY_USER = "stopped-by-user"
STARTUP_FAILURE = "startup-failure"
CUDA_OOM = "cuda-oom"
COLLECTIVE_TIMEOUT = "collective-timeout"
ENGINE_DEATH = "engine-death"
SANDBOX_FAILURE = "sandbox-failure"
NODE_LOST = "node-lost"
TIME_LIMIT = "time-limit"
PREEMPTED = "preempted"
HANG = "hang"  # found by the monitors of "runs that stay healthy" (a Verdict), never by a line
ENDED_EARLY = "ended-early"  # exit 0 before the last rollout with no line naming why (Megatron's sys.exit())
CRASHED = "crashed"  # a non-zero exit with no line naming why
# Found by the health monitors (supervisor/rules.py, supervisor/disk.py: a Verdict), never by a line.
NAN_LOSS = "nan-loss"
LOGPROB_DRIFT = "logprob-drift"
ZERO_REWARD = "zero-reward"
SANDBOX_FAILURES = "sandbox-failures"
DISK_FULL = "disk-full"


@dataclass(frozen=True)
class FailureClass:
    name: str
    # What a user reads: "CUDA out of memory", "NCCL or collective timeout", ...
    title: str
    # Restarting can help: the cause is not in the config or the checkout (a user's stop and a
    # deterministic startup failure would end the same way again).
    restartable: bool


CLASSES: Dict[str, FailureClass] = {c.name: c for c in (
    FailureClass(FINISHED, "finished (the trainer reached its last rollout)", False),
    FailureClass(STOPPED_BY_USER, "stopped by the user", False),
    FailureClass(STARTUP_FAILURE, "deterministic startup failure", False),
    FailureClass(CUDA_OOM, "CUDA out of memory", True),
    FailureClass(COLLECTIVE_TIMEOUT, "NCCL or collective timeout", True),
    FailureClass(ENGINE_DEATH, "rollout engine death", True),
    FailureClass(SANDBOX_FAILURE, "sandbox failure", True),
    FailureClass(NODE_LOST, "node or head lost", True),
    FailureClass(TIME_LIMIT, "time limit", True),
    FailureClass(PREEMPTED, "preemption", True),
    FailureClass(HANG, "hang", True),
    FailureClass(ENDED_EARLY, "ended before its last rollout with exit 0 and no error line", True),
    FailureClass(CRASHED, "crashed with no known error line", True),
    # A rule's action decides first (health.*_action): "stop" stops for good; "end" lets the table restart.
    FailureClass(NAN_LOSS, "NaN or inf loss or reward", True),
    FailureClass(LOGPROB_DRIFT, "trainer and rollout log-probs drifted apart", True),
    FailureClass(ZERO_REWARD, "reward exactly 0 rollout after rollout", True),
    FailureClass(SANDBOX_FAILURES, "too many failed sandboxes", True),
    # A restart would fill the same disk: stopped before a save would, never restarted.
    FailureClass(DISK_FULL, "the save dir's disk cannot hold the next checkpoint", False),
)}


@dataclass(frozen=True)
class Pattern:
    """One evidence line: a regular expression over one line of the run's output."""

    cls: str
    regex: str
    # The program that prints it, and the file of that program it comes from.
    program: str
    source: str
    # False where the reference could not find the wording in a source (from memory of the docs).
    verified: bool = True

    def search(self, line: str) -> bool:
        return re.search(self.regex, line) is not None


#: In the order the classifier tries them on each line: a root cause before what follows from it
#: (an OOM on one rank makes the others time out in their collectives; a dead engine makes the
#: router mark its worker dead).
PATTERNS: Tuple[Pattern, ...] = (
    # ---- deterministic startup failures (the config or the checkout: the same again on a restart)
    Pattern(STARTUP_FAILURE, r"error: unrecognized arguments:", "argparse (Megatron's parse_args)",
            "megatron/training/arguments.py parse_args (ignore_unknown_args=False); slime-facts.md L206"),
    Pattern(STARTUP_FAILURE, r"hf_validate_args failed:", "slime",
            "slime/backends/megatron_utils/arguments.py _hf_validate_args; slime-facts.md L180"),
    Pattern(STARTUP_FAILURE, r"'--save' is required when save_interval is set\.", "slime",
            "slime/utils/arguments.py slime_validate_args; slime-facts.md L230"),
    Pattern(STARTUP_FAILURE, r"ERROR: Invalid metadata file .*\. Exiting", "Megatron-LM (exits 0)",
            "megatron/training/checkpointing.py L283-285 (fork)"),
    Pattern(STARTUP_FAILURE, r"No checkpoint found in load directory or pretrained directory", "Megatron-LM",
            "megatron/training/checkpointing.py L1426 (fork)"),
    Pattern(STARTUP_FAILURE, r"not supported for DistributedOptimizer with sharding type", "Megatron-LM",
            "megatron/training/checkpointing.py L1519-1526 (fork)"),
    Pattern(STARTUP_FAILURE, r"Unable to load rng state from checkpoint", "Megatron-LM (exits 0)",
            "megatron/training/checkpointing.py L1814-1818 (fork)"),
    Pattern(STARTUP_FAILURE, r"^\s*could not load the checkpoint\s*$", "Megatron-LM (exits 0)",
            "megatron/training/checkpointing.py ~L1198-1201 (fork)"),
    Pattern(STARTUP_FAILURE, r">> '--exit-on-missing-checkpoint' set \.\.\. exiting\. <<", "Megatron-LM",
            "megatron/training/checkpointing.py L1141-1150 (fork)"),
    # ---- CUDA out of memory
    Pattern(CUDA_OOM, r"(torch\.(cuda\.)?OutOfMemoryError|CUDA out of memory\. Tried to allocate)", "PyTorch",
            "c10/cuda/CUDACachingAllocator.cpp (torch.OutOfMemoryError); run-supervision.md 1.1"),
    # ---- nodes and the head. Before the engines and the collectives: a lost node kills the engines and
    # ranks on it, and the ranks left elsewhere then fail in their collectives.
    # The driver's ray.get on an actor of the lost node raises ActorDiedError; its cause (the GCS's
    # ActorDiedErrorContext.error_message) is this line, followed by "\tthe actor's node was terminated
    # unexpectedly: health check failed due to missing too many heartbeats" (seen verbatim on
    # tests/fixtures/two_nodes.py's cluster, the second raylet SIGKILLed).
    Pattern(NODE_LOST, r"The actor died because its node has died\. Node Id: [0-9a-f]+", "Ray 2.60 (GCS)",
            "src/ray/gcs/gcs_actor_manager.cc (compiled into ray/core/src/ray/gcs/gcs_server), raised by "
            "python/ray/exceptions.py ActorDiedError"),
    # A task (not an actor) of the lost node: the driver's NodeDiedError (seen verbatim on the same cluster).
    Pattern(NODE_LOST, r"Task failed because the node it was running on is dead or unavailable\.", "Ray 2.60 (core worker)",
            "the core worker's task manager (compiled into ray/_raylet.so), raised by python/ray/exceptions.py "
            "NodeDiedError"),
    # What the GCS tells every driver once its health check gives the node up (seen verbatim on the same
    # cluster, prefixed "(raylet) "); the driver must live long enough to print it.
    Pattern(NODE_LOST, r"has been marked dead because the detector has missed too many heartbeats", "Ray 2.60 (GCS)",
            "src/ray/gcs/gcs_node_manager.cc (compiled into ray/core/src/ray/gcs/gcs_server)"),
    Pattern(NODE_LOST, r"The task's local raylet died\. Check raylet\.out for more information\.", "Ray",
            "python/ray/exceptions.py LocalRayletDiedError"),
    Pattern(NODE_LOST, r"DUE TO NODE FAILURE", "slurmstepd", "Slurm (batch output line)", verified=False),
    # ---- rollout engines (SGLang under slime)
    Pattern(ENGINE_DEATH, r"Health check failed for rollout engine \S+ \(ray timeout or error\)\. Killing actor\.",
            "slime", "slime/utils/health_monitor.py L150-173 (fork)"),
    Pattern(ENGINE_DEATH, r"Server process terminated unexpectedly\.", "slime",
            "slime/backends/sglang_utils/sglang_engine.py L88-104 (fork)"),
    Pattern(ENGINE_DEATH, r"Received sigquit from a child process\. It usually means the child failed\.", "SGLang",
            "python/sglang/srt/entrypoints/engine.py (sigquit handler)"),
    Pattern(ENGINE_DEATH, r"Scheduler hit an exception", "SGLang",
            "python/sglang/srt/managers/scheduler.py"),
    Pattern(ENGINE_DEATH, r"\[slime-router\] Worker \S+ failed \d+ consecutive health checks\. Marking as DEAD\.",
            "slime", "slime/router/router.py L111 (fork)"),
    Pattern(ENGINE_DEATH, r"TimeoutError: Timeout while flushing cache\.", "slime",
            "slime/backends/sglang_utils/sglang_engine.py L304 (fork)"),
    # ---- sandboxes (the agents' gateways)
    Pattern(SANDBOX_FAILURE, r"OpenClaw chat endpoint not ready for \S+", "ClawGym-RL rollout",
            "RL/clawgym_rl_rollout.py L628 (fork)"),
    Pattern(SANDBOX_FAILURE, r"TimeoutError: Port \d+ still occupied after", "ClawGym-RL rollout",
            "RL/clawgym_rl_rollout.py L246 (fork)"),
    Pattern(SANDBOX_FAILURE, r"Cannot connect to the Docker daemon at", "docker CLI",
            "docker/cli (daemon unreachable); run-supervision.md 1.6", verified=False),
    # ---- NCCL and collectives
    Pattern(COLLECTIVE_TIMEOUT, r"Watchdog caught collective operation timeout", "PyTorch (NCCL watchdog)",
            "torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp"),
    Pattern(COLLECTIVE_TIMEOUT, r"Some NCCL operations have failed or timed out\.", "PyTorch (NCCL watchdog)",
            "torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp WorkNCCL::handleException"),
    Pattern(COLLECTIVE_TIMEOUT, r"(Process group watchdog thread|NCCL watchdog thread) terminated with exception",
            "PyTorch (NCCL watchdog)", "torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp"),
    Pattern(COLLECTIVE_TIMEOUT, r"NCCL error: (remote process exited or there was a network error|unhandled system error)",
            "SGLang pynccl / PyTorch", "sglang pynccl_wrapper.py; torch ProcessGroupNCCL.cpp"),
    # ---- scheduler's end of the allocation
    Pattern(TIME_LIMIT, r"DUE TO TIME LIMIT", "slurmstepd", "Slurm (batch output line); run-supervision.md 1.7"),
    Pattern(PREEMPTED, r"DUE TO PREEMPTION", "slurmstepd", "Slurm (batch output line)", verified=False),
    # A requeue by SLURM or an admin (scontrol requeue): the run goes on in the job's next allocation.
    Pattern(PREEMPTED, r"CANCELLED AT \S+ DUE TO JOB REQUEUE", "slurmstepd",
            "Slurm 22.05.8 batch output on `scontrol requeue` (seen on tests/fixtures/slurm_cluster.py's cluster)"),
)

#: What a driver prints when an actor it calls cannot be reached and the GCS has not (yet) said why
#: (Ray 2.60's ActorUnavailableError, python/ray/exceptions.py; the text after "unavailable: " from the core
#: worker, ray/_raylet.so). Seen verbatim when the node of the actor died at once: the driver dies of it
#: before the GCS's health check gives the node up, so it names no class by itself; the supervisor then
#: asks Ray's node table again (supervisor/ray_runner.py).
ACTOR_UNREACHABLE = "The actor is temporarily unavailable: RpcError"

#: Classes a lost node brings about on the nodes left (their collectives with its ranks fail, the router
#: drops its engines): when Ray marked a node dead while the attempt ran, the node is the class.
AFTER_A_LOST_NODE = (COLLECTIVE_TIMEOUT, ENGINE_DEATH)

#: SLURM job states (sacct State) that name the class by themselves (run-supervision.md 1.7).
SLURM_STATES: Dict[str, str] = {
    "TIMEOUT": TIME_LIMIT,
    "PREEMPTED": PREEMPTED,
    "NODE_FAIL": NODE_LOST,
}

#: Ray JobStatus values (ray.job_submission.JobStatus): STOPPED is a stop through the Jobs API.
RAY_STOPPED = "STOPPED"
RAY_TERMINAL = ("STOPPED", "SUCCEEDED", "FAILED")
