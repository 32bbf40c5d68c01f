"""Hydra ``key=value`` override strings as text (no clawgym imports): sweeps name jobs by them, the
runs table tells a sweep's runs apart by them."""

from __future__ import annotations

from typing import List, Sequence, Tuple


def split_override(override: str) -> Tuple[str, str]:
    """(key, value) of ``[+|~|++]key=value``."""
    key, _, value = override.partition("=")
    return key.lstrip("+~"), value


def differing_overrides(job_overrides: Sequence[Sequence[str]], *, ignore: Sequence[str] = ()) -> List[List[str]]:
    """Per job, its overrides whose value is not the same in every job (in the job's order)."""
    parsed = [dict(split_override(o) for o in ov) for ov in job_overrides]
    keys = {k for p in parsed for k in p}
    differ = {k for k in keys if k not in ignore and len({p.get(k) for p in parsed}) > 1}
    return [[o for o in ov if split_override(o)[0] in differ] for ov in job_overrides]
