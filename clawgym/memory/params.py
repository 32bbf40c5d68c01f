"""Parameter counts from the model group's architecture, whole and per GPU rank.

Counted as Megatron-core builds the GPT model (``megatron/core/models/gpt``): embedding
[V, h], decoder layers, final norm, output layer [V, h] unless tied. ``count()`` uses the
checkpoint's vocabulary (what transformers counts, checked in tests/data/param_counts.json);
``per_rank()`` uses Megatron's padded vocabulary and the sharding of each tensor:

* TP (tensor parallel) splits every column/row-parallel linear and the vocabulary; norms,
  MLA's down projections (``parallel_mode="duplicated"``) and the MoE router are replicated.
* PP (pipeline) gives each stage ``num_layers / PP`` layers; the embedding lives on the first
  stage, the output layer (or, tied, a copy of the embedding) on the last.
* EP (expert parallel) gives each rank ``num_experts / EP`` experts, each split by expert-TP.

Hybrid linear-attention families (Qwen3-Next, Qwen3.5: Gated DeltaNet layers) and GLM-5's
sparse-attention indexer take dimensions the model group does not carry (slime's plugin
specs read them from the checkpoint's config.json): they are the ``LINEAR_ATTENTION`` and
``DSA_INDEXER`` tables below, each naming where its numbers come from.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from typing import Any, Dict, List, Mapping, Optional

#: Gated DeltaNet dimensions per family (config.json linear_*; every ``interval``-th layer is full
#: attention, the others linear). Qwen3-Next: Qwen/Qwen3-Next-80B-A3B-Instruct config.json;
#: Qwen3.5: transformers' Qwen3_5TextConfig defaults (the family shares them).
LINEAR_ATTENTION: Dict[str, Dict[str, int]] = {
    "qwen3-next": {"key_heads": 16, "value_heads": 32, "key_dim": 128, "value_dim": 128, "conv": 4, "interval": 4},
    "qwen3.5": {"key_heads": 16, "value_heads": 32, "key_dim": 128, "value_dim": 128, "conv": 4, "interval": 4},
}

#: GLM-5 (DSA) lightning-indexer dimensions (config.json index_n_heads / index_head_dim).
DSA_INDEXER: Dict[str, Dict[str, int]] = {
    "glm5": {"heads": 32, "head_dim": 128},
    "glm5.2": {"heads": 32, "head_dim": 128},
}

#: Families whose QK norm spans all heads (one weight of heads x head_dim) instead of one head.
QK_NORM_PER_LAYER = {"minimax-m2"}


def moe_pattern(m: Mapping[str, Any]) -> List[int]:
    """1 per MoE layer, 0 per dense layer (slime's ``--moe-layer-freq`` literal, or every layer)."""
    return list(_memo("moe_pattern", m, (), lambda: _moe_pattern(m)))


def _moe_pattern(m: Mapping[str, Any]) -> List[int]:
    n = int(m["num_layers"])
    if not m.get("num_experts"):
        return [0] * n
    freq = m.get("moe_layer_freq")
    if freq is None:
        return [1] * n
    if isinstance(freq, int):
        return [1 if i % freq == 0 else 0 for i in range(n)]
    # "[0]*3+[1]*58": a list literal times counts; evaluate without eval().
    out: List[int] = []
    for part in str(freq).replace(" ", "").split("+"):
        items, _, times = part.partition("*")
        out += list(ast.literal_eval(items)) * int(times or 1)
    return out


def head_dim(m: Mapping[str, Any]) -> int:
    return int(m.get("kv_channels") or int(m["hidden_size"]) // int(m["num_attention_heads"]))


def padded_vocab(m: Mapping[str, Any], tp: int) -> int:
    """Megatron's ``_vocab_size_with_padding``: a multiple of make_vocab_size_divisible_by x TP."""
    multiple = int(m.get("make_vocab_size_divisible_by") or 128) * max(1, tp)
    v = int(m["vocab_size"])
    return -(-v // multiple) * multiple


@dataclass
class LayerParams:
    """One decoder layer's parameters, by how they shard: ``tp`` split by TP, ``rep`` replicated
    on every TP rank, ``expert`` (routed experts, split by EP x expert-TP)."""

    tp: int = 0
    rep: int = 0
    expert: int = 0

    @property
    def total(self) -> int:
        return self.tp + self.rep + self.expert


def _attention(m: Mapping[str, Any], layer: int) -> LayerParams:
    h = int(m["hidden_size"])
    nq = int(m["num_attention_heads"])
    p = LayerParams(rep=h)  # input layernorm (TE fuses it into linear_qkv; same count)
    fam = m.get("family") or ""
    lin = LINEAR_ATTENTION.get(fam) if m.get("use_gated_attention") else None
    if lin is not None and (layer + 1) % lin["interval"] != 0:
        # Gated DeltaNet: in_proj_qkvz, in_proj_ba, depthwise conv1d, dt_bias, A_log, gated norm, out_proj.
        k, v = lin["key_heads"] * lin["key_dim"], lin["value_heads"] * lin["value_dim"]
        p.tp += h * (2 * k + 2 * v) + h * 2 * lin["value_heads"] + (2 * k + v) * lin["conv"]
        p.tp += 2 * lin["value_heads"] + v * h
        p.rep += lin["value_dim"]
        return p
    if m.get("multi_latent_attention"):
        qk, rope, vd = int(m["qk_head_dim"]), int(m["qk_pos_emb_head_dim"]), int(m["v_head_dim"])
        ql, kvl = m.get("q_lora_rank"), int(m["kv_lora_rank"])
        if ql:
            p.rep += h * int(ql) + int(ql)          # linear_q_down_proj (duplicated) + q_layernorm
            p.tp += int(ql) * nq * (qk + rope)      # linear_q_up_proj
        else:
            p.tp += h * nq * (qk + rope)            # linear_q_proj
        p.rep += h * (kvl + rope) + kvl             # linear_kv_down_proj (duplicated) + kv_layernorm
        p.tp += kvl * nq * (qk + vd) + nq * vd * h  # linear_kv_up_proj, linear_proj
        idx = DSA_INDEXER.get(fam)
        if idx is not None and ql:
            # Indexer: wq_b [q_lora -> heads x dim], wk [h -> dim], k_norm (weight + bias), weights_proj.
            p.rep += int(ql) * idx["heads"] * idx["head_dim"] + h * idx["head_dim"] + 2 * idx["head_dim"]
            p.rep += h * idx["heads"]
        return p
    d = head_dim(m)
    nkv = int(m["num_query_groups"] or nq)
    q_out = nq * d * (2 if m.get("attention_output_gate") else 1)
    qkv = q_out + 2 * nkv * d
    p.tp += h * qkv + nq * d * h
    if m.get("add_qkv_bias") or not m.get("disable_bias_linear", True):
        p.tp += qkv
    if not m.get("disable_bias_linear", True):
        p.rep += h
    if m.get("qk_layernorm"):
        p.rep += (nq * d + nkv * d) if fam in QK_NORM_PER_LAYER else 2 * d
    if m.get("post_self_attn_layernorm"):
        p.rep += h
    return p


def _mlp(m: Mapping[str, Any], moe: bool) -> LayerParams:
    h = int(m["hidden_size"])
    up = 2 if m.get("swiglu", True) else 1
    p = LayerParams(rep=h)  # pre-MLP layernorm
    if m.get("post_mlp_layernorm"):
        p.rep += h
    if not moe:
        f = int(m["ffn_hidden_size"])
        p.tp += h * up * f + f * h
        return p
    e, f = int(m["num_experts"]), int(m["moe_ffn_hidden_size"])
    p.rep += e * h  # router weight (expert bias is a buffer)
    p.expert += e * (h * up * f + f * h)
    shared = m.get("moe_shared_expert_intermediate_size")
    if shared:
        p.tp += h * up * int(shared) + int(shared) * h
        if m.get("moe_shared_expert_gate"):
            p.rep += h
    return p


def layer_params(m: Mapping[str, Any]) -> List[LayerParams]:
    return list(_memo("layer_params", m, (), lambda: _layer_params(m)))


def _layer_params(m: Mapping[str, Any]) -> List[LayerParams]:
    out = []
    for i, is_moe in enumerate(moe_pattern(m)):
        a, b = _attention(m, i), _mlp(m, bool(is_moe))
        out.append(LayerParams(a.tp + b.tp, a.rep + b.rep, a.expert + b.expert))
    return out


def _memo(what: str, m: Mapping[str, Any], args: tuple, compute):
    """``compute()``'s value, kept by the model's values and ``args``: the layout search asks for one model's
    layers, counts and stages thousands of times. The public functions hand out copies of what is kept."""
    key = (what, _model_key(m), args)
    found = _MEMO.get(key)
    if found is None:
        if len(_MEMO) > 4096:
            _MEMO.clear()
        found = _MEMO[key] = compute()
    return found


_MEMO: Dict[Any, Any] = {}


def _model_key(m: Mapping[str, Any]) -> Any:
    # The same dict asked again with the same values (the search's case): its key without rebuilding it.
    values = tuple(m.values())
    if _LAST_KEY and _LAST_KEY[0] is m and _LAST_KEY[1] == values:
        return _LAST_KEY[2]
    key = tuple((k, tuple(v) if isinstance(v, list) else v) for k, v in m.items())
    _LAST_KEY[:] = [m, values, key]
    return key


_LAST_KEY: List[Any] = []


def mtp_params(m: Mapping[str, Any], layers: List[LayerParams]) -> int:
    """Megatron's MTP block per layer: enorm, hnorm, eh_proj [2h -> h], one decoder layer, final norm
    (the embedding and output layer are shared with the main model)."""
    n = int(m.get("mtp_num_layers") or 0)
    h = int(m["hidden_size"])
    return n * (3 * h + 2 * h * h + layers[-1].total) if n else 0


@dataclass
class Counts:
    """Whole-model parameter counts with the checkpoint's vocabulary."""

    total: int
    embedding: int
    output: int
    layers: int
    experts: int
    mtp: int

    def to_dict(self) -> Dict[str, int]:
        return dict(self.__dict__)


def count(m: Mapping[str, Any]) -> Counts:
    return Counts(**_memo("count", m, (), lambda: _count(m)).to_dict())


def _count(m: Mapping[str, Any]) -> Counts:
    layers = layer_params(m)
    h, v = int(m["hidden_size"]), int(m["vocab_size"])
    emb = v * h
    out = v * h if m.get("untie_embeddings_and_output_weights") else 0
    body = sum(lp.total for lp in layers)
    mtp = mtp_params(m, layers)
    return Counts(total=emb + out + body + h, embedding=emb, output=out, layers=body,
                  experts=sum(lp.expert for lp in layers), mtp=mtp)


@dataclass
class RankParams:
    """Parameters one GPU holds (the largest pipeline stage): dense and expert parts (the
    distributed optimizer shards them over different data-parallel groups)."""

    dense: int
    expert: int

    @property
    def total(self) -> int:
        return self.dense + self.expert


def per_stage(m: Mapping[str, Any], *, tp: int, pp: int = 1, ep: int = 1, etp: int = 1) -> List[RankParams]:
    """Parameters one GPU of each pipeline stage holds (checked against Megatron's own model, built
    per stage under fake process groups: tests/data/rank_param_counts.json)."""
    tp, pp, ep, etp = max(1, tp), max(1, pp), max(1, ep), max(1, etp)
    stages = _memo("per_stage", m, (tp, pp, ep, etp), lambda: _per_stage(m, tp, pp, ep, etp))
    return [RankParams(r.dense, r.expert) for r in stages]


def _per_stage(m: Mapping[str, Any], tp: int, pp: int, ep: int, etp: int) -> List[RankParams]:
    layers = layer_params(m)
    h = int(m["hidden_size"])
    vshard = padded_vocab(m, tp) // tp * h
    tied = not m.get("untie_embeddings_and_output_weights")
    n = len(layers)
    per_stage_layers = -(-n // pp)
    out: List[RankParams] = []
    for s in range(pp):
        chunk = layers[s * per_stage_layers:(s + 1) * per_stage_layers]
        dense = sum(lp.tp // tp + lp.rep for lp in chunk)
        expert = sum(lp.expert // (ep * etp) for lp in chunk)
        if s == 0:
            dense += vshard
        if s == pp - 1:
            dense += h  # final norm
            if not tied or pp > 1:
                dense += vshard
            if m.get("mtp_num_layers"):
                last = layers[-1]
                k = int(m["mtp_num_layers"])
                dense += k * (3 * h + 2 * h * h // tp + last.tp // tp + last.rep)
                expert += k * last.expert // (ep * etp)
                if pp > 1:
                    # The MTP block embeds its input tokens itself: Megatron's GPTModel builds the
                    # word embedding on every stage that runs MTP (``if self.pre_process or
                    # self.mtp_process``), so the last stage holds a copy of it beside the output
                    # layer (found by tools/gen_rank_params.py: mimo_7b_rl at PP=2 and 4).
                    dense += vshard
        out.append(RankParams(dense, expert))
    return out


def per_rank(m: Mapping[str, Any], *, tp: int, pp: int = 1, ep: int = 1, etp: int = 1) -> RankParams:
    """The largest pipeline stage's parameters per GPU (what the memory plan sizes for)."""
    return max(per_stage(m, tp=tp, pp=pp, ep=ep, etp=etp), key=lambda r: r.total)
