"""What the pipeline says: the console line writer, the sweep's summary and runs tables, why a
job failed, and the metrics notes read from a job's events (clawgym/runs)."""

from __future__ import annotations

import sys
from typing import Sequence

from clawgym.common.text import fmt_duration
from clawgym.pipeline.jobs import PipelineJob


def failure_message(j: PipelineJob) -> str:
    """"the job failed (trainer exited 3)", or why the launcher cannot say how it ended."""
    from clawgym.common.exit_codes import job_failed
    from clawgym.launch.rayjob import EXIT_LOST_CONTACT, trainer_exit_code

    if j.exit_code == EXIT_LOST_CONTACT:
        return "the launcher lost contact with the job (the Ray dashboard stopped answering); it may still run"
    code = None
    if j.handle is not None:
        try:
            code = trainer_exit_code(j.handle.message())
        except Exception:  # noqa: BLE001 - the cluster may be gone: the message just has no code
            code = None
    if j.error is not None and j.handle is None:
        return f"the job failed ({type(j.error).__name__}: {j.error})"
    return job_failed(code)


def why_failed(j: PipelineJob) -> str:
    """Why a job failed, in a few words: the trainer's exit code when Ray reported one."""
    if j.error is not None and j.handle is None:
        return f"{type(j.error).__name__}: {j.error}"
    if j.handle is not None:
        from clawgym.launch.rayjob import trainer_exit_code

        code = trainer_exit_code(j.handle.message())
        if code is not None:
            return f"trainer exit code {code}"
    if j.exit_code is not None:
        return f"exit code {j.exit_code}"
    return f"{type(j.error).__name__}: {j.error}"


# ---------------------------------------------------------------- formatting

def summary_table(jobs: Sequence[PipelineJob]) -> str:
    head = ("#", "overrides", "run_name", "submission id", "status", "duration", "log file")
    rows = [head] + [(str(j.num), j.short_label or j.label, j.plan.run_name if j.plan else "-", j.submission_id or "-",
                      j.status, fmt_duration(j.duration), j.log_file or "-") for j in jobs]
    widths = [max(len(r[i]) for r in rows) for i in range(len(head) - 1)]
    out = []
    for n, r in enumerate(rows):
        out.append("  ".join(c.ljust(w) for c, w in zip(r, widths)) + "  " + r[-1])
        if n == 0:
            out.append("  ".join("-" * w for w in widths) + "  " + "-" * len(head[-1]))
    return "\n".join(out)


def say(text: str) -> None:
    # One write per line: job threads print too, and print() writes the newline separately.
    sys.stdout.write(text + "\n")
    sys.stdout.flush()


def quiet_ray_sdk() -> None:
    """Ray's job SDK logs each package upload and websocket close at INFO; keep progress readable."""
    from clawgym.launch.rayjob import quiet_ray_sdk

    quiet_ray_sdk()


# ---------------------------------------------------------------- metrics (clawgym/runs)

def metrics_note(j: PipelineJob, sep: str = " ") -> str:
    """`` (rollout step N, raw reward R)`` from the job's TensorBoard events so far, else ""."""
    if j.plan is None or j.handle is None:
        return ""
    from clawgym.runs.live import latest_step

    text = latest_step(j.plan)
    return f"{sep}({text})" if text else ""


def metrics_ticker(j: PipelineJob):
    """A single followed job: a line whenever its events show a new rollout step."""
    try:
        from clawgym.runs.live import Ticker

        return Ticker(j.plan, say).start()
    except Exception:  # noqa: BLE001 - the run matters more than its progress lines
        return None


def say_runs_table(jobs: Sequence[PipelineJob]) -> None:
    """The sweep's end: ``clawgym runs``' table of its jobs (what each reached, where its time went)."""
    try:
        from clawgym.runs.live import sweep_table

        table = sweep_table(jobs)
    except Exception as exc:  # noqa: BLE001 - the summary above already says how the jobs ended
        say(f"[sweep] runs table unavailable: {type(exc).__name__}: {exc}")
        return
    if table:
        import os

        saves = [str(j.plan.save_dir) for j in jobs if j.plan is not None and j.plan.save_dir]
        where = os.path.commonpath(saves) if len(saves) > 1 else (saves[0] if saves else ".")
        say(f"\nruns (again, or with curves: clawgym runs {where}; clawgym report {where}):\n{table}")
