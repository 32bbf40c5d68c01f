"""Cluster backends and the Ray head: the settings each backend needs."""

from __future__ import annotations

import re

from clawgym.validate.core import _Collector


def rule_ray(v: _Collector) -> None:
    r = v.c["ray"]
    for k in ("port", "dashboard_port"):
        if not 0 < r[k] < 65536:
            v.add("ray-port-in-range", [f"ray.{k}"], "ports are 1..65535", f"set ray.{k} to a free port")
    if r["num_gpus"] is not None and r["num_gpus"] < 0:
        v.add("ray-gpus-nonnegative", ["ray.num_gpus"], "a head cannot declare negative GPUs",
              "set ray.num_gpus to the node's GPU count, or null to detect it")


_DNS1123 = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")


_SLURM_TIME = re.compile(r"^(\d+(:\d+){0,2}|\d+-\d+(:\d+){0,2}|INFINITE|UNLIMITED)$")


_SLURM_MEM = re.compile(r"^\d+[KMGT]?$")


def rule_cluster(v: _Collector) -> None:
    """The cluster group's backend, and the settings each backend needs."""
    from clawgym.backends import BACKENDS

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
        name = str(s["job_name"] or "")
        if not name or re.search(r"\s", name):
            # The name is an #SBATCH --job-name=... line: sbatch reads one word there.
            v.add("slurm-job-name-one-word", ["slurm.job_name"],
                  "sbatch --job-name is one word (no spaces, tabs or newlines), and not empty",
                  f"set slurm.job_name={re.sub(r'[^A-Za-z0-9_.-]+', '_', name).strip('_') or 'clawgym'}, or leave it "
                  f"unset (the run name)")
        bad = [str(x) for x in s["extra_sbatch"] if not str(x).startswith("-") or "\n" in str(x)]
        if bad:
            v.add("slurm-extra-sbatch-options", ["slurm.extra_sbatch"],
                  "each extra #SBATCH line is one sbatch option (starting with '-', one line)",
                  "write them as options, e.g. slurm.extra_sbatch=[--exclusive,--constraint=h100]")
        from clawgym.backends.slurm import allocation
        from clawgym.plan import gpus_required

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
        save = v.c["paths"]["save"]
        mount = str(k["mount_path"] or "")
        if save and mount and not (str(save) == mount or str(save).startswith(mount.rstrip("/") + "/")):
            v.add("kuberay-save-dir-on-pvc", ["paths.save", "kuberay.mount_path"],
                  "the save dir must be on the PVC, or checkpoints vanish with the pods",
                  "set kuberay.mount_path to paths.save or a parent of it")
