"""The launch pipeline: one path for 1..N jobs (a single run is a sweep of one).

``python train.py`` (through :func:`clawgym.pipeline.single.launch_single`) and the Hydra launcher plugin
(through :mod:`clawgym.sweep.core`) hand validated, planned jobs to :class:`Pipeline`, which
walks the same steps for both:

1. **one cluster**: every job asks for the same cluster and the same ``ray.detach``;
2. **settle**: the backend deals with what an earlier launch left (:mod:`clawgym.backends`);
3. **capacity** (when the cluster already runs): every job fits the cluster's *free* GPUs
   and claims no port a running job claimed (checked again once the cluster is up);
4. **preflight** every job, all reported together; no job has started yet. A cluster that has
   to be started needs nothing preflight checks: it begins coming up first
   (:meth:`Backend.begin`: a local head reserves its ports and runs ``ray start`` in the
   background, or adopts the one begun while the config was validated) and is stopped again
   (:meth:`Backend.abort`) when preflight fails;
5. **cleanup** of leftovers, then the **snapshot** of each job (while that cluster comes up;
   nothing is submitted before the snapshots);
6. **cluster**: the backend connects, reuses or finishes starting one (:meth:`Backend.start`);
7. **submit** jobs as they fit the free GPUs (first fit in job order), **follow** them
   (one job: its output on the console; several: a thread each, with progress lines). On a
   cluster being started, the first jobs go in as soon as its dashboard answers;
8. **summarise** (sweeps: a table) and **close**: the backend cleans up what it started.

Signals while jobs run: Ctrl-C and SIGTERM stop our running jobs (queued ones are not
submitted) and then what the backend started. SIGHUP (the terminal is gone, e.g. an ssh
session dropped) does not stop anything: the jobs keep running as with
``ray.detach=true``, the head is recorded as kept, the checkpoint watcher stops (run
``clawgym stamp <save dir> --follow`` to stamp later checkpoints), a line in each job's
log file says so and how to follow it, and the launcher exits 129.

The pipeline never asks which backend it talks to.
"""


from __future__ import annotations

import os
import sys
import threading
import time
from pathlib import Path
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple

from clawgym.common.exit_codes import FAILED as EXIT_FAILED, INTERRUPTED as EXIT_INTERRUPTED
from clawgym.common.text import fmt_duration
from clawgym.pipeline.active import running_task
from clawgym.pipeline.checks import LaunchChecks
from clawgym.pipeline.jobs import (FAILED, NOT_APPLIED, QUEUED, RUNNING, STOPPED, SUCCEEDED, PipelineJob,
                                   PipelineListener, PipelineOptions, Refused)
from clawgym.pipeline.marks import mark_snapshot_submitted, record_endings
from clawgym.pipeline.report import (metrics_note, metrics_ticker, quiet_ray_sdk, say, say_runs_table,
                                     summary_table, why_failed)
from clawgym.plan.build import LaunchPlan
from clawgym.snapshot.checkpoints import start_checkpoint_watcher


class Pipeline(LaunchChecks):
    """Validated, planned jobs -> checked, snapshotted, submitted, followed, summarised."""

    def __init__(self, jobs: Sequence[PipelineJob], options: PipelineOptions, *,
                 run_job: Optional[Callable[[PipelineJob], None]] = None,
                 environ: Optional[Mapping[str, str]] = None,
                 listener: Optional[PipelineListener] = None) -> None:
        self.jobs = list(jobs)
        self.options = options
        # Told of jobs starting and ending, and of room for more (PipelineListener); None for a grid.
        self.listener = listener
        # Jobs of self.jobs the scheduler has taken into its queue (later ones came through submit()).
        self._known = len(self.jobs)
        # Makes a job reach submit_current(): a sweep runs Hydra's job (its task function calls
        # launch_single); None submits directly.
        self._run_job = run_job
        self.environ = os.environ if environ is None else environ
        self.backend: Any = None
        # GPUs free for this launch's jobs when they were checked (None: the backend queues).
        self.capacity: Optional[float] = None
        self.t0 = time.monotonic()
        self.interrupted = False
        self.hangup = False
        self._current: Optional[PipelineJob] = None
        self._wake = threading.Event()
        self._last_progress = 0.0
        self._last_counts: Optional[Tuple[int, ...]] = None
        # A sweep whose first jobs were started as the cluster's dashboard came up.
        self._began_sweep = False

    # -------------------------------------------------------- small helpers

    @property
    def _sweep(self) -> bool:
        return self.options.sweep

    @property
    def detach(self) -> bool:
        # A supervisor's restart (`clawgym resume` run by the run's supervisor) submits and returns:
        # the supervisor follows the job.
        return bool(self.jobs[0].cfg.ray.detach) or self._restart_of_supervisor

    @property
    def _restart_of_supervisor(self) -> bool:
        from clawgym.common.ownership import SUPERVISOR_ENV

        return bool(os.environ.get(SUPERVISOR_ENV))

    @property
    def keep(self) -> bool:
        return any(bool(j.cfg.ray.keep_head) for j in self.jobs)

    def _elapsed(self) -> str:
        return fmt_duration(time.monotonic() - self.t0)

    # -------------------------------------------------------- run

    def run(self) -> int:
        """Walk the steps (module doc); returns the exit status. Raises :class:`Refused`
        (nothing submitted) when a check fails or the cluster cannot be had.

        Whatever ends the run, a job that was never submitted (refused, interrupted, still
        queued) leaves no snapshot that would count as a launch."""
        try:
            return self._run()
        finally:
            self._discard_unsubmitted()
            self._release()

    def _release(self) -> None:
        """This launch's ownership record goes with it, unless jobs it submitted run on
        (detached, a lost terminal, a dashboard that stopped answering): then it holds their
        save dirs and sandbox containers until they end (clawgym.common.ownership)."""
        from clawgym.common import ownership
        from clawgym.launch.rayjob import EXIT_LOST_CONTACT

        left = any(j.handle is not None and (j.status in ("submitted", "running on", RUNNING)
                                             or j.exit_code == EXIT_LOST_CONTACT) for j in self.jobs)
        ownership.release(jobs_left=left)

    def _discard_unsubmitted(self) -> None:
        from clawgym.snapshot.marks import discard_unsubmitted

        for j in self.jobs:
            if j.snapshot and discard_unsubmitted(j.snapshot):
                j.snapshot = None

    def _run(self) -> int:
        from clawgym.launch import rayjob as launch
        from clawgym.backends import BackendError
        from clawgym.pipeline.clusters import backend_for

        self._one_cluster()
        secrets: Dict[str, str] = {}
        for j in self.jobs:
            j.secrets = launch.resolve_secrets(j.plan, self.environ)
            secrets.update(j.secrets)
        self.backend = backend_for(self.jobs[0].cfg, [j.plan for j in self.jobs], [j.cfg for j in self.jobs])
        # Jobs of this launch that would run side by side on one head may not share a port.
        self._check_own_ports()
        try:
            self.backend.settle(secrets)
        except BackendError as err:
            raise self._refuse("the Ray cluster cannot be used", [str(err)]) from None
        try:
            self._claim()
        except BaseException:
            self.backend.abort()
            raise
        if self.backend.answers():
            # A running cluster: refuse what cannot fit, before preflight and before any snapshot.
            self._check_capacity()
        else:
            # A cluster to start needs nothing preflight checks: it comes up while preflight runs
            # (and is stopped again if preflight fails).
            self.backend.begin(secrets)
        try:
            self._preflight()
        except BaseException:
            self.backend.abort()
            raise
        # A cluster that must be started takes seconds: cleanup and snapshots happen meanwhile
        # (still before any submission); otherwise now.
        starting = not self.backend.answers()
        if not starting:
            self._cleanup_and_snapshot()
        early = len(self.jobs) == 1 and not self._sweep and not self.backend.answers()
        # A packed sweep on a cluster being started: its first jobs go in once the dashboard answers.
        early_sweep = self._sweep and not self.detach and not self.backend.answers()
        try:
            with launch.sigterm_as_interrupt():
                try:
                    self._connect(secrets, submit_early=early, sweep_early=early_sweep,
                                  prepare=self._cleanup_and_snapshot if starting else None)
                    if not early and not self._began_sweep:
                        self._check_capacity(after_start=True)
                    if self._sweep and not self._began_sweep:
                        self._sweep_header()
                    if self.detach:
                        self._submit_detached()
                    elif self._sweep:
                        self._schedule()
                    else:
                        self._foreground()
                except KeyboardInterrupt:
                    self.interrupted = True
                    with launch.uninterruptible():
                        self._interrupt()
                except launch.TerminalLost:
                    launch.survive_lost_terminal()
                    if not any(j.handle is not None for j in self.jobs):
                        # Nothing was submitted yet: nothing can keep running; stop what was started.
                        self.interrupted = True
                        with launch.uninterruptible():
                            sys.stderr.write("\n[clawgym] lost the terminal (SIGHUP) before any job was "
                                             "submitted: nothing was submitted\n")
                            self._interrupt(quiet=True)
                    else:
                        self.hangup = True
                        with launch.uninterruptible():
                            self._lost_terminal()
        finally:
            with launch.uninterruptible():
                self._close()
        return self._summarise()

    # -------------------------------------------------------- cluster and jobs

    def _sweep_header(self) -> None:
        cap = f"{self.capacity:g} GPUs free" if self.capacity is not None else "the cluster queues jobs"
        say(f"[sweep] {len(self.jobs)} jobs on {self.backend.address} ({cap})")
        quiet_ray_sdk()

    def _connect(self, secrets: Mapping[str, str], *, submit_early: bool, sweep_early: bool = False,
                 prepare: Optional[Callable[[], None]] = None) -> None:
        from clawgym.launch import rayjob as launch
        from clawgym.backends import BackendError

        early: Dict[str, Any] = {}

        def on_address(address: str) -> None:
            # A sweep on a cluster being started: its capacity is what the new head declares, and
            # the jobs that fit go in now, while the rest of the head comes up.
            if sweep_early:
                self._check_capacity(after_start=True)
                self._began_sweep = True
                self._sweep_header()
                self._fill([j for j in self.jobs if j.status == QUEUED], [])
            # One job on a cluster being started: submit as soon as the dashboard answers,
            # while the rest of the head comes up (Ray's job API waits for it by itself).
            if submit_early:
                try:
                    self._start(self.jobs[0])
                except launch.LaunchError as err:
                    early["error"] = err  # retried once the cluster is complete

        def while_waiting() -> None:
            # Runs while the cluster starts (its own processes): work that does not need it.
            if prepare is not None:
                prepare()
            launch.warm_ray_import()

        try:
            self.backend.start(secrets, on_address=on_address, while_waiting=while_waiting)
        except (BackendError, launch.LaunchError) as err:
            if self._sweep:
                raise Refused(f"clawgym: sweep stopped before any job was submitted: {err}") from None
            raise Refused(f"clawgym: {err}", code=1) from None
        j = self.jobs[0]
        if submit_early and j.handle is None and j.status == QUEUED:
            if early.get("error") is not None and self._registered(j):
                return  # the early attempt got as far as registering it
            self._start(j)

    def _registered(self, j: PipelineJob) -> bool:
        from clawgym.launch import rayjob as launch

        try:
            launch.jobs_client(self.backend.address).get_job_info(j.plan.submission_id)
        except Exception:
            return False
        j.handle = launch.JobHandle(self.backend.address, j.plan.submission_id, j.plan,
                                    redact=list(j.secrets.values()))
        j.submission_id, j.log_file = j.handle.submission_id, j.handle.log_file
        j.started, j.status = time.monotonic(), RUNNING
        mark_snapshot_submitted(j)
        if not self.detach:
            j.watcher = start_checkpoint_watcher(j.plan, j.snapshot)
        return True

    def submit_current(self, cfg: Any, plan: LaunchPlan) -> Any:
        """Called by :func:`launch_single` inside a sweep job's task function: submit that job."""
        j = self._current
        if j is None:
            raise RuntimeError("submit_current called outside a pipeline job")
        # Submit the plan that was checked and snapshotted up front; the task function's own
        # plan differs only in its timestamp (submission id, log file name).
        same = (plan.entrypoint, plan.runtime_env, plan.working_dir) == \
            (j.plan.entrypoint, j.plan.runtime_env, j.plan.working_dir)
        if not same:
            j.plan = plan
        self._submit(j)
        return j.submission_id

    def _submit(self, j: PipelineJob) -> None:
        from clawgym.common import ownership

        j.handle = self.backend.submit(j.plan, j.cfg, j.snapshot, j.secrets)
        j.submission_id = j.handle.submission_id
        j.log_file = j.handle.log_file
        # The job holds this launch's save dir and containers while it runs, also after the launcher.
        job_record = getattr(j.handle, "job_record", None)
        ownership.add_job(job_record() if callable(job_record) else
                          {"kind": "ray", "address": getattr(j.handle, "address", "") or self.backend.address or "",
                           "submission_id": j.submission_id})
        # The snapshot now belongs to a submitted job (bug 6: clawgym.snapshot.marks marks it so).
        mark_snapshot_submitted(j)
        if not self.detach:
            j.watcher = start_checkpoint_watcher(j.plan, j.snapshot)
        self._supervise(j)

    def _supervise(self, j: PipelineJob) -> None:
        """Start the run's supervisor beside it (clawgym.supervisor.process), right after the
        submission: a detached process that follows the job and every restart to the run's end."""
        from clawgym.plan.allocation import backend_name
        from clawgym.supervisor import process

        backend = backend_name(j.cfg)
        restart = j.cfg.get("restart") if hasattr(j.cfg, "get") else None
        if restart is None or not bool(restart.get("enabled", True)) or self._restart_of_supervisor:
            return
        if backend not in process.SUPERVISED_BACKENDS:
            say(f"[clawgym] restart: a cluster={backend} run is supervised where it runs (the "
                f"{'batch script' if backend == 'slurm' else 'RayJob'} and its scheduler), not by a process beside "
                "this launch")
            return
        if not j.plan.save_dir:
            return
        try:
            j.supervisor = process.spawn(j.plan.save_dir, self.environ)
        except (process.AlreadySupervised, OSError) as err:
            say(f"[clawgym] restart: no supervisor started for {j.plan.save_dir}: {err}")
            return
        if not self._sweep:
            say(f"[clawgym] supervised (restart.enabled=true): supervisor pid {j.supervisor['pid']}, log "
                f"{j.supervisor['log']}; stop the run for good: clawgym jobs stop {j.submission_id}"
                + (f" --address {self.backend.address}" if getattr(self.backend, 'address', None) else ""))

    @staticmethod
    def _supervisor_took_over(j: PipelineJob) -> Optional[Callable[[], Optional[str]]]:
        """For a supervised job: asked while its dashboard is silent, a line once the supervisor has
        ended the first attempt (e.g. its local head is dead): the launcher then follows the
        supervisor at once instead of waiting ray.lost_contact_s for a head that will not answer."""
        if j.supervisor is None:
            return None
        save, first = j.supervisor["save_dir"], int(j.supervisor.get("first_attempt", 1))

        def ended() -> Optional[str]:
            from clawgym.snapshot.attempts import read_attempts

            if any(a.number == first and a.ended is not None for a in read_attempts(save).attempts):
                return (f"[clawgym] the Ray dashboard at {j.handle.address} no longer answers and the run's "
                        f"supervisor has ended attempt {first}: following the supervisor")
            return None
        return ended

    def _follow_supervisor(self, j: PipelineJob, *, echo: bool) -> int:
        """After the first attempt: the supervisor's decisions (and, with ``echo``, each later
        attempt's output) until it ends; its exit status. Ctrl-C stops the run for good."""
        from clawgym.supervisor import process

        save = j.supervisor["save_dir"]
        files: Dict[str, int] = {}
        log = Path(j.supervisor["log"])
        files[str(log)] = int(j.supervisor.get("log_offset", 0))
        first = int(j.supervisor.get("first_attempt", 1))

        def later_attempt(p: Path) -> bool:
            # attempt-<n>.log of this supervisor's restarts (the first attempt was shown as it ran).
            number = p.stem.rsplit("-", 1)[-1]
            return number.isdigit() and int(number) > first
        prefix = "[clawgym] " if not self._sweep else f"[sweep] job #{j.num}: "

        def pump() -> None:
            paths = [log]
            if echo:
                paths += sorted((p for p in Path(save, "clawgym").glob("attempt-*.log") if later_attempt(p)),
                                key=lambda p: int(p.stem.rsplit("-", 1)[-1]))
            for path in paths:
                seen = files.setdefault(str(path), 0)
                try:
                    with open(path, encoding="utf-8", errors="replace") as fh:
                        fh.seek(seen)
                        text = fh.read()
                except OSError:
                    continue
                if not text:
                    continue
                # Whole lines only: the rest waits for its end.
                cut = text.rfind("\n") + 1
                files[str(path)] = seen + len(text[:cut].encode("utf-8"))
                for line in text[:cut].splitlines():
                    if path == log:
                        # The supervisor's own lines (a sweep: only its decisions, one per attempt).
                        if "[clawgym]" in line and (echo or "[clawgym] attempt " in line):
                            say(line[line.index("[clawgym]"):].replace("[clawgym] ", prefix, 1))
                    else:
                        sys.stdout.write(line + "\n")
                sys.stdout.flush()

        try:
            while process.running(save) is not None:
                pump()
                time.sleep(0.5)
            pump()
        except KeyboardInterrupt:
            say(f"\n{prefix}interrupted: stopping the supervised run for good (never restarted)")
            from clawgym.launch.rayjob import uninterruptible

            with uninterruptible():
                rc = process.stop_for_good(save, by="user", why="Ctrl-C in the launcher")
            self.interrupted = True
            return EXIT_INTERRUPTED if rc in (None, EXIT_INTERRUPTED) else int(rc)
        rc = process.read_record(save).get("exit_code")
        return EXIT_FAILED if rc is None else int(rc)

    def _start(self, j: PipelineJob) -> None:
        """Submit one job (through the task function in a sweep)."""
        j.started = time.monotonic()
        j.status = RUNNING
        if self._run_job is None:
            from clawgym.backends import BackendRefused

            try:
                self._submit(j)
            except BackendRefused as err:
                # The cluster's own tool (sbatch, kubectl) said no: a clean refusal, no traceback.
                j.status, j.started = QUEUED, None
                raise Refused("\n".join([f"clawgym: {err.what}; nothing was started: {err.reason}", *err.details]))
            except BaseException:
                j.status, j.started = QUEUED, None
                raise
        else:
            self._current = j
            try:
                with running_task(self):
                    self._run_job(j)
            finally:
                self._current = None
        if j.handle is None:
            j.ended = time.monotonic()
            j.status = FAILED if j.error is not None else SUCCEEDED
        self._event(j)

    def _foreground(self) -> None:
        """One job: its output on the console until it ends."""
        j = self.jobs[0]
        if j.handle is None and j.status == QUEUED:
            self._start(j)
        if j.handle is None:
            return
        ticker = metrics_ticker(j)
        try:
            # Supervised: Ctrl-C is handled below (the run is stopped for good through its supervisor).
            j.exit_code = int(j.handle.follow(lost_contact_after=float(j.cfg.ray.lost_contact_s),
                                              stop_on_interrupt=j.supervisor is None,
                                              handed_over=self._supervisor_took_over(j)))
        finally:
            if j.watcher is not None and not self.hangup:
                j.watcher.stop()
            if ticker is not None:
                ticker.stop()
        if j.supervisor is not None:
            from clawgym.launch.rayjob import TERMINAL
            from clawgym.supervisor import process

            try:
                interrupted = j.exit_code == EXIT_INTERRUPTED and j.handle.status() not in TERMINAL
            except Exception:  # noqa: BLE001 - a dashboard that does not answer: the supervisor decides
                interrupted = False
            if interrupted:
                say("[clawgym] interrupted: stopping the supervised run for good (never restarted)")
                from clawgym.launch.rayjob import uninterruptible

                with uninterruptible():
                    process.stop_for_good(j.supervisor["save_dir"], by="user", why="Ctrl-C in the launcher")
                j.exit_code = EXIT_INTERRUPTED
            else:
                j.exit_code = self._follow_supervisor(j, echo=True)
        j.ended = time.monotonic()
        j.status = {0: SUCCEEDED, EXIT_INTERRUPTED: STOPPED}.get(j.exit_code, FAILED)
        if j.status == SUCCEEDED and getattr(j.handle, "not_applied", False):
            j.status = NOT_APPLIED  # a manifest for the user to apply: nothing ran, nothing succeeded
        if j.exit_code == EXIT_INTERRUPTED:
            self.interrupted = True

    def _follow(self, j: PipelineJob) -> None:
        try:
            j.exit_code = int(j.handle.follow(echo=False, lost_contact_after=float(j.cfg.ray.lost_contact_s),
                                              say=lambda text: say(f"[sweep {self._elapsed()}] job #{j.num}: "
                                                                   + text.replace("[clawgym] ", "", 1)),
                                              handed_over=self._supervisor_took_over(j)))
            if j.supervisor is not None and not self.hangup:
                # The job ends when its supervisor ends (a restart is the same job, in the same save dir).
                j.exit_code = self._follow_supervisor(j, echo=False)
        except BaseException as exc:  # reported as the job's failure
            j.error = exc
        finally:
            if j.watcher is not None:
                j.watcher.stop()
            self._wake.set()

    def _free_now(self, running: Sequence[PipelineJob]) -> float:
        return float(self.capacity or 0) - sum(j.plan.gpus_required for j in running)

    def _schedule(self) -> None:
        """First fit in job order: start every queued job whose GPUs fit next to the running ones."""
        from clawgym.launch.rayjob import TERMINAL

        queue = [j for j in self.jobs if j.status == QUEUED]
        running: List[PipelineJob] = [j for j in self.jobs if j.status == RUNNING]
        self._known = len(self.jobs)
        for j in running:
            self._spawn_follower(j)
        while queue or running:
            for j in list(running):
                ray_status = self._ended(j, TERMINAL)
                if ray_status is not None:
                    running.remove(j)
                    j.ended = time.monotonic()
                    ok = ray_status == "SUCCEEDED" if j.exit_code is None else j.exit_code == 0
                    if j.exit_code is None:
                        j.exit_code = 0 if ok else (EXIT_INTERRUPTED if ray_status == "STOPPED" else 1)
                    j.status = SUCCEEDED if ok and j.error is None else FAILED
                    if j.stop_requested and not ok:
                        j.status = STOPPED
                    self._event(j)
            if self.listener is not None:
                self.listener.poll(self, list(running))
            self._fill(queue, running)
            self._progress()
            if queue or running:
                self._wake.wait(self.options.poll_interval)
                self._wake.clear()
        for j in self.jobs:
            if j.thread is not None:
                j.thread.join(timeout=30)

    def _fill(self, queue: List[PipelineJob], running: List[PipelineJob]) -> None:
        """Start queued jobs, in order, while their GPUs fit next to the running ones (first fit).
        With a listener, an empty queue and room left: it may submit more, which start at once."""
        while True:
            self._take_submitted(queue)
            free = self._free_now(running) if self.capacity is not None else float("inf")
            for j in list(queue):
                if self.options.max_concurrent and len(running) >= self.options.max_concurrent:
                    break
                if self._port_taken(j, running):
                    continue  # waits for the running job that claims its port to end
                if j.plan.gpus_required <= free:
                    queue.remove(j)
                    self._start(j)
                    if j.status == RUNNING:
                        running.append(j)
                        free -= j.plan.gpus_required
                        self._spawn_follower(j)
            full = bool(self.options.max_concurrent) and len(running) >= self.options.max_concurrent
            if self.listener is None or queue or full or free <= 0 or self.interrupted:
                return
            known = len(self.jobs)
            self.listener.room(self, None if self.capacity is None else free, len(running))
            if len(self.jobs) == known:
                return

    def _port_taken(self, j: PipelineJob, running: Sequence[PipelineJob]) -> bool:
        """True when a running job of this launch claims one of ``j``'s ports on the same head (jobs
        handed to the pipeline up front never do: _check_own_ports refused that; a job submitted while
        it runs, a tuner's trial with a pinned sglang.api_port, waits for the port instead)."""
        if not getattr(self.backend, "packs_jobs", True) or not running:
            return False
        from clawgym.launch.rayjob import ports_of

        taken = {p for r in running for p in ports_of(r.plan)}
        return any(p in taken for p in ports_of(j.plan))

    def _take_submitted(self, queue: List[PipelineJob]) -> None:
        """Jobs that :meth:`submit` added since the scheduler last looked join its queue."""
        queue.extend(j for j in self.jobs[self._known:] if j.status == QUEUED)
        self._known = len(self.jobs)

    # -------------------------------------------------------- driving a running pipeline (the tuner)

    def submit(self, job: PipelineJob) -> None:
        """Add a validated, planned job to this running sweep (call it from a :class:`PipelineListener`
        method). It is checked as the launch's first jobs were (one cluster, the cluster's GPUs,
        preflight), snapshotted, and started as soon as its GPUs are free and no running job claims
        one of its ports.
        Raises :class:`Refused` (its report names the job) when a check fails: nothing was
        started and no snapshot is left."""
        from clawgym.launch import rayjob as launch
        from clawgym.backends import cluster_key, describe_cluster
        from clawgym.preflight import PreflightError, run_preflight
        from clawgym.snapshot.layout import SnapshotError
        from clawgym.snapshot.marks import discard_unsubmitted
        from clawgym.snapshot.write import write_launch_snapshot

        first = self.jobs[0]
        where = f"job #{job.num} ({job.label})"
        if cluster_key(job.plan) != cluster_key(first.plan) or bool(job.cfg.ray.detach) != self.detach:
            raise Refused(f"clawgym: {where} asks for another Ray cluster ({describe_cluster(job.plan)}) than the "
                          f"running jobs ({describe_cluster(first.plan)}); nothing was started")
        if self.capacity is not None and job.plan.gpus_required > self.capacity:
            raise Refused(f"clawgym: {where} needs {job.plan.gpus_required} GPUs; this launch has {self.capacity:g}; "
                          "nothing was started")
        # A port a queued or running job of this launch claims (a pinned sglang.api_port) is no refusal:
        # the job waits in the queue until no running job claims it (_fill), as it waits for GPUs.
        job.secrets = launch.resolve_secrets(job.plan, self.environ)
        # Once this launch's cluster is up (a head it started, too), a job added now is checked against
        # that cluster, as a reused head is: the head's ports are the launch's own, and probing them
        # would find its own head and refuse every such job (a tuner's trials after the first wave).
        local = self.backend.checks_this_machine() and not getattr(self.backend, "started_here", False)
        try:
            run_preflight(job.cfg, job.plan, local_head=local, echo=None)
        except PreflightError as err:
            raise Refused(f"clawgym: {where}: preflight failed; nothing was started\n{err.report()}") from None
        try:
            job.snapshot = str(write_launch_snapshot(job.cfg, job.plan, record=job.record))
        except SnapshotError as err:
            raise Refused(f"clawgym: {where}: {err}") from None
        job.status = QUEUED
        self.jobs.append(job)
        if self.interrupted and discard_unsubmitted(job.snapshot):
            job.snapshot = None

    def stop(self, job: PipelineJob) -> None:
        """Stop one running job through its backend (in the background: the scheduler sees it end,
        records it as stopped and tells the listener)."""
        if job.status != RUNNING or job.handle is None or job.stop_requested:
            return
        job.stop_requested = True

        def stop() -> None:
            try:
                from clawgym.supervisor import process

                if job.supervisor is not None:
                    # Pruned: recorded as a stop for good first (its supervisor never restarts it, and
                    # stops a restart's job itself), then the job stopped at once as before.
                    process.signal_stop(job.supervisor["save_dir"], by="pruned", why="pruned by the tuner")
                job.handle.stop()
                if job.supervisor is not None:
                    process.wait(job.supervisor["save_dir"], timeout=90.0)
            except Exception as exc:  # noqa: BLE001 - reported; the job's follower sees how it ended
                say(f"[sweep {self._elapsed()}] could not stop job #{job.num} ({job.submission_id}): {exc}")
            self._wake.set()

        threading.Thread(target=stop, name=f"clawgym-stop-{job.num}", daemon=True).start()

    def _spawn_follower(self, j: PipelineJob) -> None:
        if j.thread is None and j.handle is not None:
            j.thread = threading.Thread(target=self._follow, args=(j,), name=f"clawgym-job-{j.num}", daemon=True)
            j.thread.start()

    @staticmethod
    def _ended(j: PipelineJob, terminal: Sequence[str]) -> Optional[str]:
        """Ray's terminal status of a running job, or None while it runs."""
        if j.thread is not None and not j.thread.is_alive():
            return "SUCCEEDED" if j.exit_code == 0 else "FAILED"
        if j.supervisor is not None and j.thread is not None:
            return None  # supervised: it ends when its supervisor (followed by its thread) ends
        try:
            status = j.handle.status()
        except Exception:  # the dashboard hiccuped; the follower thread reports a lasting loss
            return None
        return status if status in terminal else None

    def _submit_detached(self) -> None:
        for j in self.jobs:
            if j.status == QUEUED:
                self._start(j)
            if j.status == RUNNING:
                j.status = "submitted"
                j.ended = time.monotonic()
        handles = [j.handle for j in self.jobs if j.handle is not None]
        if handles and not self._sweep and not self._restart_of_supervisor:
            j = self.jobs[0]
            say("\n".join([f"[clawgym] job {j.submission_id} submitted (detached); it runs on {self.backend.address}",
                           *self.backend.hints(handles)]))

    # -------------------------------------------------------- signals

    def _interrupt(self, quiet: bool = False) -> None:
        prefix = f"[sweep {self._elapsed()}]" if self._sweep else "[clawgym]"
        # One job, interrupted before the launcher followed it (e.g. while it recorded the head): the
        # same words as Ctrl-C while following, from the same method.
        single = (not self._sweep and len(self.jobs) == 1 and self.jobs[0].status == RUNNING
                  and self.jobs[0].handle is not None and self.jobs[0].supervisor is None)
        if not quiet and self._sweep:
            say(f"\n{prefix} interrupted: stopping running jobs; queued jobs are not submitted")
        elif not quiet and not single:
            say(f"\n{prefix} interrupted: stopping running jobs")
        # Supervised runs are stopped for good through their supervisors (which stop the current
        # attempt's job), all signalled first, then waited for.
        from clawgym.supervisor import process

        supervised = [j for j in self.jobs if j.supervisor is not None and j.status == RUNNING]
        for j in supervised:
            process.signal_stop(j.supervisor["save_dir"], by="user", why="Ctrl-C in the launcher")
        for j in supervised:
            process.wait(j.supervisor["save_dir"], timeout=90.0)
        # Ask Ray to stop them all first, so they wind down together; then wait for each.
        for j in self.jobs:
            if j.status == RUNNING and j.handle is not None:
                try:
                    j.handle.client.stop_job(j.submission_id)
                except Exception:
                    pass  # stop() below retries and reports
        for j in self.jobs:
            if j.status == RUNNING and j.handle is not None:
                try:
                    if single and not quiet:
                        j.handle.stop_interrupted()
                    else:
                        j.handle.stop()
                except Exception as exc:
                    say(f"{prefix} could not stop job #{j.num} ({j.submission_id}): {exc}")
                j.status = STOPPED
                j.ended = time.monotonic()
                j.exit_code = EXIT_INTERRUPTED
            elif j.status in (QUEUED, RUNNING):  # RUNNING without a handle: interrupted before submitting
                j.status = "not started"
        for j in self.jobs:
            if j.watcher is not None:
                j.watcher.stop()
            if j.thread is not None:
                j.thread.join(timeout=10)

    def _lost_terminal(self) -> None:
        """SIGHUP: leave every submitted job running, as if detached; submit nothing more."""
        when = time.strftime("%Y-%m-%d %H:%M:%S")
        handles = []
        for j in self.jobs:
            if j.watcher is not None:
                j.watcher.stop()
            if j.status == RUNNING and j.handle is not None:
                j.status = "running on"
                handles.append(j.handle)
                j.handle.note_in_log(
                    f"[clawgym] {when}: the launcher lost its terminal (SIGHUP); the job keeps running, nobody "
                    f"follows it. Follow: clawgym jobs logs {j.submission_id} --follow --address "
                    f"{self.backend.address}; stop: clawgym jobs stop {j.submission_id} --address "
                    f"{self.backend.address}"
                    + (f"; stamp checkpoints: clawgym stamp {j.plan.save_dir} --follow" if j.plan.save_dir else ""))
            elif j.status in (QUEUED, RUNNING):
                j.status = "not started"
        sys.stderr.write("\n".join([f"[clawgym] lost the terminal (SIGHUP): {len(handles)} job(s) keep running on "
                                    f"{self.backend.address}; queued jobs are not submitted",
                                    *self.backend.hints(handles)]) + "\n")
        sys.stderr.flush()

    # -------------------------------------------------------- end

    def _close(self) -> None:
        if self.backend is None:
            return
        ours_running = [j.submission_id for j in self.jobs if j.submission_id and j.status in (STOPPED, FAILED)]
        detached = self.detach and any(j.handle is not None for j in self.jobs)
        from clawgym.launch.rayjob import EXIT_LOST_CONTACT

        if self._restart_of_supervisor:
            # A supervisor's restart leaves the head as it found it: to the launch that started it
            # (which stops it once its supervisor ended), or kept while the job runs.
            keep, reason = False, "a supervisor's restart"
        elif self.hangup:
            keep, reason = True, "its launcher lost the terminal (SIGHUP) while jobs ran"
        elif any(j.exit_code == EXIT_LOST_CONTACT for j in self.jobs):
            # Its jobs may still run: never stopped on a guess.
            keep, reason = True, "its dashboard stopped answering while a job was followed"
        elif detached and not self.interrupted:
            keep, reason = True, "detached jobs run on it"
        else:
            keep, reason = self.keep and not self.interrupted, "ray.keep_head=true"
        try:
            self.backend.close(keep=keep, reason=reason, ignore_jobs=ours_running)
        except Exception as exc:
            say(f"[clawgym] could not clean up the cluster: {exc}")

    def _summarise(self) -> int:
        record_endings(self.jobs)
        if self.hangup:
            from clawgym.launch.rayjob import EXIT_HANGUP

            return EXIT_HANGUP
        if self._sweep:
            say(summary_table(self.jobs))
            say_runs_table(self.jobs)
            if self.interrupted:
                say("[sweep] interrupted: running jobs stopped, queued jobs not submitted")
                return EXIT_INTERRUPTED
            if self.detach:
                for j in self.jobs:
                    if j.handle is not None:
                        say(f"  job #{j.num}: follow: clawgym jobs logs {j.submission_id} --follow --address "
                            f"{self.backend.address}   stop: clawgym jobs stop {j.submission_id} --address "
                            f"{self.backend.address}")
        if self.interrupted:
            return EXIT_INTERRUPTED
        failed = [j for j in self.jobs if j.status == FAILED]
        if not failed:
            return 0
        # 1 whatever the trainer exited with (clawgym/common/exit_codes.py); the message names its code.
        return EXIT_FAILED

    # -------------------------------------------------------- progress

    def _event(self, j: PipelineJob) -> None:
        if self.listener is not None:
            if j.status == RUNNING:
                self.listener.job_started(self, j)
            elif j.status in (SUCCEEDED, FAILED, STOPPED):
                self.listener.job_ended(self, j)
        if not self._sweep:
            return
        if j.status == RUNNING:
            say(f"[sweep {self._elapsed()}] job #{j.num} running: {j.plan.run_name} ({j.submission_id}, "
                f"{j.plan.gpus_required} GPUs)")
        elif j.status == SUCCEEDED:
            say(f"[sweep {self._elapsed()}] job #{j.num} succeeded after {fmt_duration(j.duration)}"
                + metrics_note(j))
        elif j.status == FAILED:
            say(f"[sweep {self._elapsed()}] job #{j.num} FAILED ({why_failed(j)}) after {fmt_duration(j.duration)}"
                + metrics_note(j) + (f"; log: {j.log_file}" if j.log_file else ""))
        elif j.status == STOPPED:
            say(f"[sweep {self._elapsed()}] job #{j.num} stopped after {fmt_duration(j.duration)}" + metrics_note(j))

    def _progress(self, force: bool = False) -> None:
        counts = tuple(sum(1 for j in self.jobs if j.status == s) for s in (QUEUED, RUNNING, SUCCEEDED, FAILED))
        now = time.monotonic()
        interval = self.options.progress_interval
        if force or counts != self._last_counts or (interval > 0 and now - self._last_progress >= interval):
            self._last_counts, self._last_progress = counts, now
            notes = [(j.num, metrics_note(j, sep="")) for j in self.jobs if j.status == RUNNING]
            say(f"[sweep {self._elapsed()}] queued {counts[0]} | running {counts[1]} | "
                f"succeeded {counts[2]} | failed {counts[3]}" + "".join(f" | #{n} {t}" for n, t in notes if t))
