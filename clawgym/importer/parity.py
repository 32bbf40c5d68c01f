"""Parity by argparse semantics: a script's launch and an experiment's plan, dest by dest.

The trainer's parser is rebuilt from the flavour's flag registry (types, nargs, choices,
store_true/false/const, append, BooleanOptionalAction; the last value wins), both argvs
are parsed with it, and the two namespaces are compared dest by dest: ``--lr 1e-6`` and
``--lr 0.000001`` are equal, a flag repeated with a new value counts once, a flag left
at the trainer's default equals no flag at all. The job environment is compared
variable by variable (PYTHONPATH as a list of resolved paths).
"""

from __future__ import annotations

import argparse
import json
import os
from dataclasses import dataclass
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple

#: Flags that carry secrets: their values never enter an experiment (the plan reads
#: the key from the environment at launch).
SECRET_FLAGS = ("--wandb-key", "--sglang-api-key")
#: Environment variables that carry secrets (read at launch, never written).
SECRET_ENV = ("SGLANG_API_KEY", "WANDB_API_KEY", "WANDB_KEY")
#: Variables of the ``ray start`` environment that belong to the shell, not the script.
SHELL_ENV = ("PATH", "HOME", "LANG", "_", "SHLVL", "PWD", "OLDPWD")


class ParseFailure(Exception):
    """argparse refused an argv (type, choices, nargs)."""


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # type: ignore[override]
        raise ParseFailure(message)


def _str2bool(value: str) -> bool:
    low = str(value).strip().lower()
    if low in ("1", "true", "yes", "y", "on"):
        return True
    if low in ("0", "false", "no", "n", "off"):
        return False
    raise ValueError(f"not a boolean: {value!r}")


#: Registry type names -> converters; any other custom callable keeps the raw string.
CONVERTERS: Dict[Optional[str], Callable[[str], Any]] = {
    None: str, "str": str, "int": int, "float": float, "str2bool": _str2bool, "json.loads": json.loads,
    "loads": json.loads, "bool": _str2bool,
}


def _converter(type_name: Optional[str]) -> Tuple[Callable[[str], Any], bool]:
    """(converter, known): unknown custom types compare as the strings the script wrote."""
    if type_name in CONVERTERS:
        return CONVERTERS[type_name], True
    return str, False


def _default(value: Any) -> Any:
    return value


def build_parser(reg: Any) -> _Parser:
    """An argparse parser with every action of a flag registry (no help, no abbreviations)."""
    parser = _Parser(prog=f"trainer ({reg.flavour})", add_help=False, allow_abbrev=False)
    for f in reg.actions:
        opts = [o for o in f.option_strings]
        kind = f.action
        common: Dict[str, Any] = {"dest": f.dest, "default": f.default}
        try:
            if kind in ("help", "version"):
                continue
            if kind in ("store_true", "store_false"):
                parser.add_argument(*opts, action=kind, **common)
            elif kind in ("store_const", "append_const"):
                parser.add_argument(*opts, action=kind, const=f.const, **common)
            elif kind == "count":
                parser.add_argument(*opts, action="count", **common)
            elif kind == "BooleanOptionalAction":
                plain = [o for o in opts if not o.startswith("--no-")] or opts
                parser.add_argument(*plain, action=argparse.BooleanOptionalAction, **common)
            else:
                conv, known = _converter(f.type)
                kwargs: Dict[str, Any] = dict(common, type=conv)
                if f.nargs is not None:
                    kwargs["nargs"] = f.nargs
                if f.choices is not None and known:
                    kwargs["choices"] = list(f.choices)
                if f.nargs == 0:
                    # A custom action that takes no value: a switch.
                    parser.add_argument(*opts, action="store_const", const=True, **common)
                    continue
                action = kind if kind in ("append", "extend") else "store"
                parser.add_argument(*opts, action=action, **kwargs)
        except (argparse.ArgumentError, ValueError, TypeError):
            # An option string registered twice (parsers of different parts) keeps its first owner.
            continue
    return parser


@dataclass
class Parsed:
    """An argv as the trainer's parser reads it."""

    values: Dict[str, Any]
    # Flags the registry does not know, as written.
    unknown: List[str]
    # argparse's refusal, when the argv does not parse at all.
    error: Optional[str] = None
    # dest -> option string as written (the last one), for messages.
    written: Optional[Dict[str, str]] = None


def strip_secrets(argv: Sequence[str]) -> Tuple[List[str], List[str]]:
    """argv without secret flags (every flag naming a key, token, password or secret:
    :func:`clawgym.common.secrets.secret_option`) and their values; returns (argv, removed flags)."""
    from clawgym.common.secrets import secret_option

    out: List[str] = []
    removed: List[str] = []
    i = 0
    while i < len(argv):
        tok = argv[i]
        name = tok.split("=", 1)[0]
        if name in SECRET_FLAGS or secret_option(name) is not None:
            removed.append(name)
            i += 1 if "=" in tok else 2
            continue
        out.append(tok)
        i += 1
    return out, removed


#: Dests the trainer fills in itself after parsing when they are left unset (None), from
#: those it derives them from: slime's ``slime_validate_args`` and Megatron's ``validate_args``.
#: Both sides are compared after these rewrites, so ``--eps-clip-high 0.2`` equals no flag
#: when ``--eps-clip`` is 0.2. Each entry: dest -> function of the parsed values (None: no rewrite).
TRAINER_REWRITES: Dict[str, Callable[[Mapping[str, Any]], Any]] = {
    # slime: eps_clip_high defaults to eps_clip.
    "eps_clip_high": lambda v: v.get("eps_clip"),
    # slime: the eval hook defaults to the rollout hook.
    "eval_function_path": lambda v: v.get("rollout_function_path"),
    # slime: colocated rollout engines get the actor's GPUs.
    "rollout_num_gpus": lambda v: (v.get("actor_num_gpus_per_node") or 0) * (v.get("actor_num_nodes") or 1)
    if v.get("colocate") else None,
    # Megatron: the expert tensor-parallel size defaults to the tensor-parallel size.
    "expert_tensor_parallel_size": lambda v: v.get("tensor_model_parallel_size"),
}


def effective(values: Mapping[str, Any]) -> Dict[str, Any]:
    """Parsed values after the trainer's own rewrites of unset dests (:data:`TRAINER_REWRITES`)."""
    out = dict(values)
    for dest, rule in TRAINER_REWRITES.items():
        if dest in out and out[dest] is None:
            out[dest] = rule(values)
    return out


def parse_argv(parser: _Parser, reg: Any, argv: Sequence[str]) -> Parsed:
    written: Dict[str, str] = {}
    for tok in argv:
        if tok.startswith("--"):
            f = reg.by_option(tok.split("=", 1)[0])
            if f is not None:
                written[f.dest] = tok.split("=", 1)[0]
    try:
        ns, rest = parser.parse_known_args(list(argv))
    except ParseFailure as exc:
        return Parsed({}, [], str(exc), written)
    unknown = [t.split("=", 1)[0] for t in rest if t.startswith("-") and not _is_number(t)]
    return Parsed(effective(vars(ns)), unknown, None, written)


def _is_number(tok: str) -> bool:
    try:
        float(tok)
        return True
    except ValueError:
        return False


def same(a: Any, b: Any) -> bool:
    """Values equal after argparse conversion (numbers numerically)."""
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    if isinstance(a, bool) or isinstance(b, bool):
        return a is b or a == b and type(a) is type(b)
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        return float(a) == float(b)
    return a == b


@dataclass
class Difference:
    """One way the experiment's launch differs from the script's."""

    # "flag", "env", "trainer script", "working dir", "GPUs", "parse".
    what: str
    # The dest, variable or item.
    name: str
    script: Any
    experiment: Any
    # Why, or what to do.
    note: str = ""

    def cells(self) -> Tuple[str, str, str, str, str]:
        return (self.what, self.name, _show(self.script), _show(self.experiment), self.note)


def _show(value: Any) -> str:
    if value is MISSING_VALUE:
        return "(not set)"
    if isinstance(value, str):
        return repr(value) if value == "" else value
    return json.dumps(value) if isinstance(value, (list, dict, bool)) or value is None else str(value)


class _Missing:
    def __repr__(self) -> str:
        return "(not set)"


MISSING_VALUE: Any = _Missing()


def compare_values(script: Mapping[str, Any], ours: Mapping[str, Any], reg: Any,
                   written: Optional[Mapping[str, str]] = None) -> List[Difference]:
    out = []
    for dest in sorted(set(script) | set(ours)):
        a = script.get(dest, MISSING_VALUE)
        b = ours.get(dest, MISSING_VALUE)
        if not same(a, b):
            f = reg.by_dest(dest)
            flag = (written or {}).get(dest) or (f.flag if f is not None else dest)
            out.append(Difference("flag", f"{flag} ({dest})", a, b))
    return out


def norm_path(path: str) -> str:
    return os.path.normpath(os.path.realpath(path)) if path else path


def norm_pythonpath(value: str) -> List[str]:
    return [norm_path(p) for p in value.split(":") if p]


def same_env_value(var: str, a: str, b: str) -> bool:
    if var == "PYTHONPATH":
        return norm_pythonpath(a) == norm_pythonpath(b)
    return a == b


def compare_env(script: Mapping[str, str], ours: Mapping[str, str]) -> List[Difference]:
    out = []
    for var in sorted(set(script) | set(ours)):
        a = script.get(var, MISSING_VALUE)
        b = ours.get(var, MISSING_VALUE)
        if a is MISSING_VALUE or b is MISSING_VALUE or not same_env_value(var, a, b):
            out.append(Difference("env", var, a, b))
    return out


def render_table(rows: Sequence[Difference]) -> str:
    """The difference table (plain text, one row per difference)."""
    head = ("what", "name", "script", "experiment", "note")
    cells = [head] + [r.cells() for r in rows]
    cells = [tuple(c if len(c) <= 60 else c[:57] + "..." for c in row) for row in cells]
    widths = [max(len(row[i]) for row in cells) for i in range(len(head))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(row, widths)).rstrip() for row in cells]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)
