"""Printing to a console that may be gone (no clawgym imports): every floor may say something."""

from __future__ import annotations

import os
import sys


def silence() -> None:
    """stdout/stderr are gone (a closed pipe: ``2>&1 | true``, ``| head``): what follows goes to
    /dev/null, so that exiting prints no second error and no traceback."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        for fd in (1, 2):
            try:
                os.dup2(devnull, fd)
            except OSError:
                pass
        sys.stdout = open(os.devnull, "w")  # noqa: SIM115 - lives until exit
        sys.stderr = sys.stdout
    except OSError:
        pass


def say(text: str, *, out: bool = False) -> bool:
    """Print ``text`` (to stderr, or stdout with ``out``); False when the stream is closed (then silenced)."""
    try:
        print(text, file=sys.stdout if out else sys.stderr, flush=True)
        return True
    except (OSError, ValueError):
        silence()
        return False
