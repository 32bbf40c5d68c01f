"""The hang monitor: no new step in the run's events and no new log output for ``health.stall_s``.

A hang shows no error (every GPU at 0%, Ray reports every actor healthy) until NCCL's watchdog
fires, 10 minutes per collective by default (shared/reference/run-supervision.md, summary 10).
Progress is read as ``clawgym runs`` reads it (:mod:`clawgym.runs.events`): the newest step of
any ``rollout/*`` or ``train/*`` key in ``<save>/tensorboard/<submission id>/``, and the size of
the job's log. When neither moved for ``stall_s`` the monitor dumps the Python stacks of the job's
processes (:mod:`clawgym.supervisor.stacks`) and answers a ``hang`` verdict naming where each
process waits and the stack file; the loop stops the job and the recovery table restarts it from
the last complete checkpoint.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, List, Mapping, Optional, Tuple

from clawgym.supervisor.monitor import RunState, Verdict

#: stall_s is never derived below this: a save, a first step's compile or a weight update of a large
#: model outlasts the step-time model's phases, and a false hang costs a restart.
STALL_FLOOR_S = 300.0
#: stall_s derived = this x the step-time model's longest phase.
STALL_FACTOR = 3.0
#: Key prefixes whose new steps count as progress (slime logs rollout/* at the rollout step,
#: train/* at the train step: slime/utils/logging_utils.py:log).
PROGRESS_PREFIXES = ("rollout/", "train/")


def derived_stall_s(config: Mapping[str, Any]) -> Tuple[float, str]:
    """``(stall_s, how)`` for a resolved plain config: ``health.stall_s`` when set, else
    STALL_FACTOR x the longest phase of the step-time model, never below STALL_FLOOR_S."""
    health = config.get("health") or {}
    if health.get("stall_s") is not None:
        return float(health["stall_s"]), "health.stall_s"
    try:
        from clawgym.steptime import step_time
        from clawgym.trainer.effective import effective_config

        st = step_time(effective_config(config))
        phases = {"rollout": st.rollout_s, "log-probs": st.logprob_s, "train": st.train_s,
                  "weight update": st.weight_update_s}
    except Exception as exc:  # noqa: BLE001 - a config the model cannot estimate still gets a stall time
        return STALL_FLOOR_S, f"the floor ({STALL_FLOOR_S:.0f} s): the step-time model gave no estimate ({exc})"
    name, longest = max(phases.items(), key=lambda kv: kv[1])
    derived = STALL_FACTOR * longest
    if derived < STALL_FLOOR_S:
        return STALL_FLOOR_S, (f"the floor ({STALL_FLOOR_S:.0f} s): {STALL_FACTOR:g} x the longest phase "
                               f"({name}, {longest:.0f} s) is less")
    return derived, f"{STALL_FACTOR:g} x the longest phase of the step-time model ({name}, {longest:.0f} s)"


def events_folder(state: RunState) -> Path:
    return Path(state.save_dir) / "tensorboard" / state.submission_id


def newest_step(folder: Path, scalars: Optional[Mapping[str, list]] = None) -> Optional[Tuple[int, float]]:
    """(sum of the newest rollout and train steps, the newest wall time) in the run's events; None without any."""
    if not folder.is_dir():
        return None
    from clawgym.runs.events import read_scalars

    scalars = scalars if scalars is not None else read_scalars(folder)
    steps = {}
    wall = 0.0
    for tag, points in scalars.items():
        if points and tag.startswith(PROGRESS_PREFIXES):
            kind = tag.split("/", 1)[0]
            steps[kind] = max(steps.get(kind, -1), points[-1].step)
            wall = max(wall, points[-1].wall_time)
    if not steps:
        return None
    return sum(steps.values()), wall


def _log_size(path: Optional[Path]) -> Optional[int]:
    if path is None:
        return None
    try:
        return os.stat(path).st_size
    except OSError:
        return None


def _log_mtime(path: Optional[Path]) -> float:
    try:
        return os.stat(path).st_mtime if path is not None else 0.0
    except OSError:
        return 0.0


@dataclass
class _Seen:
    steps: Optional[int] = None
    log_size: Optional[int] = None
    since: Optional[float] = None  # when either last moved (the attempt's start before that)


class HangMonitor:
    """A ``hang`` verdict, with the stacks, after ``stall_s`` without a new step or log output."""

    name = "hang"

    def __init__(self, stall_s: float, how: str, *, pids: Optional[Callable[[RunState], List[int]]] = None) -> None:
        self.stall_s = float(stall_s)
        self.how = how
        self._pids = pids
        self._seen = _Seen()
        self._attempt: Optional[int] = None

    def poll(self, state: RunState) -> Optional[Verdict]:
        from clawgym.supervisor.evidence import run_scalars

        got = newest_step(events_folder(state), run_scalars(state))
        steps = got[0] if got else None
        size = _log_size(state.log_file)
        if self._attempt != state.attempt:
            # A new attempt starts its own clock, from its last sign of life seen on the first look.
            self._attempt = state.attempt
            marks = [state.started, got[1] if got else 0.0, _log_mtime(state.log_file)]
            self._seen = _Seen(steps=steps, log_size=size, since=max(marks))
        elif (steps, size) != (self._seen.steps, self._seen.log_size):
            self._seen = _Seen(steps=steps, log_size=size, since=state.now)
        seen = self._seen
        quiet = state.now - float(seen.since or state.started)
        if quiet < self.stall_s:
            return None
        from clawgym.supervisor import stacks

        if self._pids:
            dumped = stacks.dump(self._pids(state), Path(state.save_dir), now=state.now, label="hang")
        else:
            # Every node's processes through Ray's stack endpoint when the dashboard is known.
            dumped = stacks.dump_job(state.submission_id, Path(state.save_dir), address=state.address,
                                     now=state.now, label="hang")
        last = f"step {steps}" if steps is not None else "no step logged yet"
        evidence = (f"hang: no new rollout/train step ({last}) and no new log output for {quiet:.0f} s "
                    f"(stall_s {self.stall_s:.0f} s, from {self.how}); {dumped.summary()}; "
                    f"stacks: {dumped.path}")
        return Verdict(cls="hang", evidence=evidence, action="end", files=[dumped.path] if dumped.path else [])


def hang_monitor(config: Mapping[str, Any]) -> HangMonitor:
    stall, how = derived_stall_s(config)
    return HangMonitor(stall, how)
