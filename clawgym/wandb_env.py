"""W&B settings that reach the trainer job through its environment (never the key)."""

from __future__ import annotations

from typing import Any, Dict, Mapping


def wandb_job_env(c: Mapping[str, Any], *, use_wandb: bool) -> Dict[str, str]:
    """Extra job environment variables for W&B, from a resolved plain config."""
    return {}
