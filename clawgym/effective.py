"""The value the trainer will use for a curated key.

A curated key set to ``null`` emits no flag (the trainer keeps its own default). Rules and
estimates that reason about such a key (validation, the memory plan) must use the value the
trainer will actually run with: the key's value when set, else the default of the flag the
key owns, read from the flavour's flag registry (generated from the trainer's own parser).
"""

from __future__ import annotations

from typing import Any, Mapping, Optional


def _flavour(c: Mapping[str, Any]) -> str:
    try:
        return str(c["trainer"]["flavour"])
    except (KeyError, TypeError):
        return "clawgym"


def owning_flag(key: str) -> Optional[str]:
    """The trainer flag a curated key emits as its value (``value`` rows only), or None."""
    from clawgym.flagmap import ROWS

    for row in ROWS:
        if row.key == key and row.kind == "value" and row.compute is None:
            return row.flag
    return None


def trainer_default(key: str, flavour: str = "clawgym") -> Any:
    """The trainer's own default for the flag ``key`` owns (None when it has none or owns none)."""
    from clawgym.registry import RegistryError, load_registry

    flag = owning_flag(key)
    if flag is None:
        return None
    try:
        found = load_registry(flavour).by_option(flag)
    except RegistryError:
        return None
    if found is None:
        return None
    default = found.cli_default if found.cli_default is not None else found.default
    if isinstance(default, str) and default.startswith("<non-json"):
        return None
    return default


def effective(c: Mapping[str, Any], key: str) -> Any:
    """``key``'s value in the resolved config ``c``, or the trainer's default when it is null."""
    from clawgym.flagmap import get_key

    value = get_key(c, key)
    if value is not None:
        return value
    return trainer_default(key, _flavour(c))
