"""The typed schema nodes kept in the user's cache are exactly what the dataclasses build."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from omegaconf import OmegaConf

from clawgym.config import compose as config

from clawgym.config import schema_cache

ROOT = Path(__file__).resolve().parent.parent


def _same(a, b) -> None:
    assert OmegaConf.to_yaml(a) == OmegaConf.to_yaml(b)
    assert OmegaConf.get_type(a) is OmegaConf.get_type(b)
    # args takes unknown keys (trainer flags by dest); the rest of the schema is closed.
    assert OmegaConf.is_struct(a) == OmegaConf.is_struct(b)


def test_cached_nodes_equal_built_nodes(tmp_path, monkeypatch):
    monkeypatch.setenv("CLAWGYM_CACHE_DIR", str(tmp_path))
    built = config._build_schema_nodes()
    first = schema_cache.cached_nodes(config._build_schema_nodes)      # builds and writes
    assert schema_cache.cache_file().is_file()
    assert oct(schema_cache.cache_file().stat().st_mode & 0o777) == "0o600"
    second = schema_cache.cached_nodes(lambda: (_ for _ in ()).throw(AssertionError("rebuilt")))  # reads
    assert set(built) == set(first) == set(second)
    for k in built:
        _same(built[k], second[k])
    root = second["base_config"]
    assert not OmegaConf.is_struct(root.args) or OmegaConf.is_struct(root.args) == OmegaConf.is_struct(built["base_config"].args)


def test_broken_cache_file_is_rebuilt(tmp_path, monkeypatch):
    monkeypatch.setenv("CLAWGYM_CACHE_DIR", str(tmp_path))
    path = schema_cache.cache_file()
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"\x80\x04truncated")
    calls = []

    def build():
        calls.append(1)
        return config._build_schema_nodes()

    nodes = schema_cache.cached_nodes(build)
    assert calls == [1] and "base_config" in nodes
    # ... and the broken file was replaced by a good one.
    assert schema_cache._read(path) is not None


def test_schema_change_changes_the_key(tmp_path, monkeypatch):
    key = schema_cache.cache_key()
    fake_schema = tmp_path / "schema.py"
    fake_schema.write_text(Path(schema_cache.__file__).with_name("schema.py").read_text() + "\n# changed\n")
    import clawgym.config.schema as s
    monkeypatch.setattr(s, "__file__", str(fake_schema))
    assert schema_cache.cache_key() != key


def test_unwritable_cache_dir_still_composes(tmp_path):
    ro = tmp_path / "ro"
    ro.mkdir()
    ro.chmod(0o500)
    env = {**os.environ, "CLAWGYM_CACHE_DIR": str(ro / "sub")}
    # root ignores permissions; a file where the dir should be makes it unwritable for anyone.
    (ro / "sub").write_text("not a dir") if os.geteuid() == 0 else None
    proc = subprocess.run([sys.executable, "-c", "from clawgym.config.compose import compose; print(compose([]).model.name)"],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip()
