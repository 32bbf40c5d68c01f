"""Parameter counts of every model option of the zoo by an independent method: transformers.

Usage (offline; a CPU torch and transformers in a throwaway venv, never clawgym's):

    python -m venv /tmp/memvenv && /tmp/memvenv/bin/pip install torch==2.13.0 transformers omegaconf pyyaml
    /tmp/memvenv/bin/python tools/gen_param_counts.py        # writes tests/data/param_counts.json

For each ``conf/model/*.yaml`` (merged over the schema's ``ModelConfig`` defaults) it builds the
family's transformers config class from the yaml's fields, instantiates the CausalLM on the
``meta`` device (no weights, no network) and counts ``model.parameters()`` (shared tensors once).
tests/test_param_counts.py holds ``clawgym.memory.params.count`` to these numbers. Families whose
transformers class takes dimensions the model group does not carry (linear attention, DSA
indexer) use the same tables as clawgym (``params.LINEAR_ATTENTION`` / ``DSA_INDEXER``); the data
says so per model. Multi-token-prediction layers are not built by transformers: compared without.
"""

from __future__ import annotations

import dataclasses
import json
import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
OUT = ROOT / "tests" / "data" / "param_counts.json"


def model_fields(path: Path) -> dict:
    from clawgym.config.schema import ModelConfig

    base = {f.name: (f.default if f.default is not dataclasses.MISSING else None)
            for f in dataclasses.fields(ModelConfig)}
    base.update(yaml.safe_load(path.read_text()))
    return base


def pattern(m: dict) -> list:
    from clawgym.memory.params import moe_pattern

    return moe_pattern(m)


def hf_config(m: dict):
    import transformers as T

    from clawgym.memory.params import DSA_INDEXER, LINEAR_ATTENTION

    fam = m["family"]
    h, n = m["hidden_size"], m["num_layers"]
    d = m["kv_channels"] or h // m["num_attention_heads"]
    common = dict(vocab_size=m["vocab_size"], hidden_size=h, intermediate_size=m["ffn_hidden_size"],
                  num_hidden_layers=n, num_attention_heads=m["num_attention_heads"],
                  tie_word_embeddings=not m["untie_embeddings_and_output_weights"])
    kv = m["num_query_groups"] or m["num_attention_heads"]
    moe = pattern(m)
    dense_first = next((i for i, x in enumerate(moe) if x), n)
    note = ""
    if fam in ("qwen3", "qwen3-4b") or fam.startswith("qwen3") and fam not in ("qwen3-next", "qwen3.5"):
        if m["num_experts"]:
            cls = T.Qwen3MoeConfig(**common, num_key_value_heads=kv, head_dim=d, moe_intermediate_size=m["moe_ffn_hidden_size"],
                                   num_experts=m["num_experts"], num_experts_per_tok=m["moe_router_topk"],
                                   decoder_sparse_step=1, mlp_only_layers=[i for i, x in enumerate(moe) if not x])
            return T.Qwen3MoeForCausalLM, cls, note
        return T.Qwen3ForCausalLM, T.Qwen3Config(**common, num_key_value_heads=kv, head_dim=d), note
    if fam in ("qwen2.5", "mimo"):
        if m["mtp_num_layers"]:
            note = "transformers has no MiMo class: Qwen2 architecture (MiMo adds MTP layers, counted apart)"
        return T.Qwen2ForCausalLM, T.Qwen2Config(**common, num_key_value_heads=kv), note
    if fam.startswith("llama"):
        return T.LlamaForCausalLM, T.LlamaConfig(**common, num_key_value_heads=kv, head_dim=d), note
    if fam == "glm4":
        return T.Glm4ForCausalLM, T.Glm4Config(**common, num_key_value_heads=kv, head_dim=d,
                                               attention_bias=m["add_qkv_bias"]), note
    if fam == "glm4.5":
        cfg = T.Glm4MoeConfig(**common, num_key_value_heads=kv, head_dim=d, attention_bias=m["add_qkv_bias"],
                              moe_intermediate_size=m["moe_ffn_hidden_size"], n_routed_experts=m["num_experts"],
                              n_shared_experts=m["moe_shared_expert_intermediate_size"] // m["moe_ffn_hidden_size"],
                              num_experts_per_tok=m["moe_router_topk"], first_k_dense_replace=dense_first,
                              use_qk_norm=m["qk_layernorm"])
        return T.Glm4MoeForCausalLM, cfg, note
    mla = dict(kv_lora_rank=m["kv_lora_rank"], q_lora_rank=m["q_lora_rank"], qk_rope_head_dim=m["qk_pos_emb_head_dim"],
               qk_nope_head_dim=m["qk_head_dim"], v_head_dim=m["v_head_dim"])
    if m["multi_latent_attention"] and m["num_experts"]:
        shared = (m["moe_shared_expert_intermediate_size"] or 0) // m["moe_ffn_hidden_size"]
        moe_kw = dict(moe_intermediate_size=m["moe_ffn_hidden_size"], n_routed_experts=m["num_experts"],
                      n_shared_experts=shared, num_experts_per_tok=m["moe_router_topk"],
                      first_k_dense_replace=dense_first, n_group=m["moe_router_num_groups"] or 1,
                      topk_group=m["moe_router_group_topk"] or 1, num_key_value_heads=m["num_attention_heads"])
        if fam in DSA_INDEXER:
            idx = DSA_INDEXER[fam]
            note = f"indexer dimensions from clawgym's DSA_INDEXER table ({idx})"
            return T.GlmMoeDsaForCausalLM, T.GlmMoeDsaConfig(**common, **mla, **moe_kw, index_n_heads=idx["heads"],
                                                             index_head_dim=idx["head_dim"]), note
        if fam == "glm4.7":
            return T.Glm4MoeLiteForCausalLM, T.Glm4MoeLiteConfig(**common, **mla, **moe_kw), note
        return T.DeepseekV3ForCausalLM, T.DeepseekV3Config(**common, **mla, **moe_kw), note
    if fam == "minimax-m2":
        cfg = T.MiniMaxM2Config(**{**common, "intermediate_size": m["moe_ffn_hidden_size"]}, num_key_value_heads=kv,
                                head_dim=d, num_local_experts=m["num_experts"], num_experts_per_tok=m["moe_router_topk"])
        return T.MiniMaxM2ForCausalLM, cfg, note
    if fam in LINEAR_ATTENTION:
        lin = LINEAR_ATTENTION[fam]
        note = f"linear-attention dimensions from clawgym's LINEAR_ATTENTION table ({lin})"
        lin_kw = dict(linear_num_key_heads=lin["key_heads"], linear_num_value_heads=lin["value_heads"],
                      linear_key_head_dim=lin["key_dim"], linear_value_head_dim=lin["value_dim"],
                      linear_conv_kernel_dim=lin["conv"], head_dim=d, num_key_value_heads=kv,
                      layer_types=["full_attention" if (i + 1) % lin["interval"] == 0 else "linear_attention"
                                   for i in range(n)])
        if fam == "qwen3-next":
            return T.Qwen3NextForCausalLM, T.Qwen3NextConfig(
                **common, **lin_kw, moe_intermediate_size=m["moe_ffn_hidden_size"], num_experts=m["num_experts"],
                shared_expert_intermediate_size=m["moe_shared_expert_intermediate_size"],
                num_experts_per_tok=m["moe_router_topk"], decoder_sparse_step=1), note
        if m["num_experts"]:
            c = {k: v for k, v in common.items() if k != "intermediate_size"}
            return T.Qwen3_5MoeForCausalLM, T.Qwen3_5MoeTextConfig(
                **c, **lin_kw, moe_intermediate_size=m["moe_ffn_hidden_size"], num_experts=m["num_experts"],
                shared_expert_intermediate_size=m["moe_shared_expert_intermediate_size"],
                num_experts_per_tok=m["moe_router_topk"]), note + "; text model only (no vision tower)"
        return T.Qwen3_5ForCausalLM, T.Qwen3_5TextConfig(**common, **lin_kw), note
    return None, None, f"no transformers class mapped for family {fam!r}"


def main() -> int:
    import torch

    import transformers

    out = {"generated_by": "tools/gen_param_counts.py", "transformers": transformers.__version__,
           "torch": torch.__version__, "models": {}}
    for path in sorted((ROOT / "conf" / "model").glob("*.yaml")):
        m = model_fields(path)
        cls, cfg, note = hf_config(m)
        entry = {"family": m["family"], "note": note}
        if cls is None:
            entry["params"] = None
        else:
            with torch.device("meta"):
                model = cls(cfg)
            entry["class"] = cls.__name__
            entry["params"] = sum(p.numel() for p in model.parameters())
            del model
        out["models"][path.stem] = entry
        print(path.stem, entry, flush=True)
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(json.dumps(out, indent=1, sort_keys=True) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
