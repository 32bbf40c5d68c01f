"""The collector, the report and the two stages; the rules live in the domain modules."""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple

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


def _get(c: Mapping[str, Any], path: str) -> Any:
    node: Any = c
    for part in path.split("."):
        node = node[int(part)] if isinstance(node, list) and part.isdigit() else node[part]
    return node


def _lookup(c: Mapping[str, Any], path: str) -> Any:
    """``_get``, or None for a key the config does not have (a rule may name a key its fix adds)."""
    try:
        return _get(c, path)
    except (KeyError, TypeError, IndexError):
        return None


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
            v = _get(self.c, k)
            if v is not None and v <= 0:
                self.add(code, [k], f"{what} must be positive", f"set {k} to a value > 0")


Rule = Callable[[_Collector], None]


def _key_env(c: Mapping[str, Any]) -> List[str]:
    try:
        return [str(n) for n in c["wandb"]["key_env"] or []]
    except (KeyError, TypeError):
        return []


def _deep_leaves(leaves: Any) -> Any:
    """(dotted key, value) for every leaf, list elements included (``extra_args.0``): an
    interpolation that fails inside a list must be found like any other."""
    for key, value in leaves:
        if isinstance(value, list):
            if not value:
                yield key, value
            for i, item in enumerate(value):
                from clawgym.config import iter_leaves

                yield from _deep_leaves(iter_leaves(item, f"{key}.{i}") if isinstance(item, dict)
                                        else [(f"{key}.{i}", item)])
        else:
            yield key, value


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
    for key, value in _deep_leaves(iter_leaves(raw)):
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


def _all(cfg: DictConfig | Mapping[str, Any], *, environ: Optional[Mapping[str, str]] = None) -> List[Violation]:
    """Errors and warnings of a composed config: local rules first, then cross-group rules."""
    env = os.environ if environ is None else environ
    if isinstance(cfg, DictConfig):
        try:
            c = to_plain(cfg, resolve=True)
        except OmegaConfBaseException as exc:
            # The rules need resolved values: report what does not resolve, and only that.
            found = _unresolved(cfg)
            if not found:
                # Never an empty answer for a config the rules cannot read.
                found = [Violation([], {}, f"the config does not resolve: {str(exc).splitlines()[0][:200]}",
                                   "fix the interpolation named above or give the key a plain value", "resolves")]
            values = known_secrets(None, env)
            for f in found:
                f.values = {k: redact_value(val, values) for k, val in f.values.items()}
            return found
    else:
        c = cfg
    # Secret values typed into extra_args are masked in every later report of this process too.
    try:
        remember(argv_secrets(c["extra_args"]))
        # ... and those smuggled into an args.* list (args.data_path=[--wandb-key,VALUE]).
        for value in (c.get("args") or {}).values():
            if isinstance(value, list):
                remember(argv_secrets([x for x in value if not isinstance(x, (list, dict))]))
    except (KeyError, TypeError, AttributeError):
        pass
    from clawgym.effective import effective_config
    from clawgym.validate import CROSS_RULES, LOCAL_RULES

    # Null curated keys emit no flag: the rules reason with the value the trainer will use.
    raw, c = c, effective_config(c)
    col = _Collector(c, env)
    # Rules about what the config itself says (a model group left incomplete) read it as written.
    col.raw = raw
    for rule in LOCAL_RULES:
        _run_rule(col, rule, cross=False)
    for rule in CROSS_RULES:
        _run_rule(col, rule, cross=True)
    return col.out


def _run_rule(col: "_Collector", rule: Rule, *, cross: bool) -> None:
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


def _refuse_rule(col: "_Collector", rule: Rule, exc: BaseException) -> None:
    name = getattr(rule, "__name__", str(rule)).replace("rule_", "")
    text = redact(str(exc)[:200], col.secrets)
    col.out.append(Violation([], {}, f"the check {name} could not judge this config ({type(exc).__name__}: {text})",
                             "fix the values that check reads (see the other problems, if any); "
                             "a config clawgym cannot check is not launched", "check-could-not-run"))


#: Public names of the collector and of running one rule, for searches above validation
#: (``clawgym/search``) that ask a subset of the same rules about many candidate configs.
Collector = _Collector
run_rule = _run_rule


def check(cfg: DictConfig | Mapping[str, Any], *,
          environ: Optional[Mapping[str, str]] = None) -> Tuple[List[Violation], List[Violation]]:
    """(errors, warnings) of a composed config: errors refuse it, warnings are only printed."""
    found = _all(cfg, environ=environ)
    return [v for v in found if v.severity != "warning"], [v for v in found if v.severity == "warning"]


def warnings(cfg: DictConfig | Mapping[str, Any], *, environ: Optional[Mapping[str, str]] = None) -> List[Violation]:
    """What the trainer accepts but rewrites or leaves idle (never refuses)."""
    return check(cfg, environ=environ)[1]


def violations(cfg: DictConfig | Mapping[str, Any], *, environ: Optional[Mapping[str, str]] = None) -> List[Violation]:
    """Every error of a composed config: local rules first, then cross-group rules.

    ``environ`` (default: this process's) is where the secrets come from that no config
    value may hold; every report masks them. Warnings are left out (see :func:`check`).
    """
    return check(cfg, environ=environ)[0]


def validate(cfg: DictConfig | Mapping[str, Any], *, context: str = "",
             environ: Optional[Mapping[str, str]] = None) -> None:
    """Raise :class:`ConfigError` carrying every violation, if any."""
    found = violations(cfg, environ=environ)
    if found:
        raise ConfigError(found, context=context)
