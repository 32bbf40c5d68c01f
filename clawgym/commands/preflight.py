"""``clawgym preflight [overrides...]``: run the preflight checks of a composed config and stop."""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    parser = subparsers.add_parser(
        "preflight", help="check sandbox, checkpoint, GPUs, ports and checkout for a config; start nothing",
        description="Compose the config as train.py would (same Hydra overrides), validate it, and run the "
                    "preflight checklist without launching. Exit status 1 when a check fails, 2 for a bad config.")
    parser.add_argument("overrides", nargs="*", metavar="OVERRIDE",
                        help="Hydra overrides, e.g. sandbox=chroot sandbox.rootfs=/srv/rootfs 'skip_checks=[gpus]'")
    head = parser.add_mutually_exclusive_group()
    head.add_argument("--local-head", dest="local_head", action="store_true", default=None,
                      help="check GPUs and ports as for a head started here (default when ray.address is unset)")
    head.add_argument("--cluster", dest="local_head", action="store_false",
                      help="the job goes to an existing cluster: do not check this machine's GPUs and ports")
    parser.set_defaults(func=run)
    return parser


def run(args: argparse.Namespace) -> int:
    from hydra.errors import HydraException
    from omegaconf.errors import OmegaConfBaseException

    from clawgym.app import timestamp
    from clawgym.config import compose, to_plain
    from clawgym.plan import build_plan
    from clawgym.preflight import PreflightError, preflight_only, run_preflight
    from clawgym.validate import ConfigError, validate

    try:
        cfg = compose(args.overrides)
    except (HydraException, OmegaConfBaseException, ValueError) as exc:
        print(f"clawgym preflight: cannot compose the config: {exc}", file=sys.stderr)
        return 2
    try:
        validate(cfg)
    except ConfigError as err:
        print(err.report(), file=sys.stderr)
        return 2
    plan = build_plan(cfg, environ=os.environ, timestamp=timestamp())
    if args.local_head is None:
        return preflight_only(cfg, plan)
    try:
        run_preflight(to_plain(cfg), plan, local_head=args.local_head)
    except PreflightError as err:
        print(f"preflight failed at '{err.check}': nothing was started", file=sys.stderr)
        return 1
    print("preflight passed")
    return 0
