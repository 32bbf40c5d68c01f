"""The suite's own scheduling (tests/conftest.py): under README's ``-n 2 --dist loadgroup`` each test
file is one xdist group, so its tests run on one worker and its module fixtures are made once."""

from __future__ import annotations

import os

import pytest


def test_each_test_file_is_one_group_of_the_two_workers(request):
    if not os.environ.get("PYTEST_XDIST_WORKER"):
        pytest.skip("run without pytest-xdist: there are no workers to group onto (README's command uses -n 2)")
    # pytest-xdist's worker names the group in the test id; the scheduler keeps a group on one worker.
    assert request.node.nodeid.endswith("@test_test_groups.py"), request.node.nodeid


def test_every_slurm_test_is_in_one_group_so_one_cluster_serves_them(request):
    if not os.environ.get("PYTEST_XDIST_WORKER"):
        pytest.skip("run without pytest-xdist: there are no workers to group onto (README's command uses -n 2)")
    from tests.conftest import SLURM_GROUP

    items = [i for i in request.session.items if "slurm_cluster" in i.fixturenames]
    assert items and all(i.nodeid.endswith("@" + SLURM_GROUP) for i in items), [i.nodeid for i in items][:5]
