"""Keys the typed schema does not define: ``+rollout.temprature=0.8``, ``+lr=1e-5``, an experiment
file that adds one. Hydra's ``+`` adds a key to a struct config; the trainer would never read it and
the real key keeps its value, so a typo would become a run. clawgym's own rule (the trainer has no
such key to mirror); open maps (``args``, ``extra_env``) take any key.
"""

from __future__ import annotations

from clawgym.config.keys import closest, unknown_keys
from clawgym.validate.core import Collector, value_at


def rule_known_keys(v: Collector) -> None:
    for key in unknown_keys(v.raw):
        if key == "experiment":
            # ``+experiment=NAME`` with no experiment/NAME.yaml on the search path adds a plain key.
            v.add("unknown-key", [key], "+experiment=NAME selects conf/experiment/NAME.yaml (or one on "
                  "hydra.searchpath, where clawgym import writes them); no such file was found, so Hydra added a "
                  "key named experiment", "name an existing experiment file (ls conf/experiment/), or import one "
                  "with clawgym import SCRIPT")
            continue
        near = closest(key)
        try:
            typed = value_at(v.raw, key)
        except (KeyError, IndexError, TypeError):
            typed = None
        # The fix names a value that works: the closest key with the value the user gave.
        shown = f"{near[0]}={typed}" if near and typed is not None and not isinstance(typed, (dict, list)) else \
            (near[0] if near else "")
        v.add("unknown-key", [key],
              f"{key} is not a config key (a + override or an experiment file added it; the trainer would never "
              f"read it" + (f", and {near[0]} would keep its value)" if near else ")")
              + (f"; did you mean {near[0]}?" if near else ""),
              (f"set {shown} instead (no +): clawgym explain {near[0]}" if near else
               "remove it; python train.py --cfg job lists every key") + "; only args.* and extra_env.* take new keys")
