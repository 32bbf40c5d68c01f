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
import os
import re
from pathlib import Path
from typing import Any, Dict, Iterator, List, Mapping, Optional, Sequence, Tuple

from omegaconf import DictConfig, OmegaConf

from clawgym.importer import parity
from clawgym.importer.capture import (CLOCK_EPOCHS, DEFAULT_TIMEOUT, Capture, CaptureError, Submit, classify, clock_values, run_script)
from clawgym.common.secrets import redact
from clawgym.importer.options import default_name, flatten
from clawgym.importer.result import ImportFailure, ImportResult
from clawgym.importer.solver import Importer
from clawgym.importer.writing import nest, render_experiment, searchpath_override, write_atomic


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
        return compose([*searchpath_override(out_dir), f"+experiment={name}"])
    except Exception as exc:  # noqa: BLE001 - Hydra wraps YAML and OmegaConf errors in its own
        cause = exc
        while cause.__cause__ is not None and str(cause.__cause__):
            cause = cause.__cause__
        text = " ".join(str(cause).split()) or type(cause).__name__
        raise ImportFailure(f"{target}: does not compose as +experiment={name}: {text}; "
                            "fix the file, or re-import the script with --force") from None


#: File tests of ``[``/``test``/``[[`` whose operand is a path the script needs.
_PATH_TESTS = ("-d", "-f", "-e", "-x", "-s", "-r")


def _traced(line: str) -> Optional[List[str]]:
    """The argv of a ``set -x`` trace line (``+ cmd args``, ``++`` in a substitution), else None."""
    import shlex

    m = re.match(r"^\++ (.*)$", line)
    if not m:
        return None
    try:
        return shlex.split(m.group(1))
    except ValueError:
        return None


def failed_check(output: str, script: Path) -> List[str]:
    """The script's own check that stopped it before it submitted, read from its ``set -x`` trace: a
    file test (``[ ! -d DIR ]``) followed only by messages and ``exit``, or a ``cd DIR`` that ended it
    (``SLIME_ROOT="$(cd -- DIR && pwd)"`` under ``set -e``); with what it printed, the folder it wants and
    how to give it (``--env NAME=FOLDER`` where the script reads ``NAME`` from the environment)."""
    lines = output.rstrip().splitlines()
    traced = [(i, argv) for i, line in enumerate(lines) if (argv := _traced(line))]
    if not traced:
        return []
    check: Optional[List[str]] = None
    says: List[str] = []
    for i, argv in reversed(traced):
        if argv[0] in ("[", "[[", "test"):
            check, says = argv, [line for line in lines[i + 1:] if _traced(line) is None and line.strip()]
            break
        if argv[0] not in ("echo", "printf", "exit", "return", "cat"):
            break
    if check is None:
        # Ended in a cd (its failure under set -e ends the script; the assignment it fed may follow).
        for i, argv in reversed(traced[-2:]):
            if argv[0] == "cd":
                check = argv
                break
    if check is None:
        return []
    if check[0] == "cd":
        wanted = [a for a in check[1:] if a != "--" and not a.startswith("-")][-1:]
    else:
        wanted = [check[j + 1] for j, a in enumerate(check[:-1]) if a in _PATH_TESTS]
    out = [f"the script's own check failed: `{' '.join(check)}`"]
    if says:
        out.append(f"  it says: {says[0]}")
        out += [f"           {line.strip()}" for line in says[1:6]]
    try:
        text = Path(script).read_text(encoding="utf-8", errors="replace")
    except OSError:
        text = ""
    for path in wanted:
        kind = "folder" if check[0] == "cd" or "-d" in check else "file"
        where = ("it exists on this machine, but the import's jail does not show it (it shows the script's "
                 "checkout, the slime checkout, system folders and its own HOME and /tmp): put it in the checkout"
                 if os.path.exists(path) else "it is not there: create it, or import the script from the checkout "
                 "it belongs to")
        # The first variable assigned that path (later ones copy it: REF_LOAD=${HF_CKPT}), when the script
        # takes it from the environment (${NAME:-default}).
        names = [argv[0].split("=", 1)[0] for _, argv in traced
                 if len(argv) == 1 and re.match(r"^[A-Za-z_]\w*=", argv[0]) and argv[0].split("=", 1)[1] == path]
        settable = [n for n in names[:1] if re.search(r"\$\{" + n + r":?[-=]", text)]
        out.append(f"to satisfy it: it wants the {kind} {path}; {where}"
                   + "".join(f", or pass --env {n}={kind.upper()} (the script reads {n})" for n in settable))
    return out


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
    if not check:
        # Known before the script runs (twice, in its jail): the folder takes files, or the refusal says so.
        _check_writable(out_dir, target)
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
            + "".join(f"\n{line}" for line in failed_check(capture.output, script))
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
            result.command = _command(out_dir, name, result)
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
    write_atomic(target, text)
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
                write_atomic(target, previous)
            result.path = None
            result.text = text
    result.command = _command(out_dir, name, result)
    return result


def _check_writable(out_dir: Path, target: Path) -> None:
    """Refuse an ``--out`` that cannot hold ``target``: probed by creating what is missing (then removed),
    since permission bits do not tell (root passes every access check, yet /proc takes no folder)."""
    import tempfile

    made: List[Path] = []
    try:
        for folder in reversed([target.parent, *target.parent.parents]):
            if not folder.exists():
                folder.mkdir()
                made.append(folder)
        with tempfile.NamedTemporaryFile(dir=target.parent, prefix=".clawgym-import-probe-"):
            pass
    except OSError as exc:
        raise ImportFailure(f"--out {out_dir}: cannot write {target} there ({exc.strerror or exc}); "
                            "choose a folder you can write, e.g. --out conf") from None
    finally:
        for folder in reversed(made):
            try:
                folder.rmdir()
            except OSError:
                pass


def _command(out_dir: Path, name: str, result: ImportResult) -> str:
    extra = " ".join(searchpath_override(out_dir))
    given = "".join(f" {k}={v}" for k, v in result.launch_with.items())
    return f"python train.py {extra + ' ' if extra else ''}+experiment={name}{given}"


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

    if not OmegaConf.select(cfg, "ray.address") and str(OmegaConf.select(cfg, "cluster.backend")) == "existing":
        # Left to give at launch: verified as it will run, with the address the script submitted to.
        address = _address_to_give(imp)
        result.left_to_set.setdefault("ray.address", f"the dashboard of the Ray cluster to run on (the script "
                                                     f"submitted to {address})")
        cfg = copy.deepcopy(cfg)
        cfg.ray.address = address
        result.launch_with["ray.address"] = address
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
    if capture.head_starts and _needs_more_nodes(imp, base, overrides):
        # The script starts a head on its node and asks for more GPUs than that node has: it was written
        # for a cluster of several nodes (its other nodes join that head out of band, e.g. by ssh). A head
        # clawgym starts holds one node, so the experiment runs on an existing cluster whose address is
        # given at launch; the import verifies it with the address the script itself submitted to.
        choices = {**choices, "cluster": "existing"}
        overrides = {k: v for k, v in overrides.items() if k not in LOCAL_HEAD_KEYS}
        # ray.address stays unset (a "???" in an experiment would not unset it: Hydra's merge keeps the
        # default), so the launch without it is refused by existing-cluster-needs-address, naming the key.
        result.left_to_set["ray.address"] = ("the dashboard of the Ray cluster the script's nodes form (the "
                                             f"script submitted to {_address_to_give(imp)} from its head node)")
        result.notes.append(
            f"the script starts a Ray head on this node and asks for more GPUs than one node of "
            f"{base.gpu_layout.num_gpus} holds (its other nodes join that head): imported for the Ray cluster "
            "those nodes form (cluster=existing), or run it with cluster=slurm")
    for key, why in imp.refused.items():
        result.inexpressible.append(f"{key}: the script needs a value this key cannot take ({why})"
                                    if not why.startswith("the script") else f"{key}: {why}")
    result.choices = choices
    body = nest(overrides)
    result.body = body
    flags = _comments(imp, overrides)
    header = [f"Trainer flavour: {flavour}."]
    if result.setup:
        header += ["", "Prerequisites: the script prepares the machine with these steps before it launches;",
                   "run them (or their equivalent) once before the first launch. clawgym does not run them:"]
        header += [f"  - {t}" for t in result.setup]
    if result.left_to_set:
        header += ["", "Left to set at launch (e.g. python train.py +experiment=NAME KEY=VALUE):"]
        header += [f"  - {k}: {why}" for k, why in result.left_to_set.items()]
    if result.answered:
        header += ["", f"Imported with the probes answered as a node of {capture.gpus_per_node} GPUs"
                       f"{' with NVLink' if capture.nvlink else ' without NVLink'}:"]
        header += [f"  - {t}" for t in result.answered]
    return render_experiment(choices, body, script=result.script, flags=flags, header=header)


#: Settings of a head clawgym starts itself; an existing cluster's head is started by whoever runs it.
#: ray.node_ip is not among them: it also names the head to the job (MASTER_ADDR and no_proxy of the
#: job's environment, plan/build.py job_env), which the multi-node scripts pass in their runtime env
#: (slime v0.3.1's run-qwen3-235B-A22B.sh: "MASTER_ADDR": "${MASTER_ADDR}").
LOCAL_HEAD_KEYS = ("ray.num_gpus", "ray.port", "ray.dashboard_host", "ray.dashboard_port")


def _needs_more_nodes(imp: Importer, base: DictConfig, overrides: Mapping[str, Any]) -> bool:
    """Whether the solved experiment, run on a head clawgym starts here, asks for more GPUs than this node."""
    from clawgym.validate import violations

    cfg, _ = imp.apply(base, overrides)
    return any(v.code == "local-head-gpus-fit" for v in violations(cfg))


def _address_to_give(imp: Importer) -> str:
    """The dashboard the script submitted to: where its cluster's head is, seen from its head node."""
    address = str(imp.submit.options.get("--address") or "http://127.0.0.1:8265")
    return address if "://" in address else f"http://{address}"


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
                f"  keys set: {len(flatten(result.body))}"]
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
    if result.left_to_set:
        out += ["", "left to set at launch (the experiment validates with them given):"]
        out += [f"  - {k}: {why}" for k, why in result.left_to_set.items()]
    if result.ok:
        out.append(f"parity: the experiment launches the same run (0 differences). Run it with:\n  {result.command}")
    else:
        total = len(result.differences) + len(result.inexpressible) + len(result.violations)
        out.append(f"parity: NOT the same run ({total} problem{'s' if total != 1 else ''} above).")
    return "\n".join(out)
