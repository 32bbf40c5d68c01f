"""Two-stage validation of a composed config, all violations at once.

Stage one checks each group on its own; stage two checks how groups fit together.
Every rule is a small function that appends :class:`Violation` s; nothing stops at
the first problem, so a user fixes everything in one round. All of it runs before any
process is started or file written.

The rules live in one module per domain (as ``preflight/`` does); ``core`` holds the
collector and the report, this package the rule lists and the two stages that run them. The
order of the lists below is the order of the report.
"""

from __future__ import annotations

import os
import re
from typing import Any, Dict, List, Mapping, Optional, Tuple

from omegaconf import DictConfig
from omegaconf.errors import OmegaConfBaseException

from clawgym.config.compose import to_plain
from clawgym.common.secrets import argv_secrets, known_secrets, named_secrets, redact_value, remember
from clawgym.validate.core import Collector, ConfigError, Rule, Violation, format_warnings, run_rule
from clawgym.validate import (batches, checkout, cluster, flags, health, memory, model, names, rollout, schema_keys, secrets, topology,
                              trainer_rules, values)
from clawgym.validate.names import NAME_MAX, longest_derived_name, name_problem, runs_below

LOCAL_RULES: List[Rule] = [
    schema_keys.rule_known_keys, values.rule_numbers_sane, topology.rule_gpu_counts_positive, model.rule_model_sizes_positive,
    model.rule_model_sizes_sane,
    model.rule_query_groups_divide_heads, model.rule_moe_complete, model.rule_model_family_fields,
    batches.rule_rollout_sizes_positive, batches.rule_temperature_positive, batches.rule_context_exceeds_response,
    batches.rule_eps_clip_order, batches.rule_kl_choices, topology.rule_perf_sizes_positive,
    batches.rule_dynamic_batch_needs_max_tokens, batches.rule_optimizer,
    batches.rule_eval, rollout.rule_sglang, rollout.rule_sandbox, names.rule_names, names.rule_paths_absolute,
    cluster.rule_ray, cluster.rule_restart, memory.rule_memory_gpu, health.rule_health,
]

CROSS_RULES: List[Rule] = [
    topology.rule_gpus_fit_node, *trainer_rules.RULES, rollout.rule_context_lengths,
    names.rule_save_interval_needs_save, secrets.rule_no_secrets_in_extra_env,
    flags.rule_trainer_flavour_known, flags.rule_curated_flags_exist_in_trainer, flags.rule_args,
    flags.rule_extra_args, secrets.rule_no_secret_values_in_config, names.rule_save_dir_placement,
    names.rule_save_dir_not_an_input,
    cluster.rule_cluster, memory.rule_colocate_needs_offload,
    rollout.rule_sglang_config,
]

#: Rules about this machine (the checkout a launch from here uploads): run when the face asks
#: (``check(..., here=True)``), never for a config meant for another machine.
HERE_RULES: List[Rule] = [checkout.rule_checkout_here]

def _deep_leaves(leaves: Any) -> Any:
    """(dotted key, value) for every leaf, list elements included (``extra_args.0``): an
    interpolation that fails inside a list must be found like any other."""
    for key, value in leaves:
        if isinstance(value, list):
            if not value:
                yield key, value
            for i, item in enumerate(value):
                from clawgym.config.compose import iter_leaves

                yield from _deep_leaves(iter_leaves(item, f"{key}.{i}") if isinstance(item, dict)
                                        else [(f"{key}.{i}", item)])
        else:
            yield key, value


def _unresolved(cfg: DictConfig) -> List[Violation]:
    """Keys left at ``???`` or whose interpolation fails, each with its unresolved value."""
    from omegaconf import OmegaConf

    from clawgym.config.compose import iter_leaves

    raw = OmegaConf.to_container(cfg, resolve=False)
    assert isinstance(raw, dict)
    raw.pop("hydra", None)
    out: List[Violation] = []
    missing: List[str] = []
    failing: Dict[str, List[tuple]] = {}
    for key, value in _deep_leaves(iter_leaves(raw)):
        if value == "???":
            missing.append(key)
            out.append(Violation([key], {key: value}, "a required value is not set",
                                 f"set {key}, or choose an option of its group that sets it", "value-required"))
            continue
        try:
            OmegaConf.select(cfg, key, throw_on_missing=False)
        except OmegaConfBaseException as exc:
            failing.setdefault(str(exc).splitlines()[0], []).append((key, value))
    for cause, keys in failing.items():
        # Keys derived from a missing key fail because of it: already reported.
        if any(m in cause for m in missing):
            continue
        # Keys derived from a broken key fail for the same cause: report the one that
        # does not interpolate another failing key (the source), once.
        names = {k.rsplit(".", 1)[-1] for k, _ in keys}
        sources = [(k, v) for k, v in keys
                   if not any(re.search(r"\$\{[^}]*\b" + re.escape(n) + r"\b", str(v)) for n in names - {k.rsplit(".", 1)[-1]})]
        key, value = (sources or keys)[0]
        out.append(Violation([key], {key: value}, f"the config does not resolve: {cause}",
                             f"fix the interpolation of {key} or give it a plain value", "resolves"))
    return out


def _all(cfg: DictConfig | Mapping[str, Any], *, environ: Optional[Mapping[str, str]] = None,
         effective: Optional[Mapping[str, Any]] = None, here: bool = False) -> List[Violation]:
    """Errors and warnings of a composed config: local rules first, then cross-group rules."""
    env = os.environ if environ is None else environ
    if isinstance(cfg, DictConfig):
        try:
            c = to_plain(cfg, resolve=True)
        except OmegaConfBaseException as exc:
            # The rules need resolved values: report what does not resolve, and only that.
            found = _unresolved(cfg)
            if not found:
                # Never an empty answer for a config the rules cannot read.
                found = [Violation([], {}, f"the config does not resolve: {str(exc).splitlines()[0][:200]}",
                                   "fix the interpolation named above or give the key a plain value", "resolves")]
            values = known_secrets(None, env)
            for f in found:
                f.values = {k: redact_value(val, values) for k, val in f.values.items()}
            return found
    else:
        c = cfg
    # Secret values typed into extra_args are masked in every later report of this process too.
    try:
        remember(argv_secrets(c["extra_args"]))
        # ... and values of secret-named extra_env variables (refused by no-secrets-in-extra-env).
        remember(named_secrets(c.get("extra_env") or {}).values())
        # ... and those smuggled into an args.* list (args.data_path=[--wandb-key,VALUE]).
        for value in (c.get("args") or {}).values():
            if isinstance(value, list):
                remember(argv_secrets([x for x in value if not isinstance(x, (list, dict))]))
    except (KeyError, TypeError, AttributeError):
        pass
    from clawgym.trainer.effective import effective_config

    # Null curated keys emit no flag: the rules reason with the value the trainer will use.
    raw, c = c, (effective if effective is not None else effective_config(c))
    col = Collector(c, env)
    # Rules about what the config itself says (a model group left incomplete) read it as written.
    col.raw = raw
    for rule in LOCAL_RULES:
        run_rule(col, rule, cross=False)
    for rule in CROSS_RULES:
        run_rule(col, rule, cross=True)
    for rule in HERE_RULES if here else []:
        run_rule(col, rule, cross=True)
    return col.out


def check(cfg: DictConfig | Mapping[str, Any], *, environ: Optional[Mapping[str, str]] = None,
          effective: Optional[Mapping[str, Any]] = None,
          here: bool = False) -> Tuple[List[Violation], List[Violation]]:
    """(errors, warnings) of a composed config: errors refuse it, warnings are only printed.

    ``effective``: the config as the trainer runs it (``trainer.effective.effective_config`` of
    the same plain config), when the caller derived it already. ``here``: also the rules about
    this machine (HERE_RULES), for a launch or dry run from here."""
    found = _all(cfg, environ=environ, effective=effective, here=here)
    return [v for v in found if v.severity != "warning"], [v for v in found if v.severity == "warning"]


def warnings(cfg: DictConfig | Mapping[str, Any], *, environ: Optional[Mapping[str, str]] = None) -> List[Violation]:
    """What the trainer accepts but rewrites or leaves idle (never refuses)."""
    return check(cfg, environ=environ)[1]


def violations(cfg: DictConfig | Mapping[str, Any], *, environ: Optional[Mapping[str, str]] = None) -> List[Violation]:
    """Every error of a composed config: local rules first, then cross-group rules.

    ``environ`` (default: this process's) is where the secrets come from that no config
    value may hold; every report masks them. Warnings are left out (see :func:`check`).
    """
    return check(cfg, environ=environ)[0]


def validate(cfg: DictConfig | Mapping[str, Any], *, context: str = "",
             environ: Optional[Mapping[str, str]] = None) -> None:
    """Raise :class:`ConfigError` carrying every violation, if any."""
    found = violations(cfg, environ=environ)
    if found:
        raise ConfigError(found, context=context)


__all__ = ["ConfigError", "Violation", "check", "HERE_RULES", "format_warnings", "validate", "violations", "warnings", "LOCAL_RULES",
           "CROSS_RULES", "NAME_MAX",
           "longest_derived_name", "name_problem", "runs_below"]
