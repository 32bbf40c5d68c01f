"""``clawgym layout [OVERRIDES...] --gpus N``: the layouts of a config that start and fit, fastest first."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from clawgym.common.exit_codes import REFUSED


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    parser = subparsers.add_parser(
        "layout", help="rank every layout of a config that the trainer starts and that fits, by step time",
        description="Compose the config as train.py would (same Hydra overrides; the keys you set are kept), "
                    "search its layouts on N GPUs (colocated or split, TP/PP/CP/EP, recompute, offload, engine "
                    "TP...) and print the fastest that pass validation and fit the memory plan, each as one "
                    "override line to paste after `python train.py`. Exit status 2 when no layout fits or the "
                    "input is bad.")
    parser.add_argument("overrides", nargs="*", metavar="OVERRIDE", help="Hydra overrides, e.g. model=qwen3_30b_a3b")
    parser.add_argument("--gpus", type=int, required=True, help="GPUs the run may use, all nodes together")
    parser.add_argument("--gpus-per-node", type=int, default=None,
                        help="GPUs per node (default: 8, or --gpus when fewer)")
    parser.add_argument("--gpu", default=None,
                        help="GPU model of the memory plan's table (default: memory.gpu, else this node's, else "
                             "h100_80gb)")
    parser.add_argument("--top", type=int, default=5, help="layouts to print (default 5)")
    parser.add_argument("--json", action="store_true", help="print the result as JSON")
    parser.set_defaults(func=run, intermixed="overrides")
    return parser


def _fail(text: str) -> int:
    print(f"clawgym layout: {text}", file=sys.stderr)
    return REFUSED


def run(args: argparse.Namespace) -> int:
    from hydra.errors import HydraException
    from omegaconf.errors import OmegaConfBaseException

    from clawgym.config.compose import compose, to_plain
    from clawgym.memory import gpus as G
    from clawgym.search.constraints import constraint_keys
    from clawgym.search.layout import search
    from clawgym.search.output import format_result

    if args.gpus is None or args.gpus <= 0:
        return _fail(f"--gpus {args.gpus}: give the number of GPUs, a positive integer")
    if args.gpus_per_node is not None and args.gpus_per_node <= 0:
        return _fail(f"--gpus-per-node {args.gpus_per_node}: must be a positive integer")
    if args.top <= 0:
        return _fail(f"--top {args.top}: must be a positive integer")
    if args.gpu is not None and args.gpu not in G.GPUS:
        return _fail(f"--gpu {args.gpu}: the GPU table knows {', '.join(G.GPUS)}")
    try:
        cfg = compose(args.overrides)
        c = to_plain(cfg)
    except (HydraException, OmegaConfBaseException, ValueError) as exc:
        return _fail(f"cannot compose the config: {str(exc).splitlines()[0]}")
    gpu = args.gpu
    if gpu is None and (c.get("memory") or {}).get("gpu") is None:
        from clawgym.memory import this_node_gpu

        found = this_node_gpu(c)
        gpu = found.get("gpu") if found else None
    if gpu is not None and gpu not in G.GPUS:
        gpu = None
    mem_gpu = (c.get("memory") or {}).get("gpu")
    if mem_gpu is not None and mem_gpu not in G.GPUS:
        return _fail(f"memory.gpu={mem_gpu}: the GPU table knows {', '.join(G.GPUS)}")
    # The layout line names the GPU it was checked against when that is not the config's own.
    user = list(args.overrides)
    if args.gpu is not None and mem_gpu != args.gpu:
        user.append(f"memory.gpu={args.gpu}")
    try:
        result = search(c, gpus=args.gpus, gpus_per_node=args.gpus_per_node, gpu=gpu,
                        constraints=constraint_keys(args.overrides), top=args.top, user_overrides=user)
    except ValueError as exc:
        return _fail(str(exc))
    text = json.dumps(result.to_dict(), indent=2) if args.json else format_result(result)
    try:
        print(text, flush=True)
    except BrokenPipeError:
        # A reader that stopped early (`| head`): end quietly, as the dry run does.
        import os

        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    return 0 if result.layouts else 2
