"""Cluster backends and the Ray head: the settings each backend needs."""

from __future__ import annotations

import re

from clawgym.validate.core import Collector


def rule_ray(v: Collector) -> None:
    r = v.c["ray"]
    for k in ("port", "dashboard_port"):
        if not 0 < r[k] < 65536:
            v.add("ray-port-in-range", [f"ray.{k}"], "ports are 1..65535", f"set ray.{k} to a free port")
    if r["num_gpus"] is not None and r["num_gpus"] < 0:
        v.add("ray-gpus-nonnegative", ["ray.num_gpus"], "a head cannot declare negative GPUs",
              "set ray.num_gpus to the node's GPU count, or null to detect it")
    if r.get("lost_contact_s") is not None and not r["lost_contact_s"] > 0:
        # 0 or less would give up on a followed job at its first unanswered poll.
        v.add("ray-lost-contact-positive", ["ray.lost_contact_s"],
              "the seconds a followed job's cluster may stay silent before the launcher gives up must be > 0",
              "set ray.lost_contact_s=300 (the default)")


#: Characters sbatch treats specially in a batch script's #SBATCH values: '%' starts a filename
#: pattern (%j, %u, ... in --output), whitespace ends the option's value, a newline ends the line
#: (and the first non-#SBATCH line ends every later directive).
_SBATCH_SPECIAL = re.compile(r"[%\s]")


def _sbatch_fix(value: str) -> str:
    return re.sub(r"[%\s]+", "_", value).strip("_") or "x"


def _rule_sbatch_values(v: Collector, s) -> None:
    """Every value written into an #SBATCH line holds none of sbatch's special characters."""
    for key in ("partition", "account", "qos", "gpu_type", "time", "mem_per_node"):
        value = s[key]
        if value in (None, "") or not _SBATCH_SPECIAL.search(str(value)):
            continue
        v.add("slurm-values-plain", [f"slurm.{key}"],
              f"slurm.{key} is written into the batch script's '#SBATCH --{key.replace('_', '-')}=' line: a newline "
              f"there ends the directives (sbatch ignores every later #SBATCH), a space ends the value, and '%' is a "
              f"pattern sbatch expands", f"set slurm.{key}={_sbatch_fix(str(value))}")
    save = v.c["paths"]["save"]
    if save and _SBATCH_SPECIAL.search(str(save)):
        # The name the save dir derives from: run_name (exp_name when run_name is derived from it).
        derived = "exp_name" if v.c.get("run_name") == v.c.get("exp_name") else "run_name"
        keys = ["paths.save"] + ([derived] if v.c.get(derived) and _SBATCH_SPECIAL.search(str(v.c[derived]))
                                 and str(v.c[derived]) in str(save) else [])
        name = keys[-1]
        v.add("slurm-output-path-plain", keys,
              "SLURM writes the job's output to '#SBATCH --output=<paths.save>/clawgym/slurm/<launch>/slurm-%j.out': "
              "sbatch expands '%' patterns there (%u, %x, ...: the output file would be elsewhere than clawgym "
              "looks) and a space or newline breaks the directive",
              f"set {name}={_sbatch_fix(str(v.c[name]) if name != 'paths.save' else str(save))}" +
              ("" if name == "paths.save" else " (paths.save derives from it)"))


_DNS1123 = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")


_SLURM_TIME = re.compile(r"^(\d+(:\d+){0,2}|\d+-\d+(:\d+){0,2}|INFINITE|UNLIMITED)$")


_SLURM_MEM = re.compile(r"^\d+[KMGT]?$")


def rule_cluster(v: Collector) -> None:
    """The cluster group's backend, and the settings each backend needs."""
    from clawgym.plan.allocation import BACKENDS

    backend, address = v.c["cluster"]["backend"], v.c["ray"]["address"]
    if backend not in BACKENDS:
        v.add("cluster-backend-known", ["cluster.backend"], f"the cluster backend is one of {', '.join(BACKENDS)}",
              "choose cluster=local, cluster=existing, cluster=slurm or cluster=kuberay")
        return
    if backend == "existing" and not address:
        v.add("existing-cluster-needs-address", ["cluster.backend", "ray.address"],
              "cluster=existing submits to a running Ray cluster, whose dashboard address is needed",
              "set ray.address=http://<head>:8265 (or choose cluster=local to start a head here)")
    if backend in ("slurm", "kuberay") and address:
        v.add("cluster-starts-its-own-ray", ["cluster.backend", "ray.address"],
              f"cluster={backend} starts its own Ray cluster; ray.address names another one",
              f"drop ray.address, or choose cluster=existing to use that cluster")
    if backend == "slurm":
        s = v.c["slurm"]
        v.positive("slurm-sizes-positive", ["slurm.nodes", "slurm.gpus_per_node", "slurm.cpus_per_node"],
                   "SLURM node, GPU and CPU counts")
        if s["signal_delay_s"] < 0:
            v.add("slurm-times-positive", ["slurm.signal_delay_s"],
                  "SLURM signals the job this many seconds before its time limit: 0 or more",
                  "set slurm.signal_delay_s to seconds, e.g. 120")
        if s["wait_nodes_s"] <= 0:
            v.add("slurm-times-positive", ["slurm.wait_nodes_s"], "the wait for the nodes' GPUs must be positive",
                  "set slurm.wait_nodes_s to seconds, e.g. 300")
        if s["time"] not in (None, "") and not _SLURM_TIME.match(str(s["time"])):
            v.add("slurm-time-format", ["slurm.time"],
                  "a SLURM time limit is minutes, MM:SS, HH:MM:SS, D-HH, D-HH:MM or D-HH:MM:SS",
                  "set slurm.time e.g. to 4:00:00 or 2-00:00:00, or null for the partition's default")
        if s["mem_per_node"] not in (None, "") and not _SLURM_MEM.match(str(s["mem_per_node"])):
            v.add("slurm-mem-format", ["slurm.mem_per_node"],
                  "sbatch --mem takes a size with an optional K, M, G or T suffix (0 = all of the node's memory)",
                  "set slurm.mem_per_node e.g. to 480G, or null for the partition's default")
        _rule_sbatch_values(v, s)
        name = str(s["job_name"] or "")
        if not name or re.search(r"[\s%]", name):
            # The name is an #SBATCH --job-name=... line: sbatch reads one word there.
            v.add("slurm-job-name-one-word", ["slurm.job_name"],
                  "sbatch --job-name is one word (no spaces, tabs, newlines or '%' patterns), and not empty",
                  f"set slurm.job_name={re.sub(r'[^A-Za-z0-9_.-]+', '_', name).strip('_') or 'clawgym'}, or leave it "
                  f"unset (the run name)")
        bad = [str(x) for x in s["extra_sbatch"] if not str(x).startswith("-") or "\n" in str(x)]
        if bad:
            v.add("slurm-extra-sbatch-options", ["slurm.extra_sbatch"],
                  "each extra #SBATCH line is one sbatch option (starting with '-', one line)",
                  "write them as options, e.g. slurm.extra_sbatch=[--exclusive,--constraint=h100]")
        from clawgym.plan.allocation import allocation
        from clawgym.plan.build import gpus_required

        try:
            alloc, need = allocation(v.c), gpus_required(v.c)
        except (TypeError, ValueError, ZeroDivisionError):
            return
        if alloc.gpus < need:
            v.add("slurm-allocation-fits-run", ["slurm.nodes", "slurm.gpus_per_node"],
                  f"the allocation ({alloc.nodes} node(s) x {alloc.gpus_per_node} GPUs) must hold the run's "
                  f"{need} GPUs", "raise slurm.nodes / slurm.gpus_per_node, or leave them unset (sized from the "
                  "layout)")
        if alloc.nodes > 1 and alloc.gpus_per_node != v.c["gpu_layout"]["num_gpus"]:
            v.add("slurm-gpus-per-node-is-layouts", ["slurm.gpus_per_node", "gpu_layout.num_gpus"],
                  "on several nodes the trainer places work by gpu_layout.num_gpus per node",
                  "set slurm.gpus_per_node equal to gpu_layout.num_gpus (or leave it unset)")
    if backend == "kuberay":
        k = v.c["kuberay"]
        if not k["image"]:
            v.add("kuberay-needs-image", ["kuberay.image"],
                  "the RayJob's pods need an image with Ray, slime, Megatron-LM and the ClawGym-RL checkout",
                  "set kuberay.image=<registry>/<image>:<tag>")
        if not k["pvc"]:
            v.add("kuberay-needs-pvc", ["kuberay.pvc"],
                  "checkpoints must outlive the pods: the save dir lives on a PersistentVolumeClaim",
                  "set kuberay.pvc=<claim name> (mounted at kuberay.mount_path, default paths.save)")
        for key in ("name", "namespace"):
            if k[key] and (not _DNS1123.match(str(k[key])) or len(str(k[key])) > 63):
                v.add("kuberay-names-dns1123", [f"kuberay.{key}"],
                      "Kubernetes names are lowercase letters, digits and '-', at most 63 characters",
                      f"set kuberay.{key} to such a name")
        _rule_kuberay_values(v, k)
        save = v.c["paths"]["save"]
        mount = str(k["mount_path"] or "")
        if save and mount and not (str(save) == mount or str(save).startswith(mount.rstrip("/") + "/")):
            v.add("kuberay-save-dir-on-pvc", ["paths.save", "kuberay.mount_path"],
                  "the save dir must be on the PVC, or checkpoints vanish with the pods",
                  "set kuberay.mount_path to paths.save or a parent of it")


#: Kubernetes resource quantities, the pattern of KubeRay v1.3.2's RayJob CRD
#: (ray-operator/config/crd/bases/ray.io_rayjobs.yaml, resources.limits/requests).
_QUANTITY = re.compile(r"^(\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))(([KMGTPE]i)|[numkMGTPE]|"
                       r"([eE](\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))))?$")
#: A Secret's name is a DNS-1123 subdomain: lowercase alphanumerics, '-' and '.', at most 253.
_DNS1123_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
#: RayJobSpec's integer fields are int32 (ray-operator/apis/ray/v1/rayjob_types.go).
_INT32_MAX = 2 ** 31 - 1


def _rule_kuberay_values(v: Collector, k) -> None:
    """kuberay.* values as KubeRay v1.3.2 takes them (the manifest is checked again, against the
    CRD schema itself, at dry run and before apply: clawgym/backends/kuberay_check.py)."""
    deadline = k["active_deadline_seconds"]
    if deadline is not None and not 0 < deadline <= _INT32_MAX:
        # Mirrors ray-operator/controllers/ray/utils/validation.go:ValidateRayJobSpec (v1.3.2):
        # "activeDeadlineSeconds must be a positive integer"; 0 is not "no deadline" there.
        v.add("kuberay-active-deadline-positive", ["kuberay.active_deadline_seconds"],
              "KubeRay rejects a RayJob whose activeDeadlineSeconds is not a positive int32 "
              "(ValidateRayJobSpec, ray-operator/controllers/ray/utils/validation.go)",
              "set kuberay.active_deadline_seconds to seconds > 0, e.g. 604800, or null for no deadline")
    ttl = k["ttl_seconds_after_finished"]
    if not 0 <= ttl <= _INT32_MAX:
        # RayJobSpec.TTLSecondsAfterFinished is an int32 that the operator adds to the job's end time
        # to the job's end time for the shutdown time (rayjob_controller.go:Reconcile, v1.3.2): a negative
        # TTL would delete the cluster at once.
        v.add("kuberay-ttl-nonnegative", ["kuberay.ttl_seconds_after_finished"],
              "the seconds a finished RayJob is kept are 0 or more (an int32 in the RayJob CRD)",
              "set kuberay.ttl_seconds_after_finished to seconds >= 0, e.g. 3600 (0: delete at once)")
    for key in ("head_cpu", "head_memory", "worker_cpu", "worker_memory"):
        value = k[key]
        if value in (None, ""):
            continue
        text = str(value)
        if not _QUANTITY.match(text) or text.startswith("-"):
            example = "16" if key.endswith("cpu") else "64Gi"
            v.add("kuberay-resource-quantity", [f"kuberay.{key}"],
                  "a pod's CPU and memory are non-negative Kubernetes quantities (the RayJob CRD's quantity "
                  "pattern: a number with an optional suffix such as m, Ki, Mi, Gi, k, M, G)",
                  f"set kuberay.{key} to e.g. {example}, or null for the namespace's default")
    secret = str(k["secret_name"] or "")
    if not _DNS1123_SUBDOMAIN.match(secret) or len(secret) > 253:
        v.add("kuberay-secret-name-dns1123", ["kuberay.secret_name"],
              "a Kubernetes Secret's name is a DNS-1123 subdomain: lowercase letters, digits, '-' and '.', "
              "starting and ending with a letter or digit, at most 253 characters",
              f"set kuberay.secret_name to such a name, e.g. {re.sub(r'[^a-z0-9.-]+', '-', secret.lower()).strip('-.') or 'clawgym-secrets'}")
    if k["wait_dashboard_s"] <= 0:
        v.add("kuberay-wait-positive", ["kuberay.wait_dashboard_s"],
              "the wait for the RayJob's dashboard must be positive", "set kuberay.wait_dashboard_s e.g. to 1800")
    address = k["dashboard_address"]
    if address and not re.match(r"^(https?://)?[^\s/:]+(:\d+)?/?$", str(address)):
        v.add("kuberay-dashboard-address-form", ["kuberay.dashboard_address"],
              "the dashboard address is http://HOST:PORT (the Ray Jobs API of the RayJob's head)",
              "set kuberay.dashboard_address e.g. to http://127.0.0.1:8265, or null for the RayJob's status")


def rule_restart(v: Collector) -> None:
    """The supervisor's budget, poll and wait for a lost node (clawgym/supervisor/): a negative budget
    or wait, or a poll of 0 s, has no meaning; 0 restarts is allowed (each end classified and recorded, never restarted)."""
    r = v.c.get("restart") or {}
    attempts = r.get("max_attempts")
    if isinstance(attempts, int) and attempts < 0:
        v.add("restart-attempts-non-negative", ["restart.max_attempts"],
              f"restart.max_attempts={attempts}: the restarts allowed after the first attempt cannot be negative",
              "set restart.max_attempts=3 (the default), or 0 to record each end without restarting, "
              "or restart.enabled=false")
    poll = r.get("poll_s")
    if isinstance(poll, (int, float)) and not isinstance(poll, bool) and poll <= 0:
        v.add("restart-poll-positive", ["restart.poll_s"],
              f"restart.poll_s={poll}: the seconds between two looks at the running job must be positive",
              "set restart.poll_s=10 (the default)")
    wait = r.get("node_wait_s")
    if isinstance(wait, (int, float)) and not isinstance(wait, bool) and wait < 0:
        v.add("restart-node-wait-non-negative", ["restart.node_wait_s"],
              f"restart.node_wait_s={wait}: the seconds to wait for a lost node's GPUs cannot be negative",
              "set restart.node_wait_s=1800 (the default), or 0 to stop at once when a lost node's GPUs are short")
