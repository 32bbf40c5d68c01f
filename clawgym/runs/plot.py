"""PNG pictures of runs, drawn by matplotlib with its Agg backend (no display, no network).

Curves: a metric against its step, one line per run, sweep mates in one figure (runs outside a
sweep together), optionally smoothed as TensorBoard smooths (an exponential moving average
with the given weight, debiased at the start). Step time: one stacked bar per run.

Every text is drawn as text: run names and tags are the user's (``cost_$x_$``), and matplotlib
would read two ``$`` as mathtext and fail the whole figure (``text.parse_math`` off). A nearly
flat curve keeps a y range proportionate to its values (:func:`y_limits`): autoscaling alone
draws 5.10 -> 5.20 as a cliff. Files are written through a temp file created exclusively in the
target folder, then renamed over the target (a planted link is replaced, never followed).
"""

from __future__ import annotations

import contextlib
import io
import os
import re
import tempfile
from pathlib import Path
from typing import Callable, Dict, List, Mapping, Optional, Sequence, Tuple

from clawgym.runs import events as ev
from clawgym.runs.discover import Run
from clawgym.runs.table import TIME_LABELS, TIME_PARTS


#: matplotlib settings of every figure: user text is plain text; tick labels without an offset.
RC = {"text.parse_math": False, "axes.formatter.useoffset": False}
#: A curve whose values span less than this fraction of their magnitude is drawn in a band this wide.
FLAT_BAND = 0.05


def _pyplot():
    import matplotlib

    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt

    return plt


@contextlib.contextmanager
def _figure(plt, **kwargs):
    """A figure made and drawn under :data:`RC`, always closed."""
    with plt.rc_context(RC):
        fig, ax = plt.subplots(**kwargs)
        try:
            yield fig, ax
        finally:
            plt.close(fig)


def y_limits(values: Sequence[float]) -> Optional[Tuple[float, float]]:
    """A y range for nearly flat values: centred on them, :data:`FLAT_BAND` of their magnitude wide.

    None when the values vary enough for matplotlib's own autoscale (or are all zero)."""
    finite = [v for v in values if v == v and abs(v) != float("inf")]
    if not finite:
        return None
    lo, hi = min(finite), max(finite)
    scale = max(abs(lo), abs(hi))
    if scale == 0 or (hi - lo) >= FLAT_BAND * scale:
        return None
    mid, half = (lo + hi) / 2, FLAT_BAND * scale / 2
    return mid - half, mid + half


def smooth(values: Sequence[float], weight: float) -> List[float]:
    """TensorBoard's smoothing: EMA with ``weight`` in [0, 1), debiased so the first point stays put."""
    if not weight:
        return list(values)
    out, last, n = [], 0.0, 0
    for v in values:
        n += 1
        last = last * weight + (1 - weight) * v
        out.append(last / (1 - weight ** n))
    return out


def groups(runs: Sequence[Run]) -> Dict[str, List[Run]]:
    """Sweep -> its runs; runs outside a sweep under "runs"."""
    from clawgym.runs.table import sweep_of

    out: Dict[str, List[Run]] = {}
    for r in runs:
        out.setdefault(sweep_of(r) or "runs", []).append(r)
    return out


def label(run: Run, differing: Mapping[int, List[str]]) -> str:
    return " ".join(differing.get(id(run), [])) or run.name


#: How each kind of mark (clawgym.runs.marks) is drawn: colour, line style.
#: (Not the colours of matplotlib's cycle, which draw the runs' curves.)
MARK_STYLE = {"restart": ("#b2182b", "--"), "hang": ("#6a3d9a", "-."), "rule": ("#b8860b", ":")}
MARK_LEGEND = {"restart": "attempt ended, run restarted", "hang": "hang caught", "rule": "health rule tripped"}


def draw_marks(ax, placed: Sequence[Tuple[int, object]]) -> int:
    """A vertical line per mark at its step, with its class written beside it (gid ``clawgym-mark-<kind>``,
    so a reader of the figure finds them); how many were drawn."""
    seen = {t.get_label() for t in ax.lines}
    for step, m in placed:
        colour, style = MARK_STYLE.get(m.kind, ("black", "--"))
        legend = MARK_LEGEND.get(m.kind, m.kind)
        ax.axvline(step, color=colour, linestyle=style, linewidth=1.6, zorder=1,
                   gid=f"clawgym-mark-{m.kind}", label=legend if legend not in seen else "_nolegend_")
        seen.add(legend)
        ax.text(step, 0.98, f" {m.cls or m.kind}", transform=ax.get_xaxis_transform(), rotation=90,
                va="top", ha="right", fontsize=7, color=colour, gid=f"clawgym-mark-label-{m.kind}")
    return len(placed)


def curves_png(runs: Sequence[Run], metric: str, *, weight: float = 0.0, title: Optional[str] = None,
               labels: Optional[Mapping[int, str]] = None, marks: bool = True,
               inspect: Optional[Callable[[object, object], None]] = None) -> Optional[bytes]:
    """One figure of ``metric`` per step, a line per run that has it; None when none has it. With
    ``marks``, each run's restarts, hangs and tripped rules (:mod:`clawgym.runs.marks`) are drawn on
    it. ``inspect(fig, ax)`` sees the figure before it is written (for tests)."""
    from clawgym.runs.marks import placed

    have = [r for r in runs if r.scalars().get(metric)]
    if not have:
        return None
    plt = _pyplot()
    with _figure(plt, figsize=(8, 4.2), dpi=100) as (fig, ax):
        if marks:
            for r in have:
                draw_marks(ax, placed(r, metric))
        drawn: List[float] = []
        for i, r in enumerate(have):
            pts = r.scalars()[metric]
            ys = smooth([p.value for p in pts], weight)
            drawn += ys
            ax.plot([p.step for p in pts], ys, color=f"C{i % 10}",
                    linewidth=2, marker="o" if len(pts) < 3 else None,
                    label=(labels or {}).get(id(r), r.name))
        band = y_limits(drawn)
        if band:
            ax.set_ylim(*band)
        ax.set_xlabel("step")
        ax.set_ylabel(metric + (f" (smoothed {weight})" if weight else ""))
        ax.set_title(title or metric, fontsize=10)
        ax.grid(True, alpha=0.3)
        # Below the axes: the legend never hides a line.
        ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.16), ncol=1, fontsize=8, frameon=False)
        if inspect is not None:
            inspect(fig, ax)
        return _png(fig)


def overlapping(row: Mapping[str, object]) -> bool:
    """Whether a run's phases add up to more than its step: a split (asynchronous) layout trains on one
    rollout while the next is generated, so rollout and train time overlap."""
    step = row.get("step_s")
    total = sum(float(row.get(k) or 0.0) for k in TIME_PARTS)
    return isinstance(step, (int, float)) and total > float(step) * 1.02


def time_bars_png(rows: Sequence[Mapping[str, object]]) -> Optional[bytes]:
    """Where a step's time goes, one stacked horizontal bar per run (means of the last steps).

    The measured step (``perf/step_time``) is drawn over each bar as a black tick: where the
    phases overlap (split layouts) the bar is longer than the step, and the legend says so."""
    have = [r for r in rows if any(r.get(k) is not None for k in TIME_PARTS)]
    if not have:
        return None
    plt = _pyplot()
    with _figure(plt, figsize=(8, 0.6 * len(have) + 1.8), dpi=100) as (fig, ax):
        left = [0.0] * len(have)
        names = [str(r.get("overrides") if r.get("overrides") not in (None, "-") else r["name"]) for r in have]
        for i, key in enumerate(TIME_PARTS):
            widths = [float(r.get(key) or 0.0) for r in have]
            ax.barh(range(len(have)), widths, left=left, color=f"C{i}", label=TIME_LABELS[key])
            left = [a + b for a, b in zip(left, widths)]
        steps = [(n, float(r["step_s"])) for n, r in enumerate(have) if isinstance(r.get("step_s"), (int, float))]
        if steps:
            label = "measured step" + (" (phases overlap: split layout)" if any(overlapping(r) for r in have)
                                       else "")
            ax.scatter([s for _, s in steps], [n for n, _ in steps], marker="|", s=900, color="black",
                       linewidths=2.5, zorder=3, label=label)
        ax.set_yticks(range(len(have)), [n[:60] for n in names], fontsize=8)
        ax.invert_yaxis()
        ax.set_xlabel("seconds per rollout step (mean of the last steps)")
        ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.25), ncol=3, fontsize=8, frameon=False)
        return _png(fig)


def _png(fig) -> bytes:
    """The figure as PNG bytes, laid out so that labels and the legend below the axes fit."""
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png")
    return buf.getvalue()


def write_exclusive(path: Path, data: bytes) -> None:
    """``path`` holds ``data`` whole or is untouched: a temp file created exclusively (``O_EXCL``, a
    random name) in the target folder, then renamed over the target. A link planted at any name in
    that folder is never written through; on failure the temp file is removed."""
    fd, tmp = tempfile.mkstemp(dir=str(path.parent), prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def _safe(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.=-]+", "_", text).strip("_") or "x"


def write_plots(runs: Sequence[Run], metrics: Sequence[str], out_dir: Path, *,
                weight: float = 0.0) -> Tuple[List[Path], List[str]]:
    """PNGs of each metric for each sweep (``<metric>__<sweep>.png``); returns (written, missing metrics)."""
    from clawgym.runs.table import differing_by_run

    out_dir.mkdir(parents=True, exist_ok=True)
    differing = differing_by_run(runs)
    written, missing = [], []
    for metric in metrics:
        found = False
        for name, mates in groups(runs).items():
            png = curves_png(mates, metric, weight=weight, title=f"{metric} - {name}",
                             labels={id(r): label(r, differing) for r in mates})
            if png is None:
                continue
            found = True
            path = out_dir / f"{_safe(metric)}__{_safe(name)}.png"
            write_exclusive(path, png)
            written.append(path)
        if not found:
            missing.append(metric)
    return written, missing
