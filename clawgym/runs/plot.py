"""PNG pictures of runs, drawn by matplotlib with its Agg backend (no display, no network).

Curves: a metric against its step, one line per run, sweep mates in one figure (runs outside a
sweep together), optionally smoothed as TensorBoard smooths (an exponential moving average
with the given weight, debiased at the start). Step time: one stacked bar per run.
"""

from __future__ import annotations

import io
import re
from pathlib import Path
from typing import Dict, List, Mapping, Optional, Sequence, Tuple

from clawgym.runs import events as ev
from clawgym.runs.discover import Run
from clawgym.runs.table import TIME_LABELS, TIME_PARTS


def _pyplot():
    import matplotlib

    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt

    return plt


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


def curves_png(runs: Sequence[Run], metric: str, *, weight: float = 0.0, title: Optional[str] = None,
               labels: Optional[Mapping[int, str]] = None) -> Optional[bytes]:
    """One figure of ``metric`` per step, a line per run that has it; None when none has it."""
    have = [r for r in runs if r.scalars().get(metric)]
    if not have:
        return None
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(8, 4.2), dpi=100)
    try:
        for i, r in enumerate(have):
            pts = r.scalars()[metric]
            ax.plot([p.step for p in pts], smooth([p.value for p in pts], weight), color=f"C{i % 10}",
                    linewidth=2, marker="o" if len(pts) < 3 else None,
                    label=(labels or {}).get(id(r), r.name))
        ax.set_xlabel("step")
        ax.set_ylabel(metric + (f" (smoothed {weight})" if weight else ""))
        ax.set_title(title or metric, fontsize=10)
        ax.grid(True, alpha=0.3)
        # Below the axes: the legend never hides a line.
        ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.16), ncol=1, fontsize=8, frameon=False)
        return _png(fig)
    finally:
        plt.close(fig)


def time_bars_png(rows: Sequence[Mapping[str, object]]) -> Optional[bytes]:
    """Where a step's time goes, one stacked horizontal bar per run (means of the last steps)."""
    have = [r for r in rows if any(r.get(k) is not None for k in TIME_PARTS)]
    if not have:
        return None
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(8, 0.6 * len(have) + 1.6), dpi=100)
    try:
        left = [0.0] * len(have)
        names = [str(r.get("overrides") if r.get("overrides") not in (None, "-") else r["name"]) for r in have]
        for i, key in enumerate(TIME_PARTS):
            widths = [float(r.get(key) or 0.0) for r in have]
            ax.barh(range(len(have)), widths, left=left, color=f"C{i}", label=TIME_LABELS[key])
            left = [a + b for a, b in zip(left, widths)]
        ax.set_yticks(range(len(have)), [n[:60] for n in names], fontsize=8)
        ax.invert_yaxis()
        ax.set_xlabel("seconds per rollout step (mean of the last steps)")
        ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.25), ncol=len(TIME_PARTS), fontsize=8, frameon=False)
        return _png(fig)
    finally:
        plt.close(fig)


def _png(fig) -> bytes:
    """The figure as PNG bytes, laid out so that labels and the legend below the axes fit."""
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png")
    return buf.getvalue()


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
            tmp = path.with_name(f".{path.name}.tmp")
            tmp.write_bytes(png)
            tmp.replace(path)
            written.append(path)
        if not found:
            missing.append(metric)
    return written, missing
