"""A throwaway ClawGym-RL-shaped checkout whose trainer is a recording stand-in.

Used by ``clawgym demo`` (a sweep on a laptop without GPUs) and by the tests
(``tests/fixtures/checkout.py``); nothing on a real launch path imports this package: the
plan points at whatever ``paths.root`` holds, and only the demo and the tests put this
checkout there.

:func:`build_checkout` lays out what clawgym derives its paths from: ``slime/`` with
``train_async.py`` and ``train.py`` (copies of :mod:`clawgym.demo.standin_trainer`, which
records how it was started and logs slime's metric keys to TensorBoard events),
``Megatron-LM/``, the ClawGym-RL hook modules, task data and the Qwen3-4B-Instruct-2507
``config.json``.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

#: The stand-in trainer, copied to where slime's trainer scripts live.
STANDIN = Path(__file__).resolve().parent / "standin_trainer.py"

#: The real ``config.json`` architecture values of Qwen/Qwen3-4B-Instruct-2507.
QWEN3_4B_INSTRUCT_2507_CONFIG = {
    "architectures": ["Qwen3ForCausalLM"],
    "attention_bias": False,
    "attention_dropout": 0.0,
    "bos_token_id": 151643,
    "eos_token_id": 151645,
    "head_dim": 128,
    "hidden_act": "silu",
    "hidden_size": 2560,
    "initializer_range": 0.02,
    "intermediate_size": 9728,
    "max_position_embeddings": 262144,
    "max_window_layers": 36,
    "model_type": "qwen3",
    "num_attention_heads": 32,
    "num_hidden_layers": 36,
    "num_key_value_heads": 8,
    "rms_norm_eps": 1e-06,
    "rope_scaling": None,
    "rope_theta": 5000000,
    "sliding_window": None,
    "tie_word_embeddings": True,
    "torch_dtype": "bfloat16",
    "transformers_version": "4.51.0",
    "use_cache": True,
    "use_sliding_window": False,
    "vocab_size": 151936,
}

ROLLOUT_MODULE = '''"""Stand-in of ClawGym-RL's rollout hook module (signature only; clawgym demo / tests)."""


def generate_rollout_clawgym_rl(args, rollout_id, data_buffer, evaluation=False):
    return []
'''

API_SERVER_MODULE = '''"""Stand-in of ClawGym-RL's API server hook module (signatures only; clawgym demo / tests)."""


async def generate(args, sample, sampling_params, evaluation=False):
    return sample


async def reward_func(args, sample_or_samples, **kwargs):
    return {"score": 0.0}
'''


def build_checkout(root: Path, *, n_train: int = 3, n_eval: int = 2) -> Path:
    """Create the stand-in checkout under ``root`` and return it."""
    slime = root / "slime"
    slime.mkdir(parents=True, exist_ok=True)
    for script in ("train_async.py", "train.py"):
        shutil.copyfile(STANDIN, slime / script)
    (slime / "slime").mkdir(exist_ok=True)
    (slime / "slime" / "__init__.py").write_text('"""Stand-in of the slime package (clawgym demo / tests)."""\n')
    megatron = root / "Megatron-LM" / "megatron"
    megatron.mkdir(parents=True, exist_ok=True)
    (megatron / "__init__.py").write_text('"""Stand-in of the Megatron-LM package (clawgym demo / tests)."""\n')
    (root / "clawgym_rl_rollout.py").write_text(ROLLOUT_MODULE)
    (root / "clawgym_rl_api_server.py").write_text(API_SERVER_MODULE)
    for split, n in (("clawgym_train", n_train), ("clawgym_eval", n_eval)):
        for i in range(n):
            task = root / "data" / split / f"task_{i:04d}"
            task.mkdir(parents=True, exist_ok=True)
            # ClawGym-RL's task layout (data/DATASET_README.md): data_entry.json + reward/reward.sh.
            entry = {"task_id": f"{split}-{i}", "user_query": f"fixture task {i}", "metadata": {}}
            (task / "data_entry.json").write_text(json.dumps(entry) + "\n")
            (task / "reward").mkdir(exist_ok=True)
            (task / "reward" / "reward.sh").write_text("#!/usr/bin/env bash\necho 0.0\n")
    model = root / "local" / "models" / "Qwen3-4B-Instruct-2507"
    model.mkdir(parents=True, exist_ok=True)
    (model / "config.json").write_text(json.dumps(QWEN3_4B_INSTRUCT_2507_CONFIG, indent=2) + "\n")
    (root / "results").mkdir(exist_ok=True)
    return root
