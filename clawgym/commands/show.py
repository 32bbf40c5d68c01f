"""``clawgym show <save dir>``: what a save dir ran, and which snapshot each checkpoint carries.

Also takes a snapshot dir or a checkpoint dir. Prints the launches (snapshots), the
overrides and group choices, versions and git commits, the trainer argv, the
checkpoints present, and the resolved config (``--unresolved`` for the composed one
with its interpolations, ``--no-config`` to leave it out).
"""

from __future__ import annotations

import argparse
import sys
from typing import Any, List

from clawgym.commands.diff import render_table
from clawgym.common.secrets import config_secret_values, redact_argv, redact_config, redact_overrides, redact_text
from clawgym.common.exit_codes import REFUSED


def _git_line(name: str, info: dict) -> str:
    if info.get("commit"):
        return f"  {name:<9} {info['commit'][:12]}{' (dirty)' if info.get('dirty') else ''}  {info.get('path')}"
    return f"  {name:<9} -  {info.get('path')} ({info.get('error', 'unknown')})"


def _argv_lines(entrypoint: List[str]) -> List[str]:
    if len(entrypoint) < 2:
        return ["  (none recorded)"]
    out = [f"  {entrypoint[0]} {entrypoint[1]}"]
    args, i = entrypoint[2:], 0
    while i < len(args):
        if i + 1 < len(args) and not str(args[i + 1]).startswith("--"):
            out.append(f"    {args[i]} {args[i + 1]}")
            i += 2
        else:
            out.append(f"    {args[i]}")
            i += 1
    return out


def _memory_lines(snap: Any) -> List[str]:
    """The run's memory plan: the one its launch recorded, else computed from its resolved config."""
    from clawgym.memory import format_memory
    from clawgym.search.advice import memory_plan

    plan = (snap.plan or {}).get("memory")
    how = "as recorded at launch"
    if plan is None:
        try:
            plan = memory_plan(snap.config).to_dict()
            how = "computed now from the snapshot's config (its launch recorded none)"
        except (KeyError, TypeError, ValueError, ZeroDivisionError) as exc:
            return [f"memory plan: unavailable ({type(exc).__name__}: {exc})"]
    return [format_memory(plan), f"  ({how})"]


def _attempt_lines(save: Any) -> List[str]:
    """Each attempt the supervisor recorded (start, end, class, evidence, resumed from), and why it stopped."""
    import time

    from clawgym.snapshot.attempts import read_attempts

    rec = read_attempts(save)
    if not rec.attempts:
        return []

    def when(t: Any) -> str:
        return time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(t)) if t else "-"

    out = ["", f"attempts ({len(rec.attempts)}; {rec.path}):"]
    out.append(render_table(("attempt", "submission id", "started (UTC)", "ended (UTC)", "class", "resumed from",
                             "then"), [
        (a.number, a.submission_id or "-", when(a.started), when(a.ended), a.cls or "(running)",
         f"iter_{a.resumed_from:07d}" if a.resumed_from is not None else "-", a.next or "-")
        for a in rec.attempts]))
    # The evidence whole (a table cell would cut it): the line a user reads to know why.
    out += [f"  attempt {a.number} evidence: {a.evidence}" for a in rec.attempts if a.evidence]
    if rec.stopped:
        out.append(f"  stopped ({rec.stopped.get('by')}): {rec.stopped.get('why')}")
        if rec.stopped.get("fix"):
            out.append(f"  fix: {rec.stopped['fix']}")
    out += _supervisor_lines(save)
    return out


def _supervisor_lines(save: Any) -> List[str]:
    """The run's supervisor (<save>/clawgym/supervisor.json): running (pid, log, how to stop it) or its exit."""
    from clawgym.supervisor import process

    sup = process.read_record(save)
    if not sup:
        return []
    if process.alive(sup):
        return [f"  supervisor: running, pid {sup['pid']}, log {sup.get('log')}; stop the run for good: "
                f"clawgym jobs stop <its submission id>"]
    return [f"  supervisor: ended with exit status {sup.get('exit_code')}, log {sup.get('log')}"]


def _health_lines(save: Any) -> List[str]:
    """The rules and hangs the supervisor's monitors tripped on (``clawgym/health.jsonl``), and the stack
    dumps in ``<save>/stacks/`` (the hang monitor's, ``clawgym jobs stack``'s)."""
    import time

    from clawgym.snapshot.health import health_path, read_trips, stack_files

    trips, stacks = read_trips(save), stack_files(save)
    out: List[str] = []
    if trips:
        out += ["", f"tripped ({len(trips)}; {health_path(save)}):"]
        out.append(render_table(("when (UTC)", "attempt", "rule", "metric", "value", "step", "then"), [
            (time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(t.time)), t.attempt or "-", t.rule, t.key or "-",
             t.value or "-", t.step if t.step is not None else "-", t.action or "-")
            for t in trips]))
        out += [f"  {t.rule} (attempt {t.attempt or '-'}): {t.evidence}" for t in trips if t.evidence]
    named = {f for t in trips for f in t.files}
    if stacks or named:
        out += ["", f"stack dumps ({len(stacks)}; {save}/stacks/):"]
        hangs = {f: t for t in trips for f in t.files}
        for p in stacks:
            t = hangs.get(str(p))
            why = f"  ({t.rule} of attempt {t.attempt})" if t else ""
            out.append(f"  {p}{why}")
        for f in sorted(named - {str(p) for p in stacks}):
            out.append(f"  {f}  (recorded, not found)")
    return out


def format_show(target: str, *, config: str = "resolved") -> str:
    """The whole report for a save dir, snapshot dir or checkpoint dir."""
    from clawgym.snapshot.read import find_snapshot

    snap, save = find_snapshot(target)
    text = _format_show(snap, save, config=config)
    # Masked as a launch masks its reports: the config's secrets (values typed after a secret flag, a
    # secret-named variable) and the environment's, wherever they appear (argv, overrides, command line).
    return redact_text(text, snap.config)


def _format_show(snap: Any, save: Any, *, config: str) -> str:
    import yaml

    from clawgym.snapshot.checkpoints import list_checkpoints, read_tracker
    from clawgym.snapshot.layout import STAMP_DIRNAME
    from clawgym.snapshot.read import list_snapshots, unsubmitted_snapshots

    values = config_secret_values(snap.config)
    out: List[str] = []
    snaps = list_snapshots(save) if save is not None else [snap]
    out.append(f"save dir:   {save if save is not None else snap.meta.get('save_dir')}")
    out.append(f"run:        {snap.meta.get('run_name')}  (experiment {snap.meta.get('exp_name')})")
    out += ["", f"launches ({len(snaps)} snapshot{'s' if len(snaps) != 1 else ''}, oldest first):"]
    out.append(render_table(("snapshot", "created (UTC)", "host", "how", "overrides"), [
        (s.id + (" *" if s.id == snap.id else ""), s.meta.get("created"), s.meta.get("host"),
         (s.meta.get("origin") or {}).get("command", "-"),
         " ".join(redact_overrides(s.overrides, values)) if s.overrides else ("(none)" if s.overrides is not None else "(unknown)"))
        for s in snaps]))
    never = unsubmitted_snapshots(save) if save is not None else []
    if never:
        out.append(f"  not launches (stopped before their job was submitted, no run): "
                   f"{', '.join(p.name for p in never)}")
    out += ["", f"shown below: snapshot {snap.id} (*)  {snap.path}",
            f"  submission id: {snap.meta.get('submission_id')}",
            f"  command:       {' '.join(redact_overrides(snap.meta.get('command') or [], values))}",
            f"  cwd:           {snap.meta.get('cwd')}   user: {snap.meta.get('user')}"]
    origin = snap.meta.get("origin") or {}
    if origin.get("command") == "resume":
        out.append(f"  resumed from:  {origin.get('from_snapshot')} (load {origin.get('load')}), "
                   f"overrides {origin.get('resume_overrides') or '(none)'}")
    out += ["", "overrides:"]
    out += [f"  {o}" for o in redact_overrides(snap.overrides, values)] if snap.overrides else \
        ["  (none)" if snap.overrides is not None else "  (unknown: launched outside Hydra)"]
    out += ["", "group choices:"]
    out += [f"  {k}={v}" for k, v in (snap.choices or {}).items()] or ["  (unknown)"]
    layout = (snap.plan or {}).get("layout")
    if layout:
        # gpu_layout=auto: what the layout search chose at launch, and its runners-up.
        from clawgym.search.auto import format_choice

        out += ["", *format_choice(layout).splitlines()]
    versions = snap.meta.get("versions") or {}
    out += ["", "versions:", "  " + "  ".join(f"{k} {v or '-'}" for k, v in versions.items())]
    out += ["", "git:"] + [_git_line(k, v) for k, v in (snap.meta.get("git") or {}).items()]
    secrets = snap.meta.get("secret_env") or {}
    if secrets:
        out += ["", "secrets (names only; read from the environment at launch):"]
        out += [f"  {k} <- {' or '.join('$' + n for n in v)}" for k, v in secrets.items()]
    out += ["", "trainer:"] + _argv_lines(redact_argv(list(snap.plan.get("entrypoint") or []), values))
    out += ["", *_memory_lines(snap)]
    if save is not None:
        ckpts = list_checkpoints(save)
        tracker = read_tracker(save)
        out += ["", f"checkpoints ({len(ckpts)}; latest_checkpointed_iteration.txt: "
                    f"{tracker if tracker is not None else 'absent'}):"]
        if ckpts:
            out.append(render_table(("checkpoint", "state", f"snapshot ({STAMP_DIRNAME}/)"), [
                (c.path.name, "complete" if c.complete else "incomplete",
                 c.stamp_id or "none") for c in ckpts]))
            if any(c.complete and not c.stamp_id for c in ckpts):
                out.append(f"  complete checkpoints without a snapshot: `clawgym stamp {save}` places them")
        else:
            out.append("  (none)")
        if snaps:
            from clawgym.runs.status import settle_slurm_record

            # A SLURM job cancelled between two allocations: recorded by its first reader.
            settle_slurm_record(save, snaps[-1].path)
        out += _attempt_lines(save)
        out += _health_lines(save)
    if config != "none":
        data = redact_config(snap.config if config == "resolved" else snap.config_unresolved)
        out += ["", f"config ({config}):", yaml.safe_dump(data, sort_keys=False).rstrip()]
    return "\n".join(out)


def run(args: argparse.Namespace) -> int:
    from clawgym.snapshot.layout import SnapshotError

    config = "none" if args.no_config else "unresolved" if args.unresolved else "resolved"
    try:
        print(format_show(args.target, config=config))
    except SnapshotError as exc:
        print(str(exc), file=sys.stderr)
        return REFUSED
    return 0


def add_parser(subparsers: Any) -> None:
    p = subparsers.add_parser("show", help="print what a save dir ran", description=__doc__,
                              formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("target", help="save dir, snapshot dir or checkpoint dir")
    g = p.add_mutually_exclusive_group()
    g.add_argument("--unresolved", action="store_true", help="show the composed config with its interpolations")
    g.add_argument("--no-config", action="store_true", help="leave the config out")
    p.set_defaults(func=run)

