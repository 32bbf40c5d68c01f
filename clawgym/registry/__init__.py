"""The trainer's flags as data: one registry per trainer flavour.

Each flavour's registry (``clawgym/registry/data/<flavour>.json``) was generated offline by
``tools/gen_flag_registry.py`` from the trainer's own argparse parser (Megatron + slime +
``--sglang-*`` + ``--router-*``); the layout is described in that tool and in the README.
Composing, validating and planning read it here and never import torch, slime, Megatron or
SGLang. Loading is lazy (nothing is read until :func:`load_registry` is called) and cached
per process; it is pure stdlib so ``import clawgym`` stays light.

    from clawgym.registry import load_registry
    reg = load_registry("clawgym")
    reg.by_option("--lr-warmup-iters").type     # "int"
    reg.closest("lr_warmup_iter")               # ["lr_warmup_iters", ...]
"""

from __future__ import annotations

import difflib
import functools
import json
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

#: Trainer flavours, default first: the ClawGym fork, then upstream THUDM/slime.
FLAVOURS: Tuple[str, ...] = ("clawgym", "slime")

#: What each flavour is, in one line (help texts and errors).
FLAVOUR_TITLES: Dict[str, str] = {
    "clawgym": "the ClawGym fork (ClawGym-Agents RL/slime)",
    "slime": "upstream slime (THUDM/slime)",
}

DATA_DIR = Path(__file__).resolve().parent / "data"


class RegistryError(Exception):
    """A registry is missing or malformed; ``str()`` names the file and the fix."""


@dataclass(frozen=True)
class Flag:
    """One argparse action of the trainer's parser (fields as in the registry file)."""

    # Every option string of the action, e.g. ["--lr-warmup-iters"].
    option_strings: Tuple[str, ...]
    # Attribute the parsed value lands in (the key of ``args.<dest>``).
    dest: str
    # "int", "float", "str", None (argparse's default: str), or the name of a custom callable.
    type: Optional[str]
    # None, "?", "*", "+" or a count.
    nargs: Any
    # Allowed values, or None.
    choices: Optional[Tuple[Any, ...]]
    # Default value ("<non-json: ...>" when the parser's default is not JSON).
    default: Any
    # argparse ``required``.
    required: bool
    # "store", "store_true", "store_false", "store_const", "append", "count", "BooleanOptionalAction", ...
    action: str
    # store_const / append_const value.
    const: Any
    # Which part of the trainer defines it: megatron, slime, sglang or router.
    source: str
    # Name of the parser (from meta.parsers) that holds it.
    parser: str
    # First line of the help text.
    help: Optional[str]

    @property
    def flag(self) -> str:
        """The primary long option string (the first ``--`` one)."""
        for opt in self.option_strings:
            if opt.startswith("--"):
                return opt
        return self.option_strings[0]

    @classmethod
    def from_json(cls, data: Dict[str, Any]) -> "Flag":
        choices = data.get("choices")
        return cls(
            option_strings=tuple(data["option_strings"]),
            dest=data["dest"],
            type=data.get("type"),
            nargs=data.get("nargs"),
            choices=tuple(choices) if choices is not None else None,
            default=data.get("default"),
            required=bool(data.get("required", False)),
            action=data.get("action") or "store",
            const=data.get("const"),
            source=data.get("source") or "",
            parser=data.get("parser") or "",
            help=data.get("help"),
        )

    def to_json(self) -> Dict[str, Any]:
        out = {f.name: getattr(self, f.name) for f in fields(self)}
        out["option_strings"] = list(self.option_strings)
        out["choices"] = list(self.choices) if self.choices is not None else None
        return out


class Registry:
    """The flags of one trainer flavour, indexed by option string and by dest."""

    def __init__(self, flavour: str, meta: Dict[str, Any], actions: List[Flag], path: Optional[Path] = None):
        self.flavour = flavour
        self.meta = meta
        self.actions = actions
        self.path = path
        self._by_option: Dict[str, Flag] = {}
        self._by_dest: Dict[str, List[Flag]] = {}
        for action in actions:
            for opt in action.option_strings:
                self._by_option[opt] = action
            self._by_dest.setdefault(action.dest, []).append(action)

    def __repr__(self) -> str:
        return f"<Registry {self.flavour}: {len(self.actions)} actions, {len(self._by_option)} option strings>"

    def by_option(self, option: str) -> Optional[Flag]:
        """The action with this option string (exact: no abbreviations), or None."""
        return self._by_option.get(option)

    def by_dest(self, dest: str) -> Optional[Flag]:
        """The action that sets ``dest``; when several do (e.g. ``--x`` and ``--no-x``), the
        one taking a value, else the first."""
        found = self._by_dest.get(dest)
        if not found:
            return None
        for action in found:
            if action.action not in ("store_true", "store_false", "store_const", "help", "version"):
                return action
        return found[0]

    def all_by_dest(self, dest: str) -> List[Flag]:
        """Every action that sets ``dest``, in parser order."""
        return list(self._by_dest.get(dest, ()))

    @property
    def option_strings(self) -> List[str]:
        return list(self._by_option)

    @property
    def dests(self) -> List[str]:
        return list(self._by_dest)

    def closest(self, name: str, n: int = 3) -> List[str]:
        """Closest real names to a misspelled one: option strings for ``--name``, dests otherwise."""
        if name.startswith("-"):
            pool = self._by_option.keys()
        else:
            pool = self._by_dest.keys()
        found = difflib.get_close_matches(name, pool, n=n, cutoff=0.6)
        if not found:
            # Looser match for short or heavily mangled names.
            found = difflib.get_close_matches(name, pool, n=n, cutoff=0.4)
        return found


def data_path(flavour: str) -> Path:
    return DATA_DIR / f"{flavour}.json"


@functools.lru_cache(maxsize=None)
def load_registry(flavour: str = "clawgym") -> Registry:
    """The registry of a trainer flavour (read once per process)."""
    if flavour not in FLAVOURS:
        raise RegistryError(f"unknown trainer flavour {flavour!r}; known: {', '.join(FLAVOURS)}")
    path = data_path(flavour)
    try:
        with open(path, encoding="utf-8") as fh:
            data = json.load(fh)
    except FileNotFoundError:
        raise RegistryError(f"flag registry of trainer={flavour} not found at {path}; "
                            "reinstall clawgym or regenerate it with tools/gen_flag_registry.py") from None
    except ValueError as exc:
        raise RegistryError(f"flag registry {path} is not valid JSON ({exc}); "
                            "regenerate it with tools/gen_flag_registry.py") from None
    try:
        actions = [Flag.from_json(a) for a in data["actions"]]
        meta = dict(data["meta"])
    except (KeyError, TypeError) as exc:
        raise RegistryError(f"flag registry {path} does not have the registry layout ({exc!r}); "
                            "regenerate it with tools/gen_flag_registry.py") from None
    return Registry(flavour, meta, actions, path)


def other_flavours(flavour: str) -> List[str]:
    return [f for f in FLAVOURS if f != flavour]




def by_option(option: str, flavour: str = "clawgym") -> Optional[Flag]:
    """``load_registry(flavour).by_option(option)``."""
    return load_registry(flavour).by_option(option)


def by_dest(dest: str, flavour: str = "clawgym") -> Optional[Flag]:
    """``load_registry(flavour).by_dest(dest)``."""
    return load_registry(flavour).by_dest(dest)


def closest(name: str, flavour: str = "clawgym", n: int = 3) -> List[str]:
    """``load_registry(flavour).closest(name, n)``."""
    return load_registry(flavour).closest(name, n)


__all__ = ["FLAVOURS", "FLAVOUR_TITLES", "Flag", "Registry", "RegistryError", "load_registry", "data_path",
           "by_option", "by_dest", "closest"]
