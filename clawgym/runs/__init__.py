"""Runs read back from their save dirs: what ran (snapshots) and what happened (TensorBoard events).

A run is a save dir holding clawgym snapshots (``<save>/clawgym/snapshots/``). slime writes
its metrics there too (``metrics.tensorboard``: ``<save>/tensorboard/<submission id>/``), so
a save dir describes itself without W&B, network or a server. The modules, in the order
the data flows:

- ``discover``: find the save dirs under some paths and load their snapshots (:class:`Run`);
- ``events``: read a run's scalars with TensorBoard's ``EventAccumulator`` (no hand parser);
- ``status``: running / succeeded / failed / stopped / unknown, from what clawgym recorded and
  what Ray or SLURM still answer;
- ``table``: one row per run (the columns of ``clawgym runs``), sorting, filtering, JSON;
- ``lost``: GPU time lost to a run's restarts (one definition), from its attempts and their events;
- ``marks``: where a run's restarts, hangs and tripped rules go on its curves;
- ``plot``: PNG curves with matplotlib (Agg, no display); ``report``: one self-contained HTML page;
- ``live``: the latest step and reward of running jobs, for the launch's follow output.

Nothing here imports torch; ``tensorboard`` and ``matplotlib`` are imported inside the
functions that need them.
"""

from clawgym.runs.discover import Run, RunsError, default_paths, find_runs

__all__ = ["Run", "RunsError", "default_paths", "find_runs"]
