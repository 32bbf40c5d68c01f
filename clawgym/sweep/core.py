"""Sweeps (``python train.py -m ...``) of clawgym jobs, driven by the Hydra launcher plugin.

The sweep's own part: every job composed once, named, validated and planned before
anything starts, and the sweep refused when two jobs would share a save dir, run name or
W&B run name. Launched jobs then go through the same launch pipeline as a single run
(:mod:`clawgym.pipeline.pipeline`: preflight all, snapshot, one cluster, pack by free GPUs,
follow, summarise). Each job still runs through Hydra's ``run_job`` (job dir, ``.hydra/``,
callbacks, logging); its task function's ``launch_single`` submits the job and returns
at once. Dry-run and preflight-only jobs run inline, one after another.

A sweep with a failed job ends with the summary, one line per failed job on stderr and
exit status 1 (no traceback, no Hydra trailer); a refused one with its report and 2.

Ray, docker and wandb are imported inside functions (``import clawgym.sweep.core`` is light).
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
from omegaconf.errors import OmegaConfBaseException

from clawgym.common.exit_codes import FAILED as EXIT_FAILED, INTERRUPTED as EXIT_INTERRUPTED, REFUSED as EXIT_REFUSED
from clawgym.pipeline.jobs import FAILED, RUNNING, SUCCEEDED, PipelineJob, PipelineOptions, Refused
from clawgym.pipeline.pipeline import Pipeline
from clawgym.pipeline.report import say, why_failed
from clawgym.common.overrides import differing_overrides, split_override
from clawgym.plan.build import LaunchPlan, build_plan_from_dict
from clawgym.memory import this_node_gpu
from clawgym.search.auto import NoLayout, is_auto, resolve_auto
from clawgym.validate import ConfigError, check
from clawgym.trainer.effective import effective_config
from clawgym.trainer.wandb_env import run_id

#: Longest default run name; longer ones are cut and get a hash so they stay distinct.
MAX_NAME = 150



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
class SweepJob(PipelineJob):
    """One job of the sweep (a pipeline job plus what Hydra knows of it)."""

    # Overrides as the user's sweep produced them.
    user_overrides: List[str] = field(default_factory=list)
    # Overrides the job runs with (the user's plus default naming / port spreading).
    overrides: List[str] = field(default_factory=list)
    # The user's overrides whose value differs between jobs (what tells this job apart).
    distinct: List[str] = field(default_factory=list)
    # Composed sweep config, with the ``hydra`` node.
    config: Optional[DictConfig] = None
    # "dry_run", "preflight" (preflight_only) or "launch".
    kind: str = "launch"
    job_return: Optional[JobReturn] = None

    def __post_init__(self) -> None:
        self.label = " ".join(filter_overrides(self.user_overrides)) or "(no overrides)"
        self.short_label = " ".join(filter_overrides(self.distinct)) or self.label

    @property
    def task_cfg(self) -> DictConfig:
        if self.cfg is None:
            self.cfg = task_config(self.config)
        return self.cfg


def resolved_task(sweep_config: DictConfig) -> Dict[str, Any]:
    """``to_plain(task_config(sweep_config))`` without copying the tree first: each top-level
    node but ``hydra`` resolved in place (a task config has no interpolation into ``hydra``,
    which ``task_config`` drops). Raises as ``to_plain`` does when a value does not resolve."""
    from omegaconf import Container

    out: Dict[str, Any] = {}
    for key in sweep_config.keys():
        if key == "hydra":
            continue
        node = sweep_config._get_node(key)
        if isinstance(node, Container):
            out[str(key)] = OmegaConf.to_container(node, resolve=True, throw_on_missing=False)
        else:
            out[str(key)] = "???" if node._is_missing() else sweep_config[key]
    return out


def task_config(sweep_config: DictConfig) -> DictConfig:
    """The job's task config: the sweep config without Hydra's node (what the task gets)."""
    cfg = copy.deepcopy(sweep_config)
    with read_write(cfg), open_dict(cfg):
        cfg.pop("hydra", None)
    return cfg


# ---------------------------------------------------------------- composition

def _searchpath_groups(master: Any) -> set:
    """Config groups that only ``hydra.searchpath`` folders hold (``+experiment=NAME`` of an imported
    experiment): the loader's repository, built before the command line, does not know them."""
    groups = set()
    for entry in OmegaConf.select(master, "hydra.searchpath", default=None) or []:
        text = str(entry)
        if text.startswith("file://"):
            root = Path(text[len("file://"):])
            if root.is_dir():
                groups.update(p.name for p in root.iterdir() if p.is_dir())
    return groups


def _is_value_override(override: Any, loader: Any, extra_groups: Any = ()) -> bool:
    """True for ``key=value`` (also ``+key=``, ``++key=``, ``~key``) on a config key: an override
    Hydra applies after composing, that cannot change the defaults list."""
    if override.is_hydra_override() or override.package is not None:
        return False
    if override.key_or_group in extra_groups:
        return False
    try:
        return not loader.repository.group_exists(override.key_or_group)
    except Exception:
        return False


def compose_jobs(loader: Any, master: DictConfig, job_overrides: Sequence[Sequence[str]], *,
                 templates: Optional[Dict[Tuple[str, ...], DictConfig]] = None) -> List[DictConfig]:
    """Each job's sweep config, as ``loader.load_sweep_config(master, overrides)`` gives it.

    Hydra composes the whole tree for every job; with clawgym's typed schema that is most of a
    sweep's cost. Jobs whose overrides differ only in values (``rollout.temperature=0.6,0.8``)
    share their defaults list and composed tree: that tree is composed once per distinct set of
    group choices, and each job gets a copy with its value overrides applied by Hydra's own
    override code, and the ``hydra`` node's fields that depend on the overrides (the task and
    hydra override lists, ``job.override_dirname``) set as Hydra sets them.
    ``tests/test_sweep_compose.py`` holds the result to Hydra's own, node for node.

    ``templates`` (shape -> composed tree) is shared between calls with the same ``master``.
    A loader that already composed the jobs (the launcher plugin's, which composes each job
    when Hydra's sweeper validates the batch) hands them over through ``take_composed``.
    """
    take = getattr(loader, "take_composed", None)
    if take is not None:
        return [take(master, list(o)) for o in job_overrides]
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.types import RunMode

    try:
        from hydra._internal.config_loader_impl import ConfigLoaderImpl, get_overrides_dirname
    except ImportError:  # a Hydra without these internals: compose each job as Hydra does
        return [loader.load_sweep_config(master, list(o)) for o in job_overrides]
    if not hasattr(loader, "repository") or not hasattr(ConfigLoaderImpl, "_apply_overrides_to_config"):
        return [loader.load_sweep_config(master, list(o)) for o in job_overrides]

    parser = OverridesParser.create()
    base_hydra = list(OmegaConf.to_container(master.hydra.overrides.hydra))
    templates = {} if templates is None else templates
    extra = _searchpath_groups(master)
    out: List[DictConfig] = []
    for overrides in job_overrides:
        parsed = parser.parse_overrides(overrides=list(overrides))
        values = [o for o in parsed if _is_value_override(o, loader, extra)]
        shape = tuple(o.input_line for o in parsed if not _is_value_override(o, loader, extra))
        if shape not in templates:
            templates[shape] = loader.load_configuration(config_name=master.hydra.job.config_name,
                                                         overrides=base_hydra + list(shape), run_mode=RunMode.RUN)
        cfg = copy.deepcopy(templates[shape])
        ConfigLoaderImpl._apply_overrides_to_config(values, cfg)
        everything = parser.parse_overrides(overrides=base_hydra + list(overrides))
        app = [o for o in everything if not o.is_hydra_override()]
        cfg.hydra.overrides.hydra = [o.input_line for o in everything if o.is_hydra_override()]
        cfg.hydra.overrides.task = [o.input_line for o in app]
        dirname = cfg.hydra.job.config.override_dirname
        cfg.hydra.job.override_dirname = get_overrides_dirname(
            overrides=app, kv_sep=dirname.kv_sep, item_sep=dirname.item_sep, exclude_keys=dirname.exclude_keys)
        OmegaConf.copy_cache(from_config=master, to_config=cfg)
        out.append(cfg)
    return out


# ---------------------------------------------------------------- naming

def _sanitize(text: str) -> str:
    """Keep names folder-, shell- and Ray-friendly while readable: ``a.b=v,c=w``."""
    return re.sub(r"[^A-Za-z0-9._=,+-]+", "_", text).strip("_")


def typed_overrides(job: Sequence[str], typed: Sequence[str]) -> List[str]:
    """A job's overrides with each swept value as the user typed it (``false``, ``1e-6``), where the
    sweeper wrote it back as Python prints it (``False``, ``1e-06``); the parsed value is the same.
    Only plain values and comma lists are mapped (no quotes, brackets or functions)."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    choices: Dict[str, List[str]] = {}
    for t in typed:
        key, sep, value = str(t).partition("=")
        if sep and value and not any(ch in value for ch in "[]{}()'\"\\$ "):
            choices[key] = value.split(",")
    if not choices:
        return list(job)
    parser = OverridesParser.create()
    out = []
    for o in job:
        key, _, value = o.partition("=")
        texts = choices.get(key)
        if texts and value not in texts:
            try:
                want = parser.parse_override(o).value()
                for text in texts:
                    got = parser.parse_override(f"{key}={text}").value()
                    if type(got) is type(want) and got == want:
                        o = f"{key}={text}"
                        break
            except Exception:  # noqa: BLE001 - Hydra parsed it once already; keep its spelling
                pass
        out.append(o)
    return out


def default_run_name(exp_name: str, differing: Sequence[str]) -> str:
    """``<exp_name>_<k=v,k2=v2>`` from the overrides that tell this job apart."""
    tag = _sanitize(",".join(f"{k}={v}" for k, v in (split_override(o) for o in differing)))
    name = f"{exp_name}_{tag}" if tag else exp_name
    if len(name) > MAX_NAME:
        digest = hashlib.sha1(name.encode()).hexdigest()[:8]
        name = f"{name[:MAX_NAME - 9]}_{digest}"
    return name


def apply_value_overrides(cfg: DictConfig, overrides: Sequence[str]) -> None:
    """Set ``key=value`` overrides on a composed sweep config, as composing with them would,
    and record them in ``hydra.overrides.task`` (``.hydra/overrides.yaml``, the snapshot)."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    parser = OverridesParser.create()
    with read_write(cfg), open_dict(cfg):
        for text in overrides:
            override = parser.parse_override(text)
            OmegaConf.update(cfg, override.key_or_group, override.value(), merge=False)
        cfg.hydra.overrides.task.extend(list(overrides))


def _unresolved(cfg: DictConfig, key: str) -> Any:
    """The value of a dotted key as written (an interpolation stays ``${...}``)."""
    parent, _, leaf = key.rpartition(".")
    container = OmegaConf.select(cfg, parent) if parent else cfg
    node = None if container is None else container._get_node(leaf)
    return None if node is None else node._value()


#: Public for the tuner (clawgym/tuner), which names its trials' jobs the same way.
unresolved = _unresolved


def run_name_is_default(cfg: DictConfig) -> bool:
    """True unless the user set ``run_name`` (it is still the schema's ``${exp_name}``)."""
    return _unresolved(cfg, "run_name") == "${exp_name}"


def wandb_names(plan: LaunchPlan) -> List[str]:
    """W&B run identities the job would claim (run name/id variables or flags)."""
    env = plan.runtime_env.get("env_vars", {})
    # clawgym's own run id is one per save dir (clawgym.trainer.wandb_env.run_id): the save dir's clash
    # says it; only an id the user chose is a W&B identity of its own.
    own = run_id({"paths": {"save": plan.save_dir}, "run_name": plan.run_name})
    names = [f"{k}={env[k]}" for k in ("WANDB_NAME", "WANDB_RUN_ID") if env.get(k) and env[k] != own]
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


_say = say


# ---------------------------------------------------------------- the sweep

class SweepSession:
    """Composes, checks and runs the jobs of one clawgym sweep."""

    def __init__(self, *, hydra_context: HydraContext, task_function: TaskFunction, config: DictConfig,
                 options: LauncherOptions, environ: Optional[Mapping[str, str]] = None,
                 templates: Optional[Dict[Tuple[str, ...], DictConfig]] = None) -> None:
        self.hydra_context = hydra_context
        self.task_function = task_function
        self.config = config
        self.options = options
        self.environ = os.environ if environ is None else environ
        self.jobs: List[SweepJob] = []
        # Composed trees per group-choice set (compose_jobs), shared by sessions of one master config
        # (the tuner composes one trial per session).
        self.templates = templates

    # -------------------------------------------------------- composition and checks

    def compose_all(self, job_overrides: Sequence[Sequence[str]], initial_job_idx: int) -> None:
        """Compose every job, adding default names (and API ports) that tell jobs apart."""
        # As typed: Hydra's sweeper writes each swept value back as Python prints it (False, 1e-06).
        typed = list(OmegaConf.select(self.config, "hydra.overrides.task", default=[]) or [])
        user = [typed_overrides(o, typed) for o in job_overrides]
        configs = compose_jobs(self.hydra_context.config_loader, self.config, user, templates=self.templates)
        for i, cfg in enumerate(configs):
            with open_dict(cfg):
                cfg.hydra.job.id = initial_job_idx + i
                cfg.hydra.job.num = initial_job_idx + i
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
            if len(launched) > 1 and not any(split_override(o)[0] == "sglang.api_port" for o in self._all_overrides(user)):
                base = int(configs[launched[0]].sglang.api_port)
                for n, i in enumerate(launched):
                    extra[i].append(f"sglang.api_port={base + n}")
        for i, o in enumerate(user):
            if extra[i]:
                # Value overrides only (no group changes): set on the composed config, no second compose.
                apply_value_overrides(configs[i], extra[i])
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
        from clawgym.config.compose import to_plain

        reports = []
        warned = []
        plain: Dict[int, Any] = {}
        choices: Dict[int, Any] = {}
        effective: Dict[int, Any] = {}
        for j in self.jobs:
            # Resolved once for validation, the plan and the memory plan (each would resolve it again).
            try:
                plain[j.num] = resolved_task(j.config) if j.config is not None else to_plain(j.task_cfg)
            except OmegaConfBaseException:
                plain[j.num] = None  # validation reports what does not resolve
            # gpu_layout=auto: this job's own search (its overrides are its constraints).
            if plain[j.num] is not None and is_auto(plain[j.num]):
                try:
                    plain[j.num], choices[j.num] = resolve_auto(
                        plain[j.num], list(OmegaConf.select(j.config, "hydra.overrides.task", default=[]) or []),
                        gpu=this_node_gpu(plain[j.num]))
                except (NoLayout, KeyError, TypeError, ValueError) as exc:
                    reports.append(f"sweep job #{j.num}: {j.label}\n  {exc}")
                    continue
            # The config as the trainer runs it, derived once per job and passed down.
            if plain[j.num] is not None:
                try:
                    effective[j.num] = effective_config(plain[j.num])
                except Exception:  # noqa: BLE001 - validation derives it again and reports what is wrong
                    effective[j.num] = None
            found, warns = check(j.task_cfg if plain[j.num] is None else copy.deepcopy(plain[j.num]),
                                 effective=effective.get(j.num), here=True)
            if found:
                reports.append(ConfigError(found, context=f"sweep job #{j.num}: {j.label}").report())
            elif warns:
                from clawgym.validate import format_warnings

                for w in warns:
                    # One entry per distinct warning: the jobs it concerns gather under it.
                    text = format_warnings([w])
                    at = next((e for e in warned if e[0] == text), None)
                    if at is None:
                        warned.append((text, [j.num]))
                    else:
                        at[1].append(j.num)
        if warned and not reports:
            # Warnings never refuse: each printed once per sweep, naming the jobs it concerns.
            from clawgym.common.console import say

            every = len(self.jobs)
            say("\n".join((f"every sweep job ({every}):" if len(nums) == every and every > 1
                            else "sweep job" + ("s" if len(nums) > 1 else "") + " " + ", ".join(f"#{n}" for n in nums)
                            + ":") + "\n" + text for text, nums in warned))
        if reports:
            n = len(reports)
            raise SweepRefused(f"clawgym: sweep refused, {n} of {len(self.jobs)} job{'s' if len(self.jobs) != 1 else ''}"
                               f" invalid; nothing was started\n" + "\n".join(reports))
        from clawgym.pipeline.prepare import attach_memory, timestamp

        stamp = timestamp()
        for j in self.jobs:
            j.plan = build_plan_from_dict(copy.deepcopy(plain[j.num]), environ=self.environ, timestamp=stamp,
                                          effective=effective.get(j.num))
            if choices.get(j.num):
                from clawgym.pipeline.prepare import apply_layout

                j.plan.layout = choices[j.num]
                # The job's composed config shows the chosen layout too (snapshot, artefacts).
                apply_layout(j.config, choices[j.num])
                j.cfg = None
            # Each job's memory plan: printed with its dry-run plan, checked by its preflight.
            attach_memory(j.plan, plain[j.num], effective=effective.get(j.num))
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
        """Run every job; returns JobReturns in sweep order. Raises SweepRefused / exits 130."""
        from clawgym.pipeline.prepare import prepared_plans

        # Each job's task function reuses the plan checked up front (no second validate/plan).
        with prepared_plans({j.num: j.plan for j in self.jobs if j.plan is not None}):
            return self._run()

    def _run(self) -> List[JobReturn]:
        for j in self.jobs:
            if j.kind != "launch" or self.options.inline:
                self._run_inline(j)
        self._dry_run_summary([j for j in self.jobs if j.kind == "dry_run"])
        launched = [j for j in self.jobs if j.kind == "launch" and not self.options.inline]
        if launched:
            from clawgym.snapshot.records import LaunchRecord

            for j in launched:
                # This job's overrides and choices (HydraConfig holds the whole sweep's here).
                j.record = LaunchRecord.from_hydra(j.config.hydra, command="sweep")
                # The pipeline reads the task config (j.cfg); dry-run jobs never need it.
                j.cfg = j.task_cfg
            pipeline = Pipeline(launched, PipelineOptions(
                sweep=True, max_concurrent=self.options.max_concurrent, poll_interval=self.options.poll_interval,
                progress_interval=self.options.progress_interval), run_job=self._run_pipeline_job,
                environ=self.environ)
            try:
                rc = pipeline.run()
            except Refused as err:
                raise SweepRefused(str(err)) from None
            if rc in (EXIT_INTERRUPTED, 129):
                sys.exit(rc)
            self._finish_returns(launched)
        return [j.job_return for j in self.jobs if j.job_return is not None]

    def _dry_run_summary(self, jobs: Sequence[SweepJob]) -> None:
        """A dry-run sweep ends with one table: every job's GPUs and memory verdict and its plan file;
        a job whose memory plan does not fit makes the sweep exit 2, as its launch would be refused."""
        if not jobs:
            return
        from clawgym.common.console import say
        from clawgym.pipeline.prepare import memory_banner

        say(dry_run_table(jobs), out=True)
        banners = [b for b in (memory_banner(j.plan, j.task_cfg) for j in jobs if j.plan is not None) if b]
        if banners:
            say("\n".join(banners))
            sys.exit(EXIT_REFUSED)

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

    def _run_pipeline_job(self, j: PipelineJob) -> None:
        """The pipeline's way to submit a sweep job: Hydra runs the job, whose task function's
        ``launch_single`` lands in ``Pipeline.submit_current``."""
        assert isinstance(j, SweepJob)
        try:
            ret = self._run_hydra_job(j)
        except SystemExit as exc:
            # A task function that exits must not end the sweep while other jobs run.
            ret = JobReturn(overrides=j.overrides, cfg=j.task_cfg, status=JobStatus.FAILED,
                            working_dir=os.getcwd(), task_name=str(j.config.hydra.job.name))
            ret.hydra_cfg = OmegaConf.create({"hydra": OmegaConf.to_container(j.config.hydra, resolve=False)})
            ret.return_value = SweepJobFailed(f"clawgym: sweep job #{j.num} ({j.label}) exited with status "
                                              f"{exc.code} before submitting")
        j.job_return = ret
        if ret.status != JobStatus.COMPLETED:
            j.error = ret._return_value

    # The tuner runs each trial's Hydra job the way a sweep job runs (one session per trial).
    run_pipeline_job = _run_pipeline_job
    run_inline = _run_inline

    def _finish_returns(self, jobs: Sequence[SweepJob]) -> None:
        """Give each started job's JobReturn its real final status."""
        for j in jobs:
            ret = j.job_return
            if ret is None or j.handle is None:
                continue
            if j.status == FAILED:
                ret.status = JobStatus.FAILED
                ret.return_value = SweepJobFailed(
                    f"clawgym: sweep job #{j.num} ({j.label}) failed ({why_failed(j)}); submission "
                    f"{j.submission_id}; log: {j.log_file}")
            else:
                ret.status = JobStatus.COMPLETED
                ret.return_value = {"submission_id": j.submission_id, "status": j.status, "exit_code": j.exit_code,
                                    "log_file": j.log_file, "run_name": j.plan.run_name}


def dry_run_table(jobs: Sequence[SweepJob]) -> str:
    """The summary of a dry-run sweep: one row per job."""
    rows = [("#", "overrides", "run_name", "GPUs", "GPU peak", "memory", "plan")]
    for j in jobs:
        mem = (j.plan.memory if j.plan is not None else None) or {}
        peak = (mem.get("phases") or {}).get("peak_gib")
        out_dir = None
        if j.job_return is not None and getattr(j.job_return, "hydra_cfg", None) is not None:
            out_dir = OmegaConf.select(j.job_return.hydra_cfg, "hydra.runtime.output_dir", default=None)
        rows.append((str(j.num), j.short_label or j.label, j.plan.run_name if j.plan else "-",
                     str(j.plan.gpus_required) if j.plan else "-",
                     f"{peak:.1f} of {mem.get('gpu_memory_gib', 0):.1f} GiB" if peak is not None else "-",
                     ("fits" if mem.get("fits") else "DOES NOT FIT") if mem else "-",
                     f"{out_dir}/launch_plan.json" if out_dir else "-"))
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]) - 1)]
    out = [f"\nsweep dry run: {len(jobs)} job{'s' if len(jobs) != 1 else ''}, "
           f"{sum(1 for r in rows[1:] if r[5] == 'fits')} fit, nothing was started"]
    for n, r in enumerate(rows):
        out.append("  ".join(c.ljust(w) for c, w in zip(r, widths)) + "  " + r[-1])
        if n == 0:
            out.append("  ".join("-" * w for w in widths) + "  " + "-" * 4)
    return "\n".join(out)


def run_sweep(*, hydra_context: HydraContext, task_function: TaskFunction, config: DictConfig,
              job_overrides: Sequence[Sequence[str]], initial_job_idx: int,
              options: LauncherOptions) -> List[JobReturn]:
    """Entry point of the launcher plugin for clawgym configs.

    A refused sweep prints its report alone (no traceback) and exits with status 2.
    """
    session = SweepSession(hydra_context=hydra_context, task_function=task_function, config=config,
                           options=options)
    Path(str(config.hydra.sweep.dir)).mkdir(parents=True, exist_ok=True)
    from clawgym.common.console import say
    from clawgym.pipeline.prepare import discard_own_output_dir, failed_check

    try:
        try:
            session.compose_all(job_overrides, initial_job_idx)
            session.check_all()
        except SweepRefused:
            raise
        except Exception as exc:  # noqa: BLE001 - a check that raises refuses the sweep, nothing started
            raise SweepRefused(failed_check(exc)) from None
        returns = session.run()
    except SweepRefused as err:
        from clawgym.common.secrets import redact

        # A closed stderr is silenced, not a traceback.
        say(redact(str(err)))
        # Nothing ran: the sweep dir this command created (multirun.yaml only) goes too.
        discard_own_output_dir()
        sys.exit(EXIT_REFUSED)
    except KeyboardInterrupt:
        # Before the first submission (later ones are handled where jobs run).
        print("\n[sweep] interrupted before any job was submitted", file=sys.stderr, flush=True)
        sys.exit(EXIT_INTERRUPTED)
    failed = [j for j in session.jobs if j.status == FAILED]
    if failed:
        # A failed job is not a crash: the summary (printed) and one line per failure, then exit 1,
        # instead of Hydra re-raising each failure with its HYDRA_FULL_ERROR trailer.
        for j in failed:
            print(f"clawgym: sweep job #{j.num} ({j.label}) failed ({why_failed(j)})"
                  + (f"; submission {j.submission_id}" if j.submission_id else "")
                  + (f"; log: {j.log_file}" if j.log_file else ""), file=sys.stderr, flush=True)
        print(f"clawgym: {len(failed)} of {len(session.jobs)} sweep jobs failed", file=sys.stderr, flush=True)
        sys.exit(EXIT_FAILED)
    return returns
