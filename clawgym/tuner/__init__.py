"""Tuning: an asynchronous Optuna study whose trials are clawgym jobs (``hydra/sweeper=clawgym``).

``space`` (override grammar -> Optuna distributions), ``metric`` (objective and reduction),
``study`` (settings, sampler, pruner, storage), ``core`` (the loop, through the pipeline's
listener interface), ``report`` (the study's figures for ``clawgym report``).
"""

from __future__ import annotations

from typing import Any


def run_study(**kwargs: Any) -> Any:
    from clawgym.tuner.core import run_study as run

    return run(**kwargs)
