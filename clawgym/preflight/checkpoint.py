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
from typing import Any, Callable, List, Mapping, Optional, Tuple

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


#: (config.json key(s), model key, how the model value maps onto the HF one). The first
#: key present in config.json is compared; absent keys are not checked.
PAIRS: List[Tuple[Tuple[str, ...], str, Callable[[Any], Any]]] = [
    (("hidden_size",), "hidden_size", lambda v: v),
    (("num_hidden_layers",), "num_layers", lambda v: v),
    (("num_attention_heads",), "num_attention_heads", lambda v: v),
    (("num_key_value_heads",), "num_query_groups", lambda v: v),
    (("intermediate_size",), "ffn_hidden_size", lambda v: v),
    (("moe_intermediate_size",), "moe_ffn_hidden_size", lambda v: v),
    (("num_experts", "n_routed_experts", "num_local_experts"), "num_experts", lambda v: v),
    (("num_experts_per_tok",), "moe_router_topk", lambda v: v),
    (("tie_word_embeddings",), "untie_embeddings_and_output_weights", lambda v: not v),
    (("rms_norm_eps",), "norm_epsilon", lambda v: v),
    (("rope_theta",), "rotary_base", lambda v: v),
]


def hf_value(hf: Mapping[str, Any], keys: Tuple[str, ...]) -> Tuple[Optional[str], Any]:
    """(key, value) of the first key config.json has; rope_theta also from rope_parameters."""
    for key in keys:
        if key in hf:
            return key, hf[key]
        if key == "rope_theta":
            for nested in ("rope_parameters", "rope_scaling"):
                block = hf.get(nested)
                if isinstance(block, dict) and "rope_theta" in block:
                    return f"{nested}.rope_theta", block["rope_theta"]
    if keys == ("tie_word_embeddings",):
        # transformers' PretrainedConfig ties by default, and slime compares that default.
        return "tie_word_embeddings (default)", True
    return None, None


def compare(hf: Mapping[str, Any], m: Mapping[str, Any]) -> Tuple[List[str], List[str], List[str]]:
    """(agreeing model keys, mismatch descriptions, fixes) for a config.json and a model group."""
    if isinstance(hf.get("text_config"), dict):
        hf = {**hf, **hf["text_config"]}
    agree, problems, fixes = [], [], []
    skip_ffn = all_moe(m)
    for hf_keys, model_key, to_hf in PAIRS:
        if model_key == "ffn_hidden_size" and skip_ffn:
            continue
        if model_key in ("num_experts", "moe_router_topk") and m.get("num_experts") is None and \
                hf_keys[0] not in hf:
            continue
        key, want = hf_value(hf, hf_keys)
        if key is None:
            continue
        have = m.get(model_key)
        if have is not None and _same(to_hf(have), want):
            agree.append(model_key)
            continue
        target = to_hf(want) if model_key == "untie_embeddings_and_output_weights" else want
        problems.append(f"model.{model_key}={_num(have)} but config.json {key}={_num(want)}")
        fixes.append(f"model.{model_key}={_num(target)}")
    return agree, problems, fixes


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
