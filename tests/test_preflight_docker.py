"""Docker sandbox preflight against the real engine: engine, image, leftover cleanup.

Images are imported from a busybox rootfs (no registry needed) under unique test tags;
containers have no network. Each test uses its own name prefix, so concurrent runs and
other containers on the engine are never matched; the fixtures remove what they made.
"""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import List

import pytest

from clawgym.config.compose import compose
from tests.fixtures.docker_engine import run_checks
from clawgym.preflight import PreflightError, Report, cleanup_leftovers

#: Checks outside the docker sandbox that these tests leave to tests/test_preflight.py.
OFF = "skip_checks=[gpus,ports,cluster]"


def docker_cfg(root: Path, image: str, prefix: str, *extra: str):
    return compose([f"paths.root={root}", "sandbox=docker", f"sandbox.image={image}",
                    f"sandbox.container_prefix={prefix}", OFF, *extra])


preflight = run_checks


@pytest.fixture
def prefix() -> str:
    """A container name prefix of the real shape, unique to this test."""
    return f"clawgym-rl-t{uuid.uuid4().hex[:8]}-"


def test_image_present_passes_and_counts_leftovers(docker_images, clawgym_checkout, prefix):
    image = docker_images.image("gateway")
    docker_images.container(image, f"{prefix}0-1")
    report, lines = preflight(docker_cfg(clawgym_checkout, image, prefix))
    assert isinstance(report, Report), report.report()
    results = report.by_name()
    assert results["docker"].status == "ok" and "engine" in results["docker"].detail
    assert results["image"].status == "ok"
    assert f"1 leftover {prefix}* container(s) (removed before launch)" in results["image"].detail
    assert "rootfs" not in results and "root" not in results


def test_missing_image_fails_saying_how_to_build_or_load_it(docker_client, clawgym_checkout, prefix):
    image = f"clawgym-test-absent:{uuid.uuid4().hex[:8]}"
    err, lines = preflight(docker_cfg(clawgym_checkout, image, prefix))
    assert isinstance(err, PreflightError) and err.check == "image"
    text = err.report()
    assert f"sandbox.image={image} is not on the Docker engine" in text
    assert f"docker build -t {image} {clawgym_checkout}" in text
    assert "docker load -i" in text
    # The failing line and its fix were printed; the checks after it ran too.
    assert any(f"sandbox.image={image} is not on the Docker engine" in line and "fix:" in line for line in lines)
    assert err.checklist.by_name()["checkpoint"].status == "ok"


def test_unreachable_engine_fails_naming_the_address(clawgym_checkout, prefix, monkeypatch):
    monkeypatch.setenv("DOCKER_HOST", "unix:///nonexistent/clawgym-test/docker.sock")
    err, _ = preflight(docker_cfg(clawgym_checkout, "clawgym-rl:v0.1", prefix))
    assert isinstance(err, PreflightError) and err.check == "docker"
    assert "unix:///nonexistent/clawgym-test/docker.sock is not reachable" in err.report()
    # No image check without an engine: listed as not run, saying why; the rest ran.
    image = err.checklist.by_name()["image"]
    assert image.status == "not run" and "needs docker, which did not pass" in image.format()
    assert err.checks == ["docker"] and err.checklist.by_name()["checkpoint"].status == "ok"
    assert "sandbox=chroot" in err.report()


def test_cleanup_removes_only_prefixed_containers_of_the_configured_image(docker_images, clawgym_checkout, prefix):
    image = docker_images.image("gateway")
    other_image = docker_images.image("other")
    stem = prefix.rstrip("-")
    leftover_created = docker_images.container(image, f"{prefix}0-1")
    leftover_running = docker_images.container(image, f"{prefix}0-2", start=True)
    other_name = docker_images.container(image, f"keep{stem}-0-3")
    prefix_inside = docker_images.container(image, f"x{prefix}0-4")
    other_img = docker_images.container(other_image, f"{prefix}0-5")
    lines: List[str] = []
    removed = cleanup_leftovers(docker_cfg(clawgym_checkout, image, prefix), echo=lines.append)
    assert sorted(removed) == [f"{prefix}0-1", f"{prefix}0-2"]
    assert not docker_images.exists(leftover_created.id) and not docker_images.exists(leftover_running.id)
    for kept in (other_name, prefix_inside, other_img):
        assert docker_images.exists(kept.id), kept.name
    assert any(f"removed leftover container {prefix}0-2" in line and "was running" in line for line in lines)
    # Nothing left: a second cleanup removes nothing and says so.
    lines.clear()
    assert cleanup_leftovers(docker_cfg(clawgym_checkout, image, prefix), echo=lines.append) == []
    assert lines == [f"no leftover {prefix}* containers of {image}"]


def test_cleanup_removes_containers_of_an_earlier_build_of_the_same_tag(docker_images, clawgym_checkout, prefix):
    image = docker_images.image("rebuilt")
    old = docker_images.container(image, f"{prefix}1-1")
    docker_images.image("rebuilt")  # same tag, new image: the tag moves on
    assert old.reload() is None and docker_images.client.images.get(image).id != old.image.id
    removed = cleanup_leftovers(docker_cfg(clawgym_checkout, image, prefix), echo=None)
    assert removed == [f"{prefix}1-1"] and not docker_images.exists(old.id)


def test_cleanup_can_be_turned_off(docker_images, clawgym_checkout, prefix):
    image = docker_images.image("gateway")
    leftover = docker_images.container(image, f"{prefix}2-1")
    lines: List[str] = []
    cfg = docker_cfg(clawgym_checkout, image, prefix, "sandbox.cleanup_leftovers=false")
    assert cleanup_leftovers(cfg, echo=lines.append) == []
    assert docker_images.exists(leftover.id)
    assert "sandbox.cleanup_leftovers=false" in lines[0]


def test_cleanup_failure_is_reported_not_swallowed(clawgym_checkout, prefix, monkeypatch):
    monkeypatch.setenv("DOCKER_HOST", "unix:///nonexistent/clawgym-test/docker.sock")
    with pytest.raises(PreflightError) as info:
        cleanup_leftovers(docker_cfg(clawgym_checkout, "clawgym-rl:v0.1", prefix), echo=None)
    assert info.value.check == "leftovers"
    assert "/nonexistent/clawgym-test/docker.sock is not reachable" in info.value.report()


def test_the_leftovers_refusal_names_its_switches_and_skip_checks_takes_its_name(clawgym_checkout, prefix,
                                                                                 monkeypatch):
    """issue 35: the refusal is named "leftovers", but skip_checks refused that name and the refusal
    never said sandbox.cleanup_leftovers=false."""
    monkeypatch.setenv("DOCKER_HOST", "unix:///nonexistent/clawgym-test/docker.sock")
    with pytest.raises(PreflightError) as info:
        cleanup_leftovers(docker_cfg(clawgym_checkout, "clawgym-rl:v0.1", prefix), echo=None)
    assert "skip_checks=[leftovers]" in info.value.report()
    assert "sandbox.cleanup_leftovers=false" in info.value.report()
    lines: list = []
    cfg = docker_cfg(clawgym_checkout, "clawgym-rl:v0.1", prefix, "skip_checks=[gpus,ports,cluster,leftovers]")
    assert cleanup_leftovers(cfg, echo=lines.append) == []
    assert lines == ["leftover containers: not removed (skip_checks=[leftovers])"]
    from clawgym.preflight import check_names

    assert "leftovers" in check_names()  # so preflight does not refuse it as an unknown check


def test_chroot_backend_cleanup_contacts_no_engine(clawgym_checkout, monkeypatch):
    monkeypatch.setenv("DOCKER_HOST", "unix:///nonexistent/clawgym-test/docker.sock")
    cfg = compose([f"paths.root={clawgym_checkout}", "sandbox=chroot", "sandbox.rootfs=/nonexistent", OFF])
    assert cleanup_leftovers(cfg, echo=None) == []
