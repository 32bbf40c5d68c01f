"""The attempts of a run, recorded in its save dir beside the snapshots (written by the supervisor,
clawgym/supervisor/loop.py; read by ``clawgym runs`` and ``clawgym show``).

``<save>/clawgym/attempts.json`` (one per save dir: a restart is a resume into the same save dir,
so every attempt of a run lands in the same file). Written whole through a temp file and a rename
after every change, so a reader (``clawgym runs``, ``clawgym show``) never sees half of it and a
supervisor that dies mid-write leaves the previous version.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Optional

from clawgym.common.fsutil import atomic_write_text
from clawgym.common.savedir import ATTEMPTS_RELPATH
FORMAT = 1
#: The class of an attempt a person stopped (clawgym.supervisor.classes.STOPPED_BY_USER, named here for
#: the writers below the supervisor: a SLURM job cancelled between two allocations is closed by its reader).
USER_STOPPED = "stopped-by-user"


@dataclass
class Attempt:
    number: int  # 1: the launch; 2: the first restart, ...
    submission_id: Optional[str] = None
    started: Optional[float] = None
    ended: Optional[float] = None
    cls: Optional[str] = None  # a class of supervisor.classes, once it ended
    evidence: Optional[str] = None
    # The last complete checkpoint this attempt resumed from, and the one it left.
    resumed_from: Optional[int] = None
    checkpoint_at_end: Optional[int] = None
    # What the supervisor did next: "resume", "stop", "done".
    next: Optional[str] = None


@dataclass
class Attempts:
    save_dir: Path
    attempts: List[Attempt] = field(default_factory=list)
    # Set once the run stopped for good: {"by": "user"|"supervisor"|"finished", "why": ..., "fix": ...}.
    stopped: Optional[Dict[str, Any]] = None

    @property
    def path(self) -> Path:
        return attempts_path(self.save_dir)

    @property
    def last(self) -> Optional[Attempt]:
        return self.attempts[-1] if self.attempts else None

    def start(self, submission_id: Optional[str], resumed_from: Optional[int] = None,
              now: Optional[float] = None) -> Attempt:
        a = Attempt(len(self.attempts) + 1, submission_id, time.time() if now is None else now,
                    resumed_from=resumed_from)
        self.attempts.append(a)
        self.write()
        return a

    def end(self, cls: str, evidence: str, checkpoint_at_end: Optional[int], next_: str,
            now: Optional[float] = None) -> Attempt:
        a = self.attempts[-1]
        a.ended = time.time() if now is None else now
        a.cls, a.evidence, a.checkpoint_at_end, a.next = cls, evidence, checkpoint_at_end, next_
        self.write()
        return a

    def stop(self, by: str, why: str, fix: Optional[str] = None) -> None:
        self.stopped = {"by": by, "why": why, "fix": fix, "at": time.time()}
        self.write()

    def to_dict(self) -> Dict[str, Any]:
        return {"format": FORMAT, "attempts": [asdict(a) for a in self.attempts], "stopped": self.stopped}

    def write(self) -> None:
        atomic_write_text(self.path, json.dumps(self.to_dict(), indent=2, sort_keys=True) + "\n")


def attempts_path(save_dir: str | os.PathLike) -> Path:
    return Path(save_dir) / ATTEMPTS_RELPATH


def read_attempts(save_dir: str | os.PathLike) -> Attempts:
    """The recorded attempts of a save dir (none when it has no record or one that does not parse)."""
    save = Path(save_dir)
    try:
        data = json.loads(attempts_path(save).read_text())
    except (OSError, ValueError):
        return Attempts(save)
    known = set(Attempt.__dataclass_fields__)
    items = [Attempt(**{k: v for k, v in a.items() if k in known})
             for a in data.get("attempts") or [] if isinstance(a, dict) and "number" in a]
    return Attempts(save, items, data.get("stopped"))
