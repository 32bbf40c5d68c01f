"""Every key of the typed schema, with its type, default and help (the comments above each field
in ``clawgym/config/schema.py``), and the closest key to a misspelled one.

Low on the config floor (imports only ``clawgym.config.schema``): ``clawgym explain``, the unknown-key rule
of validation and the composition-error report of ``train.py`` all read this one table.
Keys typed ``Dict[...]`` are open maps (``args``, ``extra_env``, ``sglang.models.*.overrides``): what
is below them is not checked against the schema.
"""

from __future__ import annotations

import ast
import re
import dataclasses
import functools
import inspect
import typing
from dataclasses import dataclass
from typing import Any, Dict, Iterable, List, Mapping, Optional, Tuple

from clawgym.config import schema as _schema


@dataclass(frozen=True)
class Key:
    """One key of the schema."""

    path: str
    type: str
    default: Any  # the schema's default as written (``???`` for MISSING, an interpolation as its text)
    help: str
    open: bool = False  # an open map: keys below it are free
    node: bool = False  # a node of typed keys (a group, ``services.teacher``), not a value


def _type_text(hint: Any) -> str:
    if isinstance(hint, type):
        return hint.__name__
    text = str(hint).replace("typing.", "")
    return text.replace("NoneType", "None").replace("clawgym.config.schema.", "")


def _field_comments(cls: type) -> Dict[str, str]:
    """field name -> the comment block right above it (a field with none shares the block of the
    field above it when no blank line parts them: ``mscale`` / ``mscale_all_dim``)."""
    try:
        lines, start = inspect.getsourcelines(cls)
    except (OSError, TypeError):
        return {}
    tree = ast.parse(_dedent(lines))
    body = tree.body[0].body if tree.body and isinstance(tree.body[0], ast.ClassDef) else []
    out: Dict[str, str] = {}
    previous: Optional[Tuple[int, str]] = None  # (line number, comment) of the field above
    for node in body:
        if not isinstance(node, ast.AnnAssign) or not isinstance(node.target, ast.Name):
            continue
        i = node.lineno - 2  # the line above, 0-based
        block: List[str] = []
        while i >= 0 and lines[i].strip().startswith("#"):
            block.insert(0, lines[i].strip().lstrip("#").strip())
            i -= 1
        text = " ".join(b for b in block if not b.startswith("---")).strip()
        if not text and previous is not None and previous[0] == node.lineno - 1:
            text = previous[1]
        # A comment at the end of the field's own line says it too.
        own = lines[node.lineno - 1].split("#", 1)
        if not text and len(own) == 2 and "type: ignore" not in own[1]:
            text = own[1].strip()
        out[node.target.id] = text
        previous = (getattr(node, "end_lineno", node.lineno) or node.lineno, text)
    return out


def _dedent(lines: List[str]) -> str:
    import textwrap

    return textwrap.dedent("".join(lines))


def _default(f: dataclasses.Field) -> Any:
    if f.default is not dataclasses.MISSING:
        return f.default
    if f.default_factory is not dataclasses.MISSING:  # type: ignore[misc]
        value = f.default_factory()  # type: ignore[misc]
        return value if not dataclasses.is_dataclass(value) else None
    return "???"


def _walk(cls: type, prefix: str, out: Dict[str, Key], with_help: bool = True) -> None:
    hints = typing.get_type_hints(cls, vars(_schema))
    # The help is read from the schema's source (inspect + ast, ~5 ms a class): only what needs it pays.
    comments = _field_comments(cls) if with_help else {}
    for f in dataclasses.fields(cls):
        path = f"{prefix}{f.name}"
        hint = hints.get(f.name, Any)
        origin = typing.get_origin(hint)
        args = [a for a in typing.get_args(hint) if a is not type(None)]
        inner = args[0] if origin is typing.Union and len(args) == 1 else hint
        if dataclasses.is_dataclass(inner):
            out[path] = Key(path, _type_text(inner), None, comments.get(f.name, ""), False, True)
            _walk(inner, f"{path}.", out, with_help)
            continue
        default = _default(f)
        if default == "???" or (isinstance(default, str) and default == _schema.MISSING):
            default = "???"
        is_open = typing.get_origin(inner) in (dict, Dict) or inner is dict
        out[path] = Key(path, _type_text(hint), default, comments.get(f.name, ""), is_open)


@functools.lru_cache(maxsize=1)
def keys() -> Dict[str, Key]:
    """Every key of the root schema by dotted path (group nodes included, in schema order)."""
    out: Dict[str, Key] = {}
    _walk(_schema.ClawGymConfig, "", out)
    return out


@functools.lru_cache(maxsize=1)
def _shape() -> Dict[str, Key]:
    """The same table without the help text: what the unknown-key rule and the typo hint read on every
    dry run and launch (reading the help costs ~100 ms of source parsing, a third of a dry run's own work)."""
    out: Dict[str, Key] = {}
    _walk(_schema.ClawGymConfig, "", out, with_help=False)
    return out


def open_maps() -> List[str]:
    return [k for k, v in _shape().items() if v.open]


def is_known(path: str) -> bool:
    """A key of the schema, or one below an open map (``args.lr_warmup_iters``, ``extra_env.FOO``)."""
    if path in _shape():
        return True
    return any(path.startswith(f"{m}.") for m in open_maps())


def _under_list(path: str) -> bool:
    """``sglang.models.0.tp``: an element of a list of typed records; the list's own type checks it."""
    return any(part.isdigit() for part in path.split("."))


def closest(path: str, n: int = 1) -> List[str]:
    """The schema keys closest to ``path`` (best first): the whole dotted path compared, then the
    last part within the same group, then the last part anywhere (``+lr`` -> ``optimizer.lr``)."""
    import difflib

    leaves = [k for k, v in _shape().items() if not v.node]
    found = difflib.get_close_matches(path, leaves, n=n, cutoff=0.75)
    if found:
        return found
    head, _, last = path.rpartition(".")
    same_group = [k for k in leaves if k.rpartition(".")[0] == head]
    found = [f"{head}.{m}" if head else m
             for m in difflib.get_close_matches(last, [k.rpartition(".")[2] for k in same_group], n=n, cutoff=0.6)]
    if found:
        return found
    by_last: Dict[str, List[str]] = {}
    for k in leaves:
        by_last.setdefault(k.rpartition(".")[2], []).append(k)
    out: List[str] = []
    for m in difflib.get_close_matches(last, list(by_last), n=n, cutoff=0.6):
        out += by_last[m]
    return out[:n] if out else difflib.get_close_matches(path, leaves, n=n, cutoff=0.5)


def did_you_mean(path: str) -> str:
    """`` (did you mean X?)``, or ``""`` when nothing is close."""
    found = closest(path)
    return f"; did you mean {found[0]}?" if found else ""


def unknown_keys(data: Mapping[str, Any], prefix: str = "") -> Iterable[str]:
    """The dotted keys of a composed config (plain dict) that the schema does not define
    (a ``+key=`` override or an experiment file adding one); open maps and list elements are free."""
    for k, v in data.items():
        path = f"{prefix}{k}"
        if path == "hydra" and not prefix:
            continue
        if not is_known(path) and not _under_list(path):
            yield path
            continue
        info = _shape().get(path)
        if isinstance(v, Mapping) and info is not None and not info.open:
            yield from unknown_keys(v, f"{path}.")


_NOT_IN_STRUCT = re.compile(r"Key '([^']+)' (?:is )?not in")
_FULL_KEY = re.compile(r"full_key:\s*(\S+)")
_COULD_NOT = re.compile(r"Could not (?:override|append to|delete from config\.) '?([^'.\s]+(?:\.[^'\s]+)*)'?")


def composition_report(exc: BaseException) -> str:
    """Hydra's composition error, worded for clawgym: a key the schema does not define is named with
    the closest one (Hydra's own hint, "To append to your config use +KEY=VALUE", would make the typo
    a new key next to the real one, so it is left out)."""
    text = str(exc)
    cause = exc.__cause__
    if cause is not None and str(cause) and str(cause) not in text:
        text += "\n" + str(cause)
    full = _FULL_KEY.search(text)
    could = _COULD_NOT.search(text)
    key = full.group(1) if full else (could.group(1) if could else None)
    if key and _NOT_IN_STRUCT.search(text) and not is_known(key):
        from clawgym.common.secrets import redact

        near = closest(key)
        fix = f"did you mean {near[0]}?" if near else "python train.py --cfg job lists every key"
        return redact(f"clawgym: {key} is not a config key; {fix}\n"
                f"  rule: every key is defined by the typed schema (clawgym/config/schema.py); a misspelled key is refused,"
                f" never added\n"
                f"  fix:  {near[0] + '=' + _value_of(text, key) if near else 'use a key of the schema'}"
                f"  (clawgym explain {near[0] if near else key} says what it is)")
    option = _option_report(text)
    if option:
        return option
    typed = _type_report(text, key)
    if typed:
        return typed
    # Hydra lists the ``base_<group>`` schema entries as options; they are not options a user picks.
    unknown = key is not None and not is_known(key)
    lines = [ln for ln in text.splitlines() if not (unknown and ln.startswith("To append to your config use"))
             and not re.match(r"^\s+base_\w+$", ln)]
    from clawgym.common.secrets import redact

    return redact("\n".join(lines).rstrip() + "\n(a composition error: nothing was started or written)")


# Hydra's missing group option (hydra/_internal/config_loader_impl.py, _missing_config_error):
# "Could not find 'GROUP/OPTION'" then "Available options in 'GROUP':" and one option a line.
_NO_OPTION = re.compile(r"Could not find '([\w./-]+)/([^'/]+)'")
_OPTIONS = re.compile(r"Available options in '([\w./-]+)':\n((?:\t.*\n?)+)")
# OmegaConf's conversion errors of a typed node (omegaconf/nodes.py: FloatNode, IntegerNode,
# BooleanNode validate_and_convert): the value, then the type it could not become.
_NOT_CONVERTED = re.compile(r"Value '(.*)' of type '(\w+)' could not be converted to (\w+)")
_NOT_BOOL = re.compile(r"Value '(.*)' is not a valid bool")
_EXAMPLE = {"Float": "a number such as 1e-06", "Integer": "a whole number such as 8", "Boolean": "true or false"}


def _option_report(text: str) -> Optional[str]:
    """A group option that is no file of the group, named with the closest one."""
    missing = _NO_OPTION.search(text)
    if not missing:
        return None
    group, option = missing.group(1), missing.group(2)
    listed = _OPTIONS.search(text)
    options = [ln.strip() for ln in (listed.group(2).splitlines() if listed else []) if ln.strip()
               and not re.match(r"^base_\w+$", ln.strip())]
    # Option names use '_' where users type '-' or '.' (qwen3-4b, split_44): compare them alike.
    norm = {re.sub(r"[^a-z0-9]", "", o.lower()): o for o in options}
    key = re.sub(r"[^a-z0-9]", "", option.lower())
    import difflib

    near = ([norm[key]] if key in norm else []) or difflib.get_close_matches(option, options, n=1, cutoff=0.6) \
        or [norm[k] for k in difflib.get_close_matches(key, list(norm), n=1, cutoff=0.6)]
    from clawgym.common.secrets import redact

    shown = ", ".join(options)
    return redact(f"clawgym: {group}={option} is not an option of {group}"
                  + (f"; did you mean {near[0]}?" if near else "") + "\n"
                  f"  rule: a config group takes one of its files under conf/{group}/ (options: {shown})\n"
                  f"  fix:  {group}={near[0] if near else (options[0] if options else 'OPTION')}"
                  f"  (python train.py --info defaults-tree shows what each group picked)\n"
                  "(a composition error: nothing was started or written)")


def _type_report(text: str, key: Optional[str]) -> Optional[str]:
    """A value of the wrong type for a typed key: the key, the value, the type and a value that works."""
    converted, not_bool = _NOT_CONVERTED.search(text), _NOT_BOOL.search(text)
    if not key or not (converted or not_bool):
        return None
    value = converted.group(1) if converted else not_bool.group(1)
    want = converted.group(3) if converted else "Boolean"
    known = _shape().get(key)
    typ = known.type if known else want
    default = known.default if known else None
    example = default if default is not None and not (isinstance(default, str) and ("${" in default or default == "???")) \
        else None
    fix = f"{key}={str(example).lower() if isinstance(example, bool) else example}" if example is not None \
        else f"{key}=<{_EXAMPLE.get(want, want)}>"
    from clawgym.common.secrets import redact

    return redact(f"clawgym: {key}={value!r} is not {_EXAMPLE.get(want, 'a ' + want).split(' such as')[0]}"
                  f" ({key} is typed {typ})\n"
                  f"  rule: every key is typed by the schema (clawgym/config/schema.py); a value is converted to its "
                  f"type or refused\n"
                  f"  fix:  {fix}  (its default; clawgym explain {key} says what it is)\n"
                  "(a composition error: nothing was started or written)")


def _value_of(text: str, key: str) -> str:
    found = re.search(r"use \+" + re.escape(key) + r"=(\S+)", text)
    return found.group(1) if found else "VALUE"
