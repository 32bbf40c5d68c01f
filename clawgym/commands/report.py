"""``clawgym report``: one self-contained HTML page of the runs under some paths.

    clawgym report [PATH...] --out report.html [--metric TAG,...] [--sort KEY] [--where KEY=VALUE]
                   [--columns KEY,...]

The page holds the runs table, the config keys that differ between runs, reward and eval
curves (with each restart, hang and tripped health rule marked at its step), the step-time
breakdown as stacked bars and each run's snapshot summary; its
pictures are inlined, so it opens without network. PATHs and the other options are
``clawgym runs``'.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from clawgym.common.exit_codes import REFUSED


def add_parser(subparsers) -> None:
    from clawgym.commands.runs import add_common

    p = subparsers.add_parser("report", help="one self-contained HTML page of runs side by side",
                              description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_common(p)
    p.add_argument("--out", default="report.html", help="the HTML file to write (default: report.html)")
    p.add_argument("--title", default="clawgym runs", help="the page's title")
    p.set_defaults(func=run)


def out_file(text: str) -> Path:
    """``--out FILE``: a file name whose folder exists or can be made, or BadArgs saying why not."""
    from clawgym.commands.runs import BadArgs

    if not text.strip():
        raise BadArgs("--out '': give the HTML file to write, e.g. --out report.html")
    out = Path(text)
    if out.is_dir() or text.endswith(("/", os.sep)):
        raise BadArgs(f"--out {text}: is a folder; give a file name, e.g. --out {out / 'report.html'}")
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise BadArgs(f"--out {text}: cannot make its folder {out.parent} ({exc.strerror or exc})") from None
    return out


def run(args) -> int:
    from clawgym.commands.runs import BadArgs, parse_metrics, read_notes, collect, no_rows
    from clawgym.runs.plot import write_exclusive
    from clawgym.runs.report import render
    from clawgym.runs.table import metric_tags

    found: list = []
    try:
        out = out_file(args.out)
        runs, rows, columns = collect(args, "report", found)
    except BadArgs as exc:
        print(f"clawgym report: {exc}", file=sys.stderr)
        return REFUSED
    if not runs:
        print(f"clawgym report: {no_rows(found, args)}; nothing written", file=sys.stderr)
        return REFUSED
    page = render(runs, rows, columns, metrics=metric_tags(runs, parse_metrics(args.metric) or None),
                  weight=args.smooth, title=args.title, chosen=bool(args.columns))
    # The snapshots were masked by collect(); the environment's secrets are masked anywhere in the page,
    # as written and as HTML escapes them.
    import html

    from clawgym.common.secrets import config_secret_values, redact

    values = config_secret_values(None)
    page = redact(redact(page, values), [html.escape(v) for v in values])
    for note in read_notes(runs):
        print(f"clawgym report: {note}", file=sys.stderr)
    try:
        # A temp file made exclusively beside the page, then renamed: never a half-written page,
        # never a write through a planted link.
        write_exclusive(out, page.encode())
    except OSError as exc:
        print(f"clawgym report: --out {args.out}: cannot write the page ({exc.strerror or exc})", file=sys.stderr)
        return REFUSED
    print(f"wrote {out} ({len(runs)} runs)")
    return 0
