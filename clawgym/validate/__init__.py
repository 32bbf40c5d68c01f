"""Two-stage validation of a composed config, all violations at once.

Stage one checks each group on its own; stage two checks how groups fit together.
Every rule is a small function that appends :class:`Violation` s; nothing stops at
the first problem, so a user fixes everything in one round. All of it runs before any
process is started or file written.

The rules live in one module per domain (as ``preflight/`` does); ``core`` holds the
collector, the report and the two stages. The order of the lists below is the order
of the report.
"""

from __future__ import annotations

from typing import List

from clawgym.validate.core import (ConfigError, Rule, Violation, check, format_warnings, validate, violations,
                                   warnings)
from clawgym.validate import (batches, cluster, flags, memory, model, names, rollout, schema_keys, secrets, topology,
                              trainer_rules, values)
from clawgym.validate.names import NAME_MAX, longest_derived_name, name_problem, runs_below

LOCAL_RULES: List[Rule] = [
    schema_keys.rule_known_keys, values.rule_numbers_sane, topology.rule_gpu_counts_positive, model.rule_model_sizes_positive,
    model.rule_query_groups_divide_heads, model.rule_moe_complete, model.rule_model_family_fields,
    batches.rule_rollout_sizes_positive, batches.rule_temperature_positive, batches.rule_context_exceeds_response,
    batches.rule_eps_clip_order, batches.rule_kl_choices, topology.rule_perf_sizes_positive,
    batches.rule_dynamic_batch_needs_max_tokens, batches.rule_optimizer,
    batches.rule_eval, rollout.rule_sglang, rollout.rule_sandbox, names.rule_names, names.rule_paths_absolute,
    cluster.rule_ray, memory.rule_memory_gpu,
]

CROSS_RULES: List[Rule] = [
    topology.rule_gpus_fit_node, *trainer_rules.RULES, rollout.rule_context_lengths,
    names.rule_save_interval_needs_save, secrets.rule_no_secrets_in_extra_env,
    flags.rule_trainer_flavour_known, flags.rule_curated_flags_exist_in_trainer, flags.rule_args,
    flags.rule_extra_args, secrets.rule_no_secret_values_in_config, names.rule_save_dir_placement,
    cluster.rule_cluster, memory.rule_colocate_needs_offload,
    rollout.rule_sglang_config,
]

__all__ = ["ConfigError", "Violation", "check", "format_warnings", "validate", "violations", "warnings", "LOCAL_RULES",
           "CROSS_RULES", "NAME_MAX",
           "longest_derived_name", "name_problem", "runs_below"]
