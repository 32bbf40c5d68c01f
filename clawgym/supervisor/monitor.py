"""The boundary between the supervisor's loop and the monitors it polls while a job runs.

The loop owns the job (it stops it through what clawgym recorded, records the attempt, decides
whether to resume); a monitor only looks. Each poll the loop hands every monitor the same
:class:`RunState`; a monitor answers None (nothing to act on) or a :class:`Verdict`. The loop stops
the job for a verdict and ends the attempt with the verdict's class: ``action="end"`` lets the
recovery table decide (a ``hang`` restarts from the last complete checkpoint), ``action="stop"``
stops the run for good (a NaN loss: restarting would train on the same garbage).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, List, Mapping, Optional, Protocol


@dataclass(frozen=True)
class RunState:
    """What the loop knows of the running attempt, as of this poll."""

    save_dir: Path
    submission_id: str
    attempt: int  # 1 for the first launch, 2 for the first restart, ...
    started: float  # time.time() when this attempt's job was submitted
    now: float
    config: Mapping[str, Any]  # the run's resolved plain config (as written)
    log_file: Optional[Path] = None  # the job's output as the launcher writes it
    address: Optional[str] = None  # the Ray dashboard the job runs on, if any


@dataclass(frozen=True)
class Verdict:
    """A monitor's finding: end the attempt with ``cls``, shown with ``evidence``."""

    cls: str  # a failure class of supervisor.classes (e.g. "hang", "nan-loss")
    evidence: str  # the line a user reads: the metric and its value, the stall time, ...
    action: str = "end"  # "end": the recovery table decides; "stop": stopped for good
    files: List[Path] = field(default_factory=list)  # e.g. the stack dump written into the save dir


class Monitor(Protocol):
    """Something the loop polls while a job runs."""

    name: str

    def poll(self, state: RunState) -> Optional[Verdict]:
        ...
