"""Hydra launcher plugin for clawgym (``hydra/launcher=clawgym``)."""

__version__ = "0.1.0"
