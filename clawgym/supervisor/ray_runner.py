"""The loop's :class:`~clawgym.supervisor.loop.Runner` for a Ray job (a local head, an existing cluster).

Evidence comes from Ray's own record of the job (``JobDetails``: ``status``, ``message``,
``driver_exit_code``, which Ray added so that callers need not parse ``message``: ray issue
#31183) and the job's logs; the head's liveness from its dashboard. The job is stopped only
through the Jobs API by its submission id (``JobHandle.stop``), never by a process search.
Resubmitting is the caller's: the runner is handed the function that resubmits the recorded
config from a resume point (the path ``clawgym resume`` takes), and returns its submission id.
"""

from __future__ import annotations

import time
from typing import Callable, Optional

from clawgym.launch.rayjob import TERMINAL, JobHandle, dashboard_responds, trainer_exit_code
from clawgym.supervisor.classify import Evidence
from clawgym.supervisor.resume_point import ResumePoint

#: Lines of the job's log the classifier reads (its end: the error and what led to it).
TAIL_LINES = 400


class RayJobRunner:
    def __init__(self, address: str, resubmit: Callable[[ResumePoint], str], *, backend: str = "existing",
                 last_rollout: Callable[[], Optional[int]] = lambda: None,
                 user_stopped: Callable[[str], bool] = lambda sub: False, lost_contact_s: float = 300.0):
        self.address = address
        self.backend = backend
        self._resubmit = resubmit
        self._last_rollout = last_rollout
        self._user_stopped = user_stopped
        self.lost_contact_s = lost_contact_s
        self._silent_since: Optional[float] = None
        self._handles: dict = {}

    def handle(self, sub: str) -> JobHandle:
        if sub not in self._handles:
            self._handles[sub] = JobHandle.attach(self.address, sub)
        return self._handles[sub]

    def submit(self, resume: ResumePoint) -> str:
        self._silent_since = None
        return self._resubmit(resume)

    def running(self, sub: str) -> bool:
        """True while Ray says the job runs; False once it is terminal, or once the dashboard has
        not answered for ``lost_contact_s`` (ray.lost_contact_s: the head is taken for lost)."""
        if dashboard_responds(self.address, timeout=5.0):
            self._silent_since = None
            try:
                return self.handle(sub).status() not in TERMINAL
            except Exception:
                return True  # a dashboard between two answers: ask again at the next poll
        now = time.time()
        self._silent_since = self._silent_since or now
        return now - self._silent_since < self.lost_contact_s

    def evidence(self, sub: str) -> Evidence:
        if not dashboard_responds(self.address, timeout=5.0):
            return Evidence(head_alive=False, last_rollout=self._last_rollout())
        client = self.handle(sub).client
        info = client.get_job_info(sub)
        message = info.message or ""
        code = getattr(info, "driver_exit_code", None)
        if code is None:
            code = trainer_exit_code(message)
        try:
            lines = client.get_job_logs(sub).splitlines()[-TAIL_LINES:]
        except Exception:
            lines = []
        return Evidence(exit_code=code, lines=lines, ray_status=str(info.status.value), ray_message=message,
                        head_alive=True, last_rollout=self._last_rollout())

    def stop(self, sub: str) -> None:
        self.handle(sub).stop()

    def user_stopped(self, sub: str) -> bool:
        return self._user_stopped(sub)
