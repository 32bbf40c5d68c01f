"""``clawgym`` command line: subcommands that work on runs rather than launch them.

Each subcommand lives in ``clawgym/commands/<name>.py`` with ``add_parser(subparsers)``
that registers it and sets ``func``; modules are imported only when present, and heavy
imports happen inside ``func``.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from typing import List, Optional

#: Subcommand modules under clawgym.commands, in help order.
COMMANDS = ["show", "diff", "resume", "stamp", "preflight", "jobs", "runs", "report", "flags", "import_"]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="clawgym", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True
    for name in COMMANDS:
        try:
            module = importlib.import_module(f"clawgym.commands.{name}")
        except ModuleNotFoundError as exc:
            if exc.name == f"clawgym.commands.{name}":
                continue
            raise
        module.add_parser(sub)
    return parser


def main(argv: Optional[List[str]] = None) -> int:
    args = build_parser().parse_args(argv)
    return int(args.func(args) or 0)


if __name__ == "__main__":
    sys.exit(main())
