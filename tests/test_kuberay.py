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

from clawgym.backends.kuberay import MAX_NAME, dns_name, manifest, manifest_yaml
from clawgym.config import compose, to_plain
from clawgym.plan import build_plan_from_dict
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
    assert isinstance(spec["entrypoint"], str) and shlex.split(spec["entrypoint"]) == plan.entrypoint
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


def test_without_kubectl_apply_prints_how(tmp_path: Path):
    from tests.conftest import ROOT as REPO

    out = tmp_path / "out"
    env = {**os.environ, "PATH": "/nonexistent"}
    res = subprocess.run([os.sys.executable, str(REPO / "train.py"), "cluster=kuberay", "kuberay.apply=true",
                          "kuberay.image=img:1", "kuberay.pvc=runs", f"hydra.run.dir={out}"],
                         capture_output=True, text=True, cwd=REPO, timeout=120, env=env)
    assert res.returncode == 0, res.stderr
    assert "kubectl is not on PATH" in res.stdout and f"apply -f {out}/rayjob.yaml" in res.stdout


def test_apply_runs_kubectl_with_the_current_context(tmp_path: Path):
    from tests.conftest import ROOT as REPO

    # A recording kubectl (test double): answers current-context, records the apply call.
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    calls = tmp_path / "kubectl_calls"
    kubectl = bin_dir / "kubectl"
    kubectl.write_text(f"""#!/bin/sh
echo "$@" >> {calls}
if [ "$1" = config ]; then echo test-context; exit 0; fi
echo "rayjob.ray.io/created"
""")
    kubectl.chmod(0o755)
    out = tmp_path / "out"
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}"}
    res = subprocess.run([os.sys.executable, str(REPO / "train.py"), "cluster=kuberay", "kuberay.apply=true",
                          "kuberay.namespace=rl", "kuberay.image=img:1", "kuberay.pvc=runs", f"hydra.run.dir={out}"],
                         capture_output=True, text=True, cwd=REPO, timeout=120, env=env)
    assert res.returncode == 0, res.stderr
    lines = calls.read_text().splitlines()
    assert lines == ["config current-context", f"--context test-context apply -n rl -f {out}/rayjob.yaml"]
    assert "RayJob applied (context test-context)" in res.stdout
