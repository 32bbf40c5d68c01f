"""Hydra sweeper plugin for clawgym (``hydra/sweeper=clawgym``): an asynchronous Optuna study
whose trials are clawgym jobs (the work is in :mod:`clawgym.tuner`)."""

__version__ = "0.1.0"
