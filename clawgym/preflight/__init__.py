"""Preflight: the sandbox, checkpoint, machine and checkout checked for real before launch.

``run_preflight`` runs every check whose inputs are available and reports all
failures together (:class:`PreflightError`); a check that needs another one which
failed is listed as not run, saying which (no image check without an engine). A launch
calls it, then :func:`cleanup_leftovers`, before it starts anything. ``python train.py preflight_only=true`` and ``clawgym preflight`` print
the checklist and stop.

Checks, by the name ``skip_checks`` takes:

=========== ======================================================================
docker      sandbox=docker: the Docker engine answers (docker SDK, DOCKER_HOST honoured)
image       sandbox=docker: ``sandbox.image`` exists on the engine (counts leftovers)
rootfs      sandbox=chroot: ``sandbox.rootfs`` is an OpenClaw rootfs (gateway, node, dev nodes)
root        sandbox=chroot: ``unshare --user --map-root-user -- chroot`` into it works
checkpoint  the HF checkpoint's config.json agrees with the model group
save_dir    a fresh run does not write over an earlier run's checkpoints in paths.save
gpus        local head: this node shows the GPUs the run holds
ports       local head: API server, Ray GCS and dashboard ports are free
cluster     existing cluster: its dashboard answers and it declares the GPUs the run holds
checkout    the trainer script and Megatron-LM are where the plan points (a dry run: paths.root is a folder)
tasks       sandbox=docker/chroot: the train/eval task folders hold tasks (counts reported)
prompts     --prompt-data / --eval-prompt-data are JSONL with the --input-key/--label-key (first lines)
functions   every custom function path in the trainer's flags exists on the job's PYTHONPATH
disk        the save dir's filesystem holds checkpoint.keep_last + 1 checkpoints (sized by the memory plan)
preemption  cluster=slurm, a warning only: save_interval x the modelled step time redoes no more than 1 h of the
            allocation (or 10 % of slurm.time) after a preemption or time limit; else names a save_interval that does
memory      the per-GPU memory plan (clawgym/memory/) fits the GPU (memory.gpu, else this node's)
wandb       W&B on: a key is set ($WANDB_KEY/$WANDB_API_KEY, or wandb login's netrc on a local head)
leftovers   sandbox=docker, after the checks: remove ended launches' containers (as sandbox.cleanup_leftovers=false)
=========== ======================================================================

Importing this package imports no docker SDK; the chroot and none backends never do.
"""

from __future__ import annotations

import sys
from typing import Any, Callable, List, Mapping, Optional

from clawgym.preflight.checkout import check_checkout, check_functions, check_tasks
from clawgym.preflight.checkpoint import check_checkpoint, check_save_dir
from clawgym.preflight.core import (FAILED, NOT_APPLICABLE, NOT_RUN, OK, SKIPPED, WARNED, Check, CheckFailed,
                                    CheckResult, CheckWarning, Context, NotApplicable, PreflightError, Report,
                                    failure_line, plain_config)
from clawgym.preflight.disk import check_disk
from clawgym.preflight.data import check_prompt_data
from clawgym.preflight.machine import check_cluster, check_gpus, check_ports
from clawgym.preflight.memory import check_memory
from clawgym.preflight.preemption import check_preemption
from clawgym.preflight.wandb import check_wandb
from clawgym.preflight.sandbox import check_docker, check_image, check_root, check_rootfs
from clawgym.preflight.sandbox import cleanup_leftovers as _cleanup_leftovers

__all__ = ["CHECKS", "CheckResult", "PreflightError", "Report", "check_names", "cleanup_leftovers",
           "preflight_only", "run_preflight"]


def _docker(c: Mapping[str, Any]) -> bool:
    return c["sandbox"]["backend"] == "docker"


def _chroot(c: Mapping[str, Any]) -> bool:
    return c["sandbox"]["backend"] == "chroot"


def _openclaw(c: Mapping[str, Any]) -> bool:
    """The rollout drives OpenClaw agents (any sandbox but none)."""
    return c["sandbox"]["backend"] != "none"


#: Every check, in the order they run.
CHECKS: List[Check] = [
    Check("docker", "Docker engine", check_docker, _docker),
    Check("image", "gateway image", check_image, _docker, needs=("docker",)),
    Check("rootfs", "OpenClaw rootfs", check_rootfs, _chroot),
    Check("root", "chroot privileges", check_root, _chroot, needs=("rootfs",)),
    Check("checkpoint", "HF checkpoint", check_checkpoint),
    Check("save_dir", "save dir", check_save_dir),
    Check("gpus", "GPUs", check_gpus),
    Check("cluster", "Ray cluster", check_cluster),
    Check("ports", "ports", check_ports),
    Check("checkout", "trainer checkout", check_checkout),
    Check("tasks", "task folders", check_tasks, _openclaw),
    Check("prompts", "prompt data", check_prompt_data),
    Check("functions", "custom hooks", check_functions),
    Check("memory", "memory plan", check_memory),
    Check("disk", "disk for checkpoints", check_disk),
    Check("preemption", "work lost to a preemption", check_preemption, needs=("memory",)),
    Check("wandb", "W&B key", check_wandb),
]


#: The leftover-container cleanup that runs after the checks (clawgym.preflight.sandbox.cleanup_leftovers):
#: its refusals are named "leftovers", so skip_checks takes that name too (as sandbox.cleanup_leftovers=false).
CLEANUP = "leftovers"


def check_names() -> List[str]:
    return [check.name for check in CHECKS] + [CLEANUP]


def run_preflight(cfg: Any, plan: Any, *, local_head: bool,
                  echo: Optional[Callable[[str], None]] = print) -> Report:
    """Run every check that applies to ``cfg``, in order, and report every failure.

    ``local_head`` is true when clawgym will start the Ray head on this machine (only
    then are GPUs and ports checked). Checks named in ``cfg.skip_checks`` are skipped;
    a check whose ``needs`` failed is not run (its line says which). Each checklist
    line is passed to ``echo`` (default: printed) as it completes; ``echo=None`` only
    collects them. Returns the :class:`Report`; raises :class:`PreflightError` (whose
    ``report()`` is the whole checklist) when any check failed. Nothing is started or
    written here.
    """
    c = plain_config(cfg)
    say = echo or (lambda _line: None)
    report = Report(heading=f"preflight of {c['run_name']} (sandbox={c['sandbox']['backend']})")
    say(f"{report.heading}:")
    skip = [str(s) for s in c.get("skip_checks") or []]
    unknown = [s for s in skip if s not in check_names()]
    if unknown:
        result = CheckResult("skip_checks", "skip list", FAILED,
                             f"skip_checks names unknown check(s): {', '.join(unknown)}",
                             f"use names from: {', '.join(check_names())}")
        report.results.append(result)
        say(result.format())
        raise PreflightError(report)
    ctx = Context(c=c, plan=plan, local_head=local_head)
    status: dict = {}
    try:
        for check in CHECKS:
            if not check.applies(c):
                continue
            blocked = [n for n in check.needs if status.get(n) in (FAILED, NOT_RUN)]
            if check.name in skip:
                result = CheckResult(check.name, check.title, SKIPPED, "skip_checks")
            elif blocked:
                result = CheckResult(check.name, check.title, NOT_RUN,
                                     f"needs {', '.join(blocked)}, which did not pass")
            else:
                try:
                    result = CheckResult(check.name, check.title, OK, check.fn(ctx))
                except NotApplicable as exc:
                    result = CheckResult(check.name, check.title, NOT_APPLICABLE, str(exc))
                except CheckFailed as exc:
                    result = CheckResult(check.name, check.title, FAILED, exc.problem, exc.fix)
                except CheckWarning as exc:
                    result = CheckResult(check.name, check.title, WARNED, exc.problem, exc.fix)
                except Exception as exc:  # e.g. an unreadable folder: still a checklist line, not a traceback
                    result = CheckResult(check.name, check.title, FAILED,
                                         f"the check could not complete: {type(exc).__name__}: {exc}",
                                         f"fix the cause, or skip the check with skip_checks=[{check.name}]")
            status[check.name] = result.status
            report.results.append(result)
            say(result.format())
    finally:
        ctx.close()
    if not report.ok:
        raise PreflightError(report)
    return report


def cleanup_leftovers(cfg: Any, *, echo: Optional[Callable[[str], None]] = print) -> List[str]:
    """Remove leftover gateway containers (docker backend); see :func:`clawgym.preflight.sandbox.cleanup_leftovers`."""
    return _cleanup_leftovers(cfg, echo=echo)


def preflight_only(cfg: Any, plan: Any, *, local_head: Optional[bool] = None) -> int:
    """``preflight_only=true``: print the checklist, exit 2 on failure (refused before anything started,
    as a preflight failure during a launch: clawgym/common/exit_codes.py), return 0 otherwise.

    The head counts as local unless ``ray.address`` is configured (what a launch would
    do) or ``local_head`` says otherwise. Nothing is removed: leftovers are only counted.
    """
    c = plain_config(cfg)
    if local_head is None:
        local_head = not c["ray"]["address"]
    try:
        report = run_preflight(c, plan, local_head=local_head)
    except PreflightError as err:
        sys.stdout.flush()
        print(failure_line(err), file=sys.stderr)
        from clawgym.common.exit_codes import REFUSED

        sys.exit(REFUSED)
    done = [r for r in report.results if r.status == OK]
    skipped = [r.name for r in report.results if r.status in (SKIPPED, NOT_APPLICABLE, NOT_RUN)]
    print(f"preflight passed: {len(done)} checks ok" + (f", not checked: {', '.join(skipped)}" if skipped else ""))
    return 0
