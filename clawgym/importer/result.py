"""What an import found, wrote and verified (:class:`ImportResult`), and the refusal when nothing could be imported."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Optional

from clawgym.importer.parity import Difference


class ImportFailure(Exception):
    """Nothing could be imported (no script, no job submitted, bad arguments)."""


@dataclass
class ImportResult:
    """What an import found, wrote and verified."""

    script: Path
    flavour: str
    name: str
    path: Optional[Path]
    # Group option choices and the experiment body (nested), as written.
    choices: Dict[str, str]
    body: Dict[str, Any]
    # Differences left after verification (counted).
    differences: List[Difference] = field(default_factory=list)
    # Deliberate differences (shown, not counted).
    deliberate: List[Difference] = field(default_factory=list)
    # What the script does that an experiment cannot express (counted).
    inexpressible: List[str] = field(default_factory=list)
    # Cleanup and probes clawgym replaces (shown).
    ignored: List[str] = field(default_factory=list)
    # Validation problems of the written experiment (counted).
    violations: List[str] = field(default_factory=list)
    notes: List[str] = field(default_factory=list)
    # Setup steps of the script (installs, downloads, conversions): prerequisites, listed.
    setup: List[str] = field(default_factory=list)
    # Probes the stand-ins answered, with the answer.
    answered: List[str] = field(default_factory=list)
    # Servers the script starts itself (reproduced as services.*).
    services: List[str] = field(default_factory=list)
    # Keys the experiment leaves to give at launch (``???``), each with what to give: a script
    # written for a cluster of several nodes runs where that cluster is (ray.address).
    left_to_set: Dict[str, str] = field(default_factory=dict)
    # The values the import verified them with (shown in the command to run).
    launch_with: Dict[str, str] = field(default_factory=dict)
    # The experiment's text when it was not written (a failed import writes nothing).
    text: str = ""
    command: str = ""
    # Compared with an existing experiment (--check) instead of writing one.
    checked: bool = False

    @property
    def ok(self) -> bool:
        return not (self.differences or self.inexpressible or self.violations)
