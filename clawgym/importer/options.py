"""The config tree as the importer reads it: flattened keys, group options and the option closest to what a script sets."""

from __future__ import annotations

import functools
import re
from pathlib import Path
from typing import Any, Dict, List, Mapping, Optional, Tuple

import yaml
from omegaconf import OmegaConf

from clawgym.importer import parity
from clawgym.importer.parity import MISSING_VALUE


#: Timestamp of the plans the importer builds (never launched; keeps plans comparable).
TIMESTAMP = "import"

#: Top-level keys that are not settings of the run.
NOT_SETTINGS = ("dry_run", "preflight_only", "skip_checks", "hydra")


def default_name(script: Path) -> str:
    stem = re.sub(r"[^A-Za-z0-9_]+", "_", script.stem).strip("_").lower()
    return stem or "imported"


def flatten(data: Any, prefix: str = "") -> Dict[str, Any]:
    out: Dict[str, Any] = {}
    if isinstance(data, dict):
        for k, v in data.items():
            key = f"{prefix}.{k}" if prefix else str(k)
            if isinstance(v, dict) and v and key not in ("extra_env",) and not key.startswith("args"):
                out.update(flatten(v, key))
            else:
                out[key] = v
    return out


def _get(tree: Mapping[str, Any], key: str) -> Any:
    node: Any = tree
    for part in key.split("."):
        if not isinstance(node, Mapping) or part not in node:
            return MISSING_VALUE
        node = node[part]
    return node


def _group_exists(group: str) -> bool:
    from clawgym.config.compose import config_dir

    return (config_dir() / group).is_dir()


def group_options(group: str) -> List[str]:
    from clawgym.config.compose import group_options

    return group_options(group) if _group_exists(group) else []


@functools.lru_cache(maxsize=None)
def _schema_defaults(group: str) -> Dict[str, Any]:
    """A group's schema defaults as a plain dict (interpolations unresolved)."""
    from clawgym.config.schema import GROUPS

    schema = GROUPS.get(group)
    if schema is None:
        return {}
    return OmegaConf.to_container(OmegaConf.structured(schema), resolve=False)  # type: ignore[return-value]


def _option_values(group: str, option: str) -> Dict[str, Any]:
    """The resolved values of one group option over its schema's defaults (no Hydra compose)."""
    from clawgym.config.compose import config_dir

    with open(config_dir() / group / f"{option}.yaml", encoding="utf-8") as fh:
        container = yaml.safe_load(fh) or {}
    if isinstance(container, dict) and group in container and isinstance(container[group], dict):
        container = container[group]  # a `# @package _global_` option
    merged = {**_schema_defaults(group), **{k: v for k, v in container.items() if k != "defaults"}}
    # Sibling interpolations (``actor_gpus: ${.num_gpus}``) are all that options use for scoring;
    # anything else stays unresolved and simply matches nothing.
    for k, v in list(merged.items()):
        m = re.fullmatch(r"\$\{\.([A-Za-z_][A-Za-z0-9_]*)\}", v) if isinstance(v, str) else None
        if m and m.group(1) in merged:
            merged[k] = merged[m.group(1)]
    return merged


def pick_option(group: str, wanted: Mapping[str, Any], hint: str = "") -> Tuple[Optional[str], int]:
    """The option of ``group`` whose values agree with most ``wanted`` keys (``group.x``).

    Ties go to the option whose name is closest to ``hint`` (e.g. the model file the
    script sourced), then to the first by name."""
    import difflib

    keys = {k.split(".", 1)[1]: v for k, v in wanted.items() if k.startswith(group + ".")}
    best: Tuple[int, float, str] = (-1, -1.0, "")
    for option in group_options(group):
        values = _option_values(group, option)
        if values.get("auto") is True:
            continue  # gpu_layout=auto searches a layout at launch: a script's own layout is what it ran
        score = sum(1 for k, v in keys.items() if k in values and parity.same(_cfg_value(values[k]), v))
        similarity = difflib.SequenceMatcher(None, option, hint).ratio() if hint else 0.0
        if (score, similarity) > best[:2]:
            best = (score, similarity, option)
    return (best[2] or None), best[0]


def _cfg_value(value: Any) -> Any:
    return value


def norm_model_hint(path: str) -> str:
    return re.sub(r"[^a-z0-9]+", "_", Path(path).stem.lower()).strip("_")
