"""The value the trainer will use for a curated key.

A curated key set to ``null`` emits no flag (the trainer keeps its own default). Rules and
estimates that reason about such a key (validation, the memory plan) must use the value the
trainer will actually run with: the key's value when set, else the default of the flag the
key owns, read from the flavour's flag registry (generated from the trainer's own parser).
"""

from __future__ import annotations

import copy
import functools
from typing import Any, Dict, Mapping, Optional, Tuple


def _flavour(c: Mapping[str, Any]) -> str:
    try:
        return str(c["trainer"]["flavour"])
    except (KeyError, TypeError):
        return "clawgym"


@functools.lru_cache(maxsize=None)
def _owned_values() -> Tuple[Tuple[str, str], ...]:
    """(key, flag) of every ``value`` row the key's value is emitted by, first row per key (the
    flag map is a constant table: indexed once, not scanned once per key)."""
    from clawgym.trainer.flagmap import ROWS

    seen: Dict[str, str] = {}
    for row in ROWS:
        if row.kind == "value" and row.compute is None:
            seen.setdefault(row.key, row.flag)
    return tuple(seen.items())


@functools.lru_cache(maxsize=None)
def _owning_index() -> Dict[str, str]:
    return dict(_owned_values())


def owning_flag(key: str) -> Optional[str]:
    """The trainer flag a curated key emits as its value (``value`` rows only), or None."""
    return _owning_index().get(key)


def _registry_default(flag: str, flavour: str) -> Any:
    """The trainer's default of ``flag`` (None when it has none or the registry does not know it)."""
    from clawgym.registry import RegistryError, load_registry

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


def trainer_default(key: str, flavour: str = "clawgym") -> Any:
    """The trainer's own default for the flag ``key`` owns (None when it has none or owns none)."""
    flag = owning_flag(key)
    return None if flag is None else _registry_default(flag, flavour)


def effective(c: Mapping[str, Any], key: str) -> Any:
    """``key``'s value in the resolved config ``c``, or the trainer's default when it is null."""
    from clawgym.trainer.flagmap import get_key

    value = get_key(c, key)
    if value is not None:
        return value
    return trainer_default(key, _flavour(c))


class EffectiveConfig(dict):
    """The config as the trainer will run it (:func:`effective_config`'s result), marked as such.

    Derived once per config by whoever composed it (the face or the sweep) and passed down:
    validation, the plan, the memory plan and the search take it instead of deriving it again.
    Never written anywhere: snapshots and plans keep the config as written (null emits no flag).
    """


def effective_config(c: Mapping[str, Any]) -> "EffectiveConfig":
    """A copy of the resolved config ``c`` with every null curated key replaced by the value
    the trainer will run with: the flag's registry default, then what slime derives at
    startup for flags left unset (slime/utils/arguments.py:slime_validate_args):

    - ``--eps-clip-high`` unset takes ``--eps-clip``;
    - ``--rollout-num-gpus`` unset takes the actor's GPUs when colocated, and no rollout GPUs
      run without a rollout engine (``--debug-train-only``) or in a split layout that names none.

    Validation and the memory plan read this; the plan itself still emits nothing for null.
    """
    if isinstance(c, EffectiveConfig):
        return c  # derived already: the one derivation is passed down, not repeated
    out: Dict[str, Any] = copy.deepcopy(dict(c))
    flavour = _flavour(c)
    for key, flag in _owned_values():
        # The model group describes the checkpoint: a null there is the architecture's (no such
        # feature, or Megatron's own value, as each field says), and its rules read it as such.
        if key.startswith("model."):
            continue
        try:
            if _get(out, key) is not None:
                continue
        except (KeyError, TypeError):
            continue
        default = _registry_default(flag, flavour)
        if default is not None:
            _set(out, key, default)
    try:
        grpo, g = out["grpo"], out["gpu_layout"]
        if grpo.get("eps_clip_high") is None and grpo.get("eps_clip") is not None:
            grpo["eps_clip_high"] = grpo["eps_clip"]
        if g.get("rollout_gpus") is None:
            if not g.get("rollout_engine", True):
                g["rollout_gpus"] = 0
            elif g.get("colocate"):
                g["rollout_gpus"] = int(g["actor_gpus"]) * int(g["actor_num_nodes"])
            else:
                g["rollout_gpus"] = 0
    except (KeyError, TypeError, AttributeError):
        pass
    return EffectiveConfig(out)


def _get(c: Mapping[str, Any], key: str) -> Any:
    node: Any = c
    for part in key.split("."):
        node = node[part]
    return node


def _set(c: Dict[str, Any], key: str, value: Any) -> None:
    node: Any = c
    parts = key.split(".")
    for part in parts[:-1]:
        node = node[part]
    node[parts[-1]] = value
