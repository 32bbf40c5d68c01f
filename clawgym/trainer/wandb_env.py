"""W&B settings that reach the trainer job through its environment (never the key).

slime calls ``wandb.init(project=, group=, name=, config=args.__dict__)`` itself, so
explicit arguments win over ``WANDB_PROJECT``/``WANDB_RUN_GROUP``/``WANDB_NAME``. What
wandb still takes from the environment (verified against wandb 0.31's
``Settings.update_from_env_vars`` and ``_WandbSetup.config``):

- ``WANDB_TAGS`` (comma-separated, each tag 1..64 characters, else wandb.init raises)
  and ``WANDB_NOTES``: slime passes neither.
- ``WANDB_SWEEP_PARAM_PATH``: a YAML file in wandb's config-file format
  (``key: {value: ...}``) merged into ``run.config``. ``WANDB_CONFIG_PATHS`` would be the
  natural choice but wandb 0.31 rejects it (pydantic refuses a str for ``config_paths``,
  so wandb.init crashes), and ``WANDB_CONFIG`` only applies in W&B Launch mode, which
  drops the project and run id slime passes. The file is read with ``must_exist=True``:
  a job that cannot see it fails at wandb.init. So it is set only where the job surely
  sees the launcher's filesystem (a local head), or when ``wandb.config_file=true``.

Our config lands nested under ``clawgym`` (slime's flat ``args.__dict__`` has keys such as
``optimizer`` that would collide at top level); the launch record (overrides, choices,
snapshot) under ``clawgym_launch``. The file is written by
:func:`clawgym.snapshot.write.write_launch_snapshot` at :func:`wandb_config_path`.

- ``WANDB_RUN_ID`` and ``WANDB_RESUME`` (Settings ``run_id`` and ``resume``): slime's primary
  ``wandb.init`` passes neither ``id`` nor ``resume``, and its secondaries attach with
  ``id=args.wandb_run_id`` (the primary's ``wandb.run.id``) and ``resume="allow"`` (slime
  ``observability/wandb_utils.py``). So one id per save dir (:func:`run_id`) with ``resume=allow``
  makes every attempt of a run (a supervisor's restart, a ``clawgym resume``) log to one W&B run,
  on the same step axis. A save dir holds one run: a fresh launch into one with checkpoints is
  refused (preflight ``save-dir``). ``extra_env.WANDB_RUN_ID`` chooses another id.

slime names the run ``<group>_<id>-RANK_0``; ``wandb.group`` defaults to the run name, so
the W&B run's name carries the swept overrides (it is also in the notes, the tags and
``clawgym.run_name``), and the experiment name is a tag.
"""

from __future__ import annotations

import hashlib
import re
from typing import Any, Dict, List, Mapping, Optional

#: wandb reads this file into run.config (see module doc for why not WANDB_CONFIG_PATHS).
CONFIG_FILE_ENV = "WANDB_SWEEP_PARAM_PATH"
#: Where the file lives, relative to the save dir.
CONFIG_FILE_RELPATH = "clawgym/wandb_config.yaml"
#: wandb's limit on one tag.
MAX_TAG_LEN = 64
#: What wandb.init does with a run id it has seen (Settings.resume): go on with that run, or start it.
RESUME = "allow"


def wandb_config_path(c: Mapping[str, Any]) -> Optional[str]:
    """Deterministic path of the W&B config file of a resolved config (None without a save dir)."""
    save = c["paths"]["save"]
    return f"{str(save).rstrip('/')}/{CONFIG_FILE_RELPATH}" if save else None


def config_file_enabled(c: Mapping[str, Any]) -> bool:
    """Whether the job reads the config file: forced, or (auto) only with a local head or a SLURM
    job (which shares the launcher's filesystem); not on KubeRay, whose pods see only their PVC."""
    forced = c["wandb"].get("config_file")
    if forced is None:
        backend = str((c.get("cluster") or {}).get("backend", "local"))
        return not c["ray"]["address"] and backend != "kuberay"
    return bool(forced)


def _tag(text: str) -> Optional[str]:
    # Commas separate tags in WANDB_TAGS; keep each within wandb's length limit.
    text = text.replace(",", ";").strip()
    return text[:MAX_TAG_LEN] if text else None


def run_tags(c: Mapping[str, Any]) -> List[str]:
    """Tags: the experiment, the run name and each ``key=value`` the sweep put into the run name."""
    exp, run = str(c["exp_name"]), str(c["run_name"])
    candidates = [exp]
    if run != exp:
        candidates.append(run)
        # Sweep jobs are named "<exp_name>_<k=v,k2=v2>" (clawgym.sweep.core): one tag per override.
        rest = run[len(exp):].lstrip("_") if run.startswith(exp) else run
        candidates += [item for item in rest.split(",") if re.match(r"^[\w.+~/-]+=.", item)]
    tags: List[str] = []
    for cand in candidates:
        tag = _tag(cand)
        if tag and tag not in tags:
            tags.append(tag)
    return tags


def wandb_job_env(c: Mapping[str, Any], *, use_wandb: bool) -> Dict[str, str]:
    """Extra job environment variables for W&B, from a resolved plain config."""
    if not use_wandb:
        return {}
    env = {
        "WANDB_TAGS": ",".join(run_tags(c)),
        "WANDB_NOTES": f"clawgym run {c['run_name']} (experiment {c['exp_name']})",
    }
    rid = run_id(c)
    if rid:
        env.update(WANDB_RUN_ID=rid, WANDB_RESUME=RESUME)
    path = wandb_config_path(c)
    # A relative path would be looked up in the job's working dir, where the file is not.
    if path and path.startswith("/") and config_file_enabled(c):
        env[CONFIG_FILE_ENV] = path
    return env


def run_id(c: Mapping[str, Any]) -> Optional[str]:
    """The W&B run id of a save dir: the run's name (W&B's characters only) and a hash of the save dir,
    the same for every attempt and resume of the run; None when the run saves nothing."""
    save = (c.get("paths") or {}).get("save")
    if not save:
        return None
    name = re.sub(r"[^A-Za-z0-9_.-]+", "-", str(c.get("run_name") or "run")).strip("-")[:40] or "run"
    return f"{name}-{hashlib.sha256(str(save).encode()).hexdigest()[:12]}"


def wandb_config_document(resolved: Mapping[str, Any], launch: Mapping[str, Any]) -> Dict[str, Any]:
    """Content of the config file, in wandb's config-file format."""
    return {
        "wandb_version": 1,
        "clawgym": {"desc": "clawgym composed config (resolved)", "value": dict(resolved)},
        "clawgym_launch": {"desc": "clawgym launch record", "value": dict(launch)},
    }
