"""What a single run (clawgym.app) and a sweep (clawgym.sweep.core) do alike before the pipeline.

The plans a sweep validated and built up front (its jobs' task functions reuse them), the memory
plan attached to a plan, the report of a check that raised, and the output dir this invocation
created (removed again when the command is refused before anything started).
"""

from __future__ import annotations

import contextlib
import sys
import time
from pathlib import Path
from typing import Any, Dict, Iterator, List, Optional, Sequence

from clawgym.config.compose import to_plain
from clawgym.plan.build import LaunchPlan
from clawgym.common.secrets import redact

PLAN_FILE = "launch_plan.json"
#: Files Hydra writes into an output dir by itself (and clawgym's plan): what a refused
#: command may remove from an output dir it created.
_HYDRA_FILES = {".hydra/config.yaml", ".hydra/hydra.yaml", ".hydra/overrides.yaml", "multirun.yaml", PLAN_FILE}

# The output dir (hydra.run.dir / hydra.sweep.dir) this invocation created, if it did.
_CREATED_OUTPUT_DIR: Optional[Path] = None
# The folders above it that it created too (multirun/<date>/<time>/...), innermost first.
_CREATED_PARENTS: List[Path] = []


def timestamp() -> str:
    return time.strftime("%Y%m%d_%H%M%S")


def record_created_output_dir(path: Path, parents: Sequence[Path] = ()) -> None:
    """This invocation created ``path`` and the folders ``parents`` above it, innermost first
    (see :func:`discard_own_output_dir`)."""
    global _CREATED_OUTPUT_DIR, _CREATED_PARENTS
    _CREATED_OUTPUT_DIR = path
    _CREATED_PARENTS = list(parents)


def missing_parents(path: Path) -> List[Path]:
    """The folders above ``path`` that do not exist yet, innermost first (what ``mkdir(parents=True)``
    will create beside ``path``)."""
    out: List[Path] = []
    for parent in path.absolute().parents:
        if parent.exists():
            break
        out.append(parent)
    return out


#: Plans a sweep validated and built up front, by Hydra job number (see ``prepared_plans``).
_PREPARED: Dict[int, LaunchPlan] = {}


@contextlib.contextmanager
def prepared_plans(plans: Dict[int, LaunchPlan]) -> Iterator[None]:
    """While a sweep runs its jobs: the task function reuses the plan the sweep validated and
    built for that job number instead of resolving, validating and planning it again."""
    _PREPARED.update(plans)
    try:
        yield
    finally:
        for num in plans:
            _PREPARED.pop(num, None)


def prepared_plan(cfg: Any) -> Optional[LaunchPlan]:
    """The plan a sweep prepared for the Hydra job now running, if it did (and it is this run's)."""
    if not _PREPARED:
        return None
    from hydra.core.hydra_config import HydraConfig

    if not HydraConfig.initialized():
        return None
    plan = _PREPARED.get(int(HydraConfig.get().job.num))
    return plan if plan is not None and plan.run_name == str(cfg.run_name) else None


def failed_check(exc: BaseException) -> str:
    """The report of a check that raised: a refusal, never a traceback (values masked)."""
    return redact(f"clawgym: the configuration could not be checked ({type(exc).__name__}: {str(exc)[:300]})\n"
                  "  rule: a config clawgym cannot check is not launched, and nothing is written\n"
                  "  fix:  fix the value named above; if it looks right, report this as a clawgym bug")


def discard_own_output_dir() -> Optional[Path]:
    """Remove the output dir this invocation created, when it holds only what Hydra and a
    refused command wrote (``.hydra/*.yaml``, the job log, ``multirun.yaml``); returns it.

    Called when a command is refused before anything started, so a refused command
    leaves no output dir of its own. A dir that existed before, or that holds any other
    file, is left alone.
    """
    global _CREATED_OUTPUT_DIR
    target = _CREATED_OUTPUT_DIR
    if target is None or not target.is_dir():
        return None
    import logging
    import shutil

    files = [p for p in target.rglob("*") if not p.is_dir()]
    ours = all(str(p.relative_to(target)).split("/", 1)[-1] in _HYDRA_FILES
               or str(p.relative_to(target)) in _HYDRA_FILES or p.suffix == ".log" for p in files)
    if not ours:
        return None
    # Hydra's job log handler holds <dir>/<job>.log open: close it before removing the dir.
    for handler in list(logging.getLogger().handlers):
        if isinstance(handler, logging.FileHandler) and Path(handler.baseFilename).is_relative_to(target):
            handler.close()
            logging.getLogger().removeHandler(handler)
    shutil.rmtree(target, ignore_errors=True)
    _CREATED_OUTPUT_DIR = None
    # The folders made above it (multirun/<date>/<time>) go too, while they stay empty: another command
    # that wrote into one meanwhile keeps it.
    global _CREATED_PARENTS
    for parent in _CREATED_PARENTS:
        try:
            parent.rmdir()
        except OSError:
            break
    _CREATED_PARENTS = []
    return target


def attach_memory(plan: LaunchPlan, cfg: Any, effective: Any = None) -> LaunchPlan:
    """The run's per-GPU memory plan into ``plan.memory`` (launch_plan.json["memory"]); the
    preflight's ``memory`` check refuses a launch whose plan does not fit."""
    if plan.memory is not None:
        return plan
    from clawgym.search.advice import attach

    try:
        attach(plan, cfg if isinstance(cfg, dict) else to_plain(cfg), effective)
    except (KeyError, TypeError, ValueError, ZeroDivisionError) as exc:
        # A config the estimator cannot model (validation passed it) is a gap, not a launch blocker.
        print(f"clawgym: no memory plan for this config ({type(exc).__name__}: {exc})", file=sys.stderr)
    return plan


def memory_banner(plan: LaunchPlan, cfg: Any) -> Optional[str]:
    """The banner of a dry run whose memory plan does not fit (None when it fits, has no plan, or the
    ``memory`` check is skipped): a launch of it would be refused by the preflight check ``memory``."""
    mem = plan.memory
    if not mem or mem.get("fits", True):
        return None
    try:
        skipped = "memory" in [str(x) for x in (cfg.get("skip_checks") or [])]
    except AttributeError:
        skipped = False
    if skipped:
        return None
    advice = mem.get("advice") or []
    bar = "=" * 78
    return "\n".join([bar, f"clawgym: DOES NOT FIT: the memory plan of {plan.run_name} does not fit "
                            f"{mem.get('gpu')} ({mem.get('gpu_memory_gib')} GiB per GPU)",
                       *[f"  problem: {p}" for p in mem.get("problems") or []],
                       *[f"  advice:  {a}" for a in advice[:3]],
                       "  a launch would be refused by the preflight check memory; this dry run exits 2 "
                       "(skip_checks=[memory] launches anyway)", bar])


def format_plan_brief(plan: LaunchPlan) -> str:
    """A sweep job's dry run in a few lines: run, save dir, GPUs, trainer, memory verdict."""
    mem = plan.memory or {}
    ph = mem.get("phases") or {}
    verdict = ("fits" if mem.get("fits") else "DOES NOT FIT: " + "; ".join(mem.get("problems") or [])) if mem else \
        "no memory plan"
    return "\n".join([f"run:            {plan.run_name}",
                      f"save dir:       {plan.save_dir}",
                      f"GPUs held:      {plan.gpus_required}",
                      f"trainer:        {' '.join(plan.entrypoint[:2])} ({len(plan.entrypoint) - 2} arguments)",
                      f"memory:         GPU peak {ph.get('peak_gib', 0):.1f} of {mem.get('gpu_memory_gib', 0):.1f} GiB "
                      f"({mem.get('gpu', '?')}): {verdict}" if mem else f"memory:         {verdict}"])


def apply_layout(cfg: Any, choice: Optional[dict]) -> None:
    """Put the chosen layout into the composed config too, so the snapshot and the dry-run artefacts
    show the layout that runs (the resolved config already has it)."""
    if not choice:
        return
    from omegaconf import OmegaConf, open_dict, read_write

    with read_write(cfg), open_dict(cfg):
        for key, value in choice["settings"].items():
            if value is None and key.startswith("args."):
                if OmegaConf.select(cfg, key) is not None:
                    del cfg.args[key.split(".", 1)[1]]
                continue
            OmegaConf.update(cfg, key, value, force_add=True)
        OmegaConf.update(cfg, "gpu_layout.auto", False)
