"""A run's scalars, read from slime's TensorBoard event files with a bounded, checked reader.

slime logs each metric dict with its step key removed and used as the event's step
(slime/utils/logging_utils.py:log): ``rollout/*`` and ``perf/*`` at the rollout step,
``train/*`` at the train step, ``eval/*`` at the eval step. Two processes write into one
folder (the rollout manager and the actor's first rank), each its own file.

The files are TFRecord streams (a little-endian u64 length, its masked CRC-32C, the record,
the record's masked CRC-32C; each record an ``Event`` protobuf). They are read here record by
record rather than with TensorBoard's ``EventAccumulator``, because:

- TensorBoard's TensorFlow-free reader checks CRCs in pure Python (a byte at a time: 48 s for a
  33 MB file); ``google-crc32c`` checks them in C;
- a damaged record must be *said*: a record whose CRC does not match is skipped and noted, a
  damaged length header ends the file's reading with a note (nothing after it can be framed);
- memory is bounded with TensorBoard's own reservoir and size guidance (at most
  ``DEFAULT_SIZE_GUIDANCE['scalars']`` points per tag, the last one always kept), and time with a
  limit per folder, noted when reached;
- only regular files are opened (a FIFO named like an event file would block ``open()``).

Steps: the last value logged at a step wins (within a file, across files, and across the
launches of a resumed run, oldest launch first). A truncated last record (a writer killed
mid-write, or a file still being written) is where reading stops, silently: that is how a live
file looks.
"""

from __future__ import annotations

import os
import stat
import struct
import time
from pathlib import Path
from typing import Dict, List, NamedTuple, Optional, Sequence

#: Seconds one events folder may take to read; the rest of it is noted as not read.
READ_LIMIT_S = 60.0


class Point(NamedTuple):
    step: int
    value: float
    wall_time: float


class Scalars(dict):
    """tag -> [Point] by step, with ``notes``: what could not be read, and why."""

    def __init__(self, *args, notes: Optional[List[str]] = None, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.notes: List[str] = list(notes or [])


def _size_guidance() -> int:
    from tensorboard.backend.event_processing.event_accumulator import DEFAULT_SIZE_GUIDANCE, SCALARS

    return int(DEFAULT_SIZE_GUIDANCE[SCALARS])


def _masked_crc(data) -> int:
    """TFRecord's masked CRC-32C (tensorflow/core/lib/hash/crc32c.h ``Mask``)."""
    crc = _crc32c(data)
    return (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def _crc32c(data) -> int:
    global _crc32c
    import google_crc32c

    _crc32c = google_crc32c.value  # bound once: the reader calls it twice per record
    return _crc32c(data)


def _event_files(folder: Path, notes: List[str]) -> List[Path]:
    """The folder's event files (TensorBoard's rule: ``tfevents`` in the name), regular files only."""
    try:
        names = sorted(os.listdir(folder))
    except OSError:
        return []
    out = []
    for name in names:
        if "tfevents" not in name:
            continue
        path = folder / name
        try:
            mode = os.lstat(path).st_mode
        except OSError:
            continue
        if stat.S_ISREG(mode):
            out.append(path)
        elif not stat.S_ISDIR(mode):
            notes.append(f"{path}: not a regular file; skipped")
    return out


def _scalar_values(event) -> List:
    """(tag, float) of an Event's scalar summaries: ``simple_value`` (TensorBoard 1 writers, torch's and
    tensorboardX's SummaryWriter) or a scalar tensor of the scalars plugin (TensorBoard 2 writers)."""
    out = []
    for v in event.summary.value:
        kind = v.WhichOneof("value")
        if kind == "simple_value":
            out.append((v.tag, float(v.simple_value)))
        elif kind == "tensor" and v.metadata.plugin_data.plugin_name == "scalars":
            from tensorboard.util import tensor_util

            try:
                out.append((v.tag, float(tensor_util.make_ndarray(v.tensor).item())))
            except (ValueError, TypeError):
                continue
    return out


def _read_file(path: Path, add, notes: List[str], deadline: float) -> bool:
    """Feed ``add(tag, Point)`` every scalar of one file; False when the deadline stopped it.

    The file is mapped, not read into memory: each record is copied out of the page cache alone."""
    import mmap

    from tensorboard.compat.proto import event_pb2

    try:
        f = open(path, "rb")
    except OSError as exc:
        notes.append(f"{path}: cannot be read ({exc.strerror or exc})")
        return True
    with f:
        size = os.fstat(f.fileno()).st_size
        if size == 0:
            return True
        with mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as mm:
            return _read_records(path, mm, size, add, notes, deadline, event_pb2.Event.FromString)


def _read_records(path: Path, buf, size: int, add, notes: List[str], deadline: float,
                  parse) -> bool:
    crc = _masked_crc
    unpack = struct.unpack_from
    pos, n, damaged, finished = 0, 0, 0, True
    # buf: the mapped file; a slice of it is bytes (a copy of one record)
    while pos + 12 <= size:
        n += 1
        if n % 4096 == 0 and time.monotonic() > deadline:
            notes.append(f"{path}: reading stopped after the time limit at byte {pos} of {size}; "
                         "later points of this file are not shown")
            finished = False
            break
        length, length_crc = unpack("<QI", buf, pos)
        if crc(buf[pos:pos + 8]) != length_crc:
            notes.append(f"{path}: damaged record header at byte {pos}; the rest of the file "
                         f"({size - pos} bytes) cannot be read")
            break
        end = pos + 12 + length
        if end + 4 > size:
            break  # the last record, still being written (or cut by a killed writer)
        body = buf[pos + 12:end]
        ok = crc(body) == unpack("<I", buf, end)[0]
        pos = end + 4
        if not ok:
            damaged += 1
            continue
        try:
            event = parse(body)
        except Exception:  # noqa: BLE001 - protobuf's DecodeError: a record that is not an Event
            damaged += 1
            continue
        if not event.HasField("summary"):
            continue
        step, wall = int(event.step), float(event.wall_time)
        for tag, value in _scalar_values(event):
            add(tag, Point(step, value, wall))
    if damaged:
        notes.append(f"{path}: {damaged} damaged record(s) skipped (CRC mismatch)")
    return finished


def read_scalars(folder: Path, *, limit_s: Optional[float] = None) -> Scalars:
    """tag -> points of one events folder, by step (the last value logged at a step wins), with notes."""
    from tensorboard.backend.event_processing.reservoir import Reservoir

    notes: List[str] = []
    keep = _size_guidance()
    reservoir = Reservoir(keep)
    seen: Dict[str, int] = {}

    def add(tag: str, point: Point) -> None:
        seen[tag] = seen.get(tag, 0) + 1
        reservoir.AddItem(tag, point)

    deadline = time.monotonic() + (READ_LIMIT_S if limit_s is None else limit_s)
    # Always kept: the reservoir's own bookkeeping (a lock and a random draw per item) is the
    # price of TensorBoard's sampling rule; points below the size guidance are all kept.
    for path in _event_files(Path(folder), notes):
        if not _read_file(path, add, notes, deadline):
            break
    out = Scalars(notes=notes)
    for tag in reservoir.Keys():
        by_step: Dict[int, Point] = {}
        for p in reservoir.Items(tag):
            by_step[p.step] = p
        out[tag] = [by_step[s] for s in sorted(by_step)]
        if seen.get(tag, 0) > keep:
            out.notes.append(f"{tag}: {seen[tag]} points logged, a sample of {keep} kept (TensorBoard's reservoir, "
                         "the last point always kept)")
    return out


def read_run_scalars(folders: Sequence[Path]) -> Scalars:
    """Scalars of every launch of a run, oldest launch first; a later launch wins a step."""
    merged: Dict[str, Dict[int, Point]] = {}
    notes: List[str] = []
    for folder in folders:
        got = read_scalars(folder)
        notes += got.notes
        for tag, points in got.items():
            slot = merged.setdefault(tag, {})
            for p in points:
                slot[p.step] = p
    return Scalars({tag: [slot[s] for s in sorted(slot)] for tag, slot in merged.items()}, notes=notes)


def eval_sets(tags: Sequence[str]) -> List[str]:
    """The eval sets' reward tags: ``eval/<set>`` (slime's per-set mean reward), not their
    ``eval/<set>-<stat>`` or ``eval/<set>/<metric>`` companions."""
    direct = [t for t in tags if t.startswith("eval/") and t.count("/") == 1]
    return sorted(t for t in direct if not any(t.startswith(o + "-") for o in direct if o != t))


def latest(points: Optional[List[Point]]) -> Optional[Point]:
    return points[-1] if points else None


def mean_last(points: Optional[List[Point]], n: int) -> Optional[float]:
    if not points:
        return None
    tail = points[-n:] if n > 0 else points
    return sum(p.value for p in tail) / len(tail)


def best(points: Optional[List[Point]]) -> Optional[Point]:
    return max(points, key=lambda p: p.value) if points else None
