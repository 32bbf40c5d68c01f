"""The importer's state: picks the group options and solves for the overrides that reproduce a launch."""

from __future__ import annotations

import copy
import dataclasses
import re
import os
from pathlib import Path
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

from omegaconf import DictConfig, OmegaConf, open_dict
from omegaconf.errors import OmegaConfBaseException

from clawgym.importer import parity
from clawgym.importer.capture import Capture, Submit
from clawgym.importer.parity import MISSING_VALUE, Difference
from clawgym.common import secrets
from clawgym.importer.compare import Launch, compare, plan_launch, script_launch
from clawgym.importer.options import TIMESTAMP, group_options, norm_model_hint, pick_option
from clawgym.importer.owners import Owners, probe_env_owners
from clawgym.importer.result import ImportResult


#: Interpreters a Ray entrypoint may run the trainer with.
INTERPRETERS = ("python", "python3")


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
        if self.flavour in group_options("trainer"):
            choices["trainer"] = self.flavour
        hint = norm_model_hint(self.capture.model_files[-1]) if self.capture.model_files else ""
        model, score = pick_option("model", wanted, hint)
        if model:
            choices["model"] = model
        layout, _ = pick_option("gpu_layout", wanted, "")
        if layout:
            choices["gpu_layout"] = layout
        sandboxes = group_options("sandbox")
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
        # Everything else as it was: starts_head too (a multi-node script's experiment on cluster=existing
        # starts no head; losing that counted the script's `ray start --num-gpus` as a difference).
        return dataclasses.replace(launch, parsed=parsed)

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
        overrides = relative_to_root(self.prune(base, overrides))
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
            out["paths.root"] = str(self.script_root())
        return out

    def script_root(self) -> Path:
        """The folder the script's paths derive from: of the script's folder and the folders above it up to
        its repository's top, the nearest whose ``slime`` is the job's working dir (the schema derives
        ``paths.slime`` as ``${paths.root}/slime``: ClawGym-Agents/RL, not the repository's top ClawGym-Agents);
        else the repository's top."""
        repo = Path(self.capture.repo_root)
        wd = os.path.normpath(self.submit.working_dir)
        script = Path(self.capture.script)
        for folder in [script.parent, *script.parent.parents]:
            if os.path.normpath(str(folder / "slime")) == wd:
                return folder
            if folder == repo:
                break
        return repo

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


def relative_to_root(overrides: Dict[str, Any]) -> Dict[str, Any]:
    """Every path under ``paths.root`` in the other overrides written as ``${paths.root}/...``, so an
    experiment moved to another root (``paths.root=/elsewhere``) takes all its paths along."""
    root = overrides.get("paths.root")
    if not isinstance(root, str) or not root.startswith("/") or root == "/":
        return overrides
    # The root as a whole path: not the start of a longer name (/a/RL2), nor inside another path (/x/a/RL).
    pattern = re.compile(r"(?<![\w./-])" + re.escape(root.rstrip("/")) + r"(?![\w.-])")

    def rewrite(value: Any) -> Any:
        if isinstance(value, str):
            return pattern.sub(lambda _: "${paths.root}", value)
        if isinstance(value, list):
            return [rewrite(v) for v in value]
        if isinstance(value, dict):
            return {k: rewrite(v) for k, v in value.items()}
        return value

    return {k: (v if k == "paths.root" else rewrite(v)) for k, v in overrides.items()}


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
