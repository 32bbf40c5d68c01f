"""Cluster backends: where the Ray cluster of a run comes from (the ``cluster`` group).

``slurm`` (a batch job that starts Ray across its allocation) and ``kuberay`` (a RayJob
manifest) live here; ``local`` and ``existing`` are the launch path of ``clawgym.launch``.
"""

from __future__ import annotations

from typing import Any, Mapping

#: Values of ``cluster.backend``.
BACKENDS = ("local", "existing", "slurm", "kuberay")


def backend_name(c: Mapping[str, Any]) -> str:
    """The backend of a (plain or composed) config; ``local`` with ``ray.address`` set is ``existing``."""
    name = str(((c.get("cluster") or {}) if hasattr(c, "get") else c["cluster"]).get("backend", "local"))
    if name == "local" and c["ray"]["address"]:
        return "existing"
    return name
