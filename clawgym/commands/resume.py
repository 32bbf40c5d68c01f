"""``clawgym resume <save dir> [key=value ...]``: relaunch a run from its latest checkpoint.

The config is exactly the one in the save dir's latest snapshot (``checkpoint.load``
set to the save dir, the trainer's ``--load``); overrides go on top and are shown as a
diff of config keys and trainer flags before anything starts.

How the config is rebuilt: the snapshot's composed config (with its interpolations)
is merged onto the schema, and every value that would now resolve differently than it
did at launch (a path from the current directory or environment, say) is pinned to
the recorded value. Without overrides this gives the recorded resolved config; with
them, derived values follow the overrides as they did at launch (e.g.
``gpu_layout.actor_gpus=2`` moves ``perf.tensor_parallel``). A group override
(``gpu_layout=colocate_8``) swaps in that option as composition would.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, Tuple
from clawgym.common.exit_codes import REFUSED

#: Passes of pinning drifted values before giving up on the unresolved form.
MAX_PIN_PASSES = 5


class ResumeError(Exception):
    """A user-facing resume problem; ``str()`` is the message."""


def _set(cfg: Any, key: str, value: Any, *, force_add: bool = False) -> None:
    from omegaconf import OmegaConf, open_dict

    if force_add:
        with open_dict(cfg):
            OmegaConf.update(cfg, key, value, merge=False, force_add=True)
    else:
        OmegaConf.update(cfg, key, value, merge=False)


def _pinned_base(unresolved: Dict[str, Any], resolved: Dict[str, Any]) -> Any:
    """Schema + unresolved snapshot config, with drifted values pinned to the recorded ones."""
    from omegaconf import OmegaConf
    from omegaconf.errors import OmegaConfBaseException

    import clawgym.config.compose  # noqa: F401  (resolvers)
    from clawgym.commands.diff import flatten
    from clawgym.config.schema import ClawGymConfig

    try:
        base = OmegaConf.merge(OmegaConf.structured(ClawGymConfig), unresolved)
    except OmegaConfBaseException as exc:
        raise ResumeError(
            f"clawgym resume: the snapshot's config does not fit this clawgym's schema: {exc}\n"
            "  fix: resume with the clawgym version recorded in the snapshot (clawgym show <save dir>), "
            "or relaunch with train.py and checkpoint.load=<save dir>") from None
    want = flatten(resolved)
    for _ in range(MAX_PIN_PASSES):
        try:
            now = flatten(OmegaConf.to_container(base, resolve=True))
        except OmegaConfBaseException:
            break
        drift = [k for k, v in want.items() if now.get(k, object()) != v]
        if not drift:
            return base
        for k in drift:
            _set(base, k, want[k], force_add=True)
    # Interpolations that cannot be re-resolved: take the recorded values as they are.
    return OmegaConf.merge(OmegaConf.structured(ClawGymConfig), resolved)


def _group_node(group: str, option: str) -> Any:
    """The unresolved node of one group option, as composition would produce it."""
    from omegaconf import OmegaConf

    from clawgym.config.compose import compose

    composed = compose([f"{group}={option}"])
    return OmegaConf.to_container(composed[group], resolve=False)


def apply_overrides(cfg: Any, overrides: Sequence[str]) -> List[str]:
    """Apply Hydra-syntax overrides to a config; returns the group options switched."""
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from omegaconf import OmegaConf, open_dict

    from clawgym.config.compose import group_options
    from clawgym.config.schema import GROUPS

    from hydra.errors import OverrideParseException

    try:
        parsed = OverridesParser.create().parse_overrides(list(overrides))
    except OverrideParseException as exc:
        raise ResumeError(f"clawgym resume: {exc}") from None
    switched = []
    for o in parsed:
        key = o.key_or_group
        if o.is_sweep_override():
            raise ResumeError(f"clawgym resume: {o.input_line!r} is a sweep; resume one run at a time")
        if o.is_delete():
            raise ResumeError(f"clawgym resume: {o.input_line!r} deletes a key; set it to a value (or null) instead")
        value = o.value()
        if key in ("trainer", "trainer.flavour"):
            # The flavour sets other groups' defaults too, and a checkpoint belongs to one trainer.
            raise ResumeError(f"clawgym resume: {o.input_line!r} switches the trainer; a resumed run keeps the "
                              "trainer it was launched with.\n  fix: launch afresh with train.py " + o.input_line)
        if key in GROUPS and isinstance(value, str) and value in group_options(key):
            with open_dict(cfg):
                cfg[key] = OmegaConf.merge(OmegaConf.structured(GROUPS[key]), _group_node(key, value))
            switched.append(f"{key}={value}")
            continue
        try:
            _set(cfg, key, value, force_add=o.is_add() or o.is_force_add())
        except Exception as exc:  # OmegaConf's key/type errors
            raise ResumeError(f"clawgym resume: cannot apply {o.input_line!r}: {exc}".rstrip()) from None
    return switched


def build_resume(save_dir: str | os.PathLike, overrides: Sequence[str] = (), *,
                 environ: Optional[Dict[str, str]] = None, timestamp: Optional[str] = None) -> Tuple[Any, Any, Any, Any]:
    """(snapshot, config, plan, launch record) of a resume; raises ResumeError or ConfigError."""
    from clawgym.app import timestamp as now_stamp
    from clawgym.plan.build import build_plan
    from clawgym.snapshot.checkpoints import has_checkpoint
    from clawgym.snapshot.layout import SnapshotError
    from clawgym.snapshot.read import find_snapshot
    from clawgym.snapshot.records import LaunchRecord
    from clawgym.validate import validate

    save = Path(save_dir).expanduser().resolve()
    try:
        snap, _ = find_snapshot(save)
    except SnapshotError as exc:
        raise ResumeError(str(exc)) from None
    recorded_save = snap.config["paths"]["save"]
    if recorded_save and Path(recorded_save).resolve() != save and not any(
            o.lstrip("+").startswith("paths.save=") for o in overrides):
        raise ResumeError(
            f"clawgym resume: {save} was launched with paths.save={recorded_save}; the trainer would save there.\n"
            f"  fix: resume that dir, or pass paths.save={save} to continue in this one")
    if not has_checkpoint(save):
        raise ResumeError(
            f"clawgym resume: no checkpoint to resume from in {save} (no {save}/iter_*/ named by "
            "latest_checkpointed_iteration.txt).\n"
            "  fix: wait for the run's first save (checkpoint.save_interval), or launch it afresh with train.py")
    cfg = _pinned_base(snap.config_unresolved, snap.config)
    switched = apply_overrides(cfg, overrides)
    if not any(o.lstrip("+").startswith("checkpoint.load=") for o in overrides):
        # The path as the run spelled it, when it is the same dir.
        same = recorded_save and Path(recorded_save).resolve() == save
        _set(cfg, "checkpoint.load", recorded_save if same else str(save))
    validate(cfg)
    plan = build_plan(cfg, environ=os.environ if environ is None else environ, timestamp=timestamp or now_stamp())
    choices = dict(snap.choices or {})
    choices.update(dict(s.split("=", 1) for s in switched))
    record = LaunchRecord(
        overrides=list(snap.overrides or []) + list(overrides), choices=choices or None,
        origin={"command": "resume", "from_snapshot": str(snap.path), "resume_overrides": list(overrides),
                "load": cfg.checkpoint.load})
    return snap, cfg, plan, record


def _exit_code(result: Any) -> int:
    if isinstance(result, bool) or result is None:
        return 0
    if isinstance(result, int):
        return result
    code = result.get("exit_code") if isinstance(result, dict) else getattr(result, "exit_code", None)
    return int(code) if isinstance(code, int) else 0


def run(args: argparse.Namespace) -> int:
    from clawgym.commands.diff import Side, format_diff
    from clawgym.config.compose import to_plain
    from clawgym.plan.build import format_plan
    from clawgym.snapshot.records import recorded_launch
    from clawgym.validate import ConfigError

    if getattr(args, "plan_out", None) and not args.dry_run:
        print("clawgym resume: --plan-out writes the plan of a dry run only\n  fix: add --dry-run", file=sys.stderr)
        return REFUSED
    try:
        snap, cfg, plan, record = build_resume(args.save_dir, args.overrides)
    except ResumeError as exc:
        print(str(exc), file=sys.stderr)
        return REFUSED
    except ConfigError as err:
        print(err.report(), file=sys.stderr)
        return REFUSED
    before = Side(label=f"snapshot {snap.id}", source=str(snap.path), config=snap.config,
                  entrypoint=list(snap.plan.get("entrypoint") or []),
                  env=dict((snap.plan.get("runtime_env") or {}).get("env_vars") or {}),
                  unresolved=snap.config_unresolved or None)
    after = Side(label="resume", source=f"continuing from {cfg.checkpoint.load}", config=to_plain(cfg),
                 entrypoint=plan.entrypoint, env=dict(plan.runtime_env.get("env_vars") or {}),
                 unresolved=to_plain(cfg, resolve=False))
    print(f"resuming {plan.run_name} from {args.save_dir} (latest snapshot {snap.id})")
    from clawgym.supervisor.resume_point import resume_point

    point = resume_point(args.save_dir)
    if point.iteration is not None:
        # The trainer loads the tracker's iteration; a save cut short beside it is said, not loaded.
        print(f"  from the last complete checkpoint: {point.name}")
    note = point.incomplete_note()
    if note:
        print(f"  note: {note}")
    print(format_diff(before, after, names=("was", "now")))
    print()
    if args.dry_run:
        from clawgym.app import attach_memory, memory_banner

        # The memory plan too (format_plan prints it), as a dry run of train.py does; refused as its
        # launch would be when it does not fit.
        attach_memory(plan, to_plain(cfg))
        print(format_plan(plan))
        banner = memory_banner(plan, cfg)
        if banner:
            print(banner, file=sys.stderr)
            return REFUSED
        if getattr(args, "plan_out", None):
            _write_plan_out(args.plan_out, plan, to_plain(cfg))
        return 0
    from clawgym.pipeline.single import launch_single  # heavy imports (ray) only for real launches

    with recorded_launch(record):
        return _exit_code(launch_single(cfg, plan))


def _write_plan_out(path: str, plan: Any, c: Dict[str, Any]) -> None:
    """The resume's plan and the SLURM allocation its config asks for, as JSON: what the supervisor in a
    SLURM allocation reads to run a moved layout there (clawgym/supervisor/slurm_runner.py)."""
    import json

    from clawgym.common.fsutil import atomic_write_text
    from clawgym.plan.allocation import allocation

    alloc = allocation(c)
    atomic_write_text(Path(path), json.dumps({"plan": plan.to_dict(), "allocation": {
        "nodes": alloc.nodes, "gpus_per_node": alloc.gpus_per_node}}, indent=2) + "\n")


def add_parser(subparsers: Any) -> None:
    p = subparsers.add_parser("resume", help="relaunch a run from its latest checkpoint",
                              description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("save_dir", help="the run's save dir (paths.save)")
    p.add_argument("overrides", nargs="*", help="key=value overrides on top of the snapshot config")
    p.add_argument("--dry-run", action="store_true", help="print the diff and the plan, launch nothing")
    p.add_argument("--plan-out", metavar="FILE",
                   help="with --dry-run: also write the plan and the SLURM allocation it needs to FILE (JSON)")
    # Options and overrides in any order (clawgym/cli.py:main).
    p.set_defaults(func=run, intermixed="overrides")
