"""Secrets: no config value (hence no snapshot, plan file or job metadata) holds one.

clawgym's own rules, not the trainer's (slime takes --wandb-key in argv and copies argv into W&B):
they stay on purpose.
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

from clawgym.validate.core import Collector


def _secret_names(c: Mapping[str, Any]) -> set:
    """Variables that hold a secret: the job's targets and where the W&B key is read from."""
    from clawgym.plan import SGLANG_KEY_ENV, WANDB_KEY_TARGET

    return {SGLANG_KEY_ENV, WANDB_KEY_TARGET, *c["wandb"]["key_env"]}


def rule_no_secrets_in_extra_env(v: Collector) -> None:
    for name in sorted(_secret_names(v.c) & set(v.c["extra_env"])):
        v.add("no-secrets-in-extra-env", [f"extra_env.{name}"],
              "secrets are read from the environment at launch; extra_env is stored in snapshots and job metadata",
              f"remove extra_env.{name} and export {name} in the launcher's environment instead", redact=True)


def secret_flags_given(args: Sequence[Any]) -> bool:
    """A secret flag (any flag naming a key, token, password or secret, or an abbreviation of one)
    anywhere in extra_args: its own element, ``--flag=value`` or inside one element."""
    from clawgym.secrets import secret_option

    return any(secret_option(w) is not None for a in args for w in str(a).split())


def rule_no_secret_values_in_config(v: Collector) -> None:
    """No resolved value holds the value of a secret the launcher can see, whatever its key."""
    from clawgym.config import iter_leaves

    if not v.env_secrets:
        return
    for key, value in iter_leaves({k: val for k, val in v.c.items() if k != "hydra"}):
        text = str(value)
        names = [n for n, secret in v.env_secrets.items() if secret in text]
        if not names or (key.startswith("extra_env.") and key.split(".", 1)[1] in _secret_names(v.c)):
            continue  # none here, or an extra_env entry named after a secret (no-secrets-in-extra-env)
        v.add("no-secret-values-in-config", [key],
              f"{key} holds the value of ${', $'.join(names)}; the config is printed, written to "
              "launch_plan.json and snapshots, and given to Ray as job metadata",
              f"remove the value from {key} (and from the overrides); clawgym reads "
              f"{', '.join(names)} from the environment at launch and passes it to the job itself",
              redact=True)
