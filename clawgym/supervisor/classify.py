"""The class of one attempt's end, from the run's own evidence, with the line that shows it.

Pure: the loop gathers the :class:`Evidence` (exit code, the last lines of the job's output, the
Ray job's status and message, the SLURM state, the head's liveness, how far the trainer got) and
this module only reads it against the tables of :mod:`clawgym.supervisor.classes`.

The order of the questions is the order of trust: what clawgym itself recorded (a user's stop, a
monitor's verdict) before what the scheduler says, before the lines the trainer printed, before
the exit code (which proves nothing on its own: Megatron's fatal ``sys.exit()`` exits 0).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import List, Optional, Sequence

from clawgym.supervisor import classes as C

#: How much of an evidence line is kept (a traceback line can be very long).
EVIDENCE_CHARS = 300


@dataclass(frozen=True)
class Evidence:
    """What is known of an attempt once its job is over."""

    exit_code: Optional[int] = None  # the trainer's (Ray's driver_exit_code); None when unknown
    lines: Sequence[str] = ()  # the last lines of the job's output, oldest first
    ray_status: Optional[str] = None  # Ray JobStatus: SUCCEEDED, FAILED, STOPPED
    ray_message: Optional[str] = None
    slurm_state: Optional[str] = None  # sacct State, e.g. TIMEOUT, PREEMPTED, NODE_FAIL, CANCELLED
    head_alive: Optional[bool] = None  # False: the Ray head (or the cluster) no longer answers
    # Why the head is known lost beyond its silence (a head clawgym started whose GCS or raylet is gone).
    head_lost: Optional[str] = None
    stopped_by_user: bool = False  # clawgym recorded a user's stop (clawgym jobs stop, Ctrl-C)
    # The last rollout the trainer logged and the run's last (num_rollout - 1); finished needs both.
    last_rollout: Optional[int] = None
    final_rollout: Optional[int] = None
    verdict_cls: Optional[str] = None  # a monitor's Verdict ended the attempt (e.g. "hang")
    verdict_evidence: Optional[str] = None
    # Nodes the Ray cluster marked dead while the attempt ran (its node table), one line each.
    lost_nodes: Sequence[str] = ()


@dataclass(frozen=True)
class Classification:
    cls: str
    evidence: str  # the line a user reads
    # Where the evidence came from: "record", "monitor", "slurm", "ray", "log", "exit code".
    source: str
    pattern_source: Optional[str] = None  # the program file of the matched pattern, for a log line
    also: List[str] = field(default_factory=list)  # other classes seen in the output (after the first)

    @property
    def title(self) -> str:
        return C.CLASSES[self.cls].title

    @property
    def restartable(self) -> bool:
        return C.CLASSES[self.cls].restartable


#: Terminal colour codes (Ray colours its "(raylet)" prefixes): not part of the evidence a user reads.
_ANSI = re.compile(r"\x1b\[[0-9;]*m")


def _short(line: str) -> str:
    line = _ANSI.sub("", line).strip()
    return line if len(line) <= EVIDENCE_CHARS else line[:EVIDENCE_CHARS - 3] + "..."


def match_line(line: str) -> Optional[C.Pattern]:
    """The first pattern (in ``PATTERNS`` order) a line shows, or None."""
    for p in C.PATTERNS:
        if p.search(line):
            return p
    return None


def _from_lines(lines: Sequence[str]) -> Optional[Classification]:
    """The class of the highest-ranked pattern any line shows (a root cause before its effects:
    PATTERNS' order), with the first line that shows it."""
    rank = {id(p): i for i, p in enumerate(C.PATTERNS)}
    best: Optional[tuple] = None
    seen: List[str] = []
    for line in lines:
        p = match_line(line)
        if p is None:
            continue
        if p.cls not in seen:
            seen.append(p.cls)
        if best is None or rank[id(p)] < rank[id(best[0])]:
            best = (p, line)
    if best is None:
        return None
    p, line = best
    return Classification(p.cls, _short(line), "log", f"{p.program}: {p.source}",
                          also=[c for c in seen if c != p.cls])


def reached_end(ev: Evidence) -> bool:
    return ev.last_rollout is not None and ev.final_rollout is not None and ev.last_rollout >= ev.final_rollout


def classify(ev: Evidence) -> Classification:
    """The class of an attempt's end. Never raises; an end nothing explains is ``crashed`` or
    ``ended-early``, with the exit code as its evidence."""
    if ev.stopped_by_user:
        return Classification(C.STOPPED_BY_USER, "clawgym recorded the user's stop", "record")
    if ev.verdict_cls:
        return Classification(ev.verdict_cls, ev.verdict_evidence or ev.verdict_cls, "monitor")
    from_log = _from_lines(ev.lines)
    # A fatal line outranks "reached the end": a trainer can log its last rollout and die saving it.
    if reached_end(ev) and (from_log is None or not ev.exit_code) and ev.ray_status != C.RAY_STOPPED:
        return Classification(C.FINISHED, f"the trainer reached rollout {ev.last_rollout} of "
                              f"{ev.final_rollout} (the last)", "record")
    # sacct prints "CANCELLED by 1000": the state is the first word.
    state = next(iter((ev.slurm_state or "").split()), "").upper()
    if state in C.SLURM_STATES:
        return Classification(C.SLURM_STATES[state], f"SLURM job state {ev.slurm_state}", "slurm")
    if from_log is not None:
        if ev.lost_nodes and from_log.cls in C.AFTER_A_LOST_NODE:
            return Classification(C.NODE_LOST, _short(ev.lost_nodes[0]), "ray", also=[from_log.cls, *from_log.also])
        return from_log
    if ev.head_alive is False:
        return Classification(C.NODE_LOST, _short("the Ray head no longer answers"
                                                  + (f": {ev.head_lost}" if ev.head_lost else "")), "ray")
    if ev.ray_status == C.RAY_STOPPED or state == "CANCELLED":
        # Stopped by someone other than this clawgym (a `ray job stop`, an `scancel`): a person.
        what = f"Ray job status STOPPED{': ' + ev.ray_message if ev.ray_message else ''}" \
            if ev.ray_status == C.RAY_STOPPED else f"SLURM job state {ev.slurm_state}"
        return Classification(C.STOPPED_BY_USER, _short(what), "ray" if ev.ray_status else "slurm")
    if ev.lost_nodes:
        # No line names the end, but Ray marked a node of the cluster dead while the attempt ran: a driver
        # whose actor's node vanished at once dies of ActorUnavailableError ("The actor is temporarily
        # unavailable: RpcError ...") before the GCS's health check names the node (seen on
        # tests/fixtures/two_nodes.py's cluster); the node table says it afterwards.
        return Classification(C.NODE_LOST, _short(ev.lost_nodes[0]), "ray")
    if ev.exit_code:
        return Classification(C.CRASHED, f"the trainer exited {ev.exit_code}", "exit code")
    where = f" at rollout {ev.last_rollout} of {ev.final_rollout}" if ev.last_rollout is not None else ""
    return Classification(C.ENDED_EARLY, f"the trainer exited {ev.exit_code if ev.exit_code is not None else '?'}"
                          f"{where} before its last rollout", "exit code")
