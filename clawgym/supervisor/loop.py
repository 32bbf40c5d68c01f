"""The loop that follows a run to its end: poll the job and the run's monitors, stop the job for a
verdict, classify each end, record it, and resume from the last complete checkpoint while the
recovery table and the guard allow.

Where the job runs is the :class:`Runner`'s business (a Ray job on a local head or an existing
cluster, a SLURM allocation, a RayJob): the loop submits, polls, reads the evidence and stops only
through it, so the same loop serves every backend and wherever the supervisor itself lives.
A restart is a resume: the runner submits the recorded config into the same save dir with
``--load`` at the last complete checkpoint (what ``clawgym resume`` does).
"""

from __future__ import annotations

import time
from dataclasses import replace
from pathlib import Path
from typing import Any, Callable, Mapping, Optional, Protocol

from clawgym.common.secrets import redact_text
from clawgym.common.exit_codes import DONE as EXIT_DONE, FAILED as EXIT_FAILED, INTERRUPTED as EXIT_INTERRUPTED
from clawgym.supervisor import classes as C
from clawgym.snapshot.attempts import Attempts, read_attempts
from clawgym.snapshot.health import record_trip
from clawgym.supervisor.classify import Evidence, classify
from clawgym.supervisor.health import monitors_for
from clawgym.supervisor.monitor import RunState, Verdict
from clawgym.supervisor.recovery import DONE, RESUME, STOP, Decision, decide, recovery
from clawgym.supervisor.resume_point import ResumePoint, resume_point


class Runner(Protocol):
    """How the loop reaches the job (one implementation per place a job can run)."""

    backend: str  # a name of clawgym.plan.allocation.BACKENDS: the recovery table's column

    def submit(self, resume: ResumePoint) -> str:
        """Resubmit the recorded config from ``resume`` (a complete checkpoint); the submission id."""

    def running(self, submission_id: str) -> bool:
        ...

    def evidence(self, submission_id: str) -> Evidence:
        """What is known of the ended job (exit code, last lines, scheduler state, last rollout)."""

    def stop(self, submission_id: str) -> None:
        """Stop the job through what clawgym recorded, and wait until it is gone."""

    def user_stopped(self, submission_id: str) -> bool:
        """True when clawgym recorded a user's stop of this run (clawgym jobs stop, Ctrl-C)."""


def _iteration(ev: Evidence, point: ResumePoint) -> str:
    if ev.last_rollout is not None:
        return f" at iteration {ev.last_rollout}"
    return f" after iteration {point.iteration}" if point.iteration is not None else ""


def supervise(save_dir: str | Path, config: Mapping[str, Any], runner: Runner, first_submission: str, *,
              say: Callable[[str], None] = print, sleep: Callable[[float], None] = time.sleep,
              clock: Callable[[], float] = time.time, resumed_from: Optional[int] = None,
              first_attempt: Optional[int] = None) -> int:
    """Follow ``first_submission`` (attempt 1, already submitted) and every restart to the run's
    end; the exit status of clawgym.common.exit_codes (0 finished, 130 stopped by a user, 1 else).

    ``resumed_from``: the checkpoint ``first_submission`` resumed from (a SLURM job requeued into a new
    allocation); ``first_attempt``: the index in the record where this supervision's budget starts, when
    it began before this process (the earlier allocations of a requeued SLURM job)."""
    save = Path(save_dir)
    restart = config.get("restart") or {}
    enabled = bool(restart.get("enabled", True))
    max_attempts = int(restart.get("max_attempts", 3))
    poll_s = float(restart.get("poll_s", 10.0))
    num_rollout = (config.get("rollout") or {}).get("num_rollout")
    final = int(num_rollout) - 1 if num_rollout else None
    record: Attempts = read_attempts(save)
    # The record keeps the run's whole history (an earlier launch, a resume typed by hand); the
    # budget and the guard count only this supervision's attempts.
    first = len(record.attempts) if first_attempt is None else min(first_attempt, len(record.attempts))
    record.stopped = None
    sub = first_submission
    record.start(sub, resumed_from=resumed_from, now=clock())
    while True:
        attempt = record.last
        ours = record.attempts[first:]
        verdict = _follow(save, config, runner, sub, attempt.number, attempt.started or clock(), poll_s, sleep, clock)
        record_trip(save, verdict, attempt.number, sub, clock(), config)  # health.jsonl: runs/show/report
        ev = runner.evidence(sub)
        ev = replace(ev, final_rollout=ev.final_rollout if ev.final_rollout is not None else final,
                     stopped_by_user=ev.stopped_by_user or runner.user_stopped(sub),
                     # A runner's own verdict (e.g. SLURM's time-limit signal) stands when no monitor gave one.
                     verdict_cls=verdict.cls if verdict else ev.verdict_cls,
                     verdict_evidence=verdict.evidence if verdict else ev.verdict_evidence)
        c = classify(ev)
        # The evidence is a line of the job's output: masked before it is printed or recorded.
        c = replace(c, evidence=redact_text(c.evidence, config))
        point = resume_point(save)
        d = decide(ours, c.cls, runner.backend, max_attempts, point.iteration, enabled=enabled)
        if d.action == RESUME and final is not None and point.iteration is not None and point.iteration >= final:
            # The run's last rollout is saved complete (e.g. a trainer that ran on after its local head
            # was lost, until what was left of the head was stopped): a resume would train nothing and
            # end "early" at once, again and again.
            d = Decision(DONE, f"its last complete checkpoint {point.name} is the run's last rollout "
                         f"({final} of {final}): nothing is left to train")
        if verdict is not None and verdict.action == "stop" and d.action == RESUME:
            d = Decision(STOP, f"{c.title}: its monitor stops the run for good", "see the evidence; fix, then "
                         "`clawgym resume <save dir>`")
        record.end(c.cls, c.evidence, point.iteration, d.action, now=clock())
        note = point.incomplete_note()
        if note:
            say(f"[clawgym] {note}")
        total = max_attempts + 1 if enabled else 1
        head = (f"[clawgym] attempt {len(ours)} of {total}: {c.title}{_iteration(ev, point)} "
                f"(evidence: {c.evidence})")
        if d.action == DONE:
            record.stop("finished", d.why)
            if c.cls != C.FINISHED:
                say(f"{head}; the run is done: {d.why}")
            else:
                say(f"{head}; the run is done" if len(ours) > 1 else f"[clawgym] {d.why}")
            return EXIT_DONE
        if d.action == STOP:
            by = "user" if c.cls == C.STOPPED_BY_USER else "supervisor"
            if c.cls == C.CUDA_OOM:
                d = replace(d, fix=_oom_fix(save, config, d.fix))
            record.stop(by, d.why, d.fix)
            # The fix is a line of its own, marked: the foreground launcher shows only [clawgym] lines.
            say(f"{head}; stopped for good: {d.why}" + (f"\n[clawgym]   fix: {d.fix}" if d.fix else ""))
            return EXIT_INTERRUPTED if by == "user" else EXIT_FAILED
        how = recovery(c.cls, runner.backend).note
        say(f"{head}; " + (f"{how}; " if how else "") + f"resuming from {point.name}")
        # A lost node took its GPUs with it: a runner that can wait for them does (restart.node_wait_s)
        # before resubmitting, rather than submit a resume the capacity preflight refuses.
        wait = getattr(runner, "wait_for_room", None)
        short = wait(c.cls, say=say, sleep=sleep, stopped=lambda: runner.user_stopped(sub)) if callable(wait) else None
        if short is not None:
            by = "user" if runner.user_stopped(sub) else "supervisor"
            why, fix = short[0], short[1].replace("<save dir>", str(save))
            record.last.next = STOP
            record.stop(by, why, fix or None)
            say(f"[clawgym] stopped for good: {why}" + (f"\n[clawgym]   fix: {fix}" if fix else ""))
            return EXIT_INTERRUPTED if by == "user" else EXIT_FAILED
        if c.cls == C.CUDA_OOM:
            point = _move_after_oom(save, config, point, say)
        sub = runner.submit(point)
        record.start(sub, resumed_from=point.iteration, now=clock())


def _oom_fix(save: Path, config: Mapping[str, Any], fix: Optional[str]) -> Optional[str]:
    """A stop after an OOM says what the memory plan advises (clawgym/supervisor/oom.py advice_after_oom)."""
    from clawgym.supervisor.oom import advice_after_oom

    try:
        lines = advice_after_oom(config, str(save), gpu=(config.get("memory") or {}).get("gpu"))
    except Exception as exc:  # noqa: BLE001 - advice is a help: it never ends the supervision
        lines = [f"the memory plan cannot advise on this config ({type(exc).__name__}: {exc})"]
    advice = "the memory plan's advice (each move re-evaluated with it):\n" + "\n".join(f"    - {ln}" for ln in lines)
    return f"{fix}\n  {advice}" if fix else advice


def _move_after_oom(save: Path, config: Mapping[str, Any], point: ResumePoint,
                    say: Callable[[str], None]) -> ResumePoint:
    """The next attempt's layout after an OOM (clawgym/supervisor/oom.py), said either way; the user's
    keys are those the launch typed (its snapshot's overrides)."""
    from clawgym.snapshot.read import list_snapshots
    from clawgym.supervisor.oom import after_oom

    from clawgym.snapshot.layout import SnapshotError

    try:
        snaps = list_snapshots(save)
    except SnapshotError as exc:
        say(f"[clawgym] after the OOM the layout stays as it is: the launch's overrides cannot be read ({exc})")
        return point
    typed = list(snaps[0].overrides or []) if snaps else []
    move = after_oom(config, typed, gpu=(config.get("memory") or {}).get("gpu"))
    if not move.overrides:
        say(f"[clawgym] after the OOM the layout stays as it is: {move.why}")
        return point
    say(f"[clawgym] after the OOM the next attempt moves to {' '.join(move.overrides)}: {move.why}")
    return replace(point, overrides=tuple(move.overrides))


def _follow(save: Path, config: Mapping[str, Any], runner: Runner, sub: str, number: int, started: float,
            poll_s: float, sleep: Callable[[float], None], clock: Callable[[], float]) -> Optional[Verdict]:
    """Wait for the job to end, polling the run's monitors; a verdict stops the job (through the runner)."""
    monitors = monitors_for(config)
    while runner.running(sub):
        if runner.user_stopped(sub):
            runner.stop(sub)
            return None
        # A runner that copies the job's output into a file (and knows its address) hands both to
        # the monitors (the hang monitor watches the file); the Runner protocol asks for neither.
        log_file = getattr(runner, "log_file", None)
        state = RunState(save_dir=save, submission_id=sub, attempt=number, started=started, now=clock(),
                         config=config, log_file=log_file(sub) if callable(log_file) else None,
                         address=getattr(runner, "address", None))
        for m in monitors:
            verdict = m.poll(state)
            if verdict is not None:
                runner.stop(sub)
                return verdict
        sleep(poll_s)
    return None
