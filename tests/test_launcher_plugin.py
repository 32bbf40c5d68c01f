"""The clawgym Hydra launcher plugin: discovery, Hydra's peer suites, packaging.

Hydra's ``LauncherTestSuite`` / ``IntegrationTestSuite`` run Hydra's own small apps
through the launcher (jobs of other apps run in-process, in order). The install tests
build the package into throw-away venvs that see the packages of the environment
running the tests (so only clawgym itself is installed) and check ``train.py --info
plugins`` lists the launcher, for a normal and an editable install. That environment may
be a virtualenv, a conda env or a system install (see :func:`_see_outer_packages`).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import venv
from pathlib import Path
from typing import List

import pytest
from hydra.core.plugins import Plugins
from hydra.plugins.launcher import Launcher
from hydra.test_utils.launcher_common_tests import IntegrationTestSuite, LauncherTestSuite

from tests.fixtures.source_copy import copy_source
import clawgym.config.compose  # noqa: F401  (makes the plugin importable from a bare checkout)

ROOT = Path(__file__).resolve().parent.parent
LAUNCHERS = ROOT / "launchers"


def _plugin_pythonpath() -> str:
    """PYTHONPATH under which a subprocess finds clawgym and the plugin without an install."""
    parts = [str(ROOT), str(LAUNCHERS)] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    return os.pathsep.join(parts)


def test_launcher_is_discovered_by_hydra() -> None:
    assert "ClawGymLauncher" in [c.__name__ for c in Plugins.instance().discover(Launcher)]


def test_plugin_scan_does_not_import_ray() -> None:
    # The scan imports every non-underscore module of every plugin in every Hydra app.
    code = ("import sys; from hydra.core.plugins import Plugins; from hydra.plugins.launcher import Launcher;"
            "import hydra_plugins.clawgym_launcher.launcher, hydra_plugins.clawgym_launcher.config;"
            "Plugins.instance().discover(Launcher);"
            "print(sorted(m for m in ('ray', 'docker', 'wandb', 'torch') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         env={**os.environ, "PYTHONPATH": _plugin_pythonpath()})
    assert out.stdout.strip() == "[]"


def test_clawgym_is_the_default_launcher_of_train_py() -> None:
    out = subprocess.run([sys.executable, str(ROOT / "train.py"), "--cfg", "hydra", "--package", "hydra.launcher"],
                         capture_output=True, text=True, cwd=ROOT, check=True)
    assert "hydra_plugins.clawgym_launcher.launcher.ClawGymLauncher" in out.stdout


@pytest.mark.parametrize("launcher_name, overrides", [("clawgym", [])])
class TestClawGymLauncher(LauncherTestSuite):
    pass


@pytest.mark.parametrize("task_launcher_cfg, extra_flags", [({}, ["-m", "hydra/launcher=clawgym"])])
class TestClawGymLauncherIntegration(IntegrationTestSuite):
    @pytest.fixture(autouse=True)
    def _plugin_on_path(self, monkeypatch) -> None:
        # The suite runs its apps as subprocesses: they must find the plugin without an install.
        monkeypatch.setenv("PYTHONPATH", _plugin_pythonpath())


# ---------------------------------------------------------------- packaging

def outer_site_dirs() -> List[str]:
    """The package dirs of the interpreter running the tests, in its order: a virtualenv's
    or conda env's site-packages, a system install's site-/dist-packages."""
    return [p for p in sys.path if p and Path(p).is_dir() and Path(p).name in ("site-packages", "dist-packages")]


def _see_outer_packages(python: Path) -> None:
    """Make a nested venv see the test environment's packages (hydra, ray, ...).

    ``--system-site-packages`` only adds the *base* interpreter's site-packages: run from a
    virtualenv, that is the interpreter the virtualenv was made from, which lacks what was
    installed into the virtualenv. A ``.pth`` in the nested venv lists the outer dirs
    instead; they come after its own site-packages, so its clawgym wins, and their own
    ``.pth`` files (e.g. the outer editable install of clawgym) are not processed.
    """
    site = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                          capture_output=True, text=True, check=True).stdout.strip()
    own = Path(site).resolve()
    dirs = [d for d in outer_site_dirs() if Path(d).resolve() != own]
    (Path(site) / "_clawgym_test_outer_env.pth").write_text("".join(f"{d}\n" for d in dirs))


def _venv_with_clawgym(tmp_path: Path, *, editable: bool) -> Path:
    src = copy_source(tmp_path / "src")
    env_dir = tmp_path / "venv"
    venv.EnvBuilder(system_site_packages=False, with_pip=True).create(env_dir)
    python = env_dir / "bin" / "python"
    _see_outer_packages(python)
    cmd = [str(python), "-m", "pip", "install", "-q", "--no-deps", "--disable-pip-version-check"]
    cmd += ["-e", str(src)] if editable else [str(src)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    if proc.returncode != 0:
        pytest.fail(f"pip install failed:\n{proc.stdout}\n{proc.stderr}")
    return python


def test_nested_venv_sees_the_packages_of_the_environment_running_the_tests(tmp_path) -> None:
    """In a virtualenv, conda env or system install alike, the install tests' venv imports
    the same hydra as this process (not the base interpreter's, nor none)."""
    import hydra

    env_dir = tmp_path / "venv"
    venv.EnvBuilder(system_site_packages=False, with_pip=False).create(env_dir)
    python = env_dir / "bin" / "python"
    _see_outer_packages(python)
    out = subprocess.run([str(python), "-c", "import hydra, omegaconf; print(hydra.__file__)"],
                         capture_output=True, text=True, cwd=tmp_path,
                         env={k: v for k, v in os.environ.items() if k != "PYTHONPATH"})
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == hydra.__file__


def _plugins_listed(python: Path, train_py: Path, cwd: Path) -> str:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    out = subprocess.run([str(python), str(train_py), "--info", "plugins"], capture_output=True, text=True,
                         cwd=cwd, env=env, timeout=120)
    assert out.returncode == 0, out.stderr
    return out.stdout


@pytest.mark.timeout(400)
def test_non_editable_install_lists_launcher(tmp_path) -> None:
    python = _venv_with_clawgym(tmp_path, editable=False)
    # Installed copies, not the sources: the source tree is gone when the app runs.
    shutil.rmtree(tmp_path / "src" / "launchers")
    site = subprocess.run([str(python), "-c", "import hydra_plugins.clawgym_launcher as m; print(m.__file__)"],
                          capture_output=True, text=True, cwd=tmp_path, check=True).stdout
    assert str(tmp_path / "venv") in site
    app = tmp_path / "app"
    app.mkdir()
    shutil.copy(ROOT / "train.py", app / "train.py")
    shutil.copytree(ROOT / "conf", app / "conf")
    assert "ClawGymLauncher" in _plugins_listed(python, app / "train.py", tmp_path)


@pytest.mark.timeout(400)
def test_editable_install_lists_launcher(tmp_path) -> None:
    python = _venv_with_clawgym(tmp_path, editable=True)
    # Run from elsewhere, so only the install (not the script's directory) can provide the plugin.
    src = tmp_path / "src"
    listed = _plugins_listed(python, src / "train.py", tmp_path)
    assert "ClawGymLauncher" in listed
    # Hydra's own scan finds it through the install alone (clawgym.config.compose, which would
    # add launchers/ of a bare checkout to sys.path, is not imported here): hydra#2359.
    code = ("from hydra.core.plugins import Plugins; from hydra.plugins.launcher import Launcher;"
            "import hydra_plugins.clawgym_launcher as m; print(m.__file__);"
            "print([c.__name__ for c in Plugins.instance().discover(Launcher)])")
    out = subprocess.run([str(python), "-c", code], capture_output=True, text=True, cwd=tmp_path, check=True,
                         env={k: v for k, v in os.environ.items() if k != "PYTHONPATH"}).stdout.splitlines()
    assert out[0].startswith(str(src / "launchers"))
    assert "ClawGymLauncher" in out[1]
