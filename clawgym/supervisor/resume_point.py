"""Where a restart resumes: the last complete checkpoint, and only that.

Megatron writes ``latest_checkpointed_iteration.txt`` after a save completes (rank 0, after the
barrier or in the async finalize), so an ``iter_*`` newer than the tracker is a save cut short:
it is reported and never loaded. slime, finding no tracker under ``--load``, silently starts over
from ``--ref-load`` at rollout 0 (fork ``slime/utils/arguments.py`` L1672-1700): a "resume" with
no tracker is refused here, never handed to the trainer (run-supervision.md, section 2).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Tuple, List, Optional

from clawgym.snapshot.checkpoints import list_checkpoints, read_tracker
from clawgym.snapshot.layout import TRACKER_FILE


@dataclass(frozen=True)
class ResumePoint:
    save_dir: Path
    iteration: Optional[int]  # the tracker's iteration, when its iter_* dir is there
    incomplete: List[int] = field(default_factory=list)  # iter_* newer than the tracker: never loaded
    problem: Optional[str] = None  # why no resume is possible (then iteration is None)
    fix: Optional[str] = None
    # Overrides the next attempt adds to the recorded config (after an OOM: a layout with more headroom).
    overrides: Tuple[str, ...] = ()

    @property
    def name(self) -> str:
        return f"iter_{self.iteration:07d}" if self.iteration is not None else "-"

    def incomplete_note(self) -> Optional[str]:
        if not self.incomplete:
            return None
        names = ", ".join(f"iter_{i:07d}" for i in self.incomplete)
        return (f"{names} in {self.save_dir} {'is' if len(self.incomplete) == 1 else 'are'} newer than "
                f"{TRACKER_FILE} ({self.iteration if self.iteration is not None else 'absent'}): a save cut "
                "short, not loaded")


def resume_point(save_dir: str | os.PathLike) -> ResumePoint:
    """The last complete checkpoint of a save dir, the incomplete ones beside it, or why none."""
    save = Path(save_dir)
    tracker = read_tracker(save)
    ckpts = list_checkpoints(save)
    newer = [c.iteration for c in ckpts if tracker is None or c.iteration > tracker]
    if tracker is None:
        return ResumePoint(save, None, newer,
                           f"no {TRACKER_FILE} in {save}: slime would quietly start over from --ref-load at "
                           "rollout 0, not resume",
                           "let the run reach its first save (checkpoint.save_interval, lower it so a restart "
                           "has something to resume), then `clawgym resume` it; or launch it afresh with train.py")
    if not any(c.iteration == tracker for c in ckpts):
        return ResumePoint(save, None, newer,
                           f"{TRACKER_FILE} in {save} names iteration {tracker}, but iter_{tracker:07d}/ is not there",
                           f"restore iter_{tracker:07d}/ into {save}, or write the iteration of a complete iter_* "
                           f"dir into {TRACKER_FILE}")
    return ResumePoint(save, tracker, newer)
