"""The supervisor's settings (``health.*``) and checkpoint retention (``checkpoint.keep_*``)."""

from __future__ import annotations

from clawgym.config.schema import HEALTH_ACTIONS
from clawgym.validate.core import Collector

#: health.<threshold>: (what it counts, a value that works).
_THRESHOLDS = {
    "stall_s": ("seconds without progress before a hang is called", "1800, or null to derive it"),
    "logprob_diff_max": ("a log-prob difference", "0.5, or null to turn the rule off"),
    "zero_reward_rollouts": ("rollouts in a row", "5, or null to turn the rule off"),
    "sandbox_failure_max": ("a share of trajectories", "0.5, or null to turn the rule off"),
}


def rule_health(v: Collector) -> None:
    h = v.c.get("health") or {}
    for key in sorted(k for k in h if k.endswith("_action")):
        if h[key] not in HEALTH_ACTIONS:
            v.add("health-action-choice", [f"health.{key}"], f"an action is one of {', '.join(HEALTH_ACTIONS)}",
                  f"set health.{key}=stop (stopped for good), end (the recovery table decides) or off")
    for key, (what, works) in _THRESHOLDS.items():
        value = h.get(key)
        if value is not None and not value > 0:
            v.add("health-threshold-positive", [f"health.{key}"], f"health.{key} counts {what} and must be > 0",
                  f"set health.{key}={works}")
    ck = v.c.get("checkpoint") or {}
    for key in ("keep_last", "keep_every"):
        if ck.get(key) is not None and ck[key] < 1:
            v.add("checkpoint-keep-positive", [f"checkpoint.{key}"],
                  f"checkpoint.{key} counts checkpoints and must be >= 1 (the newest complete one is always kept)",
                  f"set checkpoint.{key}=3, or null to keep every checkpoint")
