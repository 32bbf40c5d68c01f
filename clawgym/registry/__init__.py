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
    # Choices and default as typed on the command line, when the parser's are objects the JSON
    # can only hold as reprs (enum members: ``--attention-backend flash``); else None.
    cli_choices: Optional[Tuple[Any, ...]] = None
    cli_default: Any = None

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
            cli_choices=tuple(data["cli_choices"]) if data.get("cli_choices") is not None else None,
            cli_default=data.get("cli_default"),
        )

    def to_json(self) -> Dict[str, Any]:
        out = {f.name: getattr(self, f.name) for f in fields(self)}
        out["option_strings"] = list(self.option_strings)
        out["choices"] = list(self.choices) if self.choices is not None else None
        out["cli_choices"] = list(self.cli_choices) if self.cli_choices is not None else None
        return out


class Registry:
    """The flags of one trainer flavour, indexed by option string and by dest.

    Built from the parsed JSON without creating a :class:`Flag` per action: a Flag is made
    when first asked for (validation touches a handful; ``clawgym flags`` all of them).
    """

    def __init__(self, flavour: str, meta: Dict[str, Any], actions: List[Any], path: Optional[Path] = None):
        self.flavour = flavour
        self.meta = meta
        self.path = path
        self._raw: List[Any] = list(actions)
        self._flags: List[Optional[Flag]] = [a if isinstance(a, Flag) else None for a in self._raw]
        self._by_option: Dict[str, int] = {}
        self._by_dest: Dict[str, List[int]] = {}
        for i, action in enumerate(self._raw):
            opts = action.option_strings if isinstance(action, Flag) else action["option_strings"]
            dest = action.dest if isinstance(action, Flag) else action["dest"]
            for opt in opts:
                self._by_option[opt] = i
            self._by_dest.setdefault(dest, []).append(i)

    def _flag(self, i: int) -> Flag:
        flag = self._flags[i]
        if flag is None:
            flag = self._flags[i] = Flag.from_json(self._raw[i])
        return flag

    def __repr__(self) -> str:
        return f"<Registry {self.flavour}: {len(self._raw)} actions, {len(self._by_option)} option strings>"

    def __len__(self) -> int:
        return len(self._raw)

    @property
    def actions(self) -> List[Flag]:
        """Every action, in parser order."""
        return [self._flag(i) for i in range(len(self._raw))]

    def by_option(self, option: str) -> Optional[Flag]:
        """The action with this option string (exact: no abbreviations), or None."""
        i = self._by_option.get(option)
        return None if i is None else self._flag(i)

    def dest_of(self, option: str) -> Optional[str]:
        """``by_option(option).dest`` without making the Flag (tables of owned flags ask it of
        every row, and need nothing else of the action)."""
        i = self._by_option.get(option)
        if i is None:
            return None
        action = self._raw[i]
        return action.dest if isinstance(action, Flag) else action["dest"]

    def by_dest(self, dest: str) -> Optional[Flag]:
        """The action that sets ``dest``; when several do (e.g. ``--x`` and ``--no-x``), the
        one taking a value, else the first."""
        found = self.all_by_dest(dest)
        if not found:
            return None
        for action in found:
            if action.action not in ("store_true", "store_false", "store_const", "help", "version"):
                return action
        return found[0]

    def all_by_dest(self, dest: str) -> List[Flag]:
        """Every action that sets ``dest``, in parser order."""
        return [self._flag(i) for i in self._by_dest.get(dest, ())]

    @property
    def option_strings(self) -> List[str]:
        return list(self._by_option)

    @property
    def dests(self) -> List[str]:
        return list(self._by_dest)

    def closest(self, name: str, n: int = 3) -> List[str]:
        """Closest real names to a misspelled one: option strings for ``--name``, dests otherwise."""
        import difflib

        if name.startswith("-"):
            pool: Any = self._by_option.keys()
        else:
            # Dests, and option strings in underscore form (``sglang_ep_size`` for the alias
            # ``--sglang-ep-size`` of dest ``sglang_expert_parallel_size``).
            pool = set(self._by_dest) | {o[2:].replace("-", "_") for o in self._by_option if o.startswith("--")}
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
        return Registry(flavour, dict(data["meta"]), data["actions"], path)
    except (KeyError, TypeError) as exc:
        raise RegistryError(f"flag registry {path} does not have the registry layout ({exc!r}); "
                            "regenerate it with tools/gen_flag_registry.py") from None


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
