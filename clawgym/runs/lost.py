"""GPU time lost to a run's restarts: one definition (:func:`gpu_time_lost`), and what it is read from.

Per restart (an attempt the supervisor ended with ``next: resume`` in ``attempts.json``, and the
attempt that followed it in the same save dir; an attempt stopped for good and launched again by
hand later is no restart):

    lost = GPUs x ( (back_at - failed_at)  +  redone x step_s )

- ``failed_at``: the failed attempt's last sign of progress, the wall time of the newest point it
  logged (so a hang's stall and the partial step a crash cut are lost time); its recorded end
  (``attempts.json``) when it logged nothing;
- ``back_at``: the next attempt's first training step (the first ``train/*`` point it logged; its
  first rollout-step point when it logged no ``train/*``); when the next attempt never trained, its
  recorded end (the restart after it counts from there, so no second is counted twice); while it
  is still starting, now;
- ``redone``: the iterations the failed attempt completed beyond the checkpoint the next attempt
  loaded (``last step - resumed_from``; every step plus one when it started over from scratch):
  the next attempt trains them again;
- ``step_s``: the run's measured step time, the mean of ``perf/step_time`` (slime's), else the
  median gap between consecutive rollout steps' wall times;
- ``GPUs``: the GPUs the run holds (:func:`clawgym.plan.build.gpus_required` of its config).

The run's total is the sum over its restarts; the last attempt's end is no restart (nothing
comes after it) and counts nothing. Unknown (None) when a part cannot be measured: the GPUs, or a
step time where steps were redone.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

from clawgym.runs import events as ev

#: Tags whose step is the rollout step (the step axis ``redone`` counts on).
ROLLOUT_STEP_TAGS = ("rollout/raw_reward", "perf/rollout_time", "perf/step_time")
STEP_TIME = "perf/step_time"
PROGRESS_PREFIXES = ("rollout/", "train/", "perf/", "eval/")


@dataclass(frozen=True)
class Restart:
    """One restart, as :func:`gpu_time_lost` reads it (times in seconds since the epoch)."""

    failed_at: float
    back_at: Optional[float]  # None: the next attempt has not trained yet (``now`` is used)
    last_step: Optional[int]  # the failed attempt's last completed rollout step (None: it logged none)
    resumed_from: Optional[int]  # the checkpoint the next attempt loaded (None: it started over)
    after_attempt: int = 0  # the failed attempt's number (for the breakdown)


@dataclass(frozen=True)
class Lost:
    after_attempt: int
    idle_s: float  # back_at - failed_at
    redone: int  # iterations trained again
    lost_s: Optional[float]  # GPU-seconds; None when not measurable


def redone_steps(last_step: Optional[int], resumed_from: Optional[int]) -> int:
    if last_step is None:
        return 0
    if resumed_from is None:
        return last_step + 1
    return max(0, last_step - resumed_from)


def gpu_time_lost(restarts: Sequence[Restart], gpus: Optional[int], step_s: Optional[float],
                  now: float) -> Tuple[Optional[float], List[Lost]]:
    """(total GPU-seconds lost, per restart): the definition in this module's docstring. Pure."""
    out: List[Lost] = []
    total: Optional[float] = 0.0
    for r in restarts:
        idle = max(0.0, (r.back_at if r.back_at is not None else now) - r.failed_at)
        redone = redone_steps(r.last_step, r.resumed_from)
        if gpus is None or (redone and step_s is None):
            lost = None
        else:
            lost = gpus * (idle + redone * (step_s or 0.0))
        out.append(Lost(r.after_attempt, idle, redone, lost))
        total = None if total is None or lost is None else total + lost
    return (total if restarts else 0.0), out


# ---------------------------------------------------------------- what it is read from

@dataclass(frozen=True)
class AttemptEvents:
    """What one attempt's events folder (``<save>/tensorboard/<submission id>/``) shows."""

    last_progress: Optional[float] = None  # newest wall time of any point
    first_train: Optional[float] = None  # first train/* point (else first rollout-step point)
    last_step: Optional[int] = None  # newest rollout step


def attempt_events(scalars: Mapping[str, List[ev.Point]]) -> AttemptEvents:
    walls = [p.wall_time for tag, pts in scalars.items() if tag.startswith(PROGRESS_PREFIXES) for p in pts]
    train = [p.wall_time for tag, pts in scalars.items() if tag.startswith("train/") for p in pts]
    rollout = [p for tag in ROLLOUT_STEP_TAGS for p in scalars.get(tag, [])]
    first = min(train) if train else (min(p.wall_time for p in rollout) if rollout else None)
    return AttemptEvents(max(walls) if walls else None, first, max((p.step for p in rollout), default=None))


def measured_step_s(scalars: Mapping[str, List[ev.Point]]) -> Optional[float]:
    """Mean ``perf/step_time``, else the median gap between consecutive rollout steps."""
    times = [p.value for p in scalars.get(STEP_TIME, []) if p.value == p.value and p.value > 0]
    if times:
        return sum(times) / len(times)
    by_step: Dict[int, float] = {}
    for tag in ROLLOUT_STEP_TAGS:
        for p in scalars.get(tag, []):
            by_step[p.step] = max(by_step.get(p.step, 0.0), p.wall_time)
    steps = sorted(by_step)
    gaps = [(by_step[b] - by_step[a]) / (b - a) for a, b in zip(steps, steps[1:]) if by_step[b] > by_step[a]]
    return statistics.median(gaps) if gaps else None


def restarts_of(attempts: Sequence[Any], events: Mapping[str, AttemptEvents]) -> List[Restart]:
    """The restarts of a run from its recorded attempts (clawgym.snapshot.attempts.Attempt) and
    each attempt's events."""
    out: List[Restart] = []
    for a, b in zip(attempts, attempts[1:]):
        if a.next != "resume":
            # Not restarted by the supervisor (stopped for good, then launched again by someone, maybe
            # days later): no restart, no lost time.
            continue
        ea = events.get(a.submission_id or "") or AttemptEvents()
        eb = events.get(b.submission_id or "") or AttemptEvents()
        failed_at = ea.last_progress if ea.last_progress is not None else (a.ended or a.started)
        if failed_at is None:
            continue
        back_at = eb.first_train if eb.first_train is not None else b.ended
        out.append(Restart(float(failed_at), back_at, ea.last_step, b.resumed_from, a.number))
    return out


def run_gpus(config: Mapping[str, Any]) -> Optional[int]:
    try:
        from clawgym.plan.build import gpus_required

        return int(gpus_required(config))
    except Exception:  # noqa: BLE001 - a config from an older clawgym, or none: the GPUs are not known
        return None


def lost_of_run(run: Any, attempts: Sequence[Any], now: float) -> Tuple[Optional[float], List[Lost]]:
    """GPU-seconds a run (clawgym.runs.discover.Run) lost to its restarts, and the breakdown (0 without
    a restart): its recorded attempts, each attempt's own events, its measured step time and GPUs."""
    if len(attempts) < 2:
        return 0.0, []
    events = {a.submission_id: attempt_events(run.scalars_of(a.submission_id)) for a in attempts if a.submission_id}
    return gpu_time_lost(restarts_of(attempts, events), run_gpus(run.config), measured_step_s(run.scalars()), now)
