"""``clawgym diff A B``: changed config keys, and the trainer flags and job environment they change.

A and B are each a save dir (its latest snapshot), a snapshot dir, a checkpoint dir
(the snapshot it carries), or an override set composed like ``train.py`` would
(``"rollout.temperature=0.8 gpu_layout=colocate_8"``; ``""`` is the defaults).
"""

from __future__ import annotations

import argparse
import os
import shlex
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple
from clawgym.common.exit_codes import REFUSED

#: Shown for a key or flag one side does not have.
ABSENT = "(absent)"
#: Shown for a store_true flag that is present.
SET = "(set)"
#: Longest value shown in a table cell.
MAX_CELL = 72


@dataclass
class Side:
    """One side of a comparison."""

    # What the user passed, as shown in the header.
    label: str
    # Where it came from (snapshot path, or "composed from overrides").
    source: str
    # Resolved plain config.
    config: Dict[str, Any]
    # Interpreter, script, trainer flags.
    entrypoint: List[str]
    # Job environment (the plan's runtime env vars; never secrets).
    env: Dict[str, str] = field(default_factory=dict)
    # The composed config with its interpolations kept (None where unknown: a snapshot of format 1).
    unresolved: Optional[Dict[str, Any]] = None
    # Keys a sweep set for this job beside the user's overrides (its run_name, a spread sglang.api_port).
    assigned: frozenset = frozenset()


# ---------------------------------------------------------------- comparisons (pure)

def flatten(data: Any, prefix: str = "") -> Dict[str, Any]:
    """Dotted key -> leaf value; lists and empty dicts are leaves."""
    if isinstance(data, Mapping) and data:
        out: Dict[str, Any] = {}
        for k, v in data.items():
            out.update(flatten(v, f"{prefix}.{k}" if prefix else str(k)))
        return out
    return {prefix: data}


def config_changes(a: Mapping[str, Any], b: Mapping[str, Any]) -> List[Tuple[str, Any, Any]]:
    """(key, value in a, value in b) for every leaf that differs; ABSENT where missing."""
    fa, fb = flatten(a), flatten(b)
    keys = list(fa) + [k for k in fb if k not in fa]
    return [(k, fa.get(k, ABSENT), fb.get(k, ABSENT)) for k in keys if fa.get(k, ABSENT) != fb.get(k, ABSENT)]


def _is_interpolation(value: Any) -> bool:
    return isinstance(value, str) and "${" in value


def split_derived(changes: Sequence[Tuple[str, Any, Any]], a: Optional[Mapping[str, Any]],
                  b: Optional[Mapping[str, Any]], assigned: frozenset = frozenset()
                  ) -> Tuple[List[Tuple[str, Any, Any]], List[Tuple[str, Any, Any]]]:
    """(set, derived) of ``changes``: a key is derived when both sides hold the same interpolation
    for it (``wandb.group: ${run_name}``, ``slurm.job_name``, ``kuberay.mount_path: ${paths.save}``),
    so its value differs only because a key it reads does, or when a sweep assigned it per job
    (``assigned``: its ``run_name``, a spread ``sglang.api_port``); one side setting it itself is a change.
    With either unresolved config unknown, only ``assigned`` keys count as derived."""
    ua, ub = flatten(a) if a is not None else {}, flatten(b) if b is not None else {}
    set_, derived = [], []
    for row in changes:
        key = row[0]
        same = key in ua and key in ub and ua[key] == ub[key] and _is_interpolation(ua[key])
        (derived if same or key in assigned else set_).append(row)
    return set_, derived


def sweep_assigned(overrides: Optional[Sequence[str]], meta: Mapping[str, Any]) -> frozenset:
    """Keys a sweep job's overrides hold that its command did not (the sweep set them for the job)."""
    origin = meta.get("origin") or {}
    if "MULTIRUN" not in str(origin.get("mode", "")) or not overrides:
        return frozenset()
    from clawgym.common.overrides import split_override

    typed = {split_override(str(a))[0] for a in meta.get("command") or [] if "=" in str(a)}
    return frozenset(k for k in (split_override(str(o))[0] for o in overrides) if k not in typed)


def parse_flags(args: Sequence[str]) -> Dict[str, Any]:
    """Flags as argparse sees them: the last occurrence wins, a bare flag is SET."""
    flags: Dict[str, Any] = {}
    i = 0
    while i < len(args):
        arg = str(args[i])
        if arg.startswith("--") and "=" in arg:
            key, value = arg.split("=", 1)
            flags[key] = value
            i += 1
            continue
        if arg.startswith("--"):
            values = []
            j = i + 1
            while j < len(args) and not str(args[j]).startswith("--"):
                values.append(str(args[j]))
                j += 1
            flags[arg] = " ".join(values) if values else SET
            i = j
            continue
        flags.setdefault("(positional)", [])
        flags["(positional)"].append(arg)
        i += 1
    return flags


def flag_changes(a: Sequence[str], b: Sequence[str]) -> List[Tuple[str, Any, Any]]:
    """Changed trainer flags between two entrypoints (interpreter, script, flags...)."""
    out: List[Tuple[str, Any, Any]] = []
    for label, idx in (("(interpreter)", 0), ("(trainer script)", 1)):
        va = a[idx] if len(a) > idx else ABSENT
        vb = b[idx] if len(b) > idx else ABSENT
        if va != vb:
            out.append((label, va, vb))
    fa, fb = parse_flags(a[2:]), parse_flags(b[2:])
    keys = list(fa) + [k for k in fb if k not in fa]
    out += [(k, fa.get(k, ABSENT), fb.get(k, ABSENT)) for k in keys if fa.get(k, ABSENT) != fb.get(k, ABSENT)]
    return out


def _cell(value: Any) -> str:
    if value is None or isinstance(value, bool):
        text = "null" if value is None else str(value).lower()
    else:
        text = value if isinstance(value, str) else repr(value) if isinstance(value, (list, dict)) else str(value)
    return clip(text)


def clip(text: str, width: int = MAX_CELL) -> str:
    """``text`` in at most ``width`` characters, the middle left out: two long values that differ at
    their ends (save dirs, paths) still read differently."""
    if len(text) <= width:
        return text
    tail = (width - 1) // 2
    return text[:width - 1 - tail] + "…" + text[len(text) - tail:]


def render_table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    """A plain-text table with aligned columns."""
    cells = [[str(h) for h in headers]] + [[_cell(v) for v in row] for row in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]
    line = lambda r: "  " + " │ ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip()  # noqa: E731
    sep = "  " + "─┼─".join("─" * w for w in widths)
    return "\n".join([line(cells[0]), sep] + [line(r) for r in cells[1:]])


def format_diff(a: Side, b: Side, *, names: Tuple[str, str] = ("A", "B")) -> str:
    """The readable report of two sides: headers, config table, flag table."""
    na, nb = names
    keys, derived = split_derived(config_changes(a.config, b.config), a.unresolved, b.unresolved,
                                  a.assigned | b.assigned)
    flags = flag_changes(a.entrypoint, b.entrypoint)
    out = [f"{na}: {a.label}  ({a.source})", f"{nb}: {b.label}  ({b.source})", ""]
    if keys:
        out += [f"config keys that differ ({len(keys)}):", render_table(("key", na, nb), keys), ""]
    elif not derived:
        out += ["config: identical", ""]
    else:
        out += ["config keys that differ (0): only derived keys moved", ""]
    if derived:
        # What follows from the keys above: the same ${...} on both sides (ports, wandb.group, slurm.job_name).
        out += [f"derived keys that follow from them ({len(derived)}; the same interpolation on both sides, "
                "or set per job by the sweep):",
                render_table(("key", na, nb), derived), ""]
    if flags:
        out += [f"trainer flags that differ ({len(flags)}):", render_table(("flag", na, nb), flags)]
    else:
        out += ["trainer flags: identical"]
    env = config_changes(a.env, b.env)
    if env:
        out += ["", f"job environment that differs ({len(env)}):", render_table(("variable", na, nb), env)]
    return "\n".join(out)


# ---------------------------------------------------------------- sides

class Refused(Exception):
    """An override set that validation refuses (the report, secrets masked, is the message)."""


def side_from_overrides(text: str, *, environ: Mapping[str, str] = os.environ) -> Side:
    """Compose an override set as train.py would, validate it as a launch does, and plan it."""
    from clawgym.config.compose import compose, to_plain
    from clawgym.plan.build import build_plan_from_dict
    from clawgym.validate import ConfigError, violations

    overrides = shlex.split(text)
    cfg = compose(overrides)
    # Validated like a launch: a config the launch refuses (a secret in extra_env or extra_args among
    # others) is refused here with the same report, never planned nor printed.
    errors = violations(cfg, environ=environ)
    if errors:
        raise Refused(ConfigError(errors, context=f"override set {text!r}" if len(text) < 80 else "").report())
    c = to_plain(cfg, resolve=True)
    plan = build_plan_from_dict(c, environ=environ, timestamp="diff")
    return Side(label=text or "(defaults)", source="composed from overrides", config=c, entrypoint=plan.entrypoint,
                env=dict(plan.runtime_env.get("env_vars") or {}), unresolved=to_plain(cfg, resolve=False))


def side_from_path(path: str) -> Side:
    from clawgym.snapshot.read import find_snapshot

    snap, _ = find_snapshot(path)
    return Side(label=path, source=f"snapshot {snap.path}", config=snap.config,
                entrypoint=list(snap.plan.get("entrypoint") or []),
                env=dict((snap.plan.get("runtime_env") or {}).get("env_vars") or {}),
                unresolved=snap.config_unresolved or None, assigned=sweep_assigned(snap.overrides, snap.meta))


def resolve_side(arg: str) -> Side:
    """A path that exists is a run; anything else is an override set."""
    if arg and Path(arg).expanduser().exists():
        return side_from_path(arg)
    if arg and "=" not in arg and ("/" in arg or arg.startswith(".")):
        from clawgym.snapshot.layout import SnapshotError

        raise SnapshotError(f"clawgym: {arg} does not exist (and is not an override set such as 'key=value')")
    return side_from_overrides(arg)


def redacted(side: Side, values: Sequence[str]) -> Side:
    """``side`` as it may be printed: its config through :func:`clawgym.common.secrets.redact_config`, its
    argv and job environment with secret flags' values, secret-named variables and ``values`` masked."""
    from clawgym.common.secrets import redact, redact_argv, redact_config, redact_env

    return Side(label=redact(side.label, values), source=redact(side.source, values),
                config=redact_config(side.config), entrypoint=redact_argv(side.entrypoint, values),
                env=redact_env(side.env, values), unresolved=side.unresolved, assigned=side.assigned)


def run(args: argparse.Namespace) -> int:
    from hydra.errors import HydraException
    from omegaconf.errors import OmegaConfBaseException

    from clawgym.common.secrets import MIN_SECRET_LEN, config_secret_values, redact
    from clawgym.snapshot.layout import SnapshotError

    try:
        a, b = resolve_side(args.a), resolve_side(args.b)
    except Refused as exc:
        print(f"clawgym diff: {exc}", file=sys.stderr)
        return REFUSED
    except SnapshotError as exc:
        print(redact(str(exc)), file=sys.stderr)
        return REFUSED
    except (HydraException, OmegaConfBaseException) as exc:
        print(redact(f"clawgym diff: cannot compose the override set: {exc}"), file=sys.stderr)
        return REFUSED
    # Masked as the launch masks its reports: the secrets of both sides and of the environment.
    values = sorted({*config_secret_values(a.config), *config_secret_values(b.config)}, key=len, reverse=True)
    values = [v for v in values if len(v) >= MIN_SECRET_LEN]
    print(redact(format_diff(redacted(a, values), redacted(b, values)), values))
    return 0


def add_parser(subparsers: Any) -> None:
    p = subparsers.add_parser("diff", help="compare two runs, snapshots or override sets",
                              description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("a", help="save dir, snapshot dir, checkpoint dir, or quoted override set")
    p.add_argument("b", help="the same, compared against A")
    p.set_defaults(func=run)
