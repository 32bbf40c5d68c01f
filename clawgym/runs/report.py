"""``clawgym report``: one self-contained HTML page of runs side by side.

Everything is inside the file: pictures are PNGs inlined as ``data:`` URIs, the style sheet
is inline, there is no script and no link to fetch, so the page reads the same on a laptop
without network as on the cluster. Sections: the runs table, the config keys whose values
differ between runs, reward and eval curves, the step-time breakdown, and each run's
snapshot summary.
"""

from __future__ import annotations

import base64
import html
import re
import time
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

from clawgym.runs.discover import Run
from clawgym.runs.table import Column, fmt, shown_columns

#: Curves every report draws when the runs logged them (slime's keys).
CURVES = ("rollout/raw_reward", "perf/step_time", "perf/tokens_per_gpu_per_sec", "train/loss")

_CSS = """
body { font-family: sans-serif; margin: 24px; color: #222; background: #fff; }
h1 { font-size: 22px; } h2 { font-size: 18px; margin-top: 32px; border-bottom: 1px solid #ccc; }
table { border-collapse: collapse; font-size: 12px; margin: 8px 0; }
th, td { border: 1px solid #ccc; padding: 3px 6px; text-align: left; vertical-align: top;
         overflow-wrap: normal; word-break: normal; hyphens: none; }
th { background: #eef; }
span.w { white-space: nowrap; }
td.num, td[class^="status"] { text-align: right; font-variant-numeric: tabular-nums; white-space: nowrap; }
.status-running { color: #06c; } .status-succeeded { color: #080; } .status-failed { color: #c00; }
.status-stopped, .status-unknown { color: #888; }
td.name, th.name { white-space: nowrap; }
div.fig { display: inline-block; width: 49%; vertical-align: top; } div.fig img { max-width: 100%; }
ul.marks { margin: 0 0 12px 0; padding-left: 18px; } li.mark-restart { color: #b2182b; }
li.mark-hang { color: #6a3d9a; } li.mark-rule { color: #8a6508; }
td.best { font-weight: bold; background: #e8f6e8; }
img { max-width: 49%; border: 1px solid #eee; margin: 6px 0; vertical-align: top; }
.muted { color: #777; font-size: 12px; }
"""
#: Table cells have no width cap: a table wider than the page shrinks its columns to their longest word
#: and wraps between words (span.w keeps a word with a hyphen or a slash whole), so no word is cut.


def _img(png: bytes, alt: str) -> str:
    return f'<img alt="{html.escape(alt)}" src="data:image/png;base64,{base64.b64encode(png).decode()}">'


def flatten(d: Mapping[str, Any], prefix: str = "") -> Dict[str, Any]:
    out: Dict[str, Any] = {}
    for k, v in d.items():
        key = f"{prefix}{k}"
        if isinstance(v, Mapping) and v:
            out.update(flatten(v, key + "."))
        else:
            out[key] = v
    return out


def config_differences(runs: Sequence[Run]) -> Tuple[List[str], Dict[int, Dict[str, Any]]]:
    """Config keys whose resolved value differs between runs, and each run's values.

    Values that merely carry the run's own name (its save dir, W&B group, run name) are left
    out: they differ for every pair of runs and tell nothing about the training."""
    flat = {id(r): flatten(r.config) for r in runs}
    keys = sorted({k for f in flat.values() for k in f})
    differ = []
    for k in keys:
        values = [flat[id(r)].get(k) for r in runs]
        if len({repr(v) for v in values}) < 2:
            continue
        if all(isinstance(v, str) and r.name and r.name in v for v, r in zip(values, runs)):
            continue
        differ.append(k)
    return differ, flat


#: Columns where less is better (seconds); every other numeric column: more is better.
LOWER_IS_BETTER = ("step_s", "rollout_s", "log_probs_s", "train_s", "update_s", "wait_s")
#: Trial states (clawgym/tuner) whose rows are never marked best.
UNRANKED_TRIAL_STATES = ("failed", "refused", "interrupted")
#: Columns that are no measure of quality: never marked best.
NOT_RANKED = ("steps", "duration", "started")


def best_rows(rows: Sequence[Mapping[str, Any]], columns: Sequence[Column]) -> Dict[str, int]:
    """column key -> index of the row holding the best value (only where two or more runs have one)."""
    out: Dict[str, int] = {}
    for c in columns:
        if c.kind not in ("num", "secs") or c.key in NOT_RANKED or c.key.endswith(":step"):
            continue
        # A trial that failed or was refused is no candidate for best, whatever it logged before.
        have = [(i, r.get(c.key)) for i, r in enumerate(rows) if isinstance(r.get(c.key), (int, float))
                and r.get(c.key) == r.get(c.key) and r.get("trial_state") not in UNRANKED_TRIAL_STATES]
        if len(have) < 2:
            continue
        pick = min if c.key in LOWER_IS_BETTER else max
        if c.key == "objective":
            # A study's objective is best in the study's own direction (a minimised loss: the lowest).
            directions = {rows[i].get("trial_direction") for i, _ in have}
            pick = min if directions == {"minimize"} else max if directions <= {"maximize", None} else None
            if pick is None:
                continue  # studies of both directions in one table: no single best
        out[c.key] = pick(have, key=lambda iv: iv[1])[0]
    return out


def latest_steps_differ(rows: Sequence[Mapping[str, Any]], tag: str) -> bool:
    steps = {r.get(f"{tag}:step") for r in rows if r.get(tag) is not None}
    return len(steps) > 1


def _cell(row: Mapping[str, Any], c: Column, i: int, best: Mapping[str, int], stepped: Sequence[str]) -> Tuple[str, str]:
    text = fmt(row.get(c.key), c.kind)
    if c.key in stepped and row.get(c.key) is not None:
        text += f" @ step {row.get(c.key + ':step')}"
    if c.key == "status":
        cls = f"status-{row.get('status')}"
    elif c.key == "name":
        cls = "name"
    else:
        cls = "num" if c.kind in ("num", "secs") else ""
    if best.get(c.key) == i:
        cls += " best"
    return text, cls


#: Characters after which a browser may break a line inside a word (UAX #14: hyphens, solidus, ...).
_BREAKS_INSIDE = re.compile(r"[-/\u2010-\u2015?!%)}\]|+]")


def _words(text: str) -> str:
    """``text`` escaped, each word a browser could break inside (``nan-loss``, ``2026-12-06``, a path)
    kept whole (``<span class="w">``, no wrap): a cell wraps between words, never inside one."""
    out = []
    for token in re.split(r"(\s+)", text):
        esc = html.escape(token)
        out.append(f'<span class="w">{esc}</span>' if token and _BREAKS_INSIDE.search(token) else esc)
    return "".join(out)


def _table(headers: Sequence[str], rows: Sequence[Sequence[Tuple[str, str]]], *, name_first: bool = False) -> str:
    """``rows``: cells as (text, css class)."""
    name_th = "<th class='name'>"
    out = ["<table><tr>" + "".join(
        f"{name_th if name_first and n == 0 else '<th>'}{html.escape(h)}</th>"
        for n, h in enumerate(headers)) + "</tr>"]
    for row in rows:
        out.append("<tr>" + "".join(f'<td class="{c}">{_words(t)}</td>' for t, c in row) + "</tr>")
    out.append("</table>")
    return "\n".join(out)


def _supervision_facts(run: Run, row: Mapping[str, Any]) -> List[Tuple[str, str]]:
    """A supervised run's attempts (class, evidence, where it resumed), its trips with their stack
    files, and the GPU time lost, for its snapshot summary."""
    import time as _time

    from clawgym.snapshot.attempts import read_attempts
    from clawgym.snapshot.health import read_trips

    out: List[Tuple[str, str]] = []
    when = lambda t: _time.strftime("%Y-%m-%d %H:%M:%S UTC", _time.gmtime(t)) if t else "-"  # noqa: E731
    for a in read_attempts(run.save_dir).attempts:
        resumed = f", resumed from iter_{a.resumed_from:07d}" if a.resumed_from is not None else ""
        out.append((f"attempt {a.number}", f"{when(a.started)} .. {when(a.ended)}: {a.cls or 'running'}"
                                           f"{resumed}; {a.evidence or '-'}"))
    for t in read_trips(run.save_dir):
        files = f"; stacks: {' '.join(t.files)}" if t.files else ""
        out.append(("tripped", f"{when(t.time)}: {t.rule} (attempt {t.attempt}) {t.key or ''} = {t.value or '-'}"
                               f"{files}"))
    if row.get("attempts"):
        out.append(("GPU time lost", fmt(row.get("gpu_time_lost_s"), "gpuh")))
    return out


def _marks_list(runs: Sequence[Run], metric: str, differing: Mapping[int, List[str]]) -> str:
    """What the figure of ``metric`` marks, as a list a reader (and a test) can read: each restart, hang
    and tripped rule with its step on that curve (data-kind, data-step, data-run)."""
    from clawgym.runs import plot
    from clawgym.runs.marks import placed

    items = []
    for r in runs:
        if not r.scalars().get(metric):
            continue
        for step, m in placed(r, metric):
            items.append(f"<li class='mark mark-{html.escape(m.kind)}' data-kind='{html.escape(m.kind)}' "
                         f"data-step='{step}' data-run='{html.escape(r.name)}' data-metric='{html.escape(metric)}'>"
                         f"{html.escape(plot.label(r, differing))}: step {step}: {html.escape(m.label)}</li>")
    if not items:
        return ""
    return (f"<ul class='marks muted'><li class='marks-key'>{html.escape(metric)}: "
            "dashed red line: an attempt ended and the run restarted; dash-dot purple: a hang caught; dotted "
            "gold: a health rule tripped</li>"
            + "".join(items) + "</ul>")


def render(runs: Sequence[Run], rows: Sequence[Mapping[str, Any]], columns: Sequence[Column], *,
           metrics: Sequence[str] = (), weight: float = 0.0, title: str = "clawgym runs",
           chosen: bool = False) -> str:
    """The whole page. ``rows``/``columns`` are :func:`clawgym.runs.table.build_rows`' (same order as ``runs``)."""
    from clawgym.runs import plot
    from clawgym.runs.table import differing_by_run

    differing = differing_by_run(runs)
    parts = [f"<!DOCTYPE html><html><head><meta charset='utf-8'><title>{html.escape(title)}</title>",
             f"<style>{_CSS}</style></head><body>",
             f"<h1>{html.escape(title)}</h1>",
             f"<p class='muted'>{len(runs)} run(s); written {time.strftime('%Y-%m-%d %H:%M:%S')} by clawgym report "
             "from the save dirs' snapshots and TensorBoard events.</p>"]

    shown = shown_columns(rows, columns, chosen)
    best = best_rows(rows, shown)
    # A latest value is only comparable at one step: where runs are at different steps, say which.
    stepped = [c.key for c in shown if f"{c.key}:step" in (rows[0] if rows else {}) and latest_steps_differ(rows, c.key)]
    parts.append("<h2>Runs</h2>")
    parts.append(_table([c.header + (" (latest)" if c.key in stepped else "") for c in shown],
                        [[_cell(r, c, i, best, stepped) for c in shown] for i, r in enumerate(rows)],
                        name_first=bool(shown) and shown[0].key == "name"))
    notes = []
    if best:
        notes.append("Bold: the best value of a column (highest; for times, lowest).")
    if stepped:
        notes.append("Latest values were logged at different steps (shown after @): compare the best column "
                     "or the curves, not the latest values alone.")
    if notes:
        parts.append("<p class='muted'>" + " ".join(html.escape(n) for n in notes) + "</p>")

    keys, flat = config_differences(runs)
    parts.append("<h2>Config differences</h2>")
    if keys and len(runs) > 1:
        parts.append(_table(["key", *[r.name for r in runs]],
                            [[(k, ""), *[(repr(flat[id(r)].get(k, "-")) if not isinstance(flat[id(r)].get(k), str)
                                          else str(flat[id(r)].get(k)), "") for r in runs]] for k in keys]))
    else:
        parts.append("<p class='muted'>No differences (or a single run).</p>")

    parts.append("<h2>Curves</h2>")
    wanted = list(dict.fromkeys([*CURVES[:1], *metrics, *CURVES[1:]]))
    drawn = 0
    for metric in wanted:
        for name, mates in plot.groups(runs).items():
            png = plot.curves_png(mates, metric, weight=weight, title=f"{metric} - {name}",
                                  labels={id(r): plot.label(r, differing) for r in mates})
            if png is not None:
                # The figure and the list of its marks side by side with the next one.
                parts.append(f"<div class='fig'>{_img(png, f'{metric} - {name}')}"
                             f"{_marks_list(mates, metric, differing)}</div>")
                drawn += 1
    if not drawn:
        parts.append("<p class='muted'>No events yet: the runs have logged no metric (TensorBoard events "
                     "appear in &lt;save&gt;/tensorboard/ once slime logs its first step).</p>")

    parts.append("<h2>Step time</h2>")
    bars = plot.time_bars_png(rows)
    parts.append(_img(bars, "step time breakdown") if bars else "<p class='muted'>No step times logged yet.</p>")
    overlap = [r["name"] for r in rows if plot.overlapping(r)]
    if bars and overlap:
        parts.append("<p class='muted'>" + html.escape(
            f"Phases overlap in {', '.join(overlap)}: a split (asynchronous) layout generates the next rollout "
            "while it trains on this one, so its bar adds up to more than its step; the black tick is the "
            "measured step (perf/step_time).") + "</p>")

    from clawgym.runs.study import figures, studies

    for (name, storage), trials in studies(runs).items():
        # A tuner's study (clawgym/tuner): Optuna's own figures, drawn from its storage.
        pngs, why, counts, notes, unran = figures(name, storage)
        parts.append(f"<h2>Study {html.escape(name)}</h2>")
        parts.append(f"<p class='muted'>{len(trials)} of its trials in this report; storage "
                     f"{html.escape(storage)}; trials by state: "
                     f"{html.escape(', '.join(f'{k} {v}' for k, v in sorted(counts.items())) or '-')}</p>")
        if why:
            parts.append(f"<p class='muted'>{html.escape(why)}</p>")
        for note in notes:
            parts.append(f"<p class='muted'>{html.escape(note)}</p>")
        for title, png in pngs:
            parts.append(_img(png, f"{name}: {title}"))
        if unran:
            # Refused trials have no save dir, so no run above: listed here with the reason each got.
            parts.append(f"<h3>{html.escape(name)}: trials refused or failed</h3>")
            parts.append(_table(["trial", "state", "why"], [[(str(n), ""), (st, ""), (why or "-", "")]
                                                          for n, st, why in unran]))

    parts.append("<h2>Snapshots</h2>")
    for r, row in zip(runs, rows):
        snap = r.latest
        parts.append(f"<h3>{html.escape(r.name)}</h3>")
        facts: List[Tuple[str, str]] = [("save dir", str(r.save_dir)), ("status", f"{row.get('status')} "
                                                                                   f"{row.get('status_detail') or ''}")]
        if snap is not None:
            m = snap.meta
            facts += [("launches", str(len(r.snapshots))), ("submission id", str(r.submission_id)),
                      ("created", str(m.get("created"))), ("host", str(m.get("host"))),
                      ("snapshot format", str(m.get("format"))),
                      ("overrides", " ".join(snap.overrides or []) or "-"),
                      ("choices", " ".join(f"{k}={v}" for k, v in sorted((snap.choices or {}).items())) or "-"),
                      ("versions", " ".join(f"{k}={v}" for k, v in sorted((m.get("versions") or {}).items()))),
                      ("git", " ".join(f"{k}={str((v or {}).get('commit') or '?')[:10]}"
                                       for k, v in sorted((m.get("git") or {}).items()) if isinstance(v, dict)))]
        facts += _supervision_facts(r, row)
        facts += [("problem", p) for p in r.problems]
        parts.append(_table(["", ""], [[(k, ""), (v, "")] for k, v in facts]))
    parts.append("</body></html>\n")
    return "\n".join(parts)
