#!/usr/bin/env python3
"""Record what each trainer flavour's own startup code says about a seeded corpus of configs.

For each flavour (``clawgym``: the ClawGym fork; ``slime``: upstream v0.3.1) this draws a
seeded corpus of clawgym overrides (random draws over the model zoo, the GPU layouts,
TP/PP/CP/EP/ETP, the engine's TP/DP/EP and DP attention, batch sizes, samples per prompt,
the global batch, micro batch, recompute, plus the trouble cases of issue 14), composes each
with clawgym's ``compose`` and ``build_plan`` *without* clawgym's validation, and has the
trainer judge the plan's argv and job environment: tools/trainer_judge.py runs the flavour's
real startup path in its CPU trainer environment, one process per flavour for the whole
corpus. Each refusal is classified into the constraint it enforces, named with clawgym's rule
code (``CONSTRAINTS`` below: the trainer file, where the check is, and the message or source
line that identifies it, most specific first). Configs the trainer starts but clawgym refuses
on purpose carry ``by_design: true`` and the reason (``BY_DESIGN``).

The result is ``tests/data/trainer_verdicts/<flavour>.json``, which
tests/test_trainer_agreement.py holds clawgym's validation to. Generated, never hand-edited:

    flock /tmp/clawgym-heavy.lock .venv/bin/python tools/gen_trainer_verdicts.py \\
        --fork-python /work/trainer-env/fork/bin/python \\
        --upstream-python /work/trainer-env/upstream/bin/python --src /work/trainer-src

(tools/README.md: how the environments and source trees are built.)
"""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import os
import random
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Dict, List, Optional

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
OUT_DIR = ROOT / "tests" / "data" / "trainer_verdicts"

#: Where the plans put every path (the judge moves it under a temporary directory per config).
PATH_ROOT = "/clawgym-judge-root"

SEED = 14
#: Random draws per flavour (the trouble cases come on top).
DRAWS = 330

#: Per flavour: the source trees under --src and the judge's options (tools/README.md).
FLAVOURS = {
    "clawgym": {
        "python_opt": "fork_python",
        "sources": {"slime": "ClawGym/ClawGym-Agents RL/slime @ 0e8526d8f5e0999896c74cee4d6b998fb8a0429e",
                    "megatron": "ClawGym/ClawGym-Agents RL/Megatron-LM @ 0e8526d8 (vendored, 0.16.0rc0)",
                    "sglang": "sglang 0.5.9 (PyPI) + THUDM/slime v0.2.4 docker/patch/latest/sglang.patch",
                    "transformers": "4.57.1", "torch": "2.13.0+cpu"},
        "args": lambda s: ["--slime", f"{s}/fork/RL/slime", "--megatron", f"{s}/fork/RL/Megatron-LM",
                           "--sglang-patch", f"{s}/slime-v0.2.4/docker/patch/latest/sglang.patch",
                           "--stand-in", "torchvision"],
    },
    "slime": {
        "python_opt": "upstream_python",
        "sources": {"slime": "THUDM/slime v0.3.1",
                    "megatron": "NVIDIA/Megatron-LM 1dcf0dafa884ad52ffb243625717a3471643e087 + slime v0.3.1 "
                                "docker/patch/latest/megatron.patch",
                    "sglang": "sglang 0.5.15.post1 (PyPI) + slime v0.3.1 docker/patch/latest/sglang.patch, "
                              "sglang-top_p.patch, sglang-release_hicache.patch, sglang-pull_weights.patch",
                    "transformers": "5.12.1", "torch": "2.13.0+cpu"},
        "args": lambda s: ["--slime", f"{s}/slime-v0.3.1", "--megatron", f"{s}/megatron-1dcf",
                           "--megatron-patch", f"{s}/slime-v0.3.1/docker/patch/latest/megatron.patch",
                           *[x for p in ("sglang.patch", "sglang-top_p.patch", "sglang-release_hicache.patch",
                                         "sglang-pull_weights.patch")
                             for x in ("--sglang-patch", f"{s}/slime-v0.3.1/docker/patch/latest/{p}")],
                           "--stand-in", "torchvision==0.28.0"],
    },
}

# ----------------------------------------------------------------------------------------
# Constraints: a trainer refusal -> clawgym's rule code. Matched in order (most specific
# first) on the stage, the trainer file that raised, and a pattern searched in the message or,
# for a bare assert (no message), the source line. Every entry names the check it stands for.
# ----------------------------------------------------------------------------------------

CONSTRAINTS: List[Dict[str, str]] = [
    # -- Megatron's parallel groups
    # megatron/core/parallel_state.py:initialize_model_parallel (train actors): EP x ETP x PP.
    {"code": "expert-parallel-divides-actor-gpus", "file": "megatron/core/parallel_state.py",
     "pattern": r"world_size \(\d+\) is not divisible by expert_tensor_model_pipeline_parallel size"},
    {"code": "model-parallel-divides-actor-gpus", "file": "megatron/core/parallel_state.py",
     "pattern": r"world_size \(\d+\) is not divisible by (tensor_model_parallel_size|"
                r"tensor_model_parallel_size \* pipeline)"},
    # megatron/training/arguments.py:validate_args: world size % (TP x PP x CP).
    {"code": "model-parallel-divides-actor-gpus", "file": "megatron/training/arguments.py",
     "pattern": r"world size \(\d+\) is not divisible by total_model_size"},
    # validate_args: EP > 1 needs experts, and divides them.
    {"code": "expert-parallel-needs-moe", "file": "megatron/training/arguments.py",
     "pattern": r"num_experts must be non None to use expert model parallelism"},
    {"code": "expert-parallel-divides-experts", "file": "megatron/training/arguments.py",
     "pattern": r"Number of experts should be a multiple of expert model parallel_size"},
    # validate_args: layers per pipeline stage.
    {"code": "pipeline-divides-layers", "file": "megatron/training/arguments.py",
     "pattern": r"number of layers of the model must be divisible pipeline model parallel size|"
                r"Number of layers should be divisible by the pipeline-model-parallel size"},
    # validate_args: seq length vs CP.
    {"code": "context-parallel-divides-seq-length", "file": "megatron/training/arguments.py",
     "pattern": r"seq-length should be a multiple of 2 \* context-parallel-size"},
    # megatron/core/transformer/transformer_config.py:TransformerConfig.__post_init__: heads / groups vs TP.
    {"code": "tp-divides-query-groups", "file": "megatron/core/transformer/transformer_config.py",
     "pattern": r"num_query_groups \(\d+\) must be a multiple of"},
    {"code": "tp-divides-heads", "file": "megatron/core/transformer/transformer_config.py",
     "pattern": r"num_attention_heads \(\d+\) must be a multiple of"},
    # -- recompute: validate_args (selective takes no method) and TransformerConfig.__post_init__.
    {"code": "selective-recompute-no-method", "file": "megatron/training/arguments.py",
     "pattern": r"recompute method is not yet supported for selective"},
    {"code": "selective-recompute-no-num-layers", "file": "megatron/core/transformer/transformer_config.py",
     "pattern": r"When using recompute_granularity: selective recompute_num_layers must be None\."},
    {"code": "full-recompute-needs-num-layers", "file": "megatron/core/transformer/transformer_config.py",
     "pattern": r"When using recompute_granularity: full recompute_num_layers must be between"},
    {"code": "full-recompute-needs-method", "file": "megatron/core/transformer/transformer_config.py",
     "pattern": r"Using recompute_granularity: full so recompute_method must be"},
    # -- batches
    # slime/utils/arguments.py:slime_validate_args: the global batch identity.
    {"code": "global-batch-matches-rollout", "file": "slime/utils/arguments.py",
     "pattern": r"global_batch_size \d+ is not equal to rollout_batch_size"},
    # validate_args: a bare `assert args.global_batch_size > 0` (fork arguments.py ~556): its line.
    {"code": "global-batch-positive", "file": "megatron/training/arguments.py",
     "pattern": r"^assert args\.global_batch_size > 0$", "on": "code"},
    # megatron/core/num_microbatches_calculator.py: global batch % (micro batch x DP).
    {"code": "global-batch-divides-micro-batches", "file": "megatron/core/num_microbatches_calculator.py",
     "pattern": r"is not divisible by micro batch size"},
    {"code": "over-sampling-at-least-rollout-batch", "file": "slime/utils/arguments.py",
     "pattern": r"over_sampling_batch_size \d+ should be greater than or equal to rollout_batch_size"},
    {"code": "reinforce-needs-normalized-advantages", "file": "slime/utils/arguments.py",
     "pattern": r"require advantage normalization"},
    # -- slime drivers: train_async.py:train.
    {"code": "trainer-matches-colocation", "file": "train_async.py",
     "pattern": r"Colocation is not supported for async training"},
    # -- slime's SGLang checks (slime/backends/sglang_utils/arguments.py:validate_args): a bare assert.
    {"code": "sglang-dp-needs-dp-attention", "file": "slime/backends/sglang_utils/arguments.py",
     "pattern": r"^assert args\.sglang_enable_dp_attention$", "on": "code"},
    {"code": "sglang-pp-divides-engine", "file": "slime/backends/sglang_utils/arguments.py",
     "pattern": r"must be divisible by sglang_pipeline_parallel_size"},
    # -- SGLang's ServerArgs.__post_init__ (engine startup).
    # ServerArgs: a bare `assert self.tp_size % self.dp_size == 0` (DP attention splits the engine's TP).
    {"code": "sglang-dp-divides-tp", "file": "sglang/srt/server_args.py",
     "pattern": r"^assert self\.tp_size % self\.dp_size == 0", "on": "code"},
    # sglang/srt/configs/model_config.py:_derive_context_length: context_length above the checkpoint's
    # window (max_position_embeddings of config.json) unless SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN=1.
    {"code": "sglang-context-within-model-window", "file": "sglang/srt/configs/model_config.py",
     "pattern": r"User-specified context_length \(\d+\) is greater than the derived context_length"},
]

#: Configs the trainer starts that clawgym refuses on purpose: code -> reason. The condition
#: is computed from the composed config in ``by_design()`` with the trainer's own arithmetic.
BY_DESIGN = {
    "colocated-engine-fits": "a colocated SGLang engine wider than the GPUs it shares with the actor (slime "
                             "v0.3.1 slime/ray/rollout.py start_rollout_servers: num_engines = num_gpus // "
                             "min(num_gpus_per_engine, num_gpus_per_node), each engine spanning max(1, "
                             "num_gpus_per_engine // num_gpus_per_node) nodes): no engine can be placed, past the "
                             "CPU startup path judged here",
    "rollout-engine-fits": "no SGLang engine fits the rollout GPUs (slime/ray/rollout.py: num_engines = "
                           "rollout_num_gpus // min(rollout_num_gpus_per_engine, num_gpus_per_node) is 0): the "
                           "run starts and never generates",
    "grpo-needs-several-samples": "a GRPO/GSPO group of one sample: every advantage is 0, the run trains on "
                                  "nothing (slime only turns grpo_std_normalization off)",
    "sglang-tp-divides-heads": "SGLang shards attention heads over the engine's attention TP when it loads the "
                               "model (its model classes assert heads % attention TP == 0): a trainer check, "
                               "but after the engine starts, beyond the CPU startup path judged here",
}


def classify(verdict: Dict[str, Any]) -> Optional[str]:
    """The clawgym rule code of a trainer refusal, or None when no constraint matches."""
    where = verdict.get("where") or {}
    for c in CONSTRAINTS:
        # A bare assert has no message: its entry matches the source statement ("on": "code").
        text = (where.get("code") or "") if c.get("on") == "code" else (verdict.get("message") or "")
        if where.get("file", "").startswith(c["file"]) and re.search(c["pattern"], text):
            return c["code"]
    return None


def by_design(c: Dict[str, Any], flavour: str) -> Optional[str]:
    """The by-design refusal a config that the trainer starts meets, if any (first of BY_DESIGN)."""
    g, s, m = c["gpu_layout"], c["sglang"], c["model"]
    args = c.get("args") or {}
    per_engine = args.get("rollout_num_gpus_per_engine", s["tp"])
    rollout = g["rollout_gpus"]
    if g["colocate"] and flavour == "clawgym":
        # The fork's slime_validate_args sets rollout_num_gpus to the actor's GPUs under colocate.
        rollout = g["actor_gpus"] * g["actor_num_nodes"]
    if g["colocate"] and rollout and per_engine > rollout:
        return "colocated-engine-fits"
    if rollout and rollout // min(per_engine, g["num_gpus"]) == 0:
        return "rollout-engine-fits"
    estimator = args.get("advantage_estimator", c["grpo"]["advantage_estimator"])
    if estimator in ("grpo", "gspo") and c["rollout"]["n_samples_per_prompt"] == 1 and \
            not str(args.get("loss_type", "")).startswith("sft") and not args.get("debug_train_only"):
        return "grpo-needs-several-samples"
    pp = args.get("sglang_pp_size", 1) or 1
    dp = args.get("sglang_dp_size", 1) or 1
    attn_tp = per_engine // pp
    if args.get("sglang_enable_dp_attention") and dp > 1:
        attn_tp //= dp
    if attn_tp > 0 and m["num_attention_heads"] % attn_tp:
        return "sglang-tp-divides-heads"
    return None


# ----------------------------------------------------------------------------------------
# The corpus
# ----------------------------------------------------------------------------------------

#: Trouble cases of issue 14 (and its false refusals), per flavour; "*" = both.
TROUBLE = [
    ("*", ["model=qwen3_30b_a3b", "gpu_layout=split_4_4", "perf.expert_parallel=8"]),
    ("*", ["rollout.batch_size=3", "rollout.n_samples_per_prompt=3", "args.global_batch_size=4"]),
    ("*", ["gpu_layout=split_4_4", "gpu_layout.trainer_script=train.py"]),
    ("*", ["gpu_layout=colocate_8", "gpu_layout.trainer_script=train_async.py"]),
    ("*", ["model=glm4_9b", "gpu_layout=split_2_6", "sglang.tp=4"]),
    ("*", ["model=qwen3_4b", "gpu_layout=colocate_8", "perf.tensor_parallel=8", "sglang.tp=8",
           "args.sglang_enable_dp_attention=true", "args.sglang_dp_size=8"]),
    ("*", ["model=qwen3_4b", "perf.expert_parallel=2"]),
    ("*", ["model=qwen3_4b", "gpu_layout=colocate_8", "perf.tensor_parallel=1", "perf.pipeline_parallel=8"]),
    ("*", ["model=qwen3_30b_a3b", "gpu_layout=colocate_8", "perf.tensor_parallel=8"]),
    ("*", ["gpu_layout=split_4_4", "perf.tensor_parallel=1", "perf.use_dynamic_batch_size=false",
           "args.micro_batch_size=3"]),
    ("*", ["gpu_layout=split_4_4", "sglang.tp=8"]),
    ("*", ["model=qwen2_5_7b", "gpu_layout=colocate_8", "perf.tensor_parallel=4", "sglang.tp=8"]),
    ("*", ["rollout.n_samples_per_prompt=1"]),
    ("*", ["rollout.n_samples_per_prompt=1", "args.loss_type=sft_loss"]),
    ("*", ["args.sglang_dp_size=2"]),
    # A context above the checkpoint's window, asked for explicitly (the default is capped at the window
    # since issue 35, so no random draw meets SGLang's check): the window from model.max_position_embeddings
    # (glm4_32b, mimo_7b_rl) or from model.context_window alone (qwen3_4b_hybrid, 40960); SGLang's own
    # escape hatch.
    ("*", ["model=glm4_32b", "gpu_layout=colocate_8", "perf.tensor_parallel=2", "rollout.max_context_len=65536"]),
    ("*", ["model=mimo_7b_rl", "gpu_layout=split_4_4", "rollout.max_context_len=65536"]),
    ("*", ["model=qwen3_4b_hybrid", "rollout.max_context_len=65536"]),
    ("*", ["model=qwen3_4b_hybrid", "rollout.max_context_len=65536",
           "+extra_env.SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN=1"]),
    ("clawgym", ["checkpoint.megatron_to_hf_mode=raw", "perf.recompute_granularity=selective"]),
    ("clawgym", ["checkpoint.megatron_to_hf_mode=raw", "perf.recompute_method=null"]),
    ("clawgym", ["checkpoint.megatron_to_hf_mode=raw", "perf.recompute_num_layers=100"]),
    ("slime", ["perf.recompute_granularity=selective", "perf.recompute_method=null"]),
    ("slime", ["perf.recompute_num_layers=null"]),
]

LAYOUTS = ["colocate_1", "colocate_4", "colocate_8", "split_1_1", "split_2_2", "split_2_6", "split_4_4"]


def _zoo(flavour: str) -> List[str]:
    """The zoo's models whose plan the flavour's trainer can take (a model that needs a flag of the
    other flavour, e.g. upstream's --allgather-cp, is refused by clawgym's trainer-flag rules
    before any trainer check: not a trainer verdict)."""
    from clawgym.config.compose import compose, group_options, to_plain
    from clawgym.plan.build import build_plan_from_dict

    base = [] if flavour == "clawgym" else ["trainer=slime"]
    usable = []
    for m in group_options("model"):
        try:
            build_plan_from_dict(to_plain(compose([*base, f"model={m}", f"paths.root={PATH_ROOT}"])),
                                 environ={}, timestamp="corpus")
        except ValueError:
            continue
        usable.append(m)
    return usable


#: Distinct (model, layout) choices per flavour: the corpus varies values over a seeded sample of
#: group choices (each set of group choices is one Hydra composition for the agreement test).
COMBOS = 28


def draw(rng: random.Random, flavour: str, combos: List[tuple], moe: Dict[str, bool]) -> List[str]:
    """One random config's overrides (group choices first, then values)."""
    model, layout = rng.choice(combos)
    actor = {"colocate_1": 1, "colocate_4": 4, "colocate_8": 8, "split_1_1": 1, "split_2_2": 2, "split_2_6": 2,
             "split_4_4": 4}[layout]
    ov = [f"model={model}", f"gpu_layout={layout}"]

    def maybe(p):
        return rng.random() < p

    # Each size is drawn to fit the layout most of the time (so that enough configs start) and
    # at random otherwise (so that each trainer check is met).
    pp = rng.choice([1, 2, 4]) if maybe(0.3) else 1
    cp = rng.choice([1, 2]) if maybe(0.15) else 1
    fits = [d for d in (1, 2, 4, 8) if actor % (d * pp * cp) == 0]
    tp = rng.choice(fits) if fits and maybe(0.85) else rng.choice([1, 2, 4, 8])
    ov.append(f"perf.tensor_parallel={tp}")
    if pp != 1 or maybe(0.1):
        ov.append(f"perf.pipeline_parallel={pp}")
    if cp != 1 or maybe(0.1):
        ov.append(f"perf.context_parallel={cp}")
    if moe[model] and maybe(0.7):
        ep_fits = [d for d in (1, 2, 4, 8) if actor % (d * pp) == 0]
        ov.append(f"perf.expert_parallel={rng.choice(ep_fits) if ep_fits and maybe(0.8) else rng.choice([1, 2, 4, 8])}")
    elif maybe(0.06):
        ov.append(f"perf.expert_parallel={rng.choice([2, 4])}")
    if maybe(0.15):
        ov.append(f"perf.expert_tensor_parallel={rng.choice([1, 2])}")
    if maybe(0.15):
        ov.append(f"perf.sequence_parallel={rng.choice(['true', 'false'])}")
    ov.append(f"sglang.tp={rng.choice([1, 1, 2, 2, 4, 8])}")
    if maybe(0.25):
        ov.append(f"args.sglang_dp_size={rng.choice([2, 4, 8])}")
        if maybe(0.75):
            ov.append("args.sglang_enable_dp_attention=true")
    elif maybe(0.08):
        ov.append("args.sglang_enable_dp_attention=true")
    if maybe(0.15):
        ov.append(f"args.sglang_ep_size={rng.choice([2, 4, 8])}")
    rbs = rng.choice([1, 2, 3, 4, 8, 16])
    n = rng.choice([1, 2, 4, 4, 8, 8])
    ov += [f"rollout.batch_size={rbs}", f"rollout.n_samples_per_prompt={n}"]
    steps = rng.choice([1, 1, 1, 2, 4, None])
    ov.append(f"rollout.num_steps_per_rollout={'null' if steps is None else steps}")
    if steps is None or maybe(0.2):
        gbs = rbs * n // (steps or 1) if maybe(0.6) else rng.choice([4, 8, 16, 32, 64])
        ov.append(f"args.global_batch_size={gbs}")
    if maybe(0.25):
        ov += ["perf.use_dynamic_batch_size=false", f"args.micro_batch_size={rng.choice([1, 2, 3, 4])}"]
    if maybe(0.35):
        granularity = rng.choice(["full", "selective", "null"])
        ov.append(f"perf.recompute_granularity={granularity}")
        if granularity == "selective" and maybe(0.7):
            ov += ["perf.recompute_method=null", f"perf.recompute_num_layers={'null' if maybe(0.8) else 1}"]
        else:
            ov.append(f"perf.recompute_method={rng.choice(['uniform', 'block', 'null'])}")
            ov.append(f"perf.recompute_num_layers={rng.choice([1, 2, 'null', 64])}")
    if flavour == "clawgym" and maybe(0.5):
        ov.append(f"checkpoint.megatron_to_hf_mode={rng.choice(['raw', 'bridge'])}")
    if maybe(0.08):
        script = "train_async.py" if layout.startswith("colocate") else "train.py"
        ov.append(f"gpu_layout.trainer_script={script}")
    return ov


def corpus(flavour: str, seed: int, draws: int) -> List[List[str]]:
    import yaml

    rng = random.Random(f"{seed}-{flavour}")
    models = _zoo(flavour)
    moe = {}
    for m in models:
        data = yaml.safe_load((ROOT / "clawgym" / "conf" / "model" / f"{m}.yaml").read_text())
        moe[m] = bool(data.get("num_experts"))
    out = [ov for fl, ov in TROUBLE if fl in ("*", flavour)]
    # Every layout at least 3 times; models spread over the zoo.
    pool = [(m, lay) for m in models for lay in LAYOUTS]
    combos = [(rng.choice(models), lay) for lay in LAYOUTS for _ in range(3)]
    combos += rng.sample([x for x in pool if x not in combos], COMBOS - len(combos))
    out += [draw(rng, flavour, combos, moe) for _ in range(draws)]
    base = [] if flavour == "clawgym" else ["trainer=slime"]
    return [base + ov for ov in out]


def requests(flavour: str, entries: List[List[str]]):
    """Plans for every entry (clawgym's compose and build_plan, no validation) as judge requests."""
    from clawgym.config.compose import compose, to_plain
    from clawgym.plan.build import build_plan_from_dict

    import copy

    from hydra.core.override_parser.overrides_parser import OverridesParser
    from omegaconf import OmegaConf, open_dict, read_write

    from clawgym.config.compose import config_dir

    # Hydra composes once per set of group choices; value overrides go on a copy (as clawgym's
    # sweeps do, clawgym/sweep/core.py), which tests/test_trainer_agreement.py checks against Hydra.
    parser = OverridesParser.create()
    templates: Dict[tuple, Any] = {}
    reqs, plain = [], []
    for i, ov in enumerate(entries):
        groups = tuple(o for o in ov if "." not in o.split("=", 1)[0] and (config_dir() / o.split("=", 1)[0]).is_dir())
        if groups not in templates:
            templates[groups] = compose([*groups, f"paths.root={PATH_ROOT}"])
        cfg = copy.deepcopy(templates[groups])
        with read_write(cfg), open_dict(cfg):
            for text in ov:
                if text not in groups:
                    o = parser.parse_override(text)
                    OmegaConf.update(cfg, o.key_or_group, o.value(), merge=False)
        c = to_plain(cfg)
        plan = build_plan_from_dict(c, environ={}, timestamp="corpus")
        reqs.append({"id": i, "script": plan.entrypoint[1], "argv": plan.entrypoint[2:],
                     "env": plan.runtime_env["env_vars"], "model": c["model"]})
        plain.append(c)
    return reqs, plain


def judge(flavour: str, python: str, src: str, reqs: List[dict]) -> tuple:
    spec = FLAVOURS[flavour]
    with tempfile.TemporaryDirectory(prefix="clawgym-verdicts-") as tmp:
        req_file, out_file = os.path.join(tmp, "requests.jsonl"), os.path.join(tmp, "verdicts.jsonl")
        with open(req_file, "w") as f:
            for r in reqs:
                f.write(json.dumps(r) + "\n")
        cmd = [python, str(ROOT / "tools" / "trainer_judge.py"), flavour, *spec["args"](src),
               "--requests", req_file, "--out", out_file, "--path-root", PATH_ROOT]
        proc = subprocess.run(cmd, capture_output=True, text=True)
        if proc.returncode != 0:
            sys.exit(f"gen_trainer_verdicts: the {flavour} judge failed ({proc.returncode}):\n{proc.stderr[-4000:]}")
        lines = [json.loads(x) for x in open(out_file) if x.strip()]
    meta = lines[0]["meta"]
    config_json = lines[-1].get("config_json", {})
    verdicts = {v["id"]: v for v in lines[1:-1]}
    return meta, config_json, verdicts


def record(flavour: str, entries, plain, verdicts, judge_meta, config_json, ns) -> dict:
    out, unjudged, unclassified = [], [], []
    for i, ov in enumerate(entries):
        v = verdicts[i]
        trainer = {"accepted": v["accepted"]}
        if not v["accepted"]:
            trainer.update({k: v.get(k) for k in ("stage", "exception", "message", "where")})
        entry = {"id": i, "overrides": ov, "trainer": trainer, "constraint": None, "by_design": False,
                 "by_design_reason": None}
        if v.get("judged") is False:
            unjudged.append((i, v))
            continue
        if v["accepted"]:
            code = by_design(plain[i], flavour)
            if code:
                entry.update(constraint=code, by_design=True, by_design_reason=BY_DESIGN[code])
        else:
            entry["constraint"] = classify(v)
            if entry["constraint"] is None:
                unclassified.append((i, v))
        out.append(entry)
    if unjudged:
        return None, (f"{len(unjudged)} configs could not be judged (an error outside the trainer's code), "
                      f"e.g.:\n{json.dumps(unjudged[0][1], indent=1)[:4000]}")
    meta = {
        "flavour": flavour,
        "generator": "tools/gen_trainer_verdicts.py",
        "generated_at": _dt.datetime.now(_dt.timezone.utc).replace(microsecond=0).isoformat(),
        "regenerate": "flock /tmp/clawgym-heavy.lock .venv/bin/python tools/gen_trainer_verdicts.py "
                      "--fork-python <fork env>/bin/python --upstream-python <upstream env>/bin/python "
                      "--src <trainer sources> (tools/README.md)",
        "path_root": PATH_ROOT,
        "seed": ns.seed, "draws": ns.draws, "trouble_cases": sum(1 for fl, _ in TROUBLE if fl in ("*", flavour)),
        "sources": FLAVOURS[flavour]["sources"],
        "stages": judge_meta["stages"],
        "stand_ins": judge_meta["stand_ins"],
        "stand_in_imports": judge_meta["stand_in_imports"],
        "not_judged": judge_meta.get("not_judged"),
        "config_json": config_json,
        "constraints": CONSTRAINTS,
        "by_design": BY_DESIGN,
        "counts": {"entries": len(out), "accepted": sum(e["trainer"]["accepted"] for e in out),
                   "by_design": sum(e["by_design"] for e in out),
                   "unclassified": len(unclassified)},
    }
    return {"meta": meta, "entries": out}, unclassified


def reclassify(ns) -> int:
    """Classify the recorded verdicts again: the trainer's answers are kept as they were recorded."""
    for flavour in ns.flavour or sorted(FLAVOURS):
        path = os.path.join(ns.out_dir, f"{flavour}.json")
        with open(path) as f:
            old = json.load(f)
        entries = [e["overrides"] for e in old["entries"]]
        _reqs, plain = requests(flavour, entries)
        verdicts = {i: dict(e["trainer"], id=i) for i, e in enumerate(old["entries"])}
        judge_meta = {k: old["meta"].get(k) for k in ("stages", "stand_ins", "stand_in_imports", "not_judged")}
        ns.seed, ns.draws = old["meta"]["seed"], old["meta"]["draws"]
        data, unclassified = record(flavour, entries, plain, verdicts, judge_meta, old["meta"]["config_json"], ns)
        data["meta"]["generated_at"] = old["meta"]["generated_at"]
        data["meta"]["reclassified_at"] = _dt.datetime.now(_dt.timezone.utc).replace(microsecond=0).isoformat()
        _write(path, data)
        _summary(flavour, data, unclassified, path, "reclassified")
    return 0


def _write(path: str, data: dict) -> None:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path + ".tmp", "w") as f:
        f.write(_dumps(data))
    os.replace(path + ".tmp", path)


def _summary(flavour, data, unclassified, path, how) -> None:
    print(f"{flavour}: {data['meta']['counts']} -> {path} ({how})")
    for i, v in unclassified:
        where = v.get("where") or {}
        print(f"  unclassified #{i}: [{v['stage']}] {where.get('file')}:{where.get('line')} "
              f"{v['exception']}: {(v['message'] or where.get('code') or '')[:200]}")


def _dumps(data: dict) -> str:
    """meta indented; one line per entry (a regeneration diffs config by config)."""
    meta = json.dumps(data["meta"], indent=1, ensure_ascii=False)
    body = ",\n".join(json.dumps(e, ensure_ascii=False, separators=(",", ":")) for e in data["entries"])
    return '{"meta": ' + meta + ',\n"entries": [\n' + body + "\n]}\n"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description="Record trainer verdicts over a seeded corpus of clawgym configs.")
    ap.add_argument("--fork-python", help="python of the fork's CPU trainer environment")
    ap.add_argument("--upstream-python", help="python of upstream slime v0.3.1's CPU trainer environment")
    ap.add_argument("--src", required=True, help="directory holding the source trees (tools/README.md)")
    ap.add_argument("--flavour", action="append", choices=sorted(FLAVOURS), help="only these (default: both)")
    ap.add_argument("--seed", type=int, default=SEED)
    ap.add_argument("--draws", type=int, default=DRAWS)
    ap.add_argument("--out-dir", default=str(OUT_DIR))
    ap.add_argument("--reclassify", action="store_true",
                    help="keep the recorded trainer verdicts, classify them again (after a change of "
                         "CONSTRAINTS or BY_DESIGN); no trainer environment needed")
    ns = ap.parse_args(argv)
    if ns.reclassify:
        return reclassify(ns)
    for flavour in ns.flavour or sorted(FLAVOURS):
        python = getattr(ns, FLAVOURS[flavour]["python_opt"])
        if not python:
            sys.exit(f"gen_trainer_verdicts: pass --{FLAVOURS[flavour]['python_opt'].replace('_', '-')}")
        t0 = time.monotonic()
        entries = corpus(flavour, ns.seed, ns.draws)
        reqs, plain = requests(flavour, entries)
        t1 = time.monotonic()
        judge_meta, config_json, verdicts = judge(flavour, python, ns.src, reqs)
        data, unclassified = record(flavour, entries, plain, verdicts, judge_meta, config_json, ns)
        path = os.path.join(ns.out_dir, f"{flavour}.json")
        if data is None:  # some configs could not be judged: the raw verdicts are kept for a look
            _write(path + ".unjudged", {"meta": {}, "entries": list(verdicts.values())})
            sys.exit(f"gen_trainer_verdicts: {flavour}: {unclassified} (raw verdicts: {path}.unjudged)")
        _write(path, data)
        _summary(flavour, data, unclassified, path,
                 f"compose+plan {t1 - t0:.0f} s, judge {time.monotonic() - t1:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
