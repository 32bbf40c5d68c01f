"""train.py answers Hydra's mode question without a second compose, and the answer is Hydra's own."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from clawgym.config.compose import config_dir
from clawgym.config.hydra_mode import known_mode

CONF = config_dir()


def _hydra_own_mode(overrides):
    """What Hydra's own Hydra.get_mode (a full compose) says for clawgym's primary config."""
    from hydra._internal.hydra import Hydra
    from hydra.core.global_hydra import GlobalHydra
    from hydra import initialize_config_dir

    original = getattr(Hydra.get_mode, "__wrapped_original__", None) or Hydra.get_mode
    assert not getattr(original, "_clawgym", False), "this test needs Hydra's unpatched get_mode"
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        hydra = GlobalHydra.instance().hydra
        return original(hydra, config_name="config", overrides=list(overrides))


def test_no_config_file_sets_hydra_mode():
    # The fast answer rests on this: no YAML of conf/ sets hydra.mode.
    for path in CONF.rglob("*.yaml"):
        data = yaml.safe_load(path.read_text()) or {}
        assert not (isinstance(data, dict) and isinstance(data.get("hydra"), dict) and "mode" in data["hydra"]), path


@pytest.mark.parametrize("overrides", [
    [],
    ["dry_run=true"],
    ["model=qwen3_8b", "gpu_layout=colocate_8"],
    ["gpu_layout=split_4_4,colocate_8"],
    ["hydra.mode=MULTIRUN"],
    ["hydra.mode=RUN", "model=qwen3_0_6b"],
])
def test_fast_mode_equals_hydras_own(overrides):
    ok, mode = known_mode(overrides, CONF)
    assert ok
    assert mode == _hydra_own_mode(overrides)


@pytest.mark.parametrize("overrides", [
    ["sandbox=none"],               # names hydra (or a global package): Hydra decides
    ["trainer=slime"],
    ["model=not_shipped_here"],     # not a file of conf/: Hydra reports or finds it elsewhere
    ["hydra.searchpath=[file:///elsewhere]"],
    ["hydra.mode=SOMETIMES"],       # Hydra's own error
])
def test_fast_mode_defers_when_it_cannot_vouch(overrides):
    assert known_mode(overrides, CONF) == (False, None)


def test_train_py_runs_one_compose(tmp_path):
    """A dry run through train.py composes the config once (Hydra alone would compose twice)."""
    import subprocess
    import sys

    root = Path(__file__).resolve().parent.parent
    probe = (
        "import sys, runpy\n"
        "from hydra._internal.hydra import Hydra\n"
        "count = [0]\n"
        "orig = Hydra.compose_config\n"
        "def counted(self, *a, **k):\n"
        "    count[0] += 1\n"
        "    return orig(self, *a, **k)\n"
        "Hydra.compose_config = counted\n"
        f"sys.argv = ['train.py', 'dry_run=true', 'hydra.run.dir={tmp_path / 'out'}']\n"
        "try:\n"
        f"    runpy.run_path({str(root / 'train.py')!r}, run_name='__main__')\n"
        "except SystemExit:\n"
        "    pass\n"
        "print('COMPOSES', count[0], file=sys.stderr)\n"
    )
    proc = subprocess.run([sys.executable, "-c", probe], cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert "COMPOSES 1" in proc.stderr, proc.stderr[-2000:]
    assert (tmp_path / "out" / "launch_plan.json").is_file()
