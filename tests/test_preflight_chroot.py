"""Chroot sandbox preflight against a real rootfs that we really chroot into.

The rootfs (tests/fixtures/docker_engine.py: build_rootfs) is busybox plus the shape of
an OpenClaw rootfs: app/dist/index.js, node and bin/bash on the chroot PATH, and the
device nodes build_rootfs.sh creates. No Docker engine is involved.
"""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from pathlib import Path

from clawgym.config.compose import compose
from clawgym.preflight import PreflightError, Report
from tests.fixtures.docker_engine import run_checks, build_rootfs, require_rootfs_tools

ROOT = Path(__file__).resolve().parent.parent

#: Checks outside the sandbox that these tests leave to tests/test_preflight.py.
OFF = "skip_checks=[gpus,ports,cluster]"

#: Makes any attempt to reach a Docker engine fail.
NO_ENGINE = "unix:///nonexistent/clawgym-test/docker.sock"


def chroot_cfg(checkout: Path, rootfs: Path, *extra: str):
    return compose([f"paths.root={checkout}", "sandbox=chroot", f"sandbox.rootfs={rootfs}", OFF, *extra])


preflight = run_checks


def test_rootfs_is_a_real_chroot_target_and_passes(openclaw_rootfs, clawgym_checkout, monkeypatch):
    # The fixture rootfs really runs under chroot, as the rollout will use it.
    ran = subprocess.run(["chroot", str(openclaw_rootfs), "/bin/busybox", "true"], capture_output=True)
    assert ran.returncode == 0, ran.stderr
    monkeypatch.setenv("DOCKER_HOST", NO_ENGINE)
    report, lines = preflight(chroot_cfg(clawgym_checkout, openclaw_rootfs))
    assert isinstance(report, Report), report.report()
    results = report.by_name()
    assert results["rootfs"].status == "ok" and "app/dist/index.js" in results["rootfs"].detail
    assert results["root"].status == "ok" and "entered" in results["root"].detail
    assert "docker" not in results and "image" not in results


def test_rootfs_without_gateway_entry_fails(openclaw_rootfs, clawgym_checkout):
    (openclaw_rootfs / "app" / "dist" / "index.js").unlink()
    err, _ = preflight(chroot_cfg(clawgym_checkout, openclaw_rootfs))
    assert isinstance(err, PreflightError) and err.check == "rootfs"
    assert f"sandbox.rootfs={openclaw_rootfs} is not an OpenClaw rootfs: no gateway entry app/dist/index.js" \
        in err.report()
    assert "build_rootfs.sh" in err.report()


def test_rootfs_without_device_nodes_fails_listing_them(tmp_path, clawgym_checkout):
    require_rootfs_tools()
    rootfs = build_rootfs(tmp_path / "rootfs", devices=False)
    (rootfs / "dev" / "null").write_text("")  # a regular file where a device belongs
    err, _ = preflight(chroot_cfg(clawgym_checkout, rootfs))
    assert isinstance(err, PreflightError) and err.check == "rootfs"
    text = err.report()
    assert "dev/null is not a character device" in text and "dev/urandom missing" in text
    assert "dev/tty missing" in text and "mknod" in text


def test_rootfs_with_wrong_device_numbers_fails(openclaw_rootfs, clawgym_checkout):
    zero = openclaw_rootfs / "dev" / "zero"
    zero.unlink()
    os.mknod(zero, 0o666 | stat.S_IFCHR, os.makedev(1, 3))
    err, _ = preflight(chroot_cfg(clawgym_checkout, openclaw_rootfs))
    assert isinstance(err, PreflightError) and "dev/zero is (1,3), not (1,5)" in err.report()


def test_rootfs_absolute_symlinks_resolve_inside_the_rootfs(openclaw_rootfs, clawgym_checkout):
    # Debian images link node through absolute paths; they must resolve inside the rootfs.
    node = openclaw_rootfs / "usr" / "local" / "bin" / "node"
    real = openclaw_rootfs / "opt" / "node" / "bin" / "node"
    real.parent.mkdir(parents=True)
    node.rename(real)
    os.symlink("/opt/node/bin/node", node)
    report, _ = preflight(chroot_cfg(clawgym_checkout, openclaw_rootfs))
    assert isinstance(report, Report), report.report()
    real.unlink()
    err, _ = preflight(chroot_cfg(clawgym_checkout, openclaw_rootfs))
    assert isinstance(err, PreflightError) and "no node binary on the chroot PATH" in err.report()


def test_missing_rootfs_fails_naming_the_key(clawgym_checkout, tmp_path):
    err, _ = preflight(chroot_cfg(clawgym_checkout, tmp_path / "absent"))
    assert isinstance(err, PreflightError) and err.check == "rootfs"
    assert f"sandbox.rootfs={tmp_path / 'absent'} does not exist" in err.report()


def test_rootfs_whose_bash_cannot_run_fails_the_chroot_entry(openclaw_rootfs, clawgym_checkout):
    # bin/bash is a script for /bin/sh -> busybox; without busybox nothing runs inside.
    for name in ("busybox", "sh"):
        (openclaw_rootfs / "bin" / name).unlink()
    err, _ = preflight(chroot_cfg(clawgym_checkout, openclaw_rootfs))
    assert isinstance(err, PreflightError) and err.check == "root"
    assert "could not run /bin/bash inside" in err.report()


def test_chroot_preflight_never_contacts_or_imports_docker(openclaw_rootfs, clawgym_checkout):
    script = (
        "import sys\n"
        "from clawgym.config.compose import compose\n"
        "from clawgym.plan.build import build_plan\n"
        "from clawgym.preflight import cleanup_leftovers, run_preflight\n"
        f"cfg = compose(['paths.root={clawgym_checkout}', 'sandbox=chroot', 'sandbox.rootfs={openclaw_rootfs}',"
        f" '{OFF}'])\n"
        "run_preflight(cfg, build_plan(cfg, environ={}, timestamp='t'), local_head=False)\n"
        "cleanup_leftovers(cfg)\n"
        "print('docker imported:', 'docker' in sys.modules)\n"
    )
    env = {**os.environ, "DOCKER_HOST": NO_ENGINE, "PYTHONPATH": str(ROOT)}
    out = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "docker imported: False" in out.stdout
    # The CLI, end to end, with the engine unreachable.
    cli = subprocess.run(
        [sys.executable, "-m", "clawgym", "preflight", "--cluster", f"paths.root={clawgym_checkout}",
         "sandbox=chroot", f"sandbox.rootfs={openclaw_rootfs}", OFF],
        env=env, capture_output=True, text=True, timeout=120)
    assert cli.returncode == 0, cli.stdout + cli.stderr
    assert "✓ rootfs" in cli.stdout and "✓ root " in cli.stdout


def test_each_sweep_job_is_checked_against_its_own_backend(docker_images, openclaw_rootfs, clawgym_checkout):
    # What `-m sandbox=docker,chroot` does per job: one composed config per backend.
    image = docker_images.image("gateway")
    seen = {}
    for backend in ("docker", "chroot"):
        cfg = compose([f"paths.root={clawgym_checkout}", f"sandbox={backend}", f"sandbox.image={image}",
                       f"sandbox.rootfs={openclaw_rootfs}", OFF])
        report, _ = preflight(cfg)
        assert isinstance(report, Report), report.report()
        seen[backend] = [r.name for r in report.results if r.status == "ok"]
    assert seen["docker"][:2] == ["docker", "image"] and "rootfs" not in seen["docker"]
    assert seen["chroot"][:2] == ["rootfs", "root"] and "docker" not in seen["chroot"]
