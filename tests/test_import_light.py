"""``import clawgym`` and the modules train.py needs stay light: no ray, torch, docker or wandb."""

import json
import subprocess
import sys

from tests.conftest import ROOT

HEAVY = ("ray", "torch", "docker", "wandb")
MODULES = ("clawgym", "clawgym.config.compose", "clawgym.plan.build", "clawgym.validate", "clawgym.app")


def test_import_clawgym_imports_no_heavy_module():
    code = (
        f"import sys, json; import {', '.join(MODULES)}; "
        f"print(json.dumps(sorted(m for m in sys.modules if m.split('.')[0] in {HEAVY!r})))"
    )
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout.strip().splitlines()[-1]) == []
    # The check itself would notice a heavy import.
    proc = subprocess.run([sys.executable, "-c", code.replace("import clawgym,", "import docker, clawgym,")],
                          cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert "docker" in json.loads(proc.stdout.strip().splitlines()[-1])
