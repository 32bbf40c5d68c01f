"""The W&B key: a run that logs to W&B has one to log with.

``wandb.enabled=true`` forces W&B on even when no key is set (``null`` turns it on only
when one is). Without a key the trainer's ``wandb.login`` fails (or waits for a prompt
nobody answers) once the job has started, minutes in; this check says so before.

Where a key can come from, as wandb itself reads it: the variables ``wandb.key_env``
names (the launcher hands the first one set to the job, clawgym/launch/rayjob.py:resolve_secrets),
``WANDB_API_KEY``, and wandb's netrc file (``$NETRC``, else ``~/.netrc``, written by
``wandb login``) on a head started here. ``WANDB_MODE=offline``/``disabled`` in the job's
environment needs none. A KubeRay job reads the key from its Secret (not visible here).
"""

from __future__ import annotations

import netrc
import os
from pathlib import Path
from typing import Mapping, Optional

from clawgym.preflight.core import CheckFailed, Context, NotApplicable

#: The host wandb logs in to unless WANDB_BASE_URL says otherwise.
DEFAULT_HOST = "api.wandb.ai"


def netrc_path(environ: Mapping[str, str]) -> Path:
    return Path(environ.get("NETRC") or "~/.netrc").expanduser()


def netrc_key(environ: Mapping[str, str]) -> Optional[str]:
    """The W&B key in wandb's netrc file, or None (no file, no entry, unreadable)."""
    host = (environ.get("WANDB_BASE_URL") or DEFAULT_HOST).split("://", 1)[-1].split("/", 1)[0].split(":", 1)[0]
    try:
        auth = netrc.netrc(str(netrc_path(environ))).authenticators(host)
    except (OSError, netrc.NetrcParseError):
        return None
    return auth[2] if auth and auth[2] else None


def check_wandb(ctx: Context, environ: Optional[Mapping[str, str]] = None) -> str:
    from clawgym.launch.rayjob import resolve_secrets
    from clawgym.plan.build import WANDB_KEY_TARGET

    env = os.environ if environ is None else environ
    c, plan = ctx.c, ctx.plan
    if WANDB_KEY_TARGET not in plan.secret_env:
        raise NotApplicable("W&B is off for this run")
    mode = str((plan.runtime_env.get("env_vars") or {}).get("WANDB_MODE") or env.get("WANDB_MODE") or "")
    if mode in ("offline", "disabled", "dryrun"):
        raise NotApplicable(f"WANDB_MODE={mode}: no key needed")
    if c["cluster"]["backend"] == "kuberay":
        raise NotApplicable(f"the pods read {WANDB_KEY_TARGET} from the Secret {c['kuberay']['secret_name']!r}")
    names = list(plan.secret_env[WANDB_KEY_TARGET])
    if resolve_secrets(plan, env).get(WANDB_KEY_TARGET):
        found = next(n for n in names if env.get(n))
        return f"key from ${found}"
    if ctx.local_head and netrc_key(env):
        return f"key from {netrc_path(env)} (wandb login)"
    raise CheckFailed(
        f"wandb.enabled=true but no W&B key is set: none of ${', $'.join(names)} is in the launcher's environment"
        + ("" if not ctx.local_head else f", and {netrc_path(env)} has no entry for {DEFAULT_HOST}"),
        "export WANDB_API_KEY=<your key> (https://wandb.ai/authorize) before launching, or run `wandb login`; "
        "or set wandb.enabled=false (or leave it null: W&B turns on when a key is set)")
