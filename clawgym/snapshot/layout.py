"""Names of what a snapshot dir and a checkpoint hold, and the error every snapshot module raises.

The layout and the life of a snapshot are told in the package doc (:mod:`clawgym.snapshot`).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Dict, Optional

from clawgym.common.savedir import ENDED_FILE, SNAPSHOTS_RELPATH, SUBMITTED_FILE  # noqa: F401  (kept importable from here)

#: Name of the snapshot copy inside a checkpoint dir.
STAMP_DIRNAME = "clawgym_snapshot"
#: Megatron's tracker of the newest complete checkpoint.
TRACKER_FILE = "latest_checkpointed_iteration.txt"
#: Format version of meta.json (2: with manifest.json).
FORMAT_VERSION = 2

CONFIG_FILE = "config.yaml"
RESOLVED_FILE = "config.resolved.yaml"
OVERRIDES_FILE = "overrides.yaml"
CHOICES_FILE = "choices.yaml"
PLAN_FILE = "launch_plan.json"
META_FILE = "meta.json"
STAMP_FILE = "stamp.json"
MANIFEST_FILE = "manifest.json"
# submitted.json and ended.json (how the job ended, as the launcher that followed it saw it:
# ``clawgym runs`` once Ray is gone) are named in clawgym.common.savedir, read by clawgym.common.ownership too.
#: How a tuner's trial ended (study, trial number, state, objective, steps), for ``clawgym runs``.
TRIAL_FILE = "trial.json"
#: Files a snapshot dir may hold beyond those its manifest lists (added after it was written).
UNLISTED_FILES = (MANIFEST_FILE, SUBMITTED_FILE, STAMP_FILE, ENDED_FILE, TRIAL_FILE)


class SnapshotError(Exception):
    """A snapshot could not be written or read; ``str()`` is the user-facing message."""


def read_json(path: Path) -> Optional[Dict[str, Any]]:
    """The JSON document in ``path``, None when it is missing or does not parse."""
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None
