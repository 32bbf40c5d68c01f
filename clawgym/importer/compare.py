"""Two launches (the script's, the plan's) compared by the trainer parser's semantics."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Dict, List, Optional, Sequence, Tuple

from clawgym.importer import parity
from clawgym.importer.capture import Capture, Submit
from clawgym.importer.parity import MISSING_VALUE, Difference
from clawgym.common import secrets


#: Variables clawgym gives every job that a script may lack; they change how a failure is
#: reported or how the head is tuned, not what is trained, and no key removes them.
ADDED_ENV = {
    "PYTHONFAULTHANDLER": "clawgym prints a traceback on a hard crash",
    "PYTHONUNBUFFERED": "clawgym streams the job's output unbuffered",
    "no_proxy": "clawgym reaches its head without a proxy",
    "MASTER_ADDR": "clawgym names the head's address to the job",
    "RAY_DASHBOARD_ENABLE_PROFILING": "clawgym's heads serve the stacks of a hung job (clawgym jobs stack)",
    "RAY_health_check_failure_threshold": "Ray head tuning (ray.health_check_failure_threshold)",
    "RAY_health_check_period_ms": "Ray head tuning (ray.health_check_period_ms)",
    "RAY_health_check_timeout_ms": "Ray head tuning (ray.health_check_timeout_ms)",
    "RAY_num_heartbeats_timeout": "Ray head tuning (ray.num_heartbeats_timeout)",
}

#: W&B settings clawgym gives a job with W&B on (run tags, notes, its config file): metadata of
#: the W&B run, not of the training.
ADDED_WANDB_ENV = {
    "WANDB_TAGS": "clawgym's W&B run metadata",
    "WANDB_NOTES": "clawgym's W&B run metadata",
    "WANDB_SWEEP_PARAM_PATH": "clawgym's W&B run metadata",
    # clawgym/trainer/wandb_env.py run_id: every attempt and resume of a save dir logs to one W&B run.
    "WANDB_RUN_ID": "one W&B run per save dir: every attempt and `clawgym resume` of the run logs to it",
    "WANDB_RESUME": "one W&B run per save dir: every attempt and `clawgym resume` of the run logs to it",
}

#: Wildcard bind addresses: clawgym binds loopback unless asked (sglang.api_host).
WILDCARDS = ("0.0.0.0", "::", "")


@dataclass
class Launch:
    """One side of the comparison: trainer script, parsed flags, job env, working dir, head GPUs."""

    trainer_script: str
    parsed: parity.Parsed
    env: Dict[str, str]
    working_dir: str
    head_gpus: Optional[str]
    # Whether this launch starts its own Ray head (False: it submits to a cluster that runs).
    starts_head: bool = True


def script_launch(capture: Capture, submit: Submit, parser: Any, reg: Any,
                  notes: List[str]) -> Launch:
    _, _, trainer_script, trainer_argv = submit.trainer_entry  # type: ignore[misc]
    argv, removed = parity.strip_secrets(trainer_argv)
    for flag in removed:
        notes.append(f"{flag}: secrets are read from the environment at launch, never written "
                     "(W&B: $WANDB_KEY or $WANDB_API_KEY)")
    env = {k: v for k, v in capture.job_env(submit).items() if k not in parity.SHELL_ENV}
    for var in parity.SECRET_ENV:
        if var in env:
            env.pop(var)
            notes.append(f"{var}: a secret; the job gets it from the launcher's environment at launch")
    head = capture.head_options()
    gpus = head.get("--num-gpus")
    return Launch(trainer_script, parity.parse_argv(parser, reg, argv), env, submit.working_dir,
                  str(gpus) if gpus is not None and gpus is not True else None)


def plan_launch(plan: Any, parser: Any, reg: Any) -> Launch:
    env = {**(plan.ray_start_env if plan.ray_start is not None else {}), **plan.runtime_env["env_vars"]}
    gpus = None
    if plan.ray_start is not None and "--num-gpus" in plan.ray_start:
        gpus = plan.ray_start[plan.ray_start.index("--num-gpus") + 1]
    return Launch(plan.entrypoint[1], parity.parse_argv(parser, reg, plan.entrypoint[2:]), env,
                  plan.working_dir, gpus, starts_head=plan.ray_start is not None)


def compare(script: Launch, ours: Launch, reg: Any, secret_targets: Sequence[str] = ()
            ) -> Tuple[List[Difference], List[Difference]]:
    """(differences, deliberate differences) between the two launches."""
    diffs: List[Difference] = []
    deliberate: List[Difference] = []
    if script.trainer_script != ours.trainer_script:
        diffs.append(Difference("trainer script", "entrypoint", script.trainer_script, ours.trainer_script,
                                "gpu_layout.trainer_script"))
    if ours.parsed.error:
        diffs.append(Difference("parse", "experiment argv", "", ours.parsed.error))
    events = ours.parsed.values.get("use_tensorboard") is True and bool(ours.env.get("TENSORBOARD_DIR"))
    for d in parity.compare_values(script.parsed.values, ours.parsed.values, reg, script.parsed.written):
        if events and d.name.endswith("(use_tensorboard)") and d.script in (False, None, MISSING_VALUE):
            # Kept on (metrics.tensorboard): without events clawgym runs / clawgym report show no curves.
            d.note = ("clawgym keeps TensorBoard events in the run's save dir so clawgym runs / report show its "
                      "curves (metrics.tensorboard=false turns them off)")
            deliberate.append(d)
        else:
            diffs.append(d)
    for d in parity.compare_env(script.env, ours.env):
        if d.name.lower() == "no_proxy" and isinstance(d.script, str) and isinstance(d.experiment, str) and \
                set(d.script.split(",")) == set(d.experiment.split(",")):
            continue  # the same hosts (clawgym names each once: 127.0.0.1,127.0.0.1 is 127.0.0.1)
        if d.script is MISSING_VALUE and d.name in ADDED_ENV:
            d.note = ADDED_ENV[d.name]
            deliberate.append(d)
        elif d.script is MISSING_VALUE and d.name in ADDED_WANDB_ENV:
            d.note = ADDED_WANDB_ENV[d.name]
            deliberate.append(d)
        elif d.name == "TENSORBOARD_DIR" and d.script is MISSING_VALUE and events:
            # Both write events (--use-tensorboard); clawgym names the folder: the run's save dir.
            d.note = "clawgym keeps the TensorBoard events in the run's save dir (metrics.tensorboard)"
            deliberate.append(d)
        elif d.name == "HOST" and d.script in WILDCARDS and d.experiment in ("127.0.0.1", "localhost", "::1"):
            d.note = "clawgym binds loopback unless asked: sglang.api_host=0.0.0.0"
            deliberate.append(d)
        elif d.name in secret_targets and d.script is MISSING_VALUE:
            continue
        elif secrets.is_secret_name(d.name) and d.script is not MISSING_VALUE:
            # A secret the script sets for the job: never written into the experiment (extra_env is stored
            # in plans, snapshots and job metadata; validation refuses it there). The launch reads it from
            # the environment, which the head clawgym starts (and the job) inherit.
            d.script, d.experiment = secrets.MASK, (secrets.MASK if d.experiment is not MISSING_VALUE
                                                    else d.experiment)
            d.note = f"a secret, never stored: export {d.name} at launch"
            deliberate.append(d)
        else:
            diffs.append(d)
    if parity.norm_path(script.working_dir) != parity.norm_path(ours.working_dir):
        diffs.append(Difference("working dir", "job", script.working_dir, ours.working_dir, "paths.slime"))
    if script.head_gpus is not None and not ours.starts_head:
        # The experiment runs on a cluster that already runs (a script written for several nodes): the
        # head the script started is that cluster's head, whose GPUs are declared by whoever starts it.
        deliberate.append(Difference("GPUs", "ray start --num-gpus", script.head_gpus, None,
                                     "the cluster's head is started by whoever runs it (cluster=existing)"))
    elif script.head_gpus is not None and script.head_gpus != ours.head_gpus:
        diffs.append(Difference("GPUs", "ray start --num-gpus", script.head_gpus, ours.head_gpus, "ray.num_gpus"))
    return diffs, deliberate
