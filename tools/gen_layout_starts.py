#!/usr/bin/env python3
"""Run a seeded sample of the layouts clawgym's search finds through each trainer's own startup path.

Issue 25's proof: the layouts ``clawgym layout`` proposes are ones the trainer starts. For a seeded
draw of cases over the model zoo (``conf/model/*.yaml``) x {8, 16, 32, 64} GPUs x {h100_80gb,
h200_141gb} -- every model at least once, then further cases until each flavour has ``--target``
layouts -- this composes the config a user would (``model=M``, plus ``trainer=slime`` for the
upstream flavour), runs :func:`clawgym.search.layout.search` exactly as ``clawgym layout M --gpus N --gpu G
--top 3`` does, and takes the top layout and its runners-up. Each layout's override line (the one
the user pastes after ``python train.py``) is composed, planned with ``build_plan`` and judged by
tools/trainer_judge.py in the flavour's CPU trainer environment (the request/judge plumbing of
tools/gen_trainer_verdicts.py: parser, slime's and Megatron's validation, the driver up to GPU
placement, engine 0's SGLang ``ServerArgs``, rank 0's process groups, micro-batch calculator and
``TransformerConfig``). Each flavour judges the layouts its own search found.

Writes ``tests/data/layout_starts.json`` (tests/test_layout_starts.py reads it). Generated, never
hand-edited:

    flock /tmp/clawgym-heavy.lock python tools/gen_layout_starts.py \\
        --fork-python /work/trainer-env/fork/bin/python \\
        --upstream-python /work/trainer-env/upstream/bin/python --src /work/trainer-src

(tools/README.md: how the environments and source trees are built.)
"""

from __future__ import annotations

import argparse
import copy
import datetime as _dt
import json
import os
import random
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, Tuple

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tools"))
OUT = ROOT / "tests" / "data" / "layout_starts.json"

SEED = 25
GPU_COUNTS = (8, 16, 32, 64)
GPUS = ("h100_80gb", "h200_141gb")
#: Layouts per search: the top one and two runners-up (``clawgym layout --top 3``).
TOP = 3
#: Layouts per flavour the sample reaches at least (issue 25: >= 100).
TARGET = 120
#: The trainer flavours: clawgym's trainer group choice for each (gen_trainer_verdicts' names).
FLAVOUR_BASE = {"clawgym": [], "slime": ["trainer=slime"]}


def _is_group(override: str) -> bool:
    from clawgym.config.compose import config_dir

    key = override.split("=", 1)[0]
    return "." not in key and not key.startswith(("+", "~")) and (config_dir() / key).is_dir()


class Composer:
    """Hydra's composition once per set of group choices (model, trainer); a layout line's value
    overrides applied to a copy, as clawgym's sweeps do (clawgym/sweep/core.py); ``~key`` deletes.
    tests/test_layout_starts.py checks a sample against a full Hydra compose."""

    def __init__(self, path_root: Optional[str] = None):
        from hydra.core.override_parser.overrides_parser import OverridesParser

        self.parser = OverridesParser.create()
        self.base = [f"paths.root={path_root}"] if path_root else []
        self.templates: Dict[Tuple[str, ...], Any] = {}

    def plain(self, overrides: Sequence[str]) -> dict:
        from omegaconf import OmegaConf, open_dict, read_write

        from clawgym.config.compose import compose, to_plain

        groups = tuple(o for o in overrides if _is_group(o))
        if groups not in self.templates:
            self.templates[groups] = compose([*groups, *self.base])
        cfg = copy.deepcopy(self.templates[groups])
        with read_write(cfg), open_dict(cfg):
            for text in overrides:
                if text in groups:
                    continue
                if text.startswith("~"):
                    parent, _, leaf = text[1:].split("=", 1)[0].rpartition(".")
                    node = OmegaConf.select(cfg, parent) if parent else cfg
                    if node is not None and leaf in node:
                        del node[leaf]
                    continue
                o = self.parser.parse_override(text)
                OmegaConf.update(cfg, o.key_or_group, o.value(), merge=False)
        return to_plain(cfg)


def models() -> List[str]:
    from clawgym.config.compose import group_options

    return sorted(group_options("model"))


def cases(seed: int) -> Tuple[Dict[str, List[Dict[str, Any]]], List[Dict[str, Any]]]:
    """Per model, its cases in a seeded order (the sample takes each model's first case that has a
    layout), and every case in a seeded order (for the rest of the sample)."""
    rng = random.Random(f"layout-starts-{seed}")
    per_model = {}
    for m in models():
        mine = [{"model": m, "gpus": n, "gpu": g} for n in GPU_COUNTS for g in GPUS]
        rng.shuffle(mine)
        per_model[m] = mine
    rest = [x for m in models() for x in per_model[m]]
    rng.shuffle(rest)
    return per_model, rest


def found_layouts(flavour: str, case: Dict[str, Any], composer: Composer, top: int = TOP) -> Dict[str, Any]:
    """What ``clawgym layout model=M [trainer=slime] --gpus N --gpu G --top 3`` finds for the case."""
    from clawgym.search.constraints import constraint_keys
    from clawgym.search.layout import search

    user = [*FLAVOUR_BASE[flavour], f"model={case['model']}"]
    c = composer.plain(user)
    r = search(c, gpus=case["gpus"], gpu=case["gpu"], constraints=constraint_keys(user), top=top,
               user_overrides=[*user, f"memory.gpu={case['gpu']}"])
    return {"gpus_per_node": r.gpus_per_node, "binding": r.binding,
            "layouts": [{"rank": i, "overrides": x.overrides, "step_s": x.step_s, "gpu_peak_gib": x.gpu_peak_gib,
                         "fits": x.fits} for i, x in enumerate(r.layouts)]}


def request(i: int, overrides: Sequence[str], composer: Composer) -> Tuple[dict, dict]:
    """The judge request of a layout line (compose, build_plan; no validation: the trainer judges)."""
    from clawgym.plan.build import build_plan_from_dict

    c = composer.plain(overrides)
    plan = build_plan_from_dict(c, environ={}, timestamp="corpus")
    return ({"id": i, "script": plan.entrypoint[1], "argv": plan.entrypoint[2:],
             "env": plan.runtime_env["env_vars"], "model": c["model"]}, c)


def environment(python: str) -> Dict[str, Any]:
    """Versions installed in a trainer environment (recorded with the verdicts)."""
    code = ("import json, platform, importlib.metadata as m\n"
            "out = {'python': platform.python_version()}\n"
            "for p in ('torch', 'transformers', 'sglang', 'sglang-router', 'numpy', 'triton', 'ray'):\n"
            "    try: out[p] = m.version(p)\n"
            "    except m.PackageNotFoundError: out[p] = None\n"
            "print(json.dumps(out))")
    return json.loads(subprocess.run([python, "-c", code], capture_output=True, text=True, check=True).stdout)


def main(argv=None) -> int:
    import gen_trainer_verdicts as gtv
    import trainer_judge as tj

    ap = argparse.ArgumentParser(description="Judge a seeded sample of the search's layouts with both trainers.")
    ap.add_argument("--fork-python", help="python of the fork's CPU trainer environment")
    ap.add_argument("--upstream-python", help="python of upstream slime v0.3.1's CPU trainer environment")
    ap.add_argument("--src", required=True, help="directory holding the source trees (tools/README.md)")
    ap.add_argument("--flavour", action="append", choices=sorted(FLAVOUR_BASE), help="only these (default: both)")
    ap.add_argument("--seed", type=int, default=SEED)
    ap.add_argument("--target", type=int, default=TARGET, help="layouts per flavour to reach at least")
    ap.add_argument("--out", default=str(OUT))
    ap.add_argument("--save-search", metavar="FILE", help="write the sampled layouts to FILE and stop (no judge)")
    ap.add_argument("--from-search", metavar="FILE", help="judge the layouts a --save-search run wrote")
    ap.add_argument("--keep", metavar="FILE", help="with --flavour: the other flavours' verdicts from FILE, an "
                                                   "earlier output over the same sample")
    ns = ap.parse_args(argv)
    flavours = ns.flavour or sorted(FLAVOUR_BASE)
    pythons = {}
    for fl in flavours if not ns.save_search else ():
        py = getattr(ns, gtv.FLAVOURS[fl]["python_opt"])
        if not py:
            sys.exit(f"gen_layout_starts: pass --{gtv.FLAVOURS[fl]['python_opt'].replace('_', '-')}")
        pythons[fl] = py

    t0 = time.monotonic()
    composer = Composer()
    judge_composer = Composer(gtv.PATH_ROOT)
    n_models = len(models())
    entries: List[Dict[str, Any]] = []
    no_layout: List[Dict[str, Any]] = []
    counts = {fl: 0 for fl in flavours}
    searched = set()

    def take(case) -> int:
        """Search the case for every flavour; add its layouts; the number found."""
        searched.add((case["model"], case["gpus"], case["gpu"]))
        per = {}
        for fl in flavours:
            try:
                per[fl] = found_layouts(fl, case, composer)
            except ValueError as exc:  # a model this flavour's config cannot take (e.g. a flag it lacks)
                per[fl] = {"layouts": [], "binding": f"{type(exc).__name__}: {exc}", "gpus_per_node": None}
            if not per[fl]["layouts"]:
                no_layout.append({**case, "flavour": fl, "binding": per[fl]["binding"]})
        found = 0
        for rank in range(TOP):
            e = {"id": len(entries), **case, "rank": rank, "flavours": {}}
            for fl in flavours:
                lays = per[fl]["layouts"]
                if rank < len(lays):
                    e["gpus_per_node"] = per[fl]["gpus_per_node"]
                    e["flavours"][fl] = dict(lays[rank])
                    counts[fl] += 1
                    found += 1
            if e["flavours"]:
                entries.append(e)
        return found

    per_model, rest = cases(ns.seed) if not ns.from_search else ({}, [])
    # Every model of the zoo: its first case (seeded order) where the search finds a layout.
    for m, mine in per_model.items():
        for case in mine:
            if take(case):
                break
    # Then further cases until every flavour has the target.
    for case in rest:
        if min(counts.values()) >= ns.target:
            break
        if (case["model"], case["gpus"], case["gpu"]) not in searched:
            take(case)
    if ns.from_search:
        with open(ns.from_search) as f:
            saved = json.load(f)
        assert saved["seed"] == ns.seed and saved["target"] == ns.target, "--from-search: another seed or target"
        entries, no_layout, counts = saved["entries"], saved["no_layout"], saved["counts"]
    if ns.save_search:
        with open(ns.save_search, "w") as f:
            json.dump({"seed": ns.seed, "target": ns.target, "entries": entries, "no_layout": no_layout,
                       "counts": counts}, f)
    t1 = time.monotonic()
    print(f"gen_layout_starts: {len(entries)} layout ranks over {len({e['model'] for e in entries})} models "
          f"({counts}), searched in {t1 - t0:.0f} s", flush=True)
    if ns.save_search:
        return 0

    meta_flavours = {}
    for fl in flavours:
        todo = [e for e in entries if fl in e["flavours"]]
        reqs = []
        for e in todo:
            rq, _c = request(e["id"], e["flavours"][fl]["overrides"], judge_composer)
            reqs.append(rq)
        t2 = time.monotonic()
        jmeta, _config_json, verdicts = gtv.judge(fl, pythons[fl], ns.src, reqs)
        # A layout whose engine stage met one of SGLang's accelerator probes (is_cuda() & co.: false on a
        # CPU torch) is judged again without that stage, as tools/import_judge.py does: the stages after
        # it still run, and the record names the stage not judged and the trainer's statement.
        probed = {i: v for i, v in verdicts.items() if v.get("judged") is False and v.get("stage") == "sglang-engine"
                  and tj._probes_hardware(v.get("where"))}
        if probed:
            again = [dict(r, skip=["sglang-engine"]) for r in reqs if r["id"] in probed]
            _m, _c, verdicts2 = gtv.judge(fl, pythons[fl], ns.src, again)
            for i, v in probed.items():
                w = v["where"]
                verdicts[i] = dict(verdicts2[i], not_judged=[{
                    "stage": "sglang-engine", "why": "the refusing statement probes the accelerator kind (CPU torch)",
                    "message": v["message"], "where": w}])
        for e in todo:
            v = verdicts[e["id"]]
            rec = e["flavours"][fl]
            if v.get("not_judged"):
                rec["not_judged"] = v["not_judged"]
            if v.get("judged") is False:
                rec["verdict"] = "not judged"
            else:
                rec["verdict"] = "starts" if v["accepted"] else "refused"
            if not v["accepted"]:
                rec["trainer"] = {k: v.get(k) for k in ("stage", "exception", "message", "where")}
                rec["constraint"] = gtv.classify(v)
        started = sum(e["flavours"][fl]["verdict"] == "starts" for e in todo)
        print(f"gen_layout_starts: {fl}: {started}/{len(todo)} start (judged in {time.monotonic() - t2:.0f} s)",
              flush=True)
        for e in todo:
            r = e["flavours"][fl]
            if r["verdict"] != "starts":
                t = r.get("trainer") or {}
                print(f"  #{e['id']} {r['verdict']}: {' '.join(r['overrides'])}\n"
                      f"      [{t.get('stage')}] {(t.get('message') or (t.get('where') or {}).get('code') or '')[:300]}")
        meta_flavours[fl] = {"sources": gtv.FLAVOURS[fl]["sources"], "environment": environment(pythons[fl]),
                             "stages": jmeta["stages"], "stand_ins": jmeta["stand_ins"],
                             "stand_in_imports": jmeta["stand_in_imports"], "not_judged": jmeta.get("not_judged"),
                             "layouts": len(todo), "started": started}

    if ns.keep:
        with open(ns.keep) as f:
            kept = json.load(f)
        assert kept["meta"]["seed"] == ns.seed and len(kept["entries"]) == len(entries), "--keep: another sample"
        for e, k in zip(entries, kept["entries"]):
            for fl, r in k["flavours"].items():
                if fl not in flavours:
                    assert e["flavours"][fl]["overrides"] == r["overrides"], f"--keep: #{e['id']} differs"
                    e["flavours"][fl] = r
        for fl, m in kept["meta"]["flavours"].items():
            meta_flavours.setdefault(fl, m)
    data = {"meta": {
        "generator": "tools/gen_layout_starts.py",
        "generated_at": _dt.datetime.now(_dt.timezone.utc).replace(microsecond=0).isoformat(),
        "regenerate": "flock /tmp/clawgym-heavy.lock python tools/gen_layout_starts.py --fork-python <fork env>/bin/python "
                      "--upstream-python <upstream env>/bin/python --src <trainer sources> (tools/README.md)",
        "seed": ns.seed, "target": ns.target, "top": TOP, "gpu_counts": list(GPU_COUNTS), "gpus": list(GPUS),
        "path_root": gtv.PATH_ROOT, "flavour_overrides": FLAVOUR_BASE,
        "models": sorted({e["model"] for e in entries}), "zoo_size": n_models,
        "cases": len({(e["model"], e["gpus"], e["gpu"]) for e in entries}),
        "no_layout": no_layout,
        "flavours": dict(sorted(meta_flavours.items())),
    }, "entries": entries}
    os.makedirs(os.path.dirname(ns.out), exist_ok=True)
    meta = json.dumps(data["meta"], indent=1, ensure_ascii=False)
    body = ",\n".join(json.dumps(e, ensure_ascii=False, separators=(",", ":")) for e in entries)
    with open(ns.out + ".tmp", "w") as f:
        f.write('{"meta": ' + meta + ',\n"entries": [\n' + body + "\n]}\n")
    os.replace(ns.out + ".tmp", ns.out)
    print(f"gen_layout_starts: -> {ns.out} ({time.monotonic() - t0:.0f} s)")
    bad = [(e["id"], fl) for e in entries for fl, r in e["flavours"].items() if r.get("verdict") != "starts"]
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
