"""Writing files so that nothing is half-written (no clawgym imports): every floor may use it."""

from __future__ import annotations

import os
import threading
from pathlib import Path


def write_synced(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` and flush it to disk before returning."""
    with open(path, "w") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())


def atomic_write_text(path: Path, text: str) -> None:
    """Write a file through a temp file and a rename."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.parent / f".{path.name}.tmp-{os.getpid()}-{threading.get_ident()}"
    try:
        write_synced(tmp, text)
        os.replace(tmp, path)
    finally:
        if tmp.exists():
            tmp.unlink()
