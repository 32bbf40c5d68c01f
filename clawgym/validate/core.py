"""The collector, the report and the two stages; the rules live in the domain modules."""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence

from omegaconf import DictConfig
from omegaconf.errors import OmegaConfBaseException

from clawgym.config import to_plain
from clawgym.secrets import argv_secrets, env_secrets, known_secrets, redact, redact_value, remember


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

    def format(self) -> str:
        vals = ", ".join(f"{k}={self.values.get(k)!r}" for k in self.keys)
        return f"[{self.code}] {vals}\n      rule: {self.rule}\n      fix:  {self.fix}"


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


def _get(c: Mapping[str, Any], path: str) -> Any:
    node: Any = c
    for part in path.split("."):
        node = node[part]
    return node


class _Collector:
    def __init__(self, c: Mapping[str, Any], environ: Mapping[str, str] = os.environ):
        self.c = c
        self.raw = c
        self.environ = environ
        # Secret variable -> value, from the launcher's environment (memory only).
        self.env_secrets = env_secrets(environ, _key_env(c))
        # Every value a report must mask: the environment's and those typed into the config.
        self.secrets = known_secrets(c, environ)
        self.out: List[Violation] = []

    def add(self, code: str, keys: Sequence[str], rule: str, fix: str, *, redact: bool = False) -> None:
        # A key that holds a secret is named but its value never echoed (reports reach logs);
        # any other value is shown with every known secret value masked in it.
        values = {k: "<redacted>" if redact else redact_value(_get(self.c, k), self.secrets) for k in keys}
        self.out.append(Violation(list(keys), values, rule, fix, code))

    def positive(self, code: str, keys: Sequence[str], what: str) -> None:
        for k in keys:
            v = _get(self.c, k)
            if v is not None and v <= 0:
                self.add(code, [k], f"{what} must be positive", f"set {k} to a value > 0")


Rule = Callable[[_Collector], None]


def _key_env(c: Mapping[str, Any]) -> List[str]:
    try:
        return [str(n) for n in c["wandb"]["key_env"] or []]
    except (KeyError, TypeError):
        return []


def _unresolved(cfg: DictConfig) -> List[Violation]:
    """Keys left at ``???`` or whose interpolation fails, each with its unresolved value."""
    from omegaconf import OmegaConf

    from clawgym.config import iter_leaves

    raw = OmegaConf.to_container(cfg, resolve=False)
    assert isinstance(raw, dict)
    raw.pop("hydra", None)
    out: List[Violation] = []
    missing: List[str] = []
    failing: Dict[str, List[tuple]] = {}
    for key, value in iter_leaves(raw):
        if value == "???":
            missing.append(key)
            out.append(Violation([key], {key: value}, "a required value is not set",
                                 f"set {key}, or choose an option of its group that sets it", "value-required"))
            continue
        try:
            OmegaConf.select(cfg, key, throw_on_missing=False)
        except OmegaConfBaseException as exc:
            failing.setdefault(str(exc).splitlines()[0], []).append((key, value))
    for cause, keys in failing.items():
        # Keys derived from a missing key fail because of it: already reported.
        if any(m in cause for m in missing):
            continue
        # Keys derived from a broken key fail for the same cause: report the one that
        # does not interpolate another failing key (the source), once.
        names = {k.rsplit(".", 1)[-1] for k, _ in keys}
        sources = [(k, v) for k, v in keys
                   if not any(re.search(r"\$\{[^}]*\b" + re.escape(n) + r"\b", str(v)) for n in names - {k.rsplit(".", 1)[-1]})]
        key, value = (sources or keys)[0]
        out.append(Violation([key], {key: value}, f"the config does not resolve: {cause}",
                             f"fix the interpolation of {key} or give it a plain value", "resolves"))
    return out


def violations(cfg: DictConfig | Mapping[str, Any], *, environ: Optional[Mapping[str, str]] = None) -> List[Violation]:
    """Every violation of a composed config: local rules first, then cross-group rules.

    ``environ`` (default: this process's) is where the secrets come from that no config
    value may hold; every report masks them.
    """
    env = os.environ if environ is None else environ
    if isinstance(cfg, DictConfig):
        try:
            c = to_plain(cfg, resolve=True)
        except OmegaConfBaseException:
            # The rules need resolved values: report what does not resolve, and only that.
            found = _unresolved(cfg)
            values = known_secrets(None, env)
            for f in found:
                f.values = {k: redact_value(val, values) for k, val in f.values.items()}
            return found
    else:
        c = cfg
    # Secret values typed into extra_args are masked in every later report of this process too.
    try:
        remember(argv_secrets(c["extra_args"]))
    except (KeyError, TypeError):
        pass
    from clawgym.effective import effective_config
    from clawgym.validate import CROSS_RULES, LOCAL_RULES

    # Null curated keys emit no flag: the rules reason with the value the trainer will use.
    raw, c = c, effective_config(c)
    col = _Collector(c, env)
    # Rules about what the config itself says (a model group left incomplete) read it as written.
    col.raw = raw
    for rule in LOCAL_RULES:
        rule(col)
    # A cross rule that cannot evaluate a broken group (already reported above) is skipped.
    for rule in CROSS_RULES:
        try:
            rule(col)
        except (TypeError, ZeroDivisionError, KeyError):
            pass
    return col.out


def validate(cfg: DictConfig | Mapping[str, Any], *, context: str = "",
             environ: Optional[Mapping[str, str]] = None) -> None:
    """Raise :class:`ConfigError` carrying every violation, if any."""
    found = violations(cfg, environ=environ)
    if found:
        raise ConfigError(found, context=context)
