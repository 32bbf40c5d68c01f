"""The typed schema nodes, built once per machine and kept in the user's cache.

``OmegaConf.structured`` over clawgym's ~300 typed keys is the largest CPU cost of importing
``clawgym.config.compose`` (about 120 ms on 2 cores, every ``python train.py`` and every ``clawgym``
command). Its result depends only on the schema module's source and the OmegaConf, Hydra and
Python versions; unpickling it takes about 2 ms.

The cache file is keyed by a hash of all of those, written atomically (temp file + rename,
mode 0600) and ignored whenever it cannot be read, does not unpickle, or holds anything but
the expected nodes: the nodes are then built again from the dataclasses. It lives under
``$CLAWGYM_CACHE_DIR`` (default ``$XDG_CACHE_HOME/clawgym`` or ``~/.cache/clawgym``);
``CLAWGYM_SCHEMA_CACHE=0`` turns it off.
"""

from __future__ import annotations

import hashlib
import os
import pickle
import sys
from pathlib import Path
from typing import Callable, Dict, Optional

from omegaconf import DictConfig

#: Bumped when the layout of the cached value changes.
_FORMAT = 1


def cache_dir() -> Path:
    explicit = os.environ.get("CLAWGYM_CACHE_DIR")
    if explicit:
        return Path(explicit)
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "clawgym"


def cache_key() -> str:
    """Hash of everything the built nodes depend on."""
    import hydra
    import omegaconf

    from clawgym.config import schema

    h = hashlib.sha256()
    h.update(f"{_FORMAT}|{sys.version}|{omegaconf.__version__}|{hydra.__version__}|".encode())
    h.update(Path(schema.__file__).read_bytes())
    # config.py decides what is built (set_struct on args, the names): part of the key too.
    h.update(Path(__file__).with_name("compose.py").read_bytes())
    return h.hexdigest()[:32]


def cache_file() -> Path:
    return cache_dir() / f"schema-{cache_key()}.pickle"


def _read(path: Path) -> Optional[Dict[str, DictConfig]]:
    try:
        with open(path, "rb") as f:
            value = pickle.load(f)
    except Exception:  # missing, truncated, from another version: rebuild
        return None
    if not (isinstance(value, dict) and value.get("format") == _FORMAT and isinstance(value.get("nodes"), dict)
            and all(isinstance(n, DictConfig) for n in value["nodes"].values())):
        return None
    return value["nodes"]


def _write(path: Path, nodes: Dict[str, DictConfig]) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "wb") as f:
            pickle.dump({"format": _FORMAT, "nodes": nodes}, f, protocol=pickle.HIGHEST_PROTOCOL)
        os.replace(tmp, path)
    except OSError:
        # A read-only home or a full disk only costs the rebuild next time.
        try:
            tmp.unlink()
        except OSError:
            pass


def cached_nodes(build: Callable[[], Dict[str, DictConfig]]) -> Dict[str, DictConfig]:
    """The nodes from the cache, or ``build()`` (then cached)."""
    if os.environ.get("CLAWGYM_SCHEMA_CACHE", "1") == "0":
        return build()
    try:
        path = cache_file()
    except OSError:
        return build()
    nodes = _read(path)
    if nodes is not None:
        return nodes
    nodes = build()
    _write(path, nodes)
    return nodes
