"""A RayJob manifest checked as KubeRay v1.3.2 checks it, before anything is applied.

Two layers, both from the release's own source (never from memory):

- the RayJob CRD's OpenAPI schema, which the Kubernetes API server enforces on
  ``kubectl apply`` (types, int32 ranges, Kubernetes quantity patterns, required fields):
  ``data/rayjob_schema.json``, generated offline by ``tools/gen_kuberay_schema.py`` from
  ``ray-operator/config/crd/bases/ray.io_rayjobs.yaml``, checked with ``jsonschema``;
- the operator's ``ValidateRayJobSpec`` and ``ValidateRayClusterSpec``
  (``ray-operator/controllers/ray/utils/validation.go``), which reject a RayJob only once
  the operator reconciles it (the RayJob then fails, after the apply succeeded): mirrored
  in :func:`operator_problems`.

Validation (clawgym/validate/cluster.py) refuses the config values that would break
either; this check is the backstop on the rendered manifest, at dry run and before apply.
"""

from __future__ import annotations

import functools
import json
from pathlib import Path
from typing import Any, Dict, List, Mapping

import yaml

SCHEMA_FILE = Path(__file__).resolve().parent / "data" / "rayjob_schema.json"


@functools.lru_cache(maxsize=1)
def _validator() -> Any:
    import jsonschema

    schema = json.loads(SCHEMA_FILE.read_text())
    return jsonschema.Draft7Validator(schema)


def schema_source() -> Dict[str, Any]:
    """Where the schema came from (release, commit, CRD path and sha256)."""
    return dict(_validator().schema.get("x-clawgym-source") or {})


def schema_problems(doc: Mapping[str, Any]) -> List[str]:
    """Every violation of the RayJob CRD schema, as ``path: message``."""
    out = []
    for err in sorted(_validator().iter_errors(doc), key=lambda e: list(map(str, e.absolute_path))):
        where = ".".join(str(p) for p in err.absolute_path) or "(the manifest)"
        out.append(f"{where}: {err.message}")
    return out


def operator_problems(doc: Mapping[str, Any]) -> List[str]:
    """What KubeRay v1.3.2's ValidateRayJobSpec / ValidateRayClusterSpec would reject
    (ray-operator/controllers/ray/utils/validation.go), for the fields clawgym sets."""
    spec = doc.get("spec") or {}
    out: List[str] = []
    if spec.get("suspend") and not spec.get("shutdownAfterJobFinishes"):
        out.append("spec.suspend: a RayJob with shutdownAfterJobFinishes set to false is not allowed to be suspended")
    cluster = spec.get("rayClusterSpec")
    if cluster is None and not spec.get("clusterSelector"):
        out.append("spec: one of rayClusterSpec or clusterSelector must be set")
    try:
        yaml.safe_load(spec.get("runtimeEnvYAML") or "")
    except yaml.YAMLError as exc:
        out.append(f"spec.runtimeEnvYAML: not valid YAML ({exc})")
    deadline = spec.get("activeDeadlineSeconds")
    if deadline is not None and isinstance(deadline, int) and deadline <= 0:
        out.append("spec.activeDeadlineSeconds: activeDeadlineSeconds must be a positive integer")
    backoff = spec.get("backoffLimit")
    if backoff is not None and isinstance(backoff, int) and backoff < 0:
        out.append("spec.backoffLimit: backoffLimit must be a positive integer")
    if isinstance(cluster, dict):
        head = (((cluster.get("headGroupSpec") or {}).get("template") or {}).get("spec") or {})
        if not head.get("containers"):
            out.append("spec.rayClusterSpec.headGroupSpec: headGroupSpec should have at least one container")
        for group in cluster.get("workerGroupSpecs") or []:
            if not (((group.get("template") or {}).get("spec") or {}).get("containers")):
                out.append("spec.rayClusterSpec.workerGroupSpecs: workerGroupSpec should have at least one container")
    return out


def manifest_problems(doc: Mapping[str, Any]) -> List[str]:
    return schema_problems(doc) + operator_problems(doc)
