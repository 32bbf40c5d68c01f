"""Parameters per GPU rank under TP, PP, EP and ETP, counted on Megatron's OWN model.

Usage (offline; a CPU torch in a throwaway venv plus a Megatron-LM tree, never clawgym's env):

    python -m venv /tmp/mgvenv && /tmp/mgvenv/bin/pip install torch==2.13.0 numpy packaging einops omegaconf pyyaml
    git --git-dir=Megatron-LM.git archive 1dcf0dafa884ad52ffb243625717a3471643e087 megatron | tar -x -C /tmp/megatron-1dcf
    /tmp/mgvenv/bin/python tools/gen_rank_params.py --megatron /tmp/megatron-1dcf   # writes tests/data/rank_param_counts.json

For every case of ``CASES`` (a model option of ``conf/model/``, optionally with fewer layers, and a
TP/PP/EP/ETP layout) and every pipeline stage of it, the tool

1. starts torch.distributed on the ``fake`` backend (``FakeStore``) as the first rank of that stage,
   world size TP x PP x EP x ETP (so data parallel = EP x ETP and expert data parallel = TP), and
   calls Megatron's ``parallel_state.initialize_model_parallel(TP, PP, EP, ETP)``;
2. builds Megatron-core's ``GPTModel`` with ``get_gpt_decoder_block_spec(config,
   use_transformer_engine=False)`` (the local spec: no Transformer Engine on CPU; it picks dense or
   MoE layers by ``moe_layer_freq`` and slices this stage's layers) on the ``meta`` device
   (``use_cpu_initialization``, no initialisation: no memory, no CUDA), ``pre_process`` /
   ``post_process`` for the first / last stage, the vocabulary padded by Megatron's own
   ``_vocab_size_with_padding`` (megatron/training/tokenizer/tokenizer.py, read from the tree);
3. counts ``model.parameters()``: ``expert`` = those Megatron marks ``allreduce = False`` (routed
   experts, reduced over the expert-data-parallel group), ``dense`` the rest.

One stand-in, recorded in the data: MLA's down projections (``linear_q_down_proj``,
``linear_kv_down_proj``) are Transformer Engine ``TELinear(parallel_mode="duplicated")`` in
production (every TP rank holds them whole); the local spec's ``ColumnParallelLinear`` would split
them by TP, so the tool gives them Megatron's own unsharded ``Linear``
(``megatron/core/post_training/modelopt/layers.py``), which MLA accepts in their place.

Architectures the local spec cannot build are recorded with the reason (``"built": false``):
slime's plugin layer specs (GLM-4's post-norms, MiniMax-M2's full-width QK norm), Gated DeltaNet
(Qwen3-Next, Qwen3.5) and GLM-5's DSA indexer. tests/test_rank_param_counts.py holds
``clawgym.memory.params.per_stage`` to every recorded count exactly.
"""

from __future__ import annotations

import argparse
import ast
import dataclasses
import json
import os
import sys
import time
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "tests" / "data" / "rank_param_counts.json"

# (model option, num_layers override or None, moe_layer_freq override or None, [(tp, pp, ep, etp), ...])
# Large models keep their architecture with fewer layers (a dense layer first where the model has
# one); the counts per layer are the same, only fewer of them are built.
CASES = [
    ("qwen3_4b", None, None, [(1, 1, 1, 1), (2, 2, 1, 1), (4, 3, 1, 1), (8, 1, 1, 1)]),
    ("qwen3_0_6b", None, None, [(1, 2, 1, 1), (2, 4, 1, 1), (8, 1, 1, 1)]),
    ("qwen3_8b", None, None, [(2, 1, 1, 1), (4, 2, 1, 1), (8, 4, 1, 1)]),
    ("llama3_1_8b", None, None, [(1, 1, 1, 1), (4, 2, 1, 1), (8, 4, 1, 1)]),
    ("qwen2_5_7b", None, None, [(1, 1, 1, 1), (2, 2, 1, 1), (4, 4, 1, 1)]),
    ("qwen3_30b_a3b", 8, "[1]*8", [(1, 1, 8, 1), (2, 2, 4, 1), (4, 2, 8, 1), (2, 1, 4, 2)]),
    ("qwen3_235b_a22b", 8, "[1]*8", [(4, 2, 8, 1), (8, 1, 16, 1), (4, 4, 4, 2)]),
    ("glm4_5_106b_a12b", 6, "[0]*1+[1]*5", [(1, 1, 8, 1), (2, 2, 4, 1), (4, 3, 8, 2)]),
    ("deepseek_v3_5layer", None, None, [(1, 1, 8, 1), (2, 1, 16, 1), (4, 5, 8, 2)]),
    ("kimi_k2", 4, "[0]*1+[1]*3", [(1, 1, 8, 1), (8, 2, 16, 1), (2, 4, 32, 1)]),
    ("moonlight_16b_a3b", 4, "[0]*1+[1]*3", [(1, 1, 8, 1), (2, 2, 4, 1), (4, 4, 16, 2)]),
    ("glm4_7_30b_a3b", 4, "[0]*1+[1]*3", [(1, 1, 8, 1), (2, 2, 4, 1), (4, 4, 16, 2)]),
    ("mimo_7b_rl", None, None, [(1, 1, 1, 1), (2, 2, 1, 1), (4, 4, 1, 1)]),
    ("glm4_9b", None, None, [(1, 1, 1, 1)]),
    ("minimax_m2", 4, "[1]*4", [(1, 1, 8, 1)]),
    ("qwen3_next_80b_a3b", 4, "[1]*4", [(1, 1, 8, 1)]),
    ("glm5_744b_a40b", 4, None, [(1, 1, 8, 1)]),
]

#: Why Megatron's local spec cannot build a family (recorded instead of a count).
NOT_BUILDABLE = {
    "glm4": "slime's plugin layer spec (slime_plugins.models.glm4.get_glm_spec): post-attention and "
            "post-MLP RMSNorms, which Megatron's TransformerLayer has no submodule for",
    "minimax-m2": "slime's plugin layer spec (slime_plugins.models.minimax_m2): a QK norm over all heads "
                  "(one weight of heads x head_dim), which Megatron's local spec (per-head q/k norm) lacks",
    "qwen3-next": "Gated DeltaNet linear-attention layers (slime plugin / TE-only experimental spec), "
                  "not in Megatron's local spec",
    "qwen3.5": "Gated DeltaNet linear-attention layers, not in Megatron's local spec",
    "glm5": "DSA lightning indexer (slime plugin), not in Megatron's local spec",
    "glm5.2": "DSA lightning indexer (slime plugin), not in Megatron's local spec",
}


def model_fields(name: str) -> dict:
    from clawgym.config.schema import ModelConfig

    base = {f.name: (f.default if f.default is not dataclasses.MISSING else None)
            for f in dataclasses.fields(ModelConfig)}
    base.update(yaml.safe_load((ROOT / "conf" / "model" / f"{name}.yaml").read_text()))
    return base


def moe_layer_list(m: dict) -> list:
    from clawgym.memory.params import moe_pattern  # the literal's parser; Megatron takes the list

    return moe_pattern(m)


def megatron_vocab_padding(megatron: Path):
    """Megatron's own ``_vocab_size_with_padding`` (its module imports tokenizers; only the function
    is taken from the source)."""
    src = (megatron / "megatron" / "training" / "tokenizer" / "tokenizer.py").read_text()
    fn = next(n for n in ast.parse(src).body if isinstance(n, ast.FunctionDef) and n.name == "_vocab_size_with_padding")
    ns: dict = {}
    mod = ast.fix_missing_locations(ast.Module(body=[ast.Import(names=[ast.alias(name="math")]), fn],
                                               type_ignores=[]))
    exec(compile(mod, str(megatron / "megatron/training/tokenizer/tokenizer.py"), "exec"), ns)
    return ns["_vocab_size_with_padding"]


def transformer_config(m: dict, tp: int, pp: int, ep: int, etp: int):
    import torch
    import torch.nn.functional as F

    from megatron.core.transformer.transformer_config import MLATransformerConfig, TransformerConfig

    heads = int(m["num_attention_heads"])
    kw = dict(
        num_layers=int(m["num_layers"]), hidden_size=int(m["hidden_size"]),
        ffn_hidden_size=int(m["ffn_hidden_size"]), num_attention_heads=heads,
        num_query_groups=int(m["num_query_groups"] or heads),
        kv_channels=int(m["kv_channels"]) if m["kv_channels"] else None,
        normalization=m["normalization"] or "RMSNorm", layernorm_epsilon=float(m["norm_epsilon"] or 1e-6),
        add_bias_linear=not m["disable_bias_linear"], add_qkv_bias=bool(m["add_qkv_bias"]),
        gated_linear_unit=bool(m["swiglu"]), activation_func=F.silu, qk_layernorm=bool(m["qk_layernorm"]),
        bf16=True, params_dtype=torch.bfloat16, pipeline_dtype=torch.bfloat16,
        use_cpu_initialization=True, perform_initialization=False,
        tensor_model_parallel_size=tp, pipeline_model_parallel_size=pp,
        expert_model_parallel_size=ep, expert_tensor_parallel_size=etp,
        # Sequence parallel changes activations, not parameters; the local spec's torch norms refuse it.
        sequence_parallel=False,
        bias_activation_fusion=False, bias_dropout_fusion=False, masked_softmax_fusion=False,
        apply_rope_fusion=False, gradient_accumulation_fusion=False,
        mtp_num_layers=int(m["mtp_num_layers"]) if m["mtp_num_layers"] else None,
    )
    if m["num_experts"]:
        kw.update(
            num_moe_experts=int(m["num_experts"]), moe_ffn_hidden_size=int(m["moe_ffn_hidden_size"]),
            moe_router_topk=int(m["moe_router_topk"]), moe_layer_freq=moe_layer_list(m),
            moe_shared_expert_intermediate_size=m["moe_shared_expert_intermediate_size"],
            moe_shared_expert_gate=bool(m["moe_shared_expert_gate"]),
            moe_router_score_function=m["moe_router_score_function"] or "softmax",
            moe_router_enable_expert_bias=bool(m["moe_router_enable_expert_bias"]),
            moe_router_pre_softmax=bool(m["moe_router_pre_softmax"]),
            moe_router_num_groups=m["moe_router_num_groups"], moe_router_group_topk=m["moe_router_group_topk"],
            moe_router_topk_scaling_factor=m["moe_router_topk_scaling_factor"],
            moe_token_dispatcher_type="alltoall", moe_grouped_gemm=False, moe_router_dtype="fp32",
            moe_aux_loss_coeff=0.0, moe_router_load_balancing_type="none",
        )
    if m["multi_latent_attention"]:
        kw.update(q_lora_rank=m["q_lora_rank"], kv_lora_rank=int(m["kv_lora_rank"]),
                  qk_head_dim=int(m["qk_head_dim"]), qk_pos_emb_head_dim=int(m["qk_pos_emb_head_dim"]),
                  v_head_dim=int(m["v_head_dim"]), rotary_base=float(m["rotary_base"] or 10000),
                  rotary_scaling_factor=float(m["rotary_scaling_factor"] or 1.0),
                  mscale=float(m["mscale"] or 1.0), mscale_all_dim=float(m["mscale_all_dim"] or 1.0))
        return MLATransformerConfig(**kw)
    return TransformerConfig(**kw)


class _ParameterFreeAttention:
    """Stand-in core attention for MLA on the local spec (built only, never run)."""

    def __new__(cls, *args, **kwargs):
        import torch

        return torch.nn.Identity()


def count_stage(m: dict, tp: int, pp: int, ep: int, etp: int, stage: int, pad) -> dict:
    import torch
    import torch.distributed as dist
    from torch.testing._internal.distributed.fake_pg import FakeStore

    from megatron.core import parallel_state
    from megatron.core.models.gpt import GPTModel
    from megatron.core.models.gpt.gpt_layer_specs import (
        get_gpt_decoder_block_spec,
        get_gpt_decoder_layer_specs,
        get_gpt_mtp_block_spec,
    )
    from megatron.core.post_training.modelopt.layers import Linear as UnshardedLinear
    import megatron.core.transformer.multi_latent_attention as mla

    world = tp * pp * ep * etp
    rank = stage * (world // pp)  # Megatron's default order tp-cp-ep-dp-pp: pp outermost
    dist.init_process_group("fake", store=FakeStore(), rank=rank, world_size=world)
    try:
        parallel_state.initialize_model_parallel(
            tensor_model_parallel_size=tp, pipeline_model_parallel_size=pp,
            expert_model_parallel_size=ep, expert_tensor_parallel_size=etp,
            create_gloo_process_groups=False)  # the fake backend has no gloo groups
        assert parallel_state.get_pipeline_model_parallel_rank() == stage
        config = transformer_config(m, tp, pp, ep, etp)
        spec = get_gpt_decoder_block_spec(config, use_transformer_engine=False,
                                          normalization=config.normalization, pp_rank=stage)
        if m["multi_latent_attention"]:
            # Production's TELinear(parallel_mode="duplicated") for the down projections.
            mla.Linear = UnshardedLinear
            # Megatron's TE extension module imports without TE installed (its classes are None),
            # so MLA believes TE is there and tests isinstance(..., None): tell it the truth.
            mla.HAVE_TE = False
            for ls in spec.layer_specs:
                sub = ls.submodules.self_attention.submodules
                sub.linear_q_down_proj = UnshardedLinear
                sub.linear_kv_down_proj = UnshardedLinear
                # The local DotProductAttention refuses MLA's k_channels/v_channels; core attention
                # holds no parameters in any spec (TE's neither).
                sub.core_attention = _ParameterFreeAttention
        mtp_spec = None
        if config.mtp_num_layers:
            # Megatron's MTP block (on the last stage) repeats the model's last layer spec.
            last = get_gpt_decoder_layer_specs(config, False, config.normalization)[-1]
            mtp_spec = get_gpt_mtp_block_spec(config, last, use_transformer_engine=False, pp_rank=stage)
        vocab = pad(int(m["vocab_size"]), argparse.Namespace(
            make_vocab_size_divisible_by=int(m["make_vocab_size_divisible_by"] or 128),
            tensor_model_parallel_size=tp, rank=1))
        # Megatron builds some tensors on torch.cuda.current_device() (the MoE router's buffers),
        # makes side streams (the alltoall dispatcher, shared experts) and, with tied embeddings and
        # PP > 1, moves the last stage's embedding copy to CUDA to all-reduce it with the first
        # stage's: while the model is built these answer with the meta device (no parameter changes).
        saved = (torch.Tensor.cuda, torch.cuda.current_device, torch.cuda.Stream)
        torch.Tensor.cuda = lambda self, *a, **k: self
        torch.cuda.current_device = lambda: torch.device("meta")
        torch.cuda.Stream = lambda *a, **k: None
        try:
            with torch.device("meta"):
                    gpt = GPTModel(
                    config=config, transformer_layer_spec=spec, vocab_size=vocab,
                    max_sequence_length=4096, pre_process=stage == 0, post_process=stage == pp - 1,
                    share_embeddings_and_output_weights=not m["untie_embeddings_and_output_weights"],
                    position_embedding_type="rope", rotary_base=int(m["rotary_base"] or 10000),
                    mtp_block_spec=mtp_spec)
        finally:
            torch.Tensor.cuda, torch.cuda.current_device, torch.cuda.Stream = saved
        dense = expert = 0
        for p in gpt.parameters():
            if getattr(p, "allreduce", True):
                dense += p.numel()
            else:
                expert += p.numel()
        return {"stage": stage, "layers": len(gpt.decoder.layers), "dense": dense, "expert": expert,
                "padded_vocab": vocab}
    finally:
        parallel_state.destroy_model_parallel()
        dist.destroy_process_group()


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--megatron", required=True, help="a Megatron-LM tree (holds megatron/core, megatron/training)")
    ap.add_argument("--megatron-ref", default="NVIDIA/Megatron-LM@1dcf0dafa884ad52ffb243625717a3471643e087")
    ap.add_argument("--out", default=str(OUT))
    ap.add_argument("--only", default="", help="comma-separated model options")
    a = ap.parse_args()
    megatron = Path(a.megatron).resolve()
    sys.path.insert(0, str(ROOT))
    sys.path.insert(0, str(megatron))
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29555")
    import torch

    pad = megatron_vocab_padding(megatron)
    only = {x for x in a.only.split(",") if x}
    cases = []
    t0 = time.time()
    for name, layers, freq, layouts in CASES:
        if only and name not in only:
            continue
        m = model_fields(name)
        if layers is not None:
            m["num_layers"] = layers
            m["moe_layer_freq"] = freq
        entry = {"model": name, "family": m["family"], "num_layers": m["num_layers"],
                 "moe_layer_freq": m["moe_layer_freq"],
                 "reduced_layers": layers is not None, "layouts": []}
        why = NOT_BUILDABLE.get(m["family"] or "")
        if why is None and m.get("spec"):
            why = f"a slime plugin layer spec ({m['spec']}), not Megatron's own"
        if why:
            entry.update(built=False, why=why)
            cases.append(entry)
            print(name, "not built:", why, flush=True)
            continue
        entry["built"] = True
        for tp, pp, ep, etp in layouts:
            stages = [count_stage(m, tp, pp, ep, etp, s, pad) for s in range(pp)]
            entry["layouts"].append({"tp": tp, "pp": pp, "ep": ep, "etp": etp, "stages": stages})
            print(name, (tp, pp, ep, etp), [(s["dense"], s["expert"]) for s in stages], flush=True)
        cases.append(entry)
    out = {
        "generated_by": "tools/gen_rank_params.py", "megatron": a.megatron_ref, "torch": torch.__version__,
        "how": ("Megatron-core GPTModel per pipeline stage on the meta device, local layer spec "
                "(get_gpt_decoder_block_spec, use_transformer_engine=False), fake process groups "
                "(world = TP x PP x EP x ETP, the stage's first rank), vocabulary padded by Megatron's "
                "_vocab_size_with_padding; expert = parameters with allreduce=False"),
        "stand_ins": ["MLA linear_q_down_proj / linear_kv_down_proj: Megatron's unsharded Linear "
                      "(post_training/modelopt/layers.py) in place of TE's TELinear(parallel_mode='duplicated'); "
                      "the local spec's ColumnParallelLinear would shard them by TP",
                      "while the model is built, Tensor.cuda is the identity, torch.cuda.current_device "
                      "answers the meta device and torch.cuda.Stream is None (router buffers, dispatcher "
                      "side streams, the tied-embedding copy of the last stage); no parameter depends on them",
                      "sequence_parallel=False: it changes activations, not parameters, and the local "
                      "spec's torch norms refuse it",
                      "MLA core attention: a parameter-free stand-in (the local spec's DotProductAttention "
                      "refuses MLA's k_channels/v_channels; core attention holds no parameters in any spec)",
                      "MoE experts: SequentialMLP (moe_grouped_gemm=False); TEGroupedMLP holds the same "
                      "parameters per expert"],
        "cases": cases,
    }
    Path(a.out).write_text(json.dumps(out, indent=1) + "\n")
    print(f"{a.out}: {sum(len(c['layouts']) for c in cases)} layouts in {time.time() - t0:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
