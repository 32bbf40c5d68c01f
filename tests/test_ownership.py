"""One owner per resource (issue 28: findings 2, 3, 5, 6 and 13a): what a launch takes is
recorded when it takes it (clawgym/common/ownership.py), and nobody else's is touched.

Real parts: real dockerd containers, real processes holding the records (a launcher is a
Python process that claimed through clawgym.common.ownership), a real Ray head for the launches, and
the job supervisor (clawgym/jobside/run_services.py) run as the job runs it.
"""

from __future__ import annotations

import http.server
import json
import os
import signal
import socket
import subprocess
import sys
import textwrap
import threading
import time
import uuid
from pathlib import Path
from typing import Dict, List

import pytest

from clawgym.common import ownership

from clawgym.backends.head import ports as head_ports, processes as head_processes, records as head_records
from clawgym.config.compose import compose
from clawgym.preflight import cleanup_leftovers
from clawgym.preflight.sandbox import engine_address
from tests.test_launch import ROOT, base_overrides, clawgym_cli, launcher_env, run_train, submission_id_of
from tests.test_head_ownership import output, start_launch, wait_for_trainer

SUPERVISOR = ROOT / "clawgym" / "jobside" / "run_services.py"


@pytest.fixture()
def state(tmp_path, monkeypatch) -> Path:
    path = tmp_path / "state"
    monkeypatch.setenv("CLAWGYM_STATE_DIR", str(path))
    return path


def holder(state: Path, code: str) -> subprocess.Popen:
    """Another launcher: a process that claims through clawgym.common.ownership, prints its launch id, and waits."""
    script = textwrap.dedent(f"""
        import sys, time
        from clawgym.common import ownership
        {code}
        print(rec.id, flush=True)
        time.sleep(600)
    """)
    proc = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True, cwd=ROOT,
                            env={**os.environ, "CLAWGYM_STATE_DIR": str(state)})
    line = proc.stdout.readline().strip()
    assert line, f"the holder did not claim (exit {proc.poll()})"
    proc.launch_id = line  # type: ignore[attr-defined]
    return proc


def stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        proc.kill()
    proc.wait(timeout=30)


# ---------------------------------------------------------------- finding 2: containers

def test_cleanup_keeps_containers_of_a_live_launch_and_removes_only_those_whose_launch_ended(
        docker_images, clawgym_checkout, state):
    image = docker_images.image("owned")
    prefix = f"clawgym-rl-o{uuid.uuid4().hex[:8]}-"
    a = holder(state, f"rec = ownership.claim(runs=['a'], save_dirs=[], sandboxes=[dict(engine={engine_address()!r}, "
                      f"prefix={prefix!r}, image={image!r})])")
    try:
        labelled = docker_images.container(image, f"{prefix}0-1", start=True,
                                           labels={ownership.LAUNCH_LABEL: a.launch_id})
        unlabelled = docker_images.container(image, f"{prefix}0-2", start=True)
        ended = docker_images.container(image, f"{prefix}0-3", start=True,
                                        labels={ownership.LAUNCH_LABEL: "0123456789abcdef"})
        cfg = compose([f"paths.root={clawgym_checkout}", "sandbox=docker", f"sandbox.image={image}",
                       f"sandbox.container_prefix={prefix}"])
        lines: List[str] = []
        removed = cleanup_leftovers(cfg, echo=lines.append)
        # A's running sandboxes (labelled with its launch, or unlabelled while A uses that prefix and
        # image) are kept; the one whose launch is gone is a leftover.
        assert removed == [f"{prefix}0-3"], lines
        assert docker_images.exists(labelled.id) and docker_images.exists(unlabelled.id)
        assert not docker_images.exists(ended.id)
        assert any(f"kept container {prefix}0-1" in ln and f"clawgym launch pid {a.pid}" in ln for ln in lines)
        # A ends: what it left is a leftover now.
        stop(a)
        assert sorted(cleanup_leftovers(cfg, echo=lines.append)) == [f"{prefix}0-1", f"{prefix}0-2"]
    finally:
        stop(a)


# ---------------------------------------------------------------- finding 3: save dirs

def test_a_save_dir_a_live_launch_holds_is_refused_with_who_holds_it_and_only_one_of_two_racing_claims_wins(
        state, tmp_path):
    save = tmp_path / "exp" / "run"
    a = holder(state, f"rec = ownership.claim(runs=['run'], save_dirs=[{str(save)!r}], sandboxes=[])")
    try:
        with pytest.raises(ownership.Held) as info:
            ownership.claim(runs=["run"], save_dirs=[str(save)], sandboxes=[])
        assert f"clawgym launch pid {a.pid} (run run)" in str(info.value)
        assert ownership.current() is None  # nothing was recorded for the refused launch
    finally:
        stop(a)
    # Two launches claiming in the same instant: one record, one refusal.
    other = tmp_path / "exp" / "race"
    racers = [subprocess.Popen([sys.executable, "-c", textwrap.dedent(f"""
        import time
        from clawgym.common import ownership
        time.sleep(max(0.0, {time.time() + 2.0} - time.time()))
        try:
            ownership.claim(runs=['race'], save_dirs=[{str(other)!r}], sandboxes=[])
            print('claimed', flush=True)
        except ownership.Held:
            print('held', flush=True)
        time.sleep(5)
    """)], stdout=subprocess.PIPE, text=True, cwd=ROOT, env={**os.environ, "CLAWGYM_STATE_DIR": str(state)})
        for _ in range(2)]
    answers = sorted(p.communicate(timeout=60)[0].strip() for p in racers)
    assert answers == ["claimed", "held"]


def test_resume_and_a_second_launch_into_a_running_runs_save_dir_are_refused_with_who_holds_it(
        clawgym_checkout, state, tmp_path):
    """A real run on a real head: `clawgym resume` of it, and a launch with the same exp_name, are
    refused while it runs, also after its launcher was SIGKILLed (its job still runs)."""
    env = launcher_env(state)
    head = [f"ray.port={head_ports.free_port()}", f"ray.dashboard_port={head_ports.free_port()}", "ray.num_gpus=4"]
    address = f"http://127.0.0.1:{head[1].split('=')[1]}"
    run = f"held-{uuid.uuid4().hex[:6]}"
    common = [*head, "gpu_layout=split_1_1", "+extra_env.STANDIN_SLEEP=600"]
    a = start_launch([*base_overrides(clawgym_checkout, run), *common, "+extra_env.STANDIN_CHECKPOINTS=1"],
                     tmp_path, env, "a")
    sid = ""
    try:
        wait_for_trainer(clawgym_checkout, run, a, tmp_path, "a")
        sid = submission_id_of(output(tmp_path, "a"))
        save = clawgym_checkout / "exp" / run
        deadline = time.time() + 60
        while not (save / "latest_checkpointed_iteration.txt").exists():
            assert time.time() < deadline, output(tmp_path, "a")
            time.sleep(0.2)
        # The same exp_name again (e.g. 20 s later): refused before anything starts, naming A.
        again = run_train([*base_overrides(clawgym_checkout, run), *common, "sglang.api_port=30002"],
                          tmp_path / "again", env)
        assert again.returncode == 2, again.stdout + again.stderr
        assert f"held by clawgym launch pid {a.pid} (run {run})" in again.stderr, again.stderr
        assert "nothing was started" in again.stderr
        # resume of the running run: refused the same way (no second trainer with --load/--save there).
        res = clawgym_cli(["resume", str(save), "sglang.api_port=30003"], env,
                          timeout=240)
        assert res.returncode == 2, res.stdout + res.stderr
        assert f"held by clawgym launch pid {a.pid}" in res.stdout + res.stderr
        # The launcher dies without a word: its job still runs there, so the save dir is still held.
        a.send_signal(signal.SIGKILL)
        a.wait(timeout=30)
        again = run_train([*base_overrides(clawgym_checkout, run), *common, "sglang.api_port=30002"],
                          tmp_path / "again2", env)
        assert again.returncode == 2, again.stdout + again.stderr
        assert sid in again.stderr and "still running" in again.stderr, again.stderr
    finally:
        if a.poll() is None:
            a.kill()
        if sid:
            clawgym_cli(["jobs", "stop", sid, "--address", address], env)
        clawgym_cli(["jobs", "stop-head", "--address", address, "--force"], env)


# ---------------------------------------------------------------- finding 13a: ports

def test_a_port_reserved_for_a_head_being_started_cannot_be_reserved_again(state):
    port = head_ports.free_port()
    other = subprocess.Popen([sys.executable, "-c", textwrap.dedent(f"""
        import time
        from clawgym.backends.head import (
            ports as head_ports,
            processes as head_processes,
            records as head_records,
        )
        r = head_ports.PortReservation()
        r.hold('127.0.0.1', {port}, 'ray.port')
        print('held', flush=True)
        time.sleep(600)
    """)], stdout=subprocess.PIPE, text=True, cwd=ROOT, env={**os.environ, "CLAWGYM_STATE_DIR": str(state)})
    try:
        assert other.stdout.readline().strip() == "held"
        mine = head_ports.PortReservation()
        # Two never-listening SO_REUSEADDR sockets could share the port: the lock says no.
        with pytest.raises(head_records.HeadError) as info:
            mine.hold("127.0.0.1", port, "ray.port")
        assert f"ray.port={port}: reserved by clawgym launch pid {other.pid}" in str(info.value)
        assert ownership.port_holder(port).startswith(f"clawgym launch pid {other.pid}")
        mine.forget()
    finally:
        stop(other)
    # Released with its holder: free again.
    assert ownership.port_holder(port) is None


def test_two_identical_launches_in_the_same_second_share_one_head_instead_of_both_reserving_its_ports(
        clawgym_checkout, state, tmp_path):
    env = launcher_env(state)
    head = [f"ray.port={head_ports.free_port()}", f"ray.dashboard_port={head_ports.free_port()}", "ray.num_gpus=4"]
    runs = [f"twin-{uuid.uuid4().hex[:6]}" for _ in range(2)]
    procs = [start_launch([*base_overrides(clawgym_checkout, r), *head, "gpu_layout=split_1_1",
                           f"sglang.api_port={30010 + i}"], tmp_path, env, f"twin{i}")
             for i, r in enumerate(runs)]
    try:
        codes = [p.wait(timeout=400) for p in procs]
        texts = [output(tmp_path, f"twin{i}") for i in range(2)]
        assert codes == [0, 0], texts
        for text in texts:
            assert "session" not in text.lower() or "session name" not in text.lower(), text
        # One head: the second launch joined (or reused) the first one's.
        assert sum("reusing the Ray head" in t for t in texts) == 1, texts
        assert head_records.list_records() == []
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()


# ---------------------------------------------------------------- finding 5: the early head

def _ray_start_of(launcher: int, port: int) -> bool:
    """The launcher's `ray start` child for that dashboard port runs."""
    psutil = head_processes.psutil_module()

    try:
        return any(f"--dashboard-port={port}" in " ".join(c.cmdline()) or
                   (str(port) in c.cmdline() and "start" in c.cmdline())
                   for c in psutil.Process(launcher).children(recursive=True))
    except psutil.Error:
        return False


def _marked(marker: str) -> List[int]:
    psutil = head_processes.psutil_module()

    found = []
    for proc in psutil.process_iter(["pid"]):
        try:
            with open(f"/proc/{proc.pid}/environ", "rb") as fh:
                if f"{head_records.MARKER_ENV}={marker}".encode() in fh.read().split(b"\0"):
                    found.append(proc.pid)
        except OSError:
            continue
    return found


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP, signal.SIGKILL])
def test_a_signal_once_the_head_begins_leaves_no_head_or_a_recorded_one_clawgym_stops(
        sig, clawgym_checkout, state, tmp_path):
    env = launcher_env(state)
    dport = head_ports.free_port()
    head = [f"ray.port={head_ports.free_port()}", f"ray.dashboard_port={dport}", "ray.num_gpus=4"]
    run = f"sig-{uuid.uuid4().hex[:6]}"
    proc = start_launch([*base_overrides(clawgym_checkout, run), *head, "gpu_layout=split_1_1"], tmp_path, env,
                        "sig", start_new_session=True)
    address = f"http://127.0.0.1:{dport}"
    try:
        deadline = time.time() + 120
        while not _ray_start_of(proc.pid, dport):
            assert proc.poll() is None and time.time() < deadline, output(tmp_path, "sig")
            time.sleep(0.02)
        # The head's record exists from before `ray start` ran.
        rec = head_records.load_record(dport)
        assert rec is not None and rec.marker, "the head being started is not recorded"
        proc.send_signal(sig)
        code = proc.wait(timeout=120)
        if sig == signal.SIGKILL:
            # Recorded: `clawgym jobs heads` shows it, `clawgym jobs stop-head` stops it.
            heads = clawgym_cli(["jobs", "heads"], env)
            assert address in heads.stdout, heads.stdout + heads.stderr
            time.sleep(2.0)  # what `ray start` still spawns
            stopped = clawgym_cli(["jobs", "stop-head", "--address", address], env)
            assert stopped.returncode == 0, stopped.stdout + stopped.stderr
        else:
            assert code == 130, output(tmp_path, "sig")
            assert "Traceback" not in output(tmp_path, "sig")
        time.sleep(1.0)
        assert head_records.load_record(dport) is None
        assert _marked(rec.marker) == [], "processes of the head are left"
    finally:
        if proc.poll() is None:
            proc.kill()
        if head_records.load_record(dport) is not None:
            clawgym_cli(["jobs", "stop-head", "--address", address, "--force"], env)


# ---------------------------------------------------------------- finding 6: the OPD teacher

class _Answering(http.server.BaseHTTPRequestHandler):
    def do_GET(self):  # noqa: N802
        self.send_response(200)
        self.end_headers()
        self.wfile.write(b"ok")

    def log_message(self, *args):
        pass


def _supervise(tmp_path: Path, service_argv: List[str], port: int, trainer: str) -> subprocess.CompletedProcess:
    spec = {"services": [{"name": "teacher", "argv": service_argv, "env": {},
                          "health_url": f"http://127.0.0.1:{port}/health_generate", "timeout_s": 60,
                          "log": str(tmp_path / "teacher.log")}]}
    (tmp_path / "spec.json").write_text(json.dumps(spec))
    return subprocess.run([sys.executable, str(SUPERVISOR), str(tmp_path / "spec.json"), "--",
                           sys.executable, "-c", trainer], capture_output=True, text=True, timeout=120)


def _server_script(port: int, seconds: float) -> List[str]:
    return [sys.executable, "-c", textwrap.dedent(f"""
        import http.server, threading, time, os
        class H(http.server.BaseHTTPRequestHandler):
            def do_GET(self):
                self.send_response(200); self.end_headers()
            def log_message(self, *a): pass
        s = http.server.HTTPServer(('127.0.0.1', {port}), H)
        threading.Thread(target=s.serve_forever, daemon=True).start()
        time.sleep({seconds})
        os._exit(7)
    """)]


def test_another_server_on_the_teachers_port_with_the_teacher_dead_does_not_make_the_job_succeed(tmp_path):
    port = head_ports.free_port()
    foreign = http.server.HTTPServer(("127.0.0.1", port), _Answering)
    threading.Thread(target=foreign.serve_forever, daemon=True).start()
    try:
        res = _supervise(tmp_path, [sys.executable, "-c", "import sys; sys.exit(3)"], port, "print('trained')")
    finally:
        foreign.shutdown()
    assert res.returncode == 1, res.stdout + res.stderr
    assert "trained" not in res.stdout and f"something already listens at http://127.0.0.1:{port}" in res.stdout


def test_a_teacher_that_dies_while_the_trainer_runs_fails_the_job(tmp_path):
    port = head_ports.free_port()
    started = time.monotonic()
    res = _supervise(tmp_path, _server_script(port, 3.0), port, "import time; time.sleep(60); print('trained')")
    assert res.returncode == 1, res.stdout + res.stderr
    assert "teacher exited with status 7 while the trainer ran" in res.stdout
    assert "trained" not in res.stdout and time.monotonic() - started < 45


def test_the_teachers_port_is_in_the_ports_preflight(clawgym_checkout):
    from tests.test_preflight import failed, free_ports, preflight

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        port = taken.getsockname()[1]
        ports = dict(zip(["sglang.api_port", "ray.dashboard_port", "ray.port"], free_ports(3)))
        outcome, _ = preflight(clawgym_checkout, *(f"{k}={v}" for k, v in ports.items()), "services=opd_teacher",
                               f"services.teacher.model_path={clawgym_checkout}", f"services.teacher.port={port}",
                               "services.teacher.gpus='7'", skip=["docker", "image", "gpus", "memory"],
                               local_head=True)
        text = failed(outcome, "ports")
    assert f"services.teacher.port={port} on 127.0.0.1: in use" in text


# ---------------------------------------------------------------- finding 13: SIGHUP before submission

def test_sighup_before_any_job_is_submitted_stops_the_head_and_says_nothing_was_submitted(
        clawgym_checkout, state, tmp_path):
    env = launcher_env(state)
    dport = head_ports.free_port()
    run = f"hup-{uuid.uuid4().hex[:6]}"
    proc = start_launch([*base_overrides(clawgym_checkout, run), f"ray.port={head_ports.free_port()}",
                         f"ray.dashboard_port={dport}", "ray.num_gpus=4", "gpu_layout=split_1_1"], tmp_path, env,
                        "hup", start_new_session=True)
    try:
        # The snapshot is written while the head comes up, before the job goes in.
        snapshots = clawgym_checkout / "exp" / run / "clawgym" / "snapshots"
        deadline = time.time() + 120
        while not (snapshots.is_dir() and any(p for p in snapshots.iterdir() if not p.name.startswith("."))):
            assert proc.poll() is None and time.time() < deadline, output(tmp_path, "hup")
            time.sleep(0.02)
        proc.send_signal(signal.SIGHUP)
        code = proc.wait(timeout=120)
        text = output(tmp_path, "hup")
        assert "keep running on None" not in text and "nothing was submitted" in text, text
        assert code == 130 and "submitted job" not in text, text
        assert head_records.load_record(dport) is None
        assert not (clawgym_checkout / "exp" / run / "standin_record.json").exists()
    finally:
        if proc.poll() is None:
            proc.kill()
        if head_records.load_record(dport) is not None:
            clawgym_cli(["jobs", "stop-head", "--address", f"http://127.0.0.1:{dport}", "--force"], env)
