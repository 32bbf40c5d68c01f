"""Cluster backends: where the Ray cluster of a launch comes from, behind one small interface.

The launch pipeline (:mod:`clawgym.pipeline.pipeline`) talks to a :class:`Backend` only, and never
asks which one it is. A backend answers six questions for the jobs of one launch (a single
run is a sweep of one):

=================  ===========================================================================
``settle``         deal with what an earlier launch left (before any check); may refuse
``begin``          start bringing up a cluster that does not need preflight's answers, so it
                   comes up while preflight runs (``abort`` stops it when preflight fails)
``start``          make a Ray address available for these jobs (connect, reuse or start a
                   cluster); a queueing backend may return None
``free_gpus``      GPUs free for these jobs now (declared minus what running jobs hold);
                   None = the backend queues jobs itself (e.g. SLURM), the pipeline does not pack
``ports_in_use``   ports that jobs already running there claimed (port -> who), to refuse clashes
``submit``         submit one job (plan + cfg + snapshot dir) and return a handle with
                   ``follow`` / ``stop`` / ``status`` (:class:`clawgym.launch.rayjob.JobHandle` for Ray jobs)
``close``          clean up what this backend started, through what it recorded at start
=================  ===========================================================================

plus small helpers: ``answers`` (the cluster runs already, so capacity is checked before
preflight), ``total_gpus`` (a job needing more can never run), ``running_elsewhere`` (jobs of
other launches, for messages), ``checks_this_machine`` (preflight checks this machine's GPUs
and ports: only when the cluster is started here) and ``hints`` (how to follow, stop and
clean up jobs nobody follows). Handles returned by ``submit`` follow with
``follow(echo=, lost_contact_after=, say=)`` and stop with ``stop()``.

One owner per resource: what a backend starts, it records when it starts it and stops
through that record (the local head's record lives in :mod:`clawgym.backends.head.records`). Backends
are picked by :func:`clawgym.pipeline.clusters.backend_for`; a new one (SLURM allocation, KubeRay RayJob) is a
module here with a class implementing :class:`Backend`, and a line in that function.

=============  ===========================================================
``local``      a head clawgym starts on this machine (``ray.address`` unset)
``existing``   a running cluster at ``ray.address``; never stopped
``slurm``      one SLURM batch job per job; Ray starts inside the allocation
``kuberay``    one KubeRay RayJob per job (a Ray cluster of its own), applied with
               kubectl and followed through its cluster's Ray Jobs API
=============  ===========================================================

The ``cluster`` config group picks one (``cluster=local`` is the default, and with
``ray.address`` set it means ``existing``, as before the group existed). What a backend
hands its cluster besides the plan (SLURM's batch script, the RayJob manifest) it renders
itself (``dry_run_artefact``), so the task function has no branch per backend. A backend
whose tool refuses a job (sbatch, kubectl) raises :class:`BackendRefused`: the pipeline
reports "nothing was started" with the tool's reason, no traceback.

Importing this package imports no Ray.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple


from clawgym.plan.allocation import backend_name


class BackendError(Exception):
    """The cluster cannot serve the launch; the message names the cause and the fix."""


class BackendRefused(BackendError):
    """The cluster's own tool (sbatch, kubectl) refused a job: nothing of it was started.

    ``what`` names what was refused ("sbatch refused the batch job of RUN"), ``reason`` is
    the tool's own reason, ``details`` lines (where the script or manifest is, the fix).
    """

    def __init__(self, what: str, reason: str, details: Sequence[str] = ()) -> None:
        self.what, self.reason, self.details = what, reason, list(details)
        super().__init__("\n".join([f"{what}; nothing was started: {reason}", *self.details]))


class Backend:
    """What the launch pipeline needs from a cluster. Subclasses implement every method."""

    #: Short name (``local``, ``existing``, ...), for messages only.
    name = "backend"
    #: True when the jobs of one launch share one Ray cluster (packed by GPUs, one owner per port);
    #: False when each job gets a cluster of its own (a SLURM allocation, a RayJob's cluster).
    packs_jobs = True

    def __init__(self, plans: Sequence[Any], cfgs: Sequence[Any]) -> None:
        # The plans and task configs of every job of the launch (one cluster serves them all).
        self.plans = list(plans)
        self.cfgs = list(cfgs)
        # Where jobs are submitted, once ``start`` made it available.
        self.address: Optional[str] = None

    # -------------------------------------------------------- dry run

    def dry_run_artefact(self, plan: Any, c: Mapping[str, Any], where: Path) -> Optional[Tuple[str, str]]:
        """(file name, text) of what this backend would hand its cluster (a batch script, a
        RayJob manifest), for ``dry_run=true`` to print and write into ``where``; None: nothing
        beyond the plan. Raises BackendError when it cannot be rendered as its cluster accepts it."""
        return None

    # -------------------------------------------------------- before any check

    def checks_this_machine(self) -> bool:
        """True when preflight should check this machine's GPUs and ports (a cluster started here)."""
        raise NotImplementedError

    def settle(self, secrets: Mapping[str, str]) -> None:
        """Deal with what an earlier launch left behind; raise BackendError to refuse."""

    def answers(self) -> bool:
        """True when the cluster runs already (then GPUs and ports are checked before preflight)."""
        raise NotImplementedError

    def begin(self, secrets: Mapping[str, str]) -> None:
        """Start what ``start`` would start, in the background, before preflight (default: nothing).

        Called only when the cluster does not answer yet. Must not fail the launch: what cannot
        begin here is left to ``start`` (and to preflight, which reports e.g. a port in use)."""

    def abort(self) -> None:
        """Stop what ``begin`` started (preflight failed, or the launch was interrupted before
        ``start``), through what it recorded; nothing else is touched (default: nothing)."""

    # -------------------------------------------------------- the cluster

    def start(self, secrets: Mapping[str, str], *, on_address: Optional[Callable[[str], None]] = None,
              while_waiting: Optional[Callable[[], None]] = None) -> Optional[str]:
        """Make a Ray address available for the jobs and return it (None: the backend queues).

        ``while_waiting()`` runs exactly once, while a cluster starts (or at once when there is
        nothing to start), and always before ``on_address``; the pipeline writes snapshots
        there. ``on_address(address)`` is called once jobs can be submitted, possibly before
        ``start`` returns. Whatever this starts is stopped again if either callback raises.
        """
        raise NotImplementedError

    def free_gpus(self) -> Optional[float]:
        """GPUs not held by jobs running there now; None when the backend queues jobs itself."""
        raise NotImplementedError

    def total_gpus(self) -> float:
        """GPUs the cluster declares (a job needing more can never run there)."""
        raise NotImplementedError

    def ports_in_use(self) -> Dict[int, str]:
        """Port -> description of the running job that claimed it (clawgym jobs record theirs)."""
        return {}

    def running_elsewhere(self) -> List[str]:
        """Lines describing jobs of other launches running there (for messages)."""
        return []

    # -------------------------------------------------------- jobs

    def submit(self, plan: Any, cfg: Any, snapshot: Optional[str], secrets: Mapping[str, str]) -> Any:
        """Submit one job; returns a handle (``follow``, ``stop``, ``status``, ``submission_id``)."""
        raise NotImplementedError

    def hints(self, handles: Sequence[Any]) -> List[str]:
        """How to follow, stop and clean up jobs that run on without us (detached, terminal lost)."""
        return []

    # -------------------------------------------------------- cleanup

    def close(self, *, keep: bool, reason: str = "", ignore_jobs: Sequence[str] = ()) -> None:
        """Clean up what this backend started. ``keep`` leaves it running on purpose (recorded
        as kept, e.g. ``ray.keep_head``, detached jobs, a lost terminal; ``reason`` says why);
        jobs in ``ignore_jobs`` (ours, being stopped) do not keep it alive."""
        raise NotImplementedError


class ClusterPerJobBackend(Backend):
    """A backend whose every job brings up its own Ray cluster (a SLURM allocation, a RayJob):
    there is nothing to start or ask here; the cluster's scheduler queues the jobs."""

    def answers(self) -> bool:
        return False

    def start(self, secrets: Mapping[str, str], *, on_address: Optional[Callable[[str], None]] = None,
              while_waiting: Optional[Callable[[], None]] = None) -> Optional[str]:
        """Nothing to start: the pipeline's waiting work (cleanup, snapshots) runs at once; no
        address, since each job's cluster is its own."""
        if while_waiting is not None:
            while_waiting()
        return None

    def free_gpus(self) -> Optional[float]:
        return None

    def total_gpus(self) -> float:
        return float("inf")


def cluster_key(plan: Any) -> Tuple[Any, ...]:
    """What identifies the cluster a plan asks for (jobs of one launch must agree)."""
    return (plan.address, tuple(plan.ray_start or ()), tuple(sorted(plan.ray_start_env.items())))


def describe_cluster(plan: Any) -> str:
    return plan.address + (f" via {' '.join(plan.ray_start)}" if plan.ray_start else " (existing)")


#: The backends whose dry run renders something for their cluster besides the plan (SLURM's batch
#: script, the RayJob manifest). A local head and an existing cluster get the plan alone (they keep
#: ``Backend.dry_run_artefact``), so a dry run of theirs need not import them to learn that;
#: tests/test_dry_run_imports.py checks this against the classes.
ARTEFACT_BACKENDS = ("slurm", "kuberay")


def renders_dry_run_artefact(cfg: Any) -> bool:
    """True when the config's backend renders a dry-run artefact (see :data:`ARTEFACT_BACKENDS`)."""
    return backend_name(cfg) in ARTEFACT_BACKENDS
