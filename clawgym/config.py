"""ConfigStore registration, resolvers and composition helpers.

Importing this module is cheap (Hydra and OmegaConf only) and idempotent.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Iterable, List, Optional, Sequence

from hydra.core.config_store import ConfigStore
from omegaconf import DictConfig, OmegaConf

from clawgym.schema import GROUPS, ClawGymConfig

#: Name of the primary config in conf/.
CONFIG_NAME = "config"


def _pick(cond: object, if_true: object, if_false: object) -> object:
    """``${cg.pick:${flag},a,b}``: a when flag is true, else b."""
    if isinstance(cond, str):
        cond = cond.strip().lower() in ("1", "true", "yes")
    return if_true if cond else if_false


def register_resolvers() -> None:
    """Register clawgym's OmegaConf resolvers (safe to call repeatedly)."""
    if not OmegaConf.has_resolver("cg.pick"):
        OmegaConf.register_new_resolver("cg.pick", _pick)
    if not OmegaConf.has_resolver("cg.cwd"):
        OmegaConf.register_new_resolver("cg.cwd", lambda: os.getcwd())


def register_configs() -> None:
    """Store the root schema and one ``base_<group>`` schema per group."""
    cs = ConfigStore.instance()
    root = OmegaConf.structured(ClawGymConfig)
    # ``args`` holds trainer flags by dest; it is not struct so ``args.lr_warmup_iters=10``
    # needs no ``+`` (the registry, not the schema, knows its keys: see validate.py).
    OmegaConf.set_struct(root.args, False)
    cs.store(name="base_config", node=root, provider="clawgym")
    for group, schema in GROUPS.items():
        cs.store(group=group, name=f"base_{group}", node=schema, provider="clawgym")


def ensure_launcher_plugin() -> None:
    """Make the launcher plugin importable from a source checkout that is not pip-installed.

    conf/config.yaml selects ``hydra/launcher: clawgym``; Hydra finds it by scanning the
    ``hydra_plugins`` namespace package, which an install provides and a bare checkout
    only has under ``launchers/``.
    """
    import importlib.util
    import sys

    launchers = Path(__file__).resolve().parent.parent / "launchers"
    if not (launchers / "hydra_plugins" / "clawgym_launcher").is_dir() or str(launchers) in sys.path:
        return
    try:
        if importlib.util.find_spec("hydra_plugins.clawgym_launcher") is not None:
            return
    except ImportError:
        pass
    sys.path.append(str(launchers))


register_resolvers()
register_configs()
ensure_launcher_plugin()


def config_dir() -> Path:
    """Directory of the Hydra config tree (``conf/``, shipped as ``clawgym/conf``)."""
    path = Path(__file__).resolve().parent / "conf"
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
