"""Supervision: a training launch followed to its end after the start.

Below the pipeline (which starts the supervisor for every launch that trains) and above the checks,
records and backends it reads. Two halves share one boundary, ``monitor.py``:

- "runs that finish": classify every end from the run's own evidence, record each attempt in the
  save dir, and resume from the last complete checkpoint (the loop, the classes, the recovery table);
- "runs that stay healthy": monitors the loop polls while the job runs (hangs with stacks, health
  rules on the run's metrics, checkpoint retention, the disk guard); a monitor never stops a job
  itself, it returns a :class:`~clawgym.supervisor.monitor.Verdict` and the loop acts on it.
"""
