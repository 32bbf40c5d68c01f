"""The task function behind ``train.py``: validate, plan, then dry-run or launch."""

from __future__ import annotations

import copy
import os
import re
import sys
from pathlib import Path
from typing import Any, Optional, Tuple

from omegaconf import DictConfig
from omegaconf.errors import OmegaConfBaseException

from hydra.experimental.callback import Callback

from clawgym.config.compose import to_plain
from clawgym.common.console import say
from clawgym.plan.build import LaunchPlan, build_plan_from_dict, format_plan
from clawgym.memory import this_node_gpu
from clawgym.pipeline.prepare import (PLAN_FILE, apply_layout, attach_memory, discard_own_output_dir, failed_check,
                             format_plan_brief, memory_banner, prepared_plan, record_created_output_dir, timestamp)
from clawgym.registry import RegistryError
from clawgym.common.secrets import env_secrets
from clawgym.validate import ConfigError, Violation

from clawgym.common.exit_codes import INTERRUPTED as EXIT_INTERRUPTED, REFUSED as EXIT_REFUSED
# True once ClawGymCallback validated this single run's config (the task function need not again).
_VALIDATED_RUN = False
# A dry run refused for its memory plan keeps its output dir: launch_plan.json says why.
_KEEP_OUTPUT_DIR = False
# A single dry run from a folder that is no ClawGym-RL checkout (paths.root, its default the cwd, holds no
# slime/) into Hydra's default output dir: it prints the plan and leaves nothing in that folder.
_NO_OUTPUT_DIR = False

# gpu_layout=auto: the choice the callback made for this single run (clawgym.search.auto.resolve_auto).
_AUTO_LAYOUT: Optional[dict] = None



def _effective(resolved: Any) -> Any:
    """The effective config of a resolved plain config, or None (one that does not resolve or that
    the registry cannot read: validation reports it)."""
    from clawgym.trainer.effective import effective_config

    if not isinstance(resolved, dict):
        return None
    try:
        return effective_config(resolved)
    except Exception:  # noqa: BLE001 - validation derives it again and reports what is wrong
        return None

def resolve_layout(resolved: Any, overrides: Any) -> Tuple[Any, Optional[dict]]:
    """``gpu_layout=auto``: the resolved config with the layout the search chose, and the choice
    (``plan.layout``); anything else unchanged with None. No layout at all refuses (exit 2)."""
    if not isinstance(resolved, dict) or not (resolved.get("gpu_layout") or {}).get("auto"):
        return resolved, None
    # The search (~15 ms of imports) is loaded only when a layout is to be searched.
    from clawgym.search.auto import NoLayout, resolve_auto

    try:
        return resolve_auto(resolved, [str(o) for o in overrides or []], gpu=this_node_gpu(resolved))
    except NoLayout as exc:
        refuse(f"clawgym: {exc}")
    except (KeyError, TypeError, ValueError) as exc:
        refuse(f"clawgym: gpu_layout=auto could not search this config ({type(exc).__name__}: {exc}); "
               f"fix the values named, or choose a gpu_layout option")
    raise AssertionError("unreachable")


def output_dir() -> Optional[Path]:
    """The Hydra output dir of the current job, when running under Hydra."""
    from hydra.core.hydra_config import HydraConfig

    if HydraConfig.initialized():
        return Path(HydraConfig.get().runtime.output_dir)
    return None


def write_plan(plan: LaunchPlan, directory: Path) -> Path:
    """Write launch_plan.json atomically (temp file + rename)."""
    directory.mkdir(parents=True, exist_ok=True)
    target = directory / PLAN_FILE
    tmp = directory / f".{PLAN_FILE}.tmp-{os.getpid()}"
    tmp.write_text(plan.to_json())
    os.replace(tmp, target)
    return target


def fail(err: ConfigError) -> None:
    """Report a config error without a traceback and exit non-zero."""
    say(err.report())
    discard_own_output_dir()
    sys.exit(EXIT_REFUSED)


def interrupted() -> None:
    """Interrupted before any job was submitted: what was begun for it is stopped (the head
    through its record), nothing is left running; exit 130."""
    say("\n[clawgym] interrupted; nothing was left running")
    discard_own_output_dir()
    sys.exit(EXIT_INTERRUPTED)


def refuse(text: str) -> None:
    """Refuse the command before anything started: the report (if it can be printed), exit 2."""
    say(text)
    sys.exit(EXIT_REFUSED)


# ---------------------------------------------------------------- before Hydra writes anything

def _prepare_output_dir(key: str, path: str) -> None:
    """Create the output dir Hydra is about to use, recording that this invocation did;
    a dir that cannot be created is a clear error (exit 2), not a traceback."""
    target = Path(path)
    existed = target.exists()
    from clawgym.pipeline.prepare import missing_parents

    parents = missing_parents(target)
    try:
        target.mkdir(parents=True, exist_ok=True)
        probe = target / f".clawgym-write-probe-{os.getpid()}"
        probe.write_text("")
        probe.unlink()
    except OSError as exc:
        print(f"clawgym: cannot use {key}={path}: {exc.strerror or exc}\n"
              f"  rule: Hydra writes the run's .hydra/ config and log into {key} (and a dry run its "
              f"{PLAN_FILE})\n"
              f"  fix:  set {key} to a writable folder, e.g. {key}=/tmp/clawgym-outputs", file=sys.stderr)
        sys.exit(EXIT_REFUSED)
    if not existed:
        record_created_output_dir(target, parents)


def _overrides_with_secrets(overrides: Any) -> list:
    """Violations for command-line overrides that hold the value of a secret the launcher sees
    (Hydra stores the overrides in .hydra/overrides.yaml and hydra.yaml, whatever key they set)."""
    from omegaconf import ListConfig, OmegaConf

    secrets = env_secrets(os.environ)
    out = []
    # As written (Hydra stores them unresolved): an interpolation is checked once resolved, by validation.
    items = OmegaConf.to_container(overrides, resolve=False) if isinstance(overrides, ListConfig) else overrides
    for o in [str(x) for x in items or []]:
        names = [n for n, v in secrets.items() if v in o]
        if names:
            key = o.split("=", 1)[0].lstrip("+~")
            out.append(Violation([key], {key: "<redacted>"},
                                 f"the override of {key} holds the value of ${', $'.join(names)}; Hydra writes "
                                 f"every override into .hydra/overrides.yaml",
                                 f"remove it; clawgym reads {', '.join(names)} from the environment at launch",
                                 "no-secret-values-in-config"))
    return out


def _task_config(config: DictConfig) -> DictConfig:
    """The task config as the task function will get it (Hydra's node removed), with
    HydraConfig set so ``${hydra:...}`` interpolations resolve as they will in the job."""
    import copy

    from hydra.core.hydra_config import HydraConfig
    from omegaconf import open_dict, read_write

    HydraConfig.instance().set_config(config)
    task = copy.deepcopy(config)
    with read_write(task), open_dict(task):
        del task["hydra"]
    return task


#: Resolvers whose value follows from their arguments alone (clawgym's and OmegaConf's own):
#: a config that interpolates no others resolves in the task function as it did in the callback.
_PURE_RESOLVERS = frozenset({"cg.pick", "cg.lower", "cg.cap", "cg.above", "oc.select", "oc.decode", "oc.create", "oc.deprecated",
                             "oc.dict.keys", "oc.dict.values"})
_RESOLVER_USE = re.compile(r"\$\{\s*([^\s:}]+)\s*:")


def _resolve_task(config: DictConfig) -> Tuple[Optional[dict], Optional[dict], bool]:
    """(resolved, raw, reusable) of the task config, as :func:`_task_config`'s copy resolves, without
    copying the tree: resolved is None when it does not resolve.

    Hydra's node is taken out of the root only while it resolves (an interpolation of
    ``hydra.*`` fails as it will in the task config) and put back in its place. ``reusable``:
    every resolver the config interpolates gives the task function the same value
    (:func:`_callback_resolved`); ``${hydra:...}``, ``${now:...}``, ``${oc.env:...}`` under
    ``hydra.job.env_set`` or ``${cg.cwd:}`` under ``hydra.job.chdir`` need not.
    """
    from omegaconf import OmegaConf

    content = config.__dict__.get("_content")
    if not isinstance(content, dict) or "hydra" not in content:
        task = _task_config(config)
        try:
            return to_plain(task), None, False
        except OmegaConfBaseException:
            return None, None, False
    job = config.hydra.job
    pure = _PURE_RESOLVERS | ({"cg.cwd"} if job.get("chdir") is False else set()) | (
        {"oc.env"} if not job.get("env_set") else set())
    saved = dict(content)
    used: set = set()
    try:
        del content["hydra"]
        raw = OmegaConf.to_container(config, resolve=False)
        assert isinstance(raw, dict)
        _resolvers_used(raw, used)
        if "hydra" in used:
            from hydra.core.hydra_config import HydraConfig

            content.clear()
            content.update(saved)
            HydraConfig.instance().set_config(config)
            del content["hydra"]
        try:
            resolved: Optional[dict] = OmegaConf.to_container(config, resolve=True,  # type: ignore[assignment]
                                                              throw_on_missing=False)
        except OmegaConfBaseException:
            resolved = None
    finally:
        content.clear()
        content.update(saved)
    return resolved, raw, used <= pure


def _resolvers_used(data: Any, out: set) -> None:
    """Names of the resolvers the unresolved values of ``data`` call, into ``out``."""
    if isinstance(data, dict):
        for v in data.values():
            _resolvers_used(v, out)
    elif isinstance(data, list):
        for v in data:
            _resolvers_used(v, out)
    elif isinstance(data, str) and "${" in data:
        out.update(_RESOLVER_USE.findall(data))


# What the callback resolved for this single run's task config: (its unresolved content, the
# resolved copy), when the task function may reuse it (see _callback_resolved).
_CALLBACK_RESOLVED: Optional[Tuple[dict, dict]] = None


def _callback_resolved(cfg: DictConfig) -> Optional[dict]:
    """The callback's resolved copy of ``cfg``, when ``cfg`` holds what the callback resolved (its
    unresolved content is equal) and resolves to the same (see :func:`_resolve_task`); else None.
    Resolving the whole tree costs more than validating it: a single run does it once."""
    global _CALLBACK_RESOLVED
    found, _CALLBACK_RESOLVED = _CALLBACK_RESOLVED, None
    if found is None:
        return None
    from omegaconf import OmegaConf

    raw, resolved = found
    return resolved if OmegaConf.to_container(cfg, resolve=False) == raw else None


class ClawGymCallback(Callback):
    """Checks that run before Hydra creates the output dir or writes ``.hydra/*.yaml``.

    ``on_run_start`` runs before Hydra's ``run_job`` (which makes the output dir, dumps
    ``.hydra/{config,hydra,overrides}.yaml`` and opens the job log): a config that fails
    validation, or holds a secret value anywhere, is refused there, so nothing is
    written. ``on_multirun_start`` refuses overrides holding a secret value before the
    sweeper writes ``multirun.yaml``; each job is validated by the sweep before any job
    dir exists, and a refused sweep removes the sweep dir it created
    (:func:`discard_own_output_dir`).
    """

    # Hydra turns an exception of a callback into a warning and goes on to write .hydra/: every
    # failure here (a rule that raises, a closed stderr) must end the command, with nothing written.

    def on_run_start(self, config: DictConfig, **kwargs: Any) -> None:
        try:
            self._run_start(config)
        except KeyboardInterrupt:
            # Ctrl-C, or SIGTERM/SIGHUP once a head was begun (clawgym.backends.head.signals.interrupt_on_signals): that
            # head is stopped already (_run_start drops it).
            interrupted()
        except Exception as exc:  # noqa: BLE001 - see above
            refuse(failed_check(exc))

    def on_run_end(self, config: DictConfig, **kwargs: Any) -> None:
        if _NO_OUTPUT_DIR:
            # What Hydra wrote for this dry run (.hydra/, the job log) goes again: see _writes_nothing_here.
            discard_own_output_dir()

    def on_multirun_start(self, config: DictConfig, **kwargs: Any) -> None:
        try:
            self._multirun_start(config)
        except Exception as exc:  # noqa: BLE001 - see above
            refuse(failed_check(exc))

    def _run_start(self, config: DictConfig) -> None:
        from clawgym.config.compose import is_clawgym_config

        if not is_clawgym_config(config):
            return
        from clawgym.validate import check

        found = _overrides_with_secrets(config.hydra.overrides.task) + _hydra_settings_with_secrets(config)
        if not found:
            # Before anything else: `ray start` takes seconds, the checks below a fraction of one.
            _begin_head_early(config)
        try:
            resolved, raw, reusable = _resolve_task(config)
            global _AUTO_LAYOUT
            resolved, _AUTO_LAYOUT = resolve_layout(resolved, config.hydra.overrides.task)
            # The task function gets its own copy: the rules get this one.
            kept = copy.deepcopy(resolved) if resolved is not None and raw is not None and reusable else None
            try:
                # A config that does not resolve goes to the rules unresolved: they report what does not.
                errors, warned = check(resolved if resolved is not None else _task_config(config), here=True)
                found += [v for v in errors if not (found and v.code == "no-secret-values-in-config")]
            except RegistryError as err:
                # A missing or broken flag registry is a broken install: say so without a traceback.
                refuse(f"clawgym: {err}")
            if found:
                refuse(ConfigError(found).report())
            _print_warnings(warned)
            global _NO_OUTPUT_DIR
            _NO_OUTPUT_DIR = _writes_nothing_here(config, warned)
            _prepare_output_dir("hydra.run.dir", str(config.hydra.run.dir))
        except BaseException:
            # Refused (or failed): the head begun for it is stopped before the report ends the command.
            from clawgym.pipeline.clusters import drop_early_head

            drop_early_head()
            raise
        global _VALIDATED_RUN, _CALLBACK_RESOLVED
        _VALIDATED_RUN = True
        _CALLBACK_RESOLVED = (raw, kept) if kept is not None and raw is not None else None

    def _multirun_start(self, config: DictConfig) -> None:
        from clawgym.config.compose import is_clawgym_config

        if not is_clawgym_config(config):
            return
        found = _overrides_with_secrets(config.hydra.overrides.task) + _hydra_settings_with_secrets(config)
        if found:
            refuse(ConfigError(found, context="sweep").report())
        _prepare_output_dir("hydra.sweep.dir", str(config.hydra.sweep.dir))


def _writes_nothing_here(config: DictConfig, warned: list) -> bool:
    """A dry run whose paths.root holds no slime/ (``checkout-exists`` names paths.root: run from a folder
    that is no ClawGym-RL checkout, /tmp say) and whose output dir is Hydra's default (under the cwd):
    it prints its plan but writes nothing there (no outputs/, no launch_plan.json), and says so."""
    if not config.get("dry_run") or not any(w.code == "checkout-exists" and "paths.root" in w.keys for w in warned):
        return False
    hydra_overrides = [str(o) for o in (config.hydra.overrides.get("hydra") or [])]
    if any(o.lstrip("+").startswith("hydra.run.dir=") for o in hydra_overrides):
        return False
    root = next((w.values.get("paths.root") for w in warned if w.code == "checkout-exists"), None) or os.getcwd()
    say(f"clawgym: nothing is written: paths.root={root} is no ClawGym-RL checkout, so this dry run leaves no "
        f"outputs/ and no {PLAN_FILE} in {os.getcwd()}\n"
        f"  fix:  run it with paths.root=<your checkout> (or from inside it, or export CLAWGYM_RL_ROOT); "
        f"hydra.run.dir=DIR keeps the plan in DIR")
    return True


def _begin_head_early(config: DictConfig) -> None:
    """A launch that starts a local head: begin it now, while the config is validated.

    ``ray start`` takes seconds and the checks take a fraction of one; the head's argv,
    environment and secrets follow from ``ray``, ``cluster``, ``sandbox`` and ``wandb`` alone,
    resolved here on their own. Not for a dry run or ``preflight_only`` (they start nothing),
    nor when any of those nodes does not resolve (validation says why). A refusal stops the head
    again (``_run_start``); the launch adopts it (:func:`clawgym.pipeline.clusters.begin_head_early`)."""
    from hydra.core.hydra_config import HydraConfig
    from omegaconf import OmegaConf

    try:
        if OmegaConf.select(config, "dry_run") or OmegaConf.select(config, "preflight_only"):
            return
        # ``config`` is Hydra's whole config (the task config's nodes plus ``hydra``) or a task
        # config: these four nodes resolve in it as in the task config, without copying the tree.
        if "hydra" in config:
            HydraConfig.instance().set_config(config)
        c = {key: OmegaConf.to_container(config[key], resolve=True) for key in ("ray", "cluster", "sandbox", "wandb")}
    except Exception:  # noqa: BLE001 - validation reports what does not resolve
        return
    from clawgym.pipeline.clusters import begin_head_early

    try:
        begin_head_early(c, os.environ)
    except Exception:  # noqa: BLE001 - an optimisation only: the launch begins the head itself
        return


def _print_warnings(warned: list) -> None:
    """Warnings never refuse: printed once, before the plan."""
    if warned:
        from clawgym.validate import format_warnings

        say(format_warnings(warned))


def _hydra_settings_with_secrets(config: DictConfig) -> list:
    """Hydra's own settings that name folders and logs (hydra.run.dir, hydra.sweep.dir/subdir,
    hydra.job.name) must not hold a secret, typed or as ``${oc.env:<secret variable>}``: Hydra
    writes them as paths and log names."""
    from omegaconf import OmegaConf

    secrets = env_secrets(os.environ)
    env_ref = re.compile(r"\$\{oc\.env:\s*(" + "|".join(map(re.escape, _secret_env_names(config))) + r")\s*[,}]")
    out = []
    for key in ("hydra.run.dir", "hydra.sweep.dir", "hydra.sweep.subdir", "hydra.job.name"):
        try:
            node = config
            for part in key.split("."):
                node = node._get_node(part) if hasattr(node, "_get_node") else None
            raw = str(node._value()) if node is not None else ""
        except Exception:  # noqa: BLE001 - a setting that is not there holds nothing
            raw = ""
        try:
            resolved = str(OmegaConf.select(config, key, throw_on_resolution_failure=False) or "")
        except Exception:  # noqa: BLE001 - an unresolvable setting is Hydra's to report
            resolved = ""
        if env_ref.search(raw) or any(v in raw or v in resolved for v in secrets.values()):
            out.append(Violation([key], {key: "<redacted>"},
                                 f"{key} would put a secret into a folder or log name Hydra writes",
                                 f"set {key} without the secret (e.g. {key}=/tmp/clawgym-outputs)",
                                 "no-secret-values-in-config"))
    return out


def _secret_env_names(config: DictConfig) -> list:
    from clawgym.plan.build import SGLANG_KEY_ENV, WANDB_KEY_TARGET
    from clawgym.common.secrets import KNOWN_SECRET_ENV, config_key_env

    return sorted({*KNOWN_SECRET_ENV, SGLANG_KEY_ENV, WANDB_KEY_TARGET, *config_key_env(config)})


def run(cfg: DictConfig) -> Any:
    """The task function: validate, plan, then dry-run, preflight or launch.

    A single run refused before anything started (exit 2, or a failed ``preflight_only``)
    removes the output dir this invocation created (:func:`discard_own_output_dir`).
    """
    try:
        return _run(cfg)
    except KeyboardInterrupt:
        # Between validation and the pipeline (which handles its own): a head begun for this run
        # is stopped at exit (clawgym.backends.local.drop, registered when it was begun).
        interrupted()
    except SystemExit as exc:
        if exc.code == EXIT_REFUSED or (exc.code not in (0, None) and cfg.get("preflight_only")):
            if _single_run() and (not _KEEP_OUTPUT_DIR or _NO_OUTPUT_DIR):
                discard_own_output_dir()
        raise


def _single_run() -> bool:
    from hydra.core.hydra_config import HydraConfig
    from hydra.types import RunMode

    return HydraConfig.initialized() and HydraConfig.get().mode == RunMode.RUN


def _run(cfg: DictConfig) -> Any:
    # A sweep job's plan was checked and built once, up front, by the launcher.
    plan = prepared_plan(cfg)
    # The resolved config, once: resolving the whole tree costs more than any use of it, and the
    # memory plan and the dry-run artefact read the same values (each gets its own copy).
    plain: Optional[dict] = None
    effective: Any = None  # a sweep job's memory plan was attached with the plan
    if plan is None:
        validated = _VALIDATED_RUN and _single_run()
        # A single run's config was resolved by the callback that validated it.
        resolved: Any = _callback_resolved(cfg) if validated else None
        if resolved is None:
            # Resolve once for validation and plan (a config that does not resolve is reported by validate).
            try:
                resolved = to_plain(cfg)
            except OmegaConfBaseException:
                resolved = cfg
        # gpu_layout=auto: the callback's choice, or (a config it did not resolve) the search again
        # (the same input answers from the search's cache).
        choice = _AUTO_LAYOUT if validated else None
        if isinstance(resolved, dict) and (resolved.get("gpu_layout") or {}).get("auto"):
            from hydra.core.hydra_config import HydraConfig

            overrides = HydraConfig.get().overrides.task if HydraConfig.initialized() else []
            resolved, choice = resolve_layout(resolved, overrides)
        # The config as the trainer will run it, derived once: validation, the plan and the memory
        # plan take it (each still reads the config as written where that matters).
        effective = _effective(resolved)
        if not validated:
            # (A single run was validated by the callback before Hydra wrote anything.)
            try:
                from clawgym.validate import check

                errors, warned = check(resolved, effective=effective)
            except RegistryError as err:
                # A missing or broken flag registry is a broken install: say so without a traceback.
                say(f"clawgym: {err}")
                discard_own_output_dir()
                sys.exit(EXIT_REFUSED)
            except Exception as exc:  # noqa: BLE001 - a check that raises refuses, cleanly
                say(failed_check(exc))
                discard_own_output_dir()
                sys.exit(EXIT_REFUSED)
            if errors:
                fail(ConfigError(errors))
            _print_warnings(warned)
        if isinstance(resolved, dict):
            plain = copy.deepcopy(resolved)
        plan = build_plan_from_dict(resolved, environ=os.environ, timestamp=timestamp(), effective=effective)
        plan.layout = choice
        apply_layout(cfg, choice)
    attach_memory(plan, copy.deepcopy(plain) if plain is not None else cfg, effective=effective)
    if cfg.dry_run:
        # The plan file first: a reader that stops early (``| head``) still gets it, and a closed
        # stdout ends the dry run quietly (say() silences it) instead of with a BrokenPipeError.
        out = None if _NO_OUTPUT_DIR else output_dir()
        written = write_plan(plan, out) if out is not None else None
        if plan.layout:
            from clawgym.search.auto import format_choice

            say(format_choice(plan.layout) + "\n", out=True)
        single = _single_run() or out is None
        # A sweep's job prints a short block (the sweep prints every job's verdict in one table at its end).
        if say(format_plan(plan) if single else format_plan_brief(plan), out=True) and written is not None:
            say(f"{chr(10) if single else ''}plan written to {written}", out=True)
        dry_run_artefact(plan, cfg, out, plain)
        banner = memory_banner(plan, cfg)
        if banner and single:
            # Refused as the launch would be (preflight check memory): exit 2, with the plan kept to read why
            # (a dry run's plan is what it was asked for; nothing was started).
            global _KEEP_OUTPUT_DIR
            _KEEP_OUTPUT_DIR = True
            say(banner)
            sys.exit(EXIT_REFUSED)
        return plan.to_dict()
    if cfg.preflight_only:
        from clawgym.preflight import preflight_only

        return preflight_only(cfg, plan)
    from clawgym.pipeline.single import launch_single  # heavy imports (ray) only for real launches

    # Every backend (local head, existing cluster, SLURM, KubeRay) goes through the one pipeline.
    return launch_single(cfg, plan)


def dry_run_artefact(plan: LaunchPlan, cfg: Any, out: Optional[Path], plain: Optional[dict] = None) -> None:
    """Print (and write next to launch_plan.json) what the backend would hand its cluster
    besides the plan (SLURM's batch script, the RayJob manifest): the backend renders it."""
    from clawgym.pipeline.clusters import ClusterError, dry_run_artefact as rendered, renders_dry_run_artefact

    if not renders_dry_run_artefact(cfg):
        return
    where = out if out is not None else Path.cwd()
    try:
        artefact = rendered(plan, cfg, plain if plain is not None else to_plain(cfg), where)
    except ClusterError as err:
        say(f"clawgym: {err}")
        sys.exit(EXIT_REFUSED)
    if artefact is None:
        return
    name, text = artefact
    say(f"\n{name}:\n{text}", out=True)
    if out is not None:
        from clawgym.common.fsutil import atomic_write_text

        atomic_write_text(out / name, text)
        say(f"{name} written to {out / name}", out=True)
