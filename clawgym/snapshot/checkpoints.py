"""Checkpoints of a save dir and the snapshots placed into them: Megatron's tracker and the
``iter_*`` dirs, what a save dir holds at launch, placing a snapshot into a checkpoint, the
watcher that stamps each checkpoint a followed run writes, and stamping after the fact
(``clawgym stamp``). Why and when a checkpoint is stamped: the package doc (:mod:`clawgym.snapshot`)."""

from __future__ import annotations

import json
import os
import re
import shutil
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

from clawgym.common.fsutil import write_synced
from clawgym.snapshot.layout import META_FILE, STAMP_DIRNAME, STAMP_FILE, TRACKER_FILE, SnapshotError, read_json
from clawgym.snapshot.manifest import verify_snapshot
from clawgym.snapshot.read import Snapshot, list_snapshots

ITER_RE = re.compile(r"^iter_(\d{7,})$")


# ---------------------------------------------------------------- checkpoints

@dataclass
class Checkpoint:
    """One ``iter_XXXXXXX`` dir of a save dir."""

    # Megatron iteration (slime's rollout id).
    iteration: int
    path: Path
    # meta.json of the snapshot placed into it, None when it carries none.
    stamp: Optional[Dict[str, Any]]
    # At or below the tracker: the save finished.
    complete: bool

    @property
    def stamp_id(self) -> Optional[str]:
        return self.stamp.get("id") if self.stamp else None


def read_tracker(save_dir: str | os.PathLike) -> Optional[int]:
    """The iteration in ``latest_checkpointed_iteration.txt``, None when absent or not a number."""
    try:
        text = (Path(save_dir) / TRACKER_FILE).read_text().strip()
    except OSError:
        return None
    return int(text) if text.isdigit() else None


def _tracker_state(save_dir: Path) -> Tuple[Optional[int], Optional[int]]:
    """(iteration, mtime_ns) of the tracker: a rewrite shows even when the number repeats."""
    try:
        mtime = (save_dir / TRACKER_FILE).stat().st_mtime_ns
    except OSError:
        return None, None
    return read_tracker(save_dir), mtime


def _iter_dirs(save_dir: Path) -> Dict[int, Path]:
    out: Dict[int, Path] = {}
    try:
        entries = list(save_dir.iterdir())
    except OSError:
        return out
    for entry in entries:
        m = ITER_RE.match(entry.name)
        if m and entry.is_dir():
            out[int(m.group(1))] = entry
    return out



def list_checkpoints(save_dir: str | os.PathLike) -> List[Checkpoint]:
    save = Path(save_dir)
    tracker = read_tracker(save)
    return [Checkpoint(it, p, read_json(p / STAMP_DIRNAME / META_FILE), tracker is not None and it <= tracker)
            for it, p in sorted(_iter_dirs(save).items())]


def has_checkpoint(save_dir: str | os.PathLike) -> bool:
    """True when the trainer's ``--load`` would find a checkpoint to continue from."""
    return read_tracker(save_dir) is not None and any(c.complete for c in list_checkpoints(save_dir))


def _fingerprint(ckpt: Path) -> int:
    """Newest mtime among a checkpoint's own entries: changes when the trainer rewrites it."""
    newest = 0
    try:
        entries = list(ckpt.iterdir())
    except OSError:
        return newest
    for entry in entries:
        if entry.name.startswith(".") or entry.name == STAMP_DIRNAME:
            continue
        try:
            newest = max(newest, entry.stat().st_mtime_ns)
        except OSError:
            pass
    return newest


def checkpoint_baseline(save_dir: str | os.PathLike) -> Dict[str, Any]:
    """What a save dir holds at launch; later checkpoints belong to the new run."""
    save = Path(save_dir)
    tracker, mtime = _tracker_state(save)
    dirs = _iter_dirs(save)
    return {"tracker": tracker, "tracker_mtime_ns": mtime, "iterations": sorted(dirs),
            "fingerprints": {str(it): _fingerprint(p) for it, p in sorted(dirs.items())}}


# ---------------------------------------------------------------- stamping checkpoints

def place_snapshot(snapshot_dir: str | os.PathLike, checkpoint_dir: str | os.PathLike, *,
                   replace: bool = False, by: str = "watcher") -> bool:
    """Copy a snapshot into a checkpoint dir atomically; True when it placed it.

    Skips a checkpoint that already carries this snapshot, and one carrying another
    snapshot unless ``replace`` (the current run rewrote that checkpoint).
    """
    src, ckpt = Path(snapshot_dir), Path(checkpoint_dir)
    verify_snapshot(src)  # a damaged snapshot is never copied into checkpoints
    target = ckpt / STAMP_DIRNAME
    my_id = (read_json(src / META_FILE) or {}).get("id")
    existing = read_json(target / META_FILE)
    if existing is not None and (existing.get("id") == my_id or not replace):
        return False
    tag = f"{os.getpid()}-{threading.get_ident()}"
    tmp, old = ckpt / f".{STAMP_DIRNAME}.tmp-{tag}", ckpt / f".{STAMP_DIRNAME}.old-{tag}"
    try:
        # File by file into a fresh dir (snapshots are flat): copytree would recreate a
        # checkpoint dir that Megatron's retention deleted meanwhile.
        os.mkdir(tmp)
        for f in sorted(src.iterdir()):
            shutil.copyfile(f, tmp / f.name)
        write_synced(tmp / STAMP_FILE, json.dumps({"iteration": _iteration_of(ckpt), "stamped_by": by,
                                                  "stamped_at": time.time()}) + "\n")
        if target.exists():
            os.rename(target, old)
        try:
            os.rename(tmp, target)
        except OSError:
            # Someone placed one meanwhile (a non-empty target is never replaced by rename).
            if old.exists() and not target.exists():
                os.rename(old, target)
            return False
        return True
    finally:
        for leftover in (tmp, old):
            if leftover.exists():
                shutil.rmtree(leftover, ignore_errors=True)


def _iteration_of(ckpt: Path) -> Optional[int]:
    m = ITER_RE.match(ckpt.name)
    return int(m.group(1)) if m else None


class CheckpointWatcher:
    """Places a launch's snapshot into each checkpoint its run writes, while the job runs.

    Polls ``save_dir`` every ``poll_interval`` seconds in a daemon thread. A checkpoint is
    stamped once complete (the tracker reached it) and only if this run wrote it: absent
    when the snapshot was taken (its ``checkpoints_at_launch``), or the one the tracker
    moves to after launch. ``stop()`` does a last scan, so a checkpoint written just before
    the job ended is stamped too. Errors (e.g. a checkpoint deleted by Megatron's retention
    while copying) are collected in ``errors`` and never stop the watcher. See the module
    doc for detached launches and save dirs the launcher cannot see.
    """

    def __init__(self, save_dir: str | os.PathLike, snapshot_path: str | os.PathLike, *,
                 poll_interval: float = 2.0):
        self.save_dir = Path(save_dir)
        self.snapshot_path = Path(snapshot_path)
        self.poll_interval = poll_interval
        meta = read_json(self.snapshot_path / META_FILE)
        if meta is None:
            raise SnapshotError(f"clawgym: {self.snapshot_path} is not a clawgym snapshot")
        self.snapshot_id: str = meta["id"]
        # Without a recorded baseline (older snapshot), what is there now predates the run.
        baseline = meta.get("checkpoints_at_launch") or checkpoint_baseline(self.save_dir)
        self._before = set(baseline["iterations"])
        self._fingerprints = {int(k): v for k, v in (baseline.get("fingerprints") or {}).items()}
        self._launch_tracker = (baseline["tracker"], baseline["tracker_mtime_ns"])
        self._seen_tracker = self._launch_tracker
        self._rewritten: set = set()
        #: Iterations stamped by this watcher, in order.
        self.stamped: List[int] = []
        #: Problems met while stamping (the watcher keeps going).
        self.errors: List[str] = []
        self._stop = threading.Event()
        self._thread: Optional[threading.Thread] = None
        self._lock = threading.Lock()

    def scan(self) -> List[int]:
        """Stamp what is due now; returns the iterations stamped by this scan."""
        with self._lock:
            state = _tracker_state(self.save_dir)
            latest = state[0]
            if latest is None:
                return []
            dirs = _iter_dirs(self.save_dir)
            if state != self._seen_tracker and state != self._launch_tracker:
                # The trainer just finished iter_<latest>, even if that number existed at launch
                # (a run started without --load rewrites the old numbers). Earlier rewrites show
                # in the files' mtimes; checked only when the tracker moves, so polling stays cheap.
                self._rewritten.add(latest)
                for it in self._before - self._rewritten:
                    if it in dirs and it <= latest and _fingerprint(dirs[it]) != self._fingerprints.get(it):
                        self._rewritten.add(it)
            self._seen_tracker = state
            due = {it: p for it, p in dirs.items()
                   if it <= latest and (it not in self._before or it in self._rewritten)}
            done = []
            for it, path in sorted(due.items()):
                try:
                    if place_snapshot(self.snapshot_path, path, replace=True):
                        done.append(it)
                except OSError as exc:
                    self.errors.append(f"{path}: {exc}")
            self.stamped += done
            return done

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self.scan()
            except Exception as exc:  # noqa: BLE001 - a watcher must outlive surprises
                self.errors.append(f"scan: {exc!r}")
            self._stop.wait(self.poll_interval)

    def start(self) -> "CheckpointWatcher":
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="clawgym-checkpoint-watcher", daemon=True)
            self._thread.start()
        return self

    def stop(self) -> List[int]:
        """Stop polling, do one final scan, and return every iteration stamped."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None
        self.scan()
        return list(self.stamped)

    def __enter__(self) -> "CheckpointWatcher":
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()


def assign_checkpoints(save_dir: str | os.PathLike) -> Dict[int, Optional[Snapshot]]:
    """Which snapshot each complete checkpoint belongs to, from the launch records alone.

    A checkpoint belongs to the latest launch that did not find it at launch time.
    """
    snaps = [s for s in list_snapshots(save_dir) if s.meta.get("checkpoints_at_launch") is not None]
    out: Dict[int, Optional[Snapshot]] = {}
    for ck in list_checkpoints(save_dir):
        if not ck.complete:
            continue
        owners = [s for s in snaps if ck.iteration not in set(s.meta["checkpoints_at_launch"]["iterations"])]
        out[ck.iteration] = owners[-1] if owners else None
    return out


def stamp_save_dir(save_dir: str | os.PathLike) -> List[Tuple[int, str]]:
    """Place snapshots into the complete checkpoints that carry none (after the fact)."""
    placed = []
    for it, snap in sorted(assign_checkpoints(save_dir).items()):
        ckpt = Path(save_dir) / f"iter_{it:07d}"
        if snap is not None and place_snapshot(snap.path, ckpt, replace=False, by="clawgym stamp"):
            placed.append((it, snap.id))
    return placed


def start_checkpoint_watcher(plan: Any, snapshot: Optional[str]) -> Optional["CheckpointWatcher"]:
    """Stamp the launch snapshot into each checkpoint the job writes while it is followed (the
    launch pipeline and a SLURM allocation's runner both start it here); None when there is no
    save dir or snapshot, or the watcher cannot start (the run matters more than the stamps)."""
    import sys

    if not plan.save_dir or not snapshot:
        return None
    try:
        watcher = CheckpointWatcher(plan.save_dir, snapshot)
        watcher.start()
        return watcher
    except Exception as exc:
        print(f"[clawgym] checkpoint watcher not started ({exc}); stamp later with: clawgym stamp "
              f"{plan.save_dir} --follow", file=sys.stderr, flush=True)
        return None
