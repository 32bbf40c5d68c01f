"""Generated files as config: keys whose content clawgym writes at launch and passes by path.

Some trainer flags name a file rather than a value: slime's ``--sglang-config`` reads a
YAML of engine groups (``slime/backends/sglang_utils/sglang_config.py:SglangConfig.from_yaml``).
A key holds that content, typed from the trainer's own schema for it
(:class:`clawgym.config.schema.SglangModel`); the plan names the file it goes to, under the run's
save dir, and carries its text (``LaunchPlan.files``), so the launch snapshot keeps it; the
pipeline writes it just before the job is submitted. ``clawgym import`` reads the file a
script generated (a heredoc into a ``mktemp`` file) back into the key, and parity compares
the two by content.
"""

from __future__ import annotations

from typing import Any, Dict, Mapping, Optional

import yaml

#: key -> (file name under <paths.save>/clawgym/, the trainer flag that takes its path).
FILES: Dict[str, tuple] = {
    "sglang.models": ("sglang_config.yaml", "--sglang-config"),
}
#: Folder of the save dir that holds what clawgym writes for the job.
SUBDIR = "clawgym"


def _get(c: Mapping[str, Any], key: str) -> Any:
    node: Any = c
    for part in key.split("."):
        node = node[part]
    return node


def generated_path(c: Mapping[str, Any], key: str) -> Optional[str]:
    """Where the file of ``key`` goes; None when the key is empty or there is no save dir."""
    try:
        content = _get(c, key)
    except (KeyError, TypeError):
        return None
    save = (c.get("paths") or {}).get("save")
    if not content or not save:
        return None
    return f"{str(save).rstrip('/')}/{SUBDIR}/{FILES[key][0]}"


def _drop_none(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _drop_none(v) for k, v in value.items() if v is not None and v != {}}
    if isinstance(value, list):
        return [_drop_none(v) for v in value]
    return value


def sglang_config_document(models: Any) -> Dict[str, Any]:
    """The ``--sglang-config`` document of ``sglang.models`` (unset fields left out, as slime reads
    them with ``.get``)."""
    return {"sglang": [_drop_none(dict(m)) for m in models]}


def render(key: str, content: Any) -> str:
    if key == "sglang.models":
        return yaml.safe_dump(sglang_config_document(content), sort_keys=False, default_flow_style=False)
    raise KeyError(key)


def generated_files(c: Mapping[str, Any]) -> Dict[str, str]:
    """path -> text of every file the plan passes by path."""
    out: Dict[str, str] = {}
    for key in FILES:
        path = generated_path(c, key)
        if path:
            out[path] = render(key, _get(c, key))
    return out


def normalised(key: str, text: str) -> Any:
    """A file's content as data, for comparing by content: the sglang config as slime reads it
    (``engine_groups`` is slime's alias of ``server_groups``; fields slime defaults are filled)."""
    data = yaml.safe_load(text) if text else None
    if key != "sglang.models" or not isinstance(data, dict):
        return data
    models = []
    for m in data.get("sglang") or []:
        groups = m.get("server_groups") or m.get("engine_groups") or []
        models.append({
            "name": m.get("name"), "model_path": m.get("model_path"),
            "num_gpus_per_engine": m.get("num_gpus_per_engine"), "update_weights": m.get("update_weights"),
            "server_groups": [{"worker_type": g.get("worker_type"), "num_gpus": g.get("num_gpus"),
                               "num_gpus_per_engine": g.get("num_gpus_per_engine"),
                               "overrides": dict(g.get("overrides") or {})} for g in groups],
        })
    return {"sglang": models}


def models_from_text(text: str) -> list:
    """``sglang.models`` from a ``--sglang-config`` file (for ``clawgym import``)."""
    doc = normalised("sglang.models", text)
    return list((doc or {}).get("sglang") or [])
