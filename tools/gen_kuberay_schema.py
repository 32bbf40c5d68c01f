#!/usr/bin/env python3
"""Generate clawgym/backends/data/rayjob_schema.json from KubeRay's RayJob CRD (offline).

The CRD (``ray-operator/config/crd/bases/ray.io_rayjobs.yaml`` of a KubeRay release) holds
the OpenAPI v3 schema the Kubernetes API server checks a RayJob against. This tool takes
its ``v1`` version's ``openAPIV3Schema`` and writes it as a JSON schema that
``jsonschema`` checks manifests with (clawgym/backends/kuberay_check.py):

- ``description`` texts are dropped (size; they are KubeRay's API docs, not rules);
- ``format: int32`` / ``int64`` become the ranges the API server enforces for them;
- Kubernetes' own keywords (``x-kubernetes-*``) stay; JSON-schema validators ignore them
  (the CEL rules among them concern fields clawgym never sets: managedBy, deletionPolicy).

Usage, from a KubeRay checkout or its git mirror:

    git -C <kuberay> show v1.3.2:ray-operator/config/crd/bases/ray.io_rayjobs.yaml > /tmp/rayjobs.yaml
    python tools/gen_kuberay_schema.py /tmp/rayjobs.yaml --release v1.3.2 --commit <sha of v1.3.2>

The output records the release, the CRD path and the CRD's sha256.
"""

from __future__ import annotations

import argparse
import hashlib
import json
from pathlib import Path
from typing import Any, Dict

import yaml

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "clawgym" / "backends" / "data" / "rayjob_schema.json"
CRD_PATH = "ray-operator/config/crd/bases/ray.io_rayjobs.yaml"
#: Integer formats of the OpenAPI schema and the range the API server accepts for each.
RANGES = {"int32": (-2 ** 31, 2 ** 31 - 1), "int64": (-2 ** 63, 2 ** 63 - 1)}


def _convert(node: Any) -> Any:
    if isinstance(node, list):
        return [_convert(x) for x in node]
    if not isinstance(node, dict):
        return node
    out: Dict[str, Any] = {k: _convert(v) for k, v in node.items() if k != "description"}
    fmt = out.get("format")
    if out.get("type") == "integer" and fmt in RANGES:
        lo, hi = RANGES[fmt]
        out.setdefault("minimum", lo)
        out.setdefault("maximum", hi)
    return out


def schema_from_crd(crd: Dict[str, Any], version: str = "v1") -> Dict[str, Any]:
    """The JSON schema of one served version of a CRD (pure)."""
    if crd.get("kind") != "CustomResourceDefinition":
        raise ValueError("not a CustomResourceDefinition")
    found = [v for v in crd["spec"]["versions"] if v.get("name") == version]
    if not found:
        raise ValueError(f"the CRD has no version {version!r}")
    schema = _convert(found[0]["schema"]["openAPIV3Schema"])
    schema["$schema"] = "http://json-schema.org/draft-07/schema#"
    return schema


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("crd", help=f"the release's {CRD_PATH}")
    ap.add_argument("--release", required=True, help="the KubeRay release tag, e.g. v1.3.2")
    ap.add_argument("--commit", default="", help="the commit the tag points at")
    ap.add_argument("--out", default=str(OUT))
    args = ap.parse_args()
    raw = Path(args.crd).read_bytes()
    schema = schema_from_crd(yaml.safe_load(raw))
    schema["x-clawgym-source"] = {"generated_by": "tools/gen_kuberay_schema.py", "source": "ray-project/kuberay",
                          "release": args.release, "commit": args.commit, "path": CRD_PATH,
                          "crd_sha256": hashlib.sha256(raw).hexdigest(), "version": "v1"}
    Path(args.out).write_text(json.dumps(schema, sort_keys=True, separators=(",", ":")) + "\n")
    print(f"wrote {args.out} ({Path(args.out).stat().st_size} bytes)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
