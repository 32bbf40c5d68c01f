"""The collector and the report; the rule lists and the two stages are the package's (__init__), the rules live in the domain modules."""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any, Callable, Dict, List, Mapping, Sequence

from clawgym.common.secrets import env_secrets, known_secrets, redact, redact_value


@dataclass
class Violation:
    """One broken rule: where, what it was, what the rule says, how to fix it."""

    # Dotted key paths involved.
    keys: List[str]
    # Their values, by key path.
    values: Dict[str, Any]
    # The rule, in words.
    rule: str
    # How to fix it.
    fix: str
    # Stable rule identifier (tests and skip lists refer to it).
    code: str = ""
    # "error" refuses the config; "warning" is printed (dry run, launch) and never refuses: what the
    # trainer accepts but silently rewrites or leaves idle.
    severity: str = "error"

    def format(self) -> str:
        vals = ", ".join(f"{k}={self.values.get(k)!r}" for k in self.keys)
        return f"[{self.code}] {vals}\n      rule: {self.rule}\n      fix:  {self.fix}"


def format_warnings(found: Sequence["Violation"]) -> str:
    """The warnings of a config as printed by a dry run or launch (secrets masked)."""
    lines = [f"clawgym: warning: [{w.code}] "
             + ", ".join(f"{k}={w.values.get(k)!r}" for k in w.keys)
             + f"\n      rule: {w.rule}\n      fix:  {w.fix}" for w in found]
    return redact("\n".join(lines))


class ConfigError(Exception):
    """Raised with every violation of a config; ``str()`` is the user-facing report."""

    def __init__(self, violations: Sequence[Violation], *, context: str = ""):
        self.violations = list(violations)
        self.context = context
        super().__init__(self.report())

    def report(self) -> str:
        n = len(self.violations)
        head = f"clawgym: invalid configuration{' (' + self.context + ')' if self.context else ''}: " \
               f"{n} problem{'s' if n != 1 else ''}"
        body = [f"  {i}. {v.format()}" for i, v in enumerate(self.violations, 1)]
        # Values are masked where collected; this pass also catches secrets inside rule or fix texts.
        return redact("\n".join([head, *body]))


def value_at(c: Mapping[str, Any], path: str) -> Any:
    node: Any = c
    for part in path.split("."):
        node = node[int(part)] if isinstance(node, list) and part.isdigit() else node[part]
    return node


def _lookup(c: Mapping[str, Any], path: str) -> Any:
    """``value_at``, or None for a key the config does not have (a rule may name a key its fix adds)."""
    try:
        return value_at(c, path)
    except (KeyError, TypeError, IndexError):
        return None


class Collector:
    def __init__(self, c: Mapping[str, Any], environ: Mapping[str, str] = os.environ):
        self.c = c
        self.raw = c
        self.environ = environ
        # Secret variable -> value, from the launcher's environment (memory only).
        self.env_secrets = env_secrets(environ, _key_env(c))
        # Every value a report must mask: the environment's and those typed into the config.
        self.secrets = known_secrets(c, environ)
        self.out: List[Violation] = []

    def add(self, code: str, keys: Sequence[str], rule: str, fix: str, *, redact: bool = False,
            severity: str = "error") -> None:
        # A key that holds a secret is named but its value never echoed (reports reach logs);
        # any other value is shown with every known secret value masked in it.
        values = {k: "<redacted>" if redact else redact_value(_lookup(self.c, k), self.secrets) for k in keys}
        self.out.append(Violation(list(keys), values, rule, fix, code, severity))

    def warn(self, code: str, keys: Sequence[str], rule: str, fix: str) -> None:
        """What the trainer accepts but rewrites or leaves unused: printed, never refused."""
        self.add(code, keys, rule, fix, severity="warning")

    def positive(self, code: str, keys: Sequence[str], what: str) -> None:
        for k in keys:
            v = value_at(self.c, k)
            if v is not None and v <= 0:
                self.add(code, [k], f"{what} must be positive", f"set {k} to a value > 0")


Rule = Callable[[Collector], None]


def _key_env(c: Mapping[str, Any]) -> List[str]:
    try:
        return [str(n) for n in c["wandb"]["key_env"] or []]
    except (KeyError, TypeError):
        return []


def run_rule(col: "Collector", rule: Rule, *, cross: bool) -> None:
    """Run one rule; a rule that raises is a refusal naming it, never an exception escaping
    validation (Hydra would go on and write .hydra/ after a failing callback).

    A cross rule that cannot evaluate a group already reported broken is skipped. A missing or
    broken flag registry is a broken install, not a config problem: RegistryError propagates.
    """
    from clawgym.registry import RegistryError

    try:
        rule(col)
    except RegistryError:
        raise
    except (TypeError, ZeroDivisionError, KeyError) as exc:
        if cross and any(v.severity == "error" for v in col.out):
            return
        _refuse_rule(col, rule, exc)
    except Exception as exc:  # noqa: BLE001 - any failure of a rule refuses the config, cleanly
        _refuse_rule(col, rule, exc)


def _refuse_rule(col: "Collector", rule: Rule, exc: BaseException) -> None:
    name = getattr(rule, "__name__", str(rule)).replace("rule_", "")
    text = redact(str(exc)[:200], col.secrets)
    col.out.append(Violation([], {}, f"the check {name} could not judge this config ({type(exc).__name__}: {text})",
                             "fix the values that check reads (see the other problems, if any); "
                             "a config clawgym cannot check is not launched", "check-could-not-run"))
