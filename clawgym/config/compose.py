"""ConfigStore registration, resolvers and composition helpers.

Importing this module is cheap (Hydra and OmegaConf only) and idempotent.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Dict, Iterable, List, Optional, Sequence

from hydra.core.config_store import ConfigStore
from omegaconf import DictConfig, OmegaConf

from clawgym.config.schema import GROUPS, ClawGymConfig

#: Name of the primary config in conf/.
CONFIG_NAME = "config"


def _cap(value: object, limit: object) -> object:
    """``${cg.cap:N,${model.context_window}}``: N, or the limit when one is known and smaller."""
    if limit is None or str(limit).strip().lower() in ("", "none", "null"):
        return value
    return min(int(value), int(limit))  # type: ignore[arg-type]


def _pick(cond: object, if_true: object, if_false: object) -> object:
    """``${cg.pick:${flag},a,b}``: a when flag is true, else b."""
    if isinstance(cond, str):
        cond = cond.strip().lower() in ("1", "true", "yes")
    return if_true if cond else if_false


def _above(value: object, limit: object) -> bool:
    """``${cg.above:${.tensor_parallel},1}``: true when value is set and larger than limit."""
    if value is None or str(value).strip().lower() in ("", "none", "null"):
        return False
    return int(value) > int(limit)  # type: ignore[arg-type]


def cache_interpolation_parses() -> None:
    """Parse each interpolation text once per process (safe to call repeatedly).

    OmegaConf parses an interpolation with its ANTLR grammar every time it resolves one: resolving the
    whole config (~50 interpolations, several read again through others) spent ~35 ms of a dry run's
    CPU in the parser, most of it re-parsing the same texts. The parse tree of a text is always the
    same and the resolver only reads it (its tokens keep their own input stream), so it is kept,
    keyed by (text, rule, mode); a text that does not parse raises as before (errors are not kept)."""
    import functools

    from omegaconf import _utils, base, grammar_parser

    if getattr(base.parse, "_clawgym_cached", False):
        return
    cached = functools.lru_cache(maxsize=4096)(grammar_parser.parse)
    cached._clawgym_cached = True  # type: ignore[attr-defined]
    base.parse = cached  # type: ignore[assignment]
    _utils.parse = cached  # type: ignore[assignment]


def register_resolvers() -> None:
    """Register clawgym's OmegaConf resolvers (safe to call repeatedly)."""
    if not OmegaConf.has_resolver("cg.pick"):
        OmegaConf.register_new_resolver("cg.pick", _pick)
    if not OmegaConf.has_resolver("cg.cap"):
        OmegaConf.register_new_resolver("cg.cap", _cap)
    if not OmegaConf.has_resolver("cg.above"):
        OmegaConf.register_new_resolver("cg.above", _above)
    if not OmegaConf.has_resolver("cg.lower"):
        # ``${cg.lower:${model.checkpoint_dirname}}``: the model's name as SGLang serves it.
        OmegaConf.register_new_resolver("cg.lower", lambda text: str(text).lower())
    if not OmegaConf.has_resolver("cg.cwd"):
        OmegaConf.register_new_resolver("cg.cwd", lambda: os.getcwd())
    if not OmegaConf.has_resolver("cg.help_groups"):
        OmegaConf.register_new_resolver("cg.help_groups", help_groups)


def help_groups(choices: object = None) -> str:
    """The config groups for ``--help``: what each decides and its YAML options, the chosen
    one marked ``*`` (the ``base_<group>`` schema entries are not options a user picks, so
    they are left out)."""
    chosen = dict(choices) if choices is not None and hasattr(choices, "items") else {}  # type: ignore[call-overload]
    lines = []
    for group, schema in GROUPS.items():
        # The docstring's first paragraph says what the group decides.
        doc = " ".join((schema.__doc__ or "").strip().split("\n\n")[0].split()).replace("``", "")
        options = [f"{o}*" if o == chosen.get(group) else o for o in group_options(group)]
        lines.append(f"{group}: {doc}")
        lines.append(f"    {', '.join(options) or '(set its keys directly)'}")
    # string.Template runs on the result: a literal $ must be doubled.
    return "\n".join(lines).replace("$", "$$")


def _schema_nodes() -> Dict[str, DictConfig]:
    """The typed nodes the ConfigStore holds: the root schema (``base_config``) and one per group.

    Building them from the dataclasses (``OmegaConf.structured``) costs more CPU than the rest of
    a dry run's imports together; the nodes depend only on ``schema.py`` and the OmegaConf and
    Hydra versions, so they are built once per machine and kept, pickled, in the user's cache
    (see :mod:`clawgym.config.schema_cache`). A cache that cannot be read or written is rebuilt.
    """
    from clawgym.config.schema_cache import cached_nodes

    return cached_nodes(_build_schema_nodes)


def _build_schema_nodes() -> Dict[str, DictConfig]:
    root = OmegaConf.structured(ClawGymConfig)
    # ``args`` holds trainer flags by dest; it is not struct so ``args.lr_warmup_iters=10``
    # needs no ``+`` (the registry, not the schema, knows its keys: see clawgym/validate/flags.py).
    OmegaConf.set_struct(root.args, False)
    nodes = {"base_config": root}
    for group, schema in GROUPS.items():
        nodes[f"{group}/base_{group}"] = OmegaConf.structured(schema)
    return nodes


def _stored_node_class() -> type:
    from hydra.core.config_store import ConfigNode

    class StoredNode(ConfigNode):
        """A ConfigStore entry that a deepcopy of the store shares instead of copying.

        Hydra deep-copies its config repository, and with it the whole ConfigStore, at the start of
        every compose (``CachingConfigRepository``), only to keep its list of config sources apart;
        with clawgym's typed schema in the store that copy was a tenth of a compose. The entry is
        never changed in place: ``ConfigStore.load`` hands out a copy of the entry and of its node,
        and storing a config replaces the entry.
        """

        def __deepcopy__(self, memo: dict) -> "StoredNode":
            return self

    return StoredNode


def register_configs() -> None:
    """Store the root schema and one ``base_<group>`` schema per group."""
    stored_node = _stored_node_class()
    cs = ConfigStore.instance()
    for path, node in _schema_nodes().items():
        group, _, name = path.rpartition("/")
        # ConfigStore.store would copy each node once more (OmegaConf.structured of a DictConfig);
        # these are fresh (unpickled or just built) and owned by the store alone.
        cur = cs.repo
        for d in group.split("/") if group else []:
            cur = cur.setdefault(d, {})
        cur[f"{name}.yaml"] = stored_node(name=f"{name}.yaml", node=node, group=group or None, package=None,
                                          provider="clawgym")


def ensure_launcher_plugin() -> None:
    """Make the launcher plugin importable from a source checkout that is not pip-installed.

    conf/config.yaml selects ``hydra/launcher: clawgym``; Hydra finds it by scanning the
    ``hydra_plugins`` namespace package, which an install provides and a bare checkout
    only has under ``launchers/``.
    """
    import importlib.util
    import sys

    launchers = Path(__file__).resolve().parents[2] / "launchers"
    if not (launchers / "hydra_plugins" / "clawgym_launcher").is_dir() or str(launchers) in sys.path:
        return
    try:
        if importlib.util.find_spec("hydra_plugins.clawgym_launcher") is not None:
            return
    except ImportError:
        pass
    sys.path.append(str(launchers))


register_resolvers()
cache_interpolation_parses()
register_configs()
ensure_launcher_plugin()


def config_dir() -> Path:
    """Directory of the Hydra config tree (``conf/``, shipped as ``clawgym/conf``)."""
    path = Path(__file__).resolve().parents[1] / "conf"
    if not (path / f"{CONFIG_NAME}.yaml").is_file():
        raise FileNotFoundError(f"clawgym config tree not found at {path}")
    return path


def group_options(group: str) -> List[str]:
    """Names of the YAML options of a config group."""
    return sorted(p.stem for p in (config_dir() / group).glob("*.yaml"))


def compose(overrides: Sequence[str] = (), *, return_hydra_config: bool = False) -> DictConfig:
    """Compose the config as ``train.py`` would, outside of ``@hydra.main``.

    Used by tests, ``clawgym resume`` and ``clawgym diff``.
    """
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    if GlobalHydra.instance().is_initialized():
        # Composition inside a running Hydra app: reuse its search path.
        return hydra_compose(CONFIG_NAME, overrides=list(overrides), return_hydra_config=return_hydra_config)
    from hydra.version import VersionBase

    # initialize_config_dir restores Hydra's global state on exit but not the version base;
    # put it back so a later Hydra app in this process sees its own.
    version_base = VersionBase.instance().getbase()
    try:
        with initialize_config_dir(config_dir=str(config_dir()), version_base="1.3"):
            return hydra_compose(CONFIG_NAME, overrides=list(overrides), return_hydra_config=return_hydra_config)
    finally:
        VersionBase.instance().version_base = version_base


def is_clawgym_config(cfg: Optional[DictConfig]) -> bool:
    """True for a task config composed from clawgym's schema (not some other Hydra app)."""
    return cfg is not None and all(k in cfg for k in ("model", "gpu_layout", "paths", "run_name"))


def to_plain(cfg: DictConfig, resolve: bool = True) -> dict:
    """A resolved plain-dict copy without Hydra's own node."""
    data = OmegaConf.to_container(cfg, resolve=resolve, throw_on_missing=False)
    assert isinstance(data, dict)
    data.pop("hydra", None)
    return data


def iter_leaves(data: object, prefix: str = "") -> Iterable[tuple]:
    """(dotted key, value) for every leaf of a nested dict."""
    if isinstance(data, dict):
        for k, v in data.items():
            yield from iter_leaves(v, f"{prefix}.{k}" if prefix else str(k))
    else:
        yield prefix, data
