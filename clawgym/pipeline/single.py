"""The single launch entry: ``python train.py`` (and ``clawgym resume``) without dry run, and the
task function of a sweep job, which submits through the active pipeline."""

from __future__ import annotations

import sys
from typing import Any

from clawgym.common.exit_codes import FAILED as EXIT_FAILED, INTERRUPTED as EXIT_INTERRUPTED
from clawgym.pipeline.active import active_pipeline
from clawgym.pipeline.jobs import PipelineJob, PipelineOptions, Refused
from clawgym.pipeline.pipeline import Pipeline
from clawgym.pipeline.report import failure_message
from clawgym.plan.build import LaunchPlan


def launch_single(cfg: Any, plan: LaunchPlan) -> Any:
    """``python train.py`` without dry run: the pipeline with one job.

    Inside a sweep (the task function of a sweep job), submits that job and returns its
    submission id. Otherwise returns 0 when the job succeeded or was detached, and exits
    with the launch's status (printed without a traceback) when not.
    """
    active = active_pipeline()
    if active is not None:
        return active.submit_current(cfg, plan)
    job = PipelineJob(num=0, cfg=cfg, plan=plan, label="(no overrides)")
    try:
        rc = Pipeline([job], PipelineOptions()).run()
    except Refused as err:
        from clawgym.common.secrets import redact

        print(redact(str(err)), file=sys.stderr, flush=True)
        sys.exit(err.code)
    except KeyboardInterrupt:
        # Before a cluster or job existed (later interrupts are handled where they can stop things).
        print("\n[clawgym] interrupted; nothing was left running", file=sys.stderr, flush=True)
        sys.exit(EXIT_INTERRUPTED)
    if rc == EXIT_FAILED:
        # One exit code for a failed job (1); the trainer's own is in the message.
        print(f"clawgym: {failure_message(job)}", file=sys.stderr, flush=True)
    if rc:
        sys.exit(rc)
    return 0
