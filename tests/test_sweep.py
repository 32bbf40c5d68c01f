"""Sweeps through the clawgym launcher: checks up front, packing by GPUs, real JobReturns.

Real Ray (the session head with 8 declared GPUs, used as an existing cluster, and one
head the sweep starts itself), the fixture checkout's recording stand-in trainers, and
``python train.py -m ...`` run as users run it.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Dict, List, Optional

import pytest
from hydra.core.utils import JobStatus

from clawgym.backends.head import ports as head_ports, records as head_records
from clawgym.launch import rayjob
from clawgym.common.overrides import differing_overrides
from clawgym.sweep.core import default_run_name
from tests.fixtures.checkout import checkout_overrides

ROOT = Path(__file__).resolve().parent.parent
TRAIN = ROOT / "train.py"
#: Checks that need GPUs or the gateway image, neither of which the test machine has.
SKIPS = ["gpus", "docker", "image", "memory"]  # memory: tests/test_memory_*


def sweep_overrides(checkout: Path, tmp_path: Path, *extra: str) -> List[str]:
    """A sweep on the fixture checkout whose save dirs, records and job dirs live in tmp_path."""
    return [*checkout_overrides(checkout, skip_checks=SKIPS), "sandbox.cleanup_leftovers=false",
            f"paths.save={tmp_path}/exp/${{run_name}}", f"+extra_env.STANDIN_RECORD_DIR={tmp_path}/records",
            f"hydra.sweep.dir={tmp_path}/multirun", "hydra.launcher.poll_interval=0.2", *extra]


def run_sweep(tmp_path: Path, overrides: List[str], *, env: Optional[Dict[str, str]] = None,
              timeout: float = 240) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(TRAIN), "-m", *overrides], cwd=tmp_path, capture_output=True,
                          text=True, timeout=timeout, env={**os.environ, **(env or {})})


def records(tmp_path: Path) -> List[dict]:
    """The stand-in trainers' records (argv, env, start/end), by start time."""
    found = [json.loads(p.read_text()) for p in sorted((tmp_path / "records").glob("*.json"))]
    return sorted(found, key=lambda r: r["start"])


def overlap(a: dict, b: dict) -> bool:
    return a["start"] < b["end"] and b["start"] < a["end"]


# ---------------------------------------------------------------- naming (pure)

def test_default_run_names_come_from_the_overrides_that_differ() -> None:
    jobs = [["gpu_layout=split_4_4", "rollout.temperature=0.7", "dry_run=true"],
            ["gpu_layout=colocate_8", "rollout.temperature=0.7", "dry_run=true"],
            ["gpu_layout=colocate_8", "rollout.temperature=0.9", "dry_run=true"]]
    differing = differing_overrides(jobs)
    assert differing == [["gpu_layout=split_4_4", "rollout.temperature=0.7"],
                         ["gpu_layout=colocate_8", "rollout.temperature=0.7"],
                         ["gpu_layout=colocate_8", "rollout.temperature=0.9"]]
    names = [default_run_name("exp", d) for d in differing]
    assert names[0] == "exp_gpu_layout=split_4_4,rollout.temperature=0.7"
    assert len(set(names)) == 3


def test_default_run_names_are_folder_names_even_for_paths_and_long_sweeps() -> None:
    name = default_run_name("exp", ["sandbox.rootfs=/srv/rootfs a", "+extra_env.X=y"])
    assert "/" not in name and " " not in name and name.startswith("exp_sandbox.rootfs=")
    long = [default_run_name("exp", [f"extra_args=[--x{'y' * 300}{i}]"]) for i in range(2)]
    assert all(len(n) <= 150 for n in long) and long[0] != long[1]


# ---------------------------------------------------------------- dry runs (no Ray)

@pytest.mark.parametrize("swept", [
    ["sandbox=docker,chroot", "sandbox.rootfs=/srv/rootfs"],
    ["gpu_layout=split_4_4,colocate_8"],
    ["rollout.train_num_workers=32,64"],
])
def test_dry_run_sweep_writes_one_launch_plan_per_job_dir(clawgym_checkout, tmp_path, swept) -> None:
    proc = run_sweep(tmp_path, sweep_overrides(clawgym_checkout, tmp_path, *swept, "dry_run=true"))
    assert proc.returncode == 0, proc.stderr
    plans = [json.loads((tmp_path / "multirun" / str(i) / "launch_plan.json").read_text()) for i in range(2)]
    assert len({p["run_name"] for p in plans}) == 2
    assert len({p["save_dir"] for p in plans}) == 2
    assert not (tmp_path / "records").exists()  # nothing started
    for i in range(2):
        assert (tmp_path / "multirun" / str(i) / ".hydra" / "config.yaml").is_file()
    if swept[0].startswith("sandbox"):
        env = [p["runtime_env"]["env_vars"]["OPENCLAW_ROOTFS"] for p in plans]
        assert env == ["", "/srv/rootfs"]
    if swept[0].startswith("gpu_layout"):
        assert [p["entrypoint"][1] for p in plans] == ["train_async.py", "train.py"]


# ---------------------------------------------------------------- refused up front

def test_sweep_sharing_a_run_name_is_refused_before_any_submission(clawgym_checkout, ray_cluster, tmp_path) -> None:
    proc = run_sweep(tmp_path, sweep_overrides(clawgym_checkout, tmp_path, *ray_cluster.overrides(),
                                               "run_name=same", "rollout.temperature=0.6,0.7"))
    assert proc.returncode == 2
    assert "sweep refused" in proc.stderr and "'same'" in proc.stderr
    assert "save dir" in proc.stderr and "run name" in proc.stderr
    assert "Traceback" not in proc.stderr
    assert not (tmp_path / "records").exists() and not (tmp_path / "exp").exists()


def test_sweep_sharing_a_wandb_run_name_is_refused_before_any_submission(clawgym_checkout, ray_cluster,
                                                                        tmp_path) -> None:
    # Distinct run names and save dirs, but one W&B group: slime would name both W&B runs after it.
    proc = run_sweep(tmp_path, sweep_overrides(clawgym_checkout, tmp_path, *ray_cluster.overrides(),
                                               "wandb.enabled=true", "wandb.group=shared",
                                               "rollout.temperature=0.6,0.7"))
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "sweep refused" in proc.stderr and "--wandb-group shared" in proc.stderr
    assert "Traceback" not in proc.stderr
    assert not (tmp_path / "records").exists() and not (tmp_path / "exp").exists()


def test_invalid_job_in_sweep_reports_every_problem_and_submits_nothing(clawgym_checkout, ray_cluster,
                                                                        tmp_path) -> None:
    proc = run_sweep(tmp_path, sweep_overrides(clawgym_checkout, tmp_path, *ray_cluster.overrides(),
                                               "rollout.temperature=0.7,-1", "perf.tensor_parallel=4,3"))
    assert proc.returncode == 2
    err = proc.stderr
    assert "3 of 4 jobs invalid" in err
    # Each bad job is named with its overrides; the good job (#0) is not reported.
    assert "sweep job #1" in err and "perf.tensor_parallel=3" in err and "rollout.temperature=-1" in err
    assert "sweep job #0" not in err
    assert "Traceback" not in err
    assert not (tmp_path / "records").exists() and not (tmp_path / "exp").exists()


def test_sweep_preflights_every_job_before_submitting_any(clawgym_checkout, ray_cluster, tmp_path) -> None:
    # Job #0 (docker, its checks skipped) would pass; job #1's chroot rootfs does not exist.
    proc = run_sweep(tmp_path, sweep_overrides(clawgym_checkout, tmp_path, *ray_cluster.overrides(),
                                               "sandbox=docker,chroot", f"sandbox.rootfs={tmp_path}/no-rootfs"))
    assert proc.returncode == 2
    assert "preflight failed for 1 of 2 jobs" in proc.stderr and "sweep job #1" in proc.stderr
    assert "rootfs" in proc.stderr
    assert not (tmp_path / "records").exists()
    assert not list((tmp_path / "exp").glob("*/logs"))


def test_job_needing_more_gpus_than_the_cluster_is_refused(clawgym_checkout, ray_cluster, tmp_path) -> None:
    proc = run_sweep(tmp_path, sweep_overrides(
        clawgym_checkout, tmp_path, *ray_cluster.overrides(), "gpu_layout=split_4_4",
        "gpu_layout.num_gpus=16", "gpu_layout.actor_gpus=8,4", "gpu_layout.rollout_gpus=8"))
    assert proc.returncode == 2
    assert f"the cluster has {ray_cluster.num_gpus} GPUs" in proc.stderr
    assert "needs 16 GPUs" in proc.stderr and "needs 12 GPUs" in proc.stderr
    assert not (tmp_path / "records").exists()


# ---------------------------------------------------------------- packing on a real cluster

def test_jobs_that_fit_together_run_concurrently_and_return_real_job_returns(
        clawgym_checkout, ray_cluster, tmp_path, hydra_sweep_runner, hydra_restore_singletons) -> None:
    from clawgym.app import run

    overrides = sweep_overrides(clawgym_checkout, tmp_path, *ray_cluster.overrides(), "gpu_layout=split_1_1",
                                "+extra_env.STANDIN_SLEEP=4", "rollout.temperature=0.6,0.8")
    overrides = [o for o in overrides if not o.startswith("hydra.sweep.dir=")]
    with hydra_sweep_runner(calling_file=str(TRAIN), calling_module=None, task_function=run, config_path="conf",
                            config_name="config", overrides=overrides, temp_dir=tmp_path / "multirun") as sweep:
        returns = sweep.returns[0]
        assert [r.status for r in returns] == [JobStatus.COMPLETED, JobStatus.COMPLETED]
        sids = [r.return_value["submission_id"] for r in returns]
        for i, r in enumerate(returns):
            assert r.return_value["exit_code"] == 0 and r.return_value["status"] == "succeeded"
            assert r.cfg.rollout.temperature == [0.6, 0.8][i]
            assert (tmp_path / "multirun" / str(i) / ".hydra" / "config.yaml").is_file()
            assert Path(r.return_value["log_file"]).is_file()
            assert "[standin] exiting with 0" in Path(r.return_value["log_file"]).read_text()
    recs = records(tmp_path)
    assert sorted(r["submission_id"] for r in recs) == sorted(sids)
    assert overlap(recs[0], recs[1]), "2 + 2 GPUs fit the 8-GPU cluster together: the jobs must overlap"
    # Concurrent jobs on one node get their own API server ports.
    assert {r["env"]["PORT"] for r in recs} == {"30001", "30002"}


def test_jobs_that_do_not_fit_together_run_one_after_another(clawgym_checkout, ray_cluster, tmp_path) -> None:
    proc = run_sweep(tmp_path, sweep_overrides(clawgym_checkout, tmp_path, *ray_cluster.overrides(),
                                               "+extra_env.STANDIN_SLEEP=2", "gpu_layout=split_4_4,colocate_8"))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    recs = records(tmp_path)
    assert [r["argv"][0] for r in recs] == ["train_async.py", "train.py"]
    assert recs[0]["end"] <= recs[1]["start"], "8 + 8 GPUs do not fit 8 together: the second job must wait"
    out = proc.stdout
    assert "queued 1 | running 1 | succeeded 0 | failed 0" in out
    assert "queued 0 | running 0 | succeeded 2 | failed 0" in out
    # Summary table: one row per job with its submission id and status.
    for r in recs:
        assert r["submission_id"] in out
    assert out.count("succeeded  ") >= 2


def test_failing_job_makes_the_sweep_exit_non_zero_and_others_still_run(clawgym_checkout, ray_cluster,
                                                                         tmp_path) -> None:
    proc = run_sweep(tmp_path, sweep_overrides(clawgym_checkout, tmp_path, *ray_cluster.overrides(),
                                               "gpu_layout=split_1_1", "+extra_env.STANDIN_EXIT_CODE=3,0"))
    assert proc.returncode != 0
    recs = records(tmp_path)
    assert sorted(r["exit_code"] for r in recs) == [0, 3]
    assert "job #0 FAILED" in proc.stdout and "job #1 succeeded" in proc.stdout
    # The failure names the job and its log; no traceback.
    assert "sweep job #0" in proc.stderr and "log:" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_failed_sweep_job_ends_with_the_summary_and_exit_1_without_hydras_trailer(clawgym_checkout, ray_cluster,
                                                                                  tmp_path) -> None:
    proc = run_sweep(tmp_path, sweep_overrides(clawgym_checkout, tmp_path, *ray_cluster.overrides(),
                                               "gpu_layout=split_1_1", "+extra_env.STANDIN_EXIT_CODE=3,0"))
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "HYDRA_FULL_ERROR" not in proc.stderr and "Error executing job" not in proc.stderr
    # The summary is printed, and the failure names the trainer's exit code and the log.
    assert "submission id" in proc.stdout and "failed" in proc.stdout
    assert "sweep job #0" in proc.stderr and "trainer exit code 3" in proc.stderr and "log:" in proc.stderr
    assert "1 of 2 sweep jobs failed" in proc.stderr


def test_sweep_starts_one_head_alongside_preflight_submits_once_it_answers_and_stops_it(clawgym_checkout,
                                                                                        tmp_path) -> None:
    port, dash = head_ports.free_port(), head_ports.free_port()
    secret = "sweep-secret-value-0451"
    proc = run_sweep(tmp_path, sweep_overrides(clawgym_checkout, tmp_path, f"ray.port={port}",
                                               f"ray.dashboard_port={dash}", "ray.num_gpus=8",
                                               "gpu_layout=split_1_1", "rollout.temperature=0.6,0.8"),
                     env={"SGLANG_API_KEY": secret})
    assert proc.returncode == 0, proc.stdout + proc.stderr
    out = proc.stdout
    assert out.count("started Ray head") == 1
    # The head starts before the checks (it needs none of them); the jobs that fit go in as soon as
    # its dashboard answers, before `ray start` has finished and the head is recorded.
    assert out.index("starting a Ray head") < out.index("[sweep] preflight passed") < \
        out.index("[clawgym] submitted job") < out.index("started Ray head")
    assert out.count("[clawgym] submitted job") == 2
    assert out.rindex("[clawgym] submitted job") < out.index("started Ray head")
    recs = records(tmp_path)
    assert len(recs) == 2
    assert {r["env"]["RAY_ADDRESS"].rsplit(":", 1)[1] for r in recs} == {str(port)}
    # The secret reached both jobs through the head's environment ...
    assert all(r["env"].get("SGLANG_API_KEY") == secret for r in recs)
    # ... and is stored nowhere: job dirs, plans, snapshots, logs.
    for path in list((tmp_path / "multirun").rglob("*")) + list((tmp_path / "exp").rglob("*")):
        if path.is_file():
            assert secret not in path.read_text(errors="replace"), path
    # The head we started is gone, with its record.
    assert head_records.load_record(dash) is None
    assert not rayjob.dashboard_responds(f"http://127.0.0.1:{dash}")


def test_ctrl_c_stops_running_jobs_submits_no_queued_one_and_stops_our_head(clawgym_checkout, tmp_path) -> None:
    port, dash = head_ports.free_port(), head_ports.free_port()
    proc = subprocess.Popen(
        [sys.executable, str(TRAIN), "-m", *sweep_overrides(
            clawgym_checkout, tmp_path, f"ray.port={port}", f"ray.dashboard_port={dash}", "ray.num_gpus=8",
            "+extra_env.STANDIN_SLEEP=120", "gpu_layout=split_4_4,colocate_8")],
        cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.time() + 120
        while time.time() < deadline and not list((tmp_path / "records").glob("*.json")):
            time.sleep(0.3)
        assert list((tmp_path / "records").glob("*.json")), "the first job never started"
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, out + err
    recs = records(tmp_path)
    assert len(recs) == 1, "the queued job must never be submitted"
    # The running job was stopped (the stand-in saw Ray's SIGTERM), then the head we started.
    assert recs[0]["signal"] == "SIGTERM" and recs[0]["end"] is not None
    assert head_records.load_record(dash) is None
    assert not rayjob.dashboard_responds(f"http://127.0.0.1:{dash}")
    assert "interrupted" in out and "not started" in out


def test_detached_sweep_is_refused_when_its_jobs_cannot_all_run_at_once(clawgym_checkout, ray_cluster,
                                                                         tmp_path) -> None:
    proc = run_sweep(tmp_path, sweep_overrides(clawgym_checkout, tmp_path, *ray_cluster.overrides(),
                                               "ray.detach=true", "gpu_layout=split_4_4,colocate_8"))
    assert proc.returncode == 2
    assert "ray.detach=true needs every job to run at once" in proc.stderr and "16 GPUs" in proc.stderr
    assert not (tmp_path / "records").exists()


def test_detached_sweep_submits_every_job_and_exits_while_they_run(clawgym_checkout, ray_cluster, tmp_path) -> None:
    from ray.job_submission import JobSubmissionClient

    proc = run_sweep(tmp_path, sweep_overrides(clawgym_checkout, tmp_path, *ray_cluster.overrides(),
                                               "ray.detach=true", "+extra_env.STANDIN_SLEEP=20",
                                               "gpu_layout=split_1_1", "rollout.temperature=0.6,0.8"))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    client = JobSubmissionClient(ray_cluster.address)
    sids = re.findall(r"follow: clawgym jobs logs (\S+)", proc.stdout)
    assert len(sids) == 2
    try:
        # The sweep returned while both jobs still run on the cluster.
        assert {client.get_job_status(s).value for s in sids} <= {"PENDING", "RUNNING"}
    finally:
        for s in sids:
            client.stop_job(s)


def test_sweep_head_declares_the_node_gpus_and_jobs_get_their_own_api_ports(clawgym_checkout, tmp_path) -> None:
    # One head serves every job, so it must not declare only one job's layout (split_1_1: 2 GPUs).
    proc = run_sweep(tmp_path, sweep_overrides(clawgym_checkout, tmp_path, "gpu_layout=split_1_1",
                                               "rollout.temperature=0.6,0.8", "dry_run=true"))
    assert proc.returncode == 0, proc.stderr
    plans = [json.loads((tmp_path / "multirun" / str(i) / "launch_plan.json").read_text()) for i in range(2)]
    assert all("--num-gpus" not in p["ray_start"] for p in plans)  # Ray detects the node's GPUs
    assert [p["runtime_env"]["env_vars"]["PORT"] for p in plans] == ["30001", "30002"]
    # What the user sets explicitly is kept.
    proc = run_sweep(tmp_path, sweep_overrides(clawgym_checkout, tmp_path, "gpu_layout=split_1_1", "ray.num_gpus=8",
                                               "sglang.api_port=31000,31001", "dry_run=true",
                                               "hydra.sweep.dir=" + str(tmp_path / "explicit")))
    assert proc.returncode == 0, proc.stderr
    plans = [json.loads((tmp_path / "explicit" / str(i) / "launch_plan.json").read_text()) for i in range(2)]
    assert all(p["ray_start"][p["ray_start"].index("--num-gpus") + 1] == "8" for p in plans)
    assert [p["runtime_env"]["env_vars"]["PORT"] for p in plans] == ["31000", "31001"]


def test_sweep_jobs_sharing_a_port_on_one_head_are_refused_before_anything_starts(clawgym_checkout, tmp_path) -> None:
    # A port chosen once for every job: the sweep cannot spread it, and two API servers on one node clash.
    port, dash = head_ports.free_port(), head_ports.free_port()
    proc = run_sweep(tmp_path, sweep_overrides(clawgym_checkout, tmp_path, f"ray.port={port}",
                                               f"ray.dashboard_port={dash}", "ray.num_gpus=8", "gpu_layout=split_1_1",
                                               "sglang.api_port=30500", "rollout.temperature=0.6,0.8"))
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr
    assert "job #1" in proc.stderr and "job #0" in proc.stderr and "port 30500" in proc.stderr
    assert "nothing was started" in proc.stderr and "sglang.api_port=30001,30002" in proc.stderr
    # No head was started, no job ran, no snapshot was left.
    assert "started Ray head" not in proc.stdout
    assert not rayjob.dashboard_responds(f"http://127.0.0.1:{dash}")
    assert not (tmp_path / "records").exists()
    assert not list((tmp_path / "exp").rglob("config.resolved.yaml"))
