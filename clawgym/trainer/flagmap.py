"""The one table of trainer flags that curated config keys own.

Every row maps one trainer flag to the clawgym key it comes from, in the order the plan
emits them (the seed script's grouping). ``plan.py`` emits the curated flags by walking
this table; validation uses it to refuse ``args.<dest>`` and ``extra_args`` entries that
would set a flag a key already owns; ``clawgym flags`` shows the owning key; ``clawgym
import`` maps a script's flags back to keys through :func:`owners`.

``kind`` says how a flag relates to its key, so it can be inverted:

- ``value``: the flag's value is the key's value (``--lr 1e-6`` <- ``optimizer.lr``);
- ``switch``: a flag without a value, present when the key is true (``--colocate``; also
  ``--disable-bias-linear``, a store_false action, from ``model.disable_bias_linear``);
- ``inverse_switch``: present when the key is false (``--disable-rollout-global-dataset`` from
  ``rollout.global_dataset``);
- ``derived``: computed from several keys, not invertible key by key;
- ``file``: the flag names a file clawgym writes at launch from the key's content
  (``--sglang-config`` <- ``sglang.models``, written to ``<paths.save>/clawgym/``); parity
  compares such flags by the file's content, not its path (:mod:`clawgym.trainer.generated`).

Fork-only rows (``fork_only=True``) exist in the ClawGym fork's parser only; under
``trainer=slime`` they are not emitted, and a config that would emit one is refused.
Upstream-only rows (``upstream_only=True``) are the converse under ``trainer=clawgym``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Dict, List, Mapping, Optional, Tuple

#: Owner kinds (see module doc).
KINDS = ("value", "switch", "inverse_switch", "derived", "file")


@dataclass(frozen=True)
class Owner:
    """The clawgym key that owns a trainer flag, and how (one of :data:`KINDS`)."""

    key: str
    kind: str


@dataclass(frozen=True)
class Context:
    """What the plan knows beyond the config when it emits flags."""

    # W&B is on for this launch (forced, or a key in the launcher's environment).
    use_wandb: bool = False


Compute = Callable[[Mapping[str, Any], Context], Any]


@dataclass(frozen=True)
class Row:
    """One owned flag."""

    # The trainer flag as the plan emits it.
    flag: str
    # Dotted clawgym key that owns it (for derived flags: the key a user changes to move it).
    key: str
    # One of KINDS.
    kind: str
    # Exists only in the ClawGym fork's parser.
    fork_only: bool = False
    # Exists only in upstream slime's parser (newer than the fork), e.g. --allgather-cp.
    upstream_only: bool = False
    # What to emit, when not simply the key's value: None/False = nothing, True = the bare flag,
    # anything else = ``flag value``.
    compute: Optional[Compute] = None

    def emitted(self, c: Mapping[str, Any], ctx: Context) -> Any:
        """None/False (not emitted), True (bare flag) or the value to pass."""
        if self.compute is not None:
            return self.compute(c, ctx)
        value = get_key(c, self.key)
        if self.kind == "switch":
            return bool(value)
        if self.kind == "inverse_switch":
            return not value
        return value

    @property
    def owner(self) -> Owner:
        return Owner(self.key, self.kind)


def get_key(c: Mapping[str, Any], key: str) -> Any:
    node: Any = c
    for part in key.split("."):
        node = node[part]
    return node


def _wandb_on(c: Mapping[str, Any], ctx: Context) -> bool:
    return ctx.use_wandb


def _wandb_value(key: str) -> Compute:
    return lambda c, ctx: get_key(c, key) if ctx.use_wandb else None


def tensorboard_on(c: Mapping[str, Any]) -> bool:
    # Configs from before the metrics group (old snapshots) had no events.
    return bool((c.get("metrics") or {}).get("tensorboard", False))


def _generated_path(c: Mapping[str, Any], key: str) -> Optional[str]:
    from clawgym.trainer.generated import generated_path

    return generated_path(c, key)


def _model(name: str) -> str:
    return f"model.{name}"


ROWS: Tuple[Row, ...] = (
    # Placement.
    Row("--actor-num-nodes", "gpu_layout.actor_num_nodes", "value"),
    Row("--actor-num-gpus-per-node", "gpu_layout.actor_gpus", "value"),
    Row("--rollout-num-gpus", "gpu_layout.rollout_gpus", "value"),
    Row("--num-gpus-per-node", "gpu_layout.num_gpus", "value"),
    Row("--colocate", "gpu_layout.colocate", "switch"),
    # No rollout engine (SFT): slime starts no SGLang engine and trains on its data directly.
    Row("--debug-train-only", "gpu_layout.rollout_engine", "inverse_switch"),
    # Model architecture (the layer spec first, as slime's model scripts put it).
    Row("--spec", _model("spec"), "value"),
    Row("--swiglu", _model("swiglu"), "switch"),
    Row("--num-layers", _model("num_layers"), "value"),
    Row("--hidden-size", _model("hidden_size"), "value"),
    Row("--ffn-hidden-size", _model("ffn_hidden_size"), "value"),
    Row("--num-attention-heads", _model("num_attention_heads"), "value"),
    # Grouped-query attention whenever there are fewer KV heads than query heads (None: MLA models).
    Row("--group-query-attention", _model("num_query_groups"), "derived",
        compute=lambda c, ctx: c["model"]["num_query_groups"] is not None
        and c["model"]["num_query_groups"] < c["model"]["num_attention_heads"]),
    Row("--num-query-groups", _model("num_query_groups"), "value"),
    Row("--max-position-embeddings", _model("max_position_embeddings"), "value"),
    Row("--seq-length", _model("seq_length"), "value"),
    Row("--position-embedding-type", _model("position_embedding"), "derived",
        compute=lambda c, ctx: "rope" if c["model"]["position_embedding"] == "rope" else None),
    Row("--use-rotary-position-embeddings", _model("position_embedding"), "derived",
        compute=lambda c, ctx: c["model"]["position_embedding"] != "rope"),
    Row("--no-position-embedding", _model("add_position_embedding"), "inverse_switch"),
    Row("--disable-bias-linear", _model("disable_bias_linear"), "switch"),
    Row("--add-qkv-bias", _model("add_qkv_bias"), "switch"),
    Row("--normalization", _model("normalization"), "value"),
    Row("--apply-layernorm-1p", _model("apply_layernorm_1p"), "switch"),
    Row("--norm-epsilon", _model("norm_epsilon"), "value"),
    Row("--rotary-base", _model("rotary_base"), "value"),
    Row("--rotary-percent", _model("rotary_percent"), "value"),
    Row("--rotary-interleaved", _model("rotary_interleaved"), "switch"),
    Row("--use-rope-scaling", _model("use_rope_scaling"), "switch"),
    Row("--rotary-scaling-factor", _model("rotary_scaling_factor"), "value"),
    Row("--mscale", _model("mscale"), "value"),
    Row("--mscale-all-dim", _model("mscale_all_dim"), "value"),
    Row("--no-rope-fusion", _model("apply_rope_fusion"), "inverse_switch"),
    Row("--vocab-size", _model("vocab_size"), "value"),
    Row("--make-vocab-size-divisible-by", _model("make_vocab_size_divisible_by"), "value"),
    Row("--kv-channels", _model("kv_channels"), "value"),
    Row("--qk-layernorm", _model("qk_layernorm"), "switch"),
    Row("--post-self-attn-layernorm", _model("post_self_attn_layernorm"), "switch"),
    Row("--post-mlp-layernorm", _model("post_mlp_layernorm"), "switch"),
    Row("--untie-embeddings-and-output-weights", _model("untie_embeddings_and_output_weights"), "switch"),
    Row("--no-masked-softmax-fusion", _model("masked_softmax_fusion"), "inverse_switch"),
    # Multi-latent attention.
    Row("--multi-latent-attention", _model("multi_latent_attention"), "switch"),
    Row("--q-lora-rank", _model("q_lora_rank"), "value"),
    Row("--kv-lora-rank", _model("kv_lora_rank"), "value"),
    Row("--qk-head-dim", _model("qk_head_dim"), "value"),
    Row("--qk-pos-emb-head-dim", _model("qk_pos_emb_head_dim"), "value"),
    Row("--v-head-dim", _model("v_head_dim"), "value"),
    # Gated attention (Qwen3-Next, Qwen3.5).
    Row("--use-gated-attention", _model("use_gated_attention"), "switch"),
    Row("--attention-output-gate", _model("attention_output_gate"), "switch"),
    Row("--mtp-num-layers", _model("mtp_num_layers"), "value"),
    # Mixture of experts.
    Row("--num-experts", _model("num_experts"), "value"),
    Row("--moe-ffn-hidden-size", _model("moe_ffn_hidden_size"), "value"),
    Row("--moe-shared-expert-intermediate-size", _model("moe_shared_expert_intermediate_size"), "value"),
    Row("--moe-shared-expert-gate", _model("moe_shared_expert_gate"), "switch"),
    Row("--moe-router-score-function", _model("moe_router_score_function"), "value"),
    Row("--moe-router-pre-softmax", _model("moe_router_pre_softmax"), "switch"),
    Row("--moe-router-enable-expert-bias", _model("moe_router_enable_expert_bias"), "switch"),
    Row("--moe-router-bias-update-rate", _model("moe_router_bias_update_rate"), "value"),
    Row("--moe-router-load-balancing-type", _model("moe_router_load_balancing_type"), "value"),
    Row("--moe-token-dispatcher-type", _model("moe_token_dispatcher_type"), "value"),
    Row("--moe-router-topk", _model("moe_router_topk"), "value"),
    Row("--moe-router-topk-scaling-factor", _model("moe_router_topk_scaling_factor"), "value"),
    Row("--moe-router-num-groups", _model("moe_router_num_groups"), "value"),
    Row("--moe-router-group-topk", _model("moe_router_group_topk"), "value"),
    Row("--moe-layer-freq", _model("moe_layer_freq"), "value"),
    Row("--moe-grouped-gemm", _model("moe_grouped_gemm"), "switch"),
    Row("--moe-token-drop-policy", _model("moe_token_drop_policy"), "value"),
    Row("--moe-router-dtype", _model("moe_router_dtype"), "value"),
    Row("--moe-permute-fusion", _model("moe_permute_fusion"), "switch"),
    Row("--moe-aux-loss-coeff", _model("moe_aux_loss_coeff"), "value"),
    Row("--enable-experimental", _model("enable_experimental"), "switch"),
    Row("--allgather-cp", _model("allgather_cp"), "switch", upstream_only=True),
    # Checkpoints.
    Row("--megatron-to-hf-mode", "checkpoint.megatron_to_hf_mode", "value", fork_only=True),
    Row("--hf-checkpoint", "paths.hf_checkpoint", "value"),
    Row("--ref-load", "paths.ref_load", "value"),
    Row("--load", "checkpoint.load", "value"),
    Row("--save", "paths.save", "value"),
    Row("--save-interval", "checkpoint.save_interval", "value"),
    # Rollout.
    Row("--disable-rollout-global-dataset", "rollout.global_dataset", "inverse_switch"),
    Row("--rollout-function-path", "rollout.function_path", "value"),
    Row("--num-rollout", "rollout.num_rollout", "value"),
    Row("--rollout-batch-size", "rollout.batch_size", "value"),
    Row("--n-samples-per-prompt", "rollout.n_samples_per_prompt", "value"),
    Row("--rollout-max-response-len", "rollout.max_response_len", "value"),
    Row("--rollout-max-context-len", "rollout.max_context_len", "value"),
    Row("--rollout-temperature", "rollout.temperature", "value"),
    Row("--reward-key", "rollout.reward_key", "value"),
    Row("--num-steps-per-rollout", "rollout.num_steps_per_rollout", "value"),
    # Optimizer.
    Row("--optimizer", "optimizer.name", "value"),
    Row("--lr", "optimizer.lr", "value"),
    Row("--lr-decay-style", "optimizer.lr_decay_style", "value"),
    Row("--weight-decay", "optimizer.weight_decay", "value"),
    Row("--adam-beta1", "optimizer.adam_beta1", "value"),
    Row("--adam-beta2", "optimizer.adam_beta2", "value"),
    Row("--optimizer-cpu-offload", "optimizer.cpu_offload", "switch"),
    Row("--overlap-cpu-optimizer-d2h-h2d", "optimizer.overlap_cpu_optimizer_d2h_h2d", "switch"),
    Row("--use-precision-aware-optimizer", "optimizer.use_precision_aware_optimizer", "switch"),
    # GRPO.
    Row("--advantage-estimator", "grpo.advantage_estimator", "value"),
    Row("--dynamic-history", "grpo.dynamic_history", "switch", fork_only=True),
    Row("--use-kl-loss", "grpo.use_kl_loss", "switch"),
    Row("--kl-loss-coef", "grpo.kl_loss_coef", "value"),
    Row("--kl-loss-type", "grpo.kl_loss_type", "value"),
    Row("--entropy-coef", "grpo.entropy_coef", "value"),
    Row("--eps-clip", "grpo.eps_clip", "value"),
    Row("--eps-clip-high", "grpo.eps_clip_high", "value"),
    Row("--use-dynamic-global-batch-size", "grpo.use_dynamic_global_batch_size", "switch", fork_only=True),
    Row("--calculate-per-token-loss", "grpo.calculate_per_token_loss", "switch"),
    # Parallelism and memory.
    Row("--tensor-model-parallel-size", "perf.tensor_parallel", "value"),
    Row("--sequence-parallel", "perf.sequence_parallel", "switch"),
    Row("--pipeline-model-parallel-size", "perf.pipeline_parallel", "value"),
    Row("--context-parallel-size", "perf.context_parallel", "value"),
    Row("--expert-model-parallel-size", "perf.expert_parallel", "value"),
    Row("--expert-tensor-parallel-size", "perf.expert_tensor_parallel", "value"),
    Row("--recompute-granularity", "perf.recompute_granularity", "value"),
    Row("--recompute-method", "perf.recompute_method", "value"),
    Row("--recompute-num-layers", "perf.recompute_num_layers", "value"),
    Row("--use-dynamic-batch-size", "perf.use_dynamic_batch_size", "switch"),
    Row("--max-tokens-per-gpu", "perf.max_tokens_per_gpu", "value"),
    Row("--log-probs-chunk-size", "perf.log_probs_chunk_size", "value"),
    # Eval.
    Row("--eval-interval", "eval.interval", "value"),
    Row("--eval-function-path", "eval.function_path", "value"),
    Row("--skip-eval-before-train", "eval.skip_before_train", "switch"),
    # SGLang.
    Row("--rollout-num-gpus-per-engine", "sglang.tp", "value"),
    Row("--sglang-tool-call-parser", "sglang.tool_call_parser", "value"),
    Row("--sglang-mem-fraction-static", "sglang.mem_fraction_static", "value"),
    Row("--sglang-context-length", "sglang.context_length", "value"),
    # Engine groups (PD disaggregation, several models): a YAML file clawgym writes at launch.
    Row("--sglang-config", "sglang.models", "file", compute=lambda c, ctx: _generated_path(c, "sglang.models")),
    # An empty parser means none, as the seed's ${REASONING_PARSER:+...}.
    Row("--sglang-reasoning-parser", "sglang.reasoning_parser", "value",
        compute=lambda c, ctx: c["sglang"]["reasoning_parser"] or None),
    # Numerics.
    Row("--attention-dropout", _model("attention_dropout"), "value"),
    Row("--hidden-dropout", _model("hidden_dropout"), "value"),
    Row("--accumulate-allreduce-grads-in-fp32", "perf.accumulate_allreduce_grads_in_fp32", "switch"),
    Row("--attention-softmax-in-fp32", "perf.attention_softmax_in_fp32", "switch"),
    Row("--attention-backend", "perf.attention_backend", "value"),
    # W&B: on when forced or (auto) when a key is in the launcher's environment; the key
    # itself travels in the environment only.
    Row("--use-wandb", "wandb.enabled", "switch", compute=_wandb_on),
    Row("--wandb-project", "wandb.project", "value", compute=_wandb_value("wandb.project")),
    Row("--wandb-group", "wandb.group", "value", compute=_wandb_value("wandb.group")),
    # TensorBoard events into the save dir (the folder travels as TENSORBOARD_DIR in the job env,
    # clawgym/plan/build.py:tensorboard_env); slime/utils/logging_utils.py:log writes them only with this flag.
    Row("--use-tensorboard", "metrics.tensorboard", "switch", compute=lambda c, ctx: tensorboard_on(c)),
    # Per-sample generate and reward hooks (the ClawGymRL API server in the fork's defaults).
    Row("--custom-generate-function-path", "rollout.generate_function_path", "value"),
    Row("--custom-rm-path", "rollout.reward_function_path", "value"),
)

#: Flags that carry secrets: never in argv, whoever sets them.
SECRET_FLAGS = ("--wandb-key", "--sglang-api-key")


def rows(flavour: str) -> List[Row]:
    """The rows whose flag exists in ``flavour``'s trainer, in emission order."""
    return [r for r in ROWS if not (r.fork_only and flavour != "clawgym") and not (r.upstream_only and flavour == "clawgym")]


def fork_only_rows() -> List[Row]:
    return [r for r in ROWS if r.fork_only]


def upstream_only_rows() -> List[Row]:
    return [r for r in ROWS if r.upstream_only]


def owners(flavour: str = "clawgym") -> Dict[str, Owner]:
    """Option string -> the key that owns it, for ``flavour``.

    Every option string of an owned action is a key (``--tp`` as well as
    ``--tensor-model-parallel-size`` when the parser has both), so a script or ``extra_args``
    naming a flag by an alias maps to the same key.
    """
    from clawgym.registry import load_registry

    reg = load_registry(flavour)
    out: Dict[str, Owner] = {}
    for row in rows(flavour):
        out[row.flag] = row.owner
        action = reg.by_option(row.flag)
        if action is not None:
            for opt in action.option_strings:
                out.setdefault(opt, row.owner)
    return out


def owned_dests(flavour: str = "clawgym") -> Dict[str, Owner]:
    """argparse dest -> the key that owns it (``args.<dest>`` must not set these)."""
    from clawgym.registry import load_registry

    reg = load_registry(flavour)
    out: Dict[str, Owner] = {}
    for row in rows(flavour):
        dest = reg.dest_of(row.flag) or row.flag.lstrip("-").replace("-", "_")
        out.setdefault(dest, row.owner)
    return out


def owner_of_fork_flag(option: str) -> Optional[Owner]:
    """The key owning a fork-only flag (for messages under ``trainer=slime``)."""
    for row in fork_only_rows():
        if row.flag == option:
            return row.owner
    return None
