"""Every training launch is supervised (issue 33's wiring): real launches of the recording stand-in
trainer (``python train.py`` on a real Ray head), each followed by the detached supervisor the
pipeline starts (``python -m clawgym.supervisor <save dir>``), restarted by ``clawgym resume`` run
by that supervisor, stopped for good by ``clawgym jobs stop`` or Ctrl-C, and never left running.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Dict, List, Optional

import pytest

from clawgym.common.ownership import process_alive
from clawgym.snapshot.attempts import read_attempts
from clawgym.supervisor import classes as C
from clawgym.supervisor import process as sup_process

ROOT = Path(__file__).resolve().parent.parent
SECRET = "wandb-sentinel-supervised-0123456789abcdef0123456789"


def _env(tmp_path: Path) -> Dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("WANDB_API_KEY", "WANDB_KEY", "SGLANG_API_KEY",
                                                           "CLAWGYM_SUPERVISOR_ID")}
    env.update(PYTHONPATH=f"{ROOT}{os.pathsep}{ROOT / 'launchers'}", CLAWGYM_STATE_DIR=str(tmp_path / "state"),
               WANDB_API_KEY=SECRET, PYTHONUNBUFFERED="1")
    return env


def _argv(checkout: Path, tmp_path: Path, save: Path, where: List[str], *, rollouts: int = 5, fail: str = "",
          extra: List[str] = (), step_sleep: float = 0.3) -> List[str]:
    from tests.fixtures.checkout import LAUNCH_SKIPS, checkout_overrides

    standin = [f"+extra_env.STANDIN_RUN_ROLLOUTS={rollouts}", f"+extra_env.STANDIN_STEP_SLEEP={step_sleep}",
               "+extra_env.STANDIN_SAVE_EVERY=2", f"+extra_env.STANDIN_RECORD_DIR={tmp_path / 'records'}"]
    if fail:
        standin += [f"+extra_env.STANDIN_FAIL={fail}", f"+extra_env.STANDIN_FAIL_ONCE={tmp_path / 'failed-once'}"]
    return [sys.executable, str(ROOT / "train.py"), *checkout_overrides(checkout, skip_checks=LAUNCH_SKIPS, supervised=True), *where,
            f"paths.save={save}", f"rollout.num_rollout={rollouts}", "restart.poll_s=1", *standin, *extra,
            f"hydra.run.dir={tmp_path}/hydra"]


def _records(tmp_path: Path) -> List[dict]:
    out = [json.loads(p.read_text()) for p in (tmp_path / "records").glob("*.json")]
    return sorted(out, key=lambda r: r["start"])


def _wait_supervisor_end(save: Path, timeout: float = 150.0) -> dict:
    deadline = time.time() + timeout
    while time.time() < deadline:
        rec = sup_process.read_record(save)
        if rec.get("status") == "ended" and not sup_process.alive(rec):
            return rec
        time.sleep(0.5)
    raise AssertionError(f"the supervisor of {save} did not end: {sup_process.read_record(save)}\n"
                         + sup_process.log_path(save).read_text()[-3000:])


def _wait_for_a_checkpoint(save: Path, proc: Optional[subprocess.Popen] = None, timeout: float = 150.0) -> None:
    """Until the run's first complete checkpoint (its tracker) is there, while its launcher (if any) runs."""
    tracker = save / "latest_checkpointed_iteration.txt"
    deadline = time.time() + timeout
    while not tracker.exists() and time.time() < deadline and (proc is None or proc.poll() is None):
        time.sleep(0.1)
    assert tracker.exists(), "the run never saved a checkpoint"


def _assert_nothing_left(save: Path, tmp_path: Path, address: str) -> None:
    """No supervisor, no stand-in, no job of ours still running."""
    from ray.job_submission import JobSubmissionClient

    rec = sup_process.read_record(save)
    assert rec and not sup_process.alive(rec), rec
    for r in _records(tmp_path):
        assert r["end"] is not None, f"stand-in {r['submission_id']} never ended"
    ours = {r["submission_id"] for r in _records(tmp_path)}
    client = JobSubmissionClient(address)
    running = [j.submission_id for j in client.list_jobs()
               if j.submission_id in ours and not j.status.is_terminal()]
    assert not running, running


def test_a_run_that_crashes_once_goes_on_from_its_last_complete_checkpoint_with_no_one_typing(
        clawgym_checkout, ray_cluster, tmp_path):
    save = tmp_path / "run"
    env = _env(tmp_path)
    res = subprocess.run(_argv(clawgym_checkout, tmp_path, save, ray_cluster.overrides(), fail="crash@3"),
                         env=env, capture_output=True, text=True, timeout=240, cwd=ROOT)
    out = res.stdout + res.stderr
    assert res.returncode == 0, out[-5000:]
    rec = read_attempts(save)
    assert [a.cls for a in rec.attempts] == [C.CRASHED, C.FINISHED], out[-3000:]
    assert rec.attempts[1].resumed_from == 1 and rec.stopped["by"] == "finished"
    # Said on the launcher's console, as the supervisor decided it.
    assert "attempt 1 of 4" in out and "resuming from iter_0000001" in out, out[-3000:]
    # The restart is a resume: --load at the save dir, rollouts 2..4 (nothing redone before iter 1).
    runs = _records(tmp_path)
    assert len(runs) == 2 and "--load" not in runs[0]["argv"] and "--load" in runs[1]["argv"]
    assert runs[1]["start_rollout_id"] == 2 and runs[1]["rollouts"] == [2, 3, 4]
    assert (save / "latest_checkpointed_iteration.txt").read_text().strip() == "4"
    # Each checkpoint carries the snapshot of the attempt that wrote it (the restart's stamped by its supervisor).
    from clawgym.snapshot.checkpoints import list_checkpoints
    from clawgym.snapshot.read import list_snapshots

    s1, s2 = list_snapshots(save)
    assert [(c.iteration, c.stamp_id) for c in list_checkpoints(save)] == [(1, s1.id), (3, s2.id), (4, s2.id)]
    # TensorBoard: the resumed attempt's steps go on where the first left off (same step axis).
    from clawgym.runs.events import read_scalars

    steps = sorted(p.step for d in (save / "tensorboard").iterdir()
                   for p in read_scalars(d).get("rollout/raw_reward", []))
    assert steps == [0, 1, 2, 2, 3, 4], steps
    # The supervisor's record: ended with the run's status; the attempt logs are in the save dir.
    srec = sup_process.read_record(save)
    assert srec["status"] == "ended" and srec["exit_code"] == 0
    assert (save / "clawgym" / "attempt-1.log").is_file() and (save / "clawgym" / "attempt-2.log").is_file()
    assert "rollout step 4" in (save / "clawgym" / "attempt-2.log").read_text()
    assert SECRET not in sup_process.log_path(save).read_text() and SECRET not in out
    shown = subprocess.run([sys.executable, "-m", "clawgym", "show", str(save), "--no-config"], env=_env(tmp_path),
                           capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert "supervisor: ended with exit status 0" in shown.stdout and "crashed" in shown.stdout, shown.stdout
    _assert_nothing_left(save, tmp_path, ray_cluster.address)


def test_a_deterministic_startup_failure_is_never_retried(clawgym_checkout, ray_cluster, tmp_path):
    save = tmp_path / "run"
    res = subprocess.run(_argv(clawgym_checkout, tmp_path, save, ray_cluster.overrides(), fail="startup"),
                         env=_env(tmp_path), capture_output=True, text=True, timeout=240, cwd=ROOT)
    out = res.stdout + res.stderr
    assert res.returncode == 1, out[-3000:]
    rec = read_attempts(save)
    assert [a.cls for a in rec.attempts] == [C.STARTUP_FAILURE] and rec.stopped["by"] == "supervisor"
    assert len(_records(tmp_path)) == 1 and "stopped for good" in out
    _assert_nothing_left(save, tmp_path, ray_cluster.address)


def test_restart_disabled_starts_no_supervisor(clawgym_checkout, ray_cluster, tmp_path):
    save = tmp_path / "run"
    res = subprocess.run(_argv(clawgym_checkout, tmp_path, save, ray_cluster.overrides(), fail="crash@3",
                               extra=["restart.enabled=false"]),
                         env=_env(tmp_path), capture_output=True, text=True, timeout=240, cwd=ROOT)
    assert res.returncode == 1, (res.stdout + res.stderr)[-3000:]
    assert not sup_process.record_path(save).exists() and not read_attempts(save).attempts
    assert len(_records(tmp_path)) == 1


def test_a_detached_launch_is_supervised_to_its_end(clawgym_checkout, ray_cluster, tmp_path):
    save = tmp_path / "run"
    res = subprocess.run(_argv(clawgym_checkout, tmp_path, save, ray_cluster.overrides(), fail="crash@3",
                               extra=["ray.detach=true"]),
                         env=_env(tmp_path), capture_output=True, text=True, timeout=240, cwd=ROOT)
    assert res.returncode == 0, (res.stdout + res.stderr)[-3000:]
    assert "supervised" in res.stdout
    srec = _wait_supervisor_end(save)
    assert srec["exit_code"] == 0
    assert [a.cls for a in read_attempts(save).attempts] == [C.CRASHED, C.FINISHED]
    _assert_nothing_left(save, tmp_path, ray_cluster.address)


def test_a_sighupped_launch_is_supervised_to_its_end(clawgym_checkout, ray_cluster, tmp_path):
    save = tmp_path / "run"
    proc = subprocess.Popen(_argv(clawgym_checkout, tmp_path, save, ray_cluster.overrides(), fail="crash@3"),
                            env=_env(tmp_path), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            cwd=ROOT)
    try:
        deadline = time.time() + 120
        while not sup_process.record_path(save).exists() and time.time() < deadline:
            time.sleep(0.3)
        time.sleep(1.0)
        proc.send_signal(signal.SIGHUP)  # the terminal is gone
        out, _ = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 129, out[-3000:]
    srec = _wait_supervisor_end(save)
    assert srec["exit_code"] == 0, sup_process.log_path(save).read_text()[-3000:]
    assert [a.cls for a in read_attempts(save).attempts] == [C.CRASHED, C.FINISHED]
    _assert_nothing_left(save, tmp_path, ray_cluster.address)


def test_clawgym_jobs_stop_stops_a_supervised_run_for_good(clawgym_checkout, ray_cluster, tmp_path):
    save = tmp_path / "run"
    env = _env(tmp_path)
    res = subprocess.run(_argv(clawgym_checkout, tmp_path, save, ray_cluster.overrides(), rollouts=1000,
                               extra=["ray.detach=true"]),
                         env=env, capture_output=True, text=True, timeout=240, cwd=ROOT)
    assert res.returncode == 0, (res.stdout + res.stderr)[-3000:]
    deadline = time.time() + 60
    while not any(r.get("rollouts") for r in _records(tmp_path)) and time.time() < deadline:
        time.sleep(0.3)
    sub = _records(tmp_path)[0]["submission_id"]
    stop = subprocess.run([sys.executable, "-m", "clawgym", "jobs", "stop", sub, "--address", ray_cluster.address],
                          env=env, capture_output=True, text=True, timeout=180, cwd=tmp_path)
    assert stop.returncode == 0, stop.stdout + stop.stderr
    assert "for good" in stop.stdout
    srec = sup_process.read_record(save)
    assert srec["status"] == "ended" and srec["exit_code"] == 130
    rec = read_attempts(save)
    assert [a.cls for a in rec.attempts] == [C.STOPPED_BY_USER] and rec.stopped["by"] == "user"
    time.sleep(2.0)
    assert len(_records(tmp_path)) == 1, "a stopped run was restarted"
    _assert_nothing_left(save, tmp_path, ray_cluster.address)


def test_a_hung_run_is_stopped_within_stall_s_with_stacks_and_restarted_from_its_last_checkpoint(
        clawgym_checkout, ray_cluster, tmp_path):
    save = tmp_path / "run"
    t0 = time.time()
    res = subprocess.run(_argv(clawgym_checkout, tmp_path, save, ray_cluster.overrides(), fail="hang@3",
                               extra=["health.stall_s=6"]),
                         env=_env(tmp_path), capture_output=True, text=True, timeout=240, cwd=ROOT)
    out = res.stdout + res.stderr
    assert res.returncode == 0, out[-5000:]
    rec = read_attempts(save)
    assert [a.cls for a in rec.attempts] == [C.HANG, C.FINISHED], out[-3000:]
    first = rec.attempts[0]
    # Stopped within stall_s (plus a poll and the stop) of its last sign of life.
    runs = _records(tmp_path)
    assert runs[0]["signal"] == "SIGTERM" or runs[0]["end"] is not None
    assert first.ended - runs[0]["start"] < 6 + 3 * 0.3 + 2 * 1 + 20
    stacks = list((save / "stacks").glob("*"))
    assert stacks and "wait_in_collective_standin" in "".join(p.read_text() for p in stacks if p.is_file())
    assert rec.attempts[1].resumed_from == 1 and runs[1]["start_rollout_id"] == 2
    assert time.time() - t0 < 200
    _assert_nothing_left(save, tmp_path, ray_cluster.address)


def _own_head() -> List[str]:
    from clawgym.backends.head import ports as head_ports

    return [f"ray.port={head_ports.free_port()}", f"ray.dashboard_port={head_ports.free_port()}", "ray.num_gpus=8"]


def test_on_a_local_head_the_head_stays_up_through_the_restart_and_is_stopped_at_the_end(
        clawgym_checkout, tmp_path):
    """python train.py on a head clawgym starts: the crash is resumed on the same head (kept up while
    the run is supervised), the launcher exits with the supervisor's status and stops the head."""
    from clawgym.launch.rayjob import dashboard_responds

    save = tmp_path / "run"
    head = _own_head()
    address = f"http://127.0.0.1:{head[1].split('=')[1]}"
    res = subprocess.run(_argv(clawgym_checkout, tmp_path, save, head, fail="crash@3"),
                         env=_env(tmp_path), capture_output=True, text=True, timeout=300, cwd=ROOT)
    out = res.stdout + res.stderr
    assert res.returncode == 0, out[-5000:]
    rec = read_attempts(save)
    assert [a.cls for a in rec.attempts] == [C.CRASHED, C.FINISHED], out[-3000:]
    runs = _records(tmp_path)
    assert len(runs) == 2 and runs[1]["start_rollout_id"] == 2
    # Both attempts ran on the one head the launch started; it is gone now, and so is every process.
    subs = [json.loads(p.read_text())["address"] for p in (save / "clawgym" / "snapshots").glob("*/submitted.json")]
    assert subs == [address, address], subs
    assert not dashboard_responds(address, timeout=2.0), "the launch's head was left running"
    assert not (tmp_path / "state" / "heads" / f"{address.rsplit(':', 1)[1]}.json").exists()
    assert not sup_process.alive(sup_process.read_record(save))
    for r in runs:
        assert r["end"] is not None


def _kill_head(state: Path, dashboard_port: int) -> List[str]:
    """SIGKILL the GCS, raylet and dashboard of the head clawgym recorded on that port: found through
    clawgym's own head record (pid + create time verified), never by a process search. The names killed."""
    from clawgym.backends.head.processes import verified
    from clawgym.backends.head.records import HeadRecord

    rec = HeadRecord.from_dict(json.loads((state / "heads" / f"{dashboard_port}.json").read_text()))
    killed = []
    for p in rec.processes:
        proc = verified(p.pid, p.create_time)
        if proc is None:
            continue
        cmd = " ".join(proc.cmdline())
        if p.name.startswith(("gcs_server", "raylet")) or "dashboard/dashboard.py" in cmd:
            proc.send_signal(signal.SIGKILL)
            killed.append(p.name)
    return killed


def test_a_lost_local_head_is_replaced_once_its_processes_are_gone_and_the_run_finishes_with_no_one_typing(
        clawgym_checkout, tmp_path):
    """python train.py on a head clawgym starts; its GCS, raylet and dashboard are SIGKILLed after a
    checkpoint. The supervisor sees the head is dead from its record (no ray.lost_contact_s wait: it
    is 600 s here), stops what is left of it, starts a new head on the recorded ports, owned by itself,
    resumes from the tracker's iteration, and at the end stops that head: nothing is left running or
    recorded."""
    from clawgym.backends.head.processes import find_processes
    from clawgym.launch.rayjob import dashboard_responds

    save, state = tmp_path / "run", tmp_path / "state"
    head = _own_head()
    port = int(head[1].split("=")[1])
    address = f"http://127.0.0.1:{port}"
    proc = subprocess.Popen(_argv(clawgym_checkout, tmp_path, save, head, rollouts=10, step_sleep=1.0,
                                  extra=["ray.lost_contact_s=600"]),
                            env=_env(tmp_path), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=ROOT)
    try:
        _wait_for_a_checkpoint(save, proc)
        old = json.loads((state / "heads" / f"{port}.json").read_text())
        killed_at = time.time()
        killed = _kill_head(state, port)
        assert {"gcs_server", "raylet"} <= set(killed), killed
        out, _ = proc.communicate(timeout=240)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, out[-6000:]
    rec = read_attempts(save)
    assert [a.cls for a in rec.attempts] == [C.NODE_LOST, C.FINISHED], out[-4000:]
    lost = rec.attempts[0]
    assert "gcs_server" in lost.evidence and "gone" in lost.evidence, lost.evidence
    # Seen dead from the record, not after ray.lost_contact_s (600 s).
    assert lost.ended - killed_at < 60, lost.ended - killed_at
    # Resumed from the tracker the lost attempt left, by a stand-in that loaded it.
    runs = _records(tmp_path)
    assert len(runs) == 2 and "--load" in runs[1]["argv"]
    assert rec.attempts[1].resumed_from == lost.checkpoint_at_end is not None
    assert runs[1]["start_rollout_id"] == lost.checkpoint_at_end + 1
    assert runs[1]["rollouts"][-1] == 9 and runs[0]["end"] is not None, runs
    # What the console said (the supervisor's lines, followed by the launcher).
    assert "attempt 1 of 4: node or head lost" in out and "a new local head" in out, out[-4000:]
    assert f"resuming from iter_{lost.checkpoint_at_end:07d}" in out
    # The new head: on the recorded ports (they were free), owned by the supervisor, stopped at the end.
    subs = sorted(json.loads(p.read_text())["address"]
                  for p in (save / "clawgym" / "snapshots").glob("*/submitted.json"))
    assert subs == [address, address], subs
    srec = sup_process.read_record(save)
    assert srec["exit_code"] == 0 and srec.get("head") is None and len(srec["heads_started"]) == 1, srec
    new = srec["heads_started"][0]
    assert new["marker"] != old["marker"] and new["dashboard_address"] == address
    assert not dashboard_responds(address, timeout=2.0), "the new head was left running"
    # Nothing of either head is left: found by their markers (every process of a head carries it).
    for h in (old, new):
        left = find_processes(sid=None, marker=h["marker"], since=float(h.get("start_time", h.get("started", 0))))
        assert not left, f"processes of the head {h['marker']} left: {sorted(left)}"
    assert not list((state / "heads").glob("*.json")), "a head record was left"
    assert not sup_process.alive(srec)
    shown = subprocess.run([sys.executable, "-m", "clawgym", "show", str(save), "--no-config"], env=_env(tmp_path),
                           capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert C.NODE_LOST in shown.stdout and "gcs_server" in shown.stdout, shown.stdout


def test_a_lost_local_heads_ports_taken_meanwhile_the_new_head_goes_on_free_ports_and_the_run_finishes(
        clawgym_checkout, tmp_path):
    """The lost head's GCS port is taken by another process the moment its gcs_server dies: the
    supervisor's new head goes on free ports, the restart is told them (ray.port, ray.dashboard_port),
    and the other process's port is never touched. (The dashboard port stays held by what is left of
    the head until the supervisor stops it.)"""
    import socket

    from clawgym.launch.rayjob import dashboard_responds

    save, state = tmp_path / "run", tmp_path / "state"
    head = _own_head()
    gcs_port, port = int(head[0].split("=")[1]), int(head[1].split("=")[1])
    proc = subprocess.Popen(_argv(clawgym_checkout, tmp_path, save, head, rollouts=10, step_sleep=1.0,
                                  extra=["ray.lost_contact_s=600"]),
                            env=_env(tmp_path), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=ROOT)
    squatter = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    squatter.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # past the killed GCS's TIME_WAITs
    try:
        _wait_for_a_checkpoint(save, proc)
        _kill_head(state, port)
        deadline = time.time() + 10
        while True:  # the port is free once the killed dashboard's socket is closed
            try:
                squatter.bind(("127.0.0.1", gcs_port))
                break
            except OSError:
                assert time.time() < deadline, f"port {gcs_port} never came free"
                time.sleep(0.05)
        squatter.listen(1)
        out, _ = proc.communicate(timeout=240)
    finally:
        if proc.poll() is None:
            proc.kill()
        squatter.close()
    assert proc.returncode == 0, out[-6000:]
    assert [a.cls for a in read_attempts(save).attempts] == [C.NODE_LOST, C.FINISHED], out[-4000:]
    assert "on other ports (ray.port=" in out, out[-4000:]
    addresses = [json.loads(p.read_text())["address"]
                 for p in sorted((save / "clawgym" / "snapshots").glob("*/submitted.json"))]
    assert len(addresses) == 2 and addresses[0] == f"http://127.0.0.1:{port}" and addresses[1] != addresses[0]
    srec = sup_process.read_record(save)
    assert srec["heads_started"][0]["dashboard_address"] == addresses[1] and srec.get("head") is None
    assert not dashboard_responds(addresses[1], timeout=2.0), "the new head was left running"
    assert not list((state / "heads").glob("*.json")), "a head record was left"
    assert squatter.fileno() == -1  # closed by this test only: nobody else touched it


def test_a_detached_runs_lost_head_is_replaced_and_the_new_head_is_kept_at_the_end_as_the_launchs_own_was(
        clawgym_checkout, tmp_path):
    """ray.detach=true: the launcher is gone when the head dies; the supervisor replaces it and, at the
    run's end, keeps the new head as the detached launch kept its own (recorded as kept, with why),
    for `clawgym jobs stop-head` to stop."""
    from clawgym.launch.rayjob import dashboard_responds

    save, state, env = tmp_path / "run", tmp_path / "state", _env(tmp_path)
    head = _own_head()
    port = int(head[1].split("=")[1])
    address = f"http://127.0.0.1:{port}"
    res = subprocess.run(_argv(clawgym_checkout, tmp_path, save, head, rollouts=10, step_sleep=1.0,
                               extra=["ray.detach=true", "ray.lost_contact_s=600"]),
                         env=env, capture_output=True, text=True, timeout=240, cwd=ROOT)
    assert res.returncode == 0, (res.stdout + res.stderr)[-3000:]
    try:
        _wait_for_a_checkpoint(save)
        _kill_head(state, port)
        srec = _wait_supervisor_end(save, timeout=200)
        assert srec["exit_code"] == 0, sup_process.log_path(save).read_text()[-3000:]
        assert [a.cls for a in read_attempts(save).attempts] == [C.NODE_LOST, C.FINISHED]
        new = srec["heads_started"][0]
        assert dashboard_responds(address, timeout=5.0), "the detached run's new head was stopped"
        rec = json.loads((state / "heads" / f"{port}.json").read_text())
        assert rec["marker"] == new["marker"] and rec["kept"] and "ray.detach=true" in rec["kept_reason"], rec
        assert "keeping the Ray head" in sup_process.log_path(save).read_text()
    finally:
        stop = subprocess.run([sys.executable, "-m", "clawgym", "jobs", "stop-head", "--address", address],
                              env=env, capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert stop.returncode == 0, stop.stdout + stop.stderr
    assert not dashboard_responds(address, timeout=2.0)
    assert not list((state / "heads").glob("*.json")), "a head record was left"


def test_ctrl_c_in_the_foreground_stops_a_supervised_run_for_good(clawgym_checkout, ray_cluster, tmp_path):
    save = tmp_path / "run"
    proc = subprocess.Popen(_argv(clawgym_checkout, tmp_path, save, ray_cluster.overrides(), rollouts=1000),
                            env=_env(tmp_path), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            cwd=ROOT)
    try:
        deadline = time.time() + 120
        while not any(r.get("rollouts") for r in _records(tmp_path)) and time.time() < deadline:
            time.sleep(0.3)
        assert sup_process.running(save) is not None, "no supervisor runs beside the launch"
        proc.send_signal(signal.SIGINT)
        out, _ = proc.communicate(timeout=150)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, out[-3000:]
    assert "for good" in out
    srec = sup_process.read_record(save)
    assert srec["status"] == "ended" and srec["exit_code"] == 130
    rec = read_attempts(save)
    assert [a.cls for a in rec.attempts] == [C.STOPPED_BY_USER] and rec.stopped["by"] == "user"
    runs = _records(tmp_path)
    assert len(runs) == 1 and runs[0]["signal"] == "SIGTERM", "stopped through Ray, never restarted"
    _assert_nothing_left(save, tmp_path, ray_cluster.address)


def test_one_supervisor_per_save_dir_a_second_one_ends_at_once(tmp_path):
    """A supervisor holds <save>/clawgym/supervisor.lock for its life: a second one for the same save
    dir refuses (exit 2) and touches nothing."""
    import fcntl

    save = tmp_path / "run"
    (save / "clawgym").mkdir(parents=True)
    fd = os.open(save / "clawgym" / "supervisor.lock", os.O_RDWR | os.O_CREAT, 0o600)
    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # the first supervisor's hold
    try:
        res = subprocess.run([sys.executable, "-m", "clawgym.supervisor", str(save), "--id", "second"],
                             env=_env(tmp_path), capture_output=True, text=True, timeout=120, cwd=tmp_path)
    finally:
        os.close(fd)
    assert res.returncode == 2, res.stdout + res.stderr
    assert "one supervisor per save dir" in res.stdout
    assert not (save / "clawgym" / "attempts.json").exists()


def test_each_sweep_job_is_supervised_and_ends_when_its_supervisor_ends(clawgym_checkout, ray_cluster, tmp_path):
    """python train.py -m: each job has its supervisor; the job that crashes once is resumed into its own
    save dir, and the sweep counts it as succeeded only once its supervisor ended with 0."""
    from tests.fixtures.checkout import LAUNCH_SKIPS, checkout_overrides

    argv = [sys.executable, str(ROOT / "train.py"), "-m",
            *checkout_overrides(clawgym_checkout, skip_checks=LAUNCH_SKIPS, supervised=True), *ray_cluster.overrides(),
            "gpu_layout=split_1_1", "sandbox.cleanup_leftovers=false", f"paths.save={tmp_path}/exp/${{run_name}}",
            "rollout.num_rollout=5", "restart.poll_s=1", "+extra_env.STANDIN_RUN_ROLLOUTS=5",
            "+extra_env.STANDIN_STEP_SLEEP=0.3", "+extra_env.STANDIN_SAVE_EVERY=2",
            f"+extra_env.STANDIN_RECORD_DIR={tmp_path / 'records'}",
            f"+extra_env.STANDIN_FAIL_ONCE={tmp_path / 'failed-once'}", "+extra_env.STANDIN_FAIL=crash@3,crash@99",
            f"hydra.sweep.dir={tmp_path}/multirun", "hydra.launcher.poll_interval=0.2"]
    res = subprocess.run(argv, env=_env(tmp_path), capture_output=True, text=True, timeout=300, cwd=tmp_path)
    out = res.stdout + res.stderr
    assert res.returncode == 0, out[-5000:]
    saves = sorted((tmp_path / "exp").iterdir())
    assert len(saves) == 2, saves
    classes = {s.name: [a.cls for a in read_attempts(s).attempts] for s in saves}
    assert sorted(classes.values()) == [[C.CRASHED, C.FINISHED], [C.FINISHED]], classes
    assert "attempt 1 of 4" in out and "succeeded" in out
    for s in saves:
        assert sup_process.read_record(s)["exit_code"] == 0
        _assert_nothing_left(s, tmp_path, ray_cluster.address)
