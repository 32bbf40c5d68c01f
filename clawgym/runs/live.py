"""The runs' metrics while a launch follows them: latest rollout step and reward, the sweep's table.

The pipeline calls these (a line each); they read the events folder the plan gave the job
(``TENSORBOARD_DIR``), so they see what slime has flushed so far (its writer flushes every
two minutes). Reading never fails a launch: a folder that cannot be read says nothing.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any, Callable, Optional, Sequence

from clawgym.plan.build import TENSORBOARD_DIR_ENV
from clawgym.runs.table import RAW_REWARD, STEP_TAGS


def latest_step(plan: Any) -> Optional[str]:
    """``rollout step N, raw reward R`` of a plan's events so far; None without any."""
    folder = ((getattr(plan, "runtime_env", None) or {}).get("env_vars") or {}).get(TENSORBOARD_DIR_ENV)
    if not folder or not Path(folder).is_dir():
        return None
    try:
        from clawgym.runs.events import read_scalars

        s = read_scalars(Path(folder))
    except Exception:  # noqa: BLE001 - progress output must never break a launch
        return None
    steps = [p.step for tag in STEP_TAGS for p in s.get(tag, [])]
    if not steps:
        return None
    text = f"rollout step {max(steps)}"
    reward = s.get(RAW_REWARD)
    if reward:
        text += f", raw reward {reward[-1].value:.4g}"
    return text


class Ticker:
    """Says the latest step and reward of one followed job when it changes (and once at the end)."""

    def __init__(self, plan: Any, say: Callable[[str], None], *, interval: float = 10.0) -> None:
        self.plan, self.say, self.interval = plan, say, interval
        self._last: Optional[str] = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="clawgym-metrics", daemon=True)

    def _tick(self) -> None:
        text = latest_step(self.plan)
        if text and text != self._last:
            self._last = text
            self.say(f"[clawgym] metrics: {text}")

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            self._tick()

    def start(self) -> "Ticker":
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)
        self._tick()


def sweep_table(jobs: Sequence[Any]) -> Optional[str]:
    """``clawgym runs``' table for a sweep's jobs (their save dirs), statuses as the pipeline saw them."""
    from clawgym.runs.discover import load_run
    from clawgym.runs.table import build_rows, format_table

    runs = []
    for j in jobs:
        save = getattr(j.plan, "save_dir", None) if j.plan is not None else None
        if not save or not j.submission_id or not Path(save).is_dir():
            continue
        run = load_run(Path(save))
        if not run.snapshots:
            continue
        run.status = {"submitted": "running", "running on": "running"}.get(j.status, j.status)
        runs.append(run)
    if not runs:
        return None
    rows, columns = build_rows(runs, resolve_status=False)
    return format_table(rows, columns)
