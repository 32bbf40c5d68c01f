"""Record how SGLang sizes its KV pool, per trainer flavour, from SGLang's own source.

Usage (offline; sources from PyPI with ``pip download --no-deps``, never imported):

    pip download --no-deps --no-binary :all: sglang==0.5.9 -d /tmp/sgl        # clawgym fork image
    pip download --no-deps sglang==0.5.15.post1 -d /tmp/sgl                   # upstream slime v0.3.1
    python tools/gen_sglang_memory.py --src clawgym=/tmp/sgl/sglang-0.5.9 --src slime=/tmp/sgl/v0515 \
        [--check]

For each flavour it reads ``sglang/srt/server_args.py`` (the automatic ``mem_fraction_static``
when it is None) and ``sglang/srt/model_executor/model_runner_kv_cache_mixin.py`` /
``pool_configurator.py`` (the KV pool budget and the bytes per token), asserts that every
expression the memory plan relies on is there verbatim, and writes
``clawgym/memory/data/sglang_memory.json`` with the formula, its constants and where each
was found (file and line). ``--check`` compares with the committed file instead of writing.
The memory plan (``clawgym/memory/rollout.py``) reads only that JSON.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

OUT = Path(__file__).resolve().parent.parent / "clawgym" / "memory" / "data" / "sglang_memory.json"
VERSIONS = {"clawgym": "0.5.9", "slime": "0.5.15.post1"}

#: (what, file, regular expression): each must match the source; the line is recorded.
NEEDLES = [
    ("kv_budget", ["model_runner_kv_cache_mixin.py"],
     r"rest_memory = available_gpu_memory - (total_gpu_memory|pre_model_load_memory) \* \(\s*1 - self\.mem_fraction_static"),
    ("mha_cell", ["model_runner_kv_cache_mixin.py", "pool_configurator.py"],
     r"get_num_kv_heads\(\s*(get_attention_tp_size\(\)|tp_size)\s*\)\s*\*\s*\(\s*(self\.)?model_config\.head_dim \+ (self\.)?model_config\.v_head_dim\s*\)"),
    ("mla_cell", ["model_runner_kv_cache_mixin.py", "pool_configurator.py"],
     r"\(\s*(self\.)?model_config\.kv_lora_rank \+ (self\.)?model_config\.qk_rope_head_dim\s*\)\s*\*\s*num_layers"),
    ("reserved_base_mib", ["server_args.py"], r"reserved_mem = 512\b"),
    ("prefill_activation", ["server_args.py"], r"reserved_mem \+= max\(self\.chunked_prefill_size, 2048\) \* 1\.5"),
    ("cuda_graph", ["server_args.py"], r"reserved_mem \+= (self\.cuda_graph_max_bs|decode_cuda_graph_config\.max_bs) \* 2\b"),
    ("parallel", ["server_args.py"], r"reserved_mem \+= self\.tp_size \* self\.pp_size / 8 \* 1024"),
    ("floor_large_gpu", ["server_args.py"], r"if gpu_mem is not None and gpu_mem > 60 \* 1024:\s*reserved_mem = max\(reserved_mem, 10 \* 1024\)"),
    ("fraction", ["server_args.py"], r"round\(\(gpu_mem - reserved_mem\) / gpu_mem, 3\)"),
    ("fallback_fraction", ["server_args.py"], r"else 0\.88"),
    ("h100_tier", ["server_args.py"], r"elif gpu_mem < 90 \* 1024:"),
    ("h200_tier", ["server_args.py"], r"elif gpu_mem < 160 \* 1024:"),
]

#: Per GPU-memory tier (upper bound MiB, exclusive): chunked_prefill_size, decode CUDA-graph max
#: batch for TP < 4 and TP >= 4 (``_handle_gpu_memory_settings``; identical in both versions).
TIERS = [[20 * 1024, 2048, 8, 8], [35 * 1024, 2048, 24, 80], [60 * 1024, 4096, 32, 160],
         [90 * 1024, 8192, 256, 512], [160 * 1024, 8192, 256, 512], [None, 16384, 512, 512]]


def find(root: Path, names, pattern):
    for name in names:
        for path in sorted(root.rglob(name)):
            if "srt" not in path.parts:
                continue
            text = path.read_text()
            mt = re.search(pattern, text)
            if mt:
                return {"file": str(path.relative_to(root)), "line": text[:mt.start()].count("\n") + 1}
    return None


def record(flavour: str, root: Path) -> dict:
    found = {}
    for what, names, pattern in NEEDLES:
        where = find(root, names, pattern)
        if where is None:
            sys.exit(f"{flavour}: {what}: expression not found under {root} ({pattern})")
        found[what] = where
    tiers = TIERS
    return {
        "sglang": VERSIONS[flavour],
        "kv_pool_bytes": "mem_fraction_static * free_before_weights - weights_per_rank (free memory after "
                         "weights minus free_before_weights x (1 - mem_fraction_static))",
        "cell_bytes_mha": "kv_heads_per_attention_tp_rank x (head_dim + v_head_dim) x full-attention layers x kv dtype",
        "cell_bytes_mla": "(kv_lora_rank + qk_rope_head_dim) x layers x kv dtype (not split by TP)",
        "auto_fraction": {"reserved_base_mib": 512, "prefill_per_token_mib": 1.5, "prefill_min_tokens": 2048,
                          "cuda_graph_per_bs_mib": 2, "per_tp_pp_over_8_mib": 1024, "floor_mib": 10 * 1024,
                          "floor_above_mib": 60 * 1024, "no_gpu_fraction": 0.88, "tiers": tiers},
        "found": found,
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--src", action="append", required=True, help="FLAVOUR=PATH to an unpacked SGLang")
    ap.add_argument("--check", action="store_true")
    a = ap.parse_args()
    data = {"generated_by": "tools/gen_sglang_memory.py", "flavours": {}}
    for item in a.src:
        flavour, _, path = item.partition("=")
        data["flavours"][flavour] = record(flavour, Path(path))
    text = json.dumps(data, indent=1, sort_keys=True) + "\n"
    if a.check:
        if OUT.read_text() != text:
            print(f"{OUT} differs from SGLang's source", file=sys.stderr)
            return 1
        print("sglang_memory.json matches SGLang's source")
        return 0
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(text)
    print(f"wrote {OUT}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
