"""Signals around a local head: SIGTERM/SIGHUP act as Ctrl-C once a head may start, and wait while it stops."""

from __future__ import annotations

import contextlib
import signal
import threading
from typing import Iterator


def interrupt_on_signals() -> None:
    """From the moment a launch may start a head: SIGTERM and SIGHUP act as Ctrl-C (raise
    KeyboardInterrupt in the main thread), so whatever runs then stops the head it began
    through its record (the launch's ``except``/``atexit`` paths) instead of the process dying
    with the head left behind. The pipeline's own handlers take over while jobs run
    (:func:`clawgym.launch.rayjob._sigterm_as_interrupt`) and give these back. Handlers someone else
    installed are left alone."""
    if threading.current_thread() is not threading.main_thread():
        return

    def on_signal(signum, frame):  # noqa: ARG001
        raise KeyboardInterrupt

    for sig in (signal.SIGTERM, signal.SIGHUP):
        if signal.getsignal(sig) in (signal.SIG_DFL, None):
            signal.signal(sig, on_signal)
    if signal.getsignal(signal.SIGINT) in (signal.SIG_DFL, None):
        signal.signal(signal.SIGINT, signal.default_int_handler)


@contextlib.contextmanager
def signals_deferred() -> Iterator[None]:
    """While stopping a head: SIGINT/SIGTERM/SIGHUP wait until it is stopped (nothing half-stopped)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    old = {sig: signal.signal(sig, signal.SIG_IGN) for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)}
    try:
        yield
    finally:
        for sig, handler in old.items():
            signal.signal(sig, handler)
