"""What a pipeline job's snapshot records about it: that it was submitted (from then on it counts
as a launch) and how the followed job ended (for ``clawgym runs`` once the cluster is gone)."""

from __future__ import annotations

from typing import Sequence

from clawgym.pipeline.jobs import FAILED, NOT_APPLIED, STOPPED, SUCCEEDED, PipelineJob


def mark_snapshot_submitted(j: PipelineJob) -> None:
    """This job's snapshot now records a launch (until then ``show`` does not list it, and
    :meth:`clawgym.pipeline.pipeline.Pipeline.run` discards it if the job is never submitted)."""
    from clawgym.snapshot.marks import mark_submitted

    if j.snapshot:
        job_record = getattr(j.handle, "job_record", None)
        mark_submitted(j.snapshot, j.submission_id, address=getattr(j.handle, "address", "") or "",
                       job=job_record() if callable(job_record) else None)


def record_endings(jobs: Sequence[PipelineJob]) -> None:
    """Each followed job's end into its snapshot, so ``clawgym runs`` knows it after the cluster is gone."""
    from clawgym.snapshot.marks import mark_ended

    for j in jobs:
        if j.snapshot and j.submission_id and j.status in (SUCCEEDED, FAILED, STOPPED, NOT_APPLIED):
            try:
                mark_ended(j.snapshot, j.status, j.exit_code)
            except OSError:
                pass  # a read-only save dir: the status is then asked from the cluster only
