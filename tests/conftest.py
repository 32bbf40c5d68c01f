"""Shared pytest setup. Fixtures live in per-topic plugin modules to keep them apart."""

import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

pytest_plugins = [
    "tests.fixtures.checkout",
    "tests.fixtures.ray_cluster",
    "tests.fixtures.docker_engine",
]

#: The shared reference material (seed script); absent outside this workplace.
SHARED = Path(os.environ.get("CLAWGYM_SHARED", ROOT.parent / "shared"))
