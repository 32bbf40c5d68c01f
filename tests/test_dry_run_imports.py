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
print(json.dumps(sorted(sys.modules)))
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


def test_the_backends_with_a_dry_run_artefact_are_those_that_render_one():
    from clawgym.backends import ARTEFACT_BACKENDS, Backend
    from clawgym.backends.existing import ExistingCluster
    from clawgym.backends.kuberay import KubeRayBackend
    from clawgym.backends.local import LocalHead
    from clawgym.backends.slurm import SlurmBackend

    classes = {"local": LocalHead, "existing": ExistingCluster, "slurm": SlurmBackend, "kuberay": KubeRayBackend}
    renders = {name for name, cls in classes.items() if cls.dry_run_artefact is not Backend.dry_run_artefact}
    assert renders == set(ARTEFACT_BACKENDS)
