"""``clawgym import``: a launch script -> an experiment config that proves it is the same run.

1. :func:`clawgym.importer.capture.run_script` runs the script with stand-ins and reads
   back its ``ray job submit`` (entrypoint argv, runtime env), its ``ray start --head``
   (GPU count) and what it exported before starting the head.
2. The trainer flavour's registry parses the script's argv (:mod:`.parity`).
3. The closest ``model`` / ``gpu_layout`` options are picked by comparing the keys the
   script's flags set (through the owner table, :func:`clawgym.trainer.flagmap.owners`) with each
   option's values; ``trainer`` and ``sandbox`` follow from the flags and environment.
4. Starting from that composition, every dest that still differs is set through the key
   that owns its flag, else ``args.<dest>``; every variable through the key that owns it
   (found by probing the plan), else ``extra_env``. Repeated until nothing moves, then
   every override that parity does not need is dropped again.
5. The experiment is written to ``DIR/experiment/NAME.yaml`` and verified from the file:
   composed as ``+experiment=NAME``, validated, planned, parsed and compared again.
"""

from __future__ import annotations

import contextlib
import copy
import datetime as _dt
import functools
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, Iterator, List, Mapping, Optional, Sequence, Tuple

import yaml
from omegaconf import DictConfig, OmegaConf, open_dict
from omegaconf.errors import OmegaConfBaseException

from clawgym.importer import parity
from clawgym.importer.capture import (CLOCK_EPOCHS, DEFAULT_TIMEOUT, Capture, CaptureError, Submit, classify,
                                      clock_values, run_script)
from clawgym.importer.parity import MISSING_VALUE, Difference
from clawgym.common import secrets
from clawgym.common.secrets import redact

#: Interpreters a Ray entrypoint may run the trainer with.
INTERPRETERS = ("python", "python3")
#: Timestamp of the plans the importer builds (never launched; keeps plans comparable).
TIMESTAMP = "import"
#: Groups whose option the importer picks, in the order the experiment lists them.
PICKED_GROUPS = ("trainer", "model", "gpu_layout", "sandbox")
#: Top-level keys that are not settings of the run.
NOT_SETTINGS = ("dry_run", "preflight_only", "skip_checks", "hydra")

#: Variables clawgym gives every job that a script may lack; they change how a failure is
#: reported or how the head is tuned, not what is trained, and no key removes them.
ADDED_ENV = {
    "PYTHONFAULTHANDLER": "clawgym prints a traceback on a hard crash",
    "PYTHONUNBUFFERED": "clawgym streams the job's output unbuffered",
    "no_proxy": "clawgym reaches its head without a proxy",
    "MASTER_ADDR": "clawgym names the head's address to the job",
    "RAY_health_check_failure_threshold": "Ray head tuning (ray.health_check_failure_threshold)",
    "RAY_health_check_period_ms": "Ray head tuning (ray.health_check_period_ms)",
    "RAY_health_check_timeout_ms": "Ray head tuning (ray.health_check_timeout_ms)",
    "RAY_num_heartbeats_timeout": "Ray head tuning (ray.num_heartbeats_timeout)",
}
#: W&B settings clawgym gives a job with W&B on (run tags, notes, its config file): metadata of
#: the W&B run, not of the training.
ADDED_WANDB_ENV = ("WANDB_TAGS", "WANDB_NOTES", "WANDB_SWEEP_PARAM_PATH")
#: Wildcard bind addresses: clawgym binds loopback unless asked (sglang.api_host).
WILDCARDS = ("0.0.0.0", "::", "")


class ImportFailure(Exception):
    """Nothing could be imported (no script, no job submitted, bad arguments)."""


@dataclass
class ImportResult:
    """What an import found, wrote and verified."""

    script: Path
    flavour: str
    name: str
    path: Optional[Path]
    # Group option choices and the experiment body (nested), as written.
    choices: Dict[str, str]
    body: Dict[str, Any]
    # Differences left after verification (counted).
    differences: List[Difference] = field(default_factory=list)
    # Deliberate differences (shown, not counted).
    deliberate: List[Difference] = field(default_factory=list)
    # What the script does that an experiment cannot express (counted).
    inexpressible: List[str] = field(default_factory=list)
    # Cleanup and probes clawgym replaces (shown).
    ignored: List[str] = field(default_factory=list)
    # Validation problems of the written experiment (counted).
    violations: List[str] = field(default_factory=list)
    notes: List[str] = field(default_factory=list)
    # Setup steps of the script (installs, downloads, conversions): prerequisites, listed.
    setup: List[str] = field(default_factory=list)
    # Probes the stand-ins answered, with the answer.
    answered: List[str] = field(default_factory=list)
    # Servers the script starts itself (reproduced as services.*).
    services: List[str] = field(default_factory=list)
    # The experiment's text when it was not written (a failed import writes nothing).
    text: str = ""
    command: str = ""
    # Compared with an existing experiment (--check) instead of writing one.
    checked: bool = False

    @property
    def ok(self) -> bool:
        return not (self.differences or self.inexpressible or self.violations)


# ---------------------------------------------------------------- helpers


def default_name(script: Path) -> str:
    stem = re.sub(r"[^A-Za-z0-9_]+", "_", script.stem).strip("_").lower()
    return stem or "imported"


def _flatten(data: Any, prefix: str = "") -> Dict[str, Any]:
    out: Dict[str, Any] = {}
    if isinstance(data, dict):
        for k, v in data.items():
            key = f"{prefix}.{k}" if prefix else str(k)
            if isinstance(v, dict) and v and key not in ("extra_env",) and not key.startswith("args"):
                out.update(_flatten(v, key))
            else:
                out[key] = v
    return out


def _get(tree: Mapping[str, Any], key: str) -> Any:
    node: Any = tree
    for part in key.split("."):
        if not isinstance(node, Mapping) or part not in node:
            return MISSING_VALUE
        node = node[part]
    return node


def _group_exists(group: str) -> bool:
    from clawgym.config.compose import config_dir

    return (config_dir() / group).is_dir()


def _group_options(group: str) -> List[str]:
    from clawgym.config.compose import group_options

    return group_options(group) if _group_exists(group) else []


@functools.lru_cache(maxsize=None)
def _schema_defaults(group: str) -> Dict[str, Any]:
    """A group's schema defaults as a plain dict (interpolations unresolved)."""
    from clawgym.config.schema import GROUPS

    schema = GROUPS.get(group)
    if schema is None:
        return {}
    return OmegaConf.to_container(OmegaConf.structured(schema), resolve=False)  # type: ignore[return-value]


def _option_values(group: str, option: str) -> Dict[str, Any]:
    """The resolved values of one group option over its schema's defaults (no Hydra compose)."""
    from clawgym.config.compose import config_dir

    with open(config_dir() / group / f"{option}.yaml", encoding="utf-8") as fh:
        container = yaml.safe_load(fh) or {}
    if isinstance(container, dict) and group in container and isinstance(container[group], dict):
        container = container[group]  # a `# @package _global_` option
    merged = {**_schema_defaults(group), **{k: v for k, v in container.items() if k != "defaults"}}
    # Sibling interpolations (``actor_gpus: ${.num_gpus}``) are all that options use for scoring;
    # anything else stays unresolved and simply matches nothing.
    for k, v in list(merged.items()):
        m = re.fullmatch(r"\$\{\.([A-Za-z_][A-Za-z0-9_]*)\}", v) if isinstance(v, str) else None
        if m and m.group(1) in merged:
            merged[k] = merged[m.group(1)]
    return merged


def _pick_option(group: str, wanted: Mapping[str, Any], hint: str = "") -> Tuple[Optional[str], int]:
    """The option of ``group`` whose values agree with most ``wanted`` keys (``group.x``).

    Ties go to the option whose name is closest to ``hint`` (e.g. the model file the
    script sourced), then to the first by name."""
    import difflib

    keys = {k.split(".", 1)[1]: v for k, v in wanted.items() if k.startswith(group + ".")}
    best: Tuple[int, float, str] = (-1, -1.0, "")
    for option in _group_options(group):
        values = _option_values(group, option)
        if values.get("auto") is True:
            continue  # gpu_layout=auto searches a layout at launch: a script's own layout is what it ran
        score = sum(1 for k, v in keys.items() if k in values and parity.same(_cfg_value(values[k]), v))
        similarity = difflib.SequenceMatcher(None, option, hint).ratio() if hint else 0.0
        if (score, similarity) > best[:2]:
            best = (score, similarity, option)
    return (best[2] or None), best[0]


def _cfg_value(value: Any) -> Any:
    return value


def _norm_model_hint(path: str) -> str:
    return re.sub(r"[^a-z0-9]+", "_", Path(path).stem.lower()).strip("_")


# ---------------------------------------------------------------- flag and env owners


class Owners:
    """Which clawgym key owns each trainer flag (the owner table) and each job variable."""

    def __init__(self, flavour: str, reg: Any):
        from clawgym.trainer.flagmap import owners

        self.reg = reg
        self.by_option = owners(flavour)

    def for_dest(self, dest: str) -> List[Tuple[Any, Any]]:
        """(registry action, Owner) pairs of every option string that sets ``dest``."""
        out = []
        for action in self.reg.all_by_dest(dest):
            for opt in action.option_strings:
                owner = self.by_option.get(opt)
                if owner is not None:
                    out.append((action, owner))
        return out

    def key_value(self, dest: str, value: Any) -> Tuple[Optional[str], Any, Optional[str]]:
        """(key, value for the key, None) to make the plan produce ``dest=value``;
        (key, None, reason) when the owning key cannot be set directly (derived);
        (None, None, None) when no key owns the flag."""
        pairs = self.for_dest(dest)
        if not pairs:
            return None, None, None
        for action, owner in pairs:
            if owner.kind == "value":
                return owner.key, value, None
        for action, owner in pairs:
            if owner.kind in ("switch", "inverse_switch"):
                on = _switch_on(action)
                present = value == on if on is not None else bool(value)
                return owner.key, (present if owner.kind == "switch" else not present), None
        for action, owner in pairs:
            if owner.kind == "file":
                return owner.key, value, None
        action, owner = pairs[0]
        return owner.key, None, f"derived from {owner.key}"


def _switch_on(action: Any) -> Any:
    """The value a switch action stores when its flag is present."""
    if action.action == "store_true":
        return True
    if action.action == "store_false":
        return False
    if action.action == "store_const":
        return action.const
    return None


def probe_env_owners(plain: Mapping[str, Any]) -> Dict[str, List[Tuple[str, Any]]]:
    """Variable -> [(key, how)] for variables of the plan that one key sets directly.

    Found by changing each leaf of the resolved config alone and watching the plan's
    job environment: a variable that then holds the new value verbatim is that key's
    (``how`` None); a variable that follows a boolean is the key's with the two values
    it takes (``how`` = {True: "1", False: "0"}).
    """
    from clawgym.plan.build import build_plan_from_dict

    def env_of(c: Mapping[str, Any]) -> Dict[str, str]:
        plan = build_plan_from_dict(c, environ={}, timestamp=TIMESTAMP)
        return {**(plan.ray_start_env if plan.ray_start is not None else {}), **plan.runtime_env["env_vars"]}

    base = env_of(plain)
    trial = copy.deepcopy(dict(plain))
    found: Dict[str, List[Tuple[str, Any]]] = {}
    for key, value in _flatten({k: v for k, v in plain.items()
                                if k not in NOT_SETTINGS + ("args", "extra_env", "extra_args")}).items():
        if isinstance(value, bool):
            probe: Any = not value
        elif isinstance(value, int):
            probe = value + 7919
        elif isinstance(value, float):
            probe = value + 0.5
        elif isinstance(value, str) or value is None:
            probe = "clawgym-import-probe"
        else:
            continue
        node = trial
        parts = key.split(".")
        for part in parts[:-1]:
            node = node[part]
        node[parts[-1]] = probe
        try:
            env = env_of(trial)
        except Exception:  # noqa: BLE001 - a probe the plan cannot take owns nothing
            continue
        finally:
            node[parts[-1]] = value
        for var, new in env.items():
            old = base.get(var)
            if new == old:
                continue
            if isinstance(value, bool) and old is not None:
                found.setdefault(var, []).append((key, {value: old, probe: new}))
            elif new == str(probe):
                found.setdefault(var, []).append((key, None))
    return found


# ---------------------------------------------------------------- the comparison


@dataclass
class Launch:
    """One side of the comparison: trainer script, parsed flags, job env, working dir, head GPUs."""

    trainer_script: str
    parsed: parity.Parsed
    env: Dict[str, str]
    working_dir: str
    head_gpus: Optional[str]


def script_launch(capture: Capture, submit: Submit, parser: Any, reg: Any,
                  notes: List[str]) -> Launch:
    _, _, trainer_script, trainer_argv = submit.trainer_entry  # type: ignore[misc]
    argv, removed = parity.strip_secrets(trainer_argv)
    for flag in removed:
        notes.append(f"{flag}: secrets are read from the environment at launch, never written "
                     "(W&B: $WANDB_KEY or $WANDB_API_KEY)")
    env = {k: v for k, v in capture.job_env(submit).items() if k not in parity.SHELL_ENV}
    for var in parity.SECRET_ENV:
        if var in env:
            env.pop(var)
            notes.append(f"{var}: a secret; the job gets it from the launcher's environment at launch")
    head = capture.head_options()
    gpus = head.get("--num-gpus")
    return Launch(trainer_script, parity.parse_argv(parser, reg, argv), env, submit.working_dir,
                  str(gpus) if gpus is not None and gpus is not True else None)


def plan_launch(plan: Any, parser: Any, reg: Any) -> Launch:
    env = {**(plan.ray_start_env if plan.ray_start is not None else {}), **plan.runtime_env["env_vars"]}
    gpus = None
    if plan.ray_start is not None and "--num-gpus" in plan.ray_start:
        gpus = plan.ray_start[plan.ray_start.index("--num-gpus") + 1]
    return Launch(plan.entrypoint[1], parity.parse_argv(parser, reg, plan.entrypoint[2:]), env,
                  plan.working_dir, gpus)


def compare(script: Launch, ours: Launch, reg: Any, secret_targets: Sequence[str] = ()
            ) -> Tuple[List[Difference], List[Difference]]:
    """(differences, deliberate differences) between the two launches."""
    diffs: List[Difference] = []
    deliberate: List[Difference] = []
    if script.trainer_script != ours.trainer_script:
        diffs.append(Difference("trainer script", "entrypoint", script.trainer_script, ours.trainer_script,
                                "gpu_layout.trainer_script"))
    if ours.parsed.error:
        diffs.append(Difference("parse", "experiment argv", "", ours.parsed.error))
    events = ours.parsed.values.get("use_tensorboard") is True and bool(ours.env.get("TENSORBOARD_DIR"))
    for d in parity.compare_values(script.parsed.values, ours.parsed.values, reg, script.parsed.written):
        if events and d.name.endswith("(use_tensorboard)") and d.script in (False, None, MISSING_VALUE):
            # Kept on (metrics.tensorboard): without events clawgym runs / clawgym report show no curves.
            d.note = ("clawgym keeps TensorBoard events in the run's save dir so clawgym runs / report show its "
                      "curves (metrics.tensorboard=false turns them off)")
            deliberate.append(d)
        else:
            diffs.append(d)
    for d in parity.compare_env(script.env, ours.env):
        if d.name.lower() == "no_proxy" and isinstance(d.script, str) and isinstance(d.experiment, str) and \
                set(d.script.split(",")) == set(d.experiment.split(",")):
            continue  # the same hosts (clawgym names each once: 127.0.0.1,127.0.0.1 is 127.0.0.1)
        if d.script is MISSING_VALUE and d.name in ADDED_ENV:
            d.note = ADDED_ENV[d.name]
            deliberate.append(d)
        elif d.script is MISSING_VALUE and d.name in ADDED_WANDB_ENV:
            d.note = "clawgym's W&B run metadata"
            deliberate.append(d)
        elif d.name == "TENSORBOARD_DIR" and d.script is MISSING_VALUE and events:
            # Both write events (--use-tensorboard); clawgym names the folder: the run's save dir.
            d.note = "clawgym keeps the TensorBoard events in the run's save dir (metrics.tensorboard)"
            deliberate.append(d)
        elif d.name == "HOST" and d.script in WILDCARDS and d.experiment in ("127.0.0.1", "localhost", "::1"):
            d.note = "clawgym binds loopback unless asked: sglang.api_host=0.0.0.0"
            deliberate.append(d)
        elif d.name in secret_targets and d.script is MISSING_VALUE:
            continue
        elif secrets.is_secret_name(d.name) and d.script is not MISSING_VALUE:
            # A secret the script sets for the job: never written into the experiment (extra_env is stored
            # in plans, snapshots and job metadata; validation refuses it there). The launch reads it from
            # the environment, which the head clawgym starts (and the job) inherit.
            d.script, d.experiment = secrets.MASK, (secrets.MASK if d.experiment is not MISSING_VALUE
                                                    else d.experiment)
            d.note = f"a secret, never stored: export {d.name} at launch"
            deliberate.append(d)
        else:
            diffs.append(d)
    if parity.norm_path(script.working_dir) != parity.norm_path(ours.working_dir):
        diffs.append(Difference("working dir", "job", script.working_dir, ours.working_dir, "paths.slime"))
    if script.head_gpus is not None and script.head_gpus != ours.head_gpus:
        diffs.append(Difference("GPUs", "ray start --num-gpus", script.head_gpus, ours.head_gpus, "ray.num_gpus"))
    return diffs, deliberate


# ---------------------------------------------------------------- the importer


class Importer:
    """Holds one import's state; :func:`import_script` drives it."""

    def __init__(self, capture: Capture, submit: Submit, flavour: str, result: ImportResult):
        from clawgym.registry import load_registry

        self.capture = capture
        self.submit = submit
        self.flavour = flavour
        self.result = result
        self.reg = load_registry(flavour)
        self.parser = parity.build_parser(self.reg)
        self.owners = Owners(flavour, self.reg)
        self.script = script_launch(capture, submit, self.parser, self.reg, result.notes)
        for flag in self.script.parsed.unknown:
            close = self.reg.closest(flag)
            result.inexpressible.append(
                f"{flag}: not a flag of trainer={flavour}" + (f" (closest: {', '.join(close)})" if close else ""))
        if self.script.parsed.error:
            result.inexpressible.append(f"the script's trainer argv does not parse under trainer={flavour}: "
                                        f"{self.script.parsed.error}")
        # Keys we set (dotted) -> value; args.<dest> and extra_env.<VAR> included.
        self.overrides: Dict[str, Any] = {}
        # Keys the schema refused, with why.
        self.refused: Dict[str, str] = {}
        # The composed options the overrides apply to (set by solve).
        self.base: Any = None

    # -- choosing options

    def wanted_keys(self) -> Dict[str, Any]:
        """Key values the script's flags imply (owned value and switch flags)."""
        out: Dict[str, Any] = {}
        for dest, value in self.script.parsed.values.items():
            key, v, why = self.owners.key_value(dest, value)
            if key is not None and why is None:
                out[key] = v
        return out

    def choose_options(self) -> Dict[str, str]:
        wanted = self.wanted_keys()
        choices: Dict[str, str] = {}
        if self.flavour in _group_options("trainer"):
            choices["trainer"] = self.flavour
        hint = _norm_model_hint(self.capture.model_files[-1]) if self.capture.model_files else ""
        model, score = _pick_option("model", wanted, hint)
        if model:
            choices["model"] = model
        layout, _ = _pick_option("gpu_layout", wanted, "")
        if layout:
            choices["gpu_layout"] = layout
        sandboxes = _group_options("sandbox")
        agent = any(k.startswith("OPENCLAW_") for k in self.script.env)
        if not agent and "none" in sandboxes:
            choices["sandbox"] = "none"
        elif self.script.env.get("OPENCLAW_ROOTFS") and "chroot" in sandboxes:
            choices["sandbox"] = "chroot"
        elif "docker" in sandboxes:
            choices["sandbox"] = "docker"
        if not agent and "none" not in sandboxes:
            self.result.notes.append("the script runs no agent sandbox, and this clawgym has no sandbox=none "
                                     "option: the experiment keeps sandbox=docker")
        return choices

    # -- composing and planning

    def base_config(self, choices: Mapping[str, str]) -> DictConfig:
        from clawgym.config.compose import compose

        return compose([f"{g}={o}" for g, o in choices.items()])

    def apply(self, base: DictConfig, overrides: Mapping[str, Any]) -> Tuple[DictConfig, Dict[str, str]]:
        """A copy of ``base`` with the overrides set; keys the schema refuses are returned apart."""
        cfg = copy.deepcopy(base)
        refused: Dict[str, str] = {}
        for key, value in overrides.items():
            try:
                if key.startswith(("extra_env.", "args.")):
                    group, name = key.split(".", 1)
                    with open_dict(cfg[group]):
                        cfg[group][name] = value
                elif isinstance(value, list) and value and isinstance(value[0], dict):
                    # A list of typed records (sglang.models): merged so each dict becomes its dataclass.
                    OmegaConf.update(cfg, key, value, merge=True)
                else:
                    OmegaConf.update(cfg, key, value, merge=False)
            except (OmegaConfBaseException, ValueError, TypeError) as exc:
                refused[key] = str(exc).splitlines()[0]
        return cfg, refused

    def plan_of(self, cfg: DictConfig) -> Any:
        from clawgym.config.compose import to_plain
        from clawgym.plan.build import build_plan_from_dict

        return build_plan_from_dict(to_plain(cfg), environ={}, timestamp=TIMESTAMP)

    def differences(self, cfg: DictConfig) -> Tuple[List[Difference], List[Difference], Any]:
        plan = self.plan_of(cfg)
        ours = plan_launch(plan, self.parser, self.reg)
        script = self.by_content(self.script, None)
        ours = self.by_content(ours, plan.files)
        diffs, deliberate = compare(script, ours, self.reg, list(plan.secret_env))
        diffs += self.service_differences(cfg, plan)
        return diffs, deliberate, plan

    def by_content(self, launch: Launch, files: Optional[Mapping[str, str]]) -> Launch:
        """``launch`` with each generated-file flag's path replaced by the file's content
        (the script's: as the recorder read it inside the jail; ours: the plan's file)."""
        from clawgym.trainer.generated import normalised

        values = dict(launch.parsed.values)
        changed = False
        for dest, value in launch.parsed.values.items():
            if value is None or _owner_kind(self.owners, dest) != "file":
                continue
            key = self.owners.for_dest(dest)[0][1].key
            if files is not None:
                text = files.get(str(value))
            else:
                # Only what the recorder read inside the jail: a path the jail does not show compares as
                # its path (and file_content refuses it), never read by this process.
                text = self.capture.generated.get(str(value))
            if text is not None:
                try:
                    content = normalised(key, text)
                except Exception:  # noqa: BLE001 - unreadable YAML compares as its path
                    continue
                if isinstance(content, dict):
                    # Only a file of the flag's kind is compared by content: any other text (a token,
                    # a password file) compares as its path and is never shown in the parity table.
                    values[dest] = {"file content": content}
                    changed = True
        if not changed:
            return launch
        parsed = parity.Parsed(values, launch.parsed.unknown, launch.parsed.error, launch.parsed.written)
        return Launch(launch.trainer_script, parsed, launch.env, launch.working_dir, launch.head_gpus)

    def service_differences(self, cfg: DictConfig, plan: Any) -> List[Difference]:
        """The script's own servers (an OPD teacher) against the experiment's services."""
        ours = {svc["name"]: svc for svc in plan.services}
        out: List[Difference] = []
        theirs = self.script_services()
        for name in sorted(set(theirs) | set(ours)):
            a = theirs.get(name)
            b = ours.get(name)
            a_cmd = (a["argv"], a["env"]) if a else MISSING_VALUE
            b_cmd = (_service_argv(b["argv"]), b["env"]) if b else MISSING_VALUE
            if a_cmd is MISSING_VALUE or b_cmd is MISSING_VALUE or not _same_server(a_cmd, b_cmd):
                out.append(Difference("service", name, " ".join(a["argv"]) if a else MISSING_VALUE,
                                      " ".join(b["argv"]) if b else MISSING_VALUE, f"services.{name}"))
        return out

    def script_services(self) -> Dict[str, Dict[str, Any]]:
        """Servers the script started in the background (name -> argv, env)."""
        from clawgym.importer.capture import sglang_server

        out: Dict[str, Dict[str, Any]] = {}
        for c in self.capture.calls:
            if sglang_server(c):
                env = {k: v for k, v in c.env.items() if k == "CUDA_VISIBLE_DEVICES"}
                out["teacher"] = {"argv": _service_argv(c.argv), "env": env}
        return out

    # -- the fixed point

    def fix(self, diffs: Sequence[Difference], env_owners: Mapping[str, List[Tuple[str, Any]]],
            has_args: bool) -> Dict[str, Any]:
        """Overrides that would remove each difference (those a key or args/extra_env can carry)."""
        want: Dict[str, Any] = {}
        for d in diffs:
            if d.what == "flag":
                dest = d.name.rsplit("(", 1)[1].rstrip(")")
                value = self.script.parsed.values.get(dest, self.reg.by_dest(dest).default
                                                      if self.reg.by_dest(dest) else None)
                key, v, why = self.owners.key_value(dest, value)
                action = self.reg.by_dest(dest)
                at_default = action is not None and parity.same(value, action.default)
                if key is None:
                    if has_args:
                        # At the trainer's default: no flag at all (args.<dest> left out).
                        want[f"args.{dest}"] = None if at_default else _plain(value)
                elif why is None and _owner_kind(self.owners, dest) == "file":
                    want[key] = self.file_content(key, value)
                elif why is None:
                    # At the trainer's default, an optional key is left empty so nothing is emitted.
                    if at_default and v == value and _optional(self.base, key):
                        want[key] = None
                    elif _non_json(v):
                        self.refused[key] = (f"the script leaves {d.name.split(' ')[0]} at the trainer's default "
                                             f"{str(v)[len('<non-json: '):-1]}, which {key} cannot hold")
                    else:
                        want[key] = _plain(v)
            elif d.what == "env":
                if d.script is MISSING_VALUE or secrets.is_secret_name(d.name):
                    continue  # a secret is read from the environment at launch (compare: deliberate)
                owners = env_owners.get(d.name, [])
                if len(owners) == 1:
                    key, how = owners[0]
                    if how is None:
                        want[key] = _escape(_typed_like(d.script, d.experiment))
                        continue
                    inverse = {v: k for k, v in how.items()}
                    if d.script in inverse:
                        want[key] = inverse[d.script]
                        continue
                want[f"extra_env.{d.name}"] = _escape(d.script)
            elif d.what == "service":
                server = self.script_services().get(d.name)
                if server is None:
                    want[f"services.{d.name}.enabled"] = False
                    continue
                fields, rest = _server_fields(server["argv"])
                prefix = f"services.{d.name}"
                want[f"{prefix}.enabled"] = True
                for field_name, text in fields.items():
                    want[f"{prefix}.{field_name}"] = _typed_like(text, None) if field_name in (
                        "port", "tp", "mem_fraction_static") else text
                want[f"{prefix}.extra_args"] = _escape(rest)
                gpus = server["env"].get("CUDA_VISIBLE_DEVICES")
                want[f"{prefix}.gpus"] = gpus if gpus else None
            elif d.what == "trainer script":
                want["gpu_layout.trainer_script"] = d.script
            elif d.what == "working dir":
                want["paths.slime"] = d.script
            elif d.what == "GPUs":
                want["ray.num_gpus"] = int(d.script) if str(d.script).isdigit() else d.script
        return want

    def file_content(self, key: str, path: Any) -> Any:
        """A generated-file key's content from the file the script passes (``--sglang-config``), as
        the recorder read it inside the jail when the script submitted (a file it generated, or one of
        the checkout). A path the jail does not show (outside the checkout, the slime checkout and the
        script's own HOME and /tmp; ``~`` is the jail's HOME) is refused, never read by this process."""
        from clawgym.trainer.generated import models_from_text

        if path is None:
            return []
        text = self.capture.generated.get(str(path))
        if text is None:
            self.refused[key] = (f"the script passes {path}, which the import's jail does not show (it sees the "
                                 "script's checkout, the slime checkout, system folders and its own HOME and /tmp; "
                                 "~ is the jail's HOME); nothing outside it is read. Put the file in the checkout "
                                 "or have the script write it")
            return []
        try:
            return _escape(models_from_text(text))
        except Exception as exc:  # noqa: BLE001 - any YAML or shape error of the script's file
            # The exception's type only: YAML errors quote the text they could not read.
            self.refused[key] = f"the script's {path} is not a sglang config ({type(exc).__name__})"
            return []

    def solve(self, base: DictConfig) -> Dict[str, Any]:
        from clawgym.config.compose import to_plain

        self.base = base
        has_args = "args" in base
        env_owners = probe_env_owners(to_plain(base))
        overrides: Dict[str, Any] = dict(self.initial_overrides(base))
        for _ in range(8):
            cfg, refused = self.apply(base, overrides)
            for key in refused:
                self.refused[key] = refused[key]
                overrides.pop(key)
            if refused:
                continue
            diffs, _, _ = self.differences(cfg)
            want = {k: v for k, v in self.fix(diffs, env_owners, has_args).items()
                    if k not in self.refused and not (k in overrides and parity.same(overrides[k], v))}
            if not want:
                break
            overrides.update(want)
        overrides = self.prune(base, overrides)
        return self.name_run(base, overrides)

    def name_run(self, base: DictConfig, overrides: Dict[str, Any]) -> Dict[str, Any]:
        """Name the run after the experiment (``exp_name``: W&B tags, the run name) when that
        moves nothing the script sets (e.g. a save dir derived from the name)."""
        if "exp_name" not in base or self.result.name == base.exp_name:
            return overrides
        cfg, _ = self.apply(base, overrides)
        before, _, _ = self.differences(cfg)
        trial = {**overrides, "exp_name": self.result.name}
        cfg, refused = self.apply(base, trial)
        if refused:
            return overrides
        after, _, _ = self.differences(cfg)
        keys = lambda ds: {(d.what, d.name) for d in ds}  # noqa: E731
        return trial if keys(after) <= keys(before) else overrides

    def initial_overrides(self, base: DictConfig) -> Dict[str, Any]:
        """Where the script's files are: its repository is the ClawGym-RL checkout (fork) ."""
        out: Dict[str, Any] = {}
        if self.flavour == "clawgym" and "paths" in base:
            out["paths.root"] = str(self.capture.repo_root)
        return out

    def prune(self, base: DictConfig, overrides: Dict[str, Any]) -> Dict[str, Any]:
        """Drop every override whose key would resolve to the same value without it.

        Without an override a key falls back to what the composed options give it, which
        may be an interpolation of other keys (``perf.tensor_parallel`` follows
        ``gpu_layout.actor_gpus``): that expression is put back and resolved in the final
        config; when it yields the override's value, the override goes (and the key keeps
        following its source, as the options meant)."""
        cfg, _ = self.apply(base, overrides)
        kept = dict(overrides)
        base_args = base.get("args") or {}
        for key in list(overrides):
            if key.startswith("args.") and overrides[key] is None and key.split(".", 1)[1] not in base_args:
                kept.pop(key)  # an unset flag that no option sets either
                continue
            if key == "paths.root" or key.startswith(("args.", "extra_env.")):
                continue
            raw_value = _raw(base, key)
            if raw_value is MISSING_VALUE:
                continue
            try:
                OmegaConf.update(cfg, key, raw_value, merge=False)
                fallback = OmegaConf.select(cfg, key)
            except OmegaConfBaseException:
                fallback = MISSING_VALUE
            if fallback is not MISSING_VALUE and (parity.same(_plain(fallback), _plain(overrides[key]))
                                                  or fallback == overrides[key]):
                kept.pop(key)
            else:
                OmegaConf.update(cfg, key, overrides[key], merge=False)
        return kept


#: sglang.launch_server options the teacher service config owns, by every spelling SGLang takes.
SERVER_OPTIONS = {"--model-path": "model_path", "--model": "model_path", "--host": "host", "--port": "port",
                  "--tp": "tp", "--tp-size": "tp", "--tensor-parallel-size": "tp",
                  "--mem-fraction-static": "mem_fraction_static"}


def _service_argv(argv: Sequence[str]) -> List[str]:
    """A server command without the interpreter's path (python3 vs /usr/bin/python3)."""
    argv = list(argv)
    return ["python3", *argv[1:]] if argv and os.path.basename(argv[0]) in INTERPRETERS else argv


def _server_fields(argv: Sequence[str]) -> Tuple[Dict[str, str], List[str]]:
    """(owned options -> value, the other arguments) of a ``python3 -m sglang.launch_server`` argv."""
    owned: Dict[str, str] = {}
    rest: List[str] = []
    tokens = list(argv[3:])
    i = 0
    while i < len(tokens):
        tok = tokens[i]
        name, eq, val = tok.partition("=")
        if name in SERVER_OPTIONS:
            if not eq:
                val = tokens[i + 1] if i + 1 < len(tokens) else ""
                i += 1
            owned[SERVER_OPTIONS[name]] = val
        else:
            rest.append(tok)
        i += 1
    return owned, rest


def _same_server(a: Tuple[List[str], Dict[str, str]], b: Tuple[List[str], Dict[str, str]]) -> bool:
    (a_argv, a_env), (b_argv, b_env) = a, b
    fa, ra = _server_fields(a_argv)
    fb, rb = _server_fields(b_argv)
    fa.setdefault("host", "127.0.0.1")
    fb.setdefault("host", "127.0.0.1")
    return a_argv[:3] == b_argv[:3] and all(parity.same(_num_or_str(fa.get(k)), _num_or_str(fb.get(k)))
                                            for k in set(fa) | set(fb)) and ra == rb and a_env == b_env


def _num_or_str(v: Any) -> Any:
    try:
        return float(v)
    except (TypeError, ValueError):
        return v


def _owner_kind(owners: "Owners", dest: str) -> Optional[str]:
    pairs = owners.for_dest(dest)
    return pairs[0][1].kind if pairs else None


def _optional(cfg: DictConfig, key: str) -> bool:
    """The schema lets ``key`` be None."""
    node: Any = cfg
    for part in key.split("."):
        node = node._get_node(part) if hasattr(node, "_get_node") else None
        if node is None:
            return False
    return bool(node._is_optional())


def _raw(cfg: DictConfig, key: str) -> Any:
    """A key's value as composed, interpolations unresolved."""
    node: Any = cfg
    parts = key.split(".")
    for part in parts[:-1]:
        node = node._get_node(part) if hasattr(node, "_get_node") else None
        if node is None:
            return MISSING_VALUE
    leaf = node._get_node(parts[-1]) if hasattr(node, "_get_node") else None
    if leaf is None:
        return MISSING_VALUE
    value = leaf._value()
    if isinstance(value, (dict, list)) or hasattr(value, "_get_node"):
        return MISSING_VALUE
    return value


def _non_json(value: Any) -> bool:
    """A registry default that was not JSON (``"<non-json: repr>"``): not a value to write."""
    return isinstance(value, str) and value.startswith("<non-json:")


def _plain(value: Any) -> Any:
    if isinstance(value, tuple):
        return list(value)
    return _escape(value)


def _escape(value: Any) -> Any:
    """A literal value as OmegaConf keeps it: ``${VAR}`` (Ray's runtime-env syntax, a shell
    word the script quoted) is not an interpolation of ours, so it is escaped as ``\\${VAR}``."""
    if isinstance(value, str) and "${" in value:
        return value.replace("\\${", "${").replace("${", "\\${")
    if isinstance(value, list):
        return [_escape(v) for v in value]
    if isinstance(value, dict):
        return {k: _escape(v) for k, v in value.items()}
    return value


def _typed_like(text: str, current: Any) -> Any:
    """A variable's value as the type of the key it goes to (the plan renders keys with str())."""
    for conv in (int, float):
        try:
            return conv(text)
        except (TypeError, ValueError):
            pass
    return text


# ---------------------------------------------------------------- writing


def _order(key: str) -> Tuple[int, str]:
    """Experiment keys in the schema's group order, then args, then extra_env; by name within."""
    from clawgym.config.schema import GROUPS

    order = [*PICKED_GROUPS, *GROUPS, "args", "extra_env"]
    top = key.split(".", 1)[0]
    return (order.index(top) if top in order else len(order), key)


def _nest(overrides: Mapping[str, Any]) -> Dict[str, Any]:
    tree: Dict[str, Any] = {}
    for key in sorted(overrides, key=_order):
        value = overrides[key]
        if key.startswith("extra_env."):
            tree.setdefault("extra_env", {})[key.split(".", 1)[1]] = value
            continue
        if key.startswith("args."):
            tree.setdefault("args", {})[key.split(".", 1)[1]] = value
            continue
        node = tree
        parts = key.split(".")
        for part in parts[:-1]:
            node = node.setdefault(part, {})
        node[parts[-1]] = value
    return tree


def _scalar(value: Any) -> str:
    text = yaml.safe_dump(value, default_flow_style=True, width=10_000, allow_unicode=True).strip()
    if text.endswith("\n..."):
        text = text[: -len("\n...")]
    return text.replace("\n...", "").strip()


def render_experiment(choices: Mapping[str, str], body: Mapping[str, Any], *, script: Path,
                      flags: Mapping[str, str], header: Sequence[str]) -> str:
    """The experiment YAML: package line, why, the option choices, then every key with the
    script flag or variable it reproduces in a comment above it."""
    lines = ["# @package _global_",
             f"# Imported by `clawgym import {script.name}` from {script}.",
             "# Use: python train.py +experiment=<this file's name>. Regenerate rather than edit by hand",
             "# if the script changes; `clawgym import` proves parity again each time."]
    lines += [f"# {h}" for h in header]
    if choices:
        lines += ["defaults:", "  # The closest options; every difference from them is set below."]
        lines += [f"  - override /{g}: {o}" for g, o in choices.items()]

    def emit(node: Mapping[str, Any], indent: int, prefix: str) -> None:
        for k, v in node.items():
            key = f"{prefix}.{k}" if prefix else str(k)
            pad = "  " * indent
            if isinstance(v, dict) and v:
                if indent == 0:
                    lines.append("")
                emit_comment(key, pad)
                lines.append(f"{pad}{_scalar(str(k)) if not re.match(r'^[A-Za-z_][A-Za-z0-9_]*$', str(k)) else k}:")
                emit(v, indent + 1, key)
            else:
                emit_comment(key, pad)
                name = str(k) if re.match(r"^[A-Za-z_][A-Za-z0-9_]*$", str(k)) else _scalar(str(k))
                lines.append(f"{pad}{name}: {_scalar(v)}")

    def emit_comment(key: str, pad: str) -> None:
        if key in flags:
            lines.append(f"{pad}# {flags[key]}")

    emit(body, 0, "")
    return "\n".join(lines) + "\n"


def _write_atomic(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    tmp.write_text(text)
    os.replace(tmp, path)


def _searchpath_override(out_dir: Path) -> List[str]:
    from clawgym.config.compose import config_dir

    if out_dir.resolve() == config_dir().resolve():
        return []
    return [f"hydra.searchpath=[file://{out_dir.resolve()}]"]


# ---------------------------------------------------------------- entry point


def choose_flavour(capture: Capture, submit: Submit, requested: Optional[str]) -> str:
    """The requested flavour; else the one whose parser knows every flag of the script
    (fewest unknown flags; a tie goes to upstream slime unless a ClawGym-RL hook is used)."""
    from clawgym.registry import FLAVOURS, load_registry

    if requested:
        if requested not in FLAVOURS:
            raise ImportFailure(f"--trainer {requested!r}: not a trainer flavour; choose one of {', '.join(FLAVOURS)}")
        return requested
    argv, _ = parity.strip_secrets(submit.trainer_entry[3])  # type: ignore[index]
    scores = []
    for flavour in FLAVOURS:
        reg = load_registry(flavour)
        parsed = parity.parse_argv(parity.build_parser(reg), reg, argv)
        scores.append((len(parsed.unknown) + (1 if parsed.error else 0), flavour))
    scores.sort()
    if len(scores) > 1 and scores[0][0] == scores[1][0]:
        agent = any(k.startswith("OPENCLAW_") for k in capture.job_env(submit))
        return "clawgym" if agent else "slime"
    return scores[0][1]


def _compose_experiment(out_dir: Path, name: str, target: Path) -> DictConfig:
    """Compose ``+experiment=name`` as train.py will; a file that does not parse or compose
    (broken YAML, a misspelled key, a wrong type) is a clean error naming the file and why."""
    from clawgym.config.compose import compose

    try:
        return compose([*_searchpath_override(out_dir), f"+experiment={name}"])
    except Exception as exc:  # noqa: BLE001 - Hydra wraps YAML and OmegaConf errors in its own
        cause = exc
        while cause.__cause__ is not None and str(cause.__cause__):
            cause = cause.__cause__
        text = " ".join(str(cause).split()) or type(cause).__name__
        raise ImportFailure(f"{target}: does not compose as +experiment={name}: {text}; "
                            "fix the file, or re-import the script with --force") from None


def import_script(script: Path, *, name: Optional[str] = None, trainer: Optional[str] = None,
                  out_dir: Optional[Path] = None, slime_root: Optional[Path] = None,
                  env: Optional[Mapping[str, str]] = None, force: bool = False,
                  check: bool = False, timeout: float = DEFAULT_TIMEOUT, strict: bool = False,
                  gpus_per_node: int = 8, nvlink: bool = True) -> ImportResult:
    """Import ``script``; write ``out_dir/experiment/<name>.yaml``; verify it (see module doc).

    Only an import that reproduces the launch is written (nothing otherwise; an existing
    file replaced with ``force`` is put back). ``check``: write nothing; compare the script
    with the existing experiment ``name`` (e.g. after editing it by hand); with ``force`` as
    well, an experiment that no longer matches is re-imported and replaced. ``strict``: setup
    commands (installs, downloads, conversions) make the import fail instead of being listed
    as prerequisites. ``gpus_per_node``/``nvlink``: how the ``nvidia-smi`` stand-in answers.
    ``timeout``: seconds the script may run (its jail is killed after)."""
    from clawgym.config.compose import compose, config_dir
    from clawgym.validate import violations

    script = Path(script)
    name = name or default_name(script)
    if not re.match(r"^[A-Za-z0-9_][A-Za-z0-9_.-]*$", name):
        raise ImportFailure(f"--name {name!r}: use letters, digits, '_', '-' and '.' (it becomes a file name "
                            "and the +experiment= value)")
    if gpus_per_node < 1:
        raise ImportFailure(f"--gpus-per-node {gpus_per_node}: a node has at least one GPU")
    out_dir = Path(out_dir) if out_dir is not None else Path("conf")
    target = out_dir / "experiment" / f"{name}.yaml"
    if check and not target.is_file():
        raise ImportFailure(f"--check: {target} not found; import the script first (without --check)")
    if target.exists() and not force and not check:
        raise ImportFailure(f"{target} exists; choose another --name, pass --force to replace it, "
                            "or --check to compare the script with it")
    if not timeout or timeout <= 0:
        raise ImportFailure(f"--timeout {timeout}: give the seconds the script may run, more than 0")
    written_cfg = _compose_experiment(out_dir, name, target) if check else None
    try:
        capture = run_script(script, slime_root=slime_root, env=env, timeout=timeout, gpus_per_node=gpus_per_node,
                             nvlink=nvlink, epoch=CLOCK_EPOCHS[0])
        # Parity's second launch: the script run again, its clock read later. Values that follow the
        # clock are kept dynamic (${now:...}); anything else that moves is a difference of the second launch.
        again = run_script(script, slime_root=slime_root, env=env, timeout=timeout, gpus_per_node=gpus_per_node,
                           nvlink=nvlink, epoch=CLOCK_EPOCHS[1]) if capture.submits else None
    except CaptureError as exc:
        raise ImportFailure(redact(str(exc))) from None
    submits = capture.submits
    if not submits:
        tail = "\n".join(capture.output.strip().splitlines()[-15:])
        ended = (f"timed out after {capture.timed_out:g} s (--timeout)" if capture.timed_out is not None
                 else f"exit status {capture.returncode}")
        raise ImportFailure(redact(
            f"{script} submitted no Ray job ({ended}); nothing to import.\n"
            + "\n".join(f"  - {text}" for kind, text in classify(capture)
                        if kind in ("inexpressible", "answered", "setup"))
            + (f"\nlast lines of its output:\n{tail}" if tail else "")))
    submit = submits[-1]
    entry = submit.entrypoint
    if submit.trainer_entry is None:
        raise ImportFailure(f"the job's entrypoint `{' '.join(entry[:4])} ...` is not `python3 [options] <trainer>.py "
                            "FLAGS`; clawgym launches slime's train.py / train_async.py only")
    if check and not trainer:
        trainer = str(OmegaConf.select(written_cfg, "trainer.flavour", default=None) or "clawgym")
    flavour = choose_flavour(capture, submit, trainer)
    result = ImportResult(script=script.resolve(), flavour=flavour, name=name, path=None, choices={}, body={})
    _, py_opts, _, _ = submit.trainer_entry
    for opt in py_opts:
        if opt == "-u":
            result.notes.append("python3 -u: unbuffered output, as clawgym gives every job (PYTHONUNBUFFERED=1)")
        else:
            result.inexpressible.append(f"python3 {opt}: clawgym runs the trainer as `python3 <script>` "
                                        "(only -u, which it implies, is understood)")
    if capture.timed_out is not None:
        result.inexpressible.append(f"the script timed out after {capture.timed_out:g} s (--timeout) "
                                    "after submitting; it was killed with everything it started")
    elif capture.returncode != 0:
        result.inexpressible.append(f"the script exited with status {capture.returncode} after submitting")
    if len(submits) > 1:
        result.inexpressible.append(f"the script submits {len(submits)} jobs; an experiment is one job "
                                    "(the last was imported)")
    imp = Importer(capture, submit, flavour, result)
    second = _second_launch(again, flavour, result)
    clock = clock_values(capture, again) if again is not None else []
    save = imp.script.parsed.values.get("save")
    for kind, text in classify(capture, [os.path.join(save, "logs")] if save else []):
        if kind == "ignored":
            result.ignored.append(text)
        elif kind == "answered":
            result.answered.append(text)
        elif kind == "setup":
            (result.inexpressible if strict else result.setup).append(
                text + (" (--strict: setup steps are refused)" if strict else ""))
        elif kind == "service":
            result.services.append(text)
        else:
            result.inexpressible.append(text)
    for key, value in submit.options.items():
        if key in ("--address", "--runtime-env-json", "--working-dir", "--submission-id", "--no-wait"):
            continue
        result.inexpressible.append(f"ray job submit {key}: not something clawgym's launch sets")
    extra_runtime = sorted(k for k in submit.runtime_env if k not in ("env_vars", "working_dir"))
    for k in extra_runtime:
        result.inexpressible.append(f"runtime env field {k!r}: clawgym's runtime env carries env_vars only")
    if not capture.head_starts and submit.options.get("--address"):
        result.notes.append(f"the script submits to an existing cluster at {submit.options['--address']}")

    if check:
        result.path, result.checked = target, True
        _verify(imp, result, written_cfg, second)
        if result.ok or not force:
            result.command = _command(out_dir, name)
            return result
        # --check --force: the experiment no longer matches; import afresh and replace it.
        stale = len(result.differences) + len(result.violations)
        result = import_script(script, name=name, trainer=trainer, out_dir=out_dir, slime_root=slime_root, env=env,
                               force=True, strict=strict, gpus_per_node=gpus_per_node, nvlink=nvlink)
        result.notes.append(f"--check --force: {target} differed from the script ({stale} problems); re-imported")
        return result

    with _clock_at(capture.epoch):
        text = _solve(imp, result, capture, submit, clock)
    previous = target.read_text(encoding="utf-8") if target.exists() else None
    created_dir = not target.parent.exists()
    _write_atomic(target, text)
    result.path = target
    try:
        # Verify from the file, as train.py will compose it.
        _verify(imp, result, _compose_experiment(out_dir, name, target), second)
    finally:
        if not result.ok:
            # A failed import writes nothing: put back what was there.
            if previous is None:
                target.unlink(missing_ok=True)
                if created_dir:
                    try:
                        target.parent.rmdir()
                    except OSError:
                        pass
            else:
                _write_atomic(target, previous)
            result.path = None
            result.text = text
    result.command = _command(out_dir, name)
    return result


def _command(out_dir: Path, name: str) -> str:
    extra = " ".join(_searchpath_override(out_dir))
    return f"python train.py {extra + ' ' if extra else ''}+experiment={name}"


@contextlib.contextmanager
def _clock_at(epoch: int) -> Iterator[None]:
    """``${now:FORMAT}`` reads the instant ``epoch`` (local time, as the script's ``date`` read it) while
    the importer plans and compares; Hydra's own resolver is put back after."""
    import time

    from omegaconf.basecontainer import BaseContainer

    before = BaseContainer._resolvers.get("now")
    OmegaConf.register_new_resolver("now", lambda pattern: time.strftime(str(pattern), time.localtime(epoch)),
                                    replace=True)
    try:
        yield
    finally:
        if before is not None:
            BaseContainer._resolvers["now"] = before
        else:
            OmegaConf.clear_resolver("now")


def _second_launch(again: Optional[Capture], flavour: str, result: ImportResult) -> Optional["Importer"]:
    """The importer of the script's second run (parity's second launch), or None when it did not submit."""
    if again is None or not again.submits or again.submits[-1].trainer_entry is None:
        if again is not None:
            result.inexpressible.append("run a second time (its clock later), the script submitted no job "
                                        "it can be compared with")
        return None
    scratch = ImportResult(script=result.script, flavour=flavour, name=result.name, path=None, choices={}, body={})
    return Importer(again, again.submits[-1], flavour, scratch)


def _verify(imp: "Importer", result: ImportResult, cfg: DictConfig, second: Optional["Importer"] = None) -> None:
    """Parity, launched twice: the experiment against the script's first run (both clocks at its
    instant), then against its second run (both clocks later). A value the script makes anew at each
    run that the experiment froze differs in the second."""
    from clawgym.validate import violations

    result.violations = [v.format() for v in violations(cfg)]
    with _clock_at(imp.capture.epoch):
        diffs, deliberate, _ = imp.differences(cfg)
    if second is not None:
        with _clock_at(second.capture.epoch):
            later, _, _ = second.differences(cfg)
        seen = {(d.what, d.name) for d in diffs}
        for d in later:
            if (d.what, d.name) not in seen:
                d.note = ("second launch (the script run again, its clock later): the script makes this value "
                          "anew at each run, the experiment does not" + (f"; {d.note}" if d.note else ""))
                diffs.append(d)
        result.notes.append("parity launched twice: the experiment against two runs of the script, the clock "
                            "read at two instants")
    result.differences = diffs
    result.deliberate = deliberate


def _dynamic(overrides: Dict[str, Any], clock: Sequence[Tuple[str, str]], result: ImportResult) -> Dict[str, Any]:
    """Overrides with each value the script made from the clock put back as ``${now:FORMAT}``."""
    if not clock:
        return overrides

    def fix(value: Any) -> Any:
        if isinstance(value, str):
            for answer, expr in clock:
                value = value.replace(answer, expr)
            return value
        if isinstance(value, list):
            return [fix(v) for v in value]
        if isinstance(value, dict):
            return {k: fix(v) for k, v in value.items()}
        return value

    out = {}
    for key, value in overrides.items():
        out[key] = fix(value)
        if out[key] != value:
            result.notes.append(f"{key}: the script makes it from the clock at each run; kept dynamic as "
                                + ", ".join(e for a, e in clock if a in str(value)))
    return out


def _solve(imp: "Importer", result: ImportResult, capture: Capture, submit: Submit,
           clock: Sequence[Tuple[str, str]] = ()) -> str:
    """Choose the options, solve for the overrides; the experiment's text."""
    flavour = result.flavour
    choices = imp.choose_options()
    base = imp.base_config(choices)
    if not capture.head_starts and submit.options.get("--address"):
        imp_overrides = {"ray.address": submit.options["--address"]}
    else:
        imp_overrides = {}
    overrides = imp.solve(base) if not imp_overrides else _solve_with(imp, base, imp_overrides)
    overrides = _dynamic(overrides, clock, result)
    for key, why in imp.refused.items():
        result.inexpressible.append(f"{key}: the script needs a value this key cannot take ({why})"
                                    if not why.startswith("the script") else f"{key}: {why}")
    result.choices = choices
    body = _nest(overrides)
    result.body = body
    flags = _comments(imp, overrides)
    header = [f"Trainer flavour: {flavour}."]
    if result.setup:
        header += ["", "Prerequisites: the script prepares the machine with these steps before it launches;",
                   "run them (or their equivalent) once before the first launch. clawgym does not run them:"]
        header += [f"  - {t}" for t in result.setup]
    if result.answered:
        header += ["", f"Imported with the probes answered as a node of {capture.gpus_per_node} GPUs"
                       f"{' with NVLink' if capture.nvlink else ' without NVLink'}:"]
        header += [f"  - {t}" for t in result.answered]
    return render_experiment(choices, body, script=result.script, flags=flags, header=header)


def _solve_with(imp: Importer, base: DictConfig, fixed: Mapping[str, Any]) -> Dict[str, Any]:
    cfg, refused = imp.apply(base, fixed)
    imp.refused.update(refused)
    solved = imp.solve(cfg)
    return {**{k: v for k, v in fixed.items() if k not in refused}, **solved}


def _comments(imp: Importer, overrides: Mapping[str, Any]) -> Dict[str, str]:
    """A comment per written key: the script flag or variable it reproduces."""
    out: Dict[str, str] = {}
    by_key: Dict[str, str] = {}
    written = imp.script.parsed.written or {}
    for dest in imp.script.parsed.values:
        for action, owner in imp.owners.for_dest(dest):
            if owner.kind == "derived":
                continue
            by_key.setdefault(owner.key, written[dest] if dest in written else
                              f"{action.flag}: not in the script (the trainer's own value)")
    for key in overrides:
        if key.startswith("args."):
            dest = key.split(".", 1)[1]
            f = imp.reg.by_dest(dest)
            out[key] = written.get(dest) or (f"{f.flag}: not in the script (the trainer's own value)" if f else dest)
        elif key.startswith("extra_env."):
            out[key] = f"${key.split('.', 1)[1]} of the job"
        elif key in by_key:
            out[key] = by_key[key]
        elif key in KEY_SOURCES:
            out[key] = KEY_SOURCES[key]
        elif key.startswith("services.teacher."):
            out["services.teacher"] = ("the script's own `python3 -m sglang.launch_server` (run inside the job, "
                                       "before the trainer, as the teacher service)")
    return out


#: What in the script a key that no trainer flag owns reproduces (the comment above it).
KEY_SOURCES = {
    "exp_name": "the experiment's name (run name, W&B tags)",
    "ray.address": "ray job submit --address (a cluster that already runs)",
    "paths.root": "the script's checkout (its working dir and paths derive from it)",
    "paths.slime": "the job's working dir",
    "ray.num_gpus": "ray start --num-gpus",
    "gpu_layout.trainer_script": "the trainer script of the entrypoint",
}


def format_result(result: ImportResult) -> str:
    """The import report; every secret value seen (``--env``, the script's own) is masked."""
    return redact(_format_result(result))


def _format_result(result: ImportResult) -> str:
    out = [f"{'checked' if result.checked else 'imported'} {result.script}", f"  trainer flavour: {result.flavour}"]
    if not result.checked:
        out.append("  options: " + (", ".join(f"{g}={o}" for g, o in result.choices.items()) or "(defaults)"))
    if result.checked:
        out.append(f"  against: {result.path}")
    else:
        out += [f"  wrote:   {result.path}" if result.path else "  wrote:   nothing (the import failed)",
                f"  keys set: {len(_flatten(result.body))}"]
    if result.ignored:
        out += ["", "ignored (cleanup clawgym replaces with its own ownership of what it starts):"]
        out += [f"  - {t}" for t in result.ignored]
    if result.answered:
        out += ["", "answered by the stand-ins (as a slime node would answer):"]
        out += [f"  - {t}" for t in result.answered]
    if result.setup:
        out += ["", "prerequisites (setup steps the script runs before the launch; not run, listed in the "
                    "experiment's header; --strict refuses them):"]
        out += [f"  - {t}" for t in result.setup]
    if result.services:
        out += ["", "servers the script starts (reproduced as services.* inside the job):"]
        out += [f"  - {t}" for t in result.services]
    if result.notes:
        out += ["", "notes:"] + [f"  - {t}" for t in result.notes]
    if result.deliberate:
        out += ["", "deliberate differences (not counted):", parity.render_table(result.deliberate)]
    if result.inexpressible:
        out += ["", f"cannot be expressed ({len(result.inexpressible)}):"]
        out += [f"  - {t}" for t in result.inexpressible]
    if result.violations:
        out += ["", f"the experiment does not validate ({len(result.violations)}):"]
        out += [f"  {v}" for v in result.violations]
    if result.differences:
        out += ["", f"differences ({len(result.differences)}):", parity.render_table(result.differences)]
    out += [""]
    if result.ok:
        out.append(f"parity: the experiment launches the same run (0 differences). Run it with:\n  {result.command}")
    else:
        total = len(result.differences) + len(result.inexpressible) + len(result.violations)
        out.append(f"parity: NOT the same run ({total} problem{'s' if total != 1 else ''} above).")
    return "\n".join(out)
