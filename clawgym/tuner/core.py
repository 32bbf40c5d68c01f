"""The study loop: Optuna asks, clawgym runs the trial as an ordinary job, Optuna is told.

Asynchronous through the pipeline's listener interface (:class:`clawgym.pipeline.jobs.PipelineListener`):
the pipeline says when it has room (no job queued, GPUs free, ``max_concurrent`` not reached),
and the tuner asks Optuna for one trial, composes its job as a ``-m`` job is composed
(:class:`clawgym.sweep.core.SweepSession`: composed, validated, planned, memory-planned), and
submits it into the running pipeline (preflight, snapshot, started when its GPUs are free).
At every check of the running jobs it reads each trial's TensorBoard events and reports the
metric at every new rollout step; a trial the pruner condemns is stopped through its backend
(:meth:`Pipeline.stop`) and told PRUNED when its job has ended. A trial whose config is
refused is told FAIL with the reason (user attr ``clawgym_refused``) and never holds a GPU.

What a trial is, is recorded where ``clawgym runs`` reads it without Optuna: the snapshot's
``meta.json`` origin (``tuner``: study, storage, trial number, params) and, once it ended,
``trial.json`` in the snapshot dir (state, objective, steps).
"""

from __future__ import annotations

import contextlib
import io
import math
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, Tuple

import optuna
from optuna.trial import TrialState
from hydra.core.utils import JobReturn
from hydra.types import HydraContext, TaskFunction
from omegaconf import DictConfig

from clawgym.common.exit_codes import (FAILED as EXIT_FAILED, INTERRUPTED as EXIT_INTERRUPTED,
                                       REFUSED as EXIT_REFUSED)
from clawgym.common.text import fmt_duration
from clawgym.pipeline.jobs import FAILED, STOPPED, SUCCEEDED, PipelineJob, PipelineListener, PipelineOptions, Refused
from clawgym.pipeline.pipeline import Pipeline
from clawgym.pipeline.report import say, why_failed
from clawgym.plan.build import TENSORBOARD_DIR_ENV
from clawgym.sweep.core import (LauncherOptions, SweepJob, SweepRefused, SweepSession, apply_value_overrides,
                           run_name_is_default, unresolved)
from clawgym.tuner.metric import Metric, MetricError, parse_metric
from clawgym.tuner.space import SearchSpace, SpaceError, format_value, parse
from clawgym.tuner.study import Settings, SettingsError, open_study, storage_text

#: Optuna user attrs the tuner keeps on a trial (what clawgym recorded of its job).
ATTR_PREFIX = "clawgym_"
#: A trial told FAIL because the launch was interrupted: it does not count towards n_trials.
INTERRUPTED = "clawgym_interrupted"
#: A trial whose config or preflight was refused (told FAIL, never ran): it does not count towards
#: n_trials either (n_trials counts trials that ran), except under the grid sampler, whose grid point
#: it used up (the grid sampler never asks for a point again).
REFUSED_ATTR = "clawgym_refused"
#: Refused trials in a row (or n_trials, if more) after which a launch asks for no more.
REFUSED_IN_A_ROW = 10
#: The launcher that runs a trial (launcher_identity): another launcher never takes a live one's trial
#: for an orphan.
LAUNCHER_ATTR = "clawgym_launcher"
#: Characters of a trial's reason in the table's note column; a longer one is printed whole below it.
NOTE_WIDTH = 72
#: Trials in flight at once on a backend that queues jobs itself, unless max_concurrent says.
QUEUEING_BACKEND_TRIALS = 2
#: The file in a trial's snapshot dir that says how the trial ended (clawgym.snapshot.layout.TRIAL_FILE).
FINISHED = (TrialState.COMPLETE, TrialState.PRUNED, TrialState.FAIL)


@dataclass
class Trial:
    """One Optuna trial and the clawgym job that runs it."""

    trial: optuna.trial.Trial
    job: Optional[SweepJob] = None
    # API-port slot (sglang.api_port = base + slot) while it runs, so trials side by side never share one.
    slot: Optional[int] = None
    # Steps already reported to Optuna.
    reported: int = -1
    last_value: Optional[float] = None
    steps: int = 0
    pruned: bool = False
    state: str = "asked"
    objective: Optional[float] = None
    reason: str = ""

    @property
    def number(self) -> int:
        return self.trial.number


def tell(study: optuna.Study, trial: Any, value: Optional[float] = None, state: TrialState = TrialState.COMPLETE) -> None:
    """``study.tell`` outside ``optimize``: the grid sampler asks the study to stop when its grid is
    used up, which Optuna allows only inside ``optimize``; the trial is recorded all the same. A trial
    something else told already (a launcher of an older clawgym sharing the study) stays as told."""
    try:
        study.tell(trial, value if state == TrialState.COMPLETE else None, state=state)
    except RuntimeError as exc:
        if "Study.stop" not in str(exc):
            raise
    except ValueError:
        number = getattr(trial, "number", None)
        told = next((t for t in study.get_trials(deepcopy=False) if t.number == number), None)
        if told is None or not told.state.is_finished():
            raise
        say(f"[tune] trial {number} was told {told.state.name} elsewhere already; left as it is")


def launcher_identity() -> Dict[str, Any]:
    """Who runs a trial: this host and process (pid + start time), recorded on the trial so another
    launcher of the same study can tell a live launcher's trial from an orphan."""
    import socket

    from clawgym.common.ownership import me

    return {"host": socket.gethostname(), **me()}


def launcher_alive(ident: Any) -> Optional[bool]:
    """True / False for a launcher on this host; None for one elsewhere (this host cannot tell)."""
    import socket

    from clawgym.common.ownership import process_alive

    if not isinstance(ident, dict) or not ident.get("pid"):
        return False
    if ident.get("host") != socket.gethostname():
        return None
    return process_alive(ident)


class TuneSession(PipelineListener):
    def __init__(self, *, hydra_context: HydraContext, task_function: TaskFunction, config: DictConfig,
                 settings: Settings, space: SearchSpace, metric: Metric, study: optuna.Study, storage: str) -> None:
        self.hydra_context, self.task_function, self.config = hydra_context, task_function, config
        self.settings, self.space, self.metric, self.study, self.storage = settings, space, metric, study, storage
        self.trials: Dict[int, Trial] = {}
        self.t0 = time.monotonic()
        self.pipeline: Optional[Pipeline] = None
        self.launcher_options = LauncherOptions(max_concurrent=settings.max_concurrent,
                                                poll_interval=settings.poll_interval,
                                                progress_interval=settings.progress_interval)
        self._runner: Optional[SweepSession] = None
        # Trials differ in values only: the config tree is composed once (clawgym.sweep.core.compose_jobs).
        self._templates: Dict[Any, Any] = {}
        self._limit = settings.n_trials
        self._gave_up = False
        self._me = launcher_identity()
        if settings.sampler == "grid":
            n = 1
            for values in space.grid().values():
                n *= len(values)
            self._limit = min(self._limit, n)

    # -------------------------------------------------------- counting

    def _elapsed(self) -> str:
        return fmt_duration(time.monotonic() - self.t0)

    def _say(self, text: str) -> None:
        say(f"[tune {self._elapsed()}] {text}")

    def finished_in_study(self) -> int:
        """The study's trials that count towards n_trials: finished, not interrupted, and not refused
        (a refused trial never ran; under the grid sampler it used up its grid point, so it counts)."""
        grid = self.settings.sampler == "grid"
        return sum(1 for t in self.study.get_trials(deepcopy=False, states=FINISHED)
                   if not t.user_attrs.get(INTERRUPTED) and (grid or not t.user_attrs.get(REFUSED_ATTR)))

    def refused_in_a_row(self) -> int:
        """This launch's trials refused since the last one that was not."""
        n = 0
        for t in sorted(self.trials.values(), key=lambda t: -t.number):
            if t.state != "refused":
                break
            n += 1
        return n

    def remaining(self) -> int:
        """Trials still to ask for: n_trials less the study's finished trials and ours in flight;
        none once REFUSED_IN_A_ROW (or n_trials, if more) trials in a row were refused (a space
        whose values are refused again and again would otherwise ask forever)."""
        bound = max(self.settings.n_trials, REFUSED_IN_A_ROW)
        if self.refused_in_a_row() >= bound:
            if not self._gave_up:
                self._gave_up = True
                self._say(f"{bound} trials in a row were refused: asking for no more (the table says why each "
                          "was refused; narrow the search space to values the config accepts)")
            return 0
        in_flight = sum(1 for t in self.trials.values() if t.state in ("asked", "running"))
        # Trials other launchers of the study run now count too (orphans were settled before).
        elsewhere = sum(1 for t in self.study.get_trials(deepcopy=False, states=(TrialState.RUNNING,))
                        if t.number not in self.trials)
        return self._limit - self.finished_in_study() - in_flight - elsewhere

    # -------------------------------------------------------- one trial's job

    def _free_slot(self) -> int:
        used = {t.slot for t in self.trials.values() if t.state in ("asked", "running")}
        slot = 0
        while slot in used:
            slot += 1
        return slot

    def _ask(self) -> Optional[Trial]:
        """Ask for a trial and build its job; None when its config was refused (told FAIL)."""
        trial = Trial(self.study.ask(dict(self.space.params)))
        trial.trial.set_user_attr(LAUNCHER_ATTR, self._me)
        trial.slot = self._free_slot()
        self.trials[trial.number] = trial
        overrides = self.space.overrides(trial.trial.params)
        try:
            trial.job = self._compose(trial, overrides)
        except SweepRefused as err:
            self._refuse(trial, str(err))
            return None
        return trial

    def _compose(self, trial: Trial, overrides: List[str]) -> SweepJob:
        """The trial's job, composed, named, validated and planned as a ``-m`` job is."""
        session = SweepSession(hydra_context=self.hydra_context, task_function=self.task_function,
                               config=self.config, options=self.launcher_options, templates=self._templates)
        try:
            session.compose_all([overrides], trial.number)
        except Exception as exc:  # noqa: BLE001 - a value Hydra cannot set refuses this trial only
            raise SweepRefused(f"composition failed: {type(exc).__name__}: {exc}") from None
        j = session.jobs[0]
        extra: List[str] = []
        cfg = j.config
        if run_name_is_default(cfg):
            extra.append(f"run_name={self.settings.study_name}_trial{trial.number}")
        # One head serves every trial: it declares the node's GPUs, not one trial's layout size.
        if cfg.ray.address is None and unresolved(cfg, "ray.num_gpus") == "${gpu_layout.num_gpus}":
            extra.append("ray.num_gpus=null")
        # Trials side by side on one node each get their own API server port (unless the user chose).
        if not any(o.split("=", 1)[0].lstrip("+") == "sglang.api_port" for o in self._user_overrides(overrides)):
            extra.append(f"sglang.api_port={int(cfg.sglang.api_port) + 1 + int(trial.slot or 0)}")
        apply_value_overrides(cfg, extra)
        j.overrides = list(j.overrides) + extra
        j.cfg = None
        try:
            if self._runner is None:
                session.check_all()
            else:
                # Validation warnings were printed for the first trial; the rest would repeat them
                # (stderr, where clawgym.sweep.core prints them). A refusal raises and is reported.
                with contextlib.redirect_stderr(io.StringIO()):
                    session.check_all()
        except SweepRefused:
            raise
        except Exception as exc:  # noqa: BLE001 - a check that raises refuses this trial, as it refuses a sweep
            raise SweepRefused(f"a check could not run: {type(exc).__name__}: {exc}") from None
        from clawgym.snapshot.records import LaunchRecord

        j.record = LaunchRecord.from_hydra(cfg.hydra, command="sweep")
        j.record.origin["tuner"] = {"study": str(self.settings.study_name), "storage": self.storage,
                                    "trial": trial.number, "metric": self.metric.text,
                                    "direction": self.settings.direction,
                                    "params": {k: trial.trial.params[k] for k in self.space.params}}
        j.cfg = j.task_cfg
        j.short_label = j.label = f"trial {trial.number}: " + " ".join(
            f"{k}={format_value(trial.trial.params[k])}" for k in self.space.params)
        if self._runner is None:
            self._runner = session
        return j

    def composition_error(self) -> Optional[str]:
        """Why the search space's overrides cannot be composed at all (a misspelled key, an unknown
        group option), found once before any trial with the first value of every swept key; None
        when they compose. A value that composes for some values only still refuses its own trial."""
        from optuna.distributions import CategoricalDistribution

        probe = {k: d.choices[0] if isinstance(d, CategoricalDistribution) else d.low
                 for k, d in self.space.params.items()}
        session = SweepSession(hydra_context=self.hydra_context, task_function=self.task_function,
                               config=self.config, options=self.launcher_options, templates=self._templates)
        try:
            session.compose_all([self.space.overrides(probe)], 0)
        except Exception as exc:  # noqa: BLE001 - Hydra's composition errors are many kinds
            return f"  the search space does not compose: {type(exc).__name__}: {exc}".rstrip() + \
                "\n    fix: correct the key or option named above (`python train.py --cfg job` lists the keys)"
        return None

    def _user_overrides(self, overrides: Sequence[str]) -> List[str]:
        from omegaconf import OmegaConf

        return list(OmegaConf.select(self.config, "hydra.overrides.task", default=[]) or []) + list(overrides)

    def _refuse(self, trial: Trial, reason: str) -> None:
        from clawgym.common.secrets import redact

        reason = redact(reason)
        trial.state, trial.reason = "refused", reason
        trial.trial.set_user_attr(REFUSED_ATTR, reason[:2000])
        tell(self.study, trial.trial, state=TrialState.FAIL)
        first = reason.strip().splitlines()
        self._say(f"trial {trial.number} refused, told FAIL: " + " | ".join(first[:6]))

    def _run_job(self, j: PipelineJob) -> None:
        """The pipeline submits a trial through Hydra's job (job dir, .hydra/), reusing its checked plan."""
        from clawgym.pipeline.prepare import prepared_plans

        assert self._runner is not None
        with prepared_plans({j.num: j.plan}):
            self._runner.run_pipeline_job(j)

    # -------------------------------------------------------- PipelineListener

    def room(self, pipeline: Pipeline, free_gpus: Optional[float], running: int) -> None:
        if free_gpus is None and not self.settings.max_concurrent and running >= QUEUEING_BACKEND_TRIALS:
            # SLURM / KubeRay queue jobs themselves (no free GPUs to count): without max_concurrent,
            # a few trials at a time, so the sampler learns from the ones that ended.
            return
        while self.remaining() > 0 and not pipeline.interrupted:
            trial = self._ask()
            if trial is None:
                continue
            try:
                pipeline.submit(trial.job)
            except Refused as err:
                self._refuse(trial, str(err))
                continue
            self._say(f"trial {trial.number} submitted: {trial.job.label.split(': ', 1)[-1]}")
            return

    def job_started(self, pipeline: Pipeline, job: PipelineJob) -> None:
        from clawgym.common.secrets import redact

        trial = self._trial_of(job)
        if trial is None:
            return
        trial.state = "running"
        for key, value in (("submission_id", job.submission_id), ("save_dir", job.plan.save_dir),
                           ("address", getattr(pipeline.backend, "address", "") or ""),
                           ("snapshot", job.snapshot), ("run_name", job.plan.run_name),
                           ("events", _events_dir(job.plan)),
                           ("overrides", redact(" ".join(self.space.overrides(trial.trial.params))))):
            trial.trial.set_user_attr(ATTR_PREFIX + key, value)

    def poll(self, pipeline: Pipeline, running: Sequence[PipelineJob]) -> None:
        for job in running:
            trial = self._trial_of(job)
            if trial is None or trial.pruned or job.stop_requested:
                continue
            fresh = self._report(trial, job.plan)
            # Optuna is asked only after a new step was reported (each ask reads the storage).
            if fresh and self.settings.pruner != "none" and trial.steps >= max(self.settings.min_steps, 1) and \
                    trial.trial.should_prune():
                trial.pruned = True
                self._say(f"trial {trial.number} pruned at step {trial.reported} "
                          f"({self.metric.text} {_num(trial.last_value)}): stopping its job")
                pipeline.stop(job)

    def job_ended(self, pipeline: Pipeline, job: PipelineJob) -> None:
        trial = self._trial_of(job)
        if trial is None or trial.state not in ("asked", "running"):
            return
        self._report(trial, job.plan)
        if trial.pruned and job.status == STOPPED:
            self._finish(trial, "pruned", None, TrialState.PRUNED)
        elif job.status == SUCCEEDED:
            values = [v for _, v in self._points(job.plan)[0]]
            value = self.metric.reduce(values)
            if value is None:
                self._finish(trial, "failed", None, TrialState.FAIL,
                             reason=f"the job logged no {self.metric.tag} (metric {self.metric.text})")
            elif not math.isfinite(value):
                self._finish(trial, "failed", None, TrialState.FAIL, reason=self._not_finite(value))
            else:
                self._finish(trial, "complete", value, TrialState.COMPLETE)
        else:
            self._finish(trial, "failed", None, TrialState.FAIL, reason=why_failed(job))
        self._record(trial)

    # -------------------------------------------------------- metrics

    def _trial_of(self, job: PipelineJob) -> Optional[Trial]:
        t = self.trials.get(job.num)
        return t if t is not None and t.job is job else None

    def _points(self, plan: Any) -> Tuple[List[Tuple[int, float]], int]:
        """(step, value) of the metric in a trial's events so far, and its rollout steps done."""
        from clawgym.runs.events import read_run_scalars, read_scalars
        from clawgym.runs.table import steps_done

        folders = _attempt_event_dirs(_events_dir(plan), getattr(plan, "save_dir", None))
        if not folders:
            return [], 0
        scalars = read_scalars(folders[0]) if len(folders) == 1 else read_run_scalars(folders)
        return [(p.step, p.value) for p in scalars.get(self.metric.tag, [])], steps_done(scalars)[0]

    def _report(self, trial: Trial, plan: Any) -> bool:
        """Report the metric at every step not reported yet; True when there was one."""
        points, steps = self._points(plan)
        trial.steps = max(trial.steps, steps)
        fresh = False
        for step, value in self.metric.intermediate(points):
            if step > trial.reported:
                trial.trial.report(value, step)
                trial.reported, trial.last_value, fresh = step, value, True
        return fresh


    def _finish(self, trial: Trial, state: str, value: Optional[float], optuna_state: TrialState, *,
                reason: str = "") -> None:
        from clawgym.common.secrets import redact

        reason = redact(reason) if reason else reason
        trial.state, trial.objective, trial.reason = state, value, reason
        trial.trial.set_user_attr(ATTR_PREFIX + "steps", trial.steps)
        if reason:
            trial.trial.set_user_attr(ATTR_PREFIX + "reason", reason[:2000])
        tell(self.study, trial.trial, value, optuna_state)
        self._say(f"trial {trial.number} {state}" + (f": {self.metric.text} = {_num(value)}" if value is not None
                                                     else (f" ({reason})" if reason else ""))
                  + f" after {trial.steps} steps")

    def _not_finite(self, value: float) -> str:
        # Optuna takes finite objectives only (study.tell refuses NaN and inf): the trial failed, and says why.
        return (f"its objective {self.metric.text} is {value} (the job logged a non-finite {self.metric.tag}, "
                "e.g. a diverged run): told FAIL, as Optuna takes finite objectives only")

    def _record(self, trial: Trial) -> None:
        """How the trial ended, beside its snapshot (``clawgym runs`` reads it without Optuna)."""
        if trial.job is None or not trial.job.snapshot:
            return
        from clawgym.snapshot.marks import mark_trial

        try:
            mark_trial(trial.job.snapshot, {"study": str(self.settings.study_name), "trial": trial.number,
                                            "state": trial.state, "objective": trial.objective,
                                            "metric": self.metric.text, "steps": trial.steps,
                                            "reason": trial.reason or None})
        except OSError:
            pass  # a read-only save dir: the study still knows

    # -------------------------------------------------------- orphans of a killed launcher

    def settle_orphans(self) -> None:
        """Trials an earlier launcher left RUNNING: follow them to their end (pruned as usual),
        or fail them (``on_orphan=fail``: a job still running is stopped through what was recorded)."""
        from clawgym.launch.rayjob import TERMINAL, JobHandle

        running = self.study.get_trials(deepcopy=False, states=(TrialState.RUNNING,))
        # A trial whose launcher still runs (here) or may run (on another host) is that launcher's:
        # never followed, told or stopped from here (two launchers share an RDB study).
        live = [t for t in running if launcher_alive(t.user_attrs.get(LAUNCHER_ATTR)) is not False]
        if live:
            self._say(f"{len(live)} trial(s) run under another live launcher of this study "
                      f"({', '.join(str(t.number) for t in live)}): left to it")
        orphans = [t for t in running if t.number not in {x.number for x in live}]
        if not orphans:
            return
        follow: List[Any] = []
        for ft in orphans:
            sid, address = ft.user_attrs.get(ATTR_PREFIX + "submission_id"), ft.user_attrs.get(ATTR_PREFIX + "address")
            if not sid or not address or not str(address).startswith("http"):
                why = "its launcher ended before submitting it" if not sid else \
                    f"its job ({sid}) runs where this launcher cannot follow it ({address})"
                self._tell_orphan(ft, TrialState.FAIL, f"orphan: {why}")
                continue
            handle = JobHandle.attach(str(address), str(sid))
            try:
                status = handle.status()
            except Exception as exc:  # noqa: BLE001 - a cluster that is gone cannot say
                self._tell_orphan(ft, TrialState.FAIL, f"orphan: its cluster at {address} does not answer "
                                                       f"({type(exc).__name__})")
                continue
            if status not in TERMINAL and self.settings.on_orphan == "fail":
                self._say(f"trial {ft.number} was left running by an earlier launcher: stopping job {sid} "
                          "(hydra.sweeper.on_orphan=fail)")
                handle.stop()
                reason = "orphan: left running by a killed launcher; stopped (on_orphan=fail)"
                self._tell_orphan(ft, TrialState.FAIL, reason)
                self._mark_orphan(ft, "STOPPED", "failed", None, 0, reason)
                continue
            follow.append((ft, handle))
        if follow:
            self._say(f"following {len(follow)} trial(s) an earlier launcher left running "
                      "(hydra.sweeper.on_orphan=follow)")
        reported: Dict[int, int] = {ft.number: max(ft.intermediate_values, default=-1) for ft, _ in follow}
        pruned: set = set()
        while follow:
            for ft, handle in list(follow):
                try:
                    status = handle.status()
                except Exception:  # noqa: BLE001 - a hiccup; asked again next round
                    continue
                trial = _reopen(self.study, ft)
                points, steps = self._orphan_points(ft)
                fresh = False
                for step, value in self.metric.intermediate(points):
                    if step > reported[ft.number]:
                        trial.report(value, step)
                        reported[ft.number], fresh = step, True
                if status in TERMINAL:
                    follow.remove((ft, handle))
                    self._end_orphan(ft, trial, status, points, steps, ft.number in pruned)
                elif fresh and ft.number not in pruned and self.settings.pruner != "none" and \
                        steps >= max(self.settings.min_steps, 1) and trial.should_prune():
                    pruned.add(ft.number)
                    self._say(f"trial {ft.number} (followed) pruned at step {reported[ft.number]}: stopping its job")
                    # In the background (stop() waits for the job's end, which the next round reads).
                    threading.Thread(target=handle.stop, name=f"clawgym-stop-trial-{ft.number}",
                                     daemon=True).start()
            if follow:
                time.sleep(self.settings.poll_interval)

    def _orphan_points(self, ft: Any) -> Tuple[List[Tuple[int, float]], int]:
        from clawgym.runs.events import read_run_scalars
        from clawgym.runs.table import steps_done

        folders = _attempt_event_dirs(ft.user_attrs.get(ATTR_PREFIX + "events"),
                                      ft.user_attrs.get(ATTR_PREFIX + "save_dir"))
        scalars = read_run_scalars(folders) if folders else {}
        return [(p.step, p.value) for p in scalars.get(self.metric.tag, [])], steps_done(scalars)[0]

    def _end_orphan(self, ft: Any, trial: Any, status: str, points: List[Tuple[int, float]], steps: int,
                    pruned: bool) -> None:
        value = self.metric.reduce([v for _, v in points])
        trial.set_user_attr(ATTR_PREFIX + "steps", steps)
        if pruned and status == "STOPPED":
            tell(self.study, trial, None, TrialState.PRUNED)
            state = "pruned"
            self._say(f"trial {ft.number} (followed) pruned after {steps} steps")
        elif status == "SUCCEEDED" and value is not None and not math.isfinite(value):
            self._tell_orphan(ft, TrialState.FAIL, self._not_finite(value))
            state, value = "failed", None
        elif status == "SUCCEEDED" and value is not None:
            tell(self.study, trial, value)
            state = "complete"
            self._say(f"trial {ft.number} (followed) complete: {self.metric.text} = {_num(value)}")
        else:
            self._tell_orphan(ft, TrialState.FAIL, f"orphan: its job ended {status}")
            state, value = "failed", None
        self._mark_orphan(ft, status, state, value if state == "complete" else None, steps, None)

    def _mark_orphan(self, ft: Any, status: str, state: str, value: Optional[float], steps: int,
                     reason: Optional[str]) -> None:
        """How a trial of an earlier launcher ended, beside its snapshot: the job's end (what the
        pipeline records for the jobs it follows; without it ``clawgym runs`` asks a cluster that may be
        gone and says ``unknown``) and the trial's state."""
        snapshot = ft.user_attrs.get(ATTR_PREFIX + "snapshot")
        if not snapshot:
            return
        from clawgym.snapshot.marks import mark_ended, mark_trial

        job_status = {"SUCCEEDED": SUCCEEDED, "STOPPED": STOPPED}.get(str(status), FAILED)
        try:
            mark_ended(snapshot, job_status, {SUCCEEDED: 0, STOPPED: EXIT_INTERRUPTED}.get(job_status, 1))
            mark_trial(snapshot, {"study": str(self.settings.study_name), "trial": ft.number, "state": state,
                                  "objective": value, "metric": self.metric.text, "steps": steps, "reason": reason})
        except OSError:
            pass  # a read-only save dir: the study still knows

    def _tell_orphan(self, ft: Any, state: TrialState, reason: str) -> None:
        trial = _reopen(self.study, ft)
        trial.set_user_attr(ATTR_PREFIX + "reason", reason)
        tell(self.study, trial, None, state)
        self._say(f"trial {ft.number} told {state.name}: {reason}")

    # -------------------------------------------------------- the whole study

    def run(self) -> int:
        self.settle_orphans()
        before = self.finished_in_study()
        self._say(f"study {self.settings.study_name!r} in {self.storage}: {before} trial(s) done, "
                  f"{max(self._limit - before, 0)} to run; metric {self.metric.text} ({self.settings.direction}), "
                  f"sampler {self.settings.sampler}, pruner {self.settings.pruner}")
        first: Optional[Trial] = None
        try:
            while first is None and self.remaining() > 0:
                first = self._ask()
        except KeyboardInterrupt:
            self._settle_unfinished(EXIT_INTERRUPTED)
            raise
        rc = 0
        if first is not None:
            self.pipeline = Pipeline([first.job], PipelineOptions(
                sweep=True, max_concurrent=self.settings.max_concurrent, poll_interval=self.settings.poll_interval,
                progress_interval=self.settings.progress_interval), run_job=self._run_job, listener=self)
            try:
                rc = self.pipeline.run()
            except Refused as err:
                self._refuse(first, str(err))
                raise
            finally:
                self._settle_unfinished(rc)
        say(self.table())
        best = self.best_line()
        if best:
            say(best)
        if rc in (EXIT_INTERRUPTED, 129):
            return rc
        # As a -m sweep with a failed job exits 1, so does a study in which a trial of this launch was
        # refused or failed: the exit code never hides them (the table above says why each one did).
        bad = [t for t in self.trials.values() if t.state in ("refused", "failed")]
        if bad:
            refused = sum(1 for t in bad if t.state == "refused")
            say(f"{len(bad)} of this launch's {len(self.trials)} trials did not complete: {refused} refused, "
                f"{len(bad) - refused} failed (exit {EXIT_FAILED})")
            return EXIT_FAILED
        return 0 if any(t.state == TrialState.COMPLETE for t in self.study.get_trials(deepcopy=False)) else EXIT_FAILED

    def _settle_unfinished(self, rc: int) -> None:
        """After the pipeline: no trial of ours stays RUNNING in the study (Ctrl-C: told FAIL and
        marked interrupted; SIGHUP: their jobs keep running, so they stay for the next launch)."""
        if rc == 129:
            return
        for trial in self.trials.values():
            if trial.state in ("asked", "running"):
                trial.trial.set_user_attr(INTERRUPTED, True)
                self._finish(trial, "interrupted", None, TrialState.FAIL,
                             reason="the launch was interrupted; its job was stopped")
                self._record(trial)

    # -------------------------------------------------------- dry run

    def dry_run(self) -> int:
        """``dry_run=true`` (or ``preflight_only=true``): the search space, and the first trial the
        sampler would ask for, dry-run (or preflighted) as a ``-m`` job is; no storage is touched and
        nothing is submitted."""
        lines = [f"study {self.settings.study_name!r} (dry run: storage {self.storage} not touched), "
                 f"{self._limit} trials, metric {self.metric.text} ({self.settings.direction}), "
                 f"sampler {self.settings.sampler}, pruner {self.settings.pruner}, search space:"]
        lines += [f"  {k}: {_describe(d)}" for k, d in self.space.params.items()]
        say("\n".join(lines))
        trial = Trial(self.study.ask(dict(self.space.params)))
        trial.slot = 0
        self.trials[trial.number] = trial
        try:
            job = self._compose(trial, self.space.overrides(trial.trial.params))
        except SweepRefused as err:
            say(str(err))
            return EXIT_REFUSED
        say(f"first trial: {job.label.split(': ', 1)[-1]}")
        from clawgym.pipeline.prepare import prepared_plans

        assert self._runner is not None
        with prepared_plans({job.num: job.plan}):
            self._runner.run_inline(job)
        if job.status == SUCCEEDED and job.plan is not None and not self.config.get("preflight_only"):
            from clawgym.pipeline.prepare import memory_banner

            # As a single dry run and a -m dry run do (docs/guide/explain.md): a plan that does not fit
            # ends with the banner and exits 2, its launch would be refused by preflight `memory`.
            banner = memory_banner(job.plan, job.task_cfg)
            if banner:
                say(banner)
                return EXIT_REFUSED
        return 0 if job.status == SUCCEEDED else 1

    # -------------------------------------------------------- the end

    def table(self) -> str:
        keys = list(self.space.params)
        head = ["#", "state", *keys, self.metric.text, "steps", "note"]
        rows = [head]
        reasons: List[str] = []
        for ft in self.study.get_trials(deepcopy=False):
            state = ft.state.name.lower()
            if ft.user_attrs.get("clawgym_refused"):
                state = "refused"
            elif ft.user_attrs.get(INTERRUPTED):
                state = "interrupted"
            note = str(ft.user_attrs.get(REFUSED_ATTR) or ft.user_attrs.get(ATTR_PREFIX + "reason") or "").strip()
            if note and (len(note) > NOTE_WIDTH or "\n" in note):
                # The whole reason below the table (a cut reason hides the rule and its fix).
                reasons.append(f"trial {ft.number} {state}:\n" + "\n".join(
                    "  " + line for line in note.splitlines() if line.strip()))
                note = note.splitlines()[0][:NOTE_WIDTH - 11].rstrip() + " (below)"
            rows.append([str(ft.number), state, *(format_value(ft.params[k]) if k in ft.params else "-" for k in keys),
                         _num(ft.value) if ft.state == TrialState.COMPLETE else "-",
                         str(ft.user_attrs.get(ATTR_PREFIX + "steps", "-")), note])
        widths = [max(len(r[i]) for r in rows) for i in range(len(head))]
        lines = [f"\nstudy {self.settings.study_name!r} ({self.storage}):"]
        for n, r in enumerate(rows):
            lines.append("  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip())
            if n == 0:
                lines.append("  ".join("-" * w for w in widths))
        if reasons:
            lines += ["", "why trials were refused or failed:", *reasons]
        return "\n".join(lines)

    def best_line(self) -> Optional[str]:
        try:
            best = self.study.best_trial
        except ValueError:
            return "no trial completed: no best trial yet"
        line = " ".join(f"{self.space.prefixes.get(k, '')}{k}={format_value(best.params[k])}"
                        for k in self.space.params if k in best.params)
        return f"best trial #{best.number}: {self.metric.text} = {_num(best.value)}\n  overrides: {line}"


def _events_dir(plan: Any) -> Optional[str]:
    return ((getattr(plan, "runtime_env", None) or {}).get("env_vars") or {}).get(TENSORBOARD_DIR_ENV)


def _attempt_event_dirs(first: Optional[str], save_dir: Optional[str]) -> List[Path]:
    """The events folders of a trial's attempts, first launch first: a restart by the trial's supervisor
    is a resume with its own submission id, so its steps land in ``<tensorboard>/<its submission id>/``
    beside the first launch's (the trial keeps its number and every step it reported)."""
    if not first:
        return []
    folders = [Path(first)]
    if save_dir:
        from clawgym.snapshot.attempts import read_attempts

        for a in read_attempts(save_dir).attempts:
            folder = folders[0].parent / str(a.submission_id)
            if a.submission_id and folder not in folders:
                folders.append(folder)
    return [f for f in folders if f.is_dir()]


def _reopen(study: optuna.Study, frozen: Any) -> optuna.trial.Trial:
    """A live handle on a trial an earlier launcher left RUNNING (to report, set attrs and tell).
    Optuna offers no public way back from a FrozenTrial to its Trial; the storage id is the one link."""
    return optuna.trial.Trial(study, frozen._trial_id)


def _describe(d: Any) -> str:
    from optuna.distributions import CategoricalDistribution

    if isinstance(d, CategoricalDistribution):
        return "choice(" + ", ".join(format_value(c) for c in d.choices) + ")"
    kind = "int" if isinstance(d.low, int) and not isinstance(d.low, bool) else "float"
    return (f"{kind} in [{d.low}, {d.high}]" + (" (log)" if getattr(d, "log", False) else "")
            + (f" step {d.step}" if getattr(d, "step", None) else ""))


def _num(value: Optional[float]) -> str:
    return "-" if value is None else f"{value:.4g}"


def run_study(*, hydra_context: HydraContext, task_function: TaskFunction, config: DictConfig,
              arguments: List[str], settings: Dict[str, Any]) -> List[JobReturn]:
    """Entry point of the sweeper plugin: refuses bad settings (exit 2), runs the study, exits with
    0 (a trial completed and none of this launch's was refused or failed), 1 (one was refused or
    failed, or none completed), 2 (refused before anything started) or 130 (Ctrl-C)."""
    from clawgym.config.compose import is_clawgym_config

    sweep_dir = Path(str(config.hydra.sweep.dir))
    made: List[Path] = []  # files this launch made before it was refused (a new, empty journal)

    def refuse(text: str) -> None:
        from clawgym.common.secrets import redact
        from clawgym.pipeline.prepare import discard_own_output_dir

        say(redact(text))
        # A refused study leaves nothing behind: the journal it made, then the sweep dir this
        # command created (when it holds only what Hydra wrote).
        for path in made:
            with contextlib.suppress(OSError):
                path.unlink()
        discard_own_output_dir()
        sys.exit(EXIT_REFUSED)

    if not is_clawgym_config(config):
        refuse("clawgym: hydra/sweeper=clawgym tunes clawgym configs only; this app's config is not one")
    try:
        s = Settings.from_mapping(settings)
        space = parse(arguments, s.params)
        metric = parse_metric(s.metric)
        if not space.params:
            raise SpaceError("nothing to tune: no override samples a value\n  fix: e.g. "
                             "'optimizer.lr=tag(log, interval(1e-7, 1e-5))' or 'rollout.temperature=interval(0.6, 1.2)'")
        if s.sampler == "grid":
            space.grid()
        if bool(config.ray.detach):
            raise SettingsError("  ray.detach=true: a study follows its trials to tell Optuna how they did\n"
                                "    fix: drop ray.detach")
    except (SettingsError, SpaceError, MetricError) as err:
        refuse(f"clawgym: the study was refused; nothing was started\n{err}")
    try:
        sweep_dir.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        refuse(f"clawgym: the study was refused; nothing was started\n  hydra.sweep.dir={sweep_dir}: cannot be "
               f"made ({exc.strerror or exc})\n    fix: a folder you can write, e.g. hydra.sweep.dir=multirun/tune/"
               f"{s.study_name}")
    from clawgym.tuner.study import in_memory_study

    if bool(config.get("dry_run")) or bool(config.get("preflight_only")):
        session = TuneSession(hydra_context=hydra_context, task_function=task_function, config=config, settings=s,
                              space=space, metric=metric, study=in_memory_study(s, space),
                              storage=storage_text(s, sweep_dir))
        rc = session.dry_run()
        if rc:
            sys.exit(rc)
        return []
    # A misspelled key refuses the study once, before any trial (it would refuse every trial).
    probe = TuneSession(hydra_context=hydra_context, task_function=task_function, config=config, settings=s,
                        space=space, metric=metric, study=in_memory_study(s, space), storage=storage_text(s, sweep_dir))
    problem = probe.composition_error()
    if problem:
        refuse(f"clawgym: the study was refused; nothing was started\n{problem}")
    journal = None if s.storage and "://" in str(s.storage) else Path(storage_text(s, sweep_dir))
    if journal is not None and not journal.exists():
        made.append(journal)
    try:
        study = open_study(s, space, sweep_dir)
    except Exception as exc:  # noqa: BLE001 - Optuna's storage errors are many kinds; each refuses the study
        where = storage_text(s, sweep_dir)
        import re

        # The error may quote the RDB URL: never its password.
        first = re.sub(r"://([^:/@\s]+):[^@\s]*@", r"://\1:***@", (str(exc).strip().splitlines() or [""])[0])
        refuse(f"clawgym: the study was refused; nothing was started\n  hydra.sweeper.storage: the study's storage "
               f"{where} cannot be opened: {type(exc).__name__}: {first}"
               f"\n    fix: a storage you can write and that holds an Optuna study (a journal file this sweeper wrote, "
               f"or an RDB URL), e.g. hydra.sweeper.storage={sweep_dir}/{s.study_name}-new.journal; "
               "a damaged journal can be moved aside and the study started again")
    session = TuneSession(hydra_context=hydra_context, task_function=task_function, config=config, settings=s,
                          space=space, metric=metric, study=study, storage=storage_text(s, sweep_dir))
    session._templates = probe._templates  # the config tree the probe composed serves every trial
    try:
        rc = session.run()
    except Refused as err:
        refuse(str(err))
    except KeyboardInterrupt:
        print("\n[tune] interrupted before any trial was submitted", file=sys.stderr, flush=True)
        sys.exit(EXIT_INTERRUPTED)
    if rc:
        sys.exit(rc)
    return []
