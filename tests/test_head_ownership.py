"""Who owns a local head clawgym started: shared use, orphans, a lost terminal (real Ray).

Each test starts its own head (free ports, 4 declared GPUs) through ``python train.py``
and stops it through ``clawgym jobs`` at the end.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
import uuid
from pathlib import Path
from typing import Dict, List

import pytest

from clawgym.backends.head import ports as head_ports, records as head_records, users as head_users
from clawgym.launch import rayjob
from tests.test_launch import (ROOT, alive, base_overrides, clawgym_cli, head_processes, job_info, launcher_env,
                               run_train, submission_id_of, train_cmd)


@pytest.fixture()
def state_dir(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("clawgym_state")


@pytest.fixture(autouse=True)
def _private_state(state_dir, monkeypatch):
    monkeypatch.setenv("CLAWGYM_STATE_DIR", str(state_dir))


def four_gpu_head() -> List[str]:
    return [f"ray.port={head_ports.free_port()}", f"ray.dashboard_port={head_ports.free_port()}", "ray.num_gpus=4"]


def start_launch(overrides: List[str], tmp_path: Path, env: Dict[str, str], name: str, **kw) -> subprocess.Popen:
    """A launch in the background; its output goes to files (no pipe to fill up)."""
    out = open(tmp_path / f"{name}.out", "w")
    err = open(tmp_path / f"{name}.err", "w")
    return subprocess.Popen(train_cmd(overrides, tmp_path / name), cwd=ROOT, env=env, stdout=out, stderr=err, **kw)


def output(tmp_path: Path, name: str) -> str:
    return (tmp_path / f"{name}.out").read_text() + (tmp_path / f"{name}.err").read_text()


def wait_for_trainer(checkout: Path, run: str, proc: subprocess.Popen, tmp_path: Path, name: str) -> dict:
    record = checkout / "exp" / run / "standin_record.json"
    deadline = time.time() + 180
    while not record.exists():
        assert proc.poll() is None, output(tmp_path, name)
        assert time.time() < deadline, "the job never started: " + output(tmp_path, name)
        time.sleep(0.3)
    return json.loads(record.read_text())


def stop_everything(address: str, sids: List[str], env: Dict[str, str]) -> None:
    for sid in sids:
        clawgym_cli(["jobs", "stop", sid, "--address", address], env)
    clawgym_cli(["jobs", "stop-head", "--address", address, "--force"], env)


def test_a_reused_head_is_shared_checked_for_free_gpus_and_ports_and_the_last_launch_out_stops_it(
        clawgym_checkout, state_dir, tmp_path):
    env = launcher_env(state_dir)
    head = four_gpu_head()
    dport = int(head[1].split("=")[1])
    address = f"http://127.0.0.1:{dport}"
    run_a, run_b = f"own-a-{uuid.uuid4().hex[:6]}", f"own-b-{uuid.uuid4().hex[:6]}"
    common = ["gpu_layout=split_1_1", "+extra_env.STANDIN_SLEEP=600"]
    a = start_launch([*base_overrides(clawgym_checkout, run_a), *head, *common], tmp_path, env, "a")
    sids: List[str] = []
    try:
        wait_for_trainer(clawgym_checkout, run_a, a, tmp_path, "a")
        sid_a = submission_id_of(output(tmp_path, "a"))
        sids.append(sid_a)
        # Same API port as A's running job: refused before anything is submitted.
        run_c = f"own-c-{uuid.uuid4().hex[:6]}"
        clash = run_train([*base_overrides(clawgym_checkout, run_c), *head, *common], tmp_path / "c", env)
        assert clash.returncode == 2, clash.stdout + clash.stderr
        assert "port 30001" in clash.stderr and sid_a in clash.stderr and "sglang.api_port" in clash.stderr
        assert not (clawgym_checkout / "exp" / run_c / "standin_record.json").exists()
        # 4 GPUs declared, A holds 2: a 4-GPU job does not fit the *free* GPUs.
        big = run_train([*base_overrides(clawgym_checkout, run_c), *head, "gpu_layout=split_2_2",
                         "sglang.api_port=30002"], tmp_path / "d", env)
        assert big.returncode == 2, big.stdout + big.stderr
        assert "has 2 of its 4 GPUs free" in big.stderr and sid_a in big.stderr
        # B fits next to A: it joins the head's users.
        b = start_launch([*base_overrides(clawgym_checkout, run_b), *head, *common, "sglang.api_port=30002"],
                         tmp_path, env, "b")
        wait_for_trainer(clawgym_checkout, run_b, b, tmp_path, "b")
        sid_b = submission_id_of(output(tmp_path, "b"))
        sids.append(sid_b)
        assert "shared with the running clawgym launch(es) pid " + str(a.pid) in output(tmp_path, "b")
        users = {int(u["pid"]) for u in head_records.load_record(dport).users}
        assert users == {a.pid, b.pid}
        # A ends first: the head stays for B.
        assert clawgym_cli(["jobs", "stop", sid_a, "--address", address], env).returncode == 0
        assert a.wait(timeout=120) == 130, output(tmp_path, "a")
        assert "leaving the Ray head" in output(tmp_path, "a") and "stopped Ray head" not in output(tmp_path, "a")
        assert rayjob.dashboard_responds(address)
        assert {int(u["pid"]) for u in head_records.load_record(dport).users} == {b.pid}
        # B is the last one out: it stops the head, and nothing of it is left.
        assert clawgym_cli(["jobs", "stop", sid_b, "--address", address], env).returncode == 0
        assert b.wait(timeout=120) == 130, output(tmp_path, "b")
        assert "stopped Ray head" in output(tmp_path, "b")
        assert head_records.load_record(dport) is None
        assert [p for p in head_processes(dport) if alive(p)] == []
    finally:
        for p in (a, locals().get("b")):
            if p is not None and p.poll() is None:
                p.kill()
        if head_records.load_record(dport) is not None:
            stop_everything(address, sids, env)


def test_an_orphaned_head_is_told_apart_from_a_kept_one_and_its_jobs_are_named(clawgym_checkout, state_dir,
                                                                               tmp_path):
    env = launcher_env(state_dir)
    head = four_gpu_head()
    dport = int(head[1].split("=")[1])
    address = f"http://127.0.0.1:{dport}"
    run_a = f"orphan-a-{uuid.uuid4().hex[:6]}"
    a = start_launch([*base_overrides(clawgym_checkout, run_a), *head, "gpu_layout=split_1_1",
                      "+extra_env.STANDIN_SLEEP=600"], tmp_path, env, "a")
    sid_a = ""
    try:
        wait_for_trainer(clawgym_checkout, run_a, a, tmp_path, "a")
        sid_a = submission_id_of(output(tmp_path, "a"))
        a.kill()  # the launcher dies without cleaning up
        a.wait()
        heads = clawgym_cli(["jobs", "heads"], env)
        assert "orphaned" in heads.stdout and f"pid {a.pid}" in heads.stdout, heads.stdout
        run_b = f"orphan-b-{uuid.uuid4().hex[:6]}"
        b = run_train([*base_overrides(clawgym_checkout, run_b), *head, "gpu_layout=split_1_1",
                       "sglang.api_port=30002"], tmp_path / "b", env)
        assert b.returncode == 0, b.stdout + b.stderr
        # Said loudly: orphaned, what runs there, how to stop it.
        assert "ORPHANED" in b.stdout and f"pid {a.pid}" in b.stdout
        assert f"clawgym jobs stop {sid_a} --address {address}" in b.stdout
        assert f"clawgym jobs stop-head --address {address}" in b.stdout
        # B ended while A's job still runs: the head stays, recorded as kept (no longer an orphan).
        assert job_info(address, sid_a).status.value == "RUNNING"
        rec = head_records.load_record(dport)
        assert rec is not None and rec.kept and sid_a in rec.kept_reason
        heads = clawgym_cli(["jobs", "heads"], env)
        assert "kept" in heads.stdout and "orphaned" not in heads.stdout, heads.stdout
    finally:
        if a.poll() is None:
            a.kill()
        stop_everything(address, [sid_a] if sid_a else [], env)
    assert head_records.load_record(dport) is None
    assert [p for p in head_processes(dport) if alive(p)] == []


def test_a_lost_terminal_leaves_the_job_running_and_the_head_recorded_as_kept(clawgym_checkout, state_dir,
                                                                              tmp_path):
    env = launcher_env(state_dir)
    head = four_gpu_head()
    dport = int(head[1].split("=")[1])
    address = f"http://127.0.0.1:{dport}"
    run = f"hup-{uuid.uuid4().hex[:6]}"
    a = start_launch([*base_overrides(clawgym_checkout, run), *head, "gpu_layout=split_1_1",
                      "+extra_env.STANDIN_SLEEP=600"], tmp_path, env, "a", start_new_session=True)
    sid = ""
    try:
        trainer = wait_for_trainer(clawgym_checkout, run, a, tmp_path, "a")
        sid = submission_id_of(output(tmp_path, "a"))
        os.kill(a.pid, signal.SIGHUP)
        assert a.wait(timeout=120) == 129, output(tmp_path, "a")
        text = output(tmp_path, "a")
        assert "lost the terminal (SIGHUP)" in text and f"clawgym jobs stop {sid} --address {address}" in text
        assert f"clawgym stamp {clawgym_checkout / 'exp' / run} --follow" in text
        # The job runs on, unfollowed; the head is kept on purpose, not orphaned.
        assert job_info(address, sid).status.value == "RUNNING" and alive(trainer["pid"])
        rec = head_records.load_record(dport)
        assert rec is not None and rec.kept and "SIGHUP" in rec.kept_reason and rec.users == []
        assert head_users.ownership(rec) == "kept"
        # The job's log file says why nobody follows it.
        logs = list((clawgym_checkout / "exp" / run / "logs").glob("train_*.log"))
        assert len(logs) == 1 and "lost its terminal (SIGHUP)" in logs[0].read_text()
    finally:
        if a.poll() is None:
            a.kill()
        stop_everything(address, [sid] if sid else [], env)
    assert head_records.load_record(dport) is None
    assert [p for p in head_processes(dport) if alive(p)] == []
