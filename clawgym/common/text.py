"""Small text helpers every floor may use (no clawgym imports)."""

from __future__ import annotations

from typing import Optional


def fmt_duration(seconds: Optional[float]) -> str:
    """``m:ss`` or ``h:mm:ss``; ``-`` for no duration."""
    if seconds is None:
        return "-"
    seconds = int(round(seconds))
    h, rest = divmod(seconds, 3600)
    m, s = divmod(rest, 60)
    return f"{h}:{m:02d}:{s:02d}" if h else f"{m}:{s:02d}"
