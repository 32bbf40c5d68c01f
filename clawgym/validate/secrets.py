"""Secrets: no config value (hence no snapshot, plan file or job metadata) holds one.

clawgym's own rules, not the trainer's (slime takes --wandb-key in argv and copies argv into W&B):
they stay on purpose.
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

from clawgym.validate.core import Collector


def _secret_names(c: Mapping[str, Any]) -> set:
    """Variables that hold a secret: the job's targets and where the W&B key is read from."""
    from clawgym.plan.build import SGLANG_KEY_ENV, WANDB_KEY_TARGET

    return {SGLANG_KEY_ENV, WANDB_KEY_TARGET, *c["wandb"]["key_env"]}


def _export_fix(c: Mapping[str, Any], name: str) -> str:
    """How a secret variable reaches the job from the environment on this config's cluster: the head
    clawgym starts runs with the launcher's whole environment (backends/head/start.py: head_env = os.environ + ...), SLURM
    hands it to the batch job (sbatch --export=ALL), an existing cluster's jobs see the environment its
    Ray nodes were started with; a RayJob's pods get only the Secret keys the plan names."""
    backend = str((c.get("cluster") or {}).get("backend", "local"))
    address = (c.get("ray") or {}).get("address")
    if backend == "kuberay":
        where = (f"add {name} to the pods' environment (a Kubernetes Secret of its own); the RayJob reads only "
                 f"the keys of kuberay.secret_name that clawgym names")
    elif address:
        where = f"export {name} where the cluster's Ray nodes are started (its jobs inherit their environment)"
    elif backend == "slurm":
        where = f"export {name} before launching (sbatch --export=ALL hands it to the batch job, not its script)"
    else:
        where = f"export {name} in the launcher's environment (the Ray head clawgym starts, and the job, inherit it)"
    return f"remove extra_env.{name} (and its override) and {where}"


def rule_no_secrets_in_extra_env(v: Collector) -> None:
    """Every variable named like a secret (``clawgym.common.secrets.is_secret_name``: HF_TOKEN, OPENAI_API_KEY,
    DB_PASSWORD, the W&B key variables...) is refused in extra_env, whatever its value (``${oc.env:...}``
    included): extra_env is resolved into launch_plan.json, snapshots, the Ray job's runtime env, the
    RayJob manifest and the W&B config."""
    from clawgym.common.secrets import is_secret_name

    for name in sorted(str(k) for k in v.c["extra_env"]):
        if name in _secret_names(v.c) or is_secret_name(name):
            v.add("no-secrets-in-extra-env", [f"extra_env.{name}"],
                  f"{name} is named like a secret (a key, token, password or secret); secrets are read from the "
                  "environment at launch, and extra_env is stored in launch_plan.json, snapshots and job metadata",
                  _export_fix(v.c, name), redact=True)


def secret_flags_given(args: Sequence[Any]) -> bool:
    """A secret flag (any flag naming a key, token, password or secret, or an abbreviation of one)
    anywhere in extra_args: its own element, ``--flag=value`` or inside one element."""
    from clawgym.common.secrets import secret_option

    return any(secret_option(w) is not None for a in args for w in str(a).split())


def _refused_name(c: Mapping[str, Any], name: str) -> bool:
    from clawgym.common.secrets import is_secret_name

    return name in _secret_names(c) or is_secret_name(name)


def rule_no_secret_values_in_config(v: Collector) -> None:
    """No resolved value holds the value of a secret the launcher can see, whatever its key."""
    from clawgym.config.compose import iter_leaves

    if not v.env_secrets:
        return
    for key, value in iter_leaves({k: val for k, val in v.c.items() if k != "hydra"}):
        text = str(value)
        names = [n for n, secret in v.env_secrets.items() if secret in text]
        if not names or (key.startswith("extra_env.") and _refused_name(v.c, key.split(".", 1)[1])):
            continue  # none here, or an extra_env entry named after a secret (no-secrets-in-extra-env)
        v.add("no-secret-values-in-config", [key],
              f"{key} holds the value of ${', $'.join(names)}; the config is printed, written to "
              "launch_plan.json and snapshots, and given to Ray as job metadata",
              f"remove the value from {key} (and from the overrides); clawgym reads "
              f"{', '.join(names)} from the environment at launch and passes it to the job itself",
              redact=True)
