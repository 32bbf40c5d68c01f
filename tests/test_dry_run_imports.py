"""What a dry run imports: only what it runs (every module is compiled on each run where no
bytecode cache is written), checked in a fresh process."""

from __future__ import annotations

import json
import subprocess
import sys

from tests.conftest import ROOT

PROBE = """
import json, runpy, sys, io, contextlib
sys.argv = ["train.py", "dry_run=true", "hydra.run.dir=" + sys.argv[1]]
with contextlib.redirect_stdout(io.StringIO()):
    try:
        runpy.run_path("train.py", run_name="__main__")
    except SystemExit as exc:
        assert exc.code in (0, None), exc.code
keys = sys.modules.get("clawgym.config.keys")
help_read = bool(keys and keys.keys.cache_info().currsize)
print(json.dumps(sorted(sys.modules) + (["<help read>"] if help_read else [])))
"""


def test_a_dry_run_imports_no_launch_snapshot_or_backend_code(tmp_path):
    proc = subprocess.run([sys.executable, "-c", PROBE, str(tmp_path / "run")], cwd=ROOT, capture_output=True,
                          text=True, timeout=180)
    assert proc.returncode == 0, proc.stderr
    modules = set(json.loads(proc.stdout.splitlines()[-1]))
    assert "clawgym.memory" in modules and "clawgym.validate" in modules  # it did validate and plan
    for name in ("clawgym.snapshot.write", "clawgym.snapshot.checkpoints", "clawgym.snapshot.records",
                 "clawgym.pipeline.pipeline", "clawgym.backends.head", "clawgym.preflight",
                 "clawgym.backends.local", "clawgym.backends.existing", "subprocess", "ray"):
        assert name not in modules, f"a dry run imported {name}"


def test_a_dry_run_that_fits_reads_no_key_help_and_loads_no_layout_search(tmp_path):
    """Issue 35 (dry-run speed, 1.28x a minimal Hydra app): the unknown-key rule read every key's help from
    the schema's source (inspect + ast, a third of clawgym's own work in a dry run) and the layout search
    was imported for a config that names a layout. Neither is needed by a dry run that fits; the heavy
    libraries of other commands are not either."""
    proc = subprocess.run([sys.executable, "-c", PROBE, str(tmp_path / "run")], cwd=ROOT, capture_output=True,
                          text=True, timeout=180)
    assert proc.returncode == 0, proc.stderr
    modules = set(json.loads(proc.stdout.splitlines()[-1]))
    assert "clawgym.validate" in modules
    assert "<help read>" not in modules, "the unknown-key rule read every key's help (keys.keys())"
    for name in ("clawgym.search.layout", "clawgym.search.auto", "clawgym.steptime", "difflib",
                 "matplotlib", "optuna", "docker", "jsonschema", "tensorboard", "ray"):
        assert name not in modules, f"a dry run imported {name}"


def test_the_backends_with_a_dry_run_artefact_are_those_that_render_one():
    from clawgym.backends import ARTEFACT_BACKENDS, Backend
    from clawgym.backends.existing import ExistingCluster
    from clawgym.backends.kuberay import KubeRayBackend
    from clawgym.backends.local import LocalHead
    from clawgym.backends.slurm import SlurmBackend

    classes = {"local": LocalHead, "existing": ExistingCluster, "slurm": SlurmBackend, "kuberay": KubeRayBackend}
    renders = {name for name, cls in classes.items() if cls.dry_run_artefact is not Backend.dry_run_artefact}
    assert renders == set(ARTEFACT_BACKENDS)


def test_interpolations_are_parsed_once_and_resolve_as_omegaconf_alone_resolves_them():
    """Issue 35 (dry-run speed): OmegaConf re-parsed every interpolation with its ANTLR grammar on each
    resolution, ~35 ms of a dry run. clawgym keeps each text's parse tree; the values are the same."""
    import pytest
    from omegaconf import OmegaConf, base, grammar_parser
    from omegaconf.errors import GrammarParseError

    from clawgym.config.compose import compose

    assert getattr(base.parse, "_clawgym_cached", False)
    cfg = compose(["gpu_layout=split_1_1", "run_name=x${model.name}"])
    cached = OmegaConf.to_container(cfg, resolve=True)
    before = base.parse.cache_info()
    assert OmegaConf.to_container(cfg, resolve=True) == cached
    after = base.parse.cache_info()
    assert after.hits > before.hits and after.misses == before.misses  # the second resolution parsed nothing
    original, base.parse = base.parse, grammar_parser.parse
    try:
        assert OmegaConf.to_container(cfg, resolve=True) == cached
    finally:
        base.parse = original
    for _ in range(2):  # an error is raised each time, never kept as a result
        with pytest.raises(GrammarParseError):
            OmegaConf.to_container(OmegaConf.create({"a": "${oops:"}), resolve=True)
