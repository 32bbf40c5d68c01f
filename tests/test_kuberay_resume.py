"""KubeRay's retry of a RayJob resumes from the last complete checkpoint (clawgym/jobside/resume_load.py).

KubeRay retries a failed RayJob up to ``spec.backoffLimit`` times with the same entrypoint on a new
RayCluster. Here a real Ray head stands in for each new cluster and the manifest's own entrypoint is
submitted again after a failure, as KubeRay's submitter would; the shim itself is run directly for the
cases that need no trainer (a retry with nothing to resume is refused, never started from scratch).
"""

from __future__ import annotations

import json
import shlex
import subprocess
import sys
import uuid
from pathlib import Path

import yaml

import clawgym.demo.standin_trainer as standin
from clawgym.backends.kuberay import entrypoint, manifest, write_resume_shim
from clawgym.common.exit_codes import FAILED
from clawgym.config.compose import compose, to_plain
from clawgym.jobside import resume_load
from clawgym.plan.build import build_plan_from_dict

SHIM = Path(resume_load.__file__)
ECHO = [sys.executable, "-c", "import sys, json; print(json.dumps(sys.argv[1:]))"]


def shim(save: Path, starts: Path, *trainer: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(SHIM), "--save", str(save), "--starts", str(starts), "--", *trainer],
                          capture_output=True, text=True, timeout=60)


def _ckpt(save: Path, it: int, tracker: bool = True) -> None:
    (save / f"iter_{it:07d}").mkdir(parents=True)
    if tracker:
        (save / "latest_checkpointed_iteration.txt").write_text(str(it))


def kuberay_starts(address: str, spec: dict, save: Path, starts: int = 2) -> tuple:
    """Submit the manifest's own entrypoint ``starts`` times, as KubeRay's first start and its retries
    would (same entrypoint, a new cluster each): (Ray statuses, the stand-in's record of each start or
    None where the trainer never ran, the last start's logs)."""
    from ray.job_submission import JobSubmissionClient

    from clawgym.launch.rayjob import JobHandle

    client = JobSubmissionClient(address)
    runtime_env = yaml.safe_load(spec["runtimeEnvYAML"])
    statuses, records = [], []
    for attempt in range(1, starts + 1):
        sid = f"{spec['jobId']}-{attempt}"
        (save / "standin_record.json").unlink(missing_ok=True)
        client.submit_job(entrypoint=spec["entrypoint"], submission_id=sid, runtime_env=runtime_env)
        statuses.append(JobHandle.attach(address, sid).wait(timeout=120))
        rec = save / "standin_record.json"
        records.append(json.loads(rec.read_text()) if rec.exists() else None)
    return statuses, records, client.get_job_logs(sid)


def test_the_first_start_passes_the_trainer_through_unchanged(tmp_path):
    res = shim(tmp_path / "save", tmp_path / "starts", *ECHO, "--save", "x", "--load", "/ckpt")
    assert res.returncode == 0, res.stderr
    assert json.loads(res.stdout.splitlines()[-1]) == ["--save", "x", "--load", "/ckpt"]
    assert "a fresh start" in res.stdout
    assert json.loads((tmp_path / "starts").read_text())["attempt"] == 1


def test_a_retry_resumes_from_the_tracker_and_names_a_save_cut_short(tmp_path):
    save = tmp_path / "save"
    _ckpt(save, 4)
    _ckpt(save, 6, tracker=False)  # written after the tracker's iteration: never loaded
    (tmp_path / "starts").write_text('{"attempt": 1}\n')
    res = shim(save, tmp_path / "starts", *ECHO, "--save", str(save), "--load", "/elsewhere")
    assert res.returncode == 0, res.stderr
    assert json.loads(res.stdout.splitlines()[-1]) == ["--save", str(save), "--load", str(save)]
    assert "attempt 2 of this RayJob: resuming from iter_0000004" in res.stdout
    assert "iter_0000006" in res.stdout and "a save cut short, not loaded" in res.stdout


def test_a_retry_with_no_complete_checkpoint_is_refused_never_started_from_scratch(tmp_path):
    save = tmp_path / "save"
    _ckpt(save, 2, tracker=False)
    (tmp_path / "starts").write_text('{"attempt": 1}\n')
    marker = tmp_path / "trainer-ran"
    res = shim(save, tmp_path / "starts", sys.executable, "-c", f"open({str(marker)!r}, 'w')")
    assert res.returncode == FAILED and not marker.exists()
    assert "refusing to start the run from scratch: no latest_checkpointed_iteration.txt" in res.stdout
    assert "--ref-load at rollout 0" in res.stdout and "fix: lower checkpoint.save_interval" in res.stdout
    assert json.loads((tmp_path / "starts").read_text().splitlines()[-1])["refused"]


def test_restart_disabled_has_no_retry_policy_and_no_shim(tmp_path):
    c = to_plain(compose(["paths.root=/workspace/ClawGym-RL", "cluster=kuberay", "kuberay.image=img:1",
                          "kuberay.pvc=runs", "restart.enabled=false"]))
    plan = build_plan_from_dict(c, environ={}, timestamp="20260101_000000")
    spec = manifest(plan, c)["spec"]
    assert "backoffLimit" not in spec and shlex.split(spec["entrypoint"]) == plan.job_entrypoint


def test_a_kuberay_retry_of_the_manifests_entrypoint_resumes_a_crashed_run(clawgym_checkout, ray_cluster, tmp_path):
    from tests.fixtures.checkout import checkout_overrides

    save = tmp_path / "save"
    c = to_plain(compose([*checkout_overrides(clawgym_checkout, supervised=True), "cluster=kuberay", "kuberay.image=img:1",
                          "kuberay.pvc=runs", f"paths.save={save}", "rollout.num_rollout=5",
                          "+extra_env.STANDIN_RUN_ROLLOUTS=5", "+extra_env.STANDIN_STEP_SLEEP=0.05",
                          "+extra_env.STANDIN_FAIL=crash@3", f"+extra_env.STANDIN_FAIL_ONCE={tmp_path}/once",
                          f"run_name=k8s-retry-{uuid.uuid4().hex[:6]}"]))
    plan = build_plan_from_dict(c, environ={}, timestamp="20260101_000001")
    spec = manifest(plan, c)["spec"]
    assert spec["backoffLimit"] == 3 and shlex.split(spec["entrypoint"]) == entrypoint(plan, c)
    write_resume_shim(plan)
    statuses, records, logs = kuberay_starts(ray_cluster.address, spec, save)
    assert statuses == ["FAILED", "SUCCEEDED"], logs
    # The retry loaded the save dir at its tracker (iter 2, the last save before the crash at 3).
    assert records[0]["start_rollout_id"] == 0 and records[1]["start_rollout_id"] == 3
    argv = records[1]["argv"]
    assert argv[argv.index("--load") + 1] == str(save)
    assert (save / "latest_checkpointed_iteration.txt").read_text().strip() == "4"
    starts = [json.loads(ln) for ln in Path(entrypoint(plan, c)[5]).read_text().splitlines()]
    assert [(s["attempt"], s["resumed_from"]) for s in starts] == [(1, None), (2, 2)]


def test_the_shim_runs_on_the_standard_library_alone(tmp_path):
    # As the job runs it: a copy in the save dir, under an interpreter that sees no site-packages and no clawgym.
    copy = tmp_path / "resume_load.py"
    copy.write_text(SHIM.read_text())
    res = subprocess.run([sys.executable, "-I", "-S", str(copy), "--save", str(tmp_path / "save"), "--starts",
                          str(tmp_path / "starts"), "--", *ECHO, "--x"], capture_output=True, text=True, timeout=60)
    assert res.returncode == 0, res.stderr
    assert json.loads(res.stdout.splitlines()[-1]) == ["--x"]


def test_the_shims_startup_patterns_are_the_supervisors():
    # The shim cannot import clawgym: its copy of the startup-failure rows must be the table's own.
    from clawgym.supervisor import classes as C

    res = subprocess.run([sys.executable, str(Path(__file__).resolve().parents[1] / "tools" / "gen_jobside_patterns.py"),
                          "--check"], capture_output=True, text=True, timeout=60)
    assert res.returncode == 0, res.stderr
    shipped = [p["regex"] for p in resume_load._patterns()]
    assert shipped == [p.regex for p in C.PATTERNS if p.cls == C.STARTUP_FAILURE] and shipped


def test_write_resume_shim_puts_the_patterns_beside_the_shim(tmp_path):
    c = to_plain(compose(["paths.root=/workspace/ClawGym-RL", "cluster=kuberay", "kuberay.image=img:1",
                          "kuberay.pvc=runs", f"paths.save={tmp_path / 'save'}"]))
    plan = build_plan_from_dict(c, environ={}, timestamp="20260101_000000")
    target = write_resume_shim(plan)
    assert json.loads((target.parent / resume_load.PATTERNS_FILE).read_text())["patterns"]


def test_a_startup_failure_the_trainer_exits_0_from_fails_the_job_and_stops_the_retries(tmp_path):
    # Megatron's sys.exit() on a checkpoint it cannot load exits 0: the job must not read as succeeded.
    starts = tmp_path / "starts"
    res = shim(tmp_path / "save", starts, sys.executable, "-c",
               "print('ERROR: Invalid metadata file /s/latest_checkpointed_iteration.txt. Exiting')")
    assert res.returncode == FAILED, res.stdout + res.stderr
    assert "attempt 1 failed at startup: ERROR: Invalid metadata file" in res.stdout
    stopped = json.loads(Path(str(starts) + ".stopped").read_text())
    assert stopped["attempt"] == 1 and stopped["program"] == "Megatron-LM (exits 0)"
    marker = tmp_path / "trainer-ran"
    again = shim(tmp_path / "save", starts, sys.executable, "-c", f"open({str(marker)!r}, 'w')")
    assert again.returncode == FAILED and not marker.exists()
    assert "attempt 2 of this RayJob (a KubeRay retry): not run: attempt 1 failed at startup" in again.stdout


def test_a_crash_is_not_taken_for_a_startup_failure(tmp_path):
    starts = tmp_path / "starts"
    res = shim(tmp_path / "save", starts, sys.executable, "-c", "import sys; print('step 3'); sys.exit(7)")
    assert res.returncode == 7 and "step 3" in res.stdout
    assert not Path(str(starts) + ".stopped").exists()


def test_a_stop_reaches_the_trainer_through_the_shim(tmp_path):
    # Ray stops a job with SIGTERM to its entrypoint: the trainer behind the shim must get it.
    import signal

    got = tmp_path / "got-sigterm"
    code = ("import signal, sys, time\n"
            f"def on(s, f):\n    open({str(got)!r}, 'w').close(); sys.exit(143)\n"
            "signal.signal(signal.SIGTERM, on)\nprint('ready', flush=True)\ntime.sleep(60)\n")
    proc = subprocess.Popen([sys.executable, str(SHIM), "--save", str(tmp_path / "save"), "--starts",
                             str(tmp_path / "starts"), "--", sys.executable, "-c", code],
                            stdout=subprocess.PIPE, text=True)
    try:
        for line in proc.stdout:
            if line.strip() == "ready":
                break
        proc.send_signal(signal.SIGTERM)  # to the shim alone, not its process group
        assert proc.wait(timeout=30) == 143
    finally:
        if proc.poll() is None:
            proc.kill()
    assert got.exists()


def test_a_kuberay_retry_after_a_startup_failure_never_runs_the_trainer_again(clawgym_checkout, ray_cluster,
                                                                              tmp_path):
    from tests.fixtures.checkout import checkout_overrides

    save = tmp_path / "save"
    c = to_plain(compose([*checkout_overrides(clawgym_checkout, supervised=True), "cluster=kuberay",
                          "kuberay.image=img:1", "kuberay.pvc=runs", f"paths.save={save}", "rollout.num_rollout=5",
                          "+extra_env.STANDIN_RUN_ROLLOUTS=5", "+extra_env.STANDIN_FAIL=startup",
                          f"run_name=k8s-startup-{uuid.uuid4().hex[:6]}"]))
    plan = build_plan_from_dict(c, environ={}, timestamp="20260101_000002")
    spec = manifest(plan, c)["spec"]
    write_resume_shim(plan)
    statuses, records, logs = kuberay_starts(ray_cluster.address, spec, save)
    assert statuses == ["FAILED", "FAILED"]
    assert [r is not None for r in records] == [True, False], logs  # the retry never ran the trainer
    assert "attempt 2 of this RayJob (a KubeRay retry): not run: attempt 1 failed at startup" in logs
    assert "train.py: error: unrecognized arguments: --no-such-flag (argparse (Megatron's parse_args))" in logs
    starts = [json.loads(ln) for ln in Path(entrypoint(plan, c)[5]).read_text().splitlines()]
    assert [s["refused"] for s in starts] == [None, "startup failure of attempt 1"]
