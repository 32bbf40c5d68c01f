"""Typed schema of every config group.

Each group has one dataclass here, stored in Hydra's ConfigStore as ``base_<group>``
(e.g. ``model=base_model`` selects the bare schema) and typing the group's field of the
root ``base_config``. The YAML options under ``conf/<group>/`` only set what differs and
are merged into that typed field, so they are checked against the schema without a
defaults list of their own (re-loading ``base_<group>`` in each option cost about a
fifth of a dry run). Defaults live here and nowhere else; derived values are
interpolations so that overriding the source moves everything that follows from it.

Struct mode (Hydra's default for structured configs) makes a misspelled key or a
wrongly typed value an error at compose time.

Every key that owns a trainer flag may be ``null``: no flag is emitted and the trainer
keeps its own default (validation and the memory plan reason with that default, read
from the flavour's registry by :mod:`clawgym.trainer.effective`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional

from omegaconf import MISSING

# Every class below is ``@dataclass(eq=False, repr=False)``: they are schemas (OmegaConf reads
# their fields; nothing compares or prints an instance), and generating ``__eq__`` and
# ``__repr__`` over ~270 fields was a third of this module's import, which every dry run pays
# (the typed nodes clawgym.config.compose unpickles refer to these classes).


@dataclass(eq=False, repr=False)
class ModelConfig:
    """Architecture of the policy model, as Megatron needs it.

    The numbers are those of slime's ``scripts/models/<model>.sh``; slime checks them
    against the checkpoint's ``config.json`` at startup (and so does our preflight).
    """

    # Option name; also names the per-model record file.
    name: str = MISSING
    # slime's model family (the scripts/models/ file prefix, e.g. "qwen3", "deepseek-v3"); for the
    # README table and messages only, no flag.
    family: Optional[str] = None
    # Hugging Face repository id of the initial weights.
    hf_repo: str = MISSING
    # Folder name of the downloaded checkpoint under ``<paths.root>/local/models``.
    checkpoint_dirname: str = MISSING
    # The model in run names: exp_name is "clawgym-rl-<run_label>", so runs of different models get
    # their own save dir and W&B group by default. Default: the option name (unique per model).
    run_label: str = "${model.name}"
    # The model name the API server reports (sglang.served_model_name, SERVED_MODEL_NAME).
    served_name: str = "${cg.lower:${model.checkpoint_dirname}}"
    # The checkpoint's context window: config.json's max_position_embeddings of the published
    # checkpoint (text_config's for a multimodal one). Data only, never a trainer flag (the Megatron
    # flag is max_position_embeddings below): rule sglang-context-within-model-window holds
    # rollout.max_context_len and sglang.context_length to it, and the layout search never proposes
    # a longer context. None: unknown, unchecked.
    context_window: Optional[int] = None
    # Transformer layers (config.json num_hidden_layers).
    num_layers: Optional[int] = MISSING
    # Model width (config.json hidden_size).
    hidden_size: Optional[int] = MISSING
    # Dense MLP width (config.json intermediate_size).
    ffn_hidden_size: Optional[int] = MISSING
    # Query heads (config.json num_attention_heads).
    num_attention_heads: Optional[int] = MISSING
    # Grouped-query attention: number of KV heads (config.json num_key_value_heads). None
    # (multi-latent attention) emits neither --group-query-attention nor --num-query-groups.
    num_query_groups: Optional[int] = MISSING
    # Head dimension (config.json head_dim); None leaves Megatron's hidden_size / heads.
    kv_channels: Optional[int] = 128
    # Tokenizer vocabulary (config.json vocab_size).
    vocab_size: Optional[int] = 151936
    # RoPE theta; must equal ``rope_theta`` in the checkpoint's config.json.
    rotary_base: Optional[int] = 1000000
    # Fraction of head dimensions that get rotary embedding (emitted when not None).
    rotary_percent: Optional[float] = None
    # Layer norm type.
    normalization: Optional[str] = "RMSNorm"
    # Norm epsilon; must equal config.json rms_norm_eps. None leaves Megatron's 1e-5.
    norm_epsilon: Optional[float] = 1e-6
    # Linear layers without bias terms (all Qwen3 models).
    disable_bias_linear: bool = True
    # True when the output layer does not share weights with the embedding
    # (``tie_word_embeddings: false`` in config.json).
    untie_embeddings_and_output_weights: bool = False
    # RMS-norm on queries and keys (Qwen3).
    qk_layernorm: bool = True
    # SwiGLU MLP activation.
    swiglu: bool = True
    # How position embeddings are requested: "rotary" emits
    # ``--use-rotary-position-embeddings``, "rope" emits ``--position-embedding-type rope``.
    position_embedding: str = "rotary"
    # Mixture of experts; all None for dense models.
    num_experts: Optional[int] = None
    # Expert MLP width (config.json moe_intermediate_size).
    moe_ffn_hidden_size: Optional[int] = None
    # Experts active per token (config.json num_experts_per_tok).
    moe_router_topk: Optional[int] = None
    # Python-literal layer pattern as slime writes it, e.g. "[1]*48" (1 = MoE layer).
    moe_layer_freq: Optional[str] = None
    # Router scoring ("softmax" for Qwen3 MoE).
    moe_router_score_function: Optional[str] = None
    # How tokens reach experts across ranks.
    moe_token_dispatcher_type: Optional[str] = None
    # Batch expert matmuls into grouped GEMMs.
    moe_grouped_gemm: bool = False
    # Which tokens drop when an expert is over capacity.
    moe_token_drop_policy: Optional[str] = None
    # Router precision.
    moe_router_dtype: Optional[str] = None
    # Fused token permutation kernels.
    moe_permute_fusion: bool = False
    # Load-balancing loss weight (0 for RL fine-tuning).
    moe_aux_loss_coeff: Optional[float] = None
    # --- Fields below are off (None/False: no flag) unless a family needs them. ---
    # Custom layer spec ``[module, function]`` (slime_plugins models: GLM4, GLM5, MiniMax,
    # Qwen3-Next, Qwen3.5); emitted as ``--spec module function``.
    spec: Optional[List[str]] = None
    # Bias on the QKV projection only (Qwen2.5, GLM4, MiMo; config.json attention_bias).
    add_qkv_bias: bool = False
    # Megatron's position-embedding table size / RoPE range (config.json max_position_embeddings).
    max_position_embeddings: Optional[int] = None
    # Training sequence length the model file fixes (GLM4-32B); None leaves slime's default.
    seq_length: Optional[int] = None
    # Extra RMSNorm after attention and after the MLP (GLM4's sandwich norm).
    post_self_attn_layernorm: bool = False
    post_mlp_layernorm: bool = False
    # Rotate interleaved pairs instead of halves (GLM4's RoPE layout).
    rotary_interleaved: bool = False
    # False emits --no-rope-fusion (families whose RoPE the fused kernel does not support).
    apply_rope_fusion: bool = True
    # False emits --no-position-embedding (no learned absolute table beside RoPE; GLM4.7/GLM5).
    add_position_embedding: bool = True
    # False emits --no-masked-softmax-fusion (Moonlight).
    masked_softmax_fusion: bool = True
    # Llama 3.1 RoPE scaling (config.json rope_scaling.rope_type "llama3").
    use_rope_scaling: bool = False
    # RoPE scaling factor (config.json rope_scaling.factor): Llama3 scaling or YaRN for MLA models.
    rotary_scaling_factor: Optional[float] = None
    # YaRN attention scale and its all-dims variant (config.json rope_scaling.mscale / mscale_all_dim).
    mscale: Optional[float] = None
    mscale_all_dim: Optional[float] = None
    # Multi-latent attention (DeepSeek-V3, Kimi-K2, Moonlight, GLM4.7, GLM5).
    multi_latent_attention: bool = False
    # Query low-rank compression (config.json q_lora_rank); None: queries uncompressed.
    q_lora_rank: Optional[int] = None
    # Key/value low-rank compression (config.json kv_lora_rank).
    kv_lora_rank: Optional[int] = None
    # Query/key head dim without the rotary part (config.json qk_nope_head_dim).
    qk_head_dim: Optional[int] = None
    # Rotary part of the query/key head (config.json qk_rope_head_dim).
    qk_pos_emb_head_dim: Optional[int] = None
    # Value head dim (config.json v_head_dim).
    v_head_dim: Optional[int] = None
    # Gated attention output (Qwen3-Next, Qwen3.5); both flags are set together by slime's files.
    use_gated_attention: bool = False
    attention_output_gate: bool = False
    # Norm weights stored as (1 + w) (Qwen3-Next, Qwen3.5).
    apply_layernorm_1p: bool = False
    # Pad the vocabulary to a multiple of this (None: Megatron's 128).
    make_vocab_size_divisible_by: Optional[int] = None
    # Multi-token-prediction layers (config.json num_nextn_predict_layers; MiMo).
    mtp_num_layers: Optional[int] = None
    # Width of the always-on shared expert(s) (config.json shared_expert_intermediate_size,
    # or n_shared_experts x moe_intermediate_size).
    moe_shared_expert_intermediate_size: Optional[int] = None
    # Sigmoid gate on the shared expert's output (Qwen3-Next, Qwen3.5).
    moe_shared_expert_gate: bool = False
    # Softmax before top-k (DeepSeek-style routing).
    moe_router_pre_softmax: bool = False
    # Aux-loss-free balancing bias per expert (config.json topk_method "noaux_tc" / use_routing_bias).
    moe_router_enable_expert_bias: bool = False
    # Update rate of that bias (0 keeps the checkpoint's bias fixed during RL).
    moe_router_bias_update_rate: Optional[float] = None
    # Load-balancing scheme (aux_loss, seq_aux_loss, sinkhorn, none).
    moe_router_load_balancing_type: Optional[str] = None
    # Scale of the routed experts' output (config.json routed_scaling_factor).
    moe_router_topk_scaling_factor: Optional[float] = None
    # Group-limited routing: expert groups and groups picked per token (config.json n_group / topk_group).
    moe_router_num_groups: Optional[int] = None
    moe_router_group_topk: Optional[int] = None
    # Megatron's experimental features (GLM5's sparse attention).
    enable_experimental: bool = False
    # slime's sequential all-gather context-parallel layout (GLM5's sparse attention needs it).
    allgather_cp: bool = False
    # Dropout is off for RL fine-tuning.
    attention_dropout: Optional[float] = 0.0
    # Dropout after attention and MLP blocks.
    hidden_dropout: Optional[float] = 0.0


@dataclass(eq=False, repr=False)
class GpuLayoutConfig:
    """How the node's GPUs are split between the Megatron actor and SGLang."""

    # GPUs on each node (the seed's NUM_GPUS); slime's --num-gpus-per-node.
    num_gpus: Optional[int] = 8
    # Nodes the actor spans.
    actor_num_nodes: Optional[int] = 1
    # GPUs per node for the Megatron actor (the seed's ACTOR_GPUS).
    actor_gpus: Optional[int] = 4
    # GPUs for the SGLang engines (the seed's ROLLOUT_GPUS).
    rollout_gpus: Optional[int] = 4
    # Training and inference share the same GPUs, swapped by offloading.
    colocate: bool = False
    # False: no rollout engine at all (SFT: slime's --debug-train-only; the trainer reads
    # its data itself, no SGLang engine starts and rollout_gpus should be null).
    rollout_engine: bool = True
    # Colocated runs need the synchronous driver; split runs use the one-step-off-policy one.
    trainer_script: str = "${cg.pick:${.colocate},train.py,train_async.py}"
    # gpu_layout=auto: clawgym's layout search (clawgym/search) picks the layout for num_gpus x num_nodes
    # GPUs before validation and replaces the counts above, TP/PP/CP/EP, recompute, offload and the
    # engines' size with the fastest layout that starts and fits; keys set on the command line stay.
    # No flag of its own.
    auto: bool = False
    # Nodes of num_gpus GPUs the search may use (gpu_layout=auto only; no flag).
    num_nodes: int = 1


@dataclass(eq=False, repr=False)
class RolloutConfig:
    """Per-iteration rollout data and decoding, and the OpenClaw training workers."""

    # Slime's rollout hook (ClawGym-RL drives OpenClaw gateways from it).
    function_path: Optional[str] = "clawgym_rl_rollout.generate_rollout_clawgym_rl"
    # Custom per-sample generate hook (the ClawGymRL API server); None leaves slime's own.
    generate_function_path: Optional[str] = "clawgym_rl_api_server.generate"
    # Custom reward hook; None leaves slime's own (``--rm-type``).
    reward_function_path: Optional[str] = "clawgym_rl_api_server.reward_func"
    # ClawGym-RL manages its own task data; slime's global dataset stays off.
    global_dataset: bool = False
    # Total rollout iterations (huge = run until stopped).
    num_rollout: Optional[int] = 100000000
    # Distinct tasks per rollout.
    batch_size: Optional[int] = 8
    # Samples per task; GRPO compares samples of the same task.
    n_samples_per_prompt: Optional[int] = 8
    # Max tokens of one model generation (also OPENCLAW_MAX_TOKENS).
    max_response_len: Optional[int] = 8192
    # Max context of a conversation (also OPENCLAW_CONTEXT_WINDOW); None leaves slime's default (no limit).
    # Default: the seed's 65536, capped at the checkpoint's window (model.context_window) when the zoo
    # knows it: SGLang refuses a longer context at engine start (rule sglang-context-within-model-window).
    max_context_len: Optional[int] = "${cg.cap:65536,${model.context_window}}"  # type: ignore[assignment]
    # Sampling temperature; GRPO needs sample diversity, so > 0.
    temperature: Optional[float] = 0.7
    # Key of the reward dict used as the scalar score; None when the reward is a scalar.
    reward_key: Optional[str] = "score"
    # Gradient updates per rollout (1 = standard online GRPO); None when args.global_batch_size sizes
    # the steps instead (slime refuses both when they disagree).
    num_steps_per_rollout: Optional[int] = 1
    # Concurrent OpenClaw containers during training rollouts.
    train_num_workers: int = 64
    # User messages sent to the gateway per training task.
    train_max_turns: int = 1


@dataclass(eq=False, repr=False)
class GrpoConfig:
    """Advantage estimation and policy loss."""

    # Advantage estimator (slime --advantage-estimator).
    advantage_estimator: Optional[str] = "grpo"
    # Split samples of one trajectory share one baseline (ClawGym fork flag).
    dynamic_history: bool = True
    # KL term in the loss against the reference model (loads --ref-load).
    use_kl_loss: bool = True
    # Weight of the KL term (0 = logged, not penalised).
    kl_loss_coef: Optional[float] = 0.0
    # KL estimator: k1, k2, k3 or low_var_kl.
    kl_loss_type: Optional[str] = "low_var_kl"
    # Entropy bonus weight (raise to encourage exploration).
    entropy_coef: Optional[float] = 0.0
    # PPO clip range, lower and upper.
    eps_clip: Optional[float] = 0.2
    # Upper bound, a bit higher to allow small positive drift.
    eps_clip_high: Optional[float] = 0.28
    # Tolerate missing samples by resizing the global batch (ClawGym fork flag).
    use_dynamic_global_batch_size: bool = True
    # DAPO-style token-level loss normalisation.
    calculate_per_token_loss: bool = True


@dataclass(eq=False, repr=False)
class PerfConfig:
    """Megatron parallelism, recompute, batching and numerics."""

    # Tensor parallel size; the seed ties it to the actor GPUs.
    tensor_parallel: Optional[int] = "${gpu_layout.actor_gpus}"  # type: ignore[assignment]
    # Shard activations along the sequence within TP (less TP traffic); on whenever TP > 1 (Megatron
    # turns it off at TP 1 anyway, so the default follows perf.tensor_parallel and a 1-GPU layout is warning-free).
    sequence_parallel: bool = "${cg.above:${.tensor_parallel},1}"  # type: ignore[assignment]
    # Pipeline stages.
    pipeline_parallel: Optional[int] = 1
    # Context-parallel ranks for long sequences.
    context_parallel: Optional[int] = 1
    # Expert-parallel ranks (MoE).
    expert_parallel: Optional[int] = 1
    # Tensor parallel size inside each expert.
    expert_tensor_parallel: Optional[int] = 1
    # "full" or "selective"; None leaves recompute off.
    recompute_granularity: Optional[str] = "full"
    # "uniform" or "block" (full recompute only).
    recompute_method: Optional[str] = "uniform"
    # Layers per recompute unit.
    recompute_num_layers: Optional[int] = 1
    # Batch by token count rather than sample count.
    use_dynamic_batch_size: bool = True
    # Token budget per GPU micro-batch (needed by dynamic batch size).
    max_tokens_per_gpu: Optional[int] = 65536
    # Chunk size of log-prob computation (guards against OOM); None leaves slime's default (no chunks).
    log_probs_chunk_size: Optional[int] = 1024
    accumulate_allreduce_grads_in_fp32: bool = True
    attention_softmax_in_fp32: bool = True
    # Megatron attention kernel (flash, fused, unfused, local, auto); None leaves Megatron's default.
    attention_backend: Optional[str] = "flash"


@dataclass(eq=False, repr=False)
class OptimizerConfig:
    """Optimizer and learning-rate schedule."""

    # Optimizer (Megatron --optimizer).
    name: Optional[str] = "adam"
    # Learning rate (RL fine-tuning: 1e-6 to 1e-5).
    lr: Optional[float] = 1e-6
    # LR schedule (constant, linear, cosine, ...).
    lr_decay_style: Optional[str] = "constant"
    # Decoupled weight decay.
    weight_decay: Optional[float] = 0.1
    adam_beta1: Optional[float] = 0.9
    adam_beta2: Optional[float] = 0.98
    # Optimizer state in host memory; needs the precision-aware optimizer.
    cpu_offload: bool = True
    overlap_cpu_optimizer_d2h_h2d: bool = True
    # Required by Megatron when the optimizer state is offloaded.
    use_precision_aware_optimizer: bool = True


@dataclass(eq=False, repr=False)
class EvalConfig:
    """Periodic evaluation on the eval task set."""

    # Evaluate every N rollouts; None turns periodic eval off.
    interval: Optional[int] = 5
    # Eval reuses the rollout hook unless set otherwise; None leaves slime's choice (the rollout hook).
    function_path: Optional[str] = "${rollout.function_path}"
    # Skip the evaluation that the synchronous driver runs before the first step.
    skip_before_train: bool = False
    # Concurrent OpenClaw containers during evaluation.
    num_workers: int = 32
    # User messages per eval task.
    max_turns: int = 1
    # Samples per eval task.
    n_samples: int = 1


@dataclass(eq=False, repr=False)
class SglangServerGroup:
    """One server group of slime's ``--sglang-config`` (slime/backends/sglang_utils/sglang_config.py:
    ServerGroupConfig)."""

    # "regular", "prefill", "decode", "placeholder" or "encoder".
    worker_type: str = "regular"
    # GPUs of the group (> 0).
    num_gpus: int = MISSING  # type: ignore[assignment]
    # GPUs per engine; None: the model's, else --rollout-num-gpus-per-engine.
    num_gpus_per_engine: Optional[int] = None
    # SGLang ServerArgs field overrides applied on top of the --sglang-* flags.
    overrides: Dict[str, Any] = field(default_factory=dict)


@dataclass(eq=False, repr=False)
class SglangModel:
    """One model deployment of slime's ``--sglang-config`` (sglang_config.py: ModelConfig)."""

    # Unique name (e.g. "actor", "reward", "default").
    name: str = MISSING
    # HF checkpoint; None: --hf-checkpoint.
    model_path: Optional[str] = None
    # Default GPUs per engine of its groups; None: --rollout-num-gpus-per-engine.
    num_gpus_per_engine: Optional[int] = None
    server_groups: List[SglangServerGroup] = field(default_factory=list)
    # Receives training weight updates; None: slime infers it from model_path.
    update_weights: Optional[bool] = None


@dataclass(eq=False, repr=False)
class SglangConfig:
    """SGLang engines and the ClawGymRL API server in front of them."""

    # slime's --sglang-config (engine groups: PD disaggregation, several models): clawgym writes
    # ``{"sglang": models}`` as YAML to ``<paths.save>/clawgym/sglang_config.yaml`` at launch and
    # passes that path. Empty: no --sglang-config.
    models: List[SglangModel] = field(default_factory=list)

    # GPUs per SGLang engine (tensor parallel); slime's --rollout-num-gpus-per-engine.
    tp: Optional[int] = 1
    # SGLang tool-call parser for the model's chat format; None for runs without tool calls.
    tool_call_parser: Optional[str] = "qwen25"
    # Chain-of-thought parser; None leaves it off.
    reasoning_parser: Optional[str] = None
    # Share of GPU memory SGLang reserves (weights + KV cache).
    mem_fraction_static: Optional[float] = 0.8
    # Must hold the longest rollout context, or long conversations are rejected with 400;
    # None leaves SGLang's default (the checkpoint's config.json).
    context_length: Optional[int] = "${rollout.max_context_len}"  # type: ignore[assignment]
    # Model name the API server reports to the OpenClaw gateways.
    served_model_name: str = "${model.served_name}"
    # API server bind address; loopback unless the gateways run elsewhere.
    api_host: str = "127.0.0.1"
    # API server port the OpenClaw gateways talk to.
    api_port: int = 30001
    # Record per-turn JSONL logs of every conversation.
    record: bool = False


@dataclass(eq=False, repr=False)
class SandboxConfig:
    """Where each OpenClaw agent runs during rollouts."""

    # "docker": one container per task from ``image``; "chroot": a chroot into ``rootfs``;
    # "none": no agent sandbox (prompt-data RL, SFT, distillation; conf/sandbox/none.yaml).
    backend: str = "docker"
    # Gateway image (docker backend; still passed to the job as OPENCLAW_GATEWAY_IMAGE).
    image: str = "clawgym-rl:v0.1"
    # OpenClaw rootfs for the chroot backend.
    rootfs: Optional[str] = None
    # Name prefix of the per-task containers the rollout code creates.
    container_prefix: str = "clawgym-rl-"
    # Remove leftover containers (prefix and image both match) before a launch.
    cleanup_leftovers: bool = True


@dataclass(eq=False, repr=False)
class PathsConfig:
    """Filesystem layout; everything derives from the ClawGym-RL checkout by default."""

    # The ClawGym-RL checkout (the seed's SCRIPT_DIR, ClawGym-Agents/RL).
    root: str = "${oc.env:CLAWGYM_RL_ROOT,${cg.cwd:}}"
    # slime checkout (the job's working dir).
    slime: str = "${.root}/slime"
    # Megatron-LM checkout (first on the job's PYTHONPATH).
    megatron: str = "${.root}/Megatron-LM"
    # HF-format initial weights.
    hf_checkpoint: Optional[str] = "${.root}/local/models/${model.checkpoint_dirname}"
    # Reference model for KL (usually the initial weights).
    ref_load: Optional[str] = "${.hf_checkpoint}"
    # Training output; checkpoints, logs and config snapshots go here.
    save: Optional[str] = "${.root}/exp/${run_name}"
    # OpenClaw training tasks (one folder per task).
    train_tasks: str = "${.root}/data/clawgym_train"
    # OpenClaw eval tasks.
    eval_tasks: str = "${.root}/data/clawgym_eval"
    # Per-turn JSONL record (written when sglang.record is on).
    record_file: str = "${.root}/results/${model.name}_record.jsonl"


@dataclass(eq=False, repr=False)
class CheckpointConfig:
    """Checkpoint format and schedule."""

    # Megatron <-> HF weight conversion mode (ClawGym fork flag; None under trainer=slime).
    megatron_to_hf_mode: Optional[str] = "bridge"
    # Save every N rollouts; None saves never.
    save_interval: Optional[int] = 5
    # Megatron checkpoint to resume from (set by ``clawgym resume``); None starts fresh.
    load: Optional[str] = None
    # Retention (slime has none: every save is kept). Keep the newest N complete checkpoints
    # (complete: at or below the tracker latest_checkpointed_iteration.txt); older ones are pruned by
    # the supervisor while the run is alive, never while a save is running, never the newest complete
    # one, and an iter_* newer than the tracker (a save not finalized) is reported, not deleted.
    # None: keep every checkpoint. The disk guard reserves room for keep_last + 1 checkpoints.
    keep_last: Optional[int] = None
    # Also keep every checkpoint whose iteration is a multiple of K (milestones); None: none kept this way.
    keep_every: Optional[int] = None


@dataclass(eq=False, repr=False)
class RayConfig:
    """The Ray cluster the job runs on."""

    # Address of an existing cluster's dashboard (e.g. http://head:8265); None starts a local head.
    address: Optional[str] = None
    # Node IP of a local head (the seed's MASTER_ADDR).
    node_ip: str = "127.0.0.1"
    # GPUs the local head declares; None lets Ray detect the node's GPUs.
    num_gpus: Optional[int] = "${gpu_layout.num_gpus}"  # type: ignore[assignment]
    # GCS port of a local head.
    port: int = 6379
    # Dashboard bind address of a local head; loopback unless asked.
    dashboard_host: str = "127.0.0.1"
    # Dashboard (Jobs API) port of a local head.
    dashboard_port: int = 8265
    # Keep a head that clawgym started running after the run or sweep ends.
    keep_head: bool = False
    # Submit and return at once instead of following the job.
    detach: bool = False
    # Existing cluster only: pass secrets in the runtime env (Ray keeps them in job metadata).
    pass_secrets_in_runtime_env: bool = False
    # Seconds to keep retrying a Ray dashboard that stopped answering while a job is followed
    # (a dashboard restart takes seconds; a lost node or network takes longer), then give up and
    # exit non-zero: the job may still run (see `clawgym jobs status`).
    lost_contact_s: float = 300.0
    # Seed health-check tuning, so slow nodes are not declared dead at scale.
    health_check_failure_threshold: int = 20
    # Health-check period.
    health_check_period_ms: int = 5000
    # Health-check timeout.
    health_check_timeout_ms: int = 30000
    # Missed heartbeats before a node is declared dead.
    num_heartbeats_timeout: int = 60


@dataclass(eq=False, repr=False)
class ClusterConfig:
    """Where the run's Ray cluster comes from (the ``cluster`` group)."""

    # "local": a head clawgym starts on this machine (or ray.address, as before the group
    # existed); "existing": the cluster at ray.address; "slurm": a SLURM batch job that starts
    # Ray across its allocation (settings in slurm.*); "kuberay": a KubeRay RayJob manifest
    # (settings in kuberay.*).
    backend: str = "local"


@dataclass(eq=False, repr=False)
class SlurmConfig:
    """The batch job of ``cluster=slurm``. Unset (null) settings are left to the cluster's defaults.

    Names follow sbatch's options (and Hydra's submitit launcher where sbatch has none).
    """

    # sbatch --partition; null: the cluster's default partition.
    partition: Optional[str] = None
    # sbatch --account; null: the user's default account.
    account: Optional[str] = None
    # sbatch --qos; null: the association's default QOS.
    qos: Optional[str] = None
    # sbatch --time, in SLURM's formats ("90", "4:00:00", "2-00:00:00"); null: the partition's default.
    time: Optional[str] = None
    # sbatch --nodes; null: from the layout (GPUs the run holds / gpu_layout.num_gpus, rounded up).
    nodes: Optional[int] = None
    # GPUs per node (--gres=gpu:N); null: gpu_layout.num_gpus on several nodes, the GPUs the run holds on one.
    gpus_per_node: Optional[int] = None
    # GPU type in the gres request (--gres=gpu:TYPE:N), e.g. h100; null: any type.
    gpu_type: Optional[str] = None
    # CPUs per node (one task per node, --cpus-per-task); null: the partition's default.
    cpus_per_node: Optional[int] = None
    # sbatch --mem (memory per node, e.g. "480G"; "0" asks for all of it); null: the partition's default.
    mem_per_node: Optional[str] = None
    # sbatch --job-name (squeue shows it).
    job_name: str = "${run_name}"
    # Extra #SBATCH lines, verbatim after "#SBATCH ", e.g. ["--exclusive", "--constraint=h100"].
    extra_sbatch: List[str] = field(default_factory=list)
    # Shell lines run first in the batch script (module load, conda activate ...).
    setup: List[str] = field(default_factory=list)
    # Interpreter that runs clawgym inside the allocation; null: the launcher's own (a shared filesystem
    # is assumed, as for the checkout and the save dir).
    python: Optional[str] = None
    # Seconds before the time limit SLURM signals the batch script. Supervised (restart.enabled, the
    # default): --signal=B:USR1@N, and the supervisor in the allocation records the attempt's end, stops
    # the Ray job and requeues the job (scontrol requeue; --requeue is set) to resume from the last
    # complete checkpoint; 120 s covers that (seconds) and SLURM's own slack (the signal may come up to
    # 60 s early). restart.enabled=false: --signal=B:TERM@N, so the Ray job and Ray stop cleanly instead
    # of being killed.
    signal_delay_s: int = 120
    # Address the Ray head binds on a multi-node job; null: the first node's first address
    # (hostname -I). One-node jobs stay on loopback.
    head_ip: Optional[str] = None
    # Seconds to wait for every node of the allocation to join Ray with its GPUs.
    wait_nodes_s: int = 300


@dataclass(eq=False, repr=False)
class KubeRayConfig:
    """The KubeRay RayJob of ``cluster=kuberay`` (spec of KubeRay v1.3, apiVersion ray.io/v1)."""

    # Container image of the head and worker pods: Ray, slime, Megatron-LM and the ClawGym-RL
    # checkout at paths.root (or that checkout on the PVC). Required.
    image: Optional[str] = None
    # Namespace of the RayJob; null: kubectl's current namespace.
    namespace: Optional[str] = None
    # metadata.name; null: from the run's submission id (lowercased, DNS-1123).
    name: Optional[str] = None
    # spec.rayClusterSpec.rayVersion; should match the image's Ray.
    ray_version: Optional[str] = None
    # PersistentVolumeClaim mounted in every pod at mount_path (checkpoints must outlive the pods).
    pvc: Optional[str] = None
    # Where the PVC is mounted; the save dir must be on it.
    mount_path: Optional[str] = "${paths.save}"
    # Kubernetes Secret whose keys are named after the job's secret variables (WANDB_API_KEY,
    # SGLANG_API_KEY); pods read them through secretKeyRef, so no value is in the manifest.
    secret_name: str = "clawgym-secrets"
    # Delete the Ray cluster when the job ends (spec.shutdownAfterJobFinishes).
    shutdown_after_job_finishes: bool = True
    # Seconds the finished RayJob (and, with shutdown, its cluster) is kept (spec.ttlSecondsAfterFinished).
    ttl_seconds_after_finished: int = 3600
    # spec.activeDeadlineSeconds: the job fails after this long; null: no deadline.
    active_deadline_seconds: Optional[int] = None
    # CPU and memory requests/limits per pod (e.g. "16", "64Gi"); null: the namespace's defaults.
    head_cpu: Optional[str] = None
    head_memory: Optional[str] = None
    worker_cpu: Optional[str] = None
    worker_memory: Optional[str] = None
    # Without dry_run: run `kubectl apply -f` on the manifest (needs kubectl and a context); false prints how.
    apply: bool = False
    # kubectl --context; null: the current context.
    context: Optional[str] = None
    # Where clawgym follows an applied RayJob's job (Ray Jobs API), e.g. http://127.0.0.1:8265 after
    # `kubectl port-forward svc/<cluster>-head-svc 8265:8265`; null: the RayJob's status.dashboardURL
    # (a cluster-internal address: reachable when clawgym runs inside the Kubernetes cluster).
    dashboard_address: Optional[str] = None
    # Seconds to wait for that dashboard to answer and list the job (image pulls and scheduling first).
    wait_dashboard_s: int = 1800


@dataclass(eq=False, repr=False)
class WandbConfig:
    """Weights & Biases logging."""

    # None: on when a key is in the environment at launch (as the seed); true/false force it.
    enabled: Optional[bool] = None
    # W&B project.
    project: str = "clawgym_rl"
    # --wandb-group. slime appends a random suffix per run and names the run
    # "<group>_<suffix>-RANK_0", so the run name (exp_name plus the swept overrides) goes
    # here to reach the W&B run's name; the experiment name is also a tag.
    group: str = "${run_name}"
    # Environment variables the key is read from, first found wins (the seed's order).
    key_env: List[str] = field(default_factory=lambda: ["WANDB_KEY", "WANDB_API_KEY"])
    # Give the run clawgym's nested config through a file under the save dir (wandb.init fails if
    # the job cannot read it). None: only with a local head; true: the cluster shares the save dir.
    config_file: Optional[bool] = None


@dataclass(eq=False, repr=False)
class TrainerConfig:
    """Which trainer the job runs: it decides the flag registry that checks the argv, the flags
    the plan may emit, and the defaults of other groups (``conf/trainer/<flavour>.yaml``)."""

    # "clawgym": the ClawGym-Agents RL/slime fork (strict parser, fork-only flags such as
    # --dynamic-history); "slime": upstream THUDM/slime. Names the flag registry
    # clawgym/registry/data/<flavour>.json; choose it with trainer=<flavour>, not by setting this.
    flavour: str = "clawgym"
    # Give the job the ClawGym-RL agent environment (OPENCLAW_*, the API server's HOST/PORT and
    # parsers): the fork's rollout and API-server hooks read it; upstream slime has no use for it.
    agent_env: bool = True


@dataclass(eq=False, repr=False)
class MemoryConfig:
    """The GPU the per-GPU memory plan is checked against (``clawgym/memory/``)."""

    # A GPU model of the plan's table (h100_80gb, h200_141gb, a100_80gb, a100_40gb, b200_180gb).
    # None: the GPU the preflight's NVML check finds on this node; with none found (a login node)
    # the plan assumes h100_80gb and says so.
    gpu: Optional[str] = None
    # Usable GPU memory in GiB (2^30 bytes), overriding the table's (e.g. a MIG slice); None: the table's.
    gpu_memory_gib: Optional[float] = None


@dataclass(eq=False, repr=False)
class MetricsConfig:
    """Metrics kept with the run, readable without W&B or network (``clawgym runs``, ``clawgym report``)."""

    # slime writes its TensorBoard events (every metric of slime/utils/logging_utils.py:log) into
    # ``<paths.save>/tensorboard/<submission id>/``: ``--use-tensorboard`` turns the writer on and
    # ``TENSORBOARD_DIR`` in the job env names the folder (slime/utils/tensorboard_utils.py:
    # _TensorboardAdapter, both flavours). Beside W&B when that is on too. The trainer's
    # environment needs the ``tensorboard`` package (torch's SummaryWriter imports it).
    # false: no events (as the seed); the runs table then shows the snapshots only.
    tensorboard: bool = True


#: The actions of the health rules (``health.*_action``): stopped for good, ended with the rule's
#: class (the recovery table decides), or not polled.
HEALTH_ACTIONS = ("stop", "end", "off")


@dataclass(eq=False, repr=False)
class HealthConfig:
    """What the supervisor watches while a run trains: hangs, its own metrics, the disk (``clawgym/supervisor/``).

    Every action is "stop" (stopped for good: a restart would train on the same garbage), "end"
    (the attempt ends with the rule's class and the recovery table decides whether to restart) or
    "off" (the rule is not polled)."""

    # Seconds with no new rollout or train step in the run's events and no new line in its log after
    # which the run is a hang: the Python stacks of its processes are dumped into the save dir (py-spy)
    # and the attempt ends with class "hang" (restarted from the last complete checkpoint).
    # None: 3 x the step-time model's longest phase (rollout, log-probs, train, weight update),
    # never below 300 s (clawgym/supervisor/hang.py STALL_FLOOR_S: a save or a first step's compile
    # outlasts a phase's model).
    stall_s: Optional[float] = None
    # train/loss or a reward (rollout/raw_reward, openclaw/avg_reward_submitted) NaN or inf: the
    # optimizer has been fed garbage.
    nan_action: str = "stop"
    # train/train_rollout_logprob_abs_diff (trainer vs rollout engine log-probs of the same tokens)
    # above this after the first weight update: a trainer/engine pair that disagrees (a broken
    # weight sync or version pair) trains off-policy on garbage. Logged by upstream slime's Megatron
    # and FSDP backends, by the ClawGym fork's FSDP backend only (clawgym explain says so).
    # 0.1 is slime's own bound for it (--ci-train-rollout-logprob-abs-diff-threshold, default 0.1,
    # slime/utils/arguments.py, asserted in slime/backends/megatron_utils/model.py under --ci-test;
    # THUDM/slime main 624b824a8). Public curves put it well on either side: a healthy Qwen3-4B GRPO
    # run logged 0.011 -> 0.036 over 30 rollouts (vllm-project/vime#64), a run reported as broken
    # 0.2-0.4 (Gen-Verse/OpenClaw-RL#69). Not measured here: set it from a healthy run's curve. None: off.
    logprob_diff_max: Optional[float] = 0.1
    logprob_diff_action: str = "stop"
    # Rollouts in a row whose mean reward is exactly 0 while samples are produced
    # (openclaw/total_samples > 0, or rollout/raw_reward logged): a broken reward script or sandbox.
    # None: off.
    zero_reward_rollouts: Optional[int] = 5
    zero_reward_action: str = "end"
    # Share of a rollout's trajectories whose sandbox failed: (openclaw/skipped_trajectories +
    # openclaw/timed_out_trajectories) / (openclaw/submitted_trajectories + both); failed sandboxes are
    # scored 0 and bias every group's baseline. None: off.
    sandbox_failure_max: Optional[float] = 0.5
    sandbox_failure_action: str = "end"
    # Stop the run cleanly before a save would fill the save dir's filesystem (and refuse, at
    # preflight, a save dir that cannot hold checkpoint.keep_last + 1 checkpoints).
    disk_guard: bool = True


@dataclass(eq=False, repr=False)
class RestartConfig:
    """What clawgym does when a training run ends before its last rollout (``clawgym/supervisor/``;
    docs/guide/when-a-run-dies.md lists every class of end and its recovery). Dry runs are never
    supervised."""

    # Supervise every launch that trains: classify each end and resume from the last complete
    # checkpoint (``latest_checkpointed_iteration.txt``). false: a run that dies stays dead until
    # ``clawgym resume``.
    enabled: bool = True
    # Restarts at most, after the first attempt (3: up to 4 attempts). 0 classifies and records
    # each end but never restarts. The supervisor also stops early when two attempts in a row end
    # without a new complete checkpoint, or the same class ends two attempts at the same iteration.
    # cluster=slurm: counted across the job's allocations (restarts inside one and requeues);
    # cluster=kuberay: the RayJob's spec.backoffLimit (KubeRay's retries, each resuming).
    max_attempts: int = 3
    # Seconds between two looks at the running job (its status, the monitors of the run).
    poll_s: float = 10.0
    # cluster=existing: after a lost node (class node-lost), how many seconds the supervisor waits for
    # the cluster to have the GPUs the run holds free again (an autoscaler or an admin bringing the
    # node back) before it resubmits; past that it stops the run, and `clawgym resume <save dir>` goes
    # on once the node is back. 0: stop at once when the GPUs are short.
    node_wait_s: float = 1800.0


@dataclass(eq=False, repr=False)
class TeacherServerConfig:
    """An SGLang server beside the trainer (on-policy distillation's teacher), run inside the
    job: started before the trainer, health-checked, and stopped when the trainer exits."""

    # Off unless a run needs it (conf/services/opd_teacher.yaml turns it on).
    enabled: bool = False
    # The teacher's HF checkpoint (sglang --model-path).
    model_path: Optional[str] = None
    # Bind address and port (the trainer reaches it at http://host:port, e.g. through --rm-url).
    host: str = "127.0.0.1"
    port: int = 13141
    # Tensor parallel size (sglang --tp).
    tp: int = 1
    # CUDA_VISIBLE_DEVICES of the server (GPUs of the node outside the trainer's and rollout's), e.g. "7".
    gpus: Optional[str] = None
    # sglang --mem-fraction-static; None: SGLang's own.
    mem_fraction_static: Optional[float] = None
    # Any other sglang.launch_server arguments, verbatim.
    extra_args: List[str] = field(default_factory=list)
    # Path polled until it answers 200 before the trainer starts.
    health_path: str = "/health_generate"
    # Seconds to wait for the server to answer before the job fails.
    startup_timeout_s: float = 1800.0


@dataclass(eq=False, repr=False)
class ServicesConfig:
    """Servers clawgym runs inside the job beside the trainer (the ``services`` group)."""

    teacher: TeacherServerConfig = field(default_factory=TeacherServerConfig)


@dataclass(eq=False, repr=False)
class ClawGymConfig:
    """Root of the composed config."""

    # The model group (conf/model/).
    model: ModelConfig = field(default_factory=ModelConfig)
    # The gpu_layout group (conf/gpu_layout/).
    gpu_layout: GpuLayoutConfig = field(default_factory=GpuLayoutConfig)
    # The rollout group (conf/rollout/).
    rollout: RolloutConfig = field(default_factory=RolloutConfig)
    # The grpo group (conf/grpo/).
    grpo: GrpoConfig = field(default_factory=GrpoConfig)
    # The perf group (conf/perf/).
    perf: PerfConfig = field(default_factory=PerfConfig)
    # The optimizer group (conf/optimizer/).
    optimizer: OptimizerConfig = field(default_factory=OptimizerConfig)
    # The eval group (conf/eval/).
    eval: EvalConfig = field(default_factory=EvalConfig)
    # The sglang group (conf/sglang/).
    sglang: SglangConfig = field(default_factory=SglangConfig)
    # The sandbox group (conf/sandbox/).
    sandbox: SandboxConfig = field(default_factory=SandboxConfig)
    # The paths group (conf/paths/).
    paths: PathsConfig = field(default_factory=PathsConfig)
    # The checkpoint group (conf/checkpoint/).
    checkpoint: CheckpointConfig = field(default_factory=CheckpointConfig)
    # The ray group (conf/ray/).
    ray: RayConfig = field(default_factory=RayConfig)
    # The wandb group (conf/wandb/).
    wandb: WandbConfig = field(default_factory=WandbConfig)
    # The cluster group (conf/cluster/): where the Ray cluster comes from.
    cluster: ClusterConfig = field(default_factory=ClusterConfig)
    # SLURM batch job settings (used by cluster=slurm).
    slurm: SlurmConfig = field(default_factory=SlurmConfig)
    # KubeRay RayJob settings (used by cluster=kuberay).
    kuberay: KubeRayConfig = field(default_factory=KubeRayConfig)
    # The trainer group (conf/trainer/): ClawGym fork or upstream slime.
    trainer: TrainerConfig = field(default_factory=TrainerConfig)
    # The memory group (conf/memory/): the GPU the memory plan is checked against.
    memory: MemoryConfig = field(default_factory=MemoryConfig)
    # The metrics group (conf/metrics/): TensorBoard events in the save dir.
    metrics: MetricsConfig = field(default_factory=MetricsConfig)
    # The services group (conf/services/): servers run in the job beside the trainer.
    services: ServicesConfig = field(default_factory=ServicesConfig)
    # The restart group (conf/restart/): a run that dies is classified and resumed.
    restart: RestartConfig = field(default_factory=RestartConfig)
    # The health group (conf/health/): what the supervisor watches while the run trains.
    health: HealthConfig = field(default_factory=HealthConfig)
    # Experiment name (the seed's EXP_NAME): the run name's stem and a W&B tag.
    exp_name: str = "clawgym-rl-${model.run_label}"
    # Name of this run: save dir and W&B run. Sweep jobs get the swept overrides appended.
    run_name: str = "${exp_name}"
    # Print and write the launch plan, start nothing.
    dry_run: bool = False
    # Run the preflight checks and stop.
    preflight_only: bool = False
    # Preflight checks to skip, by name (clawgym/preflight/__init__.py lists them); "leftovers" skips the
    # leftover-container cleanup, "checkout" also the dry run's check that paths.root is a folder here.
    skip_checks: List[str] = field(default_factory=list)
    # Any other trainer flag, by its argparse dest: ``args.lr_warmup_iters=10``. Checked against
    # the trainer flavour's flag registry (name, type, choices, switches take booleans, nargs
    # take lists) and emitted after the curated flags; ``clawgym flags`` lists them. Free-form
    # (not struct) so that ``args.<dest>=`` needs no ``+``; a flag a group key owns is refused.
    args: Dict[str, Any] = field(default_factory=dict)
    # Raw trainer argv tokens appended verbatim, for what ``args`` cannot express; every flag
    # must still exist in the registry, parse with its type, and not be owned by a key or ``args``.
    extra_args: List[str] = field(default_factory=list)
    # Extra environment variables for the job (never secrets: they are stored).
    extra_env: Dict[str, str] = field(default_factory=dict)


#: Config groups with their schema class, in the order the defaults list composes them.
GROUPS: Dict[str, Any] = {
    "model": ModelConfig,
    "gpu_layout": GpuLayoutConfig,
    "rollout": RolloutConfig,
    "grpo": GrpoConfig,
    "perf": PerfConfig,
    "optimizer": OptimizerConfig,
    "eval": EvalConfig,
    "sglang": SglangConfig,
    "sandbox": SandboxConfig,
    "paths": PathsConfig,
    "checkpoint": CheckpointConfig,
    "ray": RayConfig,
    "wandb": WandbConfig,
    "cluster": ClusterConfig,
    "trainer": TrainerConfig,
    "memory": MemoryConfig,
    "metrics": MetricsConfig,
    "services": ServicesConfig,
    "restart": RestartConfig,
    "health": HealthConfig,
}
