"""The studies behind a report's runs: Optuna's own matplotlib figures of each tuner study.

A run is a tuner trial when its snapshot's origin names one (``clawgym.tuner`` records study,
storage and trial number there). The study is opened read-only from that storage (a journal
file, or an RDB URL; a URL whose password was masked when recorded cannot be opened, and the
report says so). Figures: optimization history, parameter importances (once IMPORTANCE_MIN_COMPLETE
trials completed; before that the report says so instead of drawing a ranking from a handful of
points) and the intermediate values every trial reported, pruned ones included. Trials that never
ran or failed (refused by validation or preflight: no save dir, so no run in the report) are listed
with their reasons. Optuna and matplotlib are imported here only, when a report has trials.
"""

from __future__ import annotations

import io
import warnings
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple

from clawgym.runs.discover import Run

#: Completed trials before parameter importances are drawn. Optuna draws them from two; its
#: default evaluator fits a random forest to the completed trials, and with a few points per
#: searched value the bars are noise that reads as a ranking. A judgment, stated in the report.
IMPORTANCE_MIN_COMPLETE = 10


def studies(runs: Sequence[Run]) -> Dict[Tuple[str, str], List[Run]]:
    """(study name, storage) -> its trials among ``runs``."""
    out: Dict[Tuple[str, str], List[Run]] = {}
    for r in runs:
        snap = r.latest
        tuner = ((snap.meta.get("origin") or {}).get("tuner") if snap is not None else None) or {}
        if isinstance(tuner, dict) and tuner.get("study") and tuner.get("storage"):
            out.setdefault((str(tuner["study"]), str(tuner["storage"])), []).append(r)
    return out


def _open(name: str, storage: str):
    import optuna

    optuna.logging.set_verbosity(optuna.logging.ERROR)
    if "://" in storage:
        if "***" in storage:
            raise RuntimeError(f"its storage {storage} was recorded without its password")
        return optuna.load_study(study_name=name, storage=storage)
    if not Path(storage).is_file():
        raise RuntimeError(f"its journal file {storage} is gone")
    from optuna.storages import JournalStorage
    from optuna.storages.journal import JournalFileBackend

    return optuna.load_study(study_name=name, storage=JournalStorage(JournalFileBackend(storage)))


def _png(draw) -> Optional[bytes]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # Optuna marks its matplotlib figures experimental
        try:
            ax = draw()
        except (ValueError, RuntimeError, ZeroDivisionError):
            return None  # e.g. importances with fewer than two completed trials
    fig = ax.figure if hasattr(ax, "figure") else ax[0].figure
    fig.set_size_inches(7, 4)
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=90)
    plt.close(fig)
    return buf.getvalue()


def trial_state(t) -> str:
    """A trial's state as clawgym names it: a refused or interrupted trial is told FAIL to Optuna."""
    if t.user_attrs.get("clawgym_refused"):
        return "refused"
    if t.user_attrs.get("clawgym_interrupted"):
        return "interrupted"
    return t.state.name.lower()


def figures(name: str, storage: str) -> Tuple[List[Tuple[str, bytes]], Optional[str], Dict[str, int],
                                              List[str], List[Tuple[int, str, str]]]:
    """([(title, png)], why none could be drawn, counts by trial state, notes on figures not drawn,
    [(number, state, reason)] of the trials that were refused or failed) of one study."""
    try:
        study = _open(name, storage)
    except Exception as exc:  # noqa: BLE001 - a report still renders without the study
        return [], f"the study could not be opened: {exc}", {}, [], []
    from optuna.visualization import matplotlib as vis

    counts: Dict[str, int] = {}
    unran: List[Tuple[int, str, str]] = []
    for t in study.get_trials(deepcopy=False):
        state = trial_state(t)
        counts[state] = counts.get(state, 0) + 1
        if state in ("refused", "fail"):
            reason = str(t.user_attrs.get("clawgym_refused") or t.user_attrs.get("clawgym_reason") or "")
            unran.append((t.number, "failed" if state == "fail" else state, reason))
    complete = counts.get("complete", 0)
    notes: List[str] = []
    charts = [("optimization history", lambda: vis.plot_optimization_history(study))]
    if complete >= IMPORTANCE_MIN_COMPLETE:
        charts.append(("parameter importances", lambda: vis.plot_param_importances(study)))
    else:
        notes.append(f"Parameter importances are not drawn: {complete} trial(s) completed, and a ranking of the "
                     f"searched keys needs at least {IMPORTANCE_MIN_COMPLETE}.")
    charts.append(("intermediate values (pruned trials stop early)", lambda: vis.plot_intermediate_values(study)))
    out = []
    for title, draw in charts:
        png = _png(draw)
        if png is not None:
            out.append((title, png))
    return out, None, counts, notes, unran
