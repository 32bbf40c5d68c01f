"""``cluster=kuberay``: a KubeRay ``RayJob`` manifest for a launch plan.

Follows the RayJob spec of KubeRay v1.3 (``apiVersion: ray.io/v1``; fields from
``ray-operator/apis/ray/v1/rayjob_types.go`` and ``raycluster_types.go``):

- ``spec.entrypoint``: the plan's trainer command; ``spec.runtimeEnvYAML``: its working
  dir and environment (no secret); ``spec.jobId``: the plan's submission id.
- ``spec.rayClusterSpec``: a head group (no GPUs: the driver runs there) and one worker
  group with one pod per node of the layout, each limited to its GPUs
  (``nvidia.com/gpu``), all from ``kuberay.image``.
- ``spec.shutdownAfterJobFinishes`` and ``spec.ttlSecondsAfterFinished``.
- With ``restart.enabled`` (the default): ``spec.backoffLimit`` = ``restart.max_attempts`` (KubeRay
  retries a failed RayJob on a new RayCluster) and the entrypoint runs the trainer behind
  ``clawgym/jobside/resume_load.py`` (copied into the save dir), which gives it ``--load`` at the last
  complete checkpoint (Megatron's tracker) and refuses a retry that would start from scratch.
- The save dir as a volume from ``kuberay.pvc`` mounted at ``kuberay.mount_path``.
- Secrets as ``secretKeyRef`` environment entries of the pods (from the Secret
  ``kuberay.secret_name``), never values; the job inherits them from its node.

:func:`manifest` is pure (golden-tested). :class:`KubeRayBackend` is the pipeline's backend:
validation, preflight and the snapshot come first; the manifest is checked against KubeRay's
CRD schema and ValidateRayJobSpec (:mod:`clawgym.backends.kuberay_check`), written next to
the snapshot and applied with ``kubectl`` when ``kuberay.apply=true`` (else the command to
apply it is printed); an applied job is followed through its cluster's Ray Jobs API once
the dashboard answers (``kuberay.dashboard_address``, else the RayJob's ``status.dashboardURL``).
"""

from __future__ import annotations

import hashlib
import re
import shlex
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

import yaml

from clawgym.backends import BackendError, BackendRefused, ClusterPerJobBackend
from clawgym.plan.build import WANDB_KEY_TARGET, LaunchPlan

#: File written next to launch_plan.json.
MANIFEST_FILE = "rayjob.yaml"
#: The resume shim (clawgym/jobside/), copied into <save>/clawgym/ for the pods.
RESUME_SHIM = "resume_load.py"
#: Its data file (clawgym/jobside/resume_load.py PATTERNS_FILE), copied beside it.
STARTUP_PATTERNS = "startup_patterns.json"
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


def supervised(plan: LaunchPlan, c: Mapping[str, Any]) -> bool:
    """restart.enabled (the default) and a save dir to resume from: KubeRay retries, each resuming."""
    return bool((c.get("restart") or {}).get("enabled", True)) and bool(plan.save_dir)


def resume_shim_path(save_dir: str) -> str:
    """Where the launch copies clawgym/jobside/resume_load.py: the save dir on the shared volume."""
    from clawgym.plan.build import under

    return under(str(save_dir), "clawgym", RESUME_SHIM)


def starts_path(plan: LaunchPlan) -> str:
    """One line per start of this RayJob (its first start and each KubeRay retry), beside the shim."""
    from clawgym.plan.build import under

    return under(str(plan.save_dir), "clawgym", "kuberay", f"{plan.submission_id}.starts")


def entrypoint(plan: LaunchPlan, c: Mapping[str, Any]) -> List[str]:
    """The job's command: with restart.enabled, the trainer behind the resume shim (every start, a
    KubeRay retry included, goes on from the tracker's checkpoint and never from scratch)."""
    if not supervised(plan, c):
        return list(plan.job_entrypoint)
    from clawgym.plan.build import INTERPRETER

    return [INTERPRETER, resume_shim_path(str(plan.save_dir)), "--save", str(plan.save_dir), "--starts",
            starts_path(plan), "--", *plan.job_entrypoint]


def write_resume_shim(plan: LaunchPlan) -> Path:
    """Copy the resume shim (standard library only) into the save dir, which the pods mount, with the
    startup-failure patterns it reads beside it (a startup failure is never retried)."""
    from clawgym.common.fsutil import atomic_write_text

    jobside = Path(__file__).resolve().parents[1] / "jobside"
    target = Path(resume_shim_path(str(plan.save_dir)))
    target.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(target.parent / STARTUP_PATTERNS, (jobside / STARTUP_PATTERNS).read_text(encoding="utf-8"))
    atomic_write_text(target, (jobside / RESUME_SHIM).read_text(encoding="utf-8"))
    return target


def manifest(plan: LaunchPlan, c: Mapping[str, Any]) -> Dict[str, Any]:
    """The RayJob for a plan and its resolved config (pure)."""
    from clawgym.plan.allocation import size_from_layout

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
        "entrypoint": shlex.join(entrypoint(plan, c)),
        "runtimeEnvYAML": yaml.safe_dump(runtime_env, sort_keys=False, default_flow_style=False),
        "jobId": plan.submission_id,
        "submissionMode": "K8sJobMode",
        "shutdownAfterJobFinishes": bool(k["shutdown_after_job_finishes"]),
        "ttlSecondsAfterFinished": int(k["ttl_seconds_after_finished"]),
    }
    if k["active_deadline_seconds"] is not None:
        # 0 or less is refused by validation (KubeRay's ValidateRayJobSpec), never dropped here.
        spec["activeDeadlineSeconds"] = int(k["active_deadline_seconds"])
    if supervised(plan, c):
        # KubeRay's retry policy (RayJobSpec.backoffLimit, KubeRay >= 1.2.0): "the number of retries before
        # marking this job failed. Each retry creates a new RayCluster." One retry per restart the run may
        # take; the entrypoint resumes each from the last complete checkpoint on the shared volume.
        spec["backoffLimit"] = int((c.get("restart") or {}).get("max_attempts", 3))
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


def checked_manifest_yaml(plan: LaunchPlan, c: Mapping[str, Any]) -> str:
    """The manifest's YAML once it passes KubeRay's CRD schema and ValidateRayJobSpec
    (clawgym/backends/kuberay_check.py); a manifest that does not is a BackendError naming each problem."""
    from clawgym.backends import BackendError
    from clawgym.backends.kuberay_check import manifest_problems

    text = manifest_yaml(plan, c)
    problems = manifest_problems(yaml.safe_load(text))
    if problems:
        raise BackendError("\n".join([f"the RayJob manifest of {plan.run_name} fails KubeRay {KUBERAY_RELEASE}'s "
                                       f"checks (its RayJob CRD schema, ValidateRayJobSpec):",
                                       *(f"  {p}" for p in problems),
                                       "  fix:  correct the kuberay.* values named above"]))
    return text


def manifest_dir(snapshot: str) -> Path:
    """Where a launch's RayJob manifest lives: next to its snapshot (as SLURM's batch script)."""
    snap = Path(snapshot)
    return snap.parent.parent / "kuberay" / snap.name


def _kubectl(context: str, *args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run(["kubectl", "--context", context, *args], capture_output=True, text=True, timeout=timeout)


def _reason(res: subprocess.CompletedProcess) -> str:
    text = (res.stderr or "").strip() or (res.stdout or "").strip() or f"exit status {res.returncode}"
    return "; ".join(dict.fromkeys(ln.strip() for ln in text.splitlines() if ln.strip()))


class NotAppliedHandle:
    """``kuberay.apply=false``: the manifest is written next to the snapshot, for the user to apply."""

    def __init__(self, plan: LaunchPlan, path: Path, how: str, name: str, ns: List[str]) -> None:
        self.plan, self.path, self.how, self.name, self.ns = plan, path, how, name, ns
        self.submission_id = plan.submission_id
        self.log_file: Optional[str] = None
        self.address = ""
        # The pipeline records it as "not applied", never as a job that succeeded.
        self.not_applied = True

    def job_record(self) -> dict:
        return {"kind": "manifest", "path": str(self.path), "applied": False}

    def lines(self) -> List[str]:
        return [f"[clawgym] not applied (kuberay.apply=false); apply it with:\n  {self.how}",
                f"  then: kubectl get rayjob {self.name} {shlex.join(self.ns)} -w".rstrip()]

    def follow(self, **_: Any) -> int:
        sys.stdout.write("\n".join(self.lines()) + "\n")
        sys.stdout.flush()
        return 0

    def status(self) -> str:
        return "SUCCEEDED"

    def message(self) -> str:
        return "manifest written, not applied"

    def stop(self, **_: Any) -> str:
        return "STOPPED"

    def note_in_log(self, text: str) -> None:
        pass


class KubeRayHandle:
    """An applied RayJob, as the pipeline sees a job: once its cluster's dashboard answers
    and KubeRay's submitter registered the job (``spec.jobId`` = the plan's submission id), it
    is followed through the Ray Jobs API (:class:`clawgym.launch.rayjob.JobHandle`) like any cluster."""

    def __init__(self, plan: LaunchPlan, *, name: str, namespace: Optional[str], context: str,
                 dashboard: Optional[str], wait_s: float, redact: Sequence[str] = ()) -> None:
        self.plan = plan
        self.name, self.namespace, self.context = name, namespace, context
        # kuberay.dashboard_address (e.g. a kubectl port-forward); None: the RayJob's status.dashboardURL.
        self.dashboard = dashboard
        self.wait_s = wait_s
        self.submission_id = plan.submission_id
        self.log_file = plan.log_file
        self.address = dashboard or ""
        self._redact = list(redact)
        self.ray: Any = None

    def _ns(self) -> List[str]:
        return ["-n", str(self.namespace)] if self.namespace else []

    def dashboard_url(self) -> Optional[str]:
        """Where the job is followed: the configured address, else the RayJob's status.dashboardURL."""
        if self.dashboard:
            return self.dashboard if "://" in self.dashboard else f"http://{self.dashboard}"
        res = _kubectl(self.context, "get", "rayjob", self.name, *self._ns(), "-o",
                       "jsonpath={.status.dashboardURL}", timeout=30)
        url = res.stdout.strip() if res.returncode == 0 else ""
        return (url if "://" in url else f"http://{url}") if url else None

    def wait_for_job(self, *, poll: float = 2.0) -> Any:
        """The Ray job once the dashboard answers and the job is registered there; raises LaunchError
        after ``wait_s``."""
        from clawgym.launch import rayjob as launch
        from clawgym.launch import rayjob

        deadline = time.time() + self.wait_s
        seen = None
        while True:
            url = self.dashboard_url()
            if url and rayjob.dashboard_responds(url):
                seen = url
                try:
                    launch.jobs_client(url).get_job_info(self.submission_id)
                    self.address = url
                    self.ray = launch.JobHandle(url, self.submission_id, self.plan, redact=self._redact)
                    return self.ray
                except Exception:
                    pass  # the submitter pod has not submitted it yet
            if time.time() > deadline:
                where = f"the dashboard at {seen} lists no job {self.submission_id}" if seen else \
                    "no dashboard of its cluster answered" + (f" at {self.dashboard}" if self.dashboard else "")
                raise launch.LaunchError(
                    f"RayJob {self.name}: {where} within kuberay.wait_dashboard_s={self.wait_s:g}\n"
                    f"  see: kubectl --context {self.context} describe rayjob {self.name} {shlex.join(self._ns())}\n"
                    f"  fix: reach the head's dashboard from here (kuberay.dashboard_address, e.g. after kubectl "
                    f"port-forward svc/<cluster>-head-svc 8265), or raise kuberay.wait_dashboard_s")
            time.sleep(poll)

    def follow(self, *, echo: bool = True, lost_contact_after: float = 300.0, stop_on_interrupt: bool = True,
               log_mode: str = "a", say: Any = None, handed_over: Any = None) -> int:
        ray = self.ray or self.wait_for_job()
        return ray.follow(echo=echo, lost_contact_after=lost_contact_after, stop_on_interrupt=stop_on_interrupt,
                          log_mode=log_mode, handed_over=handed_over, **({"say": say} if say is not None else {}))

    def status(self) -> str:
        if self.ray is not None:
            return self.ray.status()
        res = _kubectl(self.context, "get", "rayjob", self.name, *self._ns(), "-o", "jsonpath={.status.jobStatus}",
                       timeout=30)
        return (res.stdout.strip() or "PENDING") if res.returncode == 0 else "UNKNOWN"

    def message(self) -> str:
        return self.ray.message() if self.ray is not None else ""

    def stop(self, *, timeout: float = 60.0) -> str:
        """Stop the Ray job (when followed), then delete the RayJob (KubeRay removes its cluster)."""
        status = "STOPPED"
        if self.ray is not None:
            try:
                status = self.ray.stop(timeout=timeout)
            except Exception:
                pass
        _kubectl(self.context, "delete", "rayjob", self.name, *self._ns(), "--wait=false", timeout=60)
        return status

    def note_in_log(self, text: str) -> None:
        if self.ray is not None:
            self.ray.note_in_log(text)


class KubeRayBackend(ClusterPerJobBackend):
    """``cluster=kuberay``: each job is a RayJob with a Ray cluster of its own (KubeRay queues and
    sizes it). Validation, preflight (what the shared save dir and checkout show) and the snapshot
    happen before anything is applied; the manifest is checked against KubeRay's CRD schema and
    ValidateRayJobSpec, written next to the snapshot and applied with kubectl when
    ``kuberay.apply=true``; the job is then followed through its cluster's Ray Jobs API."""

    name = "kuberay"
    packs_jobs = False

    def __init__(self, plans: Sequence[Any], cfgs: Sequence[Any]) -> None:
        super().__init__(plans, cfgs)
        self.address = "KubeRay"
        self.context: Optional[str] = None

    def _c(self, cfg: Any) -> Mapping[str, Any]:
        from clawgym.config.compose import to_plain

        return to_plain(cfg) if hasattr(cfg, "_metadata") else cfg

    def dry_run_artefact(self, plan: Any, c: Mapping[str, Any], where: Path) -> Optional[Tuple[str, str]]:
        return MANIFEST_FILE, checked_manifest_yaml(plan, c)

    def checks_this_machine(self) -> bool:
        return False

    def settle(self, secrets: Mapping[str, str]) -> None:
        """With ``kuberay.apply=true``: kubectl and a context, before any check or snapshot."""
        k = self._c(self.cfgs[0])["kuberay"]
        if not k["apply"]:
            return
        if shutil.which("kubectl") is None:
            raise BackendError("kubectl is not on PATH: kuberay.apply=true applies the RayJob with it\n"
                               "  fix:  install kubectl and configure a context, or set kuberay.apply=false to write "
                               "the manifest only")
        self.context = kubectl_context(k["context"])
        if self.context is None:
            raise BackendError("kubectl has no current context: kuberay.apply=true needs one\n"
                               "  fix:  kubectl config use-context <context>, or set kuberay.context=<context>")
        self.address = f"KubeRay (context {self.context})"

    def submit(self, plan: Any, cfg: Any, snapshot: Optional[str], secrets: Mapping[str, str]) -> Any:
        from clawgym.common.fsutil import atomic_write_text

        c = self._c(cfg)
        k = c["kuberay"]
        if not snapshot:
            raise BackendError("cluster=kuberay needs the launch snapshot (the manifest is kept next to it)")
        text = checked_manifest_yaml(plan, c)
        # The entrypoint runs the shim from the shared save dir: it is there before the RayJob can start.
        shim = Path(resume_shim_path(str(plan.save_dir))) if supervised(plan, c) else None
        shim_was_there = shim is not None and shim.exists()
        if shim is not None:
            write_resume_shim(plan)
        directory = manifest_dir(snapshot)
        directory.mkdir(parents=True, exist_ok=True)
        path = directory / MANIFEST_FILE
        atomic_write_text(path, text)
        name = manifest(plan, c)["metadata"]["name"]
        ns = ["-n", str(k["namespace"])] if k["namespace"] else []
        sys.stdout.write(f"[clawgym] RayJob manifest written to {path}\n")
        sys.stdout.flush()
        if not k["apply"]:
            how = shlex.join(["kubectl", *(["--context", str(k["context"])] if k["context"] else []), "apply", *ns,
                              "-f", str(path)])
            return NotAppliedHandle(plan, path, how, name, ns)
        context = self.context or kubectl_context(k["context"]) or ""
        res = _kubectl(context, "apply", *ns, "-f", str(path))
        if res.returncode != 0:
            if shim is not None and not shim_was_there:
                shim.unlink(missing_ok=True)  # a refused launch leaves nothing behind
            raise BackendRefused(f"kubectl refused the RayJob {name} of {plan.run_name}", _reason(res),
                                 [f"  manifest: {path}", f"  fix:  check the context ({context}), the namespace and "
                                  f"that KubeRay's RayJob CRD is installed: kubectl --context {context} get crd "
                                  f"rayjobs.ray.io"])
        sys.stdout.write(res.stdout)
        sys.stdout.write(f"[clawgym] RayJob {name} applied (context {context})\n")
        sys.stdout.flush()
        return KubeRayHandle(plan, name=name, namespace=k["namespace"], context=context,
                             dashboard=k["dashboard_address"], wait_s=float(k["wait_dashboard_s"]),
                             redact=list(secrets.values()))

    def hints(self, handles: Sequence[Any]) -> List[str]:
        lines = []
        for h in handles:
            if isinstance(h, NotAppliedHandle):
                lines += h.lines()
                continue
            ns = shlex.join(h._ns())
            lines += [f"  status:  kubectl --context {h.context} get rayjob {h.name} {ns}".rstrip(),
                      f"  logs:    clawgym jobs logs {h.submission_id} --follow --address <its dashboard>",
                      f"  delete:  kubectl --context {h.context} delete rayjob {h.name} {ns}".rstrip()]
        return lines

    def close(self, *, keep: bool, reason: str = "", ignore_jobs: Sequence[str] = ()) -> None:
        """Nothing to clean up here: KubeRay removes each RayJob's cluster (shutdownAfterJobFinishes)."""
