"""``clawgym preflight [overrides...]``: run the preflight checks of a composed config and stop."""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any, List, Optional, Tuple
from clawgym.common.exit_codes import REFUSED


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    parser = subparsers.add_parser(
        "preflight", help="check sandbox, checkpoint, GPUs, ports and checkout for a config; start nothing",
        description="Compose the config as train.py would (same Hydra overrides), validate it, and run the "
                    "preflight checklist without launching. Exit status 2 when a check fails or the config is refused "
                    "(refused before anything started: docs/reference/exit-codes.md).")
    head = parser.add_mutually_exclusive_group()
    head.add_argument("--local-head", dest="local_head", action="store_true", default=None,
                      help="check GPUs and ports as for a head started here (default when ray.address is unset)")
    head.add_argument("--cluster", dest="local_head", action="store_false",
                      help="the job goes to an existing cluster: do not check this machine's GPUs and ports")
    # REMAINDER, so the flags above may also follow the overrides.
    parser.add_argument("overrides", nargs=argparse.REMAINDER, metavar="OVERRIDE",
                        help="Hydra overrides, e.g. sandbox=chroot sandbox.rootfs=/srv/rootfs 'skip_checks=[gpus]'")
    parser.set_defaults(func=run)
    return parser


#: The flags, also accepted among the overrides.
FLAGS = ("--local-head", "--cluster")


def split_flags(items: List[str]) -> Tuple[List[str], Optional[bool]]:
    """(Hydra overrides, local_head) from the free-form argument list; raises ValueError on an unknown flag."""
    overrides: List[str] = []
    local_head: Optional[bool] = None
    for item in items:
        if item in FLAGS:
            local_head = item == "--local-head"
        elif item.startswith("--"):
            raise ValueError(f"unknown option {item} (known: {', '.join(FLAGS)})")
        else:
            overrides.append(item)
    return overrides, local_head


def run(args: argparse.Namespace) -> int:
    from hydra.errors import HydraException
    from omegaconf.errors import OmegaConfBaseException

    from clawgym.app import timestamp
    from clawgym.config.compose import compose
    from clawgym.plan.build import build_plan
    from clawgym.preflight import preflight_only
    from clawgym.validate import ConfigError, validate

    try:
        overrides, local_head = split_flags(args.overrides)
        local_head = args.local_head if local_head is None else local_head
    except ValueError as exc:
        print(f"clawgym preflight: {exc}", file=sys.stderr)
        return REFUSED
    try:
        cfg = compose(overrides)
    except (HydraException, OmegaConfBaseException, ValueError) as exc:
        from clawgym.config.keys import composition_report

        print(f"clawgym preflight: cannot compose the config: {composition_report(exc)}", file=sys.stderr)
        return REFUSED
    try:
        validate(cfg)
    except ConfigError as err:
        print(err.report(), file=sys.stderr)
        return REFUSED
    plan = build_plan(cfg, environ=os.environ, timestamp=timestamp())
    # Exits 2 on a failed check (refused before anything started).
    return preflight_only(cfg, plan, local_head=local_head)
