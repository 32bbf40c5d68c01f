"""The trainer's own startup checks, stated in its terms, per flavour.

Each rule mirrors a check of the code a launch meets after the GPUs are held: slime's
``parse_args`` stages (``slime_validate_args``, Megatron's ``validate_args``, slime's SGLang
``validate_args``), the drivers, the train actors' ``initialize_model_parallel``, the
micro-batch calculator and ``TransformerConfig.__post_init__``, and SGLang's ``ServerArgs``.
Its docstring's ``Mirrors:`` line names the trainer file and function (paths of the ClawGym
fork, ClawGym-Agents ``RL/`` at 0e8526d8, and of upstream slime v0.3.1 with Megatron-LM
1dcf0daf; where the flavours differ the rule says so). Values are read as the trainer will
see them (:mod:`clawgym.validate.trainer_view`): a curated key, ``args.*``, ``extra_args`` or
the trainer's default. What the trainer accepts but rewrites, or leaves idle, is a warning.

Rules clawgym adds on purpose (they start but cannot work) say so in their docstring.
"""

from __future__ import annotations

from typing import Any, List, Mapping, Optional, Tuple

from clawgym.validate.core import Collector
from clawgym.validate.trainer_view import trainer_args


def _int(x: Any) -> Optional[int]:
    return x if isinstance(x, int) and not isinstance(x, bool) else None


def _divisors(n: int) -> List[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


def _nearest(options: List[int], want: int) -> int:
    return min(options, key=lambda d: (abs(d - want), -d))


def _key(v: Collector, option: str, fallback: str) -> str:
    """The config key that sets ``option`` (for naming it in a report), else ``fallback``."""
    return trainer_args(v).source(option) or fallback


def _sizes(v: Collector):
    """(world, TP, PP, CP, EP, ETP) as Megatron's validate_args sees them, or None if any is not a positive int."""
    t = trainer_args(v)
    g = v.c["gpu_layout"]
    world = _int(g["actor_gpus"]) and _int(g["actor_num_nodes"]) and g["actor_gpus"] * g["actor_num_nodes"]
    tp, pp, cp = (_int(t.get(o)) for o in ("--tensor-model-parallel-size", "--pipeline-model-parallel-size",
                                           "--context-parallel-size"))
    ep = _int(t.get("--expert-model-parallel-size"))
    etp = t.get("--expert-tensor-parallel-size")
    # Megatron's validate_args: expert_tensor_parallel_size None -> tensor_model_parallel_size.
    etp = tp if etp is None else _int(etp)
    sizes = (world, tp, pp, cp, ep, etp)
    if any(s is None or s <= 0 for s in sizes):
        return None
    return sizes


# ---------------------------------------------------------------- Megatron: parallel groups

def rule_world_divisible_by_model_parallel(v: Collector) -> None:
    """The actor's GPUs are TP x PP x CP x data parallel.

    Mirrors: Megatron-LM megatron/training/arguments.py:validate_args ("world size is not divisible
    by total_model_size") and megatron/core/parallel_state.py:initialize_model_parallel.
    """
    sizes = _sizes(v)
    if sizes is None:
        return
    world, tp, pp, cp, _, _ = sizes
    mp = tp * pp * cp
    if world % mp:
        fits = [d for d in _divisors(world) if d % (pp * cp) == 0]
        tp_fix = _nearest([d // (pp * cp) for d in fits], tp) if fits else None
        gpus = ((world + mp - 1) // mp) * mp
        hint = f"set perf.tensor_parallel={tp_fix}" if tp_fix else "lower perf.pipeline_parallel/perf.context_parallel"
        v.add("model-parallel-divides-actor-gpus",
              ["perf.tensor_parallel", "perf.pipeline_parallel", "perf.context_parallel", "gpu_layout.actor_gpus"],
              f"Megatron needs the actor's world size ({world} GPUs) divisible by TP x PP x CP ({tp} x {pp} x {cp} "
              f"= {mp}); the rest is data parallel", f"{hint}, or use {gpus} actor GPUs "
              f"(gpu_layout.actor_gpus x gpu_layout.actor_num_nodes)")


def rule_world_divisible_by_expert_parallel(v: Collector) -> None:
    """The expert layers tile the same world as ETP x EP x PP x expert data parallel.

    Mirrors: Megatron-LM megatron/core/parallel_state.py:initialize_model_parallel ("world_size is not
    divisible by expert_tensor_model_pipeline_parallel size"), run in every train actor by slime's
    megatron_utils/initialize.py:init (slime #1818: a shipped script died this way after allocation).
    """
    sizes = _sizes(v)
    if sizes is None:
        return
    world, tp, pp, cp, ep, etp = sizes
    size = etp * ep * pp
    if world % size:
        eps = [d for d in _divisors(world) if d % (etp * pp) == 0]
        ep_fix = _nearest([d // (etp * pp) for d in eps], ep) if eps else 1
        gpus = ((world + size - 1) // size) * size
        v.add("expert-parallel-divides-actor-gpus",
              ["perf.expert_parallel", "perf.expert_tensor_parallel", "perf.pipeline_parallel",
               "gpu_layout.actor_gpus"],
              f"Megatron builds the expert groups over the actor's {world} GPUs: they must be divisible by "
              f"ETP x EP x PP ({etp} x {ep} x {pp} = {size})",
              f"set perf.expert_parallel={ep_fix}, or use {gpus} actor GPUs")


def rule_expert_parallel_needs_experts(v: Collector) -> None:
    """EP > 1 needs a MoE model whose experts it divides.

    Mirrors: Megatron-LM megatron/training/arguments.py:validate_args ("num_experts must be non None to use
    expert model parallelism"; "Number of experts should be a multiple of expert model parallel_size").
    """
    t = trainer_args(v)
    ep = _int(t.get("--expert-model-parallel-size"))
    experts = _int(t.get("--num-experts"))
    if ep is None or ep <= 1:
        return
    if not experts:
        v.add("expert-parallel-needs-moe", ["perf.expert_parallel", "model.num_experts"],
              f"expert parallelism ({ep}) on a dense model: Megatron's validate_args needs num_experts",
              "set perf.expert_parallel=1 (or choose a MoE model)")
    elif experts % ep:
        sizes = _sizes(v)
        fits = [d for d in _divisors(experts) if sizes is None or sizes[0] % (sizes[5] * d * sizes[2]) == 0]
        fix = _nearest(fits or [1], ep)
        v.add("expert-parallel-divides-experts", ["perf.expert_parallel", "model.num_experts"],
              f"expert parallel ranks hold equal shares of the {experts} experts: {experts} % EP {ep} != 0",
              f"set perf.expert_parallel={fix}")


def rule_pipeline_divides_layers(v: Collector) -> None:
    """Pipeline stages hold equal numbers of layers; virtual stages split them further.

    Mirrors: Megatron-LM megatron/training/arguments.py:validate_args ("Number of layers should be divisible
    by the pipeline-model-parallel size"; the virtual-pipeline checks); slime's PP == 1 check of
    decoder_first/last_pipeline_num_layers (fork: slime/utils/arguments.py:parse_args; v0.3.1:
    slime/backends/megatron_utils/arguments.py:validate_args).
    """
    t = trainer_args(v)
    pp = _int(t.get("--pipeline-model-parallel-size"))
    layers = _int(t.get("--num-layers"))
    if not pp or pp <= 0 or not layers or layers <= 0:
        return
    first, last = t.get("--decoder-first-pipeline-num-layers"), t.get("--decoder-last-pipeline-num-layers")
    if pp == 1 and (first is not None or last is not None):
        v.add("uneven-pipeline-needs-pipeline", ["perf.pipeline_parallel", "args"],
              "decoder_first/last_pipeline_num_layers shape pipeline stages; slime refuses them at PP 1",
              "remove args.decoder_first_pipeline_num_layers / args.decoder_last_pipeline_num_layers, "
              "or raise perf.pipeline_parallel")
        return
    if first is not None or last is not None or t.get("--pipeline-model-parallel-layout") is not None:
        return  # uneven stages: Megatron checks them when it builds the model
    counted = layers + bool(t.get("--account-for-embedding-in-pipeline-split")) + \
        bool(t.get("--account-for-loss-in-pipeline-split"))
    if counted % pp:
        sizes = _sizes(v)
        fits = [d for d in _divisors(counted) if sizes is None or sizes[0] % (sizes[1] * d * sizes[3]) == 0]
        fix = _nearest(fits or [1], pp)
        v.add("pipeline-divides-layers", ["perf.pipeline_parallel", "model.num_layers"],
              f"each pipeline stage holds the same number of layers: {counted} % PP {pp} != 0",
              f"set perf.pipeline_parallel={fix}")
        return
    vlayers = _int(t.get("--num-layers-per-virtual-pipeline-stage"))
    vstages = _int(t.get("--num-virtual-stages-per-pipeline-rank"))
    if vlayers and (counted // pp) % vlayers:
        v.add("virtual-pipeline-divides-stage",
              ["args.num_layers_per_virtual_pipeline_stage", "perf.pipeline_parallel"],
              f"a stage's {counted // pp} layers must split into virtual stages of {vlayers}",
              f"set args.num_layers_per_virtual_pipeline_stage to a divisor of {counted // pp}")
        return
    vpp = (counted // pp) // vlayers if vlayers else vstages
    if vpp and vpp > 1:
        # dest overlap_p2p_comm: on by default, --no-overlap-p2p-communication turns it off.
        overlap = t.get("--no-overlap-p2p-communication") is not False
        need = 1 if overlap else 2
        if pp <= need:
            v.add("virtual-pipeline-needs-pipeline", ["perf.pipeline_parallel"],
                  f"the interleaved schedule (virtual pipeline size {vpp}) needs PP > {need}"
                  + ("" if overlap else " without p2p overlap"),
                  f"set perf.pipeline_parallel={need + 1} or more, or drop the virtual pipeline args")


def rule_context_parallel_divides_seq_length(v: Collector) -> None:
    """Context parallelism splits each sequence into 2 x CP chunks.

    Mirrors: Megatron-LM megatron/training/arguments.py:validate_args ("seq-length should be a multiple of
    2 * context-parallel-size"); seq_length defaults to 4096 in slime's set_default_megatron_args
    (slime/backends/megatron_utils/arguments.py), which runs before it.
    """
    t = trainer_args(v)
    cp = _int(t.get("--context-parallel-size"))
    if not cp or cp <= 1:
        return
    seq = _int(t.get("--seq-length")) or 4096
    if seq % (2 * cp):
        sizes = _sizes(v)
        fits = [c for c in range(1, 2 * cp + 1) if seq % (2 * c) == 0
                and (sizes is None or sizes[0] % (sizes[1] * sizes[2] * c) == 0)]
        v.add("context-parallel-divides-seq-length", ["perf.context_parallel", "model.seq_length"],
              f"Megatron splits each sequence into 2 x CP chunks: seq_length {seq} % (2 x {cp}) != 0",
              f"set perf.context_parallel={_nearest(fits or [1], cp)}, or model.seq_length to a multiple of {2 * cp}")


# ---------------------------------------------------------------- TransformerConfig

def rule_tp_divides_heads(v: Collector) -> None:
    """Each tensor-parallel rank holds whole attention heads and whole query groups.

    Mirrors: Megatron-LM megatron/core/transformer/transformer_config.py:TransformerConfig.__post_init__
    (num_attention_heads "must be a multiple of tensor_model_parallel_size"; num_query_groups: in the fork's
    vendored Megatron "must be a multiple of", in upstream's 1dcf0daf "a multiple or divisor of"; without
    GQA num_query_groups = heads). In the fork's bridge mode the config comes from config.json with TP from
    args: the same check.
    """
    t = trainer_args(v)
    m = v.c["model"]
    tp = _int(t.get("--tensor-model-parallel-size"))
    heads = _int(m["num_attention_heads"])
    if not tp or tp <= 0 or not heads or heads <= 0:
        return
    groups = _int(m["num_query_groups"]) or heads
    sizes = _sizes(v)
    # The fork's vendored Megatron needs groups % TP == 0; upstream's (1dcf0daf) also takes TP a
    # multiple of the groups (each group then replicated over TP / groups ranks).
    upstream = v.c["trainer"]["flavour"] == "slime"

    def splits(d: int) -> bool:
        return groups % d == 0 or (upstream and d % groups == 0)

    # TPs that hold whole heads and groups, and (when known) tile the actor GPUs with PP x CP.
    whole = [d for d in _divisors(heads) if splits(d)]
    tiles = [d for d in whole if sizes is None or (sizes[0] % (d * sizes[2] * sizes[3]) == 0)]
    if heads % tp:
        fix = _nearest(tiles or whole, tp)
        v.add("tp-divides-heads", ["perf.tensor_parallel", "model.num_attention_heads"],
              f"each tensor-parallel rank holds whole attention heads: {heads} heads % TP {tp} != 0",
              f"set perf.tensor_parallel={fix} (it must also divide the actor GPUs)")
    elif not splits(tp):
        fix = _nearest(tiles or whole, tp)
        how = "must be a multiple or divisor of TP" if upstream else "must be a multiple of TP (the fork's Megatron)"
        v.add("tp-divides-query-groups", ["perf.tensor_parallel", "model.num_query_groups"],
              f"Megatron shards the {groups} query groups over TP {tp}: the groups {how}",
              f"set perf.tensor_parallel={fix}")


def rule_recompute(v: Collector) -> None:
    """Recompute settings Megatron accepts.

    Mirrors: Megatron-LM megatron/training/arguments.py:validate_args (selective takes no recompute method)
    and megatron/core/transformer/transformer_config.py:TransformerConfig.__post_init__ (full needs a method
    and recompute_num_layers; selective needs recompute_num_layers None). The fork with
    ``--megatron-to-hf-mode bridge`` builds its TransformerConfig through megatron.bridge from config.json
    with only TP/PP/EP/ETP/SP from args (slime/backends/megatron_utils/model_provider.py), so the
    __post_init__ checks do not see the recompute flags there.
    """
    t = trainer_args(v)
    gran = t.get("--recompute-granularity")
    method = t.get("--recompute-method")
    layers = t.get("--recompute-num-layers")
    if gran not in (None, "full", "selective"):
        v.add("recompute-granularity-known", ["perf.recompute_granularity"],
              "Megatron knows full and selective recompute",
              "set perf.recompute_granularity to full, selective or null")
        return
    if gran == "selective" and method is not None:
        v.add("selective-recompute-no-method", ["perf.recompute_granularity", "perf.recompute_method"],
              "selective recompute takes no recompute method (Megatron's validate_args)",
              "set perf.recompute_method=null")
    bridge = v.c["trainer"]["flavour"] == "clawgym" and t.get("--megatron-to-hf-mode") == "bridge"
    if gran is None or bridge:
        return
    if gran == "full" and method is None:
        v.add("full-recompute-needs-method", ["perf.recompute_granularity", "perf.recompute_method"],
              "full recompute needs a recompute method (TransformerConfig)", "set perf.recompute_method=uniform")
    if gran == "full" and layers is None:
        v.add("full-recompute-needs-num-layers", ["perf.recompute_granularity", "perf.recompute_num_layers"],
              "full recompute needs recompute_num_layers (TransformerConfig)", "set perf.recompute_num_layers=1")
    if gran == "selective" and layers is not None:
        v.add("selective-recompute-no-num-layers", ["perf.recompute_granularity", "perf.recompute_num_layers"],
              "selective recompute takes no recompute_num_layers (TransformerConfig)",
              "set perf.recompute_num_layers=null")


def rule_sequence_parallel_at_tp1(v: Collector) -> None:
    """Sequence parallelism needs TP > 1; Megatron turns it off at TP 1 and says so.

    Mirrors: Megatron-LM megatron/training/arguments.py:validate_args ("Disabling sequence parallelism
    because tensor model parallelism is disabled"): a warning, the run starts.
    """
    t = trainer_args(v)
    if t.get("--sequence-parallel") and t.get("--tensor-model-parallel-size") == 1:
        v.warn("sequence-parallel-off-at-tp1", ["perf.sequence_parallel", "perf.tensor_parallel"],
               "Megatron turns sequence parallelism off at TP 1", "set perf.sequence_parallel=false to say so")


# ---------------------------------------------------------------- batches

def rule_global_batch(v: Collector) -> None:
    """The global batch: slime derives it from the rollout and Megatron splits it into micro-batches.

    Mirrors: slime/utils/arguments.py:slime_validate_args (with num_steps_per_rollout set, global_batch_size
    = rollout_batch_size x n_samples_per_prompt // num_steps_per_rollout, and an explicit one must equal
    it), Megatron-LM megatron/training/arguments.py:validate_args (global_batch_size > 0; unset it is
    micro_batch_size x data parallel) and megatron/core/num_microbatches_calculator.py:
    ConstantNumMicroBatchesCalculator (global batch divisible by micro batch x data parallel), called by
    slime's megatron_utils/initialize.py:init in every train actor.
    """
    t = trainer_args(v)
    r = v.c["rollout"]
    rbs, n = _int(r["batch_size"]), _int(r["n_samples_per_prompt"])
    steps = _int(t.get("--num-steps-per-rollout"))
    explicit = _int(t.get("--global-batch-size"))
    if not rbs or not n or rbs <= 0 or n <= 0:
        return
    gbs = explicit
    if steps is not None and steps > 0:
        derived = rbs * n // steps
        if explicit is not None and explicit != derived:
            v.add("global-batch-matches-rollout",
                  ["args.global_batch_size", "rollout.batch_size", "rollout.n_samples_per_prompt",
                   "rollout.num_steps_per_rollout"],
                  f"slime derives the global batch from the rollout: {rbs} x {n} // {steps} = {derived}, "
                  f"not {explicit}",
                  f"remove args.global_batch_size (slime sets {derived}), or set rollout.num_steps_per_rollout=null "
                  f"to size the steps by args.global_batch_size={explicit}")
            return
        gbs = derived
        if derived <= 0:
            v.add("global-batch-positive", ["rollout.num_steps_per_rollout", "rollout.batch_size",
                                            "rollout.n_samples_per_prompt"],
                  f"{rbs} x {n} samples split into {steps} steps leave a global batch of 0",
                  f"set rollout.num_steps_per_rollout to at most {rbs * n}")
            return
    sizes = _sizes(v)
    mbs = _int(t.get("--micro-batch-size"))
    if sizes is None or not mbs or mbs <= 0 or gbs is None or t.get("--decrease-batch-size-if-needed"):
        return
    world, tp, pp, cp, _, _ = sizes
    if world % (tp * pp * cp):
        return  # reported by model-parallel-divides-actor-gpus
    dp = world // (tp * pp * cp)
    if gbs % (mbs * dp):
        unit = mbs * dp
        v.add("global-batch-divides-micro-batches",
              ["rollout.batch_size", "rollout.n_samples_per_prompt", "rollout.num_steps_per_rollout"],
              f"Megatron splits the global batch of {gbs} into micro-batches of {mbs} on each of {dp} data-parallel "
              f"ranks: {gbs} % ({mbs} x {dp}) != 0",
              f"make the global batch a multiple of {unit}: e.g. rollout.batch_size x rollout.n_samples_per_prompt // "
              f"rollout.num_steps_per_rollout = {((gbs + unit - 1) // unit) * unit}")


def rule_grpo_needs_group(v: Collector) -> None:
    """A GRPO/GSPO group of one sample has advantage 0 for every sample: the run trains nothing.

    Not a trainer check (slime starts and only turns grpo_std_normalization off at n_samples_per_prompt 1,
    slime/utils/arguments.py:slime_validate_args): clawgym refuses it on purpose. Runs without a rollout
    group (no rollout GPUs, SFT loss, debug_train_only) are left alone.
    """
    t = trainer_args(v)
    estimator = t.get("--advantage-estimator") or v.c["grpo"]["advantage_estimator"]
    if estimator not in ("grpo", "gspo") or v.c["rollout"]["n_samples_per_prompt"] != 1:
        return
    if not v.c["gpu_layout"]["rollout_gpus"] or t.get("--debug-train-only") or \
            str(t.get("--loss-type") or "").startswith("sft"):
        return
    v.add("grpo-needs-several-samples", ["grpo.advantage_estimator", "rollout.n_samples_per_prompt"],
          "GRPO's baseline is the mean of the samples of one prompt: with one sample every advantage is 0 "
          "(clawgym refuses it; slime would train on nothing)",
          "set rollout.n_samples_per_prompt to 2 or more (the seed uses 8)")


# ---------------------------------------------------------------- slime drivers and layout

def rule_trainer_matches_colocation(v: Collector) -> None:
    """The asynchronous driver cannot run colocated; the synchronous one runs both layouts.

    Mirrors: slime train_async.py:train (``assert not args.colocate``, fork and v0.3.1). train.py has no
    such assert: upstream runs split layouts with it (e.g. scripts/run-glm4-9B.sh).
    """
    g = v.c["gpu_layout"]
    if g["colocate"] and g["trainer_script"] == "train_async.py":
        v.add("trainer-matches-colocation", ["gpu_layout.colocate", "gpu_layout.trainer_script"],
              "train_async.py asserts the layout is not colocated (it overlaps rollout and training)",
              "set gpu_layout.trainer_script=train.py or leave it unset (it follows gpu_layout.colocate)")


def rule_rollout_engines(v: Collector) -> None:
    """Rollout GPUs are split into engines of sglang.tp GPUs; the rest stay idle.

    Mirrors: slime/ray/rollout.py (num_engines = rollout_num_gpus // min(rollout_num_gpus_per_engine,
    num_gpus_per_node); no assert, spare GPUs idle: a warning). No engine at all starts but cannot
    generate: clawgym refuses that on purpose. Under colocate the fork sets rollout_num_gpus to the actor's
    GPUs (slime_validate_args), v0.3.1 keeps an explicit value.
    """
    g, s = v.c["gpu_layout"], v.c["sglang"]
    tp, gpus, per_node = _int(s["tp"]), _int(g["rollout_gpus"]), _int(g["num_gpus"])
    if g["colocate"] and v.c["trainer"]["flavour"] == "clawgym":
        gpus = _int(g["actor_gpus"]) and g["actor_gpus"] * g["actor_num_nodes"]
    if not tp or tp <= 0 or not gpus or gpus <= 0 or not per_node or per_node <= 0:
        return
    unit = min(tp, per_node)
    engines = gpus // unit
    heads = _int(v.c["model"]["num_attention_heads"]) or 1
    # Engine sizes that tile the rollout GPUs and hold whole heads (without DP attention).
    tiling = [d for d in _divisors(gpus) if heads % d == 0 and d <= per_node] or [1]
    if g["colocate"] and tp > gpus:
        # slime v0.3.1 slime/ray/rollout.py start_rollout_servers._make_group: num_engines = num_gpus //
        # min(num_gpus_per_engine, args.num_gpus_per_node), and ServerGroup.nodes_per_engine =
        # max(1, num_gpus_per_engine // num_gpus_per_node): with the engine wider than the node it counts
        # one engine per node's worth of GPUs, each spanning nodes the colocated placement group does not
        # have (colocate_1 sglang.tp=2: one engine of 2 GPUs on 1 GPU); the fork counts zero engines.
        # Either way no engine can start on the actor's GPUs, which the engines share under colocate.
        gkey = "gpu_layout.actor_gpus" if v.c["trainer"]["flavour"] == "clawgym" else "gpu_layout.rollout_gpus"
        v.add("colocated-engine-fits", ["sglang.tp", gkey, "gpu_layout.colocate"],
              f"a colocated engine runs on the {gpus} GPUs the actor shares with it; an SGLang engine of sglang.tp={tp} GPUs is "
              f"wider than all of them, so no rollout engine can start (slime/ray/rollout.py: num_engines = "
              f"rollout_num_gpus // min(rollout_num_gpus_per_engine, num_gpus_per_node))",
              f"set sglang.tp={_nearest(tiling, min(tp, gpus))} (at most the {gpus} colocated GPUs), or give the "
              f"colocated layout at least {tp} GPUs" + (" (gpu_layout=colocate_8)" if tp <= 8 else ""))
    elif engines == 0:
        v.add("rollout-engine-fits", ["sglang.tp", "gpu_layout.rollout_gpus"],
              f"an SGLang engine takes {unit} GPUs; {gpus} rollout GPUs hold none (clawgym refuses it: the run "
              "would start and never generate)",
              f"set sglang.tp={_nearest(tiling, tp)} or gpu_layout.rollout_gpus={unit}")
    elif gpus % unit:
        v.warn("sglang-tp-divides-rollout-gpus", ["sglang.tp", "gpu_layout.rollout_gpus"],
               f"{engines} engine(s) of {unit} GPUs use {engines * unit} of the {gpus} rollout GPUs; "
               f"{gpus - engines * unit} stay idle",
               f"set sglang.tp={_nearest(tiling, tp)} or gpu_layout.rollout_gpus={engines * unit}")


# ---------------------------------------------------------------- SGLang

def rule_sglang_parallel(v: Collector) -> None:
    """SGLang engine parallelism: PP splits the engine, DP needs DP attention, attention is sharded
    over TP / DP.

    Mirrors: slime/backends/sglang_utils/arguments.py:validate_args (rollout_num_gpus_per_engine divisible
    by sglang_pp_size; sglang_dp_size > 1 asserts sglang_enable_dp_attention), SGLang's
    srt/server_args.py:ServerArgs._handle_data_parallelism (tp_size % dp_size with DP attention; SGLang
    0.5.9 in the fork's image, 0.5.15 in v0.3.1's) and its attention layers (heads divisible by the
    attention TP size, tp_size // dp_size with DP attention).
    """
    t = trainer_args(v)
    s, m = v.c["sglang"], v.c["model"]
    gpus = _int(s["tp"])
    if not gpus or gpus <= 0:
        return
    pp = _int(t.get("--sglang-pp-size")) or 1
    dp = _int(t.get("--sglang-dp-size")) or 1
    dp_attention = bool(t.get("--sglang-enable-dp-attention"))
    if pp > 1 and gpus % pp:
        v.add("sglang-pp-divides-engine", ["sglang.tp", "args"],
              f"an engine of {gpus} GPUs splits into {pp} pipeline stages: {gpus} % {pp} != 0",
              f"set sglang.tp to a multiple of {pp}, or the SGLang PP size to a divisor of {gpus}")
        return
    tp = gpus // pp
    if dp > 1 and not dp_attention:
        v.add("sglang-dp-needs-dp-attention", ["sglang.tp", "args"],
              f"slime asserts --sglang-enable-dp-attention when the SGLang DP size is {dp}",
              "add args.sglang_enable_dp_attention=true, or set the SGLang DP size to 1")
        return
    if dp_attention and dp > 1 and tp % dp:
        v.add("sglang-dp-divides-tp", ["sglang.tp", "args"],
              f"DP attention splits the engine's TP {tp} into {dp} attention groups: {tp} % {dp} != 0",
              f"set the SGLang DP size to one of {', '.join(map(str, _divisors(tp)))}")
        return
    attn_tp = tp // dp if dp_attention and dp > 1 else tp
    heads = _int(m["num_attention_heads"])
    if heads and heads > 0 and heads % attn_tp:
        scale = (dp if dp_attention and dp > 1 else 1) * pp
        rollout = _int(v.c["gpu_layout"]["rollout_gpus"]) or 0
        # Engine sizes whose attention TP holds whole heads, preferring those that tile the rollout GPUs.
        good = [d * scale for d in _divisors(heads)]
        tiling = [e for e in good if rollout and rollout % e == 0] or [e for e in good if e <= max(rollout, 1)] or good
        v.add("sglang-tp-divides-heads", ["sglang.tp", "model.num_attention_heads"],
              f"SGLang shards the {heads} attention heads over the attention TP size {attn_tp}"
              + (f" (TP {tp} / DP {dp})" if attn_tp != tp else ""),
              f"set sglang.tp={_nearest(tiling, gpus)}, or enable DP attention "
              f"(args.sglang_enable_dp_attention=true with args.sglang_dp_size) to shard attention over TP / DP")


def rule_sglang_ep_on_dense(v: Collector) -> None:
    """An SGLang expert-parallel size on a model with no experts: a warning, not a refusal.

    Mirrors: nothing refuses it. slime passes --sglang-ep-size to SGLang's ServerArgs as given, and the
    startup path judged in tests/data/trainer_verdicts/slime.json accepts it on a dense model (entry 216:
    model=qwen3_5_4b, args.sglang_ep_size=8, accepted). Expert parallelism splits MoE experts; a model
    with model.num_experts unset has none to split, so the setting does nothing the user asked for.
    """
    t = trainer_args(v)
    ep = _int(t.get("--sglang-ep-size"))
    if ep is None or ep <= 1 or _int(t.get("--num-experts")):
        return
    v.warn("sglang-ep-on-dense-model", ["args.sglang_ep_size", "model.num_experts"],
           f"an SGLang expert-parallel size of {ep} on a dense model (no experts to split): slime and SGLang's "
           "startup accept it (tests/data/trainer_verdicts/slime.json #216), and it splits nothing",
           "drop args.sglang_ep_size (or set it to 1), or choose a MoE model (model.num_experts set)")


def model_window(m: Mapping[str, Any]) -> Tuple[Optional[int], str]:
    """(the checkpoint's context window, the key it came from): ``model.context_window`` (config.json's
    max_position_embeddings, data only), else the Megatron ``model.max_position_embeddings``; (None, "")
    when neither is set."""
    for key in ("context_window", "max_position_embeddings"):
        window = _int(m.get(key))
        if window:
            return window, f"model.{key}"
    return None, ""


def rule_sglang_context_window(v: Collector) -> None:
    """SGLang refuses a context length beyond the checkpoint's window; a rollout context beyond it is warned.

    Mirrors: SGLang srt/configs/model_config.py:ModelConfig._derive_context_length (0.5.9 and 0.5.15: a
    --context-length above the derived length, config.json max_position_embeddings, is a ValueError unless
    SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN=1), reached from ServerArgs at engine start: an error. The
    window is ``model.context_window`` (config.json max_position_embeddings of the published checkpoint),
    else ``model.max_position_embeddings``.

    ``rollout.max_context_len`` above the window while the engine's context length is within it (an explicit
    ``sglang.context_length``) is a warning (``rollout-context-within-model-window``): slime and Megatron
    accept it (slime only stops a conversation at max_context_len; Megatron's own check is seq_length <=
    max_position_embeddings), but SGLang rejects every request longer than its context length, so the
    longer limit never takes effect.
    """
    t = trainer_args(v)
    window, window_key = model_window(v.c["model"])
    if not window:
        return
    ctx = _int(t.get("--sglang-context-length"))
    rollout = _int((v.c.get("rollout") or {}).get("max_context_len"))
    allow = str((v.c.get("extra_env") or {}).get("SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN", "")).lower()
    if allow in ("1", "true", "yes", "on"):
        return
    if ctx and ctx > window:
        v.add("sglang-context-within-model-window", ["sglang.context_length", "rollout.max_context_len", window_key],
              f"SGLang refuses a context length ({ctx}) above the checkpoint's window ({window}, {window_key}) "
              f"at engine start",
              f"set rollout.max_context_len={window} (sglang.context_length follows it unless set), or "
              f"+extra_env.SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN=1 to let SGLang run past the window")
    elif rollout and rollout > window:
        v.warn("rollout-context-within-model-window", ["rollout.max_context_len", window_key],
              f"rollout.max_context_len ({rollout}) is above the checkpoint's window ({window}, {window_key}): "
              f"slime accepts it, but SGLang (context length {ctx or 'its default'}) rejects longer requests",
              f"set rollout.max_context_len={window} or less")


def rule_slime_checks(v: Collector) -> None:
    """slime's own argument checks that a config can break.

    Mirrors: slime/utils/arguments.py:slime_validate_args (fork and v0.3.1): the reinforce++ estimators
    need --normalize-advantages; only one of kl_coef and kl_loss_coef; use_rollout_logprobs excludes
    use_tis; over_sampling_batch_size >= rollout_batch_size; rollout_max_prompt_len <= max_context_len - 1.
    """
    t = trainer_args(v)
    estimator = t.get("--advantage-estimator")
    if estimator in ("reinforce_plus_plus", "reinforce_plus_plus_baseline") and not t.get("--normalize-advantages"):
        v.add("reinforce-needs-normalized-advantages", ["grpo.advantage_estimator"],
              f"slime's {estimator} estimator requires advantage normalization",
              "add args.normalize_advantages=true")
    kl, kl_loss = t.get("--kl-coef"), t.get("--kl-loss-coef")
    if isinstance(kl, (int, float)) and isinstance(kl_loss, (int, float)) and kl != 0 and kl_loss != 0:
        v.add("one-kl-coefficient", ["grpo.kl_loss_coef", _key(v, "--kl-coef", "args.kl_coef")],
              "slime takes only one of kl_coef (reward penalty) and kl_loss_coef (loss term)",
              "set grpo.kl_loss_coef=0 or remove args.kl_coef")
    if t.get("--use-rollout-logprobs") and t.get("--use-tis"):
        v.add("rollout-logprobs-exclude-tis", [_key(v, "--use-tis", "args.use_tis")],
              "slime refuses use_rollout_logprobs together with use_tis", "remove one of them")
    over, rbs = _int(t.get("--over-sampling-batch-size")), _int(v.c["rollout"]["batch_size"])
    if over is not None and rbs is not None and over < rbs:
        v.add("over-sampling-at-least-rollout-batch",
              [_key(v, "--over-sampling-batch-size", "args"), "rollout.batch_size"],
              f"slime needs over_sampling_batch_size ({over}) >= rollout_batch_size ({rbs})",
              f"set args.over_sampling_batch_size={rbs} or more, or remove it")
    prompt, context = _int(t.get("--rollout-max-prompt-len")), _int(t.get("--rollout-max-context-len"))
    if prompt is not None and context is not None and prompt > context - 1:
        v.add("prompt-shorter-than-context", [_key(v, "--rollout-max-prompt-len", "args"), "rollout.max_context_len"],
              f"slime needs rollout_max_prompt_len ({prompt}) <= rollout_max_context_len - 1 ({context - 1}), so at "
              "least one token is generated", f"set args.rollout_max_prompt_len={context - 1} or less")


RULES = [rule_world_divisible_by_model_parallel, rule_world_divisible_by_expert_parallel,
         rule_expert_parallel_needs_experts, rule_pipeline_divides_layers, rule_context_parallel_divides_seq_length,
         rule_tp_divides_heads, rule_recompute, rule_sequence_parallel_at_tp1, rule_global_batch,
         rule_grpo_needs_group, rule_trainer_matches_colocation, rule_rollout_engines, rule_sglang_parallel,
         rule_sglang_ep_on_dense, rule_sglang_context_window, rule_slime_checks]
