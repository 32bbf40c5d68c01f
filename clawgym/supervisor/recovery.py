"""What the supervisor does after an attempt ends: the recovery table (class x backend) and the
budget and progress guard. Pure: the loop asks, records the answer, and acts on it.

A restart is a resume: the recorded config, the same save dir, ``--load`` at the last complete
checkpoint (:mod:`clawgym.supervisor.resume_point`), the path ``clawgym resume`` takes.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Dict, List, Optional, Sequence, Tuple

from clawgym.plan.allocation import BACKENDS
from clawgym.supervisor import classes as C
from clawgym.snapshot.attempts import Attempt

# Actions of the table.
DONE = "done"  # the run is over: nothing to do
STOP = "stop"  # stopped for good: restarting would end the same way (or a person said so)
RESUME = "resume"  # resubmit from the last complete checkpoint into the same save dir


@dataclass(frozen=True)
class Recovery:
    action: str
    # How, on this backend, in words a user reads (the console line and the guide say it).
    how: str
    # Said in the attempt's console line before "resuming from ...", where a restart does more than
    # resubmit (a new local head): None for a plain resubmission.
    note: Optional[str] = None


def _table() -> Dict[Tuple[str, str], Recovery]:
    t: Dict[Tuple[str, str], Recovery] = {}
    resubmit = {
        "local": "resubmitted to the local head from the last complete checkpoint",
        "existing": "resubmitted to the same cluster address from the last complete checkpoint",
        "slurm": "resubmitted into the same save dir from the last complete checkpoint",
        "kuberay": "resubmitted as a new RayJob from the last complete checkpoint on the shared volume",
    }
    for backend in BACKENDS:
        t[(C.FINISHED, backend)] = Recovery(DONE, "nothing: the run finished")
        t[(C.STOPPED_BY_USER, backend)] = Recovery(STOP, "never restarted: a person stopped it")
        t[(C.STARTUP_FAILURE, backend)] = Recovery(
            STOP, "never restarted: the same config fails the same way; the message says what to change")
        for cls, fc in C.CLASSES.items():
            if fc.restartable:
                t[(cls, backend)] = Recovery(RESUME, resubmit[backend])
            else:
                t.setdefault((cls, backend), Recovery(STOP, f"never restarted: {fc.title}; a restart would end "
                                                            "the same way"))
    # A lost local head: its GPUs must be free before a new head can take them.
    t[(C.NODE_LOST, "local")] = Recovery(
        RESUME, "a new local head started once the old one's GPUs are free, then resubmitted from the last "
        "complete checkpoint",
        note="a new local head is started once what is left of the old one is gone (its GPUs free)")
    return t


TABLE: Dict[Tuple[str, str], Recovery] = _table()


def recovery(cls: str, backend: str) -> Recovery:
    return TABLE[(cls, backend)]


@dataclass(frozen=True)
class Decision:
    action: str  # DONE, STOP or RESUME
    why: str
    fix: Optional[str] = None  # for STOP: what to change


def decide(attempts: Sequence[Attempt], cls: str, backend: str, max_attempts: int,
           checkpoint_now: Optional[int], *, enabled: bool = True) -> Decision:
    """What to do after the last of ``attempts`` ended with ``cls`` leaving ``checkpoint_now``
    (the tracker's iteration, None when there is none). ``attempts`` includes the one that ended."""
    rec = recovery(cls, backend)
    title = C.CLASSES[cls].title
    if rec.action == DONE:
        return Decision(DONE, "the run finished")
    if rec.action == STOP:
        fix = None if cls == C.STOPPED_BY_USER else "fix what the message names, then launch again with train.py"
        return Decision(STOP, f"{title}: {rec.how}", fix)
    if not enabled:
        return Decision(STOP, f"{title}: restart.enabled=false",
                        "`clawgym resume <save dir>` resumes it from its last complete checkpoint")
    restarts = len(attempts) - 1
    if restarts >= max_attempts:
        return Decision(STOP, f"{title}: the run used its {max_attempts} restart(s) (restart.max_attempts)",
                        f"look at why the attempts ended (clawgym show <save dir>); `clawgym resume <save dir>` "
                        f"goes on, or raise restart.max_attempts (now {max_attempts})")
    if checkpoint_now is None:
        return Decision(STOP, f"{title}: no complete checkpoint to resume from (slime would start over at rollout 0)",
                        "lower checkpoint.save_interval so the run saves before it dies, then launch it again")
    # Progress: two attempts in a row that left no newer complete checkpoint than they started from.
    stalled = _no_progress(attempts, checkpoint_now)
    if len(stalled) >= 2:
        return Decision(STOP, f"{title}: attempts {stalled[0]} and {stalled[1]} in a row ended without a new "
                        f"complete checkpoint (still iter_{checkpoint_now:07d})",
                        "the run dies before its next save: look at the attempts' evidence (clawgym show), "
                        "lower checkpoint.save_interval, or fix the cause, then `clawgym resume <save dir>`")
    # The same class at the same iteration twice: restarting again would meet it a third time.
    same = [a for a in attempts[:-1] if a.cls == cls and a.checkpoint_at_end == checkpoint_now]
    if same:
        fix = ("the run needs more memory at this point: see the memory plan's advice "
               "(python train.py dry_run=true with the recorded overrides) and resume with a layout that has "
               "more headroom" if cls == C.CUDA_OOM else
               "the same failure twice at the same point is not transient: fix its cause, then "
               "`clawgym resume <save dir>`")
        return Decision(STOP, f"{title} twice at iteration {checkpoint_now} (attempts {same[0].number} and "
                        f"{attempts[-1].number})", fix)
    return Decision(RESUME, f"{title}: {rec.how}")


def _no_progress(attempts: Sequence[Attempt], checkpoint_now: Optional[int]) -> List[int]:
    """Numbers of the trailing attempts that left no checkpoint newer than they resumed from."""
    out: List[int] = []
    for i, a in enumerate(reversed(attempts)):
        end = checkpoint_now if i == 0 else a.checkpoint_at_end
        if end is not None and (a.resumed_from is None or end > a.resumed_from):
            break
        out.append(a.number)
    return sorted(out)
