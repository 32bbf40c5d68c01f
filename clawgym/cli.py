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

from clawgym.common.exit_codes import INTERRUPTED

#: Subcommand modules under clawgym.commands, in help order.
COMMANDS = ["explain", "show", "diff", "resume", "stamp", "preflight", "layout", "jobs", "runs", "report", "flags",
            "import_", "demo"]


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
    _plain_text(parser)
    return parser


def _plain_text(parser: argparse.ArgumentParser) -> None:
    """Help as a terminal shows it: the modules' docstrings are reStructuredText (``KEY``); --help
    prints them without the backticks."""
    parser.description = _unquote(parser.description)
    parser.epilog = _unquote(parser.epilog)
    for action in parser._actions:
        action.help = _unquote(action.help)
        if isinstance(action, argparse._SubParsersAction):  # clawgym jobs logs / stop / ...
            for sub in action.choices.values():
                _plain_text(sub)


def _unquote(text: Optional[str]) -> Optional[str]:
    return text.replace("``", "") if isinstance(text, str) else text


def main(argv: Optional[List[str]] = None) -> int:
    parser = build_parser()
    # argparse collects a ``nargs="*"`` positional once: ``resume DIR --dry-run KEY=VALUE`` would
    # leave KEY=VALUE over. A subcommand that takes overrides names their dest (``intermixed``)
    # and gets every leftover that is not an option, wherever it stood.
    args, extra = parser.parse_known_args(argv)
    dest = getattr(args, "intermixed", None)
    if extra:
        if dest is None or any(e.startswith("-") for e in extra):
            parser.error(f"unrecognized arguments: {' '.join(extra)}")
        getattr(args, dest).extend(extra)
    try:
        return int(args.func(args) or 0)
    except KeyboardInterrupt:
        print("\nclawgym: interrupted", file=sys.stderr)
        return INTERRUPTED


if __name__ == "__main__":
    sys.exit(main())
