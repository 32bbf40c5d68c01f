#!/usr/bin/env python3
"""Generate a clawgym flag registry from a trainer's own argparse parsers.

The generator runs the trainer's real argument-parsing entry point
(``slime.utils.arguments.parse_args``) on a minimal command line, in a CPU-only
environment, and records every ``ArgumentParser`` the trainer builds and parses
along the way: Megatron-LM's ``parse_args(extra_args_provider=...)`` with slime's
provider, slime's ``add_sglang_arguments`` (SGLang ``ServerArgs.add_cli_args``
re-registered under ``--sglang-``), the sglang-router arguments, and the lenient
pre-parsers.  It stops just before Megatron's final parse (after that the trainer
reads checkpoints and queries CUDA, which building a parser never needs) and dumps
every action as JSON in the layout of REGISTRY_SPEC (see tools/README.md).

Nothing here hard-codes a flag: sources, versions and patches are inputs; the
flags are whatever the trainer's code registers.  Run it with the interpreter of a
virtualenv that holds the trainer's dependencies (tools/README.md says how), e.g.

    /tmp/regvenv-fork/bin/python tools/gen_flag_registry.py clawgym \\
        --slime /src/ClawGym-Agents/RL/slime --megatron /src/ClawGym-Agents/RL/Megatron-LM \\
        --sglang-patch /src/slime-v0.2.4/docker/patch/latest/sglang.patch \\
        --out clawgym/registry/data/clawgym.json
"""

from __future__ import annotations

import argparse
import datetime as _dt
import functools
import importlib.machinery
import importlib.metadata
import importlib.util
import inspect
import io
import json
import os
import shutil
import signal
import sys
import tempfile
import time
from contextlib import redirect_stderr, redirect_stdout
from dataclasses import dataclass, field

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from trainer_env import (  # noqa: E402  (shared with tools/trainer_judge.py)
    _sha256, add_source_options, prepare_sources)

# --------------------------------------------------------------------------------------
# Flavour presets: what each trainer flavour is made of.  Paths come from the command
# line; these record where the sources come from, which versions the trainer's image
# pins (checked against what is imported), and how the trainer's parsers are named.
# --------------------------------------------------------------------------------------

PRESETS = {
    "clawgym": {
        "description": (
            "ClawGym-Agents fork of slime (RL/slime at commit 0e8526d8) with its vendored "
            "RL/Megatron-LM, SGLang 0.5.9 with slime v0.2.4's docker/patch/latest/sglang.patch "
            "applied (the slimerl/slime:v0.2.4 image the fork's README names), and sglang-router "
            "0.3.2; Megatron's parse_args(extra_args_provider=slime's provider): one strict parser."
        ),
        "sources": {
            "slime": {"repo": "ClawGym/ClawGym-Agents", "path": "RL/slime",
                      "ref": "0e8526d8f5e0999896c74cee4d6b998fb8a0429e"},
            "megatron": {"repo": "ClawGym/ClawGym-Agents", "path": "RL/Megatron-LM",
                         "ref": "0e8526d8f5e0999896c74cee4d6b998fb8a0429e"},
            "sglang": {"package": "sglang", "version": "0.5.9",
                       "patches": [{"repo": "THUDM/slime", "ref": "v0.2.4",
                                    "path": "docker/patch/latest/sglang.patch"}]},
            "router": {"package": "sglang-router", "version": "0.3.2",
                       "note": "the v0.2.4 image installs a slime build of sglang-router 0.3.2; "
                               "PyPI's 0.3.2 is the same base version"},
        },
        # (calling function, n-th parse from that function) -> parser name
        "parser_names": {
            ("parse_args_train_backend", 1): "train-backend-preparse",
            # slime's provider builds this one-off parser each time it runs: once for the
            # pre-parse, once inside Megatron's parse_args.
            ("add_sglang_tp_size", 1): "sglang-tp-default",
            ("add_sglang_tp_size", 2): "sglang-tp-default",
            ("parse_args", 1): "megatron+slime",
        },
        # When an option string is registered in several parsers, the action kept is the
        # one of the first parser here: the parser whose value ends up in the trainer's args.
        "precedence": ["megatron+slime", "train-backend-preparse", "sglang-tp-default"],
        "parser_roles": {
            "train-backend-preparse": "slime's lenient pre-parse of its own arguments to pick --train-backend",
            "sglang-tp-default": "lenient pre-parse that computes the default of --sglang-tensor-parallel-size",
            "megatron+slime": "Megatron-LM's parser with slime's groups, --sglang-* and --router-*; "
                              "every flag of the command line must be known to it",
        },
    },
    "slime": {
        "description": (
            "Upstream THUDM/slime v0.3.1 with the NVIDIA Megatron-LM commit its docker/Dockerfile "
            "checks out (1dcf0daf) plus its docker/patch/latest/megatron.patch, SGLang v0.5.15.post1 "
            "plus its docker/patch/latest/sglang*.patch, and sglang-router 0.3.2; slime parses the "
            "command line with four lenient parsers (unknown flags are ignored)."
        ),
        "sources": {
            "slime": {"repo": "THUDM/slime", "ref": "v0.3.1"},
            "megatron": {"repo": "NVIDIA/Megatron-LM", "ref": "1dcf0dafa884ad52ffb243625717a3471643e087",
                         "patches": [{"repo": "THUDM/slime", "ref": "v0.3.1",
                                      "path": "docker/patch/latest/megatron.patch"}]},
            "sglang": {"package": "sglang", "version": "0.5.15.post1",
                       "patches": [{"repo": "THUDM/slime", "ref": "v0.3.1",
                                    "path": "docker/patch/latest/" + name}
                                   for name in ("sglang.patch", "sglang-top_p.patch",
                                                "sglang-release_hicache.patch",
                                                "sglang-pull_weights.patch")]},
            "router": {"package": "sglang-router", "version": "0.3.2",
                       "note": "the v0.3.1 image installs a slime build of sglang-router 0.3.2; "
                               "PyPI's 0.3.2 is the same base version"},
        },
        "parser_names": {
            ("_pre_parse_mode", 1): "pre-parse-mode",
            ("sglang_parse_args", 1): "sglang-tp-default",
            ("sglang_parse_args", 2): "sglang+router",
            ("parse_args", 1): "megatron+slime",
        },
        # slime merges the namespaces as megatron+slime <- pre-parse-mode <- sglang+router.
        "precedence": ["sglang+router", "pre-parse-mode", "megatron+slime", "sglang-tp-default"],
        "parser_roles": {
            "pre-parse-mode": "lenient pre-parse of the flags that steer the parsing flow",
            "sglang-tp-default": "lenient pre-parse that computes the default of --sglang-tensor-parallel-size",
            "sglang+router": "lenient parser of --sglang-* and --router-* (SGLang ServerArgs + router args)",
            "megatron+slime": "Megatron-LM's parser with slime's groups, parse_known_args (unknown ignored)",
        },
    },
}

# The command line the trainer is run with while its parsers are recorded.  Only the
# flag slime requires is given; defaults that slime derives from the command line
# (the SGLang TP size) are recorded for this command line.
MINIMAL_ARGV = ["train.py", "--rollout-batch-size", "1"]

ACTION_NAMES = {
    argparse._StoreAction: "store",
    argparse._StoreTrueAction: "store_true",
    argparse._StoreFalseAction: "store_false",
    argparse._StoreConstAction: "store_const",
    argparse._AppendAction: "append",
    argparse._AppendConstAction: "append_const",
    argparse._CountAction: "count",
    argparse._ExtendAction: "extend",
    argparse._HelpAction: "help",
    argparse._VersionAction: "version",
    argparse.BooleanOptionalAction: "BooleanOptionalAction",
}

# argparse's own actions that only print and exit: not trainer settings.
EXCLUDED_ACTIONS = {"help", "version"}


class _Done(Exception):
    """Raised at Megatron's final parse: every parser has been built by then."""


@dataclass
class _Recorded:
    parser: argparse.ArgumentParser
    method: str  # parse_args | parse_known_args
    caller: str  # module.function that called it
    func: str
    ordinal: int
    name: str = ""


@dataclass(eq=False)
class _Recorder:
    roots: dict  # realpath prefix -> source name
    sources: dict = field(default_factory=dict)  # id(action) -> source
    parsers: list = field(default_factory=list)
    _counts: dict = field(default_factory=dict)
    _in_parse: bool = False

    # ---- where an action was defined: the code on the stack at add_argument time ----
    def classify(self) -> str:
        seen = []
        frame = inspect.currentframe()
        while frame is not None:
            src = self._source_of(frame.f_code.co_filename)
            if src:
                seen.append(src)
            frame = frame.f_back
        # SGLang's and the router's add_cli_args are called through slime's wrappers, so
        # anything registered while their code is on the stack is theirs; otherwise the
        # innermost of megatron/slime wrote the add_argument call.
        for owner in ("router", "sglang"):
            if owner in seen:
                return owner
        for src in seen:
            if src in ("megatron", "slime"):
                return src
        return "unknown"

    @functools.lru_cache(maxsize=None)
    def _source_of(self, filename: str) -> str | None:
        path = os.path.realpath(filename)
        for root, src in self.roots.items():
            if path.startswith(root):
                return src
        return None

    def caller(self):
        frame = inspect.currentframe()
        argparse_file = os.path.realpath(argparse.__file__)
        here = os.path.realpath(__file__)
        while frame is not None:
            fn = os.path.realpath(frame.f_code.co_filename)
            if fn not in (argparse_file, here):
                return frame.f_globals.get("__name__", "?"), frame.f_code.co_name, fn
            frame = frame.f_back
        return "?", "?", "?"


def _install_hooks(rec: _Recorder, megatron_root: str):
    orig_add = argparse._ActionsContainer._add_action
    orig_parse_args = argparse.ArgumentParser.parse_args
    orig_parse_known = argparse.ArgumentParser.parse_known_args

    def _add_action(self, action):
        if id(action) not in rec.sources:
            rec.sources[id(action)] = rec.classify()
        return orig_add(self, action)

    def _record(parser, method):
        module, func, filename = rec.caller()
        n = rec._counts.get(func, 0) + 1
        rec._counts[func] = n
        rec.parsers.append(_Recorded(parser, method, f"{module}.{func}", func, n))
        # Megatron's parse_args is the last parser the trainer builds before it reads
        # checkpoints and queries CUDA: stop there.
        if func == "parse_args" and filename.startswith(megatron_root):
            raise _Done()

    def parse_args(self, args=None, namespace=None):
        rec._in_parse = True
        try:
            _record(self, "parse_args")
            return orig_parse_args(self, args, namespace)
        finally:
            rec._in_parse = False

    def parse_known_args(self, args=None, namespace=None):
        if not rec._in_parse:
            _record(self, "parse_known_args")
        return orig_parse_known(self, args, namespace)

    argparse._ActionsContainer._add_action = _add_action
    argparse.ArgumentParser.parse_args = parse_args
    argparse.ArgumentParser.parse_known_args = parse_known_args

    def restore():
        argparse._ActionsContainer._add_action = orig_add
        argparse.ArgumentParser.parse_args = orig_parse_args
        argparse.ArgumentParser.parse_known_args = orig_parse_known

    return restore


# --------------------------------------------------------------------------------------
# Serialising actions
# --------------------------------------------------------------------------------------

def _jsonable(value):
    try:
        json.dumps(value, allow_nan=False)
        return value
    except (TypeError, ValueError):
        return f"<non-json: {value!r}>"


def _type_name(t):
    """Short name of an action's type callable, and its full reference when not builtin."""
    if t is None:
        return None, None
    if isinstance(t, functools.partial):
        return _type_name(t.func)
    if t in (int, float, str, bool):
        return t.__name__, None
    name = getattr(t, "__qualname__", None) or getattr(t, "__name__", None) or type(t).__qualname__
    module = getattr(t, "__module__", None) or type(t).__module__
    ref = f"{module}.{name}"
    if getattr(t, "__name__", None) == "<lambda>":
        return "lambda", ref
    if module in ("json", "ast", "pathlib", "os.path"):
        return f"{module}.{name}", ref
    return name.rsplit(".", 1)[-1] if "<locals>" in name else name, ref


def _help_line(parser, action):
    if action.help is None or action.help == argparse.SUPPRESS:
        return None
    text = action.help
    try:
        text = parser._get_formatter()._expand_help(action)
    except Exception:  # help with a stray %: keep the raw text
        pass
    for line in str(text).splitlines():
        if line.strip():
            return " ".join(line.split())
    return None


def _option_strings(parser):
    return sorted(o for a in parser._actions for o in a.option_strings)


def _action_name(action):
    """argparse's name for its own action classes, else the custom class's name."""
    return ACTION_NAMES.get(type(action), type(action).__name__)


def _action_base(action):
    """For a custom Action class, the argparse action it derives from (its command-line syntax)."""
    for cls in type(action).__mro__[1:]:
        if cls in ACTION_NAMES:
            return ACTION_NAMES[cls]
    return None


def _cli_spelling(action, value):
    """The command-line string that the action's own type turns into `value`, if one exists.

    Choices and defaults that are not JSON (Megatron's enums) are recorded as
    "<non-json: repr>"; this finds what a user types for them, checked against the
    trainer's real type callable."""
    if action.type is None:
        return None
    candidates = [getattr(value, "name", None), str(value), str(getattr(value, "value", ""))]
    for text in candidates:
        if not text:
            continue
        try:
            if action.type(text) == value:
                return text
        except Exception:
            continue
    return None


def _choices(action):
    """Choices as a JSON list; string choices sorted.

    argparse only tests membership, and some choices come from unordered sources whose
    order changes from run to run (Python sets; the router's Rust extension for
    --router-tool-call-parser), so sorting keeps regenerations comparable."""
    if action.choices is None:
        return None
    values = [_jsonable(c) for c in action.choices]
    if all(isinstance(v, str) for v in values) and not any(v.startswith("<non-json: ") for v in values):
        values.sort()
    return values


def _serialise(parser, action, source, parser_name):
    type_name, type_ref = _type_name(action.type)
    nargs = action.nargs
    if nargs is not None and not isinstance(nargs, int):
        nargs = str(nargs)
    entry = {
        "option_strings": list(action.option_strings),
        "dest": action.dest,
        "type": type_name,
        "nargs": nargs,
        "choices": _choices(action),
        "default": _jsonable(action.default),
        "required": bool(action.required),
        "action": _action_name(action),
        "const": _jsonable(action.const),
        "source": source,
        "parser": parser_name,
        "help": _help_line(parser, action),
    }
    if type_ref is not None:
        entry["type_ref"] = type_ref
    if type(action) not in ACTION_NAMES:
        # e.g. SGLang's DeprecatedStoreTrueAction is a store_true: it takes no value.
        entry["action_base"] = _action_base(action)
    # Optional: what to type for choices/defaults that JSON cannot hold (enum members).
    if entry["choices"] is not None and any(isinstance(c, str) and c.startswith("<non-json: ")
                                            for c in entry["choices"]):
        spelled = [_cli_spelling(action, c) for c in action.choices]
        if all(x is not None for x in spelled):
            entry["cli_choices"] = spelled
    if isinstance(entry["default"], str) and entry["default"].startswith("<non-json: "):
        spelled = _cli_spelling(action, action.default)
        if spelled is not None:
            entry["cli_default"] = spelled
    return entry


# --------------------------------------------------------------------------------------
# Preparing sources: patched copies in a temp dir, never touching the inputs
# --------------------------------------------------------------------------------------

# --------------------------------------------------------------------------------------
# Main
# --------------------------------------------------------------------------------------

def build(ns) -> dict:
    preset = PRESETS[ns.flavour]
    started = time.monotonic()
    workdir = tempfile.mkdtemp(prefix="clawgym-flagreg-")
    try:
        src = prepare_sources(ns, workdir, tool="gen_flag_registry")
        slime_root, megatron_root = src.slime_root, src.megatron_root
        sglang_dir, router_dir, stand_ins = src.sglang_dir, src.router_dir, src.stand_ins

        rec = _Recorder(roots={
            os.path.join(os.path.realpath(router_dir), "sglang_router") + os.sep: "router",
            os.path.join(os.path.realpath(sglang_dir), "sglang") + os.sep: "sglang",
            os.path.join(megatron_root, "megatron") + os.sep: "megatron",
            os.path.join(slime_root, "slime") + os.sep: "slime",
        })

        import_log = io.StringIO()
        with redirect_stdout(import_log), redirect_stderr(import_log):
            t0 = time.monotonic()
            import torch  # noqa: F401  (the real CPU build, or a failure worth seeing)
            import slime.utils.arguments as slime_arguments
            import_seconds = time.monotonic() - t0

        restore = _install_hooks(rec, os.path.join(megatron_root, "megatron") + os.sep)
        saved_argv = sys.argv
        sys.argv = list(MINIMAL_ARGV)
        parse_log = io.StringIO()
        t0 = time.monotonic()
        try:
            with redirect_stdout(parse_log), redirect_stderr(parse_log):
                slime_arguments.parse_args()
        except _Done:
            pass
        except SystemExit as exc:
            sys.exit(f"gen_flag_registry: the trainer's parser exited ({exc.code}) on {MINIMAL_ARGV[1:]}:\n"
                     f"{parse_log.getvalue()[-3000:]}")
        else:
            sys.exit("gen_flag_registry: slime's parse_args returned without reaching Megatron's parse_args; "
                     "the parsing flow differs from the one this generator knows (see tools/README.md).")
        finally:
            sys.argv = saved_argv
            restore()
        parse_seconds = time.monotonic() - t0

        # ---- name the recorded parsers and merge their actions ----
        names_used = {}
        parse_counts = {}
        kept_parsers = []
        for rp in rec.parsers:
            rp.name = preset["parser_names"].get((rp.func, rp.ordinal), f"{rp.func}#{rp.ordinal}")
            parse_counts[rp.name] = parse_counts.get(rp.name, 0) + 1
            if rp.name in names_used:
                # The same parser built again (same code, same option strings): record it once.
                if _option_strings(names_used[rp.name].parser) != _option_strings(rp.parser):
                    sys.exit(f"gen_flag_registry: two different parsers named {rp.name}")
                continue
            names_used[rp.name] = rp
            kept_parsers.append(rp)
        rec.parsers = kept_parsers
        unknown = [rp.name for rp in rec.parsers if rp.name not in preset["precedence"]]
        if unknown:
            sys.exit(f"gen_flag_registry: unexpected parsers {unknown} (callers: "
                     f"{[rp.caller for rp in rec.parsers]}); the trainer's flow changed: update PRESETS.")
        missing = [n for n in preset["precedence"] if n not in names_used]
        if missing:
            sys.exit(f"gen_flag_registry: parsers {missing} were not built; the trainer's flow changed.")

        by_name = {rp.name: rp for rp in rec.parsers}
        owner_of = {}  # option string -> (parser name, action)
        also = {}  # id(action kept) -> [other parser names]
        excluded = set()
        for name in preset["precedence"]:
            parser = by_name[name].parser
            for action in parser._actions:
                if _action_name(action) in EXCLUDED_ACTIONS:
                    excluded.update(action.option_strings)
                    continue
                if not action.option_strings:
                    sys.exit(f"gen_flag_registry: positional argument {action.dest!r} in {name}: "
                             f"not representable as a flag.")
                kept = {owner_of[o] for o in action.option_strings if o in owner_of}
                if kept:
                    for kept_parser, kept_action in kept:
                        also.setdefault(id(kept_action), []).append(name)
                        if set(action.option_strings) - set(kept_action.option_strings):
                            sys.exit(f"gen_flag_registry: {action.option_strings} in {name} overlaps "
                                     f"{kept_action.option_strings} in {kept_parser} only partly.")
                    continue
                for o in action.option_strings:
                    owner_of[o] = (name, action)

        actions = []
        seen_ids = set()
        for rp in rec.parsers:  # file order: the trainer's parse order, then registration order
            for action in rp.parser._actions:
                if id(action) in seen_ids or not action.option_strings:
                    continue
                first = action.option_strings[0]
                if first not in owner_of or owner_of[first][1] is not action:
                    continue
                seen_ids.add(id(action))
                source = rec.sources.get(id(action), "unknown")
                if source == "unknown":
                    sys.exit(f"gen_flag_registry: cannot tell which code registered {action.option_strings}.")
                entry = _serialise(rp.parser, action, source, rp.name)
                if id(action) in also:
                    entry["also_parsed_by"] = sorted(set(also[id(action)]))
                actions.append(entry)

        option_strings = [o for a in actions for o in a["option_strings"]]
        if len(option_strings) != len(set(option_strings)):
            sys.exit("gen_flag_registry: an option string appears in two actions (bug).")

        parsers_meta = []
        for rp in sorted(rec.parsers, key=lambda r: preset["precedence"].index(r.name)):
            p = rp.parser
            parsers_meta.append({
                "name": rp.name,
                "role": preset["parser_roles"].get(rp.name),
                "caller": rp.caller,
                "parse_order": rec.parsers.index(rp) + 1,
                "times_parsed": parse_counts[rp.name],
                "method": rp.method,
                "allow_abbrev": bool(p.allow_abbrev),
                "unknown_args": "error" if rp.method == "parse_args" else "ignored",
                "prefix": None,
                "add_help": bool(p.add_help),
                "option_string_count": sum(len(a.option_strings) for a in p._actions
                                           if _action_name(a) not in EXCLUDED_ACTIONS),
            })

        sources = json.loads(json.dumps(preset["sources"]))
        _record_versions(sources, ns, sglang_dir, megatron_root, slime_root, router_dir)

        counts = {}
        for a in actions:
            counts[a["source"]] = counts.get(a["source"], 0) + sum(1 for _ in a["option_strings"])
        meta = {
            "flavour": ns.flavour,
            "description": preset["description"],
            "sources": sources,
            "generator": "tools/gen_flag_registry.py",
            "generated_at": _dt.datetime.now(_dt.timezone.utc).replace(microsecond=0).isoformat(),
            "environment": _environment(ns, stand_ins),
            "argv": MINIMAL_ARGV[1:],
            "option_string_count": len(option_strings),
            "action_count": len(actions),
            "option_strings_by_source": dict(sorted(counts.items())),
            "excluded_option_strings": sorted(excluded),
            "excluded_reason": "argparse help/version actions print and exit; they are not trainer settings",
            "parsers": parsers_meta,
            "strict": any(p["unknown_args"] == "error" for p in parsers_meta),
        }
        timings = {"import_s": round(import_seconds, 2), "parse_s": round(parse_seconds, 3),
                   "total_s": round(time.monotonic() - started, 2)}
        return {"meta": meta, "actions": actions}, timings
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


def _record_versions(sources, ns, sglang_dir, megatron_root, slime_root, router_dir):
    import sglang  # already imported by slime

    sg_version = getattr(sglang, "__version__", None)
    if sg_version is None:
        from sglang.version import __version__ as sg_version
    expected = sources["sglang"]["version"]
    if sg_version != expected and not ns.allow_version_mismatch:
        sys.exit(f"gen_flag_registry: SGLang {sg_version} imported, flavour {ns.flavour} pins {expected}. "
                 f"Fix: install sglang=={expected} (or pass --allow-version-mismatch and say so).")
    sources["sglang"]["version"] = sg_version
    try:
        router_version = importlib.metadata.version("sglang-router")
    except importlib.metadata.PackageNotFoundError:
        router_version = None
    expected = sources["router"]["version"]
    if router_version != expected and not ns.allow_version_mismatch:
        sys.exit(f"gen_flag_registry: sglang-router {router_version} found, flavour {ns.flavour} "
                 f"pins {expected}. Fix: install sglang-router=={expected}.")
    sources["router"]["version"] = router_version

    # Patches as applied (name and content hash), matched to the preset's provenance.
    for key, given in (("sglang", ns.sglang_patch or []), ("megatron", ns.megatron_patch or [])):
        expected = sources[key].get("patches", [])
        if [os.path.basename(p["path"]) for p in expected] != [os.path.basename(g) for g in given] \
                and not ns.allow_version_mismatch:
            sys.exit(f"gen_flag_registry: flavour {ns.flavour} applies {key} patches "
                     f"{[p['path'] for p in expected]} in that order; got {given or 'none'}. "
                     f"Fix: pass them with --{key}-patch.")
        if given:
            sources[key]["patches"] = [dict(p, sha256=_sha256(g)) for p, g in zip(expected, given)] \
                if len(expected) == len(given) else [{"path": os.path.basename(g), "sha256": _sha256(g)}
                                                     for g in given]

    try:
        from megatron.core import package_info

        sources["megatron"]["version"] = package_info.__version__
    except Exception:
        pass
    try:
        import slime  # noqa: F401

        version_file = os.path.join(slime_root, "slime", "__init__.py")
        with open(version_file) as f:
            for line in f:
                if line.startswith("__version__"):
                    sources["slime"]["version"] = line.split("=", 1)[1].strip().strip("\"'")
    except Exception:
        pass
    if ns.slime_ref:
        sources["slime"]["ref"] = ns.slime_ref
    if ns.megatron_ref:
        sources["megatron"]["ref"] = ns.megatron_ref

    # Content hashes of the files that define the parsers, as run (after patches).
    fingerprints = {
        "slime/utils/arguments.py": os.path.join(slime_root, "slime", "utils", "arguments.py"),
        "slime/backends/sglang_utils/arguments.py": os.path.join(
            slime_root, "slime", "backends", "sglang_utils", "arguments.py"),
        "megatron/training/arguments.py": os.path.join(megatron_root, "megatron", "training", "arguments.py"),
        "sglang/srt/server_args.py": os.path.join(sglang_dir, "sglang", "srt", "server_args.py"),
    }
    for key, path in (("slime", None), ("megatron", None), ("sglang", None)):
        sources[key]["sha256"] = {name: _sha256(p) for name, p in fingerprints.items()
                                  if name.startswith(key) and os.path.exists(p)}


def _environment(ns, stand_ins):
    import torch

    env = {"python": sys.version.split()[0], "pythonhashseed": os.environ.get("PYTHONHASHSEED"),
           "torch": torch.__version__,
           "torch_cuda": getattr(torch.version, "cuda", None)}
    for dist in ("triton", "transformers"):
        try:
            env[dist] = importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            env[dist] = None
    # Modules replaced by empty stand-ins, and which of their submodules the imports asked for.
    env["stand_in_modules"] = sorted(ns.stand_in or [])
    env["stand_in_imports"] = sorted(stand_ins.served)
    return env


def _dumps(registry) -> str:
    """meta indented for reading; one compact line per action, so the file stays small
    (fast to load) and a regeneration diffs flag by flag."""
    meta = json.dumps(registry["meta"], indent=1, ensure_ascii=False)
    lines = [json.dumps(a, ensure_ascii=False, separators=(",", ":")) for a in registry["actions"]]
    body = ",\n".join(lines)
    return '{"meta": ' + meta + ',\n"actions": [\n' + body + "\n]}\n"


def main(argv=None):
    # Some choices lists are built from sets (SGLang's backends, the router's parsers); a fixed
    # hash seed keeps their order, so regenerating from the same sources gives the same file.
    if argv is None and os.environ.get("PYTHONHASHSEED") != "0":
        os.execve(sys.executable, [sys.executable, os.path.abspath(__file__), *sys.argv[1:]],
                  dict(os.environ, PYTHONHASHSEED="0"))
    # A terminated run still removes its temporary patched copies (the finally in build()).
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))
    ap = argparse.ArgumentParser(
        description="Dump a trainer flavour's argparse actions to a clawgym flag registry (JSON).")
    ap.add_argument("flavour", choices=sorted(PRESETS), help="trainer flavour to generate")
    add_source_options(ap)
    ap.add_argument("--slime-ref", help="record this slime revision instead of the preset's")
    ap.add_argument("--megatron-ref", help="record this Megatron revision instead of the preset's")
    ap.add_argument("--allow-version-mismatch", action="store_true",
                    help="record versions/patches that differ from the flavour's preset instead of refusing")
    ap.add_argument("--out", required=True, help="output JSON file")
    ns = ap.parse_args(argv)

    registry, timings = build(ns)
    tmp = ns.out + ".tmp"
    os.makedirs(os.path.dirname(os.path.abspath(ns.out)), exist_ok=True)
    with open(tmp, "w") as f:
        f.write(_dumps(registry))
    os.replace(tmp, ns.out)
    repo = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    if os.path.dirname(os.path.abspath(ns.out)) == os.path.join(repo, "clawgym", "registry", "data"):
        # Derived from the registries: the secret option strings, keyed by each file's sha256.
        sys.path.insert(0, repo)
        from clawgym.common.secrets import write_secret_index

        print(f"secret option index -> {write_secret_index()}")
    meta = registry["meta"]
    print(f"{ns.flavour}: {meta['option_string_count']} option strings in {meta['action_count']} actions "
          f"{meta['option_strings_by_source']}; parsers "
          f"{[(p['name'], p['option_string_count']) for p in meta['parsers']]}")
    print(f"time: import {timings['import_s']} s, parsers {timings['parse_s']} s, total {timings['total_s']} s "
          f"-> {ns.out}")


if __name__ == "__main__":
    main()
