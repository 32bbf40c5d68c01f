"""``clawgym runs``: the runs under some paths, side by side, from their save dirs.

    clawgym runs [PATH...] [--sort KEY [--desc]] [--where KEY=VALUE ...] [--metric TAG[,TAG...]]
                 [--last N] [--columns KEY[,KEY...]] [--json] [--plot METRIC[,METRIC...] --out DIR [--smooth W]]

A run is a save dir with clawgym snapshots; PATHs are save dirs or folders above them
(default: ``<paths.root>/exp`` of this checkout, ``$CLAWGYM_RL_ROOT`` or the current
directory, and the current directory). Metrics come from the TensorBoard events slime
writes into ``<save>/tensorboard/`` (``metrics.tensorboard``, on by default).

Columns (keys for --sort and --where): name, status, flavour, model, layout, sweep,
overrides (those that tell a run apart from its sweep mates), started, duration, steps
(rollout steps done), the --metric tags (default: every eval set's reward ``eval/<set>``)
latest and ``<tag>:best``, reward (mean ``rollout/raw_reward`` of the last N steps),
tok_s_gpu (``perf/tokens_per_gpu_per_sec``), train_tok_s (``perf/actor_train_tok_per_s``),
step_s (``perf/step_time``) and where a step's time goes: rollout_s, log_probs_s, train_s,
update_s, wait_s; the supervisor's view: health (last step age, rules tripped, complete checkpoints /
disk free), attempts, last_class, gpu_time_lost_s; and last_step, submission_id, save_dir, launches,
last_step_age_s, checkpoints_complete, disk_free_bytes, rules_tripped. ``--where`` takes =, !=, >, <,
>=, <=; numbers compare as numbers. ``--columns name,status,health`` shows those columns in that
order (``--json``: those keys).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Optional

from clawgym.common.exit_codes import FAILED, REFUSED


def add_common(p: argparse.ArgumentParser) -> None:
    p.add_argument("paths", nargs="*", metavar="PATH", help="save dirs or folders above them (default: see above)")
    p.add_argument("--metric", default="", help="comma-separated tags for the latest/best columns "
                                               "(default: every eval set's reward, eval/<set>)")
    p.add_argument("--last", type=int, default=5, help="steps the per-step means cover (default 5; 0 = all)")
    p.add_argument("--sort", help="column key to sort by (--sort=-KEY or --desc: descending)")
    p.add_argument("--desc", action="store_true", help="sort descending")
    p.add_argument("--where", action="append", default=[], metavar="KEY=VALUE", help="keep rows where KEY matches")
    p.add_argument("--smooth", type=float, default=0.0, help="curve smoothing weight in [0, 1) (TensorBoard's EMA)")
    p.add_argument("--columns", default="", metavar="KEY[,KEY...]",
                   help="the columns to show, in this order (keys as for --sort; default: every column some "
                        "run has a value for)")


def add_parser(subparsers) -> None:
    p = subparsers.add_parser("runs", help="the runs under some paths side by side: status, reward, step time",
                              description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_common(p)
    p.add_argument("--json", action="store_true", help="print the rows as JSON")
    p.add_argument("--plot", default="", metavar="METRIC[,METRIC...]",
                   help="write PNG curves of these tags (one figure per metric and sweep) into --out")
    p.add_argument("--out", help="folder for --plot's PNGs")
    p.set_defaults(func=run)


def parse_metrics(text: str):
    return [m.strip() for m in text.split(",") if m.strip()]


def collect(args, command: str, found: Optional[list] = None):
    """(runs, rows, columns) after --where/--sort, or raises BadArgs. ``found`` (a list) gets the runs
    found before --where, so an empty table can say whether the filter emptied it."""
    from clawgym.runs import RunsError, find_runs
    from clawgym.runs.table import EXTRA_KEYS, apply, build_rows, choose_columns

    if not 0.0 <= args.smooth < 1.0:
        raise BadArgs(f"--smooth {args.smooth}: the weight must be in [0, 1), e.g. --smooth 0.6")
    if args.last < 0:
        raise BadArgs(f"--last {args.last}: give a number of steps >= 0 (0 = all)")
    try:
        runs = find_runs(args.paths)
    except RunsError as exc:
        raise BadArgs(str(exc)) from None
    if found is not None:
        found.extend(runs)
    mask_secrets(runs)
    rows, columns = build_rows(runs, metrics=parse_metrics(args.metric) or None, last=args.last)
    keys = [c.key for c in columns] + [c.key for c in EXTRA_KEYS]
    try:
        if getattr(args, "columns", ""):
            columns = choose_columns(columns, args.columns)
        sort = f"-{args.sort.lstrip('-')}" if args.sort and args.desc else args.sort
        kept = apply(rows, where=args.where, sort=sort, keys=keys)
    except ValueError as exc:
        raise BadArgs(str(exc)) from None
    by_row = {id(r): run for r, run in zip(rows, runs)}
    return [by_row[id(r)] for r in kept], kept, columns


class BadArgs(Exception):
    pass


def read_notes(runs) -> list:
    """What reading the runs' events left out (damaged records, skipped files, sampled points), per run."""
    out = []
    for r in runs:
        for note in getattr(r.scalars(), "notes", []):
            out.append(f"{r.name}: {note}")
    return out


def out_folder(text: str) -> Path:
    """``--out DIR`` of ``runs --plot``: an existing or creatable folder, or BadArgs saying why not."""
    if not text.strip():
        raise BadArgs("--out '': give the folder the PNGs go to, e.g. --out plots")
    out = Path(text)
    if out.exists() and not out.is_dir():
        raise BadArgs(f"--out {text}: is a file, not a folder; give a folder, e.g. --out plots")
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise BadArgs(f"--out {text}: cannot make that folder ({exc.strerror or exc}); give a folder you can "
                   "write, e.g. --out plots") from None
    return out


def no_rows(found: list, args) -> str:
    if found:
        return (f"no runs match {' '.join('--where ' + w for w in args.where)} "
                f"({len(found)} run(s) found before the filter)")
    return "no runs found (a run is a save dir with clawgym snapshots: <save>/clawgym/snapshots/)"


def mask_secrets(runs) -> list:
    """Mask, in place, what the runs' snapshots hold of secrets before anything is printed of them (as a
    launch masks its reports): their configs through :func:`clawgym.common.secrets.redact_config`, their
    overrides; returns the secret values found (with the environment's), for a last pass over the text."""
    from clawgym.common.secrets import MIN_SECRET_LEN, config_secret_values, redact_config, redact_overrides

    values: set = set()
    for r in runs:
        for snap in r.snapshots:
            found = config_secret_values(snap.config)
            values.update(found)
            snap.config = redact_config(snap.config)
            if snap.overrides is not None:
                snap.overrides = redact_overrides(snap.overrides, found)
    values.update(config_secret_values(None))
    return sorted((v for v in values if len(v) >= MIN_SECRET_LEN), key=len, reverse=True)


def nothing_found(args) -> str:
    """"no runs found", saying where it looked (and that --where left them all out, when it did)."""
    from clawgym.runs.discover import MAX_DEPTH, default_paths

    where = [str(Path(p).expanduser().resolve()) for p in args.paths] or [str(p) for p in default_paths()]
    if args.where:
        return f"no runs match --where {' '.join(args.where)} (under {', '.join(where)})"
    looked = ", ".join(where) if where else f"{Path.cwd()} (no exp/ folder there, and $CLAWGYM_RL_ROOT is unset)"
    return (f"no runs found under {looked} (searched {MAX_DEPTH} folders deep)\n"
            f"  a run is a save dir with clawgym snapshots (<save>/clawgym/snapshots/); give its path or a folder "
            f"above it: clawgym runs <paths.root>/exp")


def run(args) -> int:
    from clawgym.runs.table import format_table, to_json

    found: list = []
    try:
        if args.plot and not args.out:
            raise BadArgs("--plot needs --out DIR (the folder the PNGs go to)")
        runs, rows, columns = collect(args, "runs", found)
        out = out_folder(args.out) if args.plot else None
    except BadArgs as exc:
        print(f"clawgym runs: {exc}", file=sys.stderr)
        return REFUSED
    from clawgym.common.secrets import config_secret_values, redact

    # The snapshots are masked (collect); this pass catches the environment's secrets anywhere else.
    values = config_secret_values(None)
    if args.json:
        chosen = [c.key for c in columns] if args.columns else None
        sys.stdout.write(redact(to_json(rows, chosen), values))
    elif not rows:
        print(no_rows(found, args) if found else nothing_found(args))
    else:
        print(redact(format_table(rows, columns, chosen=bool(args.columns)), values))
    for note in read_notes(runs):
        print(f"clawgym runs: {note}", file=sys.stderr)
    if args.plot:
        from clawgym.runs.plot import write_plots

        try:
            written, missing = write_plots(runs, parse_metrics(args.plot), out, weight=args.smooth)
        except OSError as exc:
            print(f"clawgym runs: --out {args.out}: cannot write the pictures ({exc.strerror or exc})",
                  file=sys.stderr)
            return REFUSED
        for path in written:
            print(f"wrote {path}", file=sys.stderr if args.json else sys.stdout)
        for metric in missing:
            print(f"clawgym runs: no run logged {metric} (yet); no picture for it", file=sys.stderr)
        if not written:
            return FAILED
    return 0
