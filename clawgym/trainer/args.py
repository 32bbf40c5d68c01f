"""``args.<dest>`` and ``extra_args`` against a flag registry: check values, render argv.

Pure functions over :class:`clawgym.registry.Registry`; validation reports what
:func:`check_arg` and :func:`check_extra_args` find, and the plan renders with
:func:`render_arg`. A dest is set to a value: ``args.lr_warmup_iters=10`` renders
``--lr-warmup-iters 10``; ``args.load_optim=false`` renders ``--no-load-optim`` (a store_false
action of dest ``load_optim``); lists feed ``nargs`` flags; ``null`` leaves the trainer's default.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass
from typing import Any, List, Optional, Sequence, Tuple

from clawgym.registry import Flag, Registry

#: Actions whose flag takes no value.
BARE_ACTIONS = ("store_true", "store_false", "store_const", "append_const", "count", "BooleanOptionalAction")
#: Actions that are not settings.
NOT_SETTINGS = ("help", "version")
#: Custom converters whose accepted strings we know.
TRUE_STRINGS = ("true", "1", "yes", "y", "t", "on")
FALSE_STRINGS = ("false", "0", "no", "n", "f", "off")


@dataclass
class Problem:
    """Why a value does not fit a flag: a rule code, the rule and the fix."""

    code: str
    rule: str
    fix: str


def _scalar(value: Any) -> bool:
    return value is None or isinstance(value, (str, int, float, bool))


def cli_text(value: Any) -> str:
    """A value as one argv token (what the trainer's argparse receives)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (dict, list)):
        return json.dumps(value, separators=(",", ":"))
    return str(value)


def convert(flag: Flag, text: str) -> Tuple[bool, Any]:
    """Apply the flag's type to one argv token like argparse would: (ok, converted value)."""
    kind = flag.type
    try:
        if kind == "int":
            return True, int(text)
        if kind == "float":
            value = float(text)
            return True, value
        if kind == "str2bool" or (kind or "").endswith("str2bool"):
            low = text.strip().lower()
            if low in TRUE_STRINGS:
                return True, True
            if low in FALSE_STRINGS:
                return True, False
            return False, None
        if kind in ("json.loads", "loads"):
            return True, json.loads(text)
    except ValueError:
        return False, None
    # str, no type, or a custom callable we cannot run here: argparse gets the text.
    return True, text


def _type_name(flag: Flag) -> str:
    return flag.type or "str"


def _a(flag: Flag) -> str:
    """``a str`` / ``an int``: the flag's type with its article."""
    name = _type_name(flag)
    return f"an {name}" if name[:1] in "aeiou" else f"a {name}"


_NON_JSON_ENUM = re.compile(r"^<non-json: <\w+\.(\w+): .*>>$")


def choice_texts(flag: Flag) -> Optional[List[str]]:
    """The choices as a user types them; enum members the registry could only store as a repr
    (``<non-json: <AttnBackend.flash: 1>>``) by their names."""
    if flag.choices is None:
        return None
    if flag.cli_choices is not None:
        return [str(c) for c in flag.cli_choices]
    out = []
    for choice in flag.choices:
        m = _NON_JSON_ENUM.match(choice) if isinstance(choice, str) else None
        out.append(m.group(1) if m else str(choice))
    return out


def _in_choices(flag: Flag, converted: Any, text: str) -> bool:
    if flag.choices is None:
        return True
    if text in (choice_texts(flag) or []):
        return True
    for choice in flag.choices:
        if choice == converted or (isinstance(choice, str) and choice == text):
            return True
        if isinstance(choice, (int, float)) and not isinstance(choice, bool) and isinstance(converted, (int, float)) \
                and not isinstance(converted, bool):
            try:
                if math.isclose(choice, converted):
                    return True
            except OverflowError:
                # An int too large for a float (400 digits) equals no choice.
                continue
    return False


def check_token(flag: Flag, text: str) -> Optional[Problem]:
    """One argv token against the flag's type and choices."""
    ok, converted = convert(flag, text)
    if not ok:
        return Problem("type", f"{flag.flag} takes {_type_name(flag)} values; {text!r} does not parse as one",
                       f"give {flag.flag} {_a(flag)}")
    if not _in_choices(flag, converted, text):
        choices = ", ".join(choice_texts(flag) or ())
        return Problem("choices", f"{flag.flag} accepts only: {choices}", f"use one of {choices}")
    return None


def _check_scalar(flag: Flag, key: str, value: Any) -> Optional[Problem]:
    if isinstance(value, bool) and flag.type in (None, "str", "int", "float") and not (
            flag.choices and cli_text(value) in (choice_texts(flag) or [])):
        return Problem("type", f"{flag.flag} takes {_type_name(flag)} values, not a boolean",
                       f"set {key} to {_a(flag)}" + (" (quote it for a string: 'true')"
                                                                if _type_name(flag) == "str" else ""))
    if isinstance(value, (dict, list)) and flag.type not in ("json.loads", "loads"):
        return Problem("type", f"{flag.flag} takes one {_type_name(flag)} value", f"set {key} to a single value")
    problem = check_token(flag, cli_text(value))
    if problem and problem.code == "type":
        problem.fix = f"set {key} to {_a(flag)}"
    elif problem:
        problem.fix = f"set {key} to one of {', '.join(choice_texts(flag) or ())}"
    return problem


def _nargs_count_problem(flag: Flag, key: str, values: Sequence[Any]) -> Optional[Problem]:
    n = flag.nargs
    if isinstance(n, int) and len(values) != n:
        return Problem("nargs", f"{flag.flag} takes exactly {n} values (nargs={n}); got {len(values)}",
                       f"set {key} to a list of {n}: {key}=[...]")
    if n == "+" and not values:
        return Problem("nargs", f"{flag.flag} takes one or more values (nargs='+'); got an empty list",
                       f"set {key} to a non-empty list, or null to leave the trainer's default")
    return None


def takes_list(flag: Flag) -> bool:
    """Flags whose value is a list (nargs '+', '*' or a count above one)."""
    return flag.nargs in ("+", "*") or (isinstance(flag.nargs, int) and not isinstance(flag.nargs, bool)
                                        and flag.nargs > 1)


def lookup(reg: Registry, name: str) -> Optional[Flag]:
    """The action an ``args`` key names: its dest (``sglang_expert_parallel_size``) or, as users
    know flags by their option strings, the underscore form of one of them (``sglang_ep_size``
    for ``--sglang-ep-size``)."""
    flag = reg.by_dest(name)
    if flag is not None:
        return flag
    return reg.by_option("--" + name.replace("_", "-"))


def _option_for(flag: Flag, name: str) -> str:
    """The option string to emit: the one the user's key names, else the primary one."""
    named = "--" + name.replace("_", "-")
    return named if named in flag.option_strings else flag.flag


SWITCH_ACTIONS = ("store_true", "store_false", "BooleanOptionalAction")


def negated(reg: Registry, name: str) -> bool:
    """True when ``args.<name>`` names a switch by its negative option, not by its dest:
    ``args.no_rope_fusion`` (``--no-rope-fusion``, dest ``apply_rope_fusion``) or
    ``args.no_offload_train`` (``--no-offload-train`` of ``--offload-train``).

    Such a key reads as the option it spells: ``true`` gives that option, ``false`` does not
    (``args.no_load_optim=true`` emits ``--no-load-optim``, as ``no_load_optim`` is its dest too).
    The value is then the opposite of the dest's.
    """
    flag = lookup(reg, name)
    return (flag is not None and name != flag.dest and name.startswith("no_")
            and flag.action in SWITCH_ACTIONS and ("--" + name.replace("_", "-")) in flag.option_strings)


def dest_value(reg: Registry, name: str, value: Any) -> Any:
    """The value ``args.<name>=value`` gives the flag's dest (see :func:`negated`)."""
    if isinstance(value, bool) and negated(reg, name):
        return not value
    return value


def pick_action(reg: Registry, dest: str, value: Any) -> Optional[Flag]:
    """The action that sets ``dest`` to ``value``: for booleans among several actions of one
    dest (``--x`` store_true / ``--no-x`` store_false), the one producing that value."""
    actions = reg.all_by_dest(dest)
    if not actions:
        return None
    if isinstance(value, bool) and len(actions) > 1:
        for a in actions:
            if (a.action == "store_true" and value) or (a.action == "store_false" and not value) or \
                    a.action == "BooleanOptionalAction":
                return a
        for a in actions:
            if a.action in ("store_true", "store_false") and a.default == value:
                return a
    return reg.by_dest(dest)


def check_arg(reg: Registry, name: str, value: Any) -> Optional[Problem]:
    """Whether ``args.<name>=value`` is a valid setting of the registry's trainer (the name is known)."""
    key = f"args.{name}"
    named = lookup(reg, name)
    assert named is not None, name
    dest = named.dest
    value = dest_value(reg, name, value)
    flag = pick_action(reg, dest, value)
    assert flag is not None, dest
    if value is None:
        return None
    action = flag.action
    if action in NOT_SETTINGS:
        return Problem("not-settable", f"{flag.flag} is argparse's {action}, not a setting", f"remove {key}")
    if action == "DeprecatedAction":
        return Problem("not-settable", f"{flag.flag} is deprecated: the trainer's parser refuses it "
                       f"({(flag.help or '').strip()[:100]})", f"remove {key}")
    if flag.type == "bool" and action == "store":
        # argparse's bool type makes any non-empty text True: only true can be passed.
        if value is not True:
            return Problem("type", f"{flag.flag} uses argparse's bool type: any text is True, so only true "
                           "can be passed", f"set {key}=true, or remove it to keep the default")
        return None
    if action in ("store_true", "store_false", "BooleanOptionalAction") or (
            action not in ("store", "append", "extend", "count", "store_const", "append_const") and flag.nargs == 0):
        if not isinstance(value, bool):
            return Problem("switch", f"{flag.flag} is a switch ({action}): {key} takes true or false",
                           f"set {key}=true or {key}=false")
        if action == "store_true" and not value and flag.default not in (False, None):
            return Problem("switch", f"{flag.flag} can only turn {dest} on", f"remove {key}")
        if action == "store_false" and value and flag.default not in (True, None):
            return Problem("switch", f"{flag.flag} can only turn {dest} off", f"remove {key}")
        return None
    if action in ("store_const", "append_const"):
        if value == flag.const or value == flag.default or (isinstance(value, bool) and value):
            return None
        return Problem("choices", f"{flag.flag} sets {dest} to {flag.const!r} (store_const)",
                       f"set {key}={flag.const!r}, or remove it")
    if action == "count":
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            return Problem("type", f"{flag.flag} counts repetitions: {key} takes an integer >= 0",
                           f"set {key} to a count, e.g. {key}=2")
        return None
    if action in ("append", "extend"):
        items = value if isinstance(value, list) else [value]
        for item in items:
            sub = item if isinstance(item, list) and takes_list(flag) else [item]
            for v in sub:
                problem = _check_scalar(flag, key, v)
                if problem:
                    return problem
        return None
    # store and custom actions that take values.
    if takes_list(flag):
        if not isinstance(value, list):
            return Problem("nargs", f"{flag.flag} takes a list (nargs={flag.nargs!r})",
                           f"write {key}=[{cli_text(value)}]")
        problem = _nargs_count_problem(flag, key, value)
        if problem:
            return problem
        for item in value:
            if not _scalar(item) or item is None:
                return Problem("type", f"{flag.flag} takes a flat list of {_type_name(flag)} values",
                               f"set {key} to a list of {_type_name(flag)} values")
            problem = _check_scalar(flag, key, item)
            if problem:
                return problem
        return None
    if isinstance(value, list):
        if flag.nargs == 1 and len(value) == 1:
            value = value[0]
        else:
            return Problem("nargs", f"{flag.flag} takes one value, not a list", f"set {key} to a single value")
    return _check_scalar(flag, key, value)


def render_arg(reg: Registry, name: str, value: Any) -> List[str]:
    """argv tokens setting the dest ``name`` names to ``value`` (empty when nothing needs emitting)."""
    if value is None:
        return []
    named = lookup(reg, name)
    if named is None:
        raise ValueError(f"args.{name}: no such flag in trainer={reg.flavour}")
    value = dest_value(reg, name, value)
    flag = pick_action(reg, named.dest, value)
    assert flag is not None
    action = flag.action
    opt = _option_for(flag, name)
    if action == "BooleanOptionalAction":
        negative = [o for o in flag.option_strings if o.startswith("--no-")]
        positive = [o for o in flag.option_strings if not o.startswith("--no-")]
        if value:
            return [opt if not opt.startswith("--no-") else (positive[0] if positive else opt)]
        return [negative[0] if negative else "--no-" + opt[2:]]
    if action == "store_true" or (action not in ("store", "append", "extend", "count", "store_const", "append_const",
                                                 "store_false") and flag.nargs == 0):
        return [opt] if value else []
    if action == "store_false":
        return [] if value else [opt]
    if action in ("store_const", "append_const"):
        return [opt] if (value == flag.const or value is True) and value != flag.default else []
    if action == "count":
        return [opt] * int(value)
    if action in ("append", "extend"):
        out: List[str] = []
        for item in value if isinstance(value, list) else [value]:
            out += [opt, *([cli_text(v) for v in item] if isinstance(item, list) else [cli_text(item)])]
        return out
    if takes_list(flag) or (isinstance(value, list) and flag.nargs == 1):
        return [opt, *[cli_text(v) for v in value]]
    return [opt, cli_text(value)]


# ---------------------------------------------------------------- extra_args

@dataclass
class ExtraFlag:
    """One flag occurrence in ``extra_args`` with the value tokens that follow it."""

    # The option string as written (before any ``=``).
    option: str
    # Value tokens that belong to it.
    values: List[str]
    # Position of the flag token in extra_args.
    index: int


def looks_like_flag(token: str) -> bool:
    """An option token (``--x`` or ``-x``), not a negative number."""
    if token.startswith("--"):
        return len(token) > 2
    if token.startswith("-") and len(token) > 1:
        try:
            float(token)
            return False
        except ValueError:
            return True
    return False


def split_extra_args(tokens: Sequence[Any]) -> Tuple[List[str], List[ExtraFlag]]:
    """(leading tokens that belong to no flag, flag occurrences with their values)."""
    orphans: List[str] = []
    flags: List[ExtraFlag] = []
    for i, raw in enumerate(tokens):
        token = str(raw)
        if looks_like_flag(token):
            if token.startswith("--") and "=" in token:
                option, value = token.split("=", 1)
                flags.append(ExtraFlag(option, [value], i))
            else:
                flags.append(ExtraFlag(token, [], i))
        elif flags:
            flags[-1].values.append(token)
        else:
            orphans.append(token)
    return orphans, flags


def check_extra_values(flag: Flag, occurrence: ExtraFlag) -> Optional[Problem]:
    """The value tokens following a flag in extra_args, against its action, nargs, type and choices."""
    values = occurrence.values
    action = flag.action
    opt = occurrence.option
    if action in NOT_SETTINGS or action == "DeprecatedAction":
        what = "deprecated: the trainer's parser refuses it" if action == "DeprecatedAction" \
            else f"argparse's {action}, not a setting"
        return Problem("not-settable", f"{opt} is {what}", f"remove {opt} from extra_args")
    bare = action in BARE_ACTIONS or flag.nargs == 0
    if bare:
        if values:
            return Problem("values", f"{opt} is a switch ({action}) and takes no value; got {values}",
                           f"write {opt} alone in extra_args (or use args.{flag.dest}=true/false)")
        return None
    n = flag.nargs
    if n is None or n == 1:
        ok = len(values) == 1
        want = "one value"
    elif n == "?":
        ok = len(values) <= 1
        want = "at most one value"
    elif n == "+":
        ok = len(values) >= 1
        want = "one or more values"
    elif n == "*":
        ok = True
        want = "any number of values"
    else:
        ok = len(values) == n
        want = f"exactly {n} values"
    if not ok:
        return Problem("values", f"{opt} takes {want} (nargs={n!r}); got {len(values)}: {values}",
                       f"give {opt} {want} in extra_args")
    for text in values:
        problem = check_token(flag, text)
        if problem:
            return Problem("values", problem.rule, f"fix the value of {opt} in extra_args ({problem.fix})")
    return None
