"""The experiment written as YAML: ordered, nested, atomically."""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any, Dict, List, Mapping, Sequence, Tuple

import yaml


#: Groups whose option the importer picks, in the order the experiment lists them.
PICKED_GROUPS = ("trainer", "model", "gpu_layout", "sandbox")


def _order(key: str) -> Tuple[int, str]:
    """Experiment keys in the schema's group order, then args, then extra_env; by name within."""
    from clawgym.config.schema import GROUPS

    order = [*PICKED_GROUPS, *GROUPS, "args", "extra_env"]
    top = key.split(".", 1)[0]
    return (order.index(top) if top in order else len(order), key)


def nest(overrides: Mapping[str, Any]) -> Dict[str, Any]:
    tree: Dict[str, Any] = {}
    for key in sorted(overrides, key=_order):
        value = overrides[key]
        if key.startswith("extra_env."):
            tree.setdefault("extra_env", {})[key.split(".", 1)[1]] = value
            continue
        if key.startswith("args."):
            tree.setdefault("args", {})[key.split(".", 1)[1]] = value
            continue
        node = tree
        parts = key.split(".")
        for part in parts[:-1]:
            node = node.setdefault(part, {})
        node[parts[-1]] = value
    return tree


def _scalar(value: Any) -> str:
    text = yaml.safe_dump(value, default_flow_style=True, width=10_000, allow_unicode=True).strip()
    if text.endswith("\n..."):
        text = text[: -len("\n...")]
    return text.replace("\n...", "").strip()


def render_experiment(choices: Mapping[str, str], body: Mapping[str, Any], *, script: Path,
                      flags: Mapping[str, str], header: Sequence[str]) -> str:
    """The experiment YAML: package line, why, the option choices, then every key with the
    script flag or variable it reproduces in a comment above it."""
    lines = ["# @package _global_",
             f"# Imported by `clawgym import {script.name}` from {script}.",
             "# Use: python train.py +experiment=<this file's name>. Regenerate rather than edit by hand",
             "# if the script changes; `clawgym import` proves parity again each time."]
    lines += [f"# {h}" for h in header]
    if choices:
        lines += ["defaults:", "  # The closest options; every difference from them is set below."]
        lines += [f"  - override /{g}: {o}" for g, o in choices.items()]

    def emit(node: Mapping[str, Any], indent: int, prefix: str) -> None:
        for k, v in node.items():
            key = f"{prefix}.{k}" if prefix else str(k)
            pad = "  " * indent
            if isinstance(v, dict) and v:
                if indent == 0:
                    lines.append("")
                emit_comment(key, pad)
                lines.append(f"{pad}{_scalar(str(k)) if not re.match(r'^[A-Za-z_][A-Za-z0-9_]*$', str(k)) else k}:")
                emit(v, indent + 1, key)
            else:
                emit_comment(key, pad)
                name = str(k) if re.match(r"^[A-Za-z_][A-Za-z0-9_]*$", str(k)) else _scalar(str(k))
                lines.append(f"{pad}{name}: {_scalar(v)}")

    def emit_comment(key: str, pad: str) -> None:
        if key in flags:
            lines.append(f"{pad}# {flags[key]}")

    emit(body, 0, "")
    return "\n".join(lines) + "\n"


def write_atomic(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    tmp.write_text(text)
    os.replace(tmp, path)


def searchpath_override(out_dir: Path) -> List[str]:
    from clawgym.config.compose import config_dir

    if out_dir.resolve() == config_dir().resolve():
        return []
    return [f"hydra.searchpath=[file://{out_dir.resolve()}]"]
