"""The task function behind ``train.py``: validate, plan, then dry-run or launch."""

from __future__ import annotations

import contextlib
import os
import sys
import time
from pathlib import Path
from typing import Any, Dict, Iterator, Optional

from omegaconf import DictConfig
from omegaconf.errors import OmegaConfBaseException

from clawgym.config import to_plain
from clawgym.plan import LaunchPlan, build_plan_from_dict, format_plan
from clawgym.registry import RegistryError
from clawgym.validate import ConfigError, validate

PLAN_FILE = "launch_plan.json"


def timestamp() -> str:
    return time.strftime("%Y%m%d_%H%M%S")


def output_dir() -> Optional[Path]:
    """The Hydra output dir of the current job, when running under Hydra."""
    from hydra.core.hydra_config import HydraConfig

    if HydraConfig.initialized():
        return Path(HydraConfig.get().runtime.output_dir)
    return None


def write_plan(plan: LaunchPlan, directory: Path) -> Path:
    """Write launch_plan.json atomically (temp file + rename)."""
    directory.mkdir(parents=True, exist_ok=True)
    target = directory / PLAN_FILE
    tmp = directory / f".{PLAN_FILE}.tmp-{os.getpid()}"
    tmp.write_text(plan.to_json())
    os.replace(tmp, target)
    return target


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


def _prepared(cfg: DictConfig) -> Optional[LaunchPlan]:
    if not _PREPARED:
        return None
    from hydra.core.hydra_config import HydraConfig

    if not HydraConfig.initialized():
        return None
    plan = _PREPARED.get(int(HydraConfig.get().job.num))
    return plan if plan is not None and plan.run_name == str(cfg.run_name) else None


def fail(err: ConfigError) -> None:
    """Report a config error without a traceback and exit non-zero."""
    print(err.report(), file=sys.stderr)
    sys.exit(2)


def run(cfg: DictConfig) -> Any:
    plan = _prepared(cfg)
    if plan is None:
        # Resolve once for validation and plan (a config that does not resolve is reported by validate).
        try:
            resolved: Any = to_plain(cfg)
        except OmegaConfBaseException:
            resolved = cfg
        try:
            validate(resolved)
        except ConfigError as err:
            fail(err)
        except RegistryError as err:
            # A missing or broken flag registry is a broken install: say so without a traceback.
            print(f"clawgym: {err}", file=sys.stderr)
            sys.exit(2)
        plan = build_plan_from_dict(resolved, environ=os.environ, timestamp=timestamp())
    from clawgym.backends import backend_name

    backend = backend_name(cfg)
    if cfg.dry_run:
        print(format_plan(plan))
        out = output_dir()
        if out is not None:
            print(f"\nplan written to {write_plan(plan, out)}")
        if backend in ("slurm", "kuberay"):
            dry_run_backend(backend, plan, to_plain(cfg), out)
        return plan.to_dict()
    if cfg.preflight_only:
        from clawgym.preflight import preflight_only

        return preflight_only(cfg, plan)
    if backend == "kuberay":
        # A manifest for KubeRay to run: no job is submitted or followed from here.
        rc = launch_backend(backend, cfg, plan)
        if rc:
            sys.exit(rc)
        return 0
    from clawgym.pipeline import launch_single  # heavy imports (ray) only for real launches

    return launch_single(cfg, plan)


def dry_run_backend(backend: str, plan: LaunchPlan, resolved: Any, out: Optional[Path]) -> None:
    """Print (and write next to launch_plan.json) the SLURM batch script or the RayJob manifest."""
    where = out if out is not None else Path.cwd()
    if backend == "slurm":
        from clawgym.backends.slurm import SCRIPT_FILE, batch_script, interpreter

        text = batch_script(plan, resolved, plan_file=str(where / PLAN_FILE), output=str(where / "slurm-%j.out"),
                            python=interpreter(resolved))
        name = SCRIPT_FILE
    else:
        from clawgym.backends.kuberay import MANIFEST_FILE, manifest_yaml

        text = manifest_yaml(plan, resolved)
        name = MANIFEST_FILE
    print(f"\n{name}:\n{text}")
    if out is not None:
        from clawgym.snapshot import atomic_write_text

        atomic_write_text(out / name, text)
        print(f"{name} written to {out / name}")


def launch_backend(backend: str, cfg: DictConfig, plan: LaunchPlan) -> int:
    """``cluster=kuberay`` without dry run: write the RayJob and apply it when asked; returns the exit status."""
    try:
        from clawgym.backends import kuberay

        return kuberay.launch(cfg, plan, output_dir())
    except KeyboardInterrupt:
        print("\n[clawgym] interrupted before submission; nothing was submitted", file=sys.stderr, flush=True)
        return 130
