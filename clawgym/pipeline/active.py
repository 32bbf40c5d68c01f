"""The task-function hook's state: the pipeline whose job's task function is running (a sweep job
calls :func:`clawgym.pipeline.single.launch_single`, which submits through it)."""

from __future__ import annotations

import contextlib
from typing import Any, Iterator, Optional

# The pipeline is typed as Any here: naming its class would close a circle with pipeline.py,
# which imports this module.
Pipeline = Any

_ACTIVE: Optional[Pipeline] = None


def active_pipeline() -> Optional[Pipeline]:
    """The pipeline whose job's task function is running (a sweep), or None."""
    return _ACTIVE


@contextlib.contextmanager
def running_task(pipeline: Pipeline) -> Iterator[None]:
    """``pipeline`` is the active one while a job's task function runs inside the block."""
    global _ACTIVE
    _ACTIVE = pipeline
    try:
        yield
    finally:
        _ACTIVE = None
