"""Model architecture: sizes, attention groups, MoE and family-specific fields, recompute settings."""

from __future__ import annotations


from clawgym.validate.core import Collector


def rule_model_sizes_positive(v: Collector) -> None:
    v.positive("model-sizes-positive",
               [f"model.{k}" for k in ("num_layers", "hidden_size", "ffn_hidden_size", "num_attention_heads",
                                      "num_query_groups", "kv_channels", "vocab_size", "rotary_base")],
               "model sizes")


def rule_query_groups_divide_heads(v: Collector) -> None:
    m = v.c["model"]
    # None: no GQA (multi-latent attention), nothing to divide.
    if m["num_query_groups"] and m["num_query_groups"] > 0 and m["num_attention_heads"] % m["num_query_groups"]:
        v.add("query-groups-divide-heads", ["model.num_attention_heads", "model.num_query_groups"],
              "attention heads must be a multiple of the query groups",
              "use the checkpoint's num_key_value_heads for model.num_query_groups")


def rule_moe_complete(v: Collector) -> None:
    # The model group must describe the checkpoint: a null here is a gap, not Megatron's default.
    m = v.raw["model"]
    if m["num_experts"] is None:
        return
    for k in ("moe_ffn_hidden_size", "moe_router_topk"):
        if m[k] is None:
            v.add("moe-complete", ["model.num_experts", f"model.{k}"],
                  "a MoE model (num_experts set) needs its expert FFN size and router top-k",
                  f"set model.{k} from the checkpoint's config.json")
    if m["moe_router_topk"] is not None and m["moe_router_topk"] > m["num_experts"]:
        v.add("moe-topk-within-experts", ["model.moe_router_topk", "model.num_experts"],
              "the router cannot pick more experts than exist", "lower model.moe_router_topk")


def rule_model_family_fields(v: Collector) -> None:
    m = v.c["model"]
    if m.get("multi_latent_attention"):
        for k in ("kv_lora_rank", "qk_head_dim", "qk_pos_emb_head_dim", "v_head_dim"):
            if m.get(k) is None:
                v.add("mla-complete", ["model.multi_latent_attention", f"model.{k}"],
                      "multi-latent attention needs its KV rank and head dims",
                      f"set model.{k} from the checkpoint's config.json (kv_lora_rank, qk_nope_head_dim, "
                      "qk_rope_head_dim, v_head_dim)")
    spec = m.get("spec")
    if spec is not None and (len(spec) != 2 or not all(spec)):
        v.add("spec-module-and-function", ["model.spec"],
              "--spec takes the module and the function that builds the layer spec",
              "set model.spec=[slime_plugins.models.<module>,<function>] or null")




#: Upper bounds of architecture sizes, from the largest public checkpoints with room to spare: layers
#: (Llama 3.1 405B has 126, GPT-3 96, DeepSeek-V3 and Kimi K2 61), hidden size (PaLM 540B 18,432,
#: Llama 3.1 405B 16,384), FFN (PaLM 73,728), heads (Llama 3.1 405B 128), head dim (kv_channels 128-256),
#: experts (Kimi K2 384, DeepSeek-V3 256), vocabulary (Gemma 3 262,144). Beyond them a value is a typo
#: (an extra digit, 2**40): the memory plan walks the layers one by one, so 3,000,000 layers took more
#: than 5 minutes and 2**40 a MemoryError before this rule refused them.
MODEL_BOUNDS = {"num_layers": 1024, "hidden_size": 131072, "ffn_hidden_size": 524288, "moe_ffn_hidden_size": 131072,
                "num_attention_heads": 1024, "num_query_groups": 1024, "kv_channels": 4096, "num_experts": 16384,
                "moe_router_topk": 1024, "vocab_size": 4194304, "kv_lora_rank": 65536, "qk_head_dim": 4096,
                "qk_pos_emb_head_dim": 4096, "v_head_dim": 4096}


def rule_model_sizes_sane(v: Collector) -> None:
    """clawgym's own bounds (not the trainer's): no model has these sizes, and the memory plan would
    run for minutes or exhaust memory on them before the launch could say so."""
    m = v.c["model"]
    for key, bound in MODEL_BOUNDS.items():
        value = m.get(key)
        if isinstance(value, bool) or not isinstance(value, int) or value <= bound:
            continue
        v.add("model-sizes-sane", [f"model.{key}"],
              f"model.{key}={value:,} is beyond any real model (the largest public checkpoints stay far below "
              f"{bound:,}; see clawgym/validate/model.py MODEL_BOUNDS)",
              f"set model.{key} from the checkpoint's config.json (at most {bound:,})")
