"""What a run's monitors tripped on, recorded in its save dir beside the attempts.

``<save>/clawgym/health.jsonl``: one JSON line per verdict the supervisor acted on (a health rule of
clawgym/supervisor/rules.py, a hang of clawgym/supervisor/hang.py, the disk guard), appended when
the loop stops the job for it (clawgym/supervisor/loop.py). A line holds the time, the attempt and
its submission, the rule (the verdict's class), the action, the metric key, its value and the step
where the evidence names them, the evidence (masked) and the files the monitor wrote (a hang's
stack dump). ``clawgym runs`` counts the rules tripped, ``clawgym show`` lists them with the stack
files, ``clawgym report`` marks them on the curves.

The attempt the verdict ended is in attempts.json too (its class and evidence); this record adds
what a reader cannot get back from a line of text without guessing: the metric, the step, the files.
Append-only, one ``write`` per line: a reader skips a line it cannot parse (one cut by a crash).
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, List, Mapping, Optional

from clawgym.common.savedir import HEALTH_RELPATH, STACKS_RELPATH

#: "KEY = VALUE" as the rules write it (clawgym/supervisor/rules.py), the first one of the evidence.
_KEY_VALUE = re.compile(r"(?P<key>[A-Za-z_][\w.-]*/[\w./-]+) = (?P<value>[^\s,()]+)")
_RATE = re.compile(r"(?P<key>sandbox failure rate) (?P<value>[\d.]+%)")
_QUIET = re.compile(r"no new log output for (?P<value>\d+) s")
_DISK = re.compile(r"disk guard: .* has (?P<value>[\d.]+ [KMGT]?i?B) free")
#: The step the evidence names: "at step 3", "at train step 5", "at rollout 4", "(steps 3..5)".
_STEP = re.compile(r"at (?:train )?step (\d+)|at rollout (\d+)|steps \d+\.\.(\d+)")


@dataclass
class Trip:
    time: float
    rule: str  # the verdict's class: nan-loss, logprob-drift, zero-reward, sandbox-failures, hang, ...
    attempt: Optional[int] = None
    submission_id: Optional[str] = None
    action: Optional[str] = None  # "end" (the recovery table decides) or "stop" (for good)
    key: Optional[str] = None  # the metric the rule read (a hang: "stall_s")
    value: Optional[str] = None  # as the evidence shows it
    step: Optional[int] = None  # the step the evidence names (the metric's own step axis)
    evidence: str = ""
    files: List[str] = field(default_factory=list)  # e.g. <save>/stacks/stacks-<UTC>-hang.txt


def health_path(save_dir: str | os.PathLike) -> Path:
    return Path(save_dir) / HEALTH_RELPATH


def parse_evidence(evidence: str) -> dict:
    """The metric key, its value and the step a monitor's evidence line names (those it names)."""
    out: dict = {}
    m = _RATE.search(evidence) or _KEY_VALUE.search(evidence)
    if m:
        out.update(key=m.group("key"), value=m.group("value"))
    elif _QUIET.search(evidence):
        out.update(key="stall_s", value=_QUIET.search(evidence).group("value"))
    elif _DISK.search(evidence):
        out.update(key="disk_free", value=_DISK.search(evidence).group("value"))
    s = _STEP.search(evidence)
    if s:
        out["step"] = int(next(g for g in s.groups() if g is not None))
    return out


def record_trip(save_dir: str | os.PathLike, verdict: Any, attempt: Optional[int], submission_id: Optional[str],
                now: float, config: Optional[Mapping[str, Any]] = None) -> Optional[Trip]:
    """Append the verdict the supervisor acts on (None: nothing to record). ``verdict`` is a
    :class:`clawgym.supervisor.monitor.Verdict` (cls, evidence, action, files); the evidence is masked
    with ``config``'s secrets and the environment's. Never raises: a record that cannot be written
    must not change what the supervisor does."""
    if verdict is None:
        return None
    from clawgym.common.secrets import redact_text

    evidence = redact_text(str(getattr(verdict, "evidence", "") or ""), config)
    trip = Trip(time=float(now), rule=str(getattr(verdict, "cls", "") or "?"), attempt=attempt,
                submission_id=submission_id, action=getattr(verdict, "action", None), evidence=evidence,
                files=[str(f) for f in (getattr(verdict, "files", None) or [])], **parse_evidence(evidence))
    try:
        path = health_path(save_dir)
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(path, "a") as fh:
            fh.write(json.dumps(asdict(trip), sort_keys=True) + "\n")
    except OSError:
        return None
    return trip


def read_trips(save_dir: str | os.PathLike) -> List[Trip]:
    """The recorded trips of a save dir, oldest first; lines that do not parse are skipped."""
    try:
        lines = health_path(save_dir).read_text().splitlines()
    except (OSError, UnicodeDecodeError):
        return []
    known = set(Trip.__dataclass_fields__)
    out: List[Trip] = []
    for line in lines:
        try:
            data = json.loads(line)
            if isinstance(data, dict) and "time" in data and "rule" in data:
                out.append(Trip(**{k: v for k, v in data.items() if k in known}))
        except (ValueError, TypeError):
            continue
    return out


def stack_files(save_dir: str | os.PathLike) -> List[Path]:
    """The stack dumps in ``<save>/stacks/`` (the hang monitor's and ``clawgym jobs stack``'s), oldest first."""
    folder = Path(save_dir) / STACKS_RELPATH
    try:
        return sorted(p for p in folder.iterdir() if p.is_file() and p.name.startswith("stacks-"))
    except OSError:
        return []
