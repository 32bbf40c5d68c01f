"""Rollout, batch and loss settings: sizes, dynamic batching, the GRPO group, clipping, KL, optimizer, eval."""

from __future__ import annotations


from clawgym.validate.core import Collector


def rule_rollout_sizes_positive(v: Collector) -> None:
    v.positive("rollout-sizes-positive",
               [f"rollout.{k}" for k in ("num_rollout", "batch_size", "n_samples_per_prompt", "max_response_len",
                                        "max_context_len", "num_steps_per_rollout", "train_num_workers",
                                        "train_max_turns")], "rollout sizes")


def rule_temperature_positive(v: Collector) -> None:
    if v.c["rollout"]["temperature"] <= 0:
        v.add("temperature-positive", ["rollout.temperature"],
              "sampling temperature must be > 0 (slime rejects <= 0; GRPO needs diverse samples)",
              "set rollout.temperature to e.g. 0.7")


def rule_context_exceeds_response(v: Collector) -> None:
    r = v.c["rollout"]
    if r["max_context_len"] is not None and r["max_response_len"] is not None \
            and r["max_context_len"] <= r["max_response_len"]:
        v.add("context-exceeds-response", ["rollout.max_context_len", "rollout.max_response_len"],
              "the context window must be larger than one response (it also holds the prompt and history)",
              "raise rollout.max_context_len or lower rollout.max_response_len")


def rule_eps_clip_order(v: Collector) -> None:
    g = v.c["grpo"]
    if g["eps_clip"] <= 0:
        v.add("eps-clip-positive", ["grpo.eps_clip"], "the PPO clip range must be > 0", "set grpo.eps_clip, e.g. 0.2")
    if g["eps_clip_high"] < g["eps_clip"]:
        v.add("eps-clip-high-at-least-low", ["grpo.eps_clip_high", "grpo.eps_clip"],
              "the upper clip bound must be >= the lower one",
              "raise grpo.eps_clip_high (e.g. 0.28) or lower grpo.eps_clip")


def rule_kl_choices(v: Collector) -> None:
    if v.c["grpo"]["kl_loss_type"] not in ("k1", "k2", "k3", "low_var_kl"):
        v.add("kl-loss-type-known", ["grpo.kl_loss_type"], "slime knows k1, k2, k3 and low_var_kl",
              "set grpo.kl_loss_type to one of k1, k2, k3, low_var_kl")


def rule_dynamic_batch_needs_max_tokens(v: Collector) -> None:
    p = v.c["perf"]
    if p["use_dynamic_batch_size"] and not p["max_tokens_per_gpu"]:
        v.add("dynamic-batch-needs-max-tokens", ["perf.use_dynamic_batch_size", "perf.max_tokens_per_gpu"],
              "dynamic batch size packs micro-batches by tokens and needs a per-GPU token budget",
              "set perf.max_tokens_per_gpu (e.g. 65536) or perf.use_dynamic_batch_size=false")


def rule_optimizer(v: Collector) -> None:
    o = v.c["optimizer"]
    if o["lr"] <= 0:
        v.add("lr-positive", ["optimizer.lr"], "the learning rate must be > 0", "set optimizer.lr, e.g. 1e-6")
    if o["cpu_offload"] and not o["use_precision_aware_optimizer"]:
        v.add("cpu-offload-needs-precision-aware", ["optimizer.cpu_offload", "optimizer.use_precision_aware_optimizer"],
              "Megatron's CPU optimizer offload requires the precision-aware optimizer",
              "set optimizer.use_precision_aware_optimizer=true or optimizer.cpu_offload=false")


def rule_eval(v: Collector) -> None:
    v.positive("eval-sizes-positive", ["eval.interval", "eval.num_workers", "eval.max_turns", "eval.n_samples"],
               "eval interval and sizes")


