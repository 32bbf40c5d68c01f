"""What a launch was beyond its config (overrides, group choices, origin) and facts about the
machine it ran on (package versions, git checkouts), as a snapshot records them."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, Iterator, List, Optional, Sequence

from clawgym.config.schema import GROUPS

#: Packages whose versions a snapshot records (read from metadata; nothing is imported).
VERSIONED_PACKAGES = ("clawgym", "hydra-core", "omegaconf", "ray", "wandb")


# ---------------------------------------------------------------- what the launch was

@dataclass
class LaunchRecord:
    """What a launch knows beyond the config, for launches outside ``@hydra.main``."""

    # Command-line overrides that produced the config.
    overrides: Optional[List[str]] = None
    # Chosen option per config group.
    choices: Optional[Dict[str, str]] = None
    # How the launch came about (e.g. {"command": "resume", "from_snapshot": ...}).
    origin: Dict[str, Any] = field(default_factory=dict)


    @classmethod
    def from_hydra(cls, hydra_node: Any, *, command: str = "hydra") -> "LaunchRecord":
        """The record in a job's ``hydra`` node (``HydraConfig.get()`` or a sweep job's config.hydra)."""
        choices = {str(k): str(v) for k, v in hydra_node.runtime.choices.items() if k in GROUPS and v is not None}
        return cls(overrides=[str(o) for o in hydra_node.overrides.task], choices=choices,
                   origin={"command": command, "mode": str(hydra_node.mode)})


_RECORD: Optional[LaunchRecord] = None


@contextlib.contextmanager
def recorded_launch(record: LaunchRecord) -> Iterator[LaunchRecord]:
    """Make ``record`` what :func:`clawgym.snapshot.write.write_launch_snapshot` stores for launches inside the block.

    ``clawgym resume`` uses it: the launch runs outside Hydra, so Hydra cannot say.
    """
    global _RECORD
    previous, _RECORD = _RECORD, record
    try:
        yield record
    finally:
        _RECORD = previous


def current_record() -> LaunchRecord:
    """What a launch without an explicit record is: the one of :func:`recorded_launch`, else the
    current Hydra job's."""
    return _RECORD if _RECORD is not None else _hydra_record()


def _hydra_record() -> LaunchRecord:
    """Overrides and group choices of the current Hydra job, when there is one."""
    from hydra.core.hydra_config import HydraConfig

    if not HydraConfig.initialized():
        return LaunchRecord()
    hc = HydraConfig.get()
    if _has_sweep(hc.overrides.task):
        # The multirun's primary config (a sweep launcher process), not one job's: unknown.
        return LaunchRecord(origin={"command": "hydra", "mode": str(hc.mode)})
    return LaunchRecord.from_hydra(hc)


def _has_sweep(overrides: Sequence[str]) -> bool:
    from hydra.core.override_parser.overrides_parser import OverridesParser

    try:
        return any(o.is_sweep_override() for o in OverridesParser.create().parse_overrides(list(overrides)))
    except Exception:  # noqa: BLE001 - unparsable means we cannot tell; do not guess
        return True


# ---------------------------------------------------------------- facts about the machine

def package_versions() -> Dict[str, Optional[str]]:
    # Imported here: importlib.metadata costs ~15 ms, and a dry run imports this module but never
    # asks for versions (only a launch's snapshot does).
    from importlib import metadata

    out: Dict[str, Optional[str]] = {}
    for name in VERSIONED_PACKAGES:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            out[name] = None
    out["python"] = sys.version.split()[0]
    return out


def checkout_git_info(path: str | os.PathLike, root: str | os.PathLike) -> Dict[str, Any]:
    """:func:`git_info` of a run's own code (``paths.root``, slime, Megatron): a commit only when the
    git checkout holding ``path`` lies inside ``root``. One that holds ``root`` itself is someone
    else's clone (a demo made inside clawgym's clone): its commit is not what the run ran."""
    info = git_info(path)
    top = info.get("toplevel")
    if info.get("commit") and top:
        here, mine = Path(top).resolve(), Path(root).resolve()
        if here != mine and mine not in here.parents:
            return {**info, "commit": None, "dirty": None,
                    "error": f"no git checkout of its own (the enclosing clone {here} is not this run's code)"}
    return info


def git_info(path: str | os.PathLike) -> Dict[str, Any]:
    """Commit and dirty flag of the checkout at ``path``; ``error`` says why when there is none."""
    p = Path(path)
    info: Dict[str, Any] = {"path": str(p), "commit": None, "dirty": None}
    if not p.is_dir():
        return {**info, "error": "directory not found"}

    def git(*args: str) -> subprocess.CompletedProcess:
        # No optional locks: never contend with the user's own git commands in that checkout.
        return subprocess.run(["git", "-C", str(p), *args], capture_output=True, text=True, timeout=20,
                              env={**os.environ, "GIT_OPTIONAL_LOCKS": "0"})

    try:
        head = git("rev-parse", "HEAD")
        if head.returncode != 0:
            return {**info, "error": "not a git checkout"}
        status = git("status", "--porcelain", "--untracked-files=no")
        top = git("rev-parse", "--show-toplevel")
    except FileNotFoundError:
        return {**info, "error": "git is not installed"}
    except subprocess.TimeoutExpired:
        return {**info, "error": "git timed out"}
    return {**info, "commit": head.stdout.strip(), "dirty": bool(status.stdout.strip()),
            "toplevel": top.stdout.strip() or None}
