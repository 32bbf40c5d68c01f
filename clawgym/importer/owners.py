"""Which key owns a trainer flag or an environment variable (found by probing the plan)."""

from __future__ import annotations

import copy
from typing import Any, Dict, List, Mapping, Optional, Tuple

from clawgym.importer.options import NOT_SETTINGS, TIMESTAMP, flatten


class Owners:
    """Which clawgym key owns each trainer flag (the owner table) and each job variable."""

    def __init__(self, flavour: str, reg: Any):
        from clawgym.trainer.flagmap import owners

        self.reg = reg
        self.by_option = owners(flavour)

    def for_dest(self, dest: str) -> List[Tuple[Any, Any]]:
        """(registry action, Owner) pairs of every option string that sets ``dest``."""
        out = []
        for action in self.reg.all_by_dest(dest):
            for opt in action.option_strings:
                owner = self.by_option.get(opt)
                if owner is not None:
                    out.append((action, owner))
        return out

    def key_value(self, dest: str, value: Any) -> Tuple[Optional[str], Any, Optional[str]]:
        """(key, value for the key, None) to make the plan produce ``dest=value``;
        (key, None, reason) when the owning key cannot be set directly (derived);
        (None, None, None) when no key owns the flag."""
        pairs = self.for_dest(dest)
        if not pairs:
            return None, None, None
        for action, owner in pairs:
            if owner.kind == "value":
                return owner.key, value, None
        for action, owner in pairs:
            if owner.kind in ("switch", "inverse_switch"):
                on = _switch_on(action)
                present = value == on if on is not None else bool(value)
                return owner.key, (present if owner.kind == "switch" else not present), None
        for action, owner in pairs:
            if owner.kind == "file":
                return owner.key, value, None
        action, owner = pairs[0]
        return owner.key, None, f"derived from {owner.key}"


def _switch_on(action: Any) -> Any:
    """The value a switch action stores when its flag is present."""
    if action.action == "store_true":
        return True
    if action.action == "store_false":
        return False
    if action.action == "store_const":
        return action.const
    return None


def probe_env_owners(plain: Mapping[str, Any]) -> Dict[str, List[Tuple[str, Any]]]:
    """Variable -> [(key, how)] for variables of the plan that one key sets directly.

    Found by changing each leaf of the resolved config alone and watching the plan's
    job environment: a variable that then holds the new value verbatim is that key's
    (``how`` None); a variable that follows a boolean is the key's with the two values
    it takes (``how`` = {True: "1", False: "0"}).
    """
    from clawgym.plan.build import build_plan_from_dict

    def env_of(c: Mapping[str, Any]) -> Dict[str, str]:
        plan = build_plan_from_dict(c, environ={}, timestamp=TIMESTAMP)
        return {**(plan.ray_start_env if plan.ray_start is not None else {}), **plan.runtime_env["env_vars"]}

    base = env_of(plain)
    trial = copy.deepcopy(dict(plain))
    found: Dict[str, List[Tuple[str, Any]]] = {}
    for key, value in flatten({k: v for k, v in plain.items()
                                if k not in NOT_SETTINGS + ("args", "extra_env", "extra_args")}).items():
        if isinstance(value, bool):
            probe: Any = not value
        elif isinstance(value, int):
            probe = value + 7919
        elif isinstance(value, float):
            probe = value + 0.5
        elif isinstance(value, str) or value is None:
            probe = "clawgym-import-probe"
        else:
            continue
        node = trial
        parts = key.split(".")
        for part in parts[:-1]:
            node = node[part]
        node[parts[-1]] = probe
        try:
            env = env_of(trial)
        except Exception:  # noqa: BLE001 - a probe the plan cannot take owns nothing
            continue
        finally:
            node[parts[-1]] = value
        for var, new in env.items():
            old = base.get(var)
            if new == old:
                continue
            if isinstance(value, bool) and old is not None:
                found.setdefault(var, []).append((key, {value: old, probe: new}))
            elif new == str(probe):
                found.setdefault(var, []).append((key, None))
    return found
