"""Real launches of ``python train.py`` on real Ray (CPU), with the recording stand-in trainer.

Most tests submit to the session's shared head (``ray.address=...``); the ones about a
head that clawgym starts itself use their own free ports and ``ray.num_gpus=8``.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Dict, List, Optional

import pytest

from clawgym.backends.head import (
    liveness as head_liveness,
    ports as head_ports,
    processes as head_procs,
    records as head_records,
)
from clawgym.launch import rayjob
from tests.fixtures.checkout import LAUNCH_SKIPS, checkout_overrides

ROOT = Path(__file__).resolve().parent.parent
SECRET_VARS = ("SGLANG_API_KEY", "WANDB_KEY", "WANDB_API_KEY")


@pytest.fixture(scope="module")
def state_dir(tmp_path_factory) -> Path:
    """A private clawgym state dir: head records of these tests stay apart from anyone else's."""
    return tmp_path_factory.mktemp("clawgym_state")


@pytest.fixture(autouse=True)
def _private_state(state_dir, monkeypatch):
    """This process reads the same head records as the launches it runs."""
    monkeypatch.setenv("CLAWGYM_STATE_DIR", str(state_dir))


def launcher_env(state_dir: Path, extra: Optional[Dict[str, str]] = None) -> Dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in SECRET_VARS and k != "RAY_ADDRESS"}
    env["CLAWGYM_STATE_DIR"] = str(state_dir)
    env.update(extra or {})
    return env


def base_overrides(checkout: Path, run_name: str) -> List[str]:
    return [*checkout_overrides(checkout, skip_checks=LAUNCH_SKIPS), f"run_name={run_name}"]


def local_head_overrides() -> List[str]:
    return [f"ray.port={head_ports.free_port()}", f"ray.dashboard_port={head_ports.free_port()}", "ray.num_gpus=8"]


def train_cmd(overrides: List[str], tmp_path: Path) -> List[str]:
    return [sys.executable, str(ROOT / "train.py"), *overrides, f"hydra.run.dir={tmp_path}/hydra"]


def run_train(overrides: List[str], tmp_path: Path, env: Dict[str, str], timeout: float = 240):
    return subprocess.run(train_cmd(overrides, tmp_path), cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=timeout)


def plan_for(overrides: List[str], environ: Dict[str, str]):
    from clawgym.config.compose import compose
    from clawgym.plan.build import build_plan

    return build_plan(compose(overrides), environ=environ, timestamp="test")


def record_of(checkout: Path, run_name: str) -> dict:
    return json.loads((checkout / "exp" / run_name / "standin_record.json").read_text())


def submission_id_of(output: str) -> str:
    for line in output.splitlines():
        if line.startswith("[clawgym] submitted job "):
            return line.split()[3]
    raise AssertionError(f"no submission line in:\n{output}")


def head_processes(dashboard_port: int) -> List[int]:
    """Processes of a head clawgym started on that dashboard port (its temp dir is in their cmdline)."""
    needle = f"/clawgym/h{dashboard_port}-".encode()
    pids = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as fh:
                if needle in fh.read():
                    pids.append(int(entry))
        except OSError:
            continue
    return pids


def alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().split(")")[-1].split()[0] != "Z"
    except OSError:
        return False


def job_info(address: str, submission_id: str):
    from ray.job_submission import JobSubmissionClient

    return JobSubmissionClient(address).get_job_info(submission_id)


def clawgym_cli(args: List[str], env: Dict[str, str], timeout: float = 120):
    return subprocess.run([sys.executable, "-m", "clawgym", *args], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=timeout)


# ---------------------------------------------------------------- existing cluster (session head)

def test_job_runs_exactly_the_plan_entrypoint_and_environment(clawgym_checkout, ray_cluster, state_dir, tmp_path):
    run = f"argv-{uuid.uuid4().hex[:6]}"
    overrides = [*base_overrides(clawgym_checkout, run), *ray_cluster.overrides(), "+extra_env.STANDIN_SLEEP=1",
                 "+extra_env.STANDIN_CHECKPOINTS=2", "+extra_env.STANDIN_CHECKPOINT_EVERY=0.2"]
    env = launcher_env(state_dir)
    proc = run_train(overrides, tmp_path, env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    plan = plan_for(overrides, env)
    rec = record_of(clawgym_checkout, run)
    # The job ran `python3 <script> <flags>`: the script sees exactly the plan's argv.
    assert rec["argv"] == plan.entrypoint[1:]
    assert rec["script"] == "train_async.py"
    for key, value in plan.runtime_env["env_vars"].items():
        if key == "PYTHONPATH":
            # Ray puts the uploaded working dir in front; the plan's path order follows unchanged.
            assert rec["env"][key].split(":")[1:] == value.split(":"), key
        elif key == "TENSORBOARD_DIR":
            # Named after the launch's submission id (this plan was built with timestamp "test").
            assert rec["env"][key] == f"{plan.save_dir}/tensorboard/{rec['submission_id']}"
        else:
            assert rec["env"].get(key) == value, key
    # Ray ran it in an upload of the plan's working dir.
    assert (Path(rec["cwd"]) / "train_async.py").read_bytes() == (clawgym_checkout / "slime" / "train_async.py").read_bytes()
    # The output went to the console and to <save>/logs/train_<timestamp>.log.
    assert "[standin] train_async.py started" in proc.stdout
    # Ray's own INFO lines (package upload, "Submitted job") stay out of clawgym's output.
    for chatty in ("packaging.py:", "dashboard_sdk.py:", " sdk.py:"):
        assert chatty not in proc.stdout + proc.stderr, chatty
    logs = list((clawgym_checkout / "exp" / run / "logs").glob("train_*.log"))
    assert len(logs) == 1 and "[standin] exiting with 0" in logs[0].read_text()
    sid = submission_id_of(proc.stdout)
    assert rec["submission_id"] == sid
    assert job_info(ray_cluster.address, sid).status.value == "SUCCEEDED"
    # The checkpoint watcher ran while the launcher followed the job: both checkpoints carry the snapshot.
    for i in (1, 2):
        assert (clawgym_checkout / "exp" / run / f"iter_{i:07d}" / "clawgym_snapshot").is_dir(), i


def test_failing_trainer_gives_nonzero_exit_and_prints_log_path(clawgym_checkout, ray_cluster, state_dir, tmp_path):
    run = f"fail-{uuid.uuid4().hex[:6]}"
    overrides = [*base_overrides(clawgym_checkout, run), *ray_cluster.overrides(), "+extra_env.STANDIN_EXIT_CODE=3"]
    proc = run_train(overrides, tmp_path, launcher_env(state_dir))
    assert proc.returncode == 1, proc.stdout + proc.stderr
    logs = list((clawgym_checkout / "exp" / run / "logs").glob("train_*.log"))
    assert len(logs) == 1
    assert f"[clawgym] log: {logs[0]}" in proc.stderr
    assert "simulated failure: exit code 3" in logs[0].read_text()
    assert "Traceback" not in proc.stderr


def test_failed_job_shows_the_trainer_exit_code_and_last_lines_not_rays_long_tail(
        clawgym_checkout, ray_cluster, state_dir, tmp_path):
    run = f"tail-{uuid.uuid4().hex[:6]}"
    # Enough output that Ray's failure message carries its long log tail.
    overrides = [*base_overrides(clawgym_checkout, run), *ray_cluster.overrides(), "+extra_env.STANDIN_EXIT_CODE=3",
                 "+extra_env.STANDIN_SLEEP=1"]
    proc = run_train(overrides, tmp_path, launcher_env(state_dir))
    assert proc.returncode == 1, proc.stdout + proc.stderr
    log = list((clawgym_checkout / "exp" / run / "logs").glob("train_*.log"))[0]
    assert "FAILED: the trainer exited with code 3" in proc.stderr
    # One exit code for a failed job (1, above); the trainer's own is in the last line.
    assert "clawgym: the job failed (trainer exited 3)" in proc.stderr
    assert "last available logs" not in proc.stderr  # Ray's own tail is not repeated
    assert "  | " in proc.stderr and "simulated failure: exit code 3" in proc.stderr
    assert f"[clawgym] log: {log}" in proc.stderr


def test_existing_cluster_secrets_stay_out_unless_opted_in(clawgym_checkout, ray_cluster, state_dir, tmp_path):
    secret = f"sk-{uuid.uuid4().hex}"
    env = launcher_env(state_dir, {"SGLANG_API_KEY": secret})
    # Default: the cluster must provide secrets itself; nothing is passed.
    run = f"nosecret-{uuid.uuid4().hex[:6]}"
    proc = run_train([*base_overrides(clawgym_checkout, run), *ray_cluster.overrides()], tmp_path / "a", env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "SGLANG_API_KEY" not in record_of(clawgym_checkout, run)["env"]
    info = job_info(ray_cluster.address, submission_id_of(proc.stdout))
    assert secret not in json.dumps([info.runtime_env, info.metadata, info.entrypoint])
    # Opt-in: passed in the runtime env, with a warning that Ray keeps it.
    run = f"optin-{uuid.uuid4().hex[:6]}"
    proc = run_train([*base_overrides(clawgym_checkout, run), *ray_cluster.overrides(),
                      "ray.pass_secrets_in_runtime_env=true"], tmp_path / "b", env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert record_of(clawgym_checkout, run)["env"]["SGLANG_API_KEY"] == secret
    assert "WARNING" in proc.stderr and "job's metadata" in proc.stderr
    # Ray also logs the runtime env, secrets included, on the node: the warning says where.
    assert "runtime_env_agent.log" in proc.stderr
    assert secret not in proc.stdout + proc.stderr


def test_existing_cluster_is_never_stopped(clawgym_checkout, ray_cluster, state_dir, tmp_path):
    before = head_procs.record_processes(ray_cluster.record)
    run = f"keep-{uuid.uuid4().hex[:6]}"
    proc = run_train([*base_overrides(clawgym_checkout, run), *ray_cluster.overrides(), "ray.keep_head=false"],
                     tmp_path, launcher_env(state_dir))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "stopped Ray head" not in proc.stdout
    assert head_liveness.is_alive(ray_cluster.record)
    core = [p.pid for p in ray_cluster.record.processes if p.name.startswith(("gcs_server", "raylet"))]
    assert core and all(pid in before and alive(pid) for pid in core)


def test_detach_returns_at_once_and_the_job_is_stopped_later_with_clawgym_jobs(
        clawgym_checkout, ray_cluster, state_dir, tmp_path):
    run = f"detach-{uuid.uuid4().hex[:6]}"
    env = launcher_env(state_dir)
    overrides = [*base_overrides(clawgym_checkout, run), *ray_cluster.overrides(), "ray.detach=true",
                 "+extra_env.STANDIN_SLEEP=120"]
    t0 = time.time()
    proc = run_train(overrides, tmp_path, env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert time.time() - t0 < 60
    sid = submission_id_of(proc.stdout)
    assert f"clawgym jobs stop {sid} --address {ray_cluster.address}" in proc.stdout
    status = clawgym_cli(["jobs", "status", sid, "--address", ray_cluster.address], env)
    assert status.returncode == 0 and sid in status.stdout
    assert any(s in status.stdout for s in ("PENDING", "RUNNING")), status.stdout
    # Wait until the trainer runs, so stopping it is observable in its record.
    deadline = time.time() + 60
    while not (clawgym_checkout / "exp" / run / "standin_record.json").exists():
        assert time.time() < deadline, "the detached job never started"
        time.sleep(0.3)
    deadline = time.time() + 30
    while True:
        logs = clawgym_cli(["jobs", "logs", sid, "--address", ray_cluster.address], env)
        assert logs.returncode == 0, logs.stderr
        if "[standin] step" in logs.stdout:
            break
        assert time.time() < deadline, logs.stdout
        time.sleep(0.5)
    stop = clawgym_cli(["jobs", "stop", sid, "--address", ray_cluster.address], env)
    assert stop.returncode == 0, stop.stdout + stop.stderr
    assert f"{sid}: STOPPED" in stop.stdout
    assert job_info(ray_cluster.address, sid).status.value == "STOPPED"
    rec = record_of(clawgym_checkout, run)
    assert rec["signal"] == "SIGTERM" or not alive(rec["pid"])
    # Following later tees the output to the run's log file; the exit status is the job's (stopped: 130).
    follow = clawgym_cli(["jobs", "logs", sid, "--follow", "--address", ray_cluster.address], env)
    assert follow.returncode == 130, follow.stdout + follow.stderr
    logs = list((clawgym_checkout / "exp" / run / "logs").glob("train_*.log"))
    assert len(logs) == 1 and "[standin] step 1" in logs[0].read_text()


def test_jobs_command_names_the_fix_for_an_unknown_job(ray_cluster, state_dir):
    proc = clawgym_cli(["jobs", "status", "clawgym-no-such-job", "--address", ray_cluster.address],
                       launcher_env(state_dir))
    assert proc.returncode == 2
    assert "no job clawgym-no-such-job" in proc.stderr and "clawgym jobs list" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_jobs_command_at_a_dead_address_says_no_dashboard_answers_there(state_dir):
    from clawgym.backends.head.ports import free_port

    dead = f"http://127.0.0.1:{free_port()}"  # nothing listens there
    for args in (["status", "clawgym-some-job"], ["logs", "clawgym-some-job"], ["stop", "clawgym-some-job"], ["list"]):
        proc = clawgym_cli(["jobs", *args, "--address", dead], launcher_env(state_dir))
        assert proc.returncode == 2, proc.stderr
        assert f"no Ray dashboard answers at {dead}" in proc.stderr and "no job" not in proc.stderr
        assert "Traceback" not in proc.stderr


# ---------------------------------------------------------------- a head that clawgym starts

def test_local_head_passes_secrets_through_its_environment_only(clawgym_checkout, state_dir, tmp_path):
    sglang_key, wandb_key = f"sg-{uuid.uuid4().hex}", f"wb-{uuid.uuid4().hex}"
    env = launcher_env(state_dir, {"SGLANG_API_KEY": sglang_key, "WANDB_KEY": wandb_key,
                                   "WANDB_MODE": "offline"})
    run = f"secrets-{uuid.uuid4().hex[:6]}"
    head = local_head_overrides()
    dport = int(head[1].split("=")[1])
    overrides = [*base_overrides(clawgym_checkout, run), *head, "ray.keep_head=true"]
    proc = run_train(overrides, tmp_path / "one", env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    try:
        rec = record_of(clawgym_checkout, run)
        # The job inherited them from the head clawgym started.
        assert rec["env"]["SGLANG_API_KEY"] == sglang_key
        assert rec["env"]["WANDB_API_KEY"] == wandb_key
        assert "--use-wandb" in rec["argv"] and wandb_key not in " ".join(rec["argv"])
        address = f"http://127.0.0.1:{dport}"
        info = job_info(address, submission_id_of(proc.stdout))
        stored = json.dumps([info.runtime_env, info.metadata, info.entrypoint])
        assert sglang_key not in stored and wandb_key not in stored
        assert sglang_key not in proc.stdout + proc.stderr and wandb_key not in proc.stdout + proc.stderr
        # Nothing clawgym wrote holds them: plan, snapshot, logs, head record, Hydra dir.
        written = [p for p in (clawgym_checkout / "exp" / run).rglob("*")
                   if p.is_file() and p.name != "standin_record.json"]
        written += [p for p in (tmp_path / "one").rglob("*") if p.is_file()]
        written += list(state_dir.rglob("*.json"))
        assert written
        for path in written:
            text = path.read_text(errors="replace")
            assert sglang_key not in text and wandb_key not in text, path
        # keep_head=true: the head is still there; a second launch with the same settings reuses it.
        assert head_records.load_record(dport) is not None and head_liveness.is_alive(head_records.load_record(dport))
        run2 = f"reuse-{uuid.uuid4().hex[:6]}"
        proc2 = run_train([*base_overrides(clawgym_checkout, run2), *head], tmp_path / "two", env)
        assert proc2.returncode == 0, proc2.stdout + proc2.stderr
        assert "reusing the Ray head clawgym started earlier" in proc2.stdout
        assert record_of(clawgym_checkout, run2)["env"]["SGLANG_API_KEY"] == sglang_key
    finally:
        stop = clawgym_cli(["jobs", "stop-head", "--address", f"http://127.0.0.1:{dport}"], env)
    assert stop.returncode == 0, stop.stdout + stop.stderr
    assert head_records.load_record(dport) is None
    assert [p for p in head_processes(dport) if alive(p)] == []


def _start_foreign_cluster(tmp_path: Path):
    """Someone else's Ray cluster: plain `ray start`, no clawgym record or marker."""
    gcs, dash = head_ports.free_port(), head_ports.free_port()
    temp = f"/tmp/fgn{uuid.uuid4().hex[:6]}"
    argv = ["ray", "start", "--head", "--node-ip-address", "127.0.0.1", "--port", str(gcs),
            "--dashboard-host", "127.0.0.1", "--dashboard-port", str(dash), "--disable-usage-stats",
            "--temp-dir", temp, "--ray-client-server-port", str(head_ports.free_port()),
            "--dashboard-agent-listen-port", str(head_ports.free_port()), "--num-cpus", "1"]
    starter = subprocess.Popen(argv, start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    assert starter.wait(timeout=120) == 0
    return starter.pid, f"http://127.0.0.1:{dash}", temp


def _session_members(sid: int) -> List[int]:
    out = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                if os.getsid(int(entry)) == sid and alive(int(entry)):
                    out.append(int(entry))
            except OSError:
                continue
    return out


def test_foreign_processes_and_clusters_survive_launch_and_cleanup(clawgym_checkout, state_dir, tmp_path):
    import shutil

    foreign_py = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"], start_new_session=True)
    cluster_sid, cluster_address, cluster_temp = _start_foreign_cluster(tmp_path)
    try:
        members = _session_members(cluster_sid)
        assert members and rayjob.dashboard_responds(cluster_address)
        head = local_head_overrides()
        dport = int(head[1].split("=")[1])
        # A stale record of an earlier launch on our port whose pid now belongs to someone else
        # (pid reused: other create time) and whose session id is the foreign cluster's.
        py = head_procs.psutil_module().Process(foreign_py.pid)
        stale = head_records.HeadRecord(
            dashboard_address=f"http://127.0.0.1:{dport}", dashboard_port=dport, gcs_address="127.0.0.1:1",
            temp_dir=str(tmp_path / "gone"), session_dir=None, sid=cluster_sid, marker="0" * 16, start_time=0.0,
            argv=[], plan_argv=[], salt="x", digest="x",
            processes=[head_records.ProcessId(foreign_py.pid, py.create_time() - 100, "gcs_server"),
                       head_records.ProcessId(members[0], 1.0, "raylet")])
        head_records.write_record(stale)
        run = f"foreign-{uuid.uuid4().hex[:6]}"
        proc = run_train([*base_overrides(clawgym_checkout, run), *head], tmp_path, launcher_env(state_dir))
        assert proc.returncode == 0, proc.stdout + proc.stderr
        # Our head was started and, not kept, stopped again: nothing of it remains.
        assert "started Ray head" in proc.stdout and "stopped Ray head" in proc.stdout
        assert [p for p in head_processes(dport) if alive(p)] == []
        assert not (state_dir / "heads" / f"{dport}.json").exists()
        # Someone else's process and cluster are untouched.
        assert foreign_py.poll() is None
        assert all(alive(pid) for pid in members)
        assert rayjob.dashboard_responds(cluster_address)
    finally:
        foreign_py.kill()
        foreign_py.wait()
        head_procs.terminate({p: head_procs.psutil_module().Process(p) for p in _session_members(cluster_sid)},
                           grace=3.0)
        shutil.rmtree(cluster_temp, ignore_errors=True)


def test_ctrl_c_stops_the_job_exits_130_and_leaves_nothing_running(clawgym_checkout, state_dir, tmp_path):
    run = f"sigint-{uuid.uuid4().hex[:6]}"
    head = local_head_overrides()
    dport = int(head[1].split("=")[1])
    overrides = [*base_overrides(clawgym_checkout, run), *head, "+extra_env.STANDIN_SLEEP=300"]
    proc = subprocess.Popen(train_cmd(overrides, tmp_path), cwd=ROOT, env=launcher_env(state_dir),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    record = clawgym_checkout / "exp" / run / "standin_record.json"
    try:
        deadline = time.time() + 120
        while not record.exists():
            assert proc.poll() is None, proc.communicate()
            assert time.time() < deadline, "the job never started"
            time.sleep(0.3)
        trainer_pid = json.loads(record.read_text())["pid"]
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, out + err
    assert "stopping job" in err
    assert "Traceback" not in err
    rec = json.loads(record.read_text())
    assert rec["signal"] == "SIGTERM" or not alive(trainer_pid)
    assert not alive(trainer_pid)
    assert [p for p in head_processes(dport) if alive(p)] == []
    assert not (state_dir / "heads" / f"{dport}.json").exists()


def test_follow_falls_back_to_polling_when_the_log_stream_drops(ray_cluster, tmp_path, capsys):
    from clawgym.launch.rayjob import JobHandle, submit
    from clawgym.plan.build import LaunchPlan

    class DroppedStream(JobHandle):
        def _tail(self, out):  # the websocket closes at once while the job runs on
            out.put(None)

    work = tmp_path / "wd"
    work.mkdir()
    code = "import time\nfor i in range(6):\n    print(f'line {i}', flush=True)\n    time.sleep(0.5)\n"
    plan = LaunchPlan(entrypoint=["python3", "-c", code], working_dir=str(work), runtime_env={"env_vars": {}},
                      ray_start=None, ray_start_env={}, submission_id=f"clawgym-poll-{uuid.uuid4().hex[:8]}",
                      address=ray_cluster.address, log_file=str(tmp_path / "logs" / "train_x.log"))
    handle = submit(ray_cluster.address, plan, secrets={})
    dropped = DroppedStream(handle.address, handle.submission_id, plan)
    assert dropped.follow() == 0
    out = capsys.readouterr().out
    log = (tmp_path / "logs" / "train_x.log").read_text()
    for i in range(6):
        assert out.count(f"line {i}\n") == 1 and log.count(f"line {i}\n") == 1


def test_ctrl_c_before_the_launcher_follows_the_job_says_the_same_and_stops_it(ray_cluster, tmp_path, capsys):
    # A SIGINT can land after the job is submitted but before the launcher follows it (while it records
    # the head, the snapshot, the ticker). The user sees the same words as Ctrl-C while following.
    from clawgym.launch.rayjob import submit
    from clawgym.pipeline.jobs import RUNNING, STOPPED, PipelineJob, PipelineOptions
    from clawgym.pipeline.pipeline import Pipeline
    from clawgym.plan.build import LaunchPlan

    work = tmp_path / "wd"
    work.mkdir()
    plan = LaunchPlan(entrypoint=["python3", "-c", "import time; time.sleep(300)"], working_dir=str(work),
                      runtime_env={"env_vars": {}}, ray_start=None, ray_start_env={},
                      submission_id=f"clawgym-int-{uuid.uuid4().hex[:8]}", address=ray_cluster.address,
                      log_file=str(tmp_path / "logs" / "train_x.log"))
    handle = submit(ray_cluster.address, plan, secrets={})
    deadline = time.time() + 60
    while handle.status() != "RUNNING":
        assert time.time() < deadline, handle.status()
        time.sleep(0.3)
    job = PipelineJob(plan=plan, status=RUNNING, handle=handle, submission_id=plan.submission_id)
    Pipeline([job], PipelineOptions())._interrupt()
    err = capsys.readouterr().err
    assert f"interrupted: stopping job {plan.submission_id}" in err
    assert job.status == STOPPED
    assert handle.status() == "STOPPED"


def test_failed_preflight_stops_the_head_started_alongside_it_and_names_the_fix(clawgym_checkout, state_dir,
                                                                                tmp_path):
    head = local_head_overrides()
    gcs, dport = int(head[0].split("=")[1]), int(head[1].split("=")[1])
    overrides = [*base_overrides(clawgym_checkout, f"pf-{uuid.uuid4().hex[:6]}"), *head,
                 f"paths.slime={tmp_path / 'no-slime-here'}"]
    proc = run_train(overrides, tmp_path, launcher_env(state_dir))
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "preflight failed at 'checkout' (1 check): nothing was started" in proc.stderr
    assert "Traceback" not in proc.stderr
    # The head started before the checklist (it needs nothing preflight checks) and was stopped after it.
    out = proc.stdout
    assert out.index("starting a Ray head") < out.index("preflight of") < out.index("stopped the Ray head")
    assert head_processes(dport) == [] and head_records.load_record(dport) is None
    assert not list(Path("/tmp/clawgym").glob(f"h{dport}-*"))
    # Its reserved ports are free again.
    import socket

    for port in (gcs, dport):
        with socket.socket() as s:
            s.bind(("127.0.0.1", port))


def test_a_config_validation_refuses_leaves_no_head_and_the_report_does_not_mention_one(clawgym_checkout, state_dir,
                                                                                       tmp_path):
    # The head is begun while the config is validated (tests/test_head_early.py); a refusal stops it again.
    head = local_head_overrides()
    gcs, dport = int(head[0].split("=")[1]), int(head[1].split("=")[1])
    overrides = [*base_overrides(clawgym_checkout, f"vr-{uuid.uuid4().hex[:6]}"), *head, "rollout.temperature=0"]
    proc = run_train(overrides, tmp_path, launcher_env(state_dir))
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert proc.stderr.strip().startswith("clawgym: invalid configuration") and "[temperature-positive]" in proc.stderr
    assert "Ray head" not in proc.stdout + proc.stderr and "Traceback" not in proc.stderr
    assert head_processes(dport) == [] and head_records.load_record(dport) is None
    assert not list(Path("/tmp/clawgym").glob(f"h{dport}-*"))
    import socket

    for port in (gcs, dport):
        with socket.socket() as s:
            s.bind(("127.0.0.1", port))
