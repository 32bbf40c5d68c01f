"""The layout search against the layouts of slime v0.3.1's own launch scripts.

Each public script that ``clawgym import`` reproduces (benchmarks/import_public_scripts.json) is
imported again into a temporary config dir, composed as ``+experiment=NAME``, and its own layout
priced by the memory plan and the step-time model on the GPU its import answered as (an 8-GPU H100
80GB node). The search then runs for the script's GPU count with everything but the layout kept
(model, rollout lengths and batch, trainer flavour). Per script: does the best layout fit, is its
estimated step at most the script's, and when not, why (the script's layout does not fit the memory
plan, or it uses values outside the searched space, or the search found none).

    python benchmarks/layout_vs_public_scripts.py --slime /path/to/slime-v0.3.1 [--only qwen3-4B]

(``--only`` refreshes those scripts' rows of the committed results.)

Writes benchmarks/layout_vs_public_scripts.json and .md.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any, Dict, List

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

GPU = "h100_80gb"


def gpus_of(c: Dict[str, Any]) -> int:
    g = c["gpu_layout"]
    actor = int(g["actor_gpus"]) * int(g["actor_num_nodes"])
    if g["colocate"] or not g.get("rollout_engine", True):
        return actor
    return actor + int(g["rollout_gpus"] or 0)


def outside_space(c: Dict[str, Any]) -> List[str]:
    """The script's layout values the search does not enumerate (why it may not find that layout)."""
    from clawgym.search.space import POW2

    p, s, g = c["perf"], c["sglang"], c["gpu_layout"]
    out = []
    if p.get("recompute_granularity") == "selective":
        out.append("selective recompute")
    if p.get("recompute_granularity") == "full" and (p.get("recompute_method") != "uniform"
                                                      or int(p.get("recompute_num_layers") or 1) != 1):
        out.append(f"full recompute {p.get('recompute_method')} over {p.get('recompute_num_layers')} layers")
    frac = s.get("mem_fraction_static")
    if frac is not None and float(frac) not in (0.7, 0.8, 0.85, 0.9):
        out.append(f"sglang.mem_fraction_static={frac}")
    for k in ("tensor_parallel", "pipeline_parallel", "expert_parallel"):
        if int(p.get(k) or 1) not in POW2:
            out.append(f"perf.{k}={p.get(k)}")
    if int(p.get("context_parallel") or 1) not in (1, 2, 4):
        out.append(f"perf.context_parallel={p.get('context_parallel')}")
    if not g["colocate"] and int(g["actor_gpus"]) < int(g["num_gpus"]) and int(g["actor_num_nodes"]) > 1:
        out.append("actor nodes not filled")
    args = c.get("args") or {}
    for k in sorted(args):
        if k.startswith(("sglang_", "decoder_", "num_layers_per_virtual", "moe_", "offload")):
            out.append(f"args.{k}={args[k]}")
    return out


def compare(name: str, conf: Path) -> Dict[str, Any]:
    from clawgym.config.compose import compose, to_plain
    from clawgym.trainer.effective import effective_config
    from clawgym.memory import evaluate
    from clawgym.search.layout import search
    from clawgym.steptime import step_time

    c = to_plain(compose([f"hydra.searchpath=[file://{conf}]", f"+experiment={name}", f"memory.gpu={GPU}"]))
    ec = effective_config(c)
    n, per_node = gpus_of(ec), int(ec["gpu_layout"]["num_gpus"] or 8)
    own = evaluate(ec, GPU)
    own_step = step_time(ec, GPU, memory=own.to_dict()).step_s
    row: Dict[str, Any] = {"gpus": n, "gpus_per_node": per_node, "script_fits": own.fits,
                           "script_problems": own.problems, "script_step_s": round(own_step, 1),
                           "script_outside_space": outside_space(ec)}
    r = search(c, gpus=n, gpus_per_node=min(per_node, n), gpu=GPU, top=1, explain=False)
    if not r.layouts:
        row.update(best=None, verdict=f"no layout found: {r.binding}")
        return row
    best = r.layouts[0]
    row.update(best=best.overrides, best_fits=best.fits, best_step_s=best.step_s, best_peak_gib=best.gpu_peak_gib)
    if best.fits and (not own.fits or best.step_s <= own_step * 1.005):
        row["verdict"] = "best fits, step <= the script's" + ("" if own.fits else " (the script's does not fit)")
    else:
        why = ", ".join(row["script_outside_space"]) or "the search keeps the fastest 3 per side"
        row["verdict"] = f"the script's layout is faster by the model: it uses {why}"
    return row


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--slime", required=True, help="slime v0.3.1 checkout")
    ap.add_argument("--only", action="append", default=[])
    a = ap.parse_args()
    listed = json.loads((ROOT / "benchmarks" / "import_public_scripts.json").read_text())["scripts"]
    rows = []
    with tempfile.TemporaryDirectory(prefix="clawgym-layout-vs-") as tmp:
        for entry in listed:
            rel = entry["script"]
            if entry.get("verdict") != "0 differences" or (a.only and not any(o in rel for o in a.only)):
                continue
            # Named after the whole path: two folders hold a run_qwen3_4B.sh.
            name = rel.rsplit(".", 1)[0].replace("/", "__").replace("-", "_").replace(".", "_").lower()
            # The variables the import benchmark gave the script (MASTER_ADDR, BASE_FOLDER...).
            env = [x for k, v in (entry.get("env") or {}).items() for x in ("--env", f"{k}={v}")]
            proc = subprocess.run([sys.executable, "-m", "clawgym", "import", str(Path(a.slime) / rel), "--name", name,
                                   "--slime-root", a.slime, "--out", tmp, *env], capture_output=True, text=True,
                                  cwd=ROOT, timeout=600)
            if proc.returncode != 0:
                rows.append({"script": rel, "verdict": f"import failed here (exit {proc.returncode})"})
                print(f"{rel}: import failed", flush=True)
                continue
            try:
                row = {"script": rel, **compare(name, Path(tmp))}
            except Exception as exc:  # noqa: BLE001 - a script the models cannot price is a row, not a crash
                row = {"script": rel, "verdict": f"not priced: {type(exc).__name__}: {exc}"[:300]}
            rows.append(row)
            print(f"{rel}: {row['verdict']}", flush=True)
    out = ROOT / "benchmarks" / "layout_vs_public_scripts"
    if a.only and out.with_suffix(".json").exists():
        # --only refreshes those rows of the committed results, in their place.
        fresh = {r["script"]: r for r in rows}
        old = json.loads(out.with_suffix(".json").read_text())["scripts"]
        rows = [fresh.pop(r["script"], r) for r in old] + list(fresh.values())
    out.with_suffix(".json").write_text(json.dumps({"gpu": GPU, "scripts": rows}, indent=2) + "\n")
    lines = ["# The layout search against slime v0.3.1's public scripts", "",
             f"GPU: {GPU} (as the import answers). Generated by `benchmarks/layout_vs_public_scripts.py`.", "",
             "| script | GPUs | script's layout fits | script step s | best step s | verdict |",
             "|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| `{r['script']}` | {r.get('gpus', '')} | {r.get('script_fits', '')} | "
                     f"{r.get('script_step_s', '')} | {r.get('best_step_s', '')} | {r['verdict']} |")
    out.with_suffix(".md").write_text("\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
