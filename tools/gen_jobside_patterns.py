"""Generate clawgym/jobside/startup_patterns.json from the supervisor's failure patterns.

    python tools/gen_jobside_patterns.py            # rewrite it
    python tools/gen_jobside_patterns.py --check    # exit 1 when the committed file differs

KubeRay's RayJob runs clawgym/jobside/resume_load.py in the pod, on the standard library alone: it
cannot import clawgym.supervisor.classes, yet it must tell a deterministic startup failure (never
retried) from the rest. So the startup-failure rows of that one table are written here as data,
beside the shim, and ``tests/test_kuberay_resume.py`` fails while the copy is stale.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import List, Optional

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "clawgym" / "jobside" / "startup_patterns.json"

if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))


def render() -> str:
    from clawgym.supervisor import classes as C

    rows = [{"regex": p.regex, "program": p.program, "source": p.source}
            for p in C.PATTERNS if p.cls == C.STARTUP_FAILURE]
    data = {"generated_by": "tools/gen_jobside_patterns.py from clawgym/supervisor/classes.py: do not edit",
            "class": C.STARTUP_FAILURE, "patterns": rows}
    return json.dumps(data, indent=1) + "\n"


def main(argv: Optional[List[str]] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="write nothing; exit 1 when the file is stale")
    args = ap.parse_args(argv)
    text = render()
    if args.check:
        if not OUT.exists() or OUT.read_text() != text:
            print(f"stale: {OUT.relative_to(ROOT)}\n  fix: run tools/gen_jobside_patterns.py", file=sys.stderr)
            return 1
        return 0
    tmp = OUT.with_suffix(".json.tmp")
    tmp.write_text(text)
    os.replace(tmp, OUT)
    print(f"wrote {OUT.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
