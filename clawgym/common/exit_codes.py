"""The exit codes of ``python train.py`` and of every ``clawgym`` command: one table.

Low floor (no clawgym import): the face, the sweep and the pipeline read it. The reference page
``docs/reference/exit-codes.md`` is generated from :data:`TABLE` (``python -m clawgym.common.exit_codes
> docs/reference/exit-codes.md``; tests/test_exit_codes.py checks that it is current).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Tuple

#: The command did what it was asked (a launch: its job succeeded or was detached; a dry run that fits).
DONE = 0
#: The job ran and failed (the trainer's own exit code is in the message), or a command's work failed.
FAILED = 1
#: Refused before anything started: composition, validation, preflight, memory plan, bad arguments.
REFUSED = 2
#: The launcher lost its terminal (SIGHUP): the jobs it submitted keep running, nobody follows them.
HANGUP = 129
#: Interrupted (Ctrl-C, SIGTERM): running jobs were stopped, queued ones not submitted.
INTERRUPTED = 130


@dataclass(frozen=True)
class ExitCode:
    code: int
    name: str
    meaning: str
    examples: Tuple[str, ...]


TABLE: Tuple[ExitCode, ...] = (
    ExitCode(DONE, "done", "the command did what it was asked",
             ("a launch whose job succeeded, or was submitted with ray.detach=true",
              "a dry run whose config validates and whose memory plan fits",
              "preflight_only=true with every check passing", "clawgym runs / show / diff / explain answered")),
    ExitCode(FAILED, "the job failed", "the job ran and failed; the message gives the trainer's own exit code, "
             "e.g. \"the job failed (trainer exited 3)\"",
             ("the trainer exited non-zero", "one or more sweep jobs failed",
              "a study (hydra/sweeper=clawgym) in which a trial was refused or failed",
              "the launcher lost contact with the Ray dashboard for ray.lost_contact_s (the job may still run)",
              "a supervised run whose lost node did not come back within restart.node_wait_s (`clawgym resume` "
              "goes on once it is back)",
              "clawgym runs --plot: no run logged the metric")),
    ExitCode(REFUSED, "refused", "refused before anything started: nothing was submitted, no output dir or "
             "file is left behind",
             ("composition: a misspelled key (did you mean ...), an unknown group option, a YAML error",
              "validation: a rule of clawgym/validate/ refused the config",
              "preflight: a check failed, during a launch or with preflight_only=true",
              "memory: the per-GPU memory plan does not fit (a launch, and a dry run, which says so in a banner)",
              "a clawgym command's bad argument or unknown key (clawgym explain rollout.temprature)")),
    ExitCode(HANGUP, "terminal lost", "the launcher lost its terminal (SIGHUP); submitted jobs keep running",
             ("an ssh session dropped while a launch followed its job",)),
    ExitCode(INTERRUPTED, "interrupted", "Ctrl-C or SIGTERM: running jobs were stopped, queued ones not submitted",
             ("Ctrl-C during a launch or a sweep",)),
)


def meaning(code: int) -> str:
    for row in TABLE:
        if row.code == code:
            return row.name
    return f"exit code {code}"


def job_failed(trainer_code: Optional[int] = None, what: str = "the job") -> str:
    """The message of a failed job (exit :data:`FAILED`), with the trainer's own exit code."""
    return f"{what} failed" + (f" (trainer exited {trainer_code})" if trainer_code is not None else "")


def markdown() -> str:
    """``docs/reference/exit-codes.md``."""
    lines = ["# Exit codes", "",
             "<!-- generated from clawgym/common/exit_codes.py by `python -m clawgym.common.exit_codes`; do not edit -->", "",
             "`python train.py` (a run, a dry run, a sweep, `preflight_only=true`, `--explain`) and every `clawgym` "
             "command exit with one of these codes. A failed job exits 1 whatever the trainer's own code was; "
             "the message names it (\"the job failed (trainer exited 3)\").", "",
             "| code | name | meaning | for example |", "|---|---|---|---|"]
    for row in TABLE:
        lines.append(f"| {row.code} | {row.name} | {row.meaning} | {'; '.join(row.examples)} |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    import sys

    sys.stdout.write(markdown())
