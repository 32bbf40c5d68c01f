"""Where each value of a composed config came from, recorded once by composition.

Hydra merges a defaults list (the root schema, then one YAML option per group, then global files
such as ``trainer/slime`` or ``+experiment=NAME``, then ``config.yaml``'s own body) and then applies the
command-line overrides; an interpolation takes its value from another key. :func:`compose` composes
the config as ``train.py`` does and keeps each of those layers (its raw content, unresolved), the
overrides as they were typed, and the composed tree, so :meth:`Provenance.origin` answers for any key
without composing again: every layer that set it, oldest first (the last one wins), the value as
typed and as resolved, and the origins of the keys it interpolates (recursively).

On the config floor: imports ``clawgym.config.compose``, ``clawgym.config.keys`` and Hydra only.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence

from omegaconf import DictConfig, OmegaConf

from clawgym.config.compose import CONFIG_NAME, config_dir

SCHEMA, OPTION, GLOBAL, EXPERIMENT, IMPORT, PRIMARY, OVERRIDE = (
    "schema default", "group option", "global file", "experiment", "import", "config.yaml", "command line")

#: ``${a.b}`` and ``${.b}`` inside an interpolation (resolver arguments included: ``${cg.pick:${x},a,b}``).
_REF = re.compile(r"\$\{(\.*[A-Za-z_][\w.]*)\}")
_MISSING = object()


@dataclass
class Layer:
    """One config merged by the defaults list (or the command line's overrides)."""

    kind: str
    where: str  # what a user opens: clawgym/config/schema.py, conf/model/qwen3_4b.yaml, the override text
    content: Dict[str, Any]  # raw, unresolved, placed at the root (the package applied)
    note: str = ""  # an import's script


@dataclass
class Step:
    kind: str
    where: str
    value: Any
    typed: Optional[str] = None  # the text as written on the command line
    note: str = ""


@dataclass
class Origin:
    key: str
    steps: List[Step]
    raw: Any  # the composed value before interpolation
    resolved: Any
    error: str = ""  # why it does not resolve here
    refs: List["Origin"] = field(default_factory=list)


def _select(data: Any, key: str) -> Any:
    node = data
    for part in key.split("."):
        if isinstance(node, dict) and part in node:
            node = node[part]
        elif isinstance(node, list) and part.isdigit() and int(part) < len(node):
            node = node[int(part)]
        else:
            return _MISSING
    return node


def _place(package: str, content: Dict[str, Any]) -> Dict[str, Any]:
    for part in reversed([p for p in package.split(".") if p]):
        content = {part: content}
    return content


def _shown_path(source_path: str, config_path: str) -> str:
    """``conf/model/qwen3_4b.yaml`` for clawgym's own tree, else the file's absolute path."""
    if source_path.startswith("file://"):
        root = Path(source_path[len("file://"):])
        file = root / f"{config_path}.yaml"
        try:
            rel = file.resolve().relative_to(config_dir().resolve())
            return f"conf/{rel}"
        except ValueError:
            return str(file)
    return f"{source_path}/{config_path}"


def _imported_from(source_path: str, config_path: str) -> str:
    """The script an experiment was imported from (``clawgym import`` writes it in the header)."""
    if not source_path.startswith("file://"):
        return ""
    try:
        head = (Path(source_path[len("file://"):]) / f"{config_path}.yaml").read_text().splitlines()[:4]
    except OSError:
        return ""
    for line in head:
        found = re.match(r"#\s*Imported by `clawgym import [^`]*` from (.+?)\.?$", line)
        if found:
            return found.group(1)
    return ""


class Provenance:
    """A composed config and the layers it was composed from."""

    def __init__(self, cfg: DictConfig, layers: List[Layer], overrides: List[Any]) -> None:
        self.cfg = cfg
        self.layers = layers
        self.overrides = overrides  # Hydra's parsed overrides: key_or_group, input_line, value()
        self.raw: Dict[str, Any] = OmegaConf.to_container(cfg, resolve=False)  # type: ignore[assignment]

    def has(self, key: str) -> bool:
        return _select(self.raw, key) is not _MISSING

    def origin(self, key: str, _seen: Optional[set] = None) -> Origin:
        """Every layer that set ``key`` (oldest first), its value as composed and as resolved, and the
        origins of the keys it interpolates."""
        seen = set() if _seen is None else _seen
        seen.add(key)
        steps: List[Step] = []
        for layer in self.layers:
            value = _select(layer.content, key)
            if value is _MISSING:
                # A layer that set a whole list or dict above the key set the key too.
                parent = key.rpartition(".")[0]
                while parent and _select(layer.content, parent) is _MISSING:
                    parent = parent.rpartition(".")[0]
                if not parent or isinstance(_select(layer.content, parent), dict):
                    continue
                value = _select(layer.content, parent)
            steps.append(Step(layer.kind, layer.where, value, note=layer.note))
        for o in self.overrides:
            name = str(o.key_or_group)
            if name == key or key.startswith(f"{name}."):
                typed = o.input_line.split("=", 1)[1] if "=" in o.input_line else None
                steps.append(Step(OVERRIDE, o.input_line, _select(self.raw, key), typed=typed))
        raw = _select(self.raw, key)
        resolved, error = raw, ""
        try:
            resolved = OmegaConf.select(self.cfg, key, throw_on_resolution_failure=True)
            if isinstance(resolved, (DictConfig,)) or OmegaConf.is_list(resolved):
                resolved = OmegaConf.to_container(resolved, resolve=True)
        except Exception as exc:  # noqa: BLE001 - e.g. ${hydra:...} outside a Hydra run: said, not raised
            error = f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
        refs = []
        if isinstance(raw, str):
            parent = key.rpartition(".")[0]
            for ref in _REF.findall(raw):
                target = ref
                if ref.startswith("."):
                    dots = len(ref) - len(ref.lstrip("."))
                    base = parent.split(".") if parent else []
                    base = base[: len(base) - (dots - 1)] if dots > 1 else base
                    target = ".".join([*base, ref.lstrip(".")])
                if target not in seen and self.has(target):
                    refs.append(self.origin(target, seen))
        return Origin(key, steps, raw, resolved, error, refs)


def compose(overrides: Sequence[str] = ()) -> Provenance:
    """Compose as ``train.py`` does (``clawgym.config.compose.compose``) and keep what each layer set."""
    from hydra import initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra
    from hydra.version import VersionBase

    version_base = VersionBase.instance().getbase()
    if GlobalHydra.instance().is_initialized():
        return _compose(list(overrides))
    try:
        with initialize_config_dir(config_dir=str(config_dir()), version_base="1.3"):
            return _compose(list(overrides))
    finally:
        VersionBase.instance().version_base = version_base


def _compose(overrides: List[str]) -> Provenance:
    from hydra._internal.defaults_list import create_defaults_list
    from hydra.core.global_hydra import GlobalHydra

    from clawgym.config.compose import compose as compose_config

    cfg = compose_config(overrides)
    loader = GlobalHydra.instance().config_loader()
    # As Hydra's own compose does (ConfigLoaderImpl._load_configuration_impl): the repository with the
    # overrides' hydra.searchpath, where an imported experiment lives.
    parsed, repo = loader._parse_overrides_and_create_caching_repo(CONFIG_NAME, overrides)
    defaults = create_defaults_list(repo=repo, config_name=CONFIG_NAME, overrides_list=parsed, prepend_hydra=True,
                                    skip_missing=False)
    layers: List[Layer] = []
    for d in defaults.defaults:
        path = d.config_path
        if path is None or path.startswith("hydra/") or (d.package or "").startswith("hydra"):
            continue
        loaded = repo.load_config(path)
        if loaded is None:
            continue
        content = OmegaConf.to_container(loaded.config, resolve=False)
        assert isinstance(content, dict)
        content.pop("defaults", None)
        content.pop("hydra", None)
        package = d.package or ""
        if str(loaded.path).startswith("structured://") or loaded.provider == "clawgym":
            kind, where, note = SCHEMA, "clawgym/config/schema.py", ""
        else:
            where = _shown_path(str(loaded.path), path)
            note = _imported_from(str(loaded.path), path)
            if d.primary:
                kind = PRIMARY
            elif note:
                kind = IMPORT
            elif path.startswith("experiment/"):
                kind = EXPERIMENT
            elif package == "":
                kind = GLOBAL
            else:
                kind = OPTION
        layers.append(Layer(kind, where, _place(package, content), note))
    return Provenance(cfg, layers, list(defaults.overrides.config_overrides))
