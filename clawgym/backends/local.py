"""A Ray head that clawgym starts on this machine, or reuses when an earlier launch left one.

Its lifecycle (start, record, shared use, stop) lives in :mod:`clawgym.backends.head`; this
backend decides when: ``settle`` deals with what an earlier launch left on the dashboard
port; ``begin`` (before preflight) reserves the new head's ports and runs ``ray start`` in
the background, or adopts the head :func:`speculate` began with the same settings while the
config was validated, ``abort`` stops it when preflight fails; ``start`` reuses a live head with
the same settings (joining its users; an orphaned one is reported with what runs there) or
finishes starting one with the secrets in its environment, packaging the jobs' working dirs
while it comes up (that preparation at a lower CPU priority: :func:`yielding`); ``close``
leaves the users list and stops the head when this launch was the last user and nobody asked
to keep it.

A head started here declares its GPUs in its argv and runs no one else's jobs yet, so its
capacity is known without asking its dashboard (whose node list may still be empty when it
first answers): the first jobs go in at once.
"""

from __future__ import annotations

import os
import sys
import time
from types import SimpleNamespace
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence

from clawgym.backends import BackendError
from clawgym.backends._ray import RayJobsBackend


def _say(text: str) -> None:
    sys.stdout.write(text + "\n")
    sys.stdout.flush()


#: Niceness added to the thread that prepares the launch while a head starts (see ``yielding``).
PREPARE_NICENESS = 5


def yielding(work: Callable[[], None]) -> None:
    """Run ``work`` in a thread of lower CPU priority and wait for it; its exception is raised here.

    While a head starts, its critical path is CPU-bound (``ray start`` and then the dashboard,
    the client server, the monitor, the dashboard's modules, each importing Ray), and the launch's
    own preparation (imports of Ray's job SDK, packaging, snapshots, the leftover check) needs
    about as much CPU again at the same time. On a machine with few free cores the two share
    them and the head comes up late; the preparation has seconds of slack (the dashboard answers
    long after it is done), so it gives way. The priority is the thread's own (Linux: niceness
    is per thread) and ends with it: the launcher's main thread, and everything started from it
    later, keep theirs. Where per-thread priority is not available, ``work`` just runs.

    An interrupt (Ctrl-C) while ``work`` runs waits for it to finish before it is raised, so
    nothing of the preparation goes on behind the cleanup.
    """
    import threading

    result: Dict[str, BaseException] = {}

    def body() -> None:
        try:
            tid = threading.get_native_id()
            os.setpriority(os.PRIO_PROCESS, tid, os.getpriority(os.PRIO_PROCESS, tid) + PREPARE_NICENESS)
        except (AttributeError, OSError):
            pass  # not Linux, or not allowed: the same work at the same priority
        try:
            work()
        except BaseException as exc:  # noqa: BLE001 - re-raised in the caller's thread
            result["error"] = exc

    thread = threading.Thread(target=body, name="clawgym-prepare", daemon=True)
    thread.start()
    try:
        while thread.is_alive():
            thread.join(0.05)
    except BaseException:
        thread.join()
        raise
    if "error" in result:
        raise result["error"]


# ---------------------------------------------------------------- starting before validation

# A head begun before the config's validation (``speculate``), until a launch with exactly its
# settings adopts it (``LocalHead.begin``) or it is stopped (``drop``).
_SPECULATIVE: Any = None


def speculate(c: Mapping[str, Any], environ: Mapping[str, str]) -> None:
    """Begin the local head of a single run before its config is validated.

    ``c`` holds the resolved ``ray``, ``cluster``, ``sandbox`` and ``wandb`` nodes: all that
    decides the head's ``ray start`` argv, environment and secrets (:mod:`clawgym.plan.build`). Only
    when no record of an earlier head is on its dashboard port (what is there is the pipeline's
    to settle, after validation: nothing of it is touched here) and its ports are free. Quiet:
    a refused config must not read as if a head had started. The head belongs to this process
    from now on: a launch with the same settings adopts it, anything else (validation refuses,
    another plan, an exit before the launch) stops it (:func:`drop`, also at exit)."""
    global _SPECULATIVE
    import atexit

    from clawgym.launch import rayjob as launch

    from clawgym.plan import build as plan

    from clawgym.backends.head import records as head_records, signals as head_signals, start as head_start

    if _SPECULATIVE is not None:
        return
    argv = plan.ray_start_argv(c)
    if argv is None or head_records.load_record(head_records.dashboard_port_of(argv)) is not None:
        return
    env = plan.head_env(c)
    names = plan.secret_env(c, use_wandb=plan.wandb_enabled(c, environ))
    secrets = launch.resolve_secrets(SimpleNamespace(secret_env=names), environ)
    # The head is this launch's from its first process: a SIGTERM or SIGHUP from here on stops
    # it (drop, through its record) instead of killing the launcher around it.
    head_signals.interrupt_on_signals()
    atexit.register(drop)
    try:
        _SPECULATIVE = head_start.begin_head(argv, env, secrets=secrets, quiet=True)
    except head_records.HeadError:
        return  # e.g. a port in use: the launch reports it (preflight), or validation refuses first


def adopt(argv: Sequence[str], env: Mapping[str, str], secrets: Mapping[str, str]) -> Any:
    """The head :func:`speculate` began, when it was begun with exactly these settings; a head
    begun with others is stopped. None when there is none to adopt."""
    global _SPECULATIVE
    head, _SPECULATIVE = _SPECULATIVE, None
    if head is None:
        return None
    if (head.plan_argv, head.env, head.secrets) != (list(argv), dict(env), dict(secrets)):
        head.abort()
        return None
    return head


def drop() -> None:
    """Stop the head :func:`speculate` began and nobody adopted (nothing is left of it)."""
    global _SPECULATIVE
    from clawgym.backends.head import signals as head_signals

    with head_signals.signals_deferred():
        head, _SPECULATIVE = _SPECULATIVE, None
        if head is not None:
            head.abort()


class LocalHead(RayJobsBackend):
    name = "local"

    def __init__(self, plans: Sequence[Any], cfgs: Sequence[Any]) -> None:
        super().__init__(plans, cfgs)
        plan = plans[0]
        self.argv: List[str] = list(plan.ray_start)
        self.env = dict(plan.ray_start_env)
        # The head's record once reused or started (None before start, and after a stop).
        self.record: Any = None
        # A live head of an earlier launch with the same settings, found by settle().
        self.reusable: Any = None
        self._settled = False
        self._closed = False
        # A head being started in the background (begin), until start() has its record.
        self.pending: Any = None
        # The jobs' working dirs packaged while the head comes up: dir -> zip (clawgym.backends.workdir).
        self.packages = None
        # The head being started, until its dashboard agent answered once (submissions wait for it).
        self._agent_of: Any = None

    def checks_this_machine(self) -> bool:
        # Preflight checks this node's GPUs and the head's ports only when it starts the head.
        return self.reusable is None

    def settle(self, secrets: Mapping[str, str]) -> None:
        from clawgym.backends.head import records as head_records, settle as head_settle

        try:
            self.reusable = head_settle.settle(self.argv, self.env, secrets)
        except head_records.HeadError as err:
            raise BackendError(str(err)) from None
        self._settled = True
        if self.reusable is not None:
            self.address = self.reusable.dashboard_address
            drop()  # a head begun before validation is not needed: this launch joins that one

    def answers(self) -> bool:
        return self.reusable is not None

    def begin(self, secrets: Mapping[str, str]) -> None:
        # Reserve the head's ports and run `ray start` in the background while preflight runs.
        from clawgym.backends.head import records as head_records, start as head_start

        if self.reusable is not None or self.pending is not None:
            return
        adopted = adopt(self.argv, self.env, secrets)
        if adopted is not None:
            # Begun before validation, with exactly this launch's settings: it is this launch's head.
            adopted.quiet = False
            _say(f"[clawgym] starting a Ray head at {adopted.address} ...")
            self.pending = adopted
            return
        try:
            self.pending = head_start.begin_head(self.argv, self.env, secrets=secrets)
        except head_records.HeadError:
            # A port is taken: preflight's ports check says which; start() would refuse the same way.
            self.pending = None

    def abort(self) -> None:
        pending, self.pending = self.pending, None
        if pending is not None:
            pids = pending.abort()
            _say(f"[clawgym] stopped the Ray head that was starting at {pending.address} alongside the checks "
                 f"({len(pids)} processes); nothing is left running")
        self._drop_packages()

    def _drop_packages(self) -> None:
        if self.packages is not None:
            self.packages.cleanup()
            self.packages = None

    def start(self, secrets: Mapping[str, str], *, on_address: Optional[Callable[[str], None]] = None,
              while_waiting: Optional[Callable[[], None]] = None) -> Optional[str]:
        from clawgym.backends.head import records as head_records, start as head_start, users as head_users
        from clawgym.backends.workdir import Packages

        if not self._settled:
            self.settle(secrets)
        if self.reusable is not None:
            rec = self.reusable
            state = head_users.ownership(rec)
            self._report_reuse(rec, state)
            try:
                self.record = head_users.join_head(rec)
            except head_records.HeadError as err:
                raise BackendError(str(err)) from None
            self.address = rec.dashboard_address
            self.started_here = True  # its environment carries the secrets (settle compared them)
            if while_waiting is not None:
                while_waiting()
            if on_address is not None:
                on_address(self.address)
            return self.address
        try:
            pending = self.pending or head_start.begin_head(self.argv, self.env, secrets=secrets)
        except head_records.HeadError as err:
            raise BackendError(str(err)) from None
        self.pending = pending
        def prepare() -> None:
            # While the head comes up: the pipeline's work (snapshots), then the working dirs packaged
            # as Ray's job SDK would package them, so submitting only uploads them.
            if while_waiting is not None:
                while_waiting()
            self.packages = Packages.build(self.plans)

        try:
            yielding(prepare)
        except BaseException:
            self.abort()
            raise
        self._agent_of = pending
        try:
            self.record = pending.finish(self._early(on_address))
        except head_records.HeadError as err:
            self._drop_packages()
            raise BackendError(str(err)) from None
        except BaseException:
            self._drop_packages()
            raise
        finally:
            self.pending = None
        self.address = self.record.dashboard_address
        self.started_here = True
        return self.address

    # A head started by this launch seconds ago declares its GPUs in its argv and runs nobody
    # else's jobs: no need to ask its dashboard (whose node list may still be empty).

    def _fresh(self) -> bool:
        return self.reusable is None

    def total_gpus(self) -> float:
        from clawgym.backends.head import liveness as head_liveness, records as head_records

        declared = head_records.declared_gpus(self.argv)
        if self._fresh() and declared is not None:
            return declared
        # A head another launch just started (joined while it came up) may not list its node yet either.
        return head_liveness.cluster_gpus(self.address, wait_for_node=True)

    def free_gpus(self) -> Optional[float]:
        return self.total_gpus() if self._fresh() else super().free_gpus()

    def ports_in_use(self) -> Dict[int, str]:
        return {} if self._fresh() else super().ports_in_use()

    def running_elsewhere(self) -> List[str]:
        return [] if self._fresh() else super().running_elsewhere()

    def submit(self, plan: Any, cfg: Any, snapshot: Optional[str], secrets: Mapping[str, str]) -> Any:
        from clawgym.launch import rayjob as launch

        package = self.packages.get(plan) if self.packages is not None else None
        return launch.submit(self.address, plan, secrets=secrets, started_here=self.started_here,
                             pass_secrets=bool(cfg.ray.pass_secrets_in_runtime_env), working_dir_package=package,
                             before_post=self._wait_for_agent if self._agent_of is not None else None)

    def _wait_for_agent(self) -> None:
        # A head this launch is starting: post the first job when its agent answers (HeadStart.wait_for_agent).
        # Not answering within the bound changes nothing: Ray's job API then waits by itself.
        head, self._agent_of = self._agent_of, None
        if head is not None:
            head.wait_for_agent(timeout=30.0)

    def _early(self, on_address: Optional[Callable[[str], None]]) -> Optional[Callable[[str], None]]:
        if on_address is None:
            return None

        def call(address: str) -> None:
            # The dashboard answers seconds before `ray start` returns: jobs can go in now.
            self.address, self.started_here = address, True
            on_address(address)
        return call

    def _report_reuse(self, rec: Any, state: str) -> None:
        from clawgym.backends.head import jobs as head_jobs, users as head_users

        addr = rec.dashboard_address
        started = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(rec.start_time))
        if state == "in use":
            users = ", ".join(f"pid {int(u['pid'])}" for u in head_users.live_users(rec))
            _say(f"[clawgym] reusing the Ray head clawgym started earlier at {addr}, shared with the running "
                 f"clawgym launch(es) {users}; the last launch to end stops it")
            return
        if state == "kept":
            _say(f"[clawgym] reusing the Ray head clawgym started earlier at {addr} (kept: "
                 f"{rec.kept_reason or 'ray.keep_head'}; it keeps running; stop it with: "
                 f"clawgym jobs stop-head --address {addr})")
            return
        try:
            running = head_jobs.running_job_details(addr)
        except Exception:
            running = []
        lines = [f"[clawgym] WARNING: the Ray head at {addr} is ORPHANED: the clawgym launch that used it "
                 f"(pid {rec.owner_pid}, head started {started}) is gone without stopping it or asking to keep it."]
        if running:
            lines.append("  still running there (nobody follows them):")
            lines += [f"    {j.describe()}: stop with clawgym jobs stop {j.submission_id} --address {addr}"
                      for j in running]
        else:
            lines.append("  no job runs there.")
        lines.append(f"  stop the head: clawgym jobs stop-head --address {addr}")
        lines.append("  reusing it for this launch (the orphaned jobs' GPUs and ports count as taken); "
                     "it is stopped when this launch ends")
        _say("\n".join(lines))

    def _lost(self, rec: Any, current: Any) -> None:
        """This launch's head was lost while it ran, and its record cleared (by the run's supervisor,
        which replaced it, or by a later launch's settle): nothing of it is kept or stopped by name
        but its own leftovers (by its marker); the head recorded on that port now is not this
        launch's, and is ended by its owner."""
        import shutil

        from clawgym.backends.head import processes as head_processes

        left = head_processes.record_processes(rec)
        if left:
            head_processes.terminate(left, grace=3.0)
        shutil.rmtree(rec.temp_dir, ignore_errors=True)
        now = ""
        if current is not None:
            owners = ", ".join(f"pid {int(u['pid'])}" for u in current.users) or "none alive"
            now = f"; the head there now is another one (its users: {owners}), ended by its owner"
        _say(f"[clawgym] the Ray head this launch started at {rec.dashboard_address} was lost during the run"
             + (f" ({len(left)} leftover processes of it stopped)" if left else "") + now)

    def close(self, *, keep: bool, reason: str = "", ignore_jobs: Sequence[str] = ()) -> None:
        from clawgym.backends.head import (
            jobs as head_jobs,
            records as head_records,
            start as head_start,
            users as head_users,
        )

        self._drop_packages()
        if self._closed or self.record is None:
            return
        self._closed = True
        rec, addr = self.record, self.record.dashboard_address
        with head_records.record_lock(rec.dashboard_port):
            current = head_records.load_record(rec.dashboard_port)
            if current is None or current.marker != rec.marker:
                self._lost(rec, current)
                return
            rec, others = head_users.leave_head(rec, keep=keep, reason=reason)
            if keep:
                _say(f"[clawgym] keeping the Ray head at {addr} ({reason or 'ray.keep_head=true'}); "
                     f"stop it later: clawgym jobs stop-head --address {addr}")
                return
            if others:
                _say(f"[clawgym] leaving the Ray head at {addr} to the clawgym launch(es) still using it "
                     f"({', '.join('pid ' + str(int(u['pid'])) for u in others)}); the last one stops it")
                return
            if rec.kept:
                _say(f"[clawgym] the Ray head at {addr} stays (kept: {rec.kept_reason or 'ray.keep_head'}); "
                     f"stop it later: clawgym jobs stop-head --address {addr}")
                return
            try:
                busy = [j for j in head_jobs.running_jobs(addr) if j not in ignore_jobs]
            except Exception:
                busy = []
            if busy:
                # Nobody follows them any more: record the head as kept, so it is not an orphan.
                head_users.leave_head(rec, keep=True, reason=f"jobs {', '.join(busy)} were running when the "
                                                           f"last launch ended")
                _say(f"[clawgym] keeping the Ray head at {addr}: job(s) still running there: {', '.join(busy)}; "
                     f"stop it later: clawgym jobs stop-head --address {addr}")
                return
            head_start.stop_head(rec)
