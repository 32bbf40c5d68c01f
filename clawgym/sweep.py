"""Sweeps (``python train.py -m ...``) of clawgym jobs, driven by the Hydra launcher plugin.

Before anything starts, every job is composed, named, validated and planned, and the
sweep is refused when two jobs would share a save dir, run name or W&B run name. A real
sweep then preflights every job, connects to (or starts) ONE cluster, and packs jobs
onto its GPUs: a job starts as soon as its ``plan.gpus_required`` fit next to the
running ones (first fit in sweep order), else it waits. Each job still runs through
Hydra's ``run_job`` (job dir, ``.hydra/``, callbacks, logging); its task function's
``launch_single`` lands in :meth:`SweepSession.submit_job`, which submits and returns at
once, and a thread per job tees the job's output to its log file.

Ray, docker and wandb are imported inside functions (``import clawgym.sweep`` is light).
"""

from __future__ import annotations

import copy
import hashlib
import os
import re
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

from hydra.core.utils import JobReturn, JobStatus, configure_log, filter_overrides, run_job
from hydra.errors import CompactHydraException
from hydra.types import HydraContext, TaskFunction
from omegaconf import DictConfig, OmegaConf, open_dict, read_write

from clawgym.plan import LaunchPlan, build_plan
from clawgym.validate import ConfigError, violations

#: Exit status of a sweep refused before anything started (as a single run's config error).
EXIT_REFUSED = 2
#: Exit status after Ctrl-C (128 + SIGINT), as a single run.
EXIT_INTERRUPTED = 130
#: Longest default run name; longer ones are cut and get a hash so they stay distinct.
MAX_NAME = 150

QUEUED, RUNNING, SUCCEEDED, FAILED, STOPPED = "queued", "running", "succeeded", "failed", "stopped"


class SweepJobFailed(CompactHydraException):
    """A sweep job that failed; Hydra prints its message alone (no traceback)."""


class SweepRefused(Exception):
    """The sweep cannot start; ``str()`` is the whole user-facing report."""


@dataclass
class LauncherOptions:
    """The launcher node's fields that the sweep uses (see ClawGymLauncherConf)."""

    # Run clawgym jobs one after another through the single-run path.
    inline: bool = False
    # Most jobs running at once; 0 = as many as the GPUs hold.
    max_concurrent: int = 0
    # Seconds between checks of running jobs.
    poll_interval: float = 1.0
    # Seconds between progress lines while nothing changes; 0 = on changes only.
    progress_interval: float = 30.0


@dataclass
class SweepJob:
    """One job of the sweep and what happened to it."""

    # Hydra job number (``hydra.job.num``).
    num: int
    # Overrides as the user's sweep produced them.
    user_overrides: List[str]
    # Overrides the job runs with (the user's plus default naming / port spreading).
    overrides: List[str]
    # The user's overrides whose value differs between jobs (what tells this job apart).
    distinct: List[str]
    # Composed sweep config, with the ``hydra`` node.
    config: DictConfig
    # The plan composed up front (the task function rebuilds it with its own timestamp).
    plan: Optional[LaunchPlan] = None
    # "dry_run", "preflight" (preflight_only) or "launch".
    kind: str = "launch"
    status: str = QUEUED
    # Secrets this job's plan names, read from the environment (never printed).
    secrets: Dict[str, str] = field(default_factory=dict, repr=False)
    handle: Any = None
    submission_id: Optional[str] = None
    log_file: Optional[str] = None
    started: Optional[float] = None
    ended: Optional[float] = None
    exit_code: Optional[int] = None
    # Why the job failed, when it did.
    error: Optional[BaseException] = None
    job_return: Optional[JobReturn] = None
    thread: Optional[threading.Thread] = None
    # Launch snapshot written before submission, and the checkpoint watcher that copies it.
    snapshot: Optional[str] = None
    watcher: Any = None

    @property
    def label(self) -> str:
        return " ".join(filter_overrides(self.user_overrides)) or "(no overrides)"

    @property
    def short_label(self) -> str:
        return " ".join(filter_overrides(self.distinct)) or self.label

    @property
    def task_cfg(self) -> DictConfig:
        return task_config(self.config)

    @property
    def duration(self) -> Optional[float]:
        if self.started is None:
            return None
        return (self.ended or time.monotonic()) - self.started


def task_config(sweep_config: DictConfig) -> DictConfig:
    """The job's task config: the sweep config without Hydra's node (what the task gets)."""
    cfg = copy.deepcopy(sweep_config)
    with read_write(cfg), open_dict(cfg):
        cfg.pop("hydra", None)
    return cfg


# ---------------------------------------------------------------- naming

def _split(override: str) -> Tuple[str, str]:
    key, _, value = override.partition("=")
    return key.lstrip("+~"), value


def _sanitize(text: str) -> str:
    """Keep names folder-, shell- and Ray-friendly while readable: ``a.b=v,c=w``."""
    return re.sub(r"[^A-Za-z0-9._=,+-]+", "_", text).strip("_")


def differing_overrides(job_overrides: Sequence[Sequence[str]], *, ignore: Sequence[str] = ()) -> List[List[str]]:
    """Per job, its overrides whose value is not the same in every job (in the job's order)."""
    parsed = [dict(_split(o) for o in ov) for ov in job_overrides]
    keys = {k for p in parsed for k in p}
    differ = {k for k in keys if k not in ignore and len({p.get(k) for p in parsed}) > 1}
    return [[o for o in ov if _split(o)[0] in differ] for ov in job_overrides]


def default_run_name(exp_name: str, differing: Sequence[str]) -> str:
    """``<exp_name>_<k=v,k2=v2>`` from the overrides that tell this job apart."""
    tag = _sanitize(",".join(f"{k}={v}" for k, v in (_split(o) for o in differing)))
    name = f"{exp_name}_{tag}" if tag else exp_name
    if len(name) > MAX_NAME:
        digest = hashlib.sha1(name.encode()).hexdigest()[:8]
        name = f"{name[:MAX_NAME - 9]}_{digest}"
    return name


def _unresolved(cfg: DictConfig, key: str) -> Any:
    """The value of a dotted key as written (an interpolation stays ``${...}``)."""
    parent, _, leaf = key.rpartition(".")
    container = OmegaConf.select(cfg, parent) if parent else cfg
    node = None if container is None else container._get_node(leaf)
    return None if node is None else node._value()


def run_name_is_default(cfg: DictConfig) -> bool:
    """True unless the user set ``run_name`` (it is still the schema's ``${exp_name}``)."""
    return _unresolved(cfg, "run_name") == "${exp_name}"


def wandb_names(plan: LaunchPlan) -> List[str]:
    """W&B run identities the job would claim (run name/id variables or flags)."""
    env = plan.runtime_env.get("env_vars", {})
    names = [f"{k}={env[k]}" for k in ("WANDB_NAME", "WANDB_RUN_ID") if env.get(k)]
    argv = plan.entrypoint
    for flag in ("--wandb-run-name", "--wandb-run-id"):
        if flag in argv[:-1]:
            names.append(f"{flag} {argv[argv.index(flag) + 1]}")
    # slime names the W&B run "<--wandb-group>_<random id>-RANK_0" when nothing else names it,
    # so two jobs with one group would differ only by that random id.
    if "--use-wandb" in argv and not names and "--wandb-group" in argv[:-1]:
        names.append(f"--wandb-group {argv[argv.index('--wandb-group') + 1]}")
    return names


def name_clashes(jobs: Sequence[SweepJob]) -> List[str]:
    """Lines describing every save dir / run name / W&B run shared by two or more jobs."""
    lines: List[str] = []
    for what, get in (("save dir (paths.save)", lambda j: [j.plan.save_dir] if j.plan.save_dir else []),
                      ("run name (run_name)", lambda j: [j.plan.run_name]),
                      ("W&B run", lambda j: wandb_names(j.plan))):
        owners: Dict[str, List[SweepJob]] = {}
        for j in jobs:
            for value in get(j):
                owners.setdefault(value, []).append(j)
        for value, js in owners.items():
            if len(js) > 1:
                lines.append(f"  {what} {value!r} is shared by jobs "
                             + ", ".join(f"#{j.num} ({j.label})" for j in js))
    return lines


# ---------------------------------------------------------------- formatting

def _fmt_duration(seconds: Optional[float]) -> str:
    if seconds is None:
        return "-"
    seconds = int(round(seconds))
    h, rest = divmod(seconds, 3600)
    m, s = divmod(rest, 60)
    return f"{h}:{m:02d}:{s:02d}" if h else f"{m}:{s:02d}"


def summary_table(jobs: Sequence[SweepJob]) -> str:
    head = ("#", "overrides", "run_name", "submission id", "status", "duration", "log file")
    rows = [head] + [(str(j.num), j.short_label, j.plan.run_name if j.plan else "-", j.submission_id or "-", j.status,
                      _fmt_duration(j.duration), j.log_file or "-") for j in jobs]
    widths = [max(len(r[i]) for r in rows) for i in range(len(head) - 1)]
    out = []
    for n, r in enumerate(rows):
        out.append("  ".join(c.ljust(w) for c, w in zip(r, widths)) + "  " + r[-1])
        if n == 0:
            out.append("  ".join("-" * w for w in widths) + "  " + "-" * len(head[-1]))
    return "\n".join(out)


def _quiet_ray_sdk() -> None:
    """Ray's job SDK logs each package upload and websocket close at INFO; keep progress readable."""
    import importlib
    import logging

    for name in ("ray.dashboard.modules.dashboard_sdk", "ray.dashboard.modules.job.sdk"):
        importlib.import_module(name)  # they set their level to INFO when imported
        logging.getLogger(name).setLevel(logging.WARNING)


def _say(text: str) -> None:
    # One write per line: job threads print too, and print() writes the newline separately.
    sys.stdout.write(text + "\n")
    sys.stdout.flush()


# ---------------------------------------------------------------- the sweep

class SweepSession:
    """Composes, checks and runs the jobs of one clawgym sweep."""

    def __init__(self, *, hydra_context: HydraContext, task_function: TaskFunction, config: DictConfig,
                 options: LauncherOptions, environ: Optional[Mapping[str, str]] = None) -> None:
        self.hydra_context = hydra_context
        self.task_function = task_function
        self.config = config
        self.options = options
        self.environ = os.environ if environ is None else environ
        self.jobs: List[SweepJob] = []
        self.cluster: Any = None
        self.total_gpus = 0
        self.t0 = time.monotonic()
        # The job whose task function is running (its launch_single lands in submit_job).
        self._current: Optional[SweepJob] = None
        # Set by follower threads when a job ends, to wake the scheduler early.
        self._wake = threading.Event()
        self._last_progress = 0.0
        self._last_counts: Optional[Tuple[int, ...]] = None

    # -------------------------------------------------------- composition and checks

    def _compose(self, overrides: Sequence[str], num: int) -> DictConfig:
        cfg = self.hydra_context.config_loader.load_sweep_config(self.config, list(overrides))
        with open_dict(cfg):
            cfg.hydra.job.id = num
            cfg.hydra.job.num = num
        return cfg

    def compose_all(self, job_overrides: Sequence[Sequence[str]], initial_job_idx: int) -> None:
        """Compose every job, adding default names (and API ports) that tell jobs apart."""
        user = [list(o) for o in job_overrides]
        configs = [self._compose(o, initial_job_idx + i) for i, o in enumerate(user)]
        kinds = [self._kind(c) for c in configs]
        extra: List[List[str]] = [[] for _ in user]
        differing = differing_overrides(user, ignore=("exp_name", "run_name"))
        if len(user) > 1:
            for i, cfg in enumerate(configs):
                if run_name_is_default(cfg) and differing[i]:
                    extra[i].append(f"run_name='{default_run_name(str(cfg.exp_name), differing[i])}'")
            # Every job as a real sweep would run it, so a dry run shows exactly what gets submitted.
            launched = list(range(len(user)))
            # One head serves the whole sweep, so it declares the node's GPUs (Ray detects them),
            # not one job's layout size: `-m gpu_layout=split_1_1 ...` then packs four jobs on 8 GPUs.
            if len(launched) > 1 and all(configs[i].ray.address is None and
                                         _unresolved(configs[i], "ray.num_gpus") == "${gpu_layout.num_gpus}"
                                         for i in launched):
                for i in launched:
                    extra[i].append("ray.num_gpus=null")
            # Concurrent jobs on one node would all bind the API server's port: spread them,
            # unless the user chose ports.
            if len(launched) > 1 and not any(_split(o)[0] == "sglang.api_port" for o in self._all_overrides(user)):
                base = int(configs[launched[0]].sglang.api_port)
                for n, i in enumerate(launched):
                    extra[i].append(f"sglang.api_port={base + n}")
        for i, o in enumerate(user):
            if extra[i]:
                configs[i] = self._compose(o + extra[i], initial_job_idx + i)
            self.jobs.append(SweepJob(num=initial_job_idx + i, user_overrides=o, overrides=o + extra[i],
                                      distinct=differing[i] if len(user) > 1 else [], config=configs[i],
                                      kind=kinds[i]))

    def _all_overrides(self, user: Sequence[Sequence[str]]) -> List[str]:
        task = list(OmegaConf.select(self.config, "hydra.overrides.task", default=[]) or [])
        return task + [o for ov in user for o in ov]

    @staticmethod
    def _kind(cfg: DictConfig) -> str:
        if cfg.dry_run:
            return "dry_run"
        if cfg.preflight_only:
            return "preflight"
        return "launch"

    def check_all(self) -> None:
        """Validate and plan every job, then refuse shared names; raises SweepRefused."""
        reports = []
        for j in self.jobs:
            found = violations(j.task_cfg)
            if found:
                reports.append(ConfigError(found, context=f"sweep job #{j.num}: {j.label}").report())
        if reports:
            n = len(reports)
            raise SweepRefused(f"clawgym: sweep refused, {n} of {len(self.jobs)} job{'s' if len(self.jobs) != 1 else ''}"
                               f" invalid; nothing was started\n" + "\n".join(reports))
        from clawgym.app import timestamp

        stamp = timestamp()
        for j in self.jobs:
            j.plan = build_plan(j.task_cfg, environ=self.environ, timestamp=stamp)
        clashes = name_clashes(self.jobs)
        if clashes:
            raise SweepRefused(
                "clawgym: sweep refused, jobs would overwrite each other; nothing was started\n"
                + "\n".join(clashes)
                + "\n  rule: every sweep job needs its own save dir, run name and W&B run"
                + "\n  fix:  leave run_name unset (the sweep appends the swept overrides to it), or sweep"
                  " run_name / paths.save with one distinct value per job")

    # -------------------------------------------------------- running

    def run(self) -> List[JobReturn]:
        """Run every job; returns JobReturns in sweep order."""
        for j in self.jobs:
            if j.kind != "launch" or self.options.inline:
                self._run_inline(j)
        launched = [j for j in self.jobs if j.kind == "launch" and not self.options.inline]
        if launched:
            self._run_packed(launched)
        return [j.job_return for j in self.jobs if j.job_return is not None]

    def _run_hydra_job(self, j: SweepJob) -> JobReturn:
        ret = run_job(hydra_context=self.hydra_context, task_function=self.task_function, config=j.config,
                      job_dir_key="hydra.sweep.dir", job_subdir_key="hydra.sweep.subdir")
        configure_log(self.config.hydra.hydra_logging, self.config.hydra.verbose)
        return ret

    def _run_inline(self, j: SweepJob) -> None:
        j.started = time.monotonic()
        j.status = RUNNING
        ret = self._run_hydra_job(j)
        j.ended = time.monotonic()
        j.job_return = ret
        j.status = SUCCEEDED if ret.status == JobStatus.COMPLETED else FAILED

    def _prepare_all(self, jobs: Sequence[SweepJob]) -> Dict[str, str]:
        """Every check of every job, then cleanup and snapshots, before anything is submitted.

        Returns the secrets of the whole sweep (a head clawgym starts carries them in its
        environment). Raises SweepRefused.
        """
        from clawgym import launch, ray_head

        heads = {(j.plan.address, tuple(j.plan.ray_start or ()), tuple(sorted(j.plan.ray_start_env.items())))
                 for j in jobs}
        if len(heads) > 1:
            raise SweepRefused(
                "clawgym: sweep refused, its jobs ask for different Ray clusters; nothing was started\n"
                + "\n".join(f"  job #{j.num} ({j.label}): {j.plan.address}"
                            + (f" via {' '.join(j.plan.ray_start)}" if j.plan.ray_start else " (existing)")
                            for j in jobs)
                + "\n  rule: one sweep runs on one cluster"
                + "\n  fix:  set the same ray.* for every job (e.g. ray.num_gpus=<node GPUs> for all,"
                  " or ray.address=<cluster>)")
        if len({bool(j.task_cfg.ray.detach) for j in jobs}) > 1:
            raise SweepRefused("clawgym: sweep refused, ray.detach differs between jobs; nothing was started\n"
                               "  fix:  set ray.detach once for the whole sweep")
        secrets: Dict[str, str] = {}
        for j in jobs:
            j.secrets = launch.resolve_secrets(j.plan, self.environ)
            secrets.update(j.secrets)
        head = jobs[0].plan
        reusable = None
        if head.ray_start is not None:
            # Our own leftovers first, so the port checks see the machine as the sweep will.
            try:
                reusable = ray_head.settle(head.ray_start, head.ray_start_env, secrets)
            except ray_head.HeadError as err:
                raise SweepRefused(f"clawgym: sweep refused: {err}") from None
        local_head = head.ray_start is not None and reusable is None
        if not local_head and ray_head.dashboard_responds(head.address, timeout=5.0):
            # A running cluster: refuse jobs that cannot fit it, all of them at once, before the
            # per-job preflight (which stops at the first) and before any snapshot is written.
            try:
                self.total_gpus = int(ray_head.cluster_gpus(head.address))
            except (OSError, ValueError):
                pass  # the preflight's cluster check reports it
            else:
                self._refuse_unfit(jobs, bool(jobs[0].task_cfg.ray.detach))
        from clawgym.preflight import PreflightError, cleanup_leftovers, run_preflight
        from clawgym.snapshot import LaunchRecord, SnapshotError, write_launch_snapshot

        reports = []
        for j in jobs:
            try:
                run_preflight(j.task_cfg, j.plan, local_head=local_head, echo=None)
            except PreflightError as err:
                reports.append(f"sweep job #{j.num} ({j.label}):\n{err.report()}")
        if reports:
            raise SweepRefused(f"clawgym: sweep refused, preflight failed for {len(reports)} of {len(jobs)} "
                               f"jobs; nothing was started\n" + "\n".join(reports))
        _say(f"[sweep] preflight passed for all {len(jobs)} jobs")
        try:
            cleaned = set()
            for j in jobs:
                sb = j.task_cfg.sandbox
                key = (sb.backend, sb.container_prefix, sb.image)
                if key not in cleaned:
                    cleanup_leftovers(j.task_cfg)
                    cleaned.add(key)
            for j in jobs:
                # This job's overrides and choices (HydraConfig holds the whole sweep's here).
                j.snapshot = str(write_launch_snapshot(j.task_cfg, j.plan,
                                                       record=LaunchRecord.from_hydra(j.config.hydra, command="sweep")))
        except (PreflightError, SnapshotError) as err:
            raise SweepRefused(f"clawgym: sweep refused; nothing was submitted\n{err}") from None
        return secrets

    def _run_packed(self, jobs: List[SweepJob]) -> None:
        from clawgym import launch, ray_head
        from clawgym.backends import backend_name

        backends = {backend_name(j.task_cfg) for j in jobs}
        if "slurm" in backends or "kuberay" in backends:
            if backends != {"slurm"}:
                raise SweepRefused("clawgym: sweep refused, its jobs ask for different clusters ("
                                   + ", ".join(sorted(backends)) + "); nothing was started\n"
                                   "  rule: one sweep runs on one kind of cluster; KubeRay sweeps are not launched "
                                   "(use dry_run=true to write one manifest per job)\n"
                                   "  fix:  set cluster= once for the whole sweep")
            return self._run_slurm(jobs)
        secrets = self._prepare_all(jobs)
        detach = bool(jobs[0].task_cfg.ray.detach)
        keep_head = any(bool(j.task_cfg.ray.keep_head) for j in jobs)
        try:
            self.cluster = launch.Cluster.connect_or_start(jobs[0].plan, secrets=secrets)
        except (launch.LaunchError, ray_head.HeadError) as err:
            raise SweepRefused(f"clawgym: sweep stopped before any job was submitted: {err}") from None
        interrupted = False
        try:
            with launch._sigterm_as_interrupt():
                try:
                    self.total_gpus = int(self.cluster.total_gpus())
                    self._refuse_unfit(jobs, detach)
                    _say(f"[sweep] {len(jobs)} jobs on {self.cluster.address} ({self.total_gpus} GPUs"
                         f"{', head started by clawgym' if self.cluster.started_by_us else ''})")
                    launch.set_active_session(self)
                    _quiet_ray_sdk()
                    if detach:
                        self._submit_detached(jobs)
                    else:
                        self._schedule(jobs)
                except KeyboardInterrupt:
                    interrupted = True
                    with launch._uninterruptible():
                        self._interrupt(jobs)
                finally:
                    launch.set_active_session(None)
        finally:
            with launch._uninterruptible():
                # A head we started goes with the sweep: kept when asked, or while detached jobs run on it.
                detached = detach and any(j.handle is not None for j in jobs)
                try:
                    self.cluster.close(keep_head=(keep_head or detached) and not interrupted)
                except Exception as exc:
                    _say(f"[sweep] could not close the cluster: {exc}")
        if interrupted:
            _say(summary_table(self.jobs))
            _say("[sweep] interrupted: running jobs stopped, queued jobs not submitted")
            sys.exit(EXIT_INTERRUPTED)
        self._finish_returns(jobs)
        _say(summary_table(self.jobs))
        if detach:
            addr = self.cluster.address
            for j in jobs:
                _say(f"  job #{j.num}: follow: clawgym jobs logs {j.submission_id} --follow --address {addr}"
                     f"   stop: clawgym jobs stop {j.submission_id} --address {addr}")
            _say(f"  the Ray head keeps running; when done: clawgym jobs stop-head --address {addr}")

    # -------------------------------------------------------- SLURM: one batch job per sweep job

    def _run_slurm(self, jobs: List[SweepJob]) -> None:
        """Submit one SLURM batch job per sweep job (SLURM queues and packs them), follow them all."""
        from clawgym import launch

        self._prepare_all(jobs)
        detach = bool(jobs[0].task_cfg.ray.detach)
        interrupted = False
        _say(f"[sweep] {len(jobs)} jobs as SLURM batch jobs (SLURM queues them until their GPUs are free)")
        with launch._sigterm_as_interrupt():
            try:
                launch.set_active_session(self)
                for j in jobs:
                    self._start(j, follow=False)
                if not detach:
                    self._follow_slurm(jobs)
            except KeyboardInterrupt:
                interrupted = True
                with launch._uninterruptible():
                    self._cancel_slurm(jobs)
            finally:
                launch.set_active_session(None)
        if interrupted:
            _say(summary_table(self.jobs))
            _say("[sweep] interrupted: every SLURM job of the sweep was cancelled (scancel)")
            sys.exit(EXIT_INTERRUPTED)
        if detach:
            for j in jobs:
                if j.status == RUNNING:
                    j.status = "submitted"
        self._finish_returns(jobs)
        _say(summary_table(self.jobs))
        if detach:
            ids = " ".join(j.handle.job_id for j in jobs if j.handle is not None)
            _say(f"  the jobs run on in SLURM's queue: squeue -j {ids.replace(' ', ',')}   cancel: scancel {ids}"
                 f"   list: clawgym jobs slurm")

    def _submit_slurm(self, j: SweepJob, cfg: DictConfig, plan: LaunchPlan) -> Any:
        from clawgym.backends import slurm
        from clawgym.config import to_plain

        script, output = slurm.write_script(plan, to_plain(cfg), j.snapshot or "")
        job = slurm.submit(script, plan, environ=self.environ, output=output)
        j.handle = job
        # SLURM's id is what squeue and scancel take; the Ray submission id runs inside it.
        j.submission_id = f"slurm:{job.job_id}"
        j.log_file = job.output
        return j.submission_id

    def _follow_slurm(self, jobs: List[SweepJob]) -> None:
        from clawgym.backends.slurm import TERMINAL_STATES

        states: Dict[int, str] = {}
        running = [j for j in jobs if j.status == RUNNING and j.handle is not None]
        while running:
            for j in list(running):
                info = j.handle.info()
                state = info.get("JobState", "UNKNOWN")
                if states.get(j.num) != state:
                    states[j.num] = state
                    _say(f"[sweep {self._elapsed()}] job #{j.num} ({j.submission_id}) {state.lower()}")
                if state in TERMINAL_STATES or not info:
                    running.remove(j)
                    j.ended = time.monotonic()
                    j.exit_code = j.handle.exit_code(info) if info else 1
                    j.status = SUCCEEDED if j.exit_code == 0 else FAILED
                    self._event(j)
            self._progress()
            if running:
                time.sleep(self.options.poll_interval)

    def _cancel_slurm(self, jobs: Sequence[SweepJob]) -> None:
        from clawgym.backends.slurm import TERMINAL_STATES

        _say(f"\n[sweep {self._elapsed()}] interrupted: cancelling every SLURM job of the sweep")
        live = [j for j in jobs if j.handle is not None and j.status == RUNNING]
        for j in live:
            j.handle.cancel()
        deadline = time.monotonic() + 60
        for j in live:
            while time.monotonic() < deadline and j.handle.state() not in (*TERMINAL_STATES, "UNKNOWN"):
                time.sleep(0.5)
            j.status = STOPPED
            j.ended = time.monotonic()
        for j in jobs:
            if j.status in (QUEUED, RUNNING):
                j.status = "not started"

    def _refuse_unfit(self, jobs: Sequence[SweepJob], detach: bool) -> None:
        big = [j for j in jobs if j.plan.gpus_required > self.total_gpus]
        if big and self.total_gpus == 0 and jobs[0].plan.ray_start is not None:
            raise SweepRefused(
                "clawgym: sweep refused, the local Ray head sees no GPUs on this node; nothing was submitted\n"
                "  rule: sweep jobs are packed onto the GPUs the head declares\n"
                "  fix:  run on a GPU node, or declare them: ray.num_gpus=<GPUs of the node>")
        if big:
            raise SweepRefused(
                f"clawgym: sweep refused, the cluster has {self.total_gpus} GPUs; nothing was submitted\n"
                + "\n".join(f"  job #{j.num} ({j.label}) needs {j.plan.gpus_required} GPUs" for j in big)
                + "\n  rule: a job's gpu_layout must fit the cluster"
                + "\n  fix:  choose a smaller gpu_layout, or run on a cluster with more GPUs (ray.address / ray.num_gpus)")
        need = sum(j.plan.gpus_required for j in jobs)
        if detach and need > self.total_gpus:
            raise SweepRefused(
                f"clawgym: sweep refused, ray.detach=true needs every job to run at once, but the jobs need {need} "
                f"GPUs and the cluster has {self.total_gpus}; nothing was submitted\n"
                "  fix:  drop ray.detach (the sweep then queues jobs and waits), or split the sweep")

    def submit_job(self, cfg: DictConfig, plan: LaunchPlan) -> Any:
        """Called by ``clawgym.launch.launch_single`` inside a sweep job's task function.

        Submits and returns the submission id at once; the scheduler follows the job.
        """
        from clawgym import launch

        j = self._current
        if j is None:
            raise RuntimeError("submit_job called outside a sweep job")
        if self.cluster is None and j.snapshot is not None and str(cfg.cluster.backend) == "slurm":
            return self._submit_slurm(j, cfg, j.plan)
        # Submit the plan that was checked and snapshotted up front; the task function's
        # own plan differs only in its timestamp (submission id, log file name).
        same = (plan.entrypoint, plan.runtime_env, plan.working_dir) == \
            (j.plan.entrypoint, j.plan.runtime_env, j.plan.working_dir)
        if not same:
            j.plan = plan
        j.handle = launch.submit(self.cluster, j.plan, secrets=j.secrets, cfg=cfg)
        j.submission_id = j.handle.submission_id
        j.log_file = j.handle.log_file
        j.watcher = launch._start_watcher(j.plan, j.snapshot)
        return j.submission_id

    def _start(self, j: SweepJob, *, follow: bool = True) -> None:
        self._current = j
        j.started = time.monotonic()
        j.status = RUNNING
        try:
            ret = self._run_hydra_job(j)
        except SystemExit as exc:
            # A task function that exits must not end the sweep while other jobs run.
            ret = JobReturn(overrides=j.overrides, cfg=j.task_cfg, status=JobStatus.FAILED,
                            working_dir=os.getcwd(), task_name=str(j.config.hydra.job.name))
            ret.hydra_cfg = OmegaConf.create({"hydra": OmegaConf.to_container(j.config.hydra, resolve=False)})
            ret.return_value = SweepJobFailed(f"clawgym: sweep job #{j.num} ({j.label}) exited with status "
                                              f"{exc.code} before submitting")
        finally:
            self._current = None
        j.job_return = ret
        if ret.status != JobStatus.COMPLETED or j.handle is None:
            j.ended = time.monotonic()
            j.status = FAILED if ret.status != JobStatus.COMPLETED else SUCCEEDED
            if ret.status != JobStatus.COMPLETED:
                j.error = ret._return_value
            self._event(j)
            return
        self._event(j)
        if follow:
            j.thread = threading.Thread(target=self._follow, args=(j,), name=f"clawgym-sweep-{j.num}", daemon=True)
            j.thread.start()

    def _follow(self, j: SweepJob) -> None:
        try:
            j.exit_code = int(j.handle.follow(echo=False))
        except BaseException as exc:  # reported as the job's failure
            j.error = exc
        finally:
            if j.watcher is not None:
                j.watcher.stop()
            self._wake.set()

    def _schedule(self, jobs: List[SweepJob]) -> None:
        """First fit in sweep order: start every queued job whose GPUs fit next to the running ones."""
        queue = list(jobs)
        running: List[SweepJob] = []
        while queue or running:
            # Ray's status frees a job's GPUs as soon as it ends; its log thread may still be
            # draining the last output, which is joined at the end.
            for j in list(running):
                ray_status = self._ended(j)
                if ray_status is not None:
                    running.remove(j)
                    j.ended = time.monotonic()
                    ok = ray_status == "SUCCEEDED" if j.exit_code is None else j.exit_code == 0
                    if j.exit_code is None:
                        j.exit_code = 0 if ok else (130 if ray_status == "STOPPED" else 1)
                    j.status = SUCCEEDED if ok and j.error is None else FAILED
                    self._event(j)
            free = self.total_gpus - sum(j.plan.gpus_required for j in running)
            for j in list(queue):
                if self.options.max_concurrent and len(running) >= self.options.max_concurrent:
                    break
                if j.plan.gpus_required <= free:
                    queue.remove(j)
                    self._start(j)
                    if j.status == RUNNING:
                        running.append(j)
                        free -= j.plan.gpus_required
            self._progress()
            if queue or running:
                self._wake.wait(self.options.poll_interval)
                self._wake.clear()
        for j in jobs:
            if j.thread is not None:
                j.thread.join(timeout=30)

    @staticmethod
    def _ended(j: SweepJob) -> Optional[str]:
        """Ray's terminal status of a running job, or None while it runs."""
        from clawgym.launch import TERMINAL

        if j.thread is not None and not j.thread.is_alive():
            return "SUCCEEDED" if j.exit_code == 0 else "FAILED"
        try:
            status = j.handle.status()
        except Exception:  # the dashboard hiccuped; the log thread still reports the end
            return None
        return status if status in TERMINAL else None

    def _submit_detached(self, jobs: List[SweepJob]) -> None:
        for j in jobs:
            self._start(j, follow=False)
            if j.status == RUNNING:
                j.status = "submitted"
                j.ended = time.monotonic()

    def _interrupt(self, jobs: Sequence[SweepJob]) -> None:
        _say(f"\n[sweep {self._elapsed()}] interrupted: stopping running jobs; queued jobs are not submitted")
        # Ask Ray to stop them all first, so they wind down together; then wait for each.
        for j in jobs:
            if j.status == RUNNING and j.handle is not None:
                try:
                    j.handle._client.stop_job(j.submission_id)
                except Exception:
                    pass  # stop() below retries and reports
        for j in jobs:
            if j.status == RUNNING and j.handle is not None:
                try:
                    j.handle.stop()
                except Exception as exc:
                    _say(f"[sweep] could not stop job #{j.num} ({j.submission_id}): {exc}")
                j.status = STOPPED
                j.ended = time.monotonic()
            elif j.status in (QUEUED, RUNNING):  # RUNNING without a handle: interrupted before submitting
                j.status = "not started"
        for j in jobs:
            if j.thread is not None:
                j.thread.join(timeout=10)

    def _finish_returns(self, jobs: Sequence[SweepJob]) -> None:
        """Give each started job's JobReturn its real final status."""
        for j in jobs:
            ret = j.job_return
            if ret is None or j.handle is None:
                continue
            if j.status == FAILED:
                ret.status = JobStatus.FAILED
                why = f"exit code {j.exit_code}" if j.exit_code is not None else f"{type(j.error).__name__}: {j.error}"
                ret.return_value = SweepJobFailed(
                    f"clawgym: sweep job #{j.num} ({j.label}) failed ({why}); submission {j.submission_id}; "
                    f"log: {j.log_file}")
            else:
                ret.status = JobStatus.COMPLETED
                ret.return_value = {"submission_id": j.submission_id, "status": j.status, "exit_code": j.exit_code,
                                    "log_file": j.log_file, "run_name": j.plan.run_name}

    # -------------------------------------------------------- progress

    def _elapsed(self) -> str:
        return _fmt_duration(time.monotonic() - self.t0)

    def _event(self, j: SweepJob) -> None:
        if j.status == RUNNING:
            _say(f"[sweep {self._elapsed()}] job #{j.num} running: {j.plan.run_name} ({j.submission_id}, "
                 f"{j.plan.gpus_required} GPUs)")
        elif j.status == SUCCEEDED:
            _say(f"[sweep {self._elapsed()}] job #{j.num} succeeded after {_fmt_duration(j.duration)}")
        elif j.status == FAILED:
            why = f"exit code {j.exit_code}" if j.exit_code is not None else f"{type(j.error).__name__}: {j.error}"
            _say(f"[sweep {self._elapsed()}] job #{j.num} FAILED ({why}) after {_fmt_duration(j.duration)}"
                 + (f"; log: {j.log_file}" if j.log_file else ""))

    def _progress(self, force: bool = False) -> None:
        counts = tuple(sum(1 for j in self.jobs if j.kind == "launch" and j.status == s)
                       for s in (QUEUED, RUNNING, SUCCEEDED, FAILED))
        now = time.monotonic()
        interval = self.options.progress_interval
        if force or counts != self._last_counts or (interval > 0 and now - self._last_progress >= interval):
            self._last_counts, self._last_progress = counts, now
            _say(f"[sweep {self._elapsed()}] queued {counts[0]} | running {counts[1]} | "
                 f"succeeded {counts[2]} | failed {counts[3]}")


def run_sweep(*, hydra_context: HydraContext, task_function: TaskFunction, config: DictConfig,
              job_overrides: Sequence[Sequence[str]], initial_job_idx: int,
              options: LauncherOptions) -> List[JobReturn]:
    """Entry point of the launcher plugin for clawgym configs.

    A refused sweep prints its report alone (no traceback) and exits with status 2.
    """
    session = SweepSession(hydra_context=hydra_context, task_function=task_function, config=config,
                           options=options)
    Path(str(config.hydra.sweep.dir)).mkdir(parents=True, exist_ok=True)
    try:
        session.compose_all(job_overrides, initial_job_idx)
        session.check_all()
        return session.run()
    except SweepRefused as err:
        print(str(err), file=sys.stderr, flush=True)
        sys.exit(EXIT_REFUSED)
    except KeyboardInterrupt:
        # Before the first submission (later ones are handled where jobs run).
        print("\n[sweep] interrupted before any job was submitted", file=sys.stderr, flush=True)
        sys.exit(EXIT_INTERRUPTED)
