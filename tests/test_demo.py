"""``clawgym demo`` as a newcomer runs it: a fresh virtualenv, clawgym installed from this checkout,
``clawgym demo`` in an empty folder of a machine without GPUs.

The venv sees the system's packages (``--system-site-packages``: the dependencies are installed
there, and no network is needed) but gets clawgym itself from a normal, non-editable install of
this checkout, so the demo must work from what the package ships (no ``train.py``, no
``tests/``). The demo's processes carry a marker variable; a process still carrying it after the
demo ended is something it left running.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import List

import pytest

ROOT = Path(__file__).resolve().parent.parent
MARK = "CLAWGYM_DEMO_TEST_MARK"


def marked_processes(value: str) -> List[int]:
    """Pids whose environment holds ``MARK=value`` (children of the demo inherit it, Ray's too)."""
    needle = f"{MARK}={value}".encode()
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            if needle in (entry / "environ").read_bytes().split(b"\0"):
                found.append(int(entry.name))
        except OSError:
            continue
    return found


@pytest.fixture(scope="module")
def fresh_venv(tmp_path_factory) -> Path:
    venv = tmp_path_factory.mktemp("venv") / "v"
    subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", str(venv)], check=True, timeout=300)
    # --no-deps: the dependencies come from the system site; clawgym from this checkout, not editable.
    subprocess.run([str(venv / "bin" / "pip"), "install", "-q", "--no-deps", str(ROOT)], check=True, timeout=600)
    return venv


@pytest.fixture(scope="module")
def demo(fresh_venv, tmp_path_factory):
    work = tmp_path_factory.mktemp("newcomer")
    mark = uuid.uuid4().hex
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYTHONPATH", "VIRTUAL_ENV", "RAY_ADDRESS", "WANDB_API_KEY", "WANDB_KEY", "SGLANG_API_KEY")}
    env.update({"PATH": os.pathsep.join([str(fresh_venv / "bin"), "/usr/local/bin", "/usr/bin", "/bin"]),
                "CLAWGYM_STATE_DIR": str(work / "state"), MARK: mark})
    proc = subprocess.run([str(fresh_venv / "bin" / "clawgym"), "demo"], cwd=work, env=env, capture_output=True,
                          text=True, timeout=400)
    return {"proc": proc, "work": work, "dir": work / "clawgym-demo", "mark": mark, "venv": fresh_venv}


def test_clawgym_comes_from_the_fresh_venvs_install_not_this_checkout(fresh_venv):
    where = subprocess.run([str(fresh_venv / "bin" / "python"), "-c", "import clawgym; print(clawgym.__file__)"],
                           cwd="/", capture_output=True, text=True, check=True).stdout.strip()
    assert where.startswith(str(fresh_venv)), where


def test_demo_says_each_step_and_ends_with_a_report_of_the_two_jobs(demo):
    proc = demo["proc"]
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    out = proc.stdout
    steps = [out.index(f"==> {i}/4") for i in range(1, 5)]
    assert steps == sorted(steps)
    report = demo["dir"] / "report.html"
    assert f"wrote {report} (2 runs)" in out
    page = report.read_text()
    for lr in ("optimizer.lr=1e-6", "optimizer.lr=4e-6"):
        assert lr in page
        # The runs table printed by step 3 shows each job as succeeded.
        assert any(lr in line and "succeeded" in line for line in out[steps[2]:steps[3]].splitlines())
    assert "<img" in page  # curves inlined


def test_demo_sweep_ran_the_stand_in_through_a_real_ray_job_that_logged_events(demo):
    exp = demo["dir"] / "ClawGym-RL" / "exp"
    saves = sorted(p for p in exp.iterdir() if p.is_dir())
    assert len(saves) == 2
    for save in saves:
        record = json.loads((save / "standin_record.json").read_text())
        assert record["exit_code"] == 0
        # Started by Ray's job driver, with the demo's marker inherited: a leftover would carry it.
        assert record["submission_id"] and record["env"][MARK] == demo["mark"]
        assert record["logged"]["rollout/raw_reward"]
        assert list((save / "tensorboard").rglob("events.out.tfevents.*"))


def test_demo_leaves_nothing_running(demo):
    deadline = time.time() + 15
    while marked_processes(demo["mark"]) and time.time() < deadline:
        time.sleep(0.5)
    assert marked_processes(demo["mark"]) == []
    # No head record is left in the demo's state dir either (a kept or orphaned head would have one).
    assert not list((demo["work"] / "state").rglob("*.json"))


def test_demo_refuses_a_folder_that_holds_something(demo, tmp_path):
    (tmp_path / "keep.txt").write_text("mine")
    proc = subprocess.run([str(demo["venv"] / "bin" / "clawgym"), "demo", str(tmp_path)], capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 2
    assert "is not an empty folder" in proc.stderr
    assert [p.name for p in tmp_path.iterdir()] == ["keep.txt"]


def test_stand_in_logs_the_same_events_without_tensorboardx(tmp_path):
    # A plain `pip install clawgym` has no tensorboardX: the stand-in then writes through TensorBoard's
    # own EventFileWriter, and the events read back (as clawgym runs reads them) equal what it logged.
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    from clawgym.demo.checkout import STANDIN

    events = tmp_path / "tb"
    script = ("import runpy, sys; sys.modules['tensorboardX'] = None; "  # `import tensorboardX` raises ImportError
              f"sys.argv = [{str(STANDIN)!r}, '--use-tensorboard', '--save', {str(tmp_path / 'save')!r}, "
              "'--eval-interval', '1']; runpy.run_path(sys.argv[0], run_name='__main__')")
    env = {**os.environ, "TENSORBOARD_DIR": str(events), "STANDIN_ROLLOUT_STEPS": "2", "STANDIN_STEP_SLEEP": "0"}
    proc = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    record = json.loads((tmp_path / "save" / "standin_record.json").read_text())
    read = {}
    for path in events.iterdir():
        acc = EventAccumulator(str(path))
        acc.Reload()
        for tag in acc.Tags()["scalars"]:
            read.setdefault(tag, []).extend([e.step, pytest.approx(e.value, rel=1e-6)] for e in acc.Scalars(tag))
    assert set(read) == set(record["logged"]) and "rollout/raw_reward" in read
    for tag, points in record["logged"].items():
        assert sorted(read[tag], key=lambda p: p[0]) == points
