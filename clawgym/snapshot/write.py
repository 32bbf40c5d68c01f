"""Writing a launch's snapshot: its files (configs, overrides, choices, plan, meta), refused when
a secret value would be written, into a temp dir renamed into place; the W&B config file and the
files the job reads (``plan.files``, the services supervisor) with it."""

from __future__ import annotations

import getpass
import json
import os
import re
import shutil
import socket
import sys
import time
from pathlib import Path
from typing import Any, Dict, List, Mapping, Optional, Sequence

import yaml

from clawgym.common.fsutil import atomic_write_text, write_synced
from clawgym.snapshot.checkpoints import checkpoint_baseline
from clawgym.snapshot.layout import (CHOICES_FILE, CONFIG_FILE, FORMAT_VERSION, MANIFEST_FILE, META_FILE,
                                     OVERRIDES_FILE, PLAN_FILE, RESOLVED_FILE, SNAPSHOTS_RELPATH, SnapshotError)
from clawgym.snapshot.manifest import manifest_text
from clawgym.snapshot.records import LaunchRecord, checkout_git_info, current_record, git_info, package_versions


# ---------------------------------------------------------------- secrets

def secret_values(plan: Any, environ: Mapping[str, str] = os.environ,
                  extra_names: Sequence[str] = ()) -> Dict[str, str]:
    """Variable name -> value of every secret variable set in ``environ``."""
    from clawgym.common.secrets import env_secrets

    names = set(extra_names)
    for sources in (getattr(plan, "secret_env", None) or {}).values():
        names.update(sources)
    return env_secrets(environ, names)


def find_secrets(text: str, secrets: Mapping[str, str]) -> List[str]:
    """Names of the secrets whose value occurs in ``text``."""
    from clawgym.common.secrets import find_in

    return find_in(text, secrets)


# ---------------------------------------------------------------- writing

def _dump_yaml(data: Any) -> str:
    return yaml.safe_dump(data, sort_keys=False, default_flow_style=False, allow_unicode=True)


def _snapshot_base(plan: Any) -> Path:
    """Directory the snapshots of a plan go to."""
    if plan.save_dir:
        return Path(plan.save_dir) / SNAPSHOTS_RELPATH
    # paths.save=null: nothing to checkpoint, but the launch is still recorded.
    from hydra.core.hydra_config import HydraConfig

    if HydraConfig.initialized():
        return Path(HydraConfig.get().runtime.output_dir) / "clawgym_snapshots"
    return Path.cwd() / "clawgym_snapshots"


def snapshot_files(cfg: Any, plan: Any, record: LaunchRecord, *, snapshot_id: str,
                   now: Optional[float] = None) -> Dict[str, str]:
    """File name -> content of a snapshot (also used by tests to know what is written)."""
    from omegaconf import DictConfig, OmegaConf

    from clawgym.config.compose import to_plain
    from clawgym.trainer.wandb_env import CONFIG_FILE_ENV

    if isinstance(cfg, DictConfig):
        unresolved, resolved = to_plain(cfg, resolve=False), to_plain(cfg, resolve=True)
    else:
        unresolved = resolved = OmegaConf.to_container(OmegaConf.create(dict(cfg)), resolve=True)
    now = time.time() if now is None else now
    paths = resolved.get("paths", {})
    git = {name: checkout_git_info(paths[name], paths.get("root") or paths[name])
           for name in ("root", "slime", "megatron") if paths.get(name)}
    git["clawgym"] = git_info(Path(__file__).resolve().parents[1])
    meta = {
        "format": FORMAT_VERSION,
        "id": snapshot_id,
        "submission_id": plan.submission_id,
        "run_name": plan.run_name,
        "exp_name": resolved.get("exp_name"),
        "save_dir": plan.save_dir,
        "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(now)),
        "created_unix": now,
        "host": socket.gethostname(),
        "user": getpass.getuser(),
        "cwd": os.getcwd(),
        "command": list(sys.argv),
        "origin": record.origin,
        "versions": package_versions(),
        "git": git,
        # Names only: the values are read from the environment at launch.
        "secret_env": dict(plan.secret_env),
        "wandb_config_file": plan.runtime_env.get("env_vars", {}).get(CONFIG_FILE_ENV),
        "checkpoints_at_launch": checkpoint_baseline(plan.save_dir) if plan.save_dir else None,
    }
    return {
        CONFIG_FILE: _dump_yaml(unresolved),
        RESOLVED_FILE: _dump_yaml(resolved),
        OVERRIDES_FILE: _dump_yaml(record.overrides),
        CHOICES_FILE: _dump_yaml(record.choices),
        PLAN_FILE: plan.to_json(),
        META_FILE: json.dumps(meta, indent=2) + "\n",
    }


def _unique_name(base: Path, name: str) -> str:
    candidate, n = name, 1
    while (base / candidate).exists():
        n += 1
        candidate = f"{name}.{n}"
    return candidate


def write_job_files(plan: Any) -> None:
    """The files the job reads that clawgym generates (``plan.files``: ``--sglang-config``, the
    services spec) and, with services, the supervisor that runs them (clawgym/jobside/)."""
    for path, text in (getattr(plan, "files", None) or {}).items():
        atomic_write_text(Path(path), text)
    if getattr(plan, "services", None):
        from clawgym.plan.build import supervisor_path

        source = Path(__file__).resolve().parents[1] / "jobside" / "run_services.py"
        atomic_write_text(Path(supervisor_path(plan.save_dir)), source.read_text(encoding="utf-8"))


def write_launch_snapshot(cfg: Any, plan: Any, *, record: Optional[LaunchRecord] = None) -> Path:
    """Write a new snapshot of a launch into its save dir and return the snapshot dir.

    Called before the job is submitted (never for dry runs). Earlier snapshots are never
    touched; the W&B config file (when the plan has the job read one) is replaced.
    Overrides and choices come from ``record``, else :func:`recorded_launch`, else the
    current Hydra job (a sweep launcher passes ``LaunchRecord.from_hydra(job_config.hydra)``).
    Raises :class:`SnapshotError` when a secret value would be written.
    """
    from clawgym.trainer.wandb_env import CONFIG_FILE_ENV, wandb_config_document

    if record is None:
        record = current_record()
    base = _snapshot_base(plan)
    name = _unique_name(base, re.sub(r"[^A-Za-z0-9_.-]+", "-", plan.submission_id))
    files = snapshot_files(cfg, plan, record, snapshot_id=name)

    resolved = yaml.safe_load(files[RESOLVED_FILE])
    secrets = secret_values(plan, extra_names=(resolved.get("wandb") or {}).get("key_env") or [])
    wandb_file = plan.runtime_env.get("env_vars", {}).get(CONFIG_FILE_ENV)
    wandb_text = None
    if wandb_file:
        launch = {"id": name, "submission_id": plan.submission_id, "snapshot": str(base / name),
                  "overrides": record.overrides, "choices": record.choices, "origin": record.origin,
                  "git": {k: v.get("commit") for k, v in json.loads(files[META_FILE])["git"].items()}}
        wandb_text = _dump_yaml(wandb_config_document(resolved, launch))
    leaks = {fname: find_secrets(text, secrets) for fname, text in
             [*files.items(), *([(wandb_file, wandb_text)] if wandb_text else [])]}
    leaks = {k: v for k, v in leaks.items() if v}
    if leaks:
        where = "; ".join(f"{f} would contain the value of ${', $'.join(names)}" for f, names in leaks.items())
        raise SnapshotError(
            f"clawgym: refusing to write the config snapshot: {where}.\n"
            "  rule: secrets are read from the environment at launch and are never stored\n"
            "  fix:  remove the secret from the overrides/config (e.g. extra_env, extra_args) and export it instead")

    try:
        base.mkdir(parents=True, exist_ok=True)
        _remove_dead_temp_dirs(base)
        tmp = base / f".tmp-{name}-{socket.gethostname()}-{os.getpid()}"
        try:
            tmp.mkdir()
            for fname, text in files.items():
                write_synced(tmp / fname, text)
            # Last: a snapshot with a manifest that matches its files is whole.
            write_synced(tmp / MANIFEST_FILE, manifest_text(files))
            # A same-named snapshot that appeared meanwhile makes the rename fail: never overwrite.
            os.rename(tmp, base / name)
        finally:
            if tmp.exists():
                shutil.rmtree(tmp, ignore_errors=True)
        if wandb_file and wandb_text:
            atomic_write_text(Path(wandb_file), wandb_text)
        write_job_files(plan)
    except OSError as exc:
        raise SnapshotError(
            f"clawgym: cannot write the config snapshot into {base}: {exc.strerror or exc}; nothing was started.\n"
            "  rule: every launch records its config in its save dir (paths.save) before the job is submitted\n"
            "  fix:  launch from a machine that mounts the save dir, or set paths.save to a writable path "
            "that the cluster shares") from None
    return base / name


def _remove_dead_temp_dirs(base: Path) -> None:
    """Remove temp dirs that a crashed launch on this host left behind (its process is gone)."""
    host = socket.gethostname()
    for entry in base.glob(".tmp-*"):
        head, _, pid = entry.name.rpartition("-")
        if not pid.isdigit() or not head.endswith(f"-{host}"):
            continue  # another host's launch: it may still be writing
        try:
            os.kill(int(pid), 0)  # existence probe only; sends nothing
            continue
        except ProcessLookupError:
            shutil.rmtree(entry, ignore_errors=True)
        except OSError:
            continue
