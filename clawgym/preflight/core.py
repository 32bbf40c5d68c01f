"""Checklist machinery: results, the report, the error and the check context.

A check is a function ``check(ctx) -> str``: it returns a one-line detail on success
(e.g. "2000 tasks"), raises :class:`CheckFailed` with the problem and the fix, or
raises :class:`NotApplicable` when it has nothing to check for this run (e.g. GPUs on
an existing cluster).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple

OK, FAILED, SKIPPED, NOT_APPLICABLE = "ok", "failed", "skipped", "n/a"
#: A check whose input a failed check was to provide (no image check without an engine).
NOT_RUN = "not run"
#: A check that passed with a warning (the run starts; the line says what to change).
WARNED = "warning"

#: Checklist marks per status.
MARKS = {OK: "✓", FAILED: "✗", SKIPPED: "-", NOT_APPLICABLE: "-", NOT_RUN: "·", WARNED: "!"}


class CheckFailed(Exception):
    """Raised by a check: what is wrong (naming key and value) and what to do."""

    def __init__(self, problem: str, fix: str):
        self.problem = problem
        self.fix = fix
        super().__init__(f"{problem}; fix: {fix}")


class CheckWarning(Exception):
    """Raised by a check that passes with a warning: what costs the run (naming key and value) and what to do."""

    def __init__(self, problem: str, fix: str):
        self.problem = problem
        self.fix = fix
        super().__init__(f"{problem}; fix: {fix}")


class NotApplicable(Exception):
    """Raised by a check that has nothing to verify for this run; the message says why."""


@dataclass
class CheckResult:
    """One line of the checklist."""

    # Stable check name (what ``skip_checks`` takes).
    name: str
    # Short human title.
    title: str
    # One of ok, failed, skipped, n/a.
    status: str
    # Detail on success, the problem on failure, the reason for a skip.
    detail: str = ""
    # How to fix a failure.
    fix: str = ""

    def format(self) -> str:
        line = f"  {MARKS[self.status]} {self.name:<10} {self.title}"
        if self.status == SKIPPED:
            line += f": skipped ({self.detail})"
        elif self.status == NOT_RUN:
            line += f": not run ({self.detail})"
        elif self.status == NOT_APPLICABLE:
            line += f": not checked ({self.detail})"
        elif self.detail:
            line += f": {self.detail}"
        if self.status in (FAILED, WARNED) and self.fix:
            line += f"\n               fix: {self.fix}"
        from clawgym.common.secrets import redact

        # A detail may quote a config value or a tool's output: never a secret's value.
        return redact(line)


@dataclass
class Report:
    """The checklist of one preflight run, in check order."""

    # Results so far.
    results: List[CheckResult] = field(default_factory=list)
    # Heading line (run name and backend).
    heading: str = "preflight"

    @property
    def ok(self) -> bool:
        return all(r.status != FAILED for r in self.results)

    @property
    def failed(self) -> Optional[CheckResult]:
        """The first failed check."""
        return next((r for r in self.results if r.status == FAILED), None)

    @property
    def failures(self) -> List[CheckResult]:
        """Every failed check, in check order."""
        return [r for r in self.results if r.status == FAILED]

    def by_name(self) -> Dict[str, CheckResult]:
        return {r.name: r for r in self.results}

    def format(self) -> str:
        return "\n".join([f"{self.heading}:", *(r.format() for r in self.results)])

    __str__ = format


class PreflightError(Exception):
    """One or more failed checks (or a failed leftover cleanup); nothing has been started.

    ``check`` names the first failed check, ``checks`` every one. ``str()`` is the
    failing lines with their fixes; :meth:`report` is the whole checklist.
    """

    def __init__(self, report: Report):
        self.checklist = report
        failures = report.failures
        self.checks = [f.name for f in failures]
        self.check = self.checks[0] if self.checks else ""
        summary = "\n".join(f"preflight check '{f.name}' failed: {f.detail}\n  fix: {f.fix}" for f in failures) \
            or "preflight failed"
        from clawgym.common.secrets import redact

        super().__init__(redact(summary))

    def report(self) -> str:
        return self.checklist.format() + "\n" + failure_line(self)


def failure_line(err: "PreflightError") -> str:
    """The closing line of a failed preflight: every failed check, how to skip one."""
    return checks_failure_line(err.checks)


def checks_failure_line(checks: Sequence[str]) -> str:
    """:func:`failure_line` of the failed checks' names."""
    if not checks:
        return "preflight failed: nothing was started."
    names = ", ".join(f"'{c}'" for c in checks)
    n = len(checks)
    skippable = [c for c in checks if c != "skip_checks"]
    hint = (f"; skip a check that does not apply with 'skip_checks=[{','.join(skippable)}]'" if skippable else "")
    return f"preflight failed at {names} ({n} check{'s' if n != 1 else ''}): nothing was started; fix " \
           f"{'them' if n != 1 else 'it'}{hint}"


def sweep_failure_report(failed: Sequence[Tuple[str, "PreflightError"]], total: int) -> str:
    """The refusal of a sweep whose preflight failed for some jobs (``failed``: (job label, its error),
    in job order; ``total``: the sweep's jobs). A failing line that several jobs share (the same check
    and the same words: a missing checkout, the cluster's port) is printed once with the jobs it
    concerns; what fails for one job alone is printed under that job; the checks every failed job
    passed are named on one line, not repeated per job."""
    from clawgym.common.secrets import redact

    jobs_of: Dict[str, List[str]] = {}
    for label, err in failed:
        for r in err.checklist.failures:
            jobs_of.setdefault(r.format(), []).append(label)
    shared = {line: labels for line, labels in jobs_of.items() if len(labels) > 1}
    out = [f"clawgym: sweep refused, preflight failed for {len(failed)} of {total} jobs; nothing was started"]
    groups: Dict[Tuple[str, ...], List[str]] = {}
    for line, labels in shared.items():
        groups.setdefault(tuple(labels), []).append(line)
    for labels, lines in groups.items():
        who = f"all {total} jobs" if len(labels) == total else f"{len(labels)} jobs"
        out += [f"shared by {who}: {', '.join(labels)}", *lines]
    for label, err in failed:
        own = [r.format() for r in err.checklist.failures if r.format() not in shared]
        if own:
            out += [f"sweep job {label}:", *own]
    passed = [r.name for r in failed[0][1].checklist.results if r.status == OK] if failed else []
    passed = [n for n in passed if all(e.checklist.by_name().get(n) is not None
                                       and e.checklist.by_name()[n].status == OK for _, e in failed)]
    if passed:
        out.append(f"passed for every job above: {', '.join(passed)}")
    names: List[str] = []
    for _, err in failed:
        names += [c for c in err.checks if c not in names]
    if names:
        out.append(checks_failure_line(names))
    return redact("\n".join(out))


def plain_config(cfg: Any) -> Mapping[str, Any]:
    """A resolved plain dict of a composed config (a plain mapping passes through)."""
    from omegaconf import DictConfig

    if isinstance(cfg, DictConfig):
        from clawgym.config.compose import to_plain

        return to_plain(cfg, resolve=True)
    return cfg


@dataclass
class Context:
    """What every check sees."""

    # Resolved plain config.
    c: Mapping[str, Any]
    # The launch plan (clawgym.plan.build.LaunchPlan).
    plan: Any
    # True when clawgym starts the Ray head on this machine.
    local_head: bool
    # Lazily created Docker client, shared by the docker checks.
    docker_client: Any = None

    def close(self) -> None:
        if self.docker_client is not None:
            try:
                self.docker_client.close()
            except Exception:  # closing a broken connection must not mask the result
                pass
            self.docker_client = None


@dataclass
class Check:
    """A registered check."""

    # Stable name (skip_checks).
    name: str
    # Short title for the checklist.
    title: str
    # The check function.
    fn: Callable[[Context], str]
    # Runs only when this returns true for the config (e.g. the sandbox backend).
    applies: Callable[[Mapping[str, Any]], bool] = lambda c: True
    # Checks this one needs to have passed (or been skipped): it is not run after their failure.
    needs: Tuple[str, ...] = ()
