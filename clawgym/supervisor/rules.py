"""Health rules on the run's own metrics, read from its events as ``clawgym runs`` reads them.

Each rule names the key it reads (slime's keys, shared/reference/run-supervision.md section 5;
ClawGym's ``openclaw/*`` counts, section 7), what it protects against, its threshold and action
(``health.*``). A rule answers a verdict from the newest points only: the loop stops the job and
ends the attempt with the rule's class (``stop``: for good; ``end``: the recovery table decides).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

from clawgym.supervisor import classes as C
from clawgym.supervisor.evidence import run_scalars
from clawgym.supervisor.monitor import RunState, Verdict

LOGPROB_DIFF = "train/train_rollout_logprob_abs_diff"
LOSS = "train/loss"
REWARDS = ("rollout/raw_reward", "openclaw/avg_reward_submitted")
SAMPLES = "openclaw/total_samples"
SANDBOX_FAILED = ("openclaw/skipped_trajectories", "openclaw/timed_out_trajectories")
SUBMITTED = "openclaw/submitted_trajectories"


@dataclass(frozen=True)
class Rule:
    """What a rule reads and why (``clawgym explain health.<key>`` shows it)."""

    name: str
    cls: str
    keys: Tuple[str, ...]
    protects: str
    threshold_key: Optional[str]
    action_key: str


RULES: List[Rule] = [
    Rule("nan", C.NAN_LOSS, (LOSS, *REWARDS),
         "a NaN or inf loss or reward: the optimizer is fed garbage and every later step with it", None,
         "nan_action"),
    Rule("logprob-drift", C.LOGPROB_DRIFT, (LOGPROB_DIFF,),
         "trainer and rollout-engine log-probs of the same tokens drifting apart after a weight update: "
         "a broken weight sync or trainer/engine version pair, training off-policy on garbage",
         "logprob_diff_max", "logprob_diff_action"),
    Rule("zero-reward", C.ZERO_REWARD, (*REWARDS, SAMPLES),
         "the reward exactly 0 rollout after rollout while samples are produced: a broken reward script "
         "or sandbox", "zero_reward_rollouts", "zero_reward_action"),
    Rule("sandbox-failures", C.SANDBOX_FAILURES, (*SANDBOX_FAILED, SUBMITTED),
         "failed sandboxes scored as reward 0, biasing every group's baseline", "sandbox_failure_max",
         "sandbox_failure_action"),
]


def never_logged(rule: Rule, config: Mapping[str, Any]) -> Optional[str]:
    """Why the chosen trainer never logs what ``rule`` reads, or None when it does (or may)."""
    flavour = (config.get("trainer") or {}).get("flavour", "clawgym")
    backend = (config.get("args") or {}).get("train_backend") or "megatron"
    if rule.name == "logprob-drift" and flavour == "clawgym" and backend == "megatron":
        return (f"{LOGPROB_DIFF} is never logged by the ClawGym fork's Megatron backend (only its FSDP "
                "backend logs it; upstream slime logs it from both): this rule never trips here")
    sandbox = (config.get("sandbox") or {}).get("backend")
    if rule.name == "sandbox-failures" and (sandbox == "none" or flavour != "clawgym"):
        return ("openclaw/* counts are logged by ClawGym's rollout (clawgym_rl_rollout.py) only, with a "
                "sandbox: this rule never trips here")
    return None


def _finite(x: float) -> bool:
    return not (math.isnan(x) or math.isinf(x))


def _by_step(points: Sequence[Any]) -> Dict[int, float]:
    return {p.step: p.value for p in points}


class HealthRules:
    """Every rule of ``health.*`` not turned off, polled on the newest points of the run's events."""

    name = "health-rules"

    def __init__(self, config: Mapping[str, Any]) -> None:
        self.health = dict(config.get("health") or {})
        self.steps_per_rollout = int((config.get("rollout") or {}).get("num_steps_per_rollout") or 1)

    def _on(self, rule: Rule) -> bool:
        if self.health.get(rule.action_key, "off") == "off":
            return False
        return rule.threshold_key is None or self.health.get(rule.threshold_key) is not None

    def poll(self, state: RunState) -> Optional[Verdict]:
        s = run_scalars(state)
        for rule in RULES:
            if not self._on(rule):
                continue
            evidence = getattr(self, "_" + rule.name.replace("-", "_"))(s)
            if evidence:
                return Verdict(cls=rule.cls, evidence=f"{rule.name}: {evidence} ({rule.protects})",
                               action=self.health[rule.action_key])
        return None

    def _nan(self, s: Mapping[str, list]) -> Optional[str]:
        for key in (LOSS, *REWARDS):
            points = s.get(key)
            if points and not _finite(points[-1].value):
                return f"{key} = {points[-1].value} at step {points[-1].step}"
        return None

    def _logprob_drift(self, s: Mapping[str, list]) -> Optional[str]:
        # Train steps below steps_per_rollout trained on rollout 0, generated before any weight update.
        limit = float(self.health["logprob_diff_max"])
        for p in s.get(LOGPROB_DIFF) or []:
            if p.step >= self.steps_per_rollout and p.value > limit:
                return (f"{LOGPROB_DIFF} = {p.value:.4g} at train step {p.step} (after the first weight "
                        f"update), above health.logprob_diff_max = {limit:g}")
        return None

    def _zero_reward(self, s: Mapping[str, list]) -> Optional[str]:
        n = int(self.health["zero_reward_rollouts"])
        samples = _by_step(s.get(SAMPLES) or [])
        for key in REWARDS:
            points = (s.get(key) or [])[-n:]
            if len(points) < n or any(p.value != 0.0 for p in points):
                continue
            # A reward logged at a rollout step means that rollout produced samples; where ClawGym
            # logs its sample count, it must say so too.
            if samples and any(samples.get(p.step, 0.0) <= 0 for p in points):
                continue
            return (f"{key} = 0 exactly for the last {n} rollouts (steps {points[0].step}..{points[-1].step}) "
                    f"while samples were produced, health.zero_reward_rollouts = {n}")
        return None

    def _sandbox_failures(self, s: Mapping[str, list]) -> Optional[str]:
        limit = float(self.health["sandbox_failure_max"])
        submitted = s.get(SUBMITTED)
        if not submitted:
            return None
        step = submitted[-1].step
        failed = {k: _by_step(s.get(k) or []).get(step, 0.0) for k in SANDBOX_FAILED}
        total = submitted[-1].value + sum(failed.values())
        if total <= 0:
            return None
        rate = sum(failed.values()) / total
        if rate > limit:
            counts = ", ".join(f"{k} = {v:g}" for k, v in failed.items())
            return (f"sandbox failure rate {rate:.0%} at rollout {step} ({counts}, {SUBMITTED} = "
                    f"{submitted[-1].value:g}), above health.sandbox_failure_max = {limit:g}")
        return None


def explain_lines(key: str, config: Optional[Mapping[str, Any]]) -> List[str]:
    """What ``clawgym explain health.<key>`` adds: the rule the key belongs to, the keys it reads,
    what it protects against, and whether the chosen trainer ever logs them."""
    name = key.split(".", 1)[1] if key.startswith("health.") else None
    out: List[str] = []
    if name == "stall_s" and config:
        from clawgym.supervisor.hang import derived_stall_s

        stall, how = derived_stall_s(config)
        out.append(f"  the supervisor's stall time for this config: {stall:.0f} s, from {how}")
    for rule in RULES:
        if name not in (rule.threshold_key, rule.action_key):
            continue
        out.append(f"  health rule {rule.name} (class {rule.cls}) reads {', '.join(rule.keys)}: "
                   f"protects against {rule.protects}")
        why = never_logged(rule, config or {})
        if why:
            out.append(f"  note: {why}")
    return out
