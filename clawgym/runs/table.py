"""One row per run: the columns of ``clawgym runs``, sorting, filtering, text and JSON.

Every value comes from the run's snapshots (what ran), its events (what happened, slime's
keys: see :mod:`clawgym.runs.events`) and its status (:mod:`clawgym.runs.status`). Numbers
over steps are means of the last ``last`` rollout steps, so one slow warm-up step does not
decide a comparison.
"""

from __future__ import annotations

import json
import operator
import re
import time
from dataclasses import dataclass
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple

from clawgym.runs import events as ev
from clawgym.runs.discover import Run

#: slime's keys behind the columns (slime/ray/rollout.py, slime/backends/megatron_utils/data.py,
#: slime/utils/train_metric_utils.py).
RAW_REWARD = "rollout/raw_reward"
STEP_TAGS = ("rollout/raw_reward", "perf/rollout_time", "perf/step_time")
TOKENS_PER_GPU = "perf/tokens_per_gpu_per_sec"
TRAIN_TOKENS = "perf/actor_train_tok_per_s"
STEP_TIME = "perf/step_time"
#: Where a step's time goes: column key -> the perf tags it sums.
TIME_PARTS: Dict[str, Tuple[str, ...]] = {
    "rollout_s": ("perf/rollout_time",),
    "log_probs_s": ("perf/log_probs_time", "perf/ref_log_probs_time"),
    "train_s": ("perf/actor_train_time",),
    "update_s": ("perf/update_weights_time",),
    "wait_s": ("perf/train_wait_time",),
}
TIME_LABELS = {"rollout_s": "rollout", "log_probs_s": "log-probs", "train_s": "train", "update_s": "weight update",
               "wait_s": "waiting"}
_STAMP = re.compile(r"(\d{8}_\d{6})$")


#: Overrides that say where and how a run ran, not what it trained: left out of the overrides column
#: (a sweep's per-job API ports, the checkout, the Ray head's ports, the GPU the memory plan assumed).
PLUMBING = ("hydra.", "paths.", "ray.", "cluster.", "slurm.", "kuberay.", "memory.", "wandb.", "metrics.",
            "sglang.api_port", "sglang.api_host", "services.teacher.port", "run_name", "exp_name", "skip_checks",
            "dry_run", "preflight_only")
#: Widest cell of the overrides column in the text table (--json keeps them whole).
OVERRIDES_WIDTH = 48


def is_plumbing(key: str) -> bool:
    return any(key == p.rstrip(".") or (p.endswith(".") and key.startswith(p)) for p in PLUMBING)


@dataclass(frozen=True)
class Column:
    key: str
    header: str
    kind: str = "text"  # text | num | time | duration | secs
    width: int = 0  # widest cell in the text table; 0: unbounded


BASE_COLUMNS: Tuple[Column, ...] = (
    Column("name", "run"), Column("status", "status"), Column("flavour", "flavour"), Column("model", "model"),
    Column("layout", "layout"), Column("sweep", "sweep"),
    Column("overrides", "overrides", width=OVERRIDES_WIDTH),
    Column("started", "started", "time"), Column("duration", "duration", "duration"),
    Column("steps", "steps", "num"),
    # The supervisor's view from the run's own files: last step age, rules tripped (health.jsonl),
    # complete checkpoints / disk free; and from its attempts.json (clawgym/snapshot/attempts.py),
    # shown when a run has one: attempts, the last class, the GPU time lost to restarts (runs/lost.py).
    Column("health", "health"),
    Column("attempts", "attempts", "num"), Column("last_class", "last class"),
    Column("gpu_time_lost_s", "GPU time lost", "gpuh"),
)
TAIL_COLUMNS: Tuple[Column, ...] = (
    Column("reward", "reward(last N)", "num"), Column("tok_s_gpu", "tok/s/GPU", "num"),
    Column("train_tok_s", "train tok/s", "num"), Column("step_s", "step", "secs"),
    *(Column(k, TIME_LABELS[k], "secs") for k in TIME_PARTS),
)


def sweep_of(run: Run) -> Optional[str]:
    """Sweep mates share the experiment and the one timestamp their sweep planned them with;
    a tuner's trials share their study."""
    snap = run.latest
    if snap is None or (snap.meta.get("origin") or {}).get("command") != "sweep":
        return None
    study = (snap.meta.get("origin") or {}).get("tuner")
    if isinstance(study, dict) and study.get("study"):
        return f"study {study['study']}"
    stamp = _STAMP.search(str(snap.meta.get("submission_id") or snap.plan.get("submission_id") or ""))
    return f"{snap.meta.get('exp_name') or run.config.get('exp_name')} {stamp.group(1) if stamp else '?'}"


def _layout(run: Run) -> str:
    snap = run.latest
    if snap is None:
        return "-"
    if snap.choices and snap.choices.get("gpu_layout"):
        return str(snap.choices["gpu_layout"])
    g = run.config.get("gpu_layout") or {}
    if g.get("colocate"):
        return f"colocate {g.get('actor_gpus')}"
    return f"split {g.get('actor_gpus')}+{g.get('rollout_gpus')}"


def _user_overrides(run: Run) -> List[str]:
    """The run's recorded overrides the user asked for: keys written on its command line (a sweep
    adds ``run_name`` and per-job API ports of its own, which tell nothing)."""
    snap = run.latest
    if snap is None:
        return []
    # Overrides on the command line (an option such as --basetemp=DIR of another program is none).
    typed = {a.split("=", 1)[0].lstrip("+~") for a in (snap.meta.get("command") or [])[1:]
             if "=" in a and not a.startswith("-")}
    out = []
    for o in snap.overrides or []:
        key = o.split("=", 1)[0].lstrip("+~")
        if is_plumbing(key):
            continue
        if typed and key not in typed:
            continue
        out.append(o)
    return out


def differing_by_run(runs: Sequence[Run]) -> Dict[int, List[str]]:
    """id(run) -> its overrides that tell it apart from its sweep mates (runs outside a sweep:
    from the other runs outside a sweep)."""
    from clawgym.common.overrides import differing_overrides

    groups: Dict[Optional[str], List[Run]] = {}
    for r in runs:
        groups.setdefault(sweep_of(r), []).append(r)
    out: Dict[int, List[str]] = {}
    for mates in groups.values():
        ovs = [_user_overrides(r) for r in mates]
        diff = differing_overrides(ovs) if len(mates) > 1 else [[] for _ in mates]
        for r, d in zip(mates, diff):
            out[id(r)] = d
    return out


#: Columns of a tuner's trials (clawgym/tuner): shown when a run is one.
TRIAL_COLUMNS: Tuple[Column, ...] = (Column("trial", "trial", "num"), Column("trial_state", "trial state"),
                                     Column("objective", "objective", "num"))


def trial_of(run: Run) -> Dict[str, Any]:
    """A tuner trial's number, state and objective, from what the tuner recorded beside the run's
    snapshot (meta.json's origin, then trial.json once it ended); {} for a run that is no trial."""
    snap = run.latest
    tuner = ((snap.meta.get("origin") or {}).get("tuner") if snap is not None else None) or {}
    if not isinstance(tuner, dict) or "trial" not in tuner:
        return {}
    out = {"trial": tuner.get("trial"), "trial_state": "running" if run.status == "running" else None,
           "objective": None, "study": tuner.get("study"), "metric": tuner.get("metric"),
           "direction": tuner.get("direction"), "params": tuner.get("params") or {}}
    try:
        ended = json.loads((snap.path / "trial.json").read_text())
        out.update({"trial_state": ended.get("state"), "objective": ended.get("objective")})
    except (OSError, ValueError, AttributeError):
        pass
    return out


def metric_tags(runs: Sequence[Run], metrics: Optional[Sequence[str]]) -> List[str]:
    """The tags of the latest/best columns: the ones asked for, else every eval set's reward."""
    if metrics:
        return list(metrics)
    tags = {t for r in runs for t in r.scalars()}
    return ev.eval_sets(sorted(tags))


def steps_done(s: Mapping[str, List[ev.Point]]) -> Tuple[int, Optional[int]]:
    steps = {p.step for tag in STEP_TAGS for p in s.get(tag, [])}
    return len(steps), (max(steps) if steps else None)


def _sum_parts(s: Mapping[str, List[ev.Point]], tags: Sequence[str], last: int) -> Optional[float]:
    values = [ev.mean_last(s.get(t), last) for t in tags]
    values = [v for v in values if v is not None]
    return sum(values) if values else None


def _health(run: Run, s: Mapping[str, List[ev.Point]], now: float) -> Dict[str, Any]:
    """What the supervisor watches, as the run's own files show it: seconds since the newest logged
    point (a hang shows as a growing age while running), complete checkpoints (at or below Megatron's
    tracker) and the save dir's free space (the disk guard's numbers)."""
    import shutil

    from clawgym.snapshot.checkpoints import list_checkpoints

    walls = [p.wall_time for pts in s.values() for p in pts]
    try:
        free: Optional[int] = shutil.disk_usage(run.save_dir).free
    except OSError:
        free = None
    from clawgym.snapshot.health import read_trips

    trips = read_trips(run.save_dir)
    out = {"last_step_age_s": (now - max(walls)) if walls else None,
           "checkpoints_complete": sum(1 for c in list_checkpoints(run.save_dir) if c.complete),
           "disk_free_bytes": free,
           "rules_tripped": [t.rule for t in trips],
           "trips": [{"rule": t.rule, "time": t.time, "attempt": t.attempt, "key": t.key, "value": t.value,
                      "step": t.step, "action": t.action, "files": t.files} for t in trips]}
    out["health"] = health_cell(out)
    return out


def _bytes(n: float) -> str:
    for unit in ("B", "K", "M", "G", "T"):
        if n < 1024 or unit == "T":
            return f"{n:.0f}{unit}" if unit == "B" or n >= 10 else f"{n:.1f}{unit}"
        n /= 1024
    return f"{n:.0f}T"


def _age(seconds: float) -> str:
    for size, unit in ((86400, "d"), (3600, "h"), (60, "m")):
        if seconds >= size:
            return f"{seconds / size:.0f}{unit}"
    return f"{max(0.0, seconds):.0f}s"


def health_cell(h: Mapping[str, Any]) -> str:
    """The health column, compact: the newest step's age (while running, a hang shows as an age that
    grows), the rules tripped (x N when one tripped more than once), complete checkpoints / disk free.
    E.g. ``step 3m ago; tripped hang, nan-loss x2; 4 ckpt/120G free``."""
    parts = []
    age = h.get("last_step_age_s")
    if age is None:
        parts.append("no step yet")
    else:
        parts.append(f"step {_age(age)} ago")
    rules = list(h.get("rules_tripped") or [])
    if rules:
        counts = {r: rules.count(r) for r in dict.fromkeys(rules)}
        parts.append("tripped " + ", ".join(r + (f" x{n}" if n > 1 else "") for r, n in counts.items()))
    free = h.get("disk_free_bytes")
    parts.append(f"{h.get('checkpoints_complete', 0)} ckpt/{_bytes(free) if free is not None else '?'} free")
    return "; ".join(parts)


def build_rows(runs: Sequence[Run], *, metrics: Optional[Sequence[str]] = None, last: int = 5,
               resolve_status: bool = True, now: Optional[float] = None) -> Tuple[List[Dict[str, Any]], List[Column]]:
    """(rows, columns): one dict per run (raw values; ``None`` = not known), and the columns to show."""
    from clawgym.runs.status import StatusCache, recorded_times, resolve
    from clawgym.snapshot.attempts import read_attempts

    now = time.time() if now is None else now
    cache = StatusCache()
    tags = metric_tags(runs, metrics)
    differing = differing_by_run(runs)
    rows = []
    for r in runs:
        if resolve_status and r.status is None:
            resolve(r, cache)
        s = r.scalars()
        c = r.config
        n_steps, last_step = steps_done(s)
        # What clawgym recorded comes first (the first launch's submission, the latest launch's end):
        # the duration does not change with whether the Ray dashboard still answers.
        started, end, ended_as = recorded_times(r)
        started = started or r.job.get("start_time") or None
        if r.status == "running":
            end = now
        elif end is None:
            end = r.job.get("end_time")
        if end is None:
            walls = [p.wall_time for pts in s.values() for p in pts]
            end = max(walls) if walls else None
        if r.status in (None, "unknown") and ended_as:
            # The cluster is gone (or never asked): the end the launcher saw.
            r.status = ended_as
        row: Dict[str, Any] = {
            "name": r.name,
            "status": r.status or "unknown",
            "status_detail": r.status_detail,
            "flavour": str((c.get("trainer") or {}).get("flavour") or ("clawgym" if c else "-")),
            "model": str((c.get("model") or {}).get("name") or "-"),
            "layout": _layout(r),
            "sweep": sweep_of(r) or "-",
            "overrides": " ".join(differing.get(id(r), [])) or "-",
            "started": started,
            "duration": (end - started) if (started and end and end >= started) else None,
            "steps": n_steps,
            "last_step": last_step,
            "reward": ev.mean_last(s.get(RAW_REWARD), last),
            "tok_s_gpu": ev.mean_last(s.get(TOKENS_PER_GPU), last),
            "train_tok_s": ev.mean_last(s.get(TRAIN_TOKENS), last),
            "step_s": ev.mean_last(s.get(STEP_TIME), last),
            **{k: _sum_parts(s, parts, last) for k, parts in TIME_PARTS.items()},
            "save_dir": str(r.save_dir),
            "submission_id": r.submission_id,
            "launches": len(r.snapshots),
            "events": [str(p) for p in r.events_dirs()],
            "problems": list(r.problems) + list(getattr(s, "notes", [])),
            **_health(r, s, now),
        }
        attempts = read_attempts(r.save_dir)
        if attempts.attempts:
            from clawgym.runs.lost import lost_of_run

            ended = [a for a in attempts.attempts if a.cls]
            total, per = lost_of_run(r, attempts.attempts, now)
            row.update({"attempts": len(attempts.attempts), "last_class": ended[-1].cls if ended else None,
                        "stopped": attempts.stopped, "gpu_time_lost_s": total,
                        "gpu_time_lost": [{"after_attempt": x.after_attempt, "idle_s": x.idle_s,
                                           "redone_steps": x.redone, "gpu_s": x.lost_s} for x in per]})
        trial = trial_of(r)
        if trial:
            row.update({k: trial[k] for k in ("trial", "trial_state", "objective")})
            row["trial_direction"] = trial.get("direction")
        for tag in tags:
            pts = s.get(tag)
            lp, bp = ev.latest(pts), ev.best(pts)
            row[tag] = lp.value if lp else None
            row[f"{tag}:best"] = bp.value if bp else None
            row[f"{tag}:step"] = lp.step if lp else None
        rows.append(row)
    columns = list(BASE_COLUMNS)
    if any("trial" in row for row in rows):
        at = columns.index(next(c for c in columns if c.key == "sweep")) + 1
        columns[at:at] = list(TRIAL_COLUMNS)
    for tag in tags:
        columns += [Column(tag, tag, "num"), Column(f"{tag}:best", f"best {tag}", "num")]
    columns += [Column(c.key, f"reward(last {last or 'all'})", c.kind) if c.key == "reward" else c
                for c in TAIL_COLUMNS]
    return rows, columns


# ---------------------------------------------------------------- sort / where

_OPS: List[Tuple[str, Callable[[Any, Any], bool]]] = [
    (">=", operator.ge), ("<=", operator.le), ("!=", operator.ne), ("=", operator.eq), (">", operator.gt),
    ("<", operator.lt)]


def _num(value: Any) -> Optional[float]:
    if isinstance(value, bool):
        return None
    if isinstance(value, (int, float)):
        return float(value)
    try:
        return float(str(value))
    except ValueError:
        return None


def parse_where(text: str, keys: Sequence[str]) -> Tuple[str, str, Callable[[Any, Any], bool]]:
    """``key=value`` (also !=, >, <, >=, <=) -> (key, value, op); ValueError names a known key."""
    for sym, op in _OPS:
        if sym in text:
            key, value = text.split(sym, 1)
            key = key.strip()
            if key not in keys:
                raise ValueError(f"--where {text!r}: no column {key!r}; columns: {', '.join(keys)}")
            return key, value.strip(), op
    raise ValueError(f"--where {text!r}: expected KEY=VALUE (or KEY!=, KEY>, KEY<, KEY>=, KEY<= VALUE)")


def matches(row: Mapping[str, Any], key: str, value: str, op: Callable[[Any, Any], bool]) -> bool:
    have = row.get(key)
    a, b = _num(have), _num(value)
    if a is not None and b is not None:
        return op(a, b)
    if op in (operator.eq, operator.ne):
        return op(str(have if have is not None else "-"), value)
    return False


def apply(rows: List[Dict[str, Any]], *, where: Sequence[str] = (), sort: Optional[str] = None,
          keys: Sequence[str] = ()) -> List[Dict[str, Any]]:
    """Filter by every ``where`` and sort by ``sort`` (``-key`` descending; unknown values last)."""
    for w in where:
        key, value, op = parse_where(w, keys)
        rows = [r for r in rows if matches(r, key, value, op)]
    if sort:
        key = sort.lstrip("-")
        if key not in keys:
            raise ValueError(f"--sort {sort!r}: no column {key!r}; columns: {', '.join(keys)}")
        known = [r for r in rows if r.get(key) is not None]
        unknown = [r for r in rows if r.get(key) is None]
        numeric = all(_num(r[key]) is not None for r in known)
        known.sort(key=lambda r: _num(r[key]) if numeric else str(r[key]), reverse=sort.startswith("-"))
        rows = known + unknown
    return rows


# ---------------------------------------------------------------- text and JSON

def fmt(value: Any, kind: str) -> str:
    if value is None:
        return "-"
    if kind == "time":
        return time.strftime("%Y-%m-%d %H:%M", time.localtime(value))
    if kind == "duration":
        from clawgym.common.text import fmt_duration

        return fmt_duration(value)
    if kind == "secs":
        return f"{value:.3g}s"
    if kind == "gpuh":
        return f"{value / 3600:.3g} GPU-h"
    if kind == "list":
        return ", ".join(str(v) for v in value) or "-"
    if kind == "num" and isinstance(value, float):
        return f"{value:.4g}"
    return str(value)


def _bounded(text: str, width: int) -> str:
    return text if not width or len(text) <= width else text[: width - 3] + "..."


def shown_columns(rows: Sequence[Mapping[str, Any]], columns: Sequence[Column], chosen: bool = False) -> List[Column]:
    """The columns to show: all of ``chosen`` ones (``--columns``), else those some row has a value for."""
    if chosen:
        return list(columns)
    return [c for c in columns if c.key in ("name", "status") or any(r.get(c.key) not in (None, "-", [])
                                                                     for r in rows)]


#: Row keys --columns, --sort and --where also know, beyond the table's columns.
EXTRA_KEYS: Tuple[Column, ...] = (
    Column("last_step", "last step", "num"), Column("submission_id", "submission id"),
    Column("save_dir", "save dir"), Column("launches", "launches", "num"),
    Column("last_step_age_s", "last step age", "secs"), Column("checkpoints_complete", "checkpoints", "num"),
    Column("disk_free_bytes", "disk free", "num"), Column("rules_tripped", "rules tripped", "list"),
)


def choose_columns(columns: Sequence[Column], spec: str) -> List[Column]:
    """``--columns a,b,c``: those columns in that order; ValueError naming the closest valid key and
    every valid one for a key that is none."""
    import difflib

    known = {c.key: c for c in [*columns, *EXTRA_KEYS]}
    keys = [k.strip() for k in spec.split(",") if k.strip()]
    if not keys:
        raise ValueError(f"--columns {spec!r}: name at least one column, e.g. --columns name,status,reward")
    for k in keys:
        if k not in known:
            close = difflib.get_close_matches(k, list(known), n=1, cutoff=0.5)
            hint = f"; did you mean {close[0]!r}?" if close else ""
            raise ValueError(f"--columns: no column {k!r}{hint}\n  columns: {', '.join(known)}")
    return [known[k] for k in dict.fromkeys(keys)]


def format_table(rows: Sequence[Mapping[str, Any]], columns: Sequence[Column], chosen: bool = False) -> str:
    """A plain-text table; columns no row has a value for are left out (unless ``chosen``)."""
    shown = shown_columns(rows, columns, chosen)
    cells = [[c.header for c in shown]] + [[_bounded(fmt(r.get(c.key), c.kind), c.width) for c in shown] for r in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(shown))]
    lines = []
    for n, row in enumerate(cells):
        lines.append("  ".join(v.ljust(w) for v, w in zip(row, widths)).rstrip())
        if n == 0:
            lines.append("  ".join("-" * w for w in widths))
    return "\n".join(lines)


def _strict(value: Any) -> Any:
    """JSON has no NaN or infinity: a metric that logged one is ``null`` (Python's json would write a
    bare ``NaN`` that strict parsers refuse)."""
    if isinstance(value, float) and (value != value or value in (float("inf"), float("-inf"))):
        return None
    if isinstance(value, dict):
        return {k: _strict(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_strict(v) for v in value]
    return value


def to_json(rows: Sequence[Mapping[str, Any]], keys: Optional[Sequence[str]] = None) -> str:
    """The rows as JSON (only ``keys``, in that order, when given: ``--columns``)."""
    if keys is not None:
        rows = [{k: r.get(k) for k in keys} for r in rows]
    return json.dumps(_strict(list(rows)), indent=2, sort_keys=False, allow_nan=False) + "\n"
