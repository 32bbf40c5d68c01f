"""The studies behind a report's runs: Optuna's own matplotlib figures of each tuner study.

A run is a tuner trial when its snapshot's origin names one (``clawgym.tuner`` records study,
storage and trial number there). The study is opened read-only from that storage (a journal
file, or an RDB URL; a URL whose password was masked when recorded cannot be opened, and the
report says so). Figures: optimization history, parameter importances (once two trials
completed) and the intermediate values every trial reported, pruned ones included. Optuna
and matplotlib are imported here only, when a report has trials.
"""

from __future__ import annotations

import io
import warnings
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple

from clawgym.runs.discover import Run


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


def figures(name: str, storage: str) -> Tuple[List[Tuple[str, bytes]], Optional[str], Dict[str, int]]:
    """([(title, png)], why none could be drawn, counts by trial state) of one study."""
    try:
        study = _open(name, storage)
    except Exception as exc:  # noqa: BLE001 - a report still renders without the study
        return [], f"the study could not be opened: {exc}", {}
    from optuna.visualization import matplotlib as vis

    counts: Dict[str, int] = {}
    for t in study.get_trials(deepcopy=False):
        counts[t.state.name.lower()] = counts.get(t.state.name.lower(), 0) + 1
    out = []
    for title, draw in (("optimization history", lambda: vis.plot_optimization_history(study)),
                        ("parameter importances", lambda: vis.plot_param_importances(study)),
                        ("intermediate values (pruned trials stop early)",
                         lambda: vis.plot_intermediate_values(study))):
        png = _png(draw)
        if png is not None:
            out.append((title, png))
    return out, None, counts
