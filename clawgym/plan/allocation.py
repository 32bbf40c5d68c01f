"""Which backend a config asks for and the size of the cluster it asks for (pure; config only).

Validation, the backends and the pipeline read these without importing one another: the names of
``cluster.backend``, and the nodes x GPUs a SLURM allocation or a RayJob cluster is sized to.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Mapping, Optional

#: Values of ``cluster.backend``.
BACKENDS = ("local", "existing", "slurm", "kuberay")


def backend_name(c: Any) -> str:
    """The backend a (plain or composed) config asks for; ``local`` with ``ray.address`` set is ``existing``."""
    if c is None:
        return "local"
    cluster = c.get("cluster") if hasattr(c, "get") else None
    name = str((cluster or {}).get("backend", "local") if cluster is not None else "local")
    ray = c.get("ray") if hasattr(c, "get") else None
    if name == "local" and ray is not None and ray.get("address"):
        return "existing"
    return name


@dataclass(frozen=True)
class Allocation:
    """What the batch job asks SLURM for."""

    # sbatch --nodes.
    nodes: int
    # GPUs per node (--gres=gpu:N).
    gpus_per_node: int

    @property
    def gpus(self) -> int:
        return self.nodes * self.gpus_per_node


def size_from_layout(c: Mapping[str, Any], *, nodes: Optional[int] = None,
                     gpus_per_node: Optional[int] = None) -> Allocation:
    """Nodes and GPUs per node for the run's layout (given values win).

    Nodes: the GPUs the run holds over ``gpu_layout.num_gpus``, rounded up. GPUs per
    node: ``gpu_layout.num_gpus`` on several nodes; on one node only what the run holds,
    so small jobs of a sweep share a node.
    """
    from clawgym.plan.build import gpus_required  # plan imports omegaconf: `clawgym jobs` and `--help` need none of it

    need = gpus_required(c)
    per_node = int(c["gpu_layout"]["num_gpus"])
    n = int(nodes) if nodes else max(1, math.ceil(need / per_node))
    gpn = int(gpus_per_node) if gpus_per_node else (per_node if n > 1 else need)
    return Allocation(nodes=n, gpus_per_node=gpn)


def allocation(c: Mapping[str, Any]) -> Allocation:
    """The SLURM job's size: ``slurm.nodes`` / ``slurm.gpus_per_node`` when set, else from the layout."""
    return size_from_layout(c, nodes=c["slurm"]["nodes"], gpus_per_node=c["slurm"]["gpus_per_node"])
