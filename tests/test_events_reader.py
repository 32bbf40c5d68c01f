"""clawgym's reader of slime's TensorBoard event files (clawgym/runs/events.py), on files a real
``SummaryWriter`` (tensorboardX) writes: every value read back, damaged records noted rather than
silently dropped, non-regular files skipped (a FIFO would block ``open()``), memory bounded by
TensorBoard's own reservoir, and reading bounded in time."""

from __future__ import annotations

import os
import threading
from pathlib import Path

import pytest

from clawgym.runs import events as ev


def write_events(folder: Path, tag: str, values, *, suffix: str = "") -> Path:
    from tensorboardX import SummaryWriter

    w = SummaryWriter(str(folder), filename_suffix=suffix)
    for step, v in enumerate(values):
        w.add_scalar(tag, v, step)
    w.close()
    (path,) = [p for p in folder.iterdir() if "tfevents" in p.name and p.name.endswith(suffix)]
    return path


def test_every_value_a_summary_writer_logged_is_read_back(tmp_path):
    values = [0.1 * i for i in range(50)]
    write_events(tmp_path, "rollout/raw_reward", values)
    got = ev.read_scalars(tmp_path)
    assert [p.step for p in got["rollout/raw_reward"]] == list(range(50))
    assert [p.value for p in got["rollout/raw_reward"]] == pytest.approx(values, rel=1e-6)
    assert got.notes == []


def test_a_flipped_byte_in_a_record_is_noted_and_the_other_records_are_kept(tmp_path):
    path = write_events(tmp_path, "rollout/raw_reward", [float(i) for i in range(20)])
    data = bytearray(path.read_bytes())
    # The last record's value: flip one byte of its body (not its length header).
    data[-8] ^= 0xFF
    path.write_bytes(bytes(data))
    got = ev.read_scalars(tmp_path)
    steps = [p.step for p in got["rollout/raw_reward"]]
    assert steps == list(range(19)), steps
    assert any("1 damaged record(s) skipped" in n for n in got.notes), got.notes


def test_a_damaged_length_header_ends_the_file_with_a_note(tmp_path):
    path = write_events(tmp_path, "x", [1.0, 2.0, 3.0])
    data = bytearray(path.read_bytes())
    first_len = int.from_bytes(data[:8], "little")
    second = 12 + first_len + 4  # the second record's header (the first is the file version event)
    data[second] ^= 0x01
    path.write_bytes(bytes(data))
    got = ev.read_scalars(tmp_path)
    assert "x" not in got
    assert any("damaged record header" in n for n in got.notes), got.notes


def test_a_fifo_named_like_an_event_file_is_skipped_not_waited_on(tmp_path):
    write_events(tmp_path, "x", [1.0, 2.0])
    fifo = tmp_path / "events.out.tfevents.123.host.fifo"
    os.mkfifo(fifo)
    result = {}
    t = threading.Thread(target=lambda: result.setdefault("got", ev.read_scalars(tmp_path)), daemon=True)
    t.start()
    t.join(30)
    assert not t.is_alive(), "reading an events folder with a FIFO in it hangs"
    got = result["got"]
    assert [p.value for p in got["x"]] == [1.0, 2.0]
    assert any("not a regular file" in n for n in got.notes)


def test_points_beyond_tensorboards_size_guidance_are_sampled_with_the_last_kept(tmp_path, monkeypatch):
    monkeypatch.setattr(ev, "_size_guidance", lambda: 100)
    write_events(tmp_path, "x", [float(i) for i in range(1000)])
    got = ev.read_scalars(tmp_path)
    assert len(got["x"]) == 100 and got["x"][-1].step == 999
    assert any("1000 points logged, a sample of 100 kept" in n for n in got.notes), got.notes


def test_reading_stops_at_the_time_limit_with_a_note(tmp_path):
    write_events(tmp_path, "x", [float(i) for i in range(5000)])
    got = ev.read_scalars(tmp_path, limit_s=0.0)
    assert len(got.get("x", [])) < 5000
    assert any("reading stopped after" in n for n in got.notes), got.notes


def test_a_later_file_wins_a_step_and_launches_merge_oldest_first(tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    write_events(a, "x", [1.0, 2.0, 3.0])
    write_events(b, "x", [10.0, 20.0])
    got = ev.read_run_scalars([a, b])
    assert [p.value for p in got["x"]] == [10.0, 20.0, 3.0]
