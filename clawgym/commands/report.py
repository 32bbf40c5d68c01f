"""``clawgym report``: one self-contained HTML page of the runs under some paths.

    clawgym report [PATH...] --out report.html [--metric TAG,...] [--sort KEY] [--where KEY=VALUE]

The page holds the runs table, the config keys that differ between runs, reward and eval
curves, the step-time breakdown as stacked bars and each run's snapshot summary; its
pictures are inlined, so it opens without network. PATHs and the other options are
``clawgym runs``'.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path


def add_parser(subparsers) -> None:
    from clawgym.commands.runs import add_common

    p = subparsers.add_parser("report", help="one self-contained HTML page of runs side by side",
                              description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_common(p)
    p.add_argument("--out", default="report.html", help="the HTML file to write (default: report.html)")
    p.add_argument("--title", default="clawgym runs", help="the page's title")
    p.set_defaults(func=run)


def run(args) -> int:
    from clawgym.commands.runs import _Bad, _metrics, collect
    from clawgym.runs.report import render
    from clawgym.runs.table import metric_tags

    try:
        runs, rows, columns = collect(args, "report")
    except _Bad as exc:
        print(f"clawgym report: {exc}", file=sys.stderr)
        return 2
    if not runs:
        print("clawgym report: no runs found (a run is a save dir with clawgym snapshots: "
              "<save>/clawgym/snapshots/); nothing written", file=sys.stderr)
        return 2
    page = render(runs, rows, columns, metrics=metric_tags(runs, _metrics(args.metric) or None),
                  weight=args.smooth, title=args.title)
    # The snapshots were masked by collect(); the environment's secrets are masked anywhere in the page,
    # as written and as HTML escapes them.
    import html

    from clawgym.secrets import config_secret_values, redact

    values = config_secret_values(None)
    page = redact(redact(page, values), [html.escape(v) for v in values])
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    # Temp file + rename: never a half-written page.
    tmp = out.with_name(f".{out.name}.tmp-{os.getpid()}")
    tmp.write_text(page)
    tmp.replace(out)
    print(f"wrote {out} ({len(runs)} runs)")
    return 0
