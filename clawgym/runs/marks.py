"""What ``clawgym report`` (and ``runs --plot``) marks on a run's curves: where an attempt ended and the
run was restarted, where a hang was caught, where a health rule tripped.

Read from the save dir as the supervisor left it: ``clawgym/attempts.json`` (each attempt's end, class
and the checkpoint the next one resumed from) and ``clawgym/health.jsonl`` (each tripped rule or hang:
its time, metric, step and stack file). A mark is placed on a curve's own step axis (``train/*`` at
the train step, ``rollout/*`` and ``perf/*`` at the rollout step): at the step the tripped rule
names when it read that very metric, else at the last step of that metric the attempt logged (its
own events folder, ``<save>/tensorboard/<submission id>/``) by the time it ended or tripped.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import List, Optional, Tuple

from clawgym.runs.discover import Run

RESTART, HANG, RULE = "restart", "hang", "rule"
#: Classes of an end that is no restart mark (nothing failed).
NOT_MARKED = ("finished",)
#: Seconds after a recorded time a point still counts as logged by then (the loop records the end
#: after stopping the job; a writer flushes late).
SLACK_S = 5.0


@dataclass(frozen=True)
class Mark:
    kind: str  # restart | hang | rule
    label: str  # what the figure and the page say
    time: float  # when it happened (the attempt's end, the trip)
    submission_id: Optional[str]
    key: Optional[str] = None  # the metric a tripped rule read
    step: Optional[int] = None  # the step the rule named (on that metric's axis)
    cls: str = ""  # the class or rule, written beside the line on a figure


def run_marks(run: Run) -> List[Mark]:
    """Every mark of a run, oldest first: one per attempt that ended other than finished (a hang's or a
    rule's kind when a recorded trip ended it), and one per trip that ended no recorded attempt."""
    from clawgym.snapshot.attempts import read_attempts
    from clawgym.snapshot.health import read_trips

    attempts = read_attempts(run.save_dir).attempts
    trips = read_trips(run.save_dir)
    used = set()
    out: List[Mark] = []
    for a, nxt in zip(attempts, [*attempts[1:], None]):
        if a.ended is None or not a.cls or a.cls in NOT_MARKED:
            continue
        trip = next((i for i, t in enumerate(trips) if i not in used and t.submission_id == a.submission_id
                     and t.rule == a.cls), None)
        then = (f"; resumed from iter_{nxt.resumed_from:07d}" if nxt is not None and nxt.resumed_from is not None
                else "; restarted from scratch" if nxt is not None else "; stopped")
        if trip is not None:
            used.add(trip)
            t = trips[trip]
            what = f"{t.key} = {t.value}" if t.key and t.value else t.rule
            kind = HANG if t.rule == "hang" else RULE
            out.append(Mark(kind, f"attempt {a.number}: {t.rule} ({what}){then}", t.time, a.submission_id,
                            t.key, t.step, t.rule))
        else:
            out.append(Mark(RESTART, f"attempt {a.number}: {a.cls}{then}", float(a.ended), a.submission_id,
                            cls=a.cls))
    for i, t in enumerate(trips):
        if i in used:
            continue
        what = f"{t.key} = {t.value}" if t.key and t.value else t.rule
        out.append(Mark(HANG if t.rule == "hang" else RULE, f"{t.rule} ({what})", t.time, t.submission_id,
                        t.key, t.step, t.rule))
    return sorted(out, key=lambda m: m.time)


def position(mark: Mark, run: Run, metric: str) -> Optional[int]:
    """The step of ``metric``'s axis where ``mark`` goes; None when it cannot be placed on that curve."""
    if mark.key == metric and mark.step is not None:
        return mark.step
    points = run.scalars_of(mark.submission_id).get(metric) or []
    by_then = [p.step for p in points if p.wall_time <= mark.time + SLACK_S]
    if by_then:
        return max(by_then)
    if points:
        return max(p.step for p in points)
    # No folder of its own (an older record): the run's last point of the metric logged by then.
    merged = [p.step for p in run.scalars().get(metric) or [] if p.wall_time <= mark.time + SLACK_S]
    return max(merged) if merged else None


def placed(run: Run, metric: str) -> List[Tuple[int, Mark]]:
    """(step, mark) for every mark of ``run`` that has a place on ``metric``'s curve."""
    out = []
    for m in run_marks(run):
        step = position(m, run, metric)
        if step is not None:
            out.append((step, m))
    return out
