"""Machine checks for a local head: visible GPUs and free ports.

Both apply only when clawgym starts the Ray head here (``local_head``): on an existing
cluster the job's GPUs and ports are the cluster's, which this machine cannot see.
"""

from __future__ import annotations

import errno
import os
import shutil
import socket
import subprocess
from typing import Dict, List, Optional, Tuple

from clawgym.common.net import port_free
from clawgym.preflight.core import CheckFailed, Context, NotApplicable


def _visible_limit() -> Optional[int]:
    """GPUs CUDA_VISIBLE_DEVICES allows (None: no restriction)."""
    value = os.environ.get("CUDA_VISIBLE_DEVICES")
    if value is None:
        return None
    items = [v for v in value.split(",") if v.strip()]
    # CUDA stops at the first invalid entry such as -1.
    count = 0
    for item in items:
        if item.strip().startswith("-"):
            break
        count += 1
    return count


def count_gpus() -> Tuple[int, str]:
    """(GPUs visible on this node, how they were counted): NVML when importable, else nvidia-smi -L."""
    count: Optional[int] = None
    how = ""
    try:
        import pynvml  # type: ignore[import-not-found]

        pynvml.nvmlInit()
        try:
            count, how = int(pynvml.nvmlDeviceGetCount()), "NVML"
        finally:
            pynvml.nvmlShutdown()
    except Exception:  # not installed, or no driver: fall back to the CLI
        count = None
    if count is None:
        smi = shutil.which("nvidia-smi")
        if smi is None:
            return 0, "no NVIDIA driver: pynvml unusable and nvidia-smi not found"
        try:
            out = subprocess.run([smi, "-L"], capture_output=True, text=True, timeout=30)
        except (OSError, subprocess.TimeoutExpired) as exc:
            return 0, f"nvidia-smi -L failed: {exc}"
        if out.returncode != 0:
            return 0, f"nvidia-smi -L failed: {' '.join((out.stderr or out.stdout).split())[:200]}"
        count, how = sum(1 for line in out.stdout.splitlines() if line.startswith("GPU ")), "nvidia-smi -L"
    limit = _visible_limit()
    if limit is not None and limit < count:
        return limit, f"{how}, limited by CUDA_VISIBLE_DEVICES={os.environ['CUDA_VISIBLE_DEVICES']}"
    return count, how


# The node's GPU listing lives with the memory plan's GPU table (the plan looks it up without the
# preflight package); the gpus check uses the same listing.
from clawgym.memory.gpus import node_gpus as gpu_models  # noqa: E402


def describe_gpus(models: List[Tuple[str, Optional[int]]]) -> str:
    """``2x NVIDIA H200 (141 GiB)``; several models are listed one after another."""
    counts: Dict[Tuple[str, Optional[int]], int] = {}
    for m in models:
        counts[m] = counts.get(m, 0) + 1
    parts = []
    for (name, mib), n in counts.items():
        mem = f" ({mib / 1024:.0f} GiB)" if mib else ""
        parts.append(f"{n}x {name}{mem}")
    return ", ".join(parts)


def layout_gpus(layout: Dict[str, object]) -> int:
    """GPUs a gpu_layout option holds (as :func:`clawgym.plan.build.gpus_required`)."""
    actor = int(layout["actor_gpus"]) * int(layout.get("actor_num_nodes", 1) or 1)  # type: ignore[arg-type]
    rollout = int(layout["rollout_gpus"])  # type: ignore[arg-type]
    return max(actor, rollout) if layout["colocate"] else actor + rollout


def layouts_that_fit(have: int) -> List[Tuple[str, int]]:
    """(gpu_layout option, GPUs it holds) of the shipped layouts that fit ``have`` GPUs, largest first."""
    from clawgym.config.compose import compose, group_options

    out = []
    for name in group_options("gpu_layout"):
        try:
            g = compose([f"gpu_layout={name}"]).gpu_layout
            need = layout_gpus({k: g[k] for k in ("actor_gpus", "actor_num_nodes", "rollout_gpus", "colocate")})
        except Exception:  # noqa: BLE001 - an option that does not compose alone is no suggestion
            continue
        if 0 < need <= have:
            out.append((name, need))
    return sorted(out, key=lambda x: (-x[1], x[0]))


def _runs_elsewhere(ctx: Context) -> None:
    """GPUs, ports and the cluster are not this machine's with cluster=slurm / kuberay."""
    backend = str((ctx.c.get("cluster") or {}).get("backend", "local"))
    if backend == "slurm":
        raise NotApplicable("checked inside the SLURM allocation, where the job runs")
    if backend == "kuberay":
        raise NotApplicable("the RayJob's pods run on the Kubernetes cluster")


def check_gpus(ctx: Context) -> str:
    """This node shows at least the GPUs the run holds and the head declares."""
    _runs_elsewhere(ctx)
    if not ctx.local_head:
        raise NotApplicable(f"the job runs on the existing cluster at {ctx.plan.address}")
    c = ctx.c
    need = ctx.plan.gpus_required
    declared = c["ray"]["num_gpus"]
    have, how = count_gpus()
    models = gpu_models()[:have] if have else []
    seen = f"{have} ({describe_gpus(models)}; {how})" if models else f"{have} ({how})"
    g = c["gpu_layout"]
    if g["colocate"]:
        layout = f"colocated: actor and rollout share {need}"
    else:
        layout = f"{g['actor_gpus'] * g['actor_num_nodes']} actor + {g['rollout_gpus']} rollout"
    if have < need:
        fits = layouts_that_fit(have)
        if fits:
            names = ", ".join(f"gpu_layout={n} ({k} GPU{'s' if k != 1 else ''})" for n, k in fits[:3])
            fix = f"choose a layout that fits the {have} GPU{'s' if have != 1 else ''} here: {names}; " \
                  "or run on a node with more GPUs, or on an existing cluster with ray.address=..."
        else:
            fix = "run on a GPU node, or use an existing cluster with ray.address=..."
        raise CheckFailed(f"the run needs {need} GPUs ({layout}) but this node shows {seen}", fix)
    if declared is not None and have < declared:
        raise CheckFailed(
            f"ray.num_gpus={declared} but this node shows {seen} GPUs; Ray would schedule onto GPUs "
            "that do not exist",
            f"set ray.num_gpus={have} (or null to let Ray detect them) and gpu_layout.num_gpus to match")
    return f"{seen} visible; the run holds {need} ({layout})"


def check_ports(ctx: Context) -> str:
    """The ports a local run listens on are free: API server, Ray GCS, Ray dashboard."""
    _runs_elsewhere(ctx)
    if not ctx.local_head:
        raise NotApplicable(f"the job runs on the existing cluster at {ctx.plan.address}")
    c = ctx.c
    wanted: List[Tuple[str, str, int]] = [
        ("sglang.api_port", c["sglang"]["api_host"], c["sglang"]["api_port"]),
        ("ray.port", c["ray"]["node_ip"], c["ray"]["port"]),
        ("ray.dashboard_port", c["ray"]["dashboard_host"], c["ray"]["dashboard_port"]),
    ]
    if c["sandbox"]["backend"] == "none":
        # No ClawGymRL API server runs without a sandbox.
        wanted = wanted[1:]
    teacher = (c.get("services") or {}).get("teacher") or {}
    if teacher.get("enabled"):
        # The OPD teacher listens beside the trainer: another server answering there would be
        # taken for it (its health check passes, the trainer talks to the wrong model).
        wanted.append(("services.teacher.port", str(teacher.get("host") or "127.0.0.1"), int(teacher["port"])))
    seen = {}
    for key, _host, port in wanted:
        if port in seen:
            raise CheckFailed(f"{key}={port} is also {seen[port]}; both services would need the port",
                              f"give {key} a port of its own")
        seen[port] = key
    # The head's own ports are reserved by the head clawgym is starting right now (it starts
    # while preflight runs): reserving them was their check, probing them now would find the head.
    from clawgym.backends.head.ports import starting_ports

    reserved = starting_ports()
    held = [key for key, _host, port in wanted if key.startswith("ray.") and port in reserved]
    from clawgym.common.ownership import port_holder

    for key, host, port in wanted:
        if key in held:
            continue
        reason = port_free(host, port)
        if reason is None and port not in reserved:
            holder = port_holder(port)
            if holder is not None:
                # Reserved (not yet listened on) by another launch starting its head right now.
                reason = f"reserved by {holder} for the Ray head it is starting"
        if reason is not None:
            raise CheckFailed(
                f"{key}={port} on {host}: {reason}",
                f"free the port (ss -ltnp 'sport = :{port}' shows who holds it) or set {key} to a free port")
    return ", ".join(f"{key}={port}" + (" (reserved for the head being started)" if key in held else "")
                     for key, _h, port in wanted) + " free"


def check_cluster(ctx: Context) -> str:
    """An existing cluster (``ray.address``) answers and declares the GPUs the run holds.

    Checked before anything is written or submitted, so an unreachable or too small
    cluster fails here rather than after the snapshot, or as a job whose placement
    group waits forever.
    """
    _runs_elsewhere(ctx)
    if ctx.local_head:
        raise NotApplicable("clawgym starts the head on this machine")
    from clawgym.backends.head import liveness as head_liveness
    from clawgym.launch import rayjob

    address = ctx.plan.address
    key = "ray.address" if ctx.c["ray"]["address"] else "ray.dashboard_port"
    if not rayjob.dashboard_responds(address, timeout=5.0):
        raise CheckFailed(f"{key}: no Ray dashboard answers at {address}",
                          "start the cluster, or set ray.address to its dashboard's http address "
                          "(e.g. http://head:8265)")
    try:
        gpus = head_liveness.cluster_gpus(address)
    except (OSError, ValueError) as exc:
        raise CheckFailed(f"{key}: the dashboard at {address} did not list its nodes ({exc})",
                          "check the cluster's health (ray status on the head node)")
    need = ctx.plan.gpus_required
    if gpus < need:
        raise CheckFailed(f"the cluster at {address} declares {gpus:g} GPUs; this run holds {need} "
                          f"(gpu_layout.actor_gpus / gpu_layout.rollout_gpus)",
                          "choose a smaller gpu_layout, or add GPU nodes to the cluster")
    return f"{address} answers, {gpus:g} GPUs for the run's {need}"
