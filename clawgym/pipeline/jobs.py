"""What the pipeline is handed and hands back: its jobs (:class:`PipelineJob`, their statuses), how
it runs them (:class:`PipelineOptions`), what a driver above it hears (:class:`PipelineListener`)
and the refusal of a launch that cannot start (:class:`Refused`)."""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from typing import Any, Dict, Optional, Sequence

from clawgym.common.exit_codes import REFUSED as EXIT_REFUSED
from clawgym.plan.build import LaunchPlan

# The pipeline is typed as Any here: naming its class would close a circle with pipeline.py,
# which imports this module.
Pipeline = Any

QUEUED, RUNNING, SUCCEEDED, FAILED, STOPPED = "queued", "running", "succeeded", "failed", "stopped"
#: A job handed over but not run by clawgym (``cluster=kuberay kuberay.apply=false``: manifest written).
NOT_APPLIED = "not applied"


class Refused(Exception):
    """The launch cannot start; ``str()`` is the whole user-facing report; nothing was submitted."""

    def __init__(self, report: str, code: int = EXIT_REFUSED) -> None:
        super().__init__(report)
        self.code = code


@dataclass
class PipelineOptions:
    """How the pipeline runs its jobs."""

    # Sweep output (progress lines, summary table, job output only in log files) instead of
    # one job's output on the console.
    sweep: bool = False
    # Most jobs running at once; 0 = as many as the free GPUs hold.
    max_concurrent: int = 0
    # Seconds between checks of running jobs.
    poll_interval: float = 1.0
    # Seconds between progress lines while nothing changes; 0 = on changes only.
    progress_interval: float = 30.0


@dataclass
class PipelineJob:
    """One job of a launch and what happened to it."""

    # Job number (Hydra's ``hydra.job.num`` in a sweep).
    num: int = 0
    # Task config (no ``hydra`` node).
    cfg: Any = None
    # The validated plan that is submitted.
    plan: Optional[LaunchPlan] = None
    # What tells the job apart, for messages ("(no overrides)" for a single run).
    label: str = ""
    short_label: str = ""
    # Overrides and choices for the snapshot (clawgym.snapshot.records.LaunchRecord); None: Hydra's current job.
    record: Any = None
    status: str = QUEUED
    # Secrets this job's plan names, read from the environment (never printed).
    secrets: Dict[str, str] = field(default_factory=dict, repr=False)
    handle: Any = None
    submission_id: Optional[str] = None
    log_file: Optional[str] = None
    started: Optional[float] = None
    ended: Optional[float] = None
    exit_code: Optional[int] = None
    # Why the job failed, when it did.
    error: Optional[BaseException] = None
    thread: Optional[threading.Thread] = None
    # Launch snapshot written before submission, and the checkpoint watcher that copies it.
    snapshot: Optional[str] = None
    watcher: Any = None
    # Pipeline.stop() asked for this job to stop: it ends as "stopped", not "failed".
    stop_requested: bool = False
    # The run's supervisor (clawgym.supervisor.process.spawn's record: id, pid, create_time, save_dir,
    # log), when one follows it; the job then ends when its supervisor ends.
    supervisor: Optional[Dict[str, Any]] = None

    @property
    def duration(self) -> Optional[float]:
        if self.started is None:
            return None
        return (self.ended or time.monotonic()) - self.started


class PipelineListener:
    """What a driver above the pipeline (the tuner) hears while a sweep's jobs run.

    Every call comes from the pipeline's scheduling thread, between its checks of the running
    jobs, so a listener may call :meth:`Pipeline.submit` and :meth:`Pipeline.stop` from inside
    one. The default methods do nothing; a grid sweep has no listener.
    """

    def job_started(self, pipeline: Pipeline, job: PipelineJob) -> None:
        """``job`` was submitted and runs."""

    def job_ended(self, pipeline: Pipeline, job: PipelineJob) -> None:
        """``job`` ended (``job.status``: succeeded, failed, or stopped after :meth:`Pipeline.stop`);
        its GPUs are free."""

    def room(self, pipeline: Pipeline, free_gpus: Optional[float], running: int) -> None:
        """No job is queued and another could start (``free_gpus``: None when the backend
        queues jobs itself): submit one now, or none."""

    def poll(self, pipeline: Pipeline, running: Sequence[PipelineJob]) -> None:
        """Every check of the running jobs (``PipelineOptions.poll_interval``)."""
