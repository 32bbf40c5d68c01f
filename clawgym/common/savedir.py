"""Names of what clawgym writes into a run's save dir, importable without what writes it.

Validation asks whether a folder already is a run's save dir; it needs only these names, not
:mod:`clawgym.snapshot` (which writes and reads the snapshots, and imports far more).
"""

#: Snapshots of a save dir, relative to it.
SNAPSHOTS_RELPATH = "clawgym/snapshots"
#: What the run's monitors tripped on (a health rule, a hang), one JSON line each, relative to the
#: save dir: written by the supervisor as it acts on a verdict, read by ``runs``, ``show``, ``report``.
HEALTH_RELPATH = "clawgym/health.jsonl"
#: Where the hang monitor writes its py-spy dumps, relative to the save dir.
STACKS_RELPATH = "stacks"
#: In a snapshot dir: the submission, once the job was submitted (written by the launcher).
SUBMITTED_FILE = "submitted.json"
#: In a snapshot dir: how the job ended, as the launcher that followed it saw it.
ENDED_FILE = "ended.json"
#: The attempts of a run (each launch and restart, how it ended, what came next), relative to the
#: save dir: written by the supervisor, read by ``clawgym runs`` and ``clawgym show``.
ATTEMPTS_RELPATH = "clawgym/attempts.json"
#: The run's supervisor (clawgym/supervisor/daemon.py), relative to the save dir: its record (pid +
#: start time, status, exit status), its own output, and one log per attempt (the job's Ray logs).
SUPERVISOR_RELPATH = "clawgym/supervisor.json"
SUPERVISOR_LOG_RELPATH = "clawgym/supervisor.log"
ATTEMPT_LOG_PATTERN = "clawgym/attempt-{number}.log"
#: A person (``clawgym jobs stop``, Ctrl-C) or the tuner (a pruned trial) stopped the run for good:
#: the supervisor reads it, stops the job and never restarts it.
USER_STOP_RELPATH = "clawgym/user_stopped.json"
