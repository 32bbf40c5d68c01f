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
import re
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import List

import pytest

from tests.fixtures.source_copy import copy_source

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
    # --no-deps: the dependencies come from the system site; clawgym from this checkout, not editable,
    # built from a private copy (an in-place build races with tests writing into the checkout).
    src = copy_source(tmp_path_factory.mktemp("src") / "clawgym")
    proc = subprocess.run([str(venv / "bin" / "pip"), "install", "-q", "--no-deps", "--disable-pip-version-check",
                           str(src)], capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, f"pip install failed:\n{proc.stdout}\n{proc.stderr}"
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


# ---------------------------------------------------------------- issue 35: interrupt, refusals, what it shows

def checkout_demo(args: List[str], cwd: Path, mark: str = "", **kw) -> subprocess.Popen:
    """``clawgym demo ARGS`` from this checkout's package (faster than the venv; same code), marked."""
    env = {k: v for k, v in os.environ.items() if k not in ("RAY_ADDRESS", "VIRTUAL_ENV")}
    env.update({"PYTHONPATH": str(ROOT), "CLAWGYM_STATE_DIR": str(cwd / "state"), MARK: mark or uuid.uuid4().hex})
    return subprocess.Popen([sys.executable, "-m", "clawgym", "demo", *args], cwd=cwd, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **kw)


def test_demo_interrupted_stops_its_sweep_and_head_leaves_nothing_and_exits_130(tmp_path):
    import signal

    mark = uuid.uuid4().hex
    proc = checkout_demo([str(tmp_path / "d"), "--steps", "200"], tmp_path, mark)
    heads = tmp_path / "state" / "heads"
    deadline = time.time() + 240
    # Wait until the sweep's head is up and a job writes its record (a job is running).
    while time.time() < deadline and proc.poll() is None and not (
            list(heads.glob("*.json")) and list((tmp_path / "d").rglob("tensorboard"))):
        time.sleep(0.5)
    assert proc.poll() is None, proc.communicate()
    proc.send_signal(signal.SIGINT)  # as `kill -INT`: only the demo gets it; it must forward it
    out, err = proc.communicate(timeout=180)
    assert proc.returncode == 130, out[-3000:] + err[-3000:]
    assert "Traceback" not in err
    deadline = time.time() + 20
    while marked_processes(mark) and time.time() < deadline:
        time.sleep(0.5)
    assert marked_processes(mark) == []
    assert not list(heads.glob("*.json"))  # the head was stopped through its record, not orphaned


def test_demo_in_an_unwritable_folder_is_refused_naming_the_folder_and_the_fix(tmp_path):
    if os.geteuid() == 0:
        target = Path(f"/sys/clawgym-demo-{uuid.uuid4().hex[:8]}")  # root may write anywhere but /sys
    else:
        locked = tmp_path / "locked"
        locked.mkdir(mode=0o500)
        target = locked / "demo"
    out, err = checkout_demo([str(target)], tmp_path).communicate(timeout=120)
    assert "Traceback" not in err, err
    assert str(target) in err and "fix:" in err, err
    assert not target.exists()


def test_two_demos_into_one_new_folder_only_one_starts(tmp_path):
    import signal

    target = tmp_path / "shared"
    procs = [checkout_demo([str(target), "--steps", "200"], tmp_path) for _ in range(2)]
    try:
        first_done = None
        deadline = time.time() + 120
        while first_done is None and time.time() < deadline:
            first_done = next((p for p in procs if p.poll() is not None), None)
            time.sleep(0.2)
        assert first_done is not None, "neither demo was refused"
        out, err = first_done.communicate()
        assert first_done.returncode == 2, out[-2000:] + err[-2000:]
        assert "Traceback" not in err and str(target) in err, err
        other = procs[1 - procs.index(first_done)]
        assert other.poll() is None
    finally:
        for p in procs:
            if p.poll() is None:
                p.send_signal(signal.SIGINT)
                p.communicate(timeout=180)


def test_demo_what_you_would_type_line_skips_only_checks_a_user_would_skip(demo):
    line = next(l for l in demo["proc"].stdout.splitlines() if l.strip().startswith("python train.py -m"))
    assert "memory" not in line, line


def test_demo_sweep_prints_each_warning_once_for_both_jobs(demo):
    said = demo["proc"].stdout + demo["proc"].stderr
    for code in set(re.findall(r"warning: \[([\w-]+)\]", said)):
        assert said.count(f"warning: [{code}]") == 1, code


def test_a_checkout_inside_another_git_clone_records_no_commit_of_that_clone(tmp_path):
    # A demo inside a git clone (clawgym's own): its slime/Megatron are not that clone's code.
    from clawgym.snapshot.records import checkout_git_info

    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    subprocess.run(["git", "-C", str(tmp_path), "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q",
                    "--allow-empty", "-m", "clone"], check=True)
    root = tmp_path / "clawgym-demo" / "ClawGym-RL"
    (root / "slime").mkdir(parents=True)
    for path in (root, root / "slime"):
        info = checkout_git_info(path, root)
        assert info["commit"] is None and str(tmp_path) in info["error"], info
    own = tmp_path / "own"
    (own / "slime").mkdir(parents=True)
    subprocess.run(["git", "init", "-q", str(own)], check=True)
    subprocess.run(["git", "-C", str(own), "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q",
                    "--allow-empty", "-m", "own"], check=True)
    assert checkout_git_info(own / "slime", own)["commit"]  # the run's own checkout still counts
