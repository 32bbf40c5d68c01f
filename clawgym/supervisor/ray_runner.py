"""The loop's :class:`~clawgym.supervisor.loop.Runner` for a Ray job (a local head, an existing cluster).

Evidence comes from Ray's own record of the job (``JobDetails``: ``status``, ``message``,
``driver_exit_code``, which Ray added so that callers need not parse ``message``: ray issue
#31183) and the job's logs; the head's liveness from its dashboard. The job is stopped only
through the Jobs API by its submission id (``JobHandle.stop``), never by a process search.
Resubmitting is the caller's: the runner is handed the function that resubmits the recorded
config from a resume point (the path ``clawgym resume`` takes), and returns its submission id.

On an existing cluster a lost node takes its GPUs with it: before resubmitting a ``node-lost``
attempt the runner waits (:meth:`RayJobRunner.wait_for_room`, bounded by ``restart.node_wait_s``)
until the cluster has the GPUs the run holds free again, as the resubmission's capacity preflight
counts them, instead of a resubmission that preflight would refuse.
"""

from __future__ import annotations

import time
from typing import Callable, Optional, Tuple

from clawgym.launch.rayjob import TERMINAL, JobHandle, dashboard_responds, trainer_exit_code
from clawgym.supervisor import classes as C
from clawgym.supervisor.classify import Evidence
from clawgym.supervisor.resume_point import ResumePoint

#: Lines of the job's log the classifier reads (its end: the error and what led to it).
TAIL_LINES = 400


class RayJobRunner:
    def __init__(self, address: str, resubmit: Callable[[ResumePoint], str], *, backend: str = "existing",
                 last_rollout: Callable[[], Optional[int]] = lambda: None,
                 user_stopped: Callable[[str], bool] = lambda sub: False, lost_contact_s: float = 300.0,
                 gpus_needed: Optional[float] = None, node_wait_s: float = 1800.0, poll_s: float = 10.0,
                 node_settle_s: float = 0.0, head_lost: Callable[[], Optional[str]] = lambda: None):
        self.address = address
        # What the run holds (clawgym.plan.build.gpus_required) and how long a lost node's GPUs are
        # waited for (restart.node_wait_s), every poll_s (restart.poll_s).
        self.gpus_needed = gpus_needed
        self.node_wait_s = node_wait_s
        self.poll_s = poll_s
        # How long the GCS may take to give a silent node up (its health check): what a driver that died
        # of an unreachable actor waits for before the node table can say whether its node was lost.
        self.node_settle_s = node_settle_s
        self.backend = backend
        self._resubmit = resubmit
        self._last_rollout = last_rollout
        self._user_stopped = user_stopped
        self.lost_contact_s = lost_contact_s
        # Why the head is known lost without waiting lost_contact_s (a local head whose GCS or raylet
        # is gone: clawgym.backends.head.lost), or None; asked only while the dashboard is silent.
        self._head_lost = head_lost
        self.lost_why: Optional[str] = None
        self._silent_since: Optional[float] = None
        self._handles: dict = {}

    def handle(self, sub: str) -> JobHandle:
        if sub not in self._handles:
            self._handles[sub] = JobHandle.attach(self.address, sub)
        return self._handles[sub]

    def submit(self, resume: ResumePoint) -> str:
        self._silent_since = None
        sub = self._resubmit(resume)
        self.lost_why = None
        return sub

    def running(self, sub: str) -> bool:
        """True while Ray says the job runs; False once it is terminal, once the dashboard is silent
        and the head is known lost (``head_lost``), or once the dashboard has not answered for
        ``lost_contact_s`` (ray.lost_contact_s: the head is taken for lost)."""
        if dashboard_responds(self.address, timeout=5.0):
            self._silent_since = None
            try:
                return self.handle(sub).status() not in TERMINAL
            except Exception:
                return True  # a dashboard between two answers: ask again at the next poll
        self.lost_why = self._head_lost()
        if self.lost_why:
            return False  # a head that cannot come back: no need to wait lost_contact_s
        now = time.time()
        self._silent_since = self._silent_since or now
        return now - self._silent_since < self.lost_contact_s

    def evidence(self, sub: str) -> Evidence:
        if not dashboard_responds(self.address, timeout=5.0):
            return Evidence(head_alive=False, head_lost=self.lost_why or self._head_lost(),
                            last_rollout=self._last_rollout())
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
        start = getattr(info, "start_time", None)
        lost = self._nodes_lost_since(start)
        if not lost and self.node_settle_s > 0 and any(C.ACTOR_UNREACHABLE in line for line in lines):
            # The driver died of an actor it could not reach before the GCS said why: a node that died at
            # once is marked dead only once the GCS's health check gives it up. Ask again until then.
            deadline = time.time() + self.node_settle_s
            while not lost and time.time() < deadline and not self._user_stopped(sub):
                time.sleep(min(2.0, self.poll_s))
                lost = self._nodes_lost_since(start)
        return Evidence(exit_code=code, lines=lines, ray_status=str(info.status.value), ray_message=message,
                        head_alive=True, last_rollout=self._last_rollout(), lost_nodes=lost)

    def _nodes_lost_since(self, start_ms: Optional[float]) -> Tuple[str, ...]:
        """The nodes Ray marked dead since the job started (its node table); none when it cannot say."""
        from clawgym.backends.head import liveness

        if not start_ms:
            return ()
        try:
            return tuple(liveness.nodes_dead_since(self.address, float(start_ms)))
        except Exception:  # noqa: BLE001 - evidence is a help: the lines and the exit code still decide
            return ()

    def stop(self, sub: str) -> None:
        if not dashboard_responds(self.address, timeout=5.0) and self._head_lost():
            return  # the job died with its head: nothing is left to stop (and nobody would answer)
        self.handle(sub).stop()

    def user_stopped(self, sub: str) -> bool:
        return self._user_stopped(sub)

    # ------------------------------------------------------------ a lost node

    def free_gpus(self) -> Tuple[Optional[float], str]:
        """(GPUs free on the cluster, as the capacity preflight counts them: the alive nodes' declared
        GPUs minus what running clawgym jobs recorded; None when the dashboard does not answer, why)."""
        from clawgym.backends.head import jobs as head_jobs, liveness

        try:
            total = liveness.cluster_gpus(self.address, timeout=10.0)
            held = sum(j.gpus or 0 for j in head_jobs.running_job_details(self.address))
        except Exception as exc:  # noqa: BLE001 - a dashboard between two answers: asked again
            return None, f"its dashboard does not answer ({type(exc).__name__})"
        free = max(0.0, total - held)
        return free, f"{free:g} of its {total:g} GPUs free"

    def wait_for_room(self, cls: str, *, say: Callable[[str], None], sleep: Callable[[float], None],
                      stopped: Callable[[], bool] = lambda: False,
                      clock: Callable[[], float] = time.time) -> Optional[Tuple[str, str]]:
        """Before a resubmission: after a lost node on an existing cluster, wait until the cluster has
        the GPUs the run holds free again, at most ``node_wait_s``. None: resubmit; else (why, fix):
        the wait ran out (or a user stopped the run meanwhile) and the run stops.

        A local head that was lost is no node to wait for (the supervisor starts a new head); other
        classes never took GPUs away."""
        if cls != C.NODE_LOST or self.backend != "existing" or not self.gpus_needed:
            return None
        need = self.gpus_needed
        free, state = self.free_gpus()
        if free is not None and free >= need:
            return None
        start = clock()
        say(f"[clawgym] the cluster at {self.address} has {state}; the run needs {need:g}: waiting up to "
            f"{self.node_wait_s:g} s (restart.node_wait_s) for the lost node to come back (an autoscaler or an "
            f"admin restarting it)")
        while clock() - start < self.node_wait_s:
            sleep(min(self.poll_s, max(0.0, self.node_wait_s - (clock() - start))))
            if stopped():
                return ("stopped by the user while waiting for the lost node", "")
            free, state = self.free_gpus()
            if free is not None and free >= need:
                say(f"[clawgym] the cluster at {self.address} has {state} after {clock() - start:.0f} s: resubmitting")
                return None
        return (f"node lost: after {self.node_wait_s:g} s (restart.node_wait_s) the cluster at {self.address} has "
                f"{state}, the run needs {need:g}",
                "once the node is back (or the cluster has the GPUs), `clawgym resume <save dir>` goes on from the last "
                "complete checkpoint; a longer restart.node_wait_s waits longer")
