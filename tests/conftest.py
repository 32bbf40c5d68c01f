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


# ---------------------------------------------------------------- two workers, a file on one
#
# README's test command runs the suite on two pytest-xdist workers (``-n 2 --dist loadgroup``).
# Each test file is a group: all its tests run on one worker, one after another, so a module
# fixture (a 12-trial study, a demo run, a head of its own) is made once, not once per worker.
# Two files run side by side, services included: every test that starts a Ray head, a SLURM
# cluster, containers or a supervisor does so on free ports, with a state dir and a marker of its
# own, and stops or checks only what it recorded, so it never sees another test's heads,
# ports, containers or processes as its own (the rule the product follows too).
#
# One exception: every test of the SLURM cluster (tests/fixtures/slurm_cluster.py, one per worker
# that asks for it) is in one group. Each cluster numbers its jobs from 1 and the tests find a job's
# processes by its id, so two clusters at once would take each other's jobs for their own.
#
# The hook runs first: pytest-xdist's worker adds ``@<group>`` to each test id in its own
# ``pytest_collection_modifyitems``, and a marker added after that is never seen by the scheduler.

#: The group of every test that uses the SLURM cluster fixture.
SLURM_GROUP = "slurm-cluster"


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config, items):
    for item in items:
        slurm = "slurm_cluster" in getattr(item, "fixturenames", ())
        item.add_marker(pytest.mark.xdist_group(SLURM_GROUP if slurm else item.path.name))
