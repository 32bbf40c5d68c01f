"""Shared pytest setup. Fixtures live in per-topic plugin modules to keep them apart."""

import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

pytest_plugins = [
    "tests.fixtures.checkout",
    "tests.fixtures.ray_cluster",
    "tests.fixtures.two_nodes",
    "tests.fixtures.docker_engine",
    "tests.fixtures.slurm_cluster",
]

#: The shared reference material (seed script); absent outside this workplace.
SHARED = Path(os.environ.get("CLAWGYM_SHARED", ROOT.parent / "shared"))


import pytest  # noqa: E402

# Register clawgym's schemas and resolvers before any test snapshots Hydra's global state
# (the fixture below restores that state, which would otherwise drop a later registration).
import clawgym.config.compose  # noqa: E402,F401


@pytest.fixture(autouse=True)
def _restore_hydra_singletons():
    """Every test starts from the Hydra global state the previous one found.

    Composing with ``initialize_config_dir`` leaves Hydra's version base set; Hydra's own
    launcher suites assume a fresh process.
    """
    from hydra.core.singleton import Singleton

    state = Singleton.get_state()
    yield
    Singleton.set_state(state)


def _stream_closed(handler) -> bool:
    stream = getattr(handler, "stream", None)
    return bool(stream is not None and getattr(stream, "closed", False))


@pytest.fixture(autouse=True)
def _restore_root_logging():
    """Every test starts with the root logger the previous one found, minus dead handlers.

    A Hydra job run in-process configures the root logger with handlers bound to the
    streams pytest captured for that test; once that capture is closed, the next test
    that logs (Hydra does on compose) would print '--- Logging error ---' tracebacks into
    its own captured stderr.
    """
    import logging

    root = logging.getLogger()
    loggers = [root, *(lg for lg in logging.Logger.manager.loggerDict.values() if isinstance(lg, logging.Logger))]
    for lg in loggers:
        for h in [h for h in lg.handlers if _stream_closed(h)]:
            lg.removeHandler(h)
    handlers, level = list(root.handlers), root.level
    yield
    for h in list(root.handlers):
        if h not in handlers:
            root.removeHandler(h)
    for h in handlers:
        if h not in root.handlers:
            root.addHandler(h)
    root.setLevel(level)


# ---------------------------------------------------------------- two workers, services on one
#
# README's test command runs the suite on two pytest-xdist workers (``-n 2 --dist loadgroup``).
# Every test that starts or watches a real service (a Ray head, the SLURM cluster, the Docker
# engine, Chromium, W&B's service) or scans this machine's processes is in one group, so those
# run one after another on one worker as they always did: none sees another's heads, ports,
# containers or processes. The other tests only compute or run clawgym's own short-lived commands
# (compose, validation, dry runs, the layout search, the importer's jail); each file is a group of its
# own, so its module fixtures are made once. One of them starts a head: tests/test_docs_commands.py
# runs `clawgym demo` as the docs do, with a state dir of its own and on free ports, beside the
# services (a head of its own, found by nobody else's record or marker).

#: Test files whose tests start or watch real services, or look at every process on the machine.
SERVICE_FILES = frozenset({
    "test_demo.py", "test_head_early.py", "test_head_ownership.py", "test_head_start.py", "test_kuberay.py",
    "test_launch.py", "test_launcher_plugin.py", "test_loopback_head.py", "test_lost_contact.py", "test_lost_node.py",
    "test_ownership.py", "test_preflight.py", "test_preflight_chroot.py", "test_preflight_docker.py",
    "test_ray_head.py", "test_resume.py", "test_runs.py", "test_sandbox_none.py", "test_slurm_cluster.py",
    "test_slurm_ownership.py", "test_slurm_refusals.py", "test_snapshot.py", "test_snapshot_integrity.py",
    "test_snapshot_watcher.py", "test_stacks_multinode.py", "test_supervised_launch.py", "test_supervisor_disk.py", "test_supervisor_hang.py", "test_supervisor_ray.py",
    "test_sweep.py", "test_tuner.py", "test_tuner_local_head.py", "test_wandb_env.py",
})
#: Fixtures of real services: a test using one joins the group wherever it lives.
SERVICE_FIXTURES = frozenset({"ray_cluster", "two_nodes", "slurm_cluster", "docker_client", "docker_images", "head4", "own_head"})


def pytest_collection_modifyitems(config, items):
    for item in items:
        if item.path.name in SERVICE_FILES or SERVICE_FIXTURES & set(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.xdist_group("services"))
        else:
            item.add_marker(pytest.mark.xdist_group(item.path.name))
