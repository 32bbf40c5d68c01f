"""The KubeRay RayJob manifest (cluster=kuberay): goldens and structural checks against the RayJob spec.

The spec is KubeRay v1.3's ``ray.io/v1`` RayJob (``ray-operator/apis/ray/v1/rayjob_types.go``,
``raycluster_types.go``). Regenerate the goldens after an intended change and review the diff:

    CLAWGYM_UPDATE_GOLDEN=1 python -m pytest tests/test_kuberay.py -q
"""

from __future__ import annotations

import functools
import os
import shlex
import subprocess
from pathlib import Path
from typing import Any, Dict, List, Tuple

import pytest
import yaml

from clawgym.backends.kuberay import MAX_NAME, dns_name, entrypoint, manifest, manifest_yaml
from clawgym.config.compose import compose, to_plain
from clawgym.plan.build import build_plan_from_dict
from clawgym.validate import violations

GOLDEN = Path(__file__).resolve().parent / "golden"
UPDATE = os.environ.get("CLAWGYM_UPDATE_GOLDEN") == "1"
TS = "20260101_000000"
BASE = ["paths.root=/workspace/ClawGym-RL", "cluster=kuberay", "kuberay.image=registry.example/clawgym-rl:0.1",
        "kuberay.pvc=clawgym-runs", "run_name=k8s-run"]
MULTI_NODE = ["model=qwen3_32b", "gpu_layout.actor_num_nodes=2", "gpu_layout.actor_gpus=8",
              "gpu_layout.rollout_gpus=8", "kuberay.namespace=rl", "kuberay.ray_version=2.48.0",
              "kuberay.worker_cpu=96", "kuberay.worker_memory=900Gi", "kuberay.active_deadline_seconds=604800"]
GOLDENS: Dict[str, List[str]] = {"rayjob_one_node": [], "rayjob_multi_node": MULTI_NODE}
SECRETS = {"WANDB_API_KEY": "wandb-api-secret-1234567890", "SGLANG_API_KEY": "sglang-secret-abcdef"}


@functools.lru_cache(maxsize=None)
def resolved(overrides: Tuple[str, ...]) -> dict:
    cfg = compose([*BASE, *overrides])
    assert violations(cfg) == [], [v.format() for v in violations(cfg)]
    return to_plain(cfg)


def plan_and_config(overrides: List[str], environ: Dict[str, str] | None = None):
    c = resolved(tuple(overrides))
    return build_plan_from_dict(c, environ=environ or {}, timestamp=TS), c


@pytest.mark.parametrize("name", list(GOLDENS))
def test_golden_rayjob(name: str):
    text = manifest_yaml(*plan_and_config(GOLDENS[name], SECRETS))
    path = GOLDEN / f"{name}.yaml"
    if UPDATE:
        path.write_text(text)
    assert path.is_file(), f"{path} missing: run with CLAWGYM_UPDATE_GOLDEN=1 to create it"
    assert text == path.read_text()


def _containers(spec: Dict[str, Any]) -> List[Dict[str, Any]]:
    c = spec["rayClusterSpec"]
    return [*c["headGroupSpec"]["template"]["spec"]["containers"],
            *(x for g in c["workerGroupSpecs"] for x in g["template"]["spec"]["containers"])]


@pytest.mark.parametrize("name", list(GOLDENS))
def test_rayjob_follows_the_spec(name: str):
    plan, c = plan_and_config(GOLDENS[name], SECRETS)
    doc = yaml.safe_load(manifest_yaml(plan, c))
    assert doc["apiVersion"] == "ray.io/v1" and doc["kind"] == "RayJob"
    meta, spec = doc["metadata"], doc["spec"]
    assert isinstance(meta["name"], str) and len(meta["name"]) <= MAX_NAME and dns_name(meta["name"]) == meta["name"]
    # Typed fields of RayJobSpec.
    # restart.enabled (the default): the trainer's own argv behind the resume shim, and KubeRay's retries.
    argv = shlex.split(spec["entrypoint"])
    assert isinstance(spec["entrypoint"], str) and argv == entrypoint(plan, c)
    assert argv[1].endswith("/clawgym/resume_load.py") and argv[argv.index("--") + 1:] == plan.entrypoint
    assert spec["backoffLimit"] == c["restart"]["max_attempts"]
    runtime_env = yaml.safe_load(spec["runtimeEnvYAML"])
    assert runtime_env["working_dir"] == plan.working_dir
    assert all(isinstance(v, str) for v in runtime_env["env_vars"].values())
    assert spec["shutdownAfterJobFinishes"] is True and isinstance(spec["ttlSecondsAfterFinished"], int)
    assert spec["jobId"] == plan.submission_id and spec["submissionMode"] == "K8sJobMode"
    assert all(isinstance(k, str) and isinstance(v, str) for k, v in spec["metadata"].items())
    cluster = spec["rayClusterSpec"]
    head = cluster["headGroupSpec"]
    # rayStartParams is map[string]string.
    for params in [head["rayStartParams"], *(g["rayStartParams"] for g in cluster["workerGroupSpecs"])]:
        assert all(isinstance(k, str) and isinstance(v, str) for k, v in params.items())
    assert len(cluster["workerGroupSpecs"]) == 1
    group = cluster["workerGroupSpecs"][0]
    assert isinstance(group["groupName"], str) and group["groupName"]
    for container in _containers(spec):
        assert container["name"] and container["image"] == "registry.example/clawgym-rl:0.1"
        mounts = container["volumeMounts"]
        assert mounts == [{"name": "save", "mountPath": plan.save_dir}]
    for pod in (head["template"]["spec"], group["template"]["spec"]):
        assert pod["volumes"] == [{"name": "save", "persistentVolumeClaim": {"claimName": "clawgym-runs"}}]


def test_worker_group_is_sized_from_the_layout_with_gpu_limits():
    one = manifest(*plan_and_config([]))["spec"]["rayClusterSpec"]
    group = one["workerGroupSpecs"][0]
    assert (group["replicas"], group["minReplicas"], group["maxReplicas"]) == (1, 1, 1)
    assert group["template"]["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] == 8
    # 24 GPUs of the 2-node actor + 8 rollout layout: 3 workers of 8.
    multi = manifest(*plan_and_config(MULTI_NODE))["spec"]["rayClusterSpec"]
    group = multi["workerGroupSpecs"][0]
    assert (group["replicas"], group["minReplicas"], group["maxReplicas"]) == (3, 3, 3)
    limits = group["template"]["spec"]["containers"][0]["resources"]["limits"]
    assert limits == {"cpu": "96", "memory": "900Gi", "nvidia.com/gpu": 8}
    # The head holds no GPU: the driver runs there, the trainer's GPU work on the workers.
    head = multi["headGroupSpec"]
    assert head["rayStartParams"]["num-gpus"] == "0"
    assert "nvidia.com/gpu" not in str(head["template"]["spec"]["containers"][0].get("resources", {}))


def test_secrets_are_secret_key_refs_never_values():
    plan, c = plan_and_config([], SECRETS)
    text = manifest_yaml(plan, c)
    for value in SECRETS.values():
        assert value not in text
    doc = yaml.safe_load(text)
    for container in _containers(doc["spec"]):
        refs = {e["name"]: e["valueFrom"]["secretKeyRef"] for e in container["env"] if "secretKeyRef" in
                e.get("valueFrom", {})}
        assert refs == {"SGLANG_API_KEY": {"name": "clawgym-secrets", "key": "SGLANG_API_KEY", "optional": True},
                        "WANDB_API_KEY": {"name": "clawgym-secrets", "key": "WANDB_API_KEY", "optional": False}}
        assert all("value" not in e for e in container["env"] if e["name"] in SECRETS)
    runtime_env = yaml.safe_load(doc["spec"]["runtimeEnvYAML"])
    assert not set(SECRETS) & set(runtime_env["env_vars"])


def test_long_run_names_become_short_dns_names():
    name = dns_name("clawgym-" + "Very_Long.Run" * 10 + "-20260101_000000")
    assert len(name) <= MAX_NAME and name == dns_name(name)
    assert dns_name("clawgym-a-20260101_000000") == "clawgym-a-20260101-000000"


def test_dry_run_writes_the_manifest_next_to_the_plan(tmp_path: Path):
    from tests.conftest import ROOT as REPO

    out = tmp_path / "out"
    res = subprocess.run([os.sys.executable, str(REPO / "train.py"), "cluster=kuberay", "dry_run=true",
                          "kuberay.image=img:1", "kuberay.pvc=runs", f"hydra.run.dir={out}"],
                         capture_output=True, text=True, cwd=REPO, timeout=120)
    assert res.returncode == 0, res.stderr
    assert (out / "launch_plan.json").is_file()
    doc = yaml.safe_load((out / "rayjob.yaml").read_text())
    assert doc["kind"] == "RayJob" and "kind: RayJob" in res.stdout


# ---------------------------------------------------------------- KubeRay's own checks on the manifest

def test_manifest_is_checked_against_kuberays_crd_schema_and_validate_rayjob_spec():
    from clawgym.backends.kuberay_check import manifest_problems, schema_source

    # Generated from the v1.3.2 release's CRD (tools/gen_kuberay_schema.py), recorded in the data file.
    src = schema_source()
    assert src["release"] == "v1.3.2" and src["path"].endswith("ray.io_rayjobs.yaml") and len(src["crd_sha256"]) == 64
    for name in GOLDENS:
        assert manifest_problems(manifest(*plan_and_config(GOLDENS[name]))) == []
    doc = manifest(*plan_and_config(MULTI_NODE))
    doc["spec"]["activeDeadlineSeconds"] = 0
    doc["spec"]["ttlSecondsAfterFinished"] = 2 ** 40
    worker = doc["spec"]["rayClusterSpec"]["workerGroupSpecs"][0]
    worker["template"]["spec"]["containers"][0]["resources"]["limits"]["cpu"] = "abc"
    worker["replicas"] = "3"
    problems = "\n".join(manifest_problems(doc))
    assert "activeDeadlineSeconds must be a positive integer" in problems  # ValidateRayJobSpec
    assert "spec.ttlSecondsAfterFinished: 1099511627776 is greater than the maximum of 2147483647" in problems
    assert "containers.0.resources.limits.cpu: 'abc' does not match" in problems
    assert "workerGroupSpecs.0.replicas: '3' is not of type 'integer'" in problems
    doc["spec"]["backoffLimit"] = -1
    assert "spec.backoffLimit: backoffLimit must be a positive integer" in "\n".join(manifest_problems(doc))
    doc["spec"]["backoffLimit"] = 2 ** 31
    assert "spec.backoffLimit: 2147483648 is greater than the maximum of 2147483647" in "\n".join(
        manifest_problems(doc))
    doc["spec"]["rayClusterSpec"]["headGroupSpec"]["template"]["spec"]["containers"] = []
    assert "headGroupSpec should have at least one container" in "\n".join(manifest_problems(doc))


def test_the_schema_tool_turns_a_crd_version_into_a_json_schema():
    import importlib.util

    spec = importlib.util.spec_from_file_location("gen_kuberay_schema", GOLDEN.parent.parent / "tools" /
                                                  "gen_kuberay_schema.py")
    tool = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(tool)
    crd = {"kind": "CustomResourceDefinition", "spec": {"versions": [
        {"name": "v1alpha1", "schema": {"openAPIV3Schema": {"type": "object"}}},
        {"name": "v1", "schema": {"openAPIV3Schema": {"type": "object", "description": "RayJob", "properties": {
            "spec": {"type": "object", "properties": {"n": {"type": "integer", "format": "int32",
                                                            "description": "x"}}}}}}}]}}
    out = tool.schema_from_crd(crd)
    n = out["properties"]["spec"]["properties"]["n"]
    assert n == {"type": "integer", "format": "int32", "minimum": -2 ** 31, "maximum": 2 ** 31 - 1}
    assert "description" not in out
    with pytest.raises(ValueError, match="no version 'v2'"):
        tool.schema_from_crd(crd, "v2")


# ---------------------------------------------------------------- launches through the pipeline

def _launch(checkout: Path, tmp_path: Path, *overrides: str, env: Dict[str, str] | None = None):
    from tests.conftest import ROOT as REPO
    from tests.fixtures.checkout import LAUNCH_SKIPS, checkout_overrides

    e = {k: v for k, v in os.environ.items() if k not in ("RAY_ADDRESS", "WANDB_API_KEY", "WANDB_KEY")}
    e.update(env or {})
    e["CLAWGYM_STATE_DIR"] = str(tmp_path / "state")
    cmd = [os.sys.executable, str(REPO / "train.py"), *checkout_overrides(checkout, skip_checks=LAUNCH_SKIPS, supervised=True),
           "cluster=kuberay", "kuberay.image=img:1", "kuberay.pvc=runs", f"paths.save={tmp_path}/save",
           f"hydra.run.dir={tmp_path}/out", *overrides]
    return subprocess.run(cmd, capture_output=True, text=True, cwd=REPO, timeout=240, env=e)


def test_kuberay_launch_runs_preflight_and_snapshots_before_anything_is_applied(clawgym_checkout, tmp_path):
    from clawgym.snapshot.read import list_snapshots

    res = _launch(clawgym_checkout, tmp_path)
    assert res.returncode == 0, res.stdout + res.stderr
    out = res.stdout
    assert "preflight of" in out and "checkout" in out  # the pipeline's preflight ran
    (snap,) = list_snapshots(tmp_path / "save")  # a launch `clawgym show` lists
    path = tmp_path / "save" / "clawgym" / "kuberay" / snap.path.name / "rayjob.yaml"
    assert f"RayJob manifest written to {path}" in out
    assert yaml.safe_load(path.read_text())["spec"]["jobId"] == snap.plan["submission_id"]
    assert "not applied (kuberay.apply=false)" in out and f"kubectl apply -f {path}" in out
    assert out.index("preflight of") < out.index("RayJob manifest written")
    # The resume shim the entrypoint runs is on the shared volume, the same file as clawgym's own.
    entry = shlex.split(yaml.safe_load(path.read_text())["spec"]["entrypoint"])
    from clawgym.jobside import resume_load

    assert Path(entry[1]).read_text() == Path(resume_load.__file__).read_text()
    assert Path(entry[1]) == tmp_path / "save" / "clawgym" / "resume_load.py"


def test_without_kubectl_an_applying_launch_is_refused_before_any_snapshot(clawgym_checkout, tmp_path):
    res = _launch(clawgym_checkout, tmp_path, "kuberay.apply=true",
                  env={"PATH": os.path.dirname(os.sys.executable)})
    assert res.returncode == 2, res.stdout + res.stderr
    assert "kubectl is not on PATH" in res.stderr and "nothing was started" in res.stderr
    assert "Traceback" not in res.stderr
    assert not (tmp_path / "save" / "clawgym").exists()


def test_a_kubectl_refusal_is_a_clean_error_and_leaves_no_launch(clawgym_checkout, tmp_path):
    import shutil
    import socket

    if shutil.which("kubectl") is None:
        # Not packaged in Debian; .ci/run says so when the machine lacks it.
        pytest.skip("kubectl is not installed: the kubectl refusal path was not run")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # nothing listens there: no API server answers
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "dead",
        "clusters": [{"name": "dead", "cluster": {"server": f"https://127.0.0.1:{port}"}}],
        "contexts": [{"name": "dead", "context": {"cluster": "dead", "user": "u"}}],
        "users": [{"name": "u", "user": {"token": "not-a-secret"}}]}))
    res = _launch(clawgym_checkout, tmp_path, "kuberay.apply=true", env={"KUBECONFIG": str(kubeconfig)})
    assert res.returncode == 2, res.stdout + res.stderr
    assert "kubectl refused the RayJob" in res.stderr and "nothing was started:" in res.stderr
    assert "connection refused" in res.stderr.lower() and "Traceback" not in res.stderr
    from clawgym.snapshot.read import list_snapshots

    assert list_snapshots(tmp_path / "save") == []  # the snapshot of a launch that never ran is gone
    assert not (tmp_path / "save" / "clawgym" / "resume_load.py").exists()  # nor the resume shim


def test_an_applied_rayjob_is_followed_through_the_ray_jobs_api_once_its_dashboard_answers(
        clawgym_checkout, ray_cluster, tmp_path):
    """A real Ray head stands in for the RayJob's cluster; a thread stands in for KubeRay's
    submitter pod, submitting the manifest's entrypoint, runtime env and jobId a moment later."""
    import threading

    from ray.job_submission import JobSubmissionClient

    from clawgym.backends.kuberay import KubeRayHandle, write_resume_shim
    from tests.fixtures.checkout import checkout_overrides

    cfg = compose([*checkout_overrides(clawgym_checkout, supervised=True), "cluster=kuberay", "kuberay.image=img:1",
                   "kuberay.pvc=runs", f"paths.save={tmp_path}/save", "+extra_env.STANDIN_SLEEP=1",
                   f"run_name=k8s-follow-{os.getpid()}"])
    c = to_plain(cfg)
    plan = build_plan_from_dict(c, environ={}, timestamp=TS + str(os.getpid()))
    spec = manifest(plan, c)["spec"]
    write_resume_shim(plan)  # as KubeRayBackend.submit does, into the save dir the pods mount

    def submitter() -> None:
        import time

        time.sleep(2.0)
        JobSubmissionClient(ray_cluster.address).submit_job(
            entrypoint=spec["entrypoint"], submission_id=spec["jobId"],
            runtime_env=yaml.safe_load(spec["runtimeEnvYAML"]))

    thread = threading.Thread(target=submitter, daemon=True)
    thread.start()
    handle = KubeRayHandle(plan, name="k8s-follow", namespace=None, context="unused",
                           dashboard=ray_cluster.address, wait_s=120)
    try:
        assert handle.follow(lost_contact_after=60) == 0
    finally:
        thread.join(timeout=30)
    assert handle.address == ray_cluster.address and handle.status() == "SUCCEEDED"
    assert "[standin] exiting with 0" in Path(plan.log_file).read_text()
    # A dashboard that never lists the job is a clear error after kuberay.wait_dashboard_s.
    from clawgym.launch.rayjob import LaunchError

    late = KubeRayHandle(plan, name="k8s-none", namespace=None, context="unused", dashboard=ray_cluster.address,
                         wait_s=1)
    late.submission_id = "clawgym-no-such-rayjob-job"
    with pytest.raises(LaunchError, match="lists no job clawgym-no-such-rayjob-job"):
        late.wait_for_job(poll=0.2)


@pytest.mark.parametrize("override,code", [
    ("kuberay.active_deadline_seconds=-3", "kuberay-active-deadline-positive"),
    ("kuberay.active_deadline_seconds=0", "kuberay-active-deadline-positive"),
    ("kuberay.ttl_seconds_after_finished=-5", "kuberay-ttl-nonnegative"),
    ("kuberay.head_cpu=abc", "kuberay-resource-quantity"),
    ("kuberay.worker_memory=-1Gi", "kuberay-resource-quantity"),
    ("kuberay.secret_name=Bad_Secret", "kuberay-secret-name-dns1123"),
])
def test_kuberay_values_kuberay_would_reject_are_refused_before_a_manifest(override: str, code: str):
    found = violations(compose([*BASE, override]))
    assert [v.code for v in found] == [code], [v.format() for v in found]
    assert found[0].fix and "set kuberay." in found[0].fix
    # Values KubeRay takes pass, and a positive deadline reaches the manifest as set.
    ok = compose([*BASE, "kuberay.head_cpu=500m", "kuberay.worker_memory=1.5Gi", "kuberay.secret_name=a.b-c",
                  "kuberay.active_deadline_seconds=1", "kuberay.ttl_seconds_after_finished=0"])
    assert violations(ok) == []
    assert manifest(build_plan_from_dict(to_plain(ok), environ={}, timestamp=TS), to_plain(ok))["spec"][
        "activeDeadlineSeconds"] == 1


def test_a_manifest_not_applied_is_recorded_as_not_applied_never_as_succeeded(clawgym_checkout, tmp_path):
    """kuberay.apply=false writes a manifest for the user to apply: nothing ran, so the launch's
    recorded end and `clawgym runs` say "not applied" (issue 28, finding 13)."""
    import json

    from clawgym.runs.discover import find_runs
    from clawgym.runs.status import resolve
    from clawgym.snapshot.read import list_snapshots

    res = _launch(clawgym_checkout, tmp_path)
    assert res.returncode == 0, res.stdout + res.stderr
    (snap,) = list_snapshots(tmp_path / "save")
    assert json.loads((snap.path / "ended.json").read_text())["status"] == "not applied"
    (run,) = find_runs([tmp_path / "save"])
    assert resolve(run).status == "not applied"
    assert "succeeded" not in res.stdout.lower()
