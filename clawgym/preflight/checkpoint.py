"""Checkpoint check: the HF checkpoint exists and its config.json agrees with the model group.

The pairs are the ones slime's ``_hf_validate_args`` asserts at trainer startup (after
Ray, SGLang and Megatron have spent minutes starting), plus the GQA, expert-count and
top-k pairs Megatron would otherwise get wrong silently.
"""

from __future__ import annotations

import ast
import json
import math
import os
from pathlib import Path
from typing import Any, Callable, Dict, List, Mapping, Optional, Tuple

from clawgym.preflight.core import CheckFailed, Context, NotApplicable


def _num(value: Any) -> str:
    """A value as the user would type it in an override."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return "null"
    if isinstance(value, float) and value.is_integer() and abs(value) >= 1:
        return str(int(value))
    return str(value)


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, bool) or isinstance(b, bool) or a is None or b is None:
        return a == b
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        return math.isclose(a, b, rel_tol=1e-9, abs_tol=0.0)
    return a == b


def layer_pattern(freq: Any, num_layers: int) -> Optional[List[int]]:
    """Megatron's --moe-layer-freq as a per-layer list (1 = MoE); None when it cannot be read.

    Accepts an int N (every N-th layer is MoE), a list, or slime's Python literal such as
    "[1]*48" or "[0]*3+[1]*45" (evaluated without eval).
    """
    if freq is None:
        return [1] * num_layers
    if isinstance(freq, int):
        return [1 if i % freq == 0 else 0 for i in range(num_layers)] if freq > 0 else None
    if isinstance(freq, list):
        return [int(x) for x in freq]
    text = str(freq).strip()
    if text.isdigit():
        return layer_pattern(int(text), num_layers)

    def ev(node: ast.AST) -> Any:
        if isinstance(node, ast.Expression):
            return ev(node.body)
        if isinstance(node, ast.Constant) and isinstance(node.value, int):
            return node.value
        if isinstance(node, ast.List):
            return [ev(e) for e in node.elts]
        if isinstance(node, ast.BinOp) and isinstance(node.op, (ast.Add, ast.Mult)):
            left, right = ev(node.left), ev(node.right)
            return left + right if isinstance(node.op, ast.Add) else left * right
        raise ValueError(text)

    try:
        value = ev(ast.parse(text, mode="eval"))
    except (SyntaxError, ValueError, TypeError):
        return None
    return [int(x) for x in value] if isinstance(value, list) else None


def all_moe(m: Mapping[str, Any]) -> bool:
    """True when every layer is a MoE layer (slime then skips the dense FFN size)."""
    if m.get("num_experts") is None:
        return False
    pattern = layer_pattern(m.get("moe_layer_freq"), int(m["num_layers"]))
    return bool(pattern) and all(x == 1 for x in pattern)


#: Megatron's value for a model key the option leaves unset (None: no flag emitted).
MEGATRON_DEFAULTS: Dict[str, Any] = {
    "norm_epsilon": 1e-5,
    "rotary_percent": 1.0,
    "moe_router_topk_scaling_factor": 1.0,
    "moe_router_num_groups": 1,
    "moe_router_group_topk": 1,
    "moe_router_score_function": "softmax",
    "mscale": 1.0,
    "mscale_all_dim": 1.0,
}

#: config.json keys naming the routed-expert count, by family (Qwen-MoE, DeepSeek/GLM/Kimi, MiniMax/Mixtral).
EXPERT_KEYS = ("num_experts", "n_routed_experts", "num_local_experts")


def effective(m: Mapping[str, Any], key: str) -> Any:
    """The value Megatron ends up with for a model key (its default when the option leaves it unset)."""
    value = m.get(key)
    if value is not None:
        return value
    if key == "num_query_groups":
        # Without --group-query-attention every head is its own group.
        return m.get("num_attention_heads")
    if key == "kv_channels" and m.get("hidden_size") and m.get("num_attention_heads"):
        return m["hidden_size"] // m["num_attention_heads"]
    return MEGATRON_DEFAULTS.get(key)


def hf_value(hf: Mapping[str, Any], keys: Tuple[str, ...]) -> Tuple[Optional[str], Any]:
    """(key, value) of the first key config.json has.

    RoPE fields are also looked up in ``rope_parameters`` (transformers 5) and
    ``rope_scaling``, as slime does for rope_theta.
    """
    for key in keys:
        if key in hf:
            return key, hf[key]
        if key in ("rope_theta", "partial_rotary_factor"):
            for nested in ("rope_parameters", "rope_scaling"):
                block = hf.get(nested)
                if isinstance(block, dict) and key in block:
                    return f"{nested}.{key}", block[key]
    if keys == ("tie_word_embeddings",):
        # transformers' PretrainedConfig ties by default, and slime compares that default.
        return "tie_word_embeddings (default)", True
    return None, None


def _rope_block(hf: Mapping[str, Any]) -> Tuple[Optional[str], Mapping[str, Any]]:
    """The RoPE scaling dict of config.json (rope_scaling, or transformers 5's rope_parameters)."""
    for name in ("rope_scaling", "rope_parameters"):
        block = hf.get(name)
        if isinstance(block, dict) and (block.get("factor") is not None or
                                        block.get("rope_type", block.get("type")) not in (None, "default")):
            return name, block
    return None, {}


def _is_moe(m: Mapping[str, Any]) -> bool:
    return m.get("num_experts") is not None


def _mla(m: Mapping[str, Any]) -> bool:
    return bool(m.get("multi_latent_attention"))


def _dense_layers(hf: Mapping[str, Any]) -> Tuple[Optional[str], Optional[List[int]]]:
    """(key, indices of dense layers) config.json gives for a MoE model, or (None, None)."""
    n = hf.get("num_hidden_layers")
    if not isinstance(n, int):
        return None, None
    k = hf.get("first_k_dense_replace")
    if isinstance(k, int):
        return "first_k_dense_replace", list(range(min(k, n)))
    only = hf.get("mlp_only_layers")
    if isinstance(only, list):
        return "mlp_only_layers", sorted(int(x) for x in only)
    return None, None


def _freq_literal(dense: List[int], n: int) -> str:
    """A --moe-layer-freq literal with ``dense`` layers dense and the rest MoE."""
    if dense == list(range(len(dense))):
        return f"'[0]*{len(dense)}+[1]*{n - len(dense)}'" if dense else f"'[1]*{n}'"
    return "'" + str([0 if i in dense else 1 for i in range(n)]).replace(" ", "") + "'"


class _Compare:
    """Collects agreeing keys, mismatches and fixes."""

    def __init__(self, hf: Mapping[str, Any], m: Mapping[str, Any]):
        self.hf, self.m = hf, m
        self.agree: List[str] = []
        self.problems: List[str] = []
        self.fixes: List[str] = []

    def show(self, key: str) -> str:
        have = self.m.get(key)
        eff = effective(self.m, key)
        if have is None and eff is not None:
            return f"model.{key}=null (Megatron uses {_num(eff)})"
        return f"model.{key}={_num(have)}"

    def pair(self, hf_keys: Tuple[str, ...], key: str, *, to_hf: Callable[[Any], Any] = lambda v: v,
             from_hf: Callable[[Any], Any] = lambda v: v, only_if_set: bool = False) -> None:
        """Compare config.json's first present ``hf_keys`` with the model key's effective value."""
        hf_key, want = hf_value(self.hf, hf_keys)
        if hf_key is None:
            return
        if only_if_set and self.m.get(key) is None:
            return
        self.same(key, to_hf(effective(self.m, key)), hf_key, want, from_hf(want))

    def same(self, key: str, have_hf: Any, hf_key: str, want: Any, fix: Any, *, shown: Any = None) -> None:
        """Agree when the model's value in HF terms equals ``want``; else report ``shown`` (default want)."""
        if _same(have_hf, want):
            if key not in self.agree:
                self.agree.append(key)
            return
        self.problems.append(f"{self.show(key)} but config.json {hf_key}={_num(want if shown is None else shown)}")
        self.fixes.append(f"model.{key}={_num(fix)}")


def compare(hf: Mapping[str, Any], m: Mapping[str, Any]) -> Tuple[List[str], List[str], List[str]]:
    """(agreeing model keys, mismatch descriptions, fixes) for a config.json and a model group.

    The pairs slime's ``_hf_validate_args`` asserts at startup (hidden, heads, layers, dense
    and expert FFN, shared expert, tied embeddings, norm epsilon, rope theta), plus what
    each family adds and Megatron would otherwise build wrong without a word: GQA groups,
    head dim, vocabulary, expert count and top-k, the dense-layer prefix, routing
    (score function, expert bias, scaling, groups), MLA ranks and head dims, QKV bias, QK
    norm, partial rotary, RoPE scaling and multi-token prediction. A key config.json does
    not have is not checked; an unset model key is compared as the value Megatron uses.
    """
    if isinstance(hf.get("text_config"), dict):
        hf = {**hf, **hf["text_config"]}
    c = _Compare(hf, m)
    moe = _is_moe(m)
    c.pair(("hidden_size",), "hidden_size")
    c.pair(("num_hidden_layers",), "num_layers")
    c.pair(("num_attention_heads",), "num_attention_heads")
    c.pair(("num_key_value_heads",), "num_query_groups")
    if not all_moe(m):
        # slime skips the dense FFN when every layer is MoE.
        c.pair(("intermediate_size",), "ffn_hidden_size")
    if not _mla(m):
        c.pair(("head_dim",), "kv_channels")
    c.pair(("vocab_size",), "vocab_size")
    c.pair(("max_position_embeddings",), "max_position_embeddings", only_if_set=True)
    # Experts.
    _, hf_experts = hf_value(hf, EXPERT_KEYS)
    if moe or hf_experts:
        c.pair(EXPERT_KEYS, "num_experts")
        c.pair(("num_experts_per_tok",), "moe_router_topk")
        if "moe_intermediate_size" not in hf and "num_local_experts" in hf:
            # MiniMax/Mixtral-style configs give the expert width as intermediate_size.
            c.pair(("intermediate_size",), "moe_ffn_hidden_size")
        else:
            c.pair(("moe_intermediate_size",), "moe_ffn_hidden_size")
        _shared(c)
        _layer_pattern(c)
        c.pair(("routed_scaling_factor",), "moe_router_topk_scaling_factor")
        c.pair(("n_group",), "moe_router_num_groups")
        c.pair(("topk_group",), "moe_router_group_topk")
        c.pair(("scoring_func",), "moe_router_score_function")
        if "topk_method" in hf:
            # DeepSeek's aux-loss-free routing (noaux_tc) is the per-expert bias.
            c.same("moe_router_enable_expert_bias", bool(m.get("moe_router_enable_expert_bias")), "topk_method",
                   hf["topk_method"] == "noaux_tc", hf["topk_method"] == "noaux_tc", shown=hf["topk_method"])
        c.pair(("use_routing_bias",), "moe_router_enable_expert_bias", to_hf=bool)
    c.pair(("tie_word_embeddings",), "untie_embeddings_and_output_weights", to_hf=lambda v: not v,
           from_hf=lambda v: not v)
    c.pair(("rms_norm_eps",), "norm_epsilon")
    c.pair(("rope_theta",), "rotary_base")
    if not _mla(m):
        _partial_rotary(c)
        c.pair(("attention_bias",), "add_qkv_bias", to_hf=bool)
    c.pair(("use_qk_norm",), "qk_layernorm", to_hf=bool)
    _rope_scaling(c)
    _mla_fields(c)
    if m.get("mtp_num_layers") is not None:
        hf_key, want = hf_value(hf, ("num_nextn_predict_layers",))
        c.same("mtp_num_layers", m["mtp_num_layers"], hf_key or "num_nextn_predict_layers", want,
               want if want is not None else None)
    return c.agree, c.problems, c.fixes


def _shared(c: _Compare) -> None:
    hf, m = c.hf, c.m
    have = m.get("moe_shared_expert_intermediate_size")
    if "shared_expert_intermediate_size" in hf:
        want, key = hf["shared_expert_intermediate_size"], "shared_expert_intermediate_size"
    elif "n_shared_experts" in hf:
        per = hf.get("moe_intermediate_size") or 0
        n = hf["n_shared_experts"] or 0
        want, key = (n * per) or None, f"n_shared_experts x moe_intermediate_size ({n} x {per})"
    else:
        return
    c.same("moe_shared_expert_intermediate_size", have, key, want if want else None, want if want else None)


def _layer_pattern(c: _Compare) -> None:
    hf, m = c.hf, c.m
    key, dense = _dense_layers(hf)
    n = hf.get("num_hidden_layers")
    if key is None or not _is_moe(m) or not isinstance(n, int):
        return
    pattern = layer_pattern(m.get("moe_layer_freq"), int(m["num_layers"]))
    have = None if pattern is None else [i for i, x in enumerate(pattern) if x == 0]
    if have == dense:
        c.agree.append("moe_layer_freq")
        return
    shown = f"{key}={hf[key]}"
    c.problems.append(f"model.moe_layer_freq={_num(m.get('moe_layer_freq'))} makes layers {have} dense but "
                      f"config.json {shown} makes layers {dense} dense")
    c.fixes.append(f"model.moe_layer_freq={_freq_literal(dense, n)}")


def _partial_rotary(c: _Compare) -> None:
    hf = c.hf
    hf_key, want = hf_value(hf, ("partial_rotary_factor",))
    if hf_key is None and isinstance(hf.get("rotary_dim"), int) and isinstance(hf.get("head_dim"), int):
        # MiniMax gives the rotary width in dims.
        hf_key, want = f"rotary_dim/head_dim ({hf['rotary_dim']}/{hf['head_dim']})", hf["rotary_dim"] / hf["head_dim"]
    if hf_key is None:
        return
    c.same("rotary_percent", effective(c.m, "rotary_percent"), hf_key, want, want)


def _rope_scaling(c: _Compare) -> None:
    name, block = _rope_block(c.hf)
    m = c.m
    if name is None:
        if m.get("use_rope_scaling"):
            c.same("use_rope_scaling", True, "rope_scaling", False, False, shown=None)
        return
    kind = block.get("rope_type", block.get("type"))
    # Megatron's --use-rope-scaling is Llama 3's scheme; other kinds (yarn) come from the MLA fields.
    if kind == "llama3" or m.get("use_rope_scaling"):
        c.same("use_rope_scaling", bool(m.get("use_rope_scaling")), f"{name}.rope_type", kind == "llama3",
               kind == "llama3", shown=kind)
    if block.get("factor") is not None:
        c.same("rotary_scaling_factor", m.get("rotary_scaling_factor"), f"{name}.factor", block["factor"],
               block["factor"])
    for key in ("mscale", "mscale_all_dim"):
        if block.get(key) is not None:
            c.same(key, effective(m, key), f"{name}.{key}", block[key], block[key])


def _mla_fields(c: _Compare) -> None:
    hf, m = c.hf, c.m
    if not _mla(m):
        if hf.get("kv_lora_rank"):
            c.same("multi_latent_attention", False, "kv_lora_rank", hf["kv_lora_rank"], True)
        return
    for hf_key, key in (("q_lora_rank", "q_lora_rank"), ("kv_lora_rank", "kv_lora_rank"),
                        ("qk_nope_head_dim", "qk_head_dim"), ("qk_rope_head_dim", "qk_pos_emb_head_dim"),
                        ("v_head_dim", "v_head_dim")):
        if hf_key in hf:
            c.same(key, m.get(key), hf_key, hf[hf_key], hf[hf_key])


def check_checkpoint(ctx: Context) -> str:
    """paths.hf_checkpoint is a HF checkpoint whose config.json matches the model group."""
    c = ctx.c
    m, paths = c["model"], c["paths"]
    ckpt = Path(paths["hf_checkpoint"])
    if not ckpt.is_dir():
        raise CheckFailed(
            f"paths.hf_checkpoint={ckpt} does not exist",
            f"download the weights: hf download {m['hf_repo']} --local-dir {ckpt} "
            f"(or set paths.hf_checkpoint, or paths.root to the ClawGym-RL checkout)")
    config_file = ckpt / "config.json"
    if not config_file.is_file():
        raise CheckFailed(f"paths.hf_checkpoint={ckpt} has no config.json, so it is not a Hugging Face checkpoint",
                          f"re-download it: hf download {m['hf_repo']} --local-dir {ckpt}")
    try:
        hf = json.loads(config_file.read_text())
        if not isinstance(hf, dict):
            raise ValueError("not a JSON object")
    except (OSError, ValueError) as exc:
        raise CheckFailed(f"{config_file} cannot be read as JSON: {exc}", f"re-download {m['hf_repo']}")
    agree, problems, fixes = compare(hf, m)
    if problems:
        raise CheckFailed(
            f"config.json of {ckpt} disagrees with model={m['name']} (slime would stop at startup): "
            + "; ".join(problems),
            "set " + " ".join(fixes) + " or pick the model option that matches this checkpoint (model=...)")
    if c["grpo"]["use_kl_loss"] and not os.path.exists(paths["ref_load"]):
        raise CheckFailed(
            f"paths.ref_load={paths['ref_load']} does not exist (slime loads the KL reference model "
            "whenever grpo.use_kl_loss=true)",
            "set paths.ref_load to the reference checkpoint (usually paths.hf_checkpoint) or grpo.use_kl_loss=false")
    load = c["checkpoint"]["load"]
    if load and not os.path.isdir(load):
        raise CheckFailed(f"checkpoint.load={load} does not exist",
                          "point checkpoint.load at a Megatron checkpoint dir (see clawgym resume) or set it to null")
    return f"{ckpt}: config.json agrees with model={m['name']} on {len(agree)} fields ({', '.join(agree)})"


def check_save_dir(ctx: Context) -> str:
    """A fresh run must not write over the checkpoints of an earlier one.

    Megatron numbers checkpoints by rollout id, so a run started without ``--load`` in a
    save dir that already holds ``iter_*`` folders would overwrite them one by one.
    Continuing into the same dir is what ``checkpoint.load=<save>`` (``clawgym resume``) is for.
    """
    save = ctx.c["paths"]["save"]
    if not save:
        raise NotApplicable("paths.save is null: the run saves nothing")
    path = Path(save)
    if not path.is_dir():
        return f"{save} (new)"
    from clawgym.common.ownership import save_dir_holder

    holder = save_dir_holder(str(path))
    if holder is not None:
        raise CheckFailed(
            f"paths.save={save} is in use: {holder}; a second trainer there would overwrite its iter_* checkpoints",
            "wait for that run to end (or stop it: clawgym jobs stop <id>), or give this run its own save dir: "
            "run_name=<new name> or paths.save=<new dir>")
    iters = sorted(d.name for d in path.glob("iter_*") if d.is_dir())
    tracker = path / "latest_checkpointed_iteration.txt"
    if not iters and not tracker.is_file():
        return f"{save} (no checkpoints yet)"
    latest = tracker.read_text().strip() if tracker.is_file() else (iters[-1] if iters else "?")
    load = ctx.c["checkpoint"]["load"]
    if load and Path(load).resolve() == path.resolve():
        return f"{save}: continues from checkpoint {latest} ({len(iters)} present)"
    raise CheckFailed(
        f"paths.save={save} already holds {len(iters)} checkpoint(s) (latest {latest}) and "
        f"checkpoint.load={load!r}: this run would overwrite them",
        f"continue that run with 'clawgym resume {save}' (or checkpoint.load={save}), or start this one "
        f"elsewhere: run_name=<new name> or paths.save=<new dir>")
