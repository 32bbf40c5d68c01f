"""``cluster=kuberay``: a KubeRay ``RayJob`` manifest for a launch plan.

Follows the RayJob spec of KubeRay v1.3 (``apiVersion: ray.io/v1``; fields from
``ray-operator/apis/ray/v1/rayjob_types.go`` and ``raycluster_types.go``):

- ``spec.entrypoint``: the plan's trainer command; ``spec.runtimeEnvYAML``: its working
  dir and environment (no secret); ``spec.jobId``: the plan's submission id.
- ``spec.rayClusterSpec``: a head group (no GPUs: the driver runs there) and one worker
  group with one pod per node of the layout, each limited to its GPUs
  (``nvidia.com/gpu``), all from ``kuberay.image``.
- ``spec.shutdownAfterJobFinishes`` and ``spec.ttlSecondsAfterFinished``.
- The save dir as a volume from ``kuberay.pvc`` mounted at ``kuberay.mount_path``.
- Secrets as ``secretKeyRef`` environment entries of the pods (from the Secret
  ``kuberay.secret_name``), never values; the job inherits them from its node.

:func:`manifest` is pure (golden-tested); :func:`launch` writes it and applies it with
``kubectl`` when ``kuberay.apply=true`` and kubectl has a context, else prints how.
"""

from __future__ import annotations

import hashlib
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any, Dict, List, Mapping, Optional

import yaml

from clawgym.plan import WANDB_KEY_TARGET, LaunchPlan

#: File written next to launch_plan.json.
MANIFEST_FILE = "rayjob.yaml"
#: The KubeRay release whose RayJob spec the manifest follows.
KUBERAY_RELEASE = "v1.3.2"
API_VERSION = "ray.io/v1"
#: RayJob names stay short: KubeRay derives the RayCluster and service names from them.
MAX_NAME = 47
#: Job environment entries that describe the launcher's machine; on Kubernetes the pods set them.
_LOCAL_ONLY_ENV = ("MASTER_ADDR", "no_proxy")


def dns_name(text: str, limit: int = MAX_NAME) -> str:
    """A DNS-1123 label from free text (lowercase, digits and '-'), shortened with a hash when long."""
    name = re.sub(r"[^a-z0-9-]+", "-", text.lower()).strip("-") or "clawgym"
    if len(name) > limit:
        digest = hashlib.sha1(name.encode()).hexdigest()[:6]
        name = f"{name[:limit - 7].rstrip('-')}-{digest}"
    return name


def _resources(cpu: Optional[str], memory: Optional[str], gpus: int) -> Dict[str, Any]:
    limits: Dict[str, Any] = {}
    requests: Dict[str, Any] = {}
    if cpu:
        limits["cpu"] = requests["cpu"] = str(cpu)
    if memory:
        limits["memory"] = requests["memory"] = str(memory)
    if gpus:
        limits["nvidia.com/gpu"] = gpus
    out: Dict[str, Any] = {}
    if limits:
        out["limits"] = limits
    if requests:
        out["requests"] = requests
    return out


def _secret_env(plan: LaunchPlan, secret_name: str) -> List[Dict[str, Any]]:
    """``secretKeyRef`` entries: the Secret's key is the variable's name; only W&B's is required."""
    return [{"name": target, "valueFrom": {"secretKeyRef": {
        "name": secret_name, "key": target, "optional": target != WANDB_KEY_TARGET}}}
        for target in plan.secret_env]


def _container(name: str, image: str, *, resources: Dict[str, Any], env: List[Dict[str, Any]],
               mount: Optional[Dict[str, Any]], ports: Optional[List[Dict[str, Any]]] = None) -> Dict[str, Any]:
    c: Dict[str, Any] = {"name": name, "image": image}
    if ports:
        c["ports"] = ports
    if env:
        c["env"] = env
    if resources:
        c["resources"] = resources
    if mount:
        c["volumeMounts"] = [mount]
    return c


def manifest(plan: LaunchPlan, c: Mapping[str, Any]) -> Dict[str, Any]:
    """The RayJob for a plan and its resolved config (pure)."""
    from clawgym.backends.slurm import size_from_layout

    k = c["kuberay"]
    alloc = size_from_layout(c)
    name = k["name"] or dns_name(plan.submission_id)
    env_vars = {key: v for key, v in plan.runtime_env.get("env_vars", {}).items() if key not in _LOCAL_ONLY_ENV}
    runtime_env = {"working_dir": plan.working_dir, "env_vars": env_vars}
    # The trainer's rendezvous address is the head pod's.
    pod_env = [{"name": "MASTER_ADDR", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
               *({"name": key, "value": str(v)} for key, v in plan.ray_start_env.items()),
               *_secret_env(plan, str(k["secret_name"]))]
    volumes, mount = [], None
    if k["pvc"]:
        volumes = [{"name": "save", "persistentVolumeClaim": {"claimName": str(k["pvc"])}}]
        mount = {"name": "save", "mountPath": str(k["mount_path"])}
    image = str(k["image"] or "")
    head_pod: Dict[str, Any] = {"containers": [_container(
        "ray-head", image, resources=_resources(k["head_cpu"], k["head_memory"], 0), env=pod_env, mount=mount,
        ports=[{"containerPort": 6379, "name": "gcs-server"}, {"containerPort": 8265, "name": "dashboard"},
               {"containerPort": 10001, "name": "client"}])]}
    worker_pod: Dict[str, Any] = {"containers": [_container(
        "ray-worker", image, resources=_resources(k["worker_cpu"], k["worker_memory"], alloc.gpus_per_node),
        env=pod_env, mount=mount)]}
    if volumes:
        head_pod["volumes"] = volumes
        worker_pod["volumes"] = list(volumes)
    cluster_spec: Dict[str, Any] = {}
    if k["ray_version"]:
        cluster_spec["rayVersion"] = str(k["ray_version"])
    cluster_spec["headGroupSpec"] = {
        # No GPUs on the head: the driver runs there, the trainer's GPU work on the workers.
        # The dashboard listens on the pod network so KubeRay's submitter pod reaches it.
        "rayStartParams": {"dashboard-host": "0.0.0.0", "num-gpus": "0"},
        "template": {"spec": head_pod},
    }
    cluster_spec["workerGroupSpecs"] = [{
        "groupName": "gpu-workers",
        "replicas": alloc.nodes,
        "minReplicas": alloc.nodes,
        "maxReplicas": alloc.nodes,
        "rayStartParams": {"num-gpus": str(alloc.gpus_per_node)},
        "template": {"spec": worker_pod},
    }]
    spec: Dict[str, Any] = {
        "entrypoint": shlex.join(plan.job_entrypoint),
        "runtimeEnvYAML": yaml.safe_dump(runtime_env, sort_keys=False, default_flow_style=False),
        "jobId": plan.submission_id,
        "submissionMode": "K8sJobMode",
        "shutdownAfterJobFinishes": bool(k["shutdown_after_job_finishes"]),
        "ttlSecondsAfterFinished": int(k["ttl_seconds_after_finished"]),
    }
    if k["active_deadline_seconds"]:
        spec["activeDeadlineSeconds"] = int(k["active_deadline_seconds"])
    spec["metadata"] = {"clawgym_run_name": plan.run_name, "clawgym_save_dir": str(plan.save_dir or "")}
    spec["rayClusterSpec"] = cluster_spec
    metadata: Dict[str, Any] = {"name": name}
    if k["namespace"]:
        metadata["namespace"] = str(k["namespace"])
    metadata["labels"] = {"app.kubernetes.io/managed-by": "clawgym"}
    return {"apiVersion": API_VERSION, "kind": "RayJob", "metadata": metadata, "spec": spec}


class _Dumper(yaml.SafeDumper):
    """Plain YAML for kubectl readers: no anchors/aliases, multi-line strings as literal blocks."""

    def ignore_aliases(self, data: Any) -> bool:
        return True


def _str(dumper: yaml.SafeDumper, data: str) -> Any:
    style = "|" if "\n" in data else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", data, style=style)


_Dumper.add_representer(str, _str)


def manifest_yaml(plan: LaunchPlan, c: Mapping[str, Any]) -> str:
    head = (f"# KubeRay RayJob of run {plan.run_name!r}, written by clawgym (RayJob spec of KubeRay "
            f"{KUBERAY_RELEASE}).\n# Secrets come from the Secret {c['kuberay']['secret_name']!r} "
            f"(secretKeyRef), never from this file.\n")
    return head + yaml.dump(manifest(plan, c), Dumper=_Dumper, sort_keys=False, default_flow_style=False, width=1000)


def kubectl_context(context: Optional[str]) -> Optional[str]:
    """The kubectl context to use, or None when kubectl is missing or has none configured."""
    exe = shutil.which("kubectl")
    if exe is None:
        return None
    if context:
        return context
    res = subprocess.run([exe, "config", "current-context"], capture_output=True, text=True, timeout=30)
    return res.stdout.strip() or None if res.returncode == 0 else None


def launch(cfg: Any, plan: LaunchPlan, out: Optional[Path]) -> int:
    """Write the manifest (Hydra's output dir) and apply it when asked and possible; returns the exit status."""
    from omegaconf import DictConfig

    from clawgym.config import to_plain
    from clawgym.snapshot import atomic_write_text

    c = to_plain(cfg) if isinstance(cfg, DictConfig) else cfg
    directory = out if out is not None else Path.cwd()
    path = directory / MANIFEST_FILE
    directory.mkdir(parents=True, exist_ok=True)
    atomic_write_text(path, manifest_yaml(plan, c))
    print(f"[clawgym] RayJob manifest written to {path}", flush=True)
    k = c["kuberay"]
    ns = ["-n", str(k["namespace"])] if k["namespace"] else []
    context = kubectl_context(k["context"])
    how = shlex.join(["kubectl", *(["--context", str(k["context"])] if k["context"] else []), "apply", *ns,
                      "-f", str(path)])
    if not k["apply"] or context is None:
        why = "kuberay.apply=false" if not k["apply"] else "kubectl is not on PATH or has no context configured"
        print(f"[clawgym] not applied ({why}); apply it with:\n  {how}\n"
              f"  then: kubectl get rayjob {manifest(plan, c)['metadata']['name']} {shlex.join(ns)} -w", flush=True)
        return 0
    res = subprocess.run(["kubectl", "--context", context, "apply", *ns, "-f", str(path)], capture_output=True,
                         text=True, timeout=120)
    sys.stdout.write(res.stdout)
    if res.returncode != 0:
        print(f"clawgym: kubectl apply failed: {res.stderr.strip()}\n  manifest: {path}", file=sys.stderr, flush=True)
        return 1
    print(f"[clawgym] RayJob applied (context {context}); follow it: kubectl get rayjob "
          f"{manifest(plan, c)['metadata']['name']} {shlex.join(ns)} -w", flush=True)
    return 0
