"""The model zoo: every ``model`` option composes, validates, plans, and its HF check works.

The HF ``config.json`` each test writes is built here from the option's own fields under
the field names of the family's Hugging Face config class (Qwen2/Qwen3/Qwen3-MoE,
Qwen3-Next, Qwen3.5's ``text_config``, Llama, GLM4, GLM4-MoE, DeepSeek-V3-style MLA, MiniMax);
this mapping is written independently of ``clawgym.preflight.checkpoint``, so a field the
check forgets, or maps wrongly, makes a test fail.
"""

from __future__ import annotations

import copy
import functools
import json
import logging
from pathlib import Path
from typing import Any, Dict, Iterator, List, Tuple

import pytest

from clawgym.config.compose import compose, config_dir, group_options, to_plain
from clawgym.trainer.flagmap import get_key, upstream_only_rows
from clawgym.plan.build import build_plan
from clawgym.preflight.checkpoint import all_moe, check_checkpoint, compare, layer_pattern
from clawgym.preflight.core import CheckFailed, Context
from clawgym.validate import violations

MODELS = group_options("model")

#: Every family of slime's scripts/models (v0.3.1) must have at least one option.
SLIME_FAMILIES = {"deepseek-v3", "glm4", "glm4.5", "glm4.7", "glm5", "glm5.2", "kimi-k2", "kimi-k2-thinking",
                  "llama3.1", "llama3.2", "mimo", "minimax-m2", "moonlight", "qwen2.5", "qwen3", "qwen3-next",
                  "qwen3.5"}

#: MLA families: DeepSeek-V3-style config.json (ranks, nope/rope head dims, n_routed_experts).
MLA_FAMILIES = {"deepseek-v3", "kimi-k2", "kimi-k2-thinking", "moonlight", "glm4.7", "glm5", "glm5.2"}

#: config.json keys the check does not compare (identity, or rope details Megatron derives itself).
NOT_COMPARED = {"architectures", "model_type", "decoder_sparse_step", "low_freq_factor", "high_freq_factor",
                "original_max_position_embeddings", "beta_fast", "beta_slow", "type"}


def overrides_for(option: str) -> List[str]:
    """The option on the default layout, with a TP its heads and query groups split over (Megatron's
    TransformerConfig: 14-head Qwen2.5-0.5B and GLM4-9B's 2 query groups need TP 2), a rollout context
    within the checkpoint's window (SGLang's); models that need an upstream-only flag (GLM-5's
    --allgather-cp) under trainer=slime."""
    m = model_of(option)
    groups = m["num_query_groups"] or m["num_attention_heads"]
    tp = next(t for t in (4, 2, 1) if m["num_attention_heads"] % t == 0 and groups % t == 0)
    upstream = any(get_key({"model": m}, row.key) for row in upstream_only_rows() if row.key.startswith("model."))
    # SGLang refuses a context beyond the checkpoint's window (the default rollout context is 65536).
    window = m.get("context_window") or m.get("max_position_embeddings")
    context = [f"rollout.max_context_len={window}"] if window and window < 65536 else []
    return [f"model={option}"] + ([f"perf.tensor_parallel={tp}"] if tp != 4 else []) + context + \
        (["trainer=slime"] if upstream else [])


@functools.lru_cache(maxsize=None)
def model_of(option: str) -> Dict[str, Any]:
    return to_plain(compose([f"model={option}"]))["model"]


@functools.lru_cache(maxsize=None)
def composed(option: str) -> Tuple[List[str], Any]:
    """(violation reports, plan) of the option on the default layout (composed once per session)."""
    cfg = compose(overrides_for(option))
    return [v.format() for v in violations(cfg)], build_plan(cfg, environ={}, timestamp="20260101_000000")


def hf_config(m: Dict[str, Any]) -> Dict[str, Any]:
    """config.json of a checkpoint with the architecture of model group ``m``, in its family's field names."""
    fam = m["family"]
    heads, hidden = m["num_attention_heads"], m["hidden_size"]
    cfg: Dict[str, Any] = {
        "hidden_size": hidden, "num_hidden_layers": m["num_layers"], "num_attention_heads": heads,
        "vocab_size": m["vocab_size"], "intermediate_size": m["ffn_hidden_size"],
        "rms_norm_eps": m["norm_epsilon"] if m["norm_epsilon"] is not None else 1e-5,
        "rope_theta": float(m["rotary_base"]), "tie_word_embeddings": not m["untie_embeddings_and_output_weights"],
    }
    if m["max_position_embeddings"] is not None:
        cfg["max_position_embeddings"] = m["max_position_embeddings"]
    moe = m["num_experts"] is not None
    pattern = layer_pattern(m["moe_layer_freq"], m["num_layers"]) if moe else None
    first_dense = pattern.index(1) if pattern else 0
    if fam in MLA_FAMILIES:
        # DeepSeek-V3-style: every head has its own latent KV; ranks and split head dims.
        cfg.update(num_key_value_heads=heads, q_lora_rank=m["q_lora_rank"], kv_lora_rank=m["kv_lora_rank"],
                   qk_nope_head_dim=m["qk_head_dim"], qk_rope_head_dim=m["qk_pos_emb_head_dim"],
                   v_head_dim=m["v_head_dim"])
        cfg.update(n_routed_experts=m["num_experts"], num_experts_per_tok=m["moe_router_topk"],
                   moe_intermediate_size=m["moe_ffn_hidden_size"],
                   n_shared_experts=m["moe_shared_expert_intermediate_size"] // m["moe_ffn_hidden_size"],
                   first_k_dense_replace=first_dense,
                   routed_scaling_factor=m["moe_router_topk_scaling_factor"] or 1.0,
                   n_group=m["moe_router_num_groups"] or 1, topk_group=m["moe_router_group_topk"] or 1)
        if fam.startswith(("deepseek", "kimi", "moonlight")):
            cfg.update(scoring_func=m["moe_router_score_function"], topk_method="noaux_tc")
        if m["rotary_scaling_factor"] not in (None, 1.0):
            cfg["rope_scaling"] = {"type": "yarn", "factor": m["rotary_scaling_factor"], "mscale": m["mscale"],
                                   "mscale_all_dim": m["mscale_all_dim"], "beta_fast": 32, "beta_slow": 1,
                                   "original_max_position_embeddings": 4096}
        return cfg
    kv = m["kv_channels"] if m["kv_channels"] is not None else hidden // heads
    cfg.update(num_key_value_heads=m["num_query_groups"], head_dim=kv)
    if fam in ("qwen3", "llama3.1", "llama3.2"):
        cfg["attention_bias"] = False
    if fam.startswith("llama"):
        cfg["rope_scaling"] = {"rope_type": "llama3", "factor": m["rotary_scaling_factor"], "low_freq_factor": 1.0,
                               "high_freq_factor": 4.0, "original_max_position_embeddings": 8192}
    if fam == "mimo":
        cfg["num_nextn_predict_layers"] = m["mtp_num_layers"]
    if fam == "glm4":
        cfg.update(attention_bias=m["add_qkv_bias"], partial_rotary_factor=m["rotary_percent"])
    if fam == "glm4.5":
        cfg.update(attention_bias=True, use_qk_norm=m["qk_layernorm"], partial_rotary_factor=m["rotary_percent"],
                   n_routed_experts=m["num_experts"], num_experts_per_tok=m["moe_router_topk"],
                   moe_intermediate_size=m["moe_ffn_hidden_size"],
                   n_shared_experts=m["moe_shared_expert_intermediate_size"] // m["moe_ffn_hidden_size"],
                   first_k_dense_replace=first_dense, routed_scaling_factor=m["moe_router_topk_scaling_factor"] or 1.0,
                   n_group=1, topk_group=1)
    if fam == "minimax-m2":
        # MiniMax: per-expert width as intermediate_size, rotary width in dims, routing bias.
        cfg.update(num_local_experts=m["num_experts"], num_experts_per_tok=m["moe_router_topk"],
                   intermediate_size=m["moe_ffn_hidden_size"], rotary_dim=int(kv * m["rotary_percent"]),
                   use_qk_norm=m["qk_layernorm"], scoring_func=m["moe_router_score_function"],
                   use_routing_bias=m["moe_router_enable_expert_bias"])
    if fam in ("qwen3", "qwen3-next", "qwen3.5") and moe:
        cfg.update(num_experts=m["num_experts"], num_experts_per_tok=m["moe_router_topk"],
                   moe_intermediate_size=m["moe_ffn_hidden_size"], decoder_sparse_step=1,
                   mlp_only_layers=[i for i, x in enumerate(pattern) if x == 0])
        if m["moe_shared_expert_intermediate_size"] is not None:
            cfg["shared_expert_intermediate_size"] = m["moe_shared_expert_intermediate_size"]
    if fam == "qwen3-next":
        cfg["partial_rotary_factor"] = m["rotary_percent"]
    if fam == "qwen3.5":
        # Qwen3.5 checkpoints are multimodal: the language model's fields sit in text_config, RoPE in
        # transformers 5's rope_parameters.
        theta = cfg.pop("rope_theta")
        cfg["rope_parameters"] = {"rope_theta": theta, "partial_rotary_factor": m["rotary_percent"]}
        return {"architectures": ["Qwen3_5ForConditionalGeneration"], "model_type": "qwen3_5",
                "tie_word_embeddings": cfg.pop("tie_word_embeddings"), "text_config": cfg}
    return cfg


def leaves(cfg: Dict[str, Any], path: Tuple[str, ...] = ()) -> Iterator[Tuple[str, ...]]:
    for key, value in cfg.items():
        if isinstance(value, dict):
            yield from leaves(value, path + (key,))
        elif key not in NOT_COMPARED:
            yield path + (key,)


def changed(cfg: Dict[str, Any], path: Tuple[str, ...]) -> Dict[str, Any]:
    """A copy of cfg with the field at ``path`` set to a different value of its kind."""
    out = copy.deepcopy(cfg)
    node = out
    for key in path[:-1]:
        node = node[key]
    value = node[path[-1]]
    if isinstance(value, bool):
        node[path[-1]] = not value
    elif isinstance(value, int):
        node[path[-1]] = value + 1
    elif isinstance(value, float):
        node[path[-1]] = value * 2
    elif isinstance(value, list):
        node[path[-1]] = value + [len(value)]
    elif value is None:
        node[path[-1]] = 7
    else:
        node[path[-1]] = f"not-{value}"
    return out


# ---------------------------------------------------------------- the zoo's coverage

def test_every_slime_model_family_has_an_option():
    families = {model_of(option)["family"] for option in MODELS}
    assert SLIME_FAMILIES <= families, SLIME_FAMILIES - families


def test_option_names_follow_the_house_naming():
    for option in MODELS:
        assert option == option.lower() and "." not in option and "-" not in option, option


@pytest.mark.parametrize("option", MODELS)
def test_model_option_composes_validates_and_plans_each_flag_once(option):
    found, plan = composed(option)
    assert found == []
    flags = [a for a in plan.entrypoint[2:] if a.startswith("--")]
    assert len(flags) == len(set(flags)), sorted(f for f in flags if flags.count(f) > 1)
    argv, m = plan.entrypoint, model_of(option)
    assert argv[argv.index("--num-layers") + 1] == str(m["num_layers"])
    if m["spec"]:
        i = argv.index("--spec")
        assert argv[i + 1:i + 3] == m["spec"]
    # No GQA flags without query groups (MLA); both with them.
    assert ("--num-query-groups" in argv) == (m["num_query_groups"] is not None)
    assert ("--multi-latent-attention" in argv) == m["multi_latent_attention"]
    # A key left at null emits nothing: Megatron's own default applies.
    assert ("--kv-channels" in argv) == (m["kv_channels"] is not None)
    assert ("--norm-epsilon" in argv) == (m["norm_epsilon"] is not None)


def test_mla_model_emits_ranks_and_routing_as_slimes_deepseek_v3_file():
    plan = composed("deepseek_v3")[1]
    argv = " ".join(plan.entrypoint)
    for pair in ("--q-lora-rank 1536", "--kv-lora-rank 512", "--qk-head-dim 128", "--qk-pos-emb-head-dim 64",
                 "--v-head-dim 128", "--moe-shared-expert-intermediate-size 2048", "--moe-router-group-topk 4",
                 "--moe-router-num-groups 8", "--moe-router-topk-scaling-factor 2.5", "--rotary-scaling-factor 40.0",
                 "--moe-layer-freq [0]*3+[1]*58", "--moe-router-load-balancing-type seq_aux_loss"):
        assert pair in argv, pair
    for switch in ("--moe-router-pre-softmax", "--moe-router-enable-expert-bias", "--no-rope-fusion"):
        assert switch in plan.entrypoint


def test_qwen3_options_emit_none_of_the_new_family_flags():
    """Today's Qwen3 plans are unchanged: the new fields default to "no flag"."""
    new_flags = {"--spec", "--add-qkv-bias", "--multi-latent-attention", "--q-lora-rank", "--no-rope-fusion",
                 "--moe-shared-expert-intermediate-size", "--moe-router-enable-expert-bias", "--mtp-num-layers",
                 "--use-rope-scaling", "--max-position-embeddings", "--no-position-embedding", "--allgather-cp"}
    for option in ("qwen3_4b", "qwen3_30b_a3b"):
        plan = build_plan(compose([f"model={option}"]), environ={}, timestamp="t")
        assert not new_flags & set(plan.entrypoint), option


def test_defaults_tree_lists_every_model_option(capsys):
    from hydra import initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    logging.getLogger("hydra._internal.hydra").setLevel(logging.INFO)
    with initialize_config_dir(config_dir=str(config_dir()), version_base="1.3"):
        hydra = GlobalHydra.instance().hydra
        for option in MODELS:
            records: List[str] = []
            handler = logging.Handler()
            handler.emit = lambda record, out=records: out.append(record.getMessage())  # type: ignore[assignment]
            log = logging.getLogger("hydra._internal.hydra")
            log.addHandler(handler)
            try:
                hydra.show_info("defaults-tree", config_name="config", overrides=[f"model={option}"])
            finally:
                log.removeHandler(handler)
            text = "\n".join(records)
            assert f"model: {option}" in text, (option, text[-500:])


# ---------------------------------------------------------------- HF config.json check, per option

@pytest.mark.parametrize("option", MODELS)
def test_hf_check_passes_on_the_families_config_json_and_fails_on_each_changed_field(option):
    m = model_of(option)
    hf = hf_config(m)
    agree, problems, fixes = compare(hf, m)
    assert problems == [], problems
    assert {"hidden_size", "num_layers", "num_attention_heads", "rotary_base"} <= set(agree)
    if m["num_experts"] is not None:
        assert {"num_experts", "moe_router_topk", "moe_ffn_hidden_size"} <= set(agree)
    unchecked = []
    for path in leaves(hf):
        if path[-1] == "intermediate_size" and all_moe(m) and "moe_intermediate_size" in hf.get("text_config", hf):
            continue  # slime skips the dense FFN when every layer is MoE, and so do we
        _, problems, fixes = compare(changed(hf, path), m)
        if not problems:
            unchecked.append(".".join(path))
        else:
            assert all(fix.startswith("model.") for fix in fixes), fixes
    assert unchecked == [], f"{option}: changing these config.json fields went unnoticed: {unchecked}"


def test_fix_of_a_changed_field_is_the_checkpoints_value():
    m = model_of("kimi_k2")
    hf = {**hf_config(m), "kv_lora_rank": 256, "n_shared_experts": 2}
    _, problems, fixes = compare(hf, m)
    assert "model.kv_lora_rank=512 but config.json kv_lora_rank=256" in problems
    assert "model.kv_lora_rank=256" in fixes
    assert "model.moe_shared_expert_intermediate_size=4096" in fixes


def test_first_dense_layers_mismatch_proposes_the_layer_pattern():
    m = model_of("glm4_5_355b_a32b")
    _, problems, fixes = compare({**hf_config(m), "first_k_dense_replace": 1}, m)
    assert any("makes layers [0, 1, 2] dense" in p and "first_k_dense_replace=1" in p for p in problems), problems
    assert "model.moe_layer_freq='[0]*1+[1]*91'" in fixes


def test_unset_key_is_compared_as_megatrons_default():
    # GLM-4.5 sets no --norm-epsilon: Megatron's 1e-5 must match the checkpoint's rms_norm_eps.
    m = model_of("glm4_5_106b_a12b")
    _, problems, fixes = compare({**hf_config(m), "rms_norm_eps": 1e-6}, m)
    assert problems == ["model.norm_epsilon=null (Megatron uses 1e-05) but config.json rms_norm_eps=1e-06"]
    assert fixes == ["model.norm_epsilon=1e-06"]


def test_dense_option_against_a_moe_checkpoint_fails_on_the_expert_count():
    m = model_of("qwen3_4b")
    _, problems, _ = compare({**hf_config(m), "num_experts": 128, "num_experts_per_tok": 8}, m)
    assert any(p.startswith("model.num_experts=null") for p in problems), problems


def test_mla_checkpoint_with_a_non_mla_option_fails():
    m = model_of("qwen3_4b")
    _, problems, fixes = compare({**hf_config(m), "kv_lora_rank": 512}, m)
    assert "model.multi_latent_attention=true" in fixes


@pytest.mark.parametrize("option", ["deepseek_v3", "qwen3_5_35b_a3b", "llama3_1_8b"])
def test_checkpoint_check_reads_the_written_config_json(option, tmp_path):
    """End to end through the preflight check: passes on the file, fails naming the key on one change."""
    ckpt = tmp_path / "ckpt"
    ckpt.mkdir()
    m = model_of(option)
    (ckpt / "config.json").write_text(json.dumps(hf_config(m)))
    c = to_plain(compose([*overrides_for(option), f"paths.hf_checkpoint={ckpt}"]))
    detail = check_checkpoint(Context(c=c, plan=None, local_head=False))
    assert f"agrees with model={option}" in detail
    bad = hf_config(m)
    node = bad.get("text_config", bad)
    node["hidden_size"] += 64
    (ckpt / "config.json").write_text(json.dumps(bad))
    with pytest.raises(CheckFailed) as err:
        check_checkpoint(Context(c=c, plan=None, local_head=False))
    assert f"model.hidden_size={m['hidden_size']} but config.json hidden_size={m['hidden_size'] + 64}" in \
        err.value.problem


def test_layer_spec_module_must_exist_in_the_slime_checkout(tmp_path):
    """A family's --spec (slime_plugins) is looked up like any hook: older slime checkouts lack newer plugins."""
    from clawgym.preflight.checkout import check_functions
    from tests.fixtures.checkout import build_checkout

    root = build_checkout(tmp_path / "rl")
    cfg = compose([*overrides_for("glm4_9b"), f"paths.root={root}"])
    ctx = Context(c=to_plain(cfg), plan=build_plan(cfg, environ={}, timestamp="t"), local_head=False)
    with pytest.raises(CheckFailed) as err:
        check_functions(ctx)
    assert "model.spec=slime_plugins.models.glm4.get_glm_spec: module slime_plugins.models.glm4 is not" in \
        err.value.problem
    plugin = root / "slime" / "slime_plugins" / "models"
    plugin.mkdir(parents=True)
    (plugin / "glm4.py").write_text("def get_glm_spec(args, config, vp_stage=None):\n    return None\n")
    assert "slime_plugins.models.glm4.get_glm_spec" in check_functions(ctx)


def _registry(flavour: str) -> Dict[str, Dict[str, Any]]:
    """Option string -> action of a trainer flavour's flag registry (data built from the trainer's parsers)."""
    data = json.loads((Path(__file__).resolve().parent.parent / "clawgym" / "registry" / "data" /
                       f"{flavour}.json").read_text())
    return {opt: action for action in data["actions"] for opt in action["option_strings"]}


#: Model flags the ClawGym fork's parser (slime 0.2.2 line) does not have: GLM5's slime flag.
FORK_LACKS = {"--allgather-cp"}
#: Fork-only flags today's default config emits (not model flags; the trainer flavour decides them).
UPSTREAM_LACKS = {"--dynamic-history", "--megatron-to-hf-mode", "--use-dynamic-global-batch-size"}


@pytest.mark.parametrize("flavour, lacks", [("slime", UPSTREAM_LACKS), ("clawgym", FORK_LACKS)])
def test_every_model_flag_is_a_real_trainer_flag_with_a_value_of_its_type(flavour, lacks):
    """Each flag a model option emits exists in the trainer's own parser, and its value parses as argparse would."""
    reg = _registry(flavour)
    casts = {"int": int, "float": float}
    problems = []
    for option in MODELS:
        model_argv = composed(option)[1].entrypoint[2:]
        for i, token in enumerate(model_argv):
            if not token.startswith("--") or token in lacks:
                continue
            action = reg.get(token)
            if action is None:
                problems.append(f"{option}: {token} unknown")
                continue
            values = []
            for value in model_argv[i + 1:]:
                if value.startswith("--"):
                    break
                values.append(value)
            if action["action"] in ("store_true", "store_false"):
                assert values == [], (option, token, values)
                continue
            for value in values:
                if action["type"] in casts:
                    casts[action["type"]](value)
                choices = action["choices"]
                if choices and any(str(c).startswith("<non-json") for c in choices):
                    continue  # enum choices the registry stores as reprs (reported to the registry's owners)
                if choices is not None and value not in map(str, choices):
                    problems.append(f"{option}: {token} {value} not in {action['choices']}")
    assert problems == []
