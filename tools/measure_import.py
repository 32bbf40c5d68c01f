#!/usr/bin/env python3
"""Import every public launch script of a slime checkout and judge each import with the
trainer's own parser.

For each ``scripts/run-*.sh`` and ``examples/**/run*.sh`` of ``--slime`` (slime v0.3.1 for the
committed results):

1. ``clawgym import`` runs it (stand-ins, nothing started) into a temporary config dir. A script
   that stops because it wants a variable ("BASE_FOLDER is not set") is run again with that
   variable set to a placeholder (listed per script): what a user passes with ``--env``.
2. Both argvs -- the one the script submits (as the import itself captured it: one run of the
   script) and the one the written experiment's plan emits -- go through the trainer's real startup
   path (tools/import_judge.py on tools/trainer_judge.py's stages: ``parse_args()`` with its
   validation, the driver, engine 0's SGLang ``ServerArgs``, rank 0's model-parallel init, micro-batch
   calculator and ``TransformerConfig``; run with the interpreter of a trainer environment,
   ``--python``), and the two namespaces ``parse_args()`` returns are compared dest by dest; a
   generated file (``--sglang-config``) is compared by its content, not its path. The experiment is
   planned at the compared run's clock (``${now:...}``, as the importer's parity does), and a dest the
   importer reports as a deliberate difference (shown, not counted) is listed, not counted.
3. Verdicts: ``upstream refuses`` (the script's own argv is refused at some startup stage: not
   counted), ``imported, 0 differences``, or a failure with a one-line reason naming the cause
   (the importer's first problem, or the dests upstream's parser sees differently). A stage that
   could not be judged for a script is listed with why.

Writes ``OUT.json`` and ``OUT.md`` (default ``benchmarks/import_public_scripts``). Run under
``flock /tmp/clawgym-heavy.lock``: the judge imports torch, SGLang and Megatron (about 20 s of CPU).
"""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import os
import re
import subprocess
import sys
import tempfile
from collections import Counter
from pathlib import Path
from typing import Any, Dict, List, Optional

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

#: Placeholder values for the variables scripts insist on ("X is not set"), by name.
PLACEHOLDERS = {"MASTER_ADDR": "10.0.0.1"}
#: Dests that differ by construction and mean the same run: none are skipped; listed for the report.
UPSTREAM_PATCHES = ("megatron.patch",)
SGLANG_PATCHES = ("sglang.patch", "sglang-top_p.patch", "sglang-release_hicache.patch", "sglang-pull_weights.patch")
#: Model files of slime whose checkpoints are DSA models (their config.json architecture), for
#: upstream's --allgather-cp check (slime/backends/megatron_utils/arguments.py).
DSA_MODEL_FILES = {"glm5-744B-A40B.sh": ["GlmMoeDsaForCausalLM"], "glm5.2-744B-A40B.sh": ["GlmMoeDsaForCausalLM"]}


#: What a remaining failure or refusal is, for readers of the table (shown when it is not 0 differences).
NOTES = {
    "scripts/run-qwen3-4B-amd.sh": "by design: `--colocate --no-offload-train --no-offload-rollout`; clawgym's "
                                   "memory rule colocate-needs-offload refuses on purpose what slime accepts",
    "scripts/run-kimi-k2-Instruct.sh": "a missing line continuation in the script leaves --rollout-batch-size "
                                       "out of the argv it submits",
}


def public_scripts(slime: Path) -> List[str]:
    found = sorted(str(p.relative_to(slime)) for p in (slime / "scripts").glob("run-*.sh"))
    found += sorted(str(p.relative_to(slime)) for p in (slime / "examples").rglob("run*.sh"))
    return found


def placeholder(name: str) -> str:
    return PLACEHOLDERS.get(name, f"/data/{name.lower()}")


def capture_with_env(script: Path, slime: Path):
    """Run the script, adding a placeholder for each variable it says is not set."""
    from clawgym.importer.capture import run_script

    env: Dict[str, str] = {}
    for _ in range(6):
        cap = run_script(script, slime_root=slime, env=env)
        if cap.submits:
            return cap, env
        wanted = [m for m in re.findall(r"\b([A-Z][A-Z0-9_]*) is not set", cap.output) if m not in env]
        if not wanted:
            return cap, env
        for name in wanted:
            env[name] = placeholder(name)
    return cap, env


def _model_of(out_dir: Path, result) -> Optional[Dict[str, Any]]:
    """The model group an import that did not validate picked (its option, with the experiment's
    model overrides), or None: then the judge cannot write a config.json and says so."""
    from omegaconf import OmegaConf

    option = (result.choices or {}).get("model")
    if not option:
        return None
    try:
        from clawgym.config.compose import compose

        cfg = compose([f"model={option}"])
        model = OmegaConf.to_container(cfg.model, resolve=True)
    except Exception:  # noqa: BLE001 - no model then; the judge records the stage as not judged
        return None
    for key, value in ((result.body or {}).get("model") or {}).items():
        model[key] = value
    return model


def one_line(text: str) -> str:
    return " ".join(str(text).split())[:300]


def import_one(rel: str, slime: Path, out_dir: Path) -> Dict[str, Any]:
    from clawgym.importer.entry import ImportFailure, import_script
    from clawgym.importer.parity import strip_secrets

    script = slime / rel
    name = re.sub(r"[^A-Za-z0-9_]+", "_", rel).strip("_").lower()
    cap, env = capture_with_env(script, slime)
    # The import runs the script again; a script that names things after the clock (a run dir by
    # `date +%S`) submits a different argv each run. The comparison uses the capture the import
    # itself made and solved for (recorded as it returns), so both argvs come from one run.
    from clawgym.importer import entry as importer_entry

    own = []
    real_run_script = importer_entry.run_script

    def recording_run_script(*a, **kw):
        own.append(real_run_script(*a, **kw))
        return own[-1]

    importer_entry.run_script = recording_run_script
    try:
        result = import_script(script, name=name, out_dir=out_dir, slime_root=slime, env=env, force=True)
        failure = None
    except ImportFailure as exc:
        result, failure = None, exc
    finally:
        importer_entry.run_script = real_run_script
    if own and own[-1].submits:
        cap = own[-1]
    row: Dict[str, Any] = {"script": rel, "env": env, "name": name,
                           "capture": "the import's own" if own and cap is own[-1] else "the tool's"}
    submit = cap.submits[-1] if cap.submits else None
    if submit is not None and submit.trainer_entry is not None:
        _, _, trainer_script, argv = submit.trainer_entry
        row["trainer_script"] = trainer_script
        row["script_argv"] = strip_secrets(argv)[0]
        row["generated"] = dict(cap.generated)
        row["script_env"] = cap.job_env(submit)
        models = [Path(p).name for p in cap.model_files]
        row["architectures"] = DSA_MODEL_FILES.get(models[-1], []) if models else []
    if failure is not None:
        row.update(imported=False, reason=f"import: {one_line(str(failure).splitlines()[0])}")
        return row
    problems = ([f"cannot be expressed: {t}" for t in result.inexpressible]
                + [f"does not validate: {v.splitlines()[0].strip()}" for v in result.violations]
                + [f"differs: {d.what} {d.name}: script {d.script!r}, experiment {d.experiment!r}"
                   for d in result.differences])
    row.update(imported=result.ok, importer_problems=[one_line(p) for p in problems],
               setup=result.setup, answered=result.answered, services=result.services,
               cluster=(result.choices or {}).get("cluster"), left_to_set=sorted(result.left_to_set))
    # The importer's deliberate flag differences (shown, not counted: e.g. TensorBoard events kept on so
    # clawgym runs / report show curves), by dest: the comparison below leaves those dests out and lists them.
    row["deliberate"] = {m.group(1): f"script {d.script!r}, experiment {d.experiment!r}: {d.note}"
                         for d in result.deliberate if d.what == "flag"
                         for m in [re.search(r"\((\w+)\)$", d.name)] if m}
    if not result.ok:
        row["reason"] = f"import: {one_line(problems[0])}" + (f" (+{len(problems) - 1} more)" if len(problems) > 1 else "")
        row["model"] = _model_of(out_dir, result)
        return row
    from clawgym.config.compose import compose
    from clawgym.plan.build import build_plan
    from omegaconf import OmegaConf

    # ${now:FORMAT} (a value the script makes from the clock, kept dynamic) reads the instant the compared
    # capture's `date` read, as the importer's own parity does: both argvs come from one instant. (Hydra
    # registers its own `now` while composing: the plan, which resolves the config, is built after.)
    cfg = compose([f"hydra.searchpath=[file://{out_dir.resolve()}]", f"+experiment={name}"])
    with importer_entry._clock_at(cap.epoch):
        plan = build_plan(cfg, environ={}, timestamp="measure")
    # The architecture of the run (the experiment's model group, = the script's model args when
    # the import has 0 differences): the judge writes the checkpoint's config.json from it.
    row["model"] = OmegaConf.to_container(cfg.model, resolve=True)
    row["experiment_argv"] = list(plan.entrypoint[2:])
    row["experiment_script"] = plan.entrypoint[1]
    row["experiment_files"] = dict(plan.files)
    row["experiment_env"] = {**(plan.ray_start_env if plan.ray_start is not None else {}),
                             **plan.runtime_env["env_vars"]}
    return row


def judge(rows: List[Dict[str, Any]], ns: argparse.Namespace) -> Dict[str, Dict[str, Any]]:
    requests = []
    for r in rows:
        if "script_argv" in r:
            requests.append({"id": f"{r['name']}:script", "script": r["trainer_script"], "argv": r["script_argv"],
                             "architectures": r["architectures"], "env": r["script_env"], "files": r["generated"],
                             "model": r.get("model")})
        if "experiment_argv" in r:
            requests.append({"id": f"{r['name']}:experiment", "script": r["experiment_script"],
                             "argv": r["experiment_argv"], "architectures": r["architectures"],
                             "env": r["experiment_env"], "files": r["experiment_files"], "model": r.get("model")})
    with tempfile.TemporaryDirectory(prefix="clawgym-measure-") as tmp:
        req = Path(tmp) / "requests.jsonl"
        req.write_text("".join(json.dumps(x) + "\n" for x in requests))
        out = Path(tmp) / "answers.jsonl"
        patches = Path(ns.slime) / "docker" / "patch" / "latest"
        cmd = [ns.python, str(ROOT / "tools" / "import_judge.py"), "--tools", ns.tools, "--slime", ns.slime,
               "--megatron", ns.megatron, "--stand-in", "torchvision==0.28.0", "--requests", str(req), "--out", str(out)]
        cmd += [a for p in UPSTREAM_PATCHES for a in ("--megatron-patch", str(patches / p))]
        cmd += [a for p in SGLANG_PATCHES for a in ("--sglang-patch", str(patches / p))]
        proc = subprocess.run(cmd, capture_output=True, text=True)
        if proc.returncode != 0:
            sys.exit(f"measure_import: the judge failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
        lines = [json.loads(x) for x in out.read_text().splitlines() if x.strip()]
    answers = {x["id"]: x for x in lines if "id" in x}
    answers["meta"] = lines[0]["meta"]
    return answers


def compare_namespaces(a: Dict[str, Any], b: Dict[str, Any], row: Dict[str, Any]) -> List[str]:
    from clawgym.trainer.generated import normalised
    from clawgym.importer.parity import same

    diffs = []
    for dest in sorted(set(a) | set(b)):
        if dest in (row.get("deliberate") or {}):
            continue  # the importer's deliberate difference: listed with its reason, not counted
        x, y = a.get(dest, "(absent)"), b.get(dest, "(absent)")
        if dest == "sglang_config" and x and y:
            x = normalised("sglang.models", row.get("generated", {}).get(x, ""))
            y = normalised("sglang.models", row.get("experiment_files", {}).get(y, ""))
        if not (same(x, y) or x == y):
            diffs.append(f"{dest}: script {json.dumps(x)[:80]}, experiment {json.dumps(y)[:80]}")
    return diffs


def verdicts(rows: List[Dict[str, Any]], answers: Dict[str, Dict[str, Any]]) -> None:
    for r in rows:
        s = answers.get(f"{r['name']}:script")
        if s is None:
            r.update(upstream="no argv", verdict="failed", reason=r.get("reason") or "the script submitted no job")
            continue
        if s.get("not_judged"):
            r["upstream_not_judged"] = s["not_judged"]
        if s.get("not_run"):
            r["upstream_not_run"] = s["not_run"]
        if s.get("judged") is False:
            r.update(upstream="not judged", verdict="not judged", reason=one_line(s["reason"]))
            continue
        if not s["accepted"]:
            r.update(upstream="refuses", upstream_stage=s.get("stage"), upstream_reason=one_line(s["reason"]),
                     verdict="upstream refuses")
            continue
        r["upstream"] = "accepts"
        if not r.get("imported"):
            r["verdict"] = "failed"
            continue
        e = answers.get(f"{r['name']}:experiment")
        if e is None:
            r.update(verdict="failed", reason="the experiment's argv was not judged")
            continue
        if not e.get("accepted"):
            r.update(verdict="failed", reason=f"upstream refuses the experiment's argv: {one_line(e['reason'])}")
            continue
        diffs = compare_namespaces(s["namespace"], e["namespace"], r)
        r["differences"] = diffs
        if diffs:
            r.update(verdict="failed", reason=f"{len(diffs)} dests differ by upstream's parser: {diffs[0]}")
        else:
            r["verdict"] = "0 differences"


def write(rows: List[Dict[str, Any]], meta: Dict[str, Any], ns: argparse.Namespace) -> None:
    accepted = [r for r in rows if r.get("upstream") == "accepts"]
    passed = [r for r in accepted if r["verdict"] == "0 differences"]
    summary = {"scripts": len(rows), "upstream_accepts": len(accepted), "imported_0_differences": len(passed),
               "share": round(len(passed) / len(accepted), 4) if accepted else None,
               "slime": ns.slime_label, "measured": _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
               "clawgym_commit": _git_head(),
               "judge": "upstream's startup path: parse_args, the driver's train() up to placement, engine 0's "
                        "SGLang ServerArgs, rank 0's initialize_model_parallel, micro-batch calculator and "
                        "TransformerConfig (tools/import_judge.py via tools/trainer_judge.py)",
               "imported_for_an_existing_cluster": sum(r.get("cluster") == "existing" for r in passed),
               "deliberate_not_counted": dict(sorted(Counter(d for r in passed for d in r.get("deliberate") or {})
                                                     .items())),
               "judge_stand_ins": meta.get("stand_ins", [])}
    keep = ("script", "env", "verdict", "upstream", "upstream_stage", "upstream_reason", "upstream_not_judged",
            "upstream_not_run", "reason", "note", "differences", "deliberate", "cluster", "left_to_set", "setup",
            "answered", "services", "importer_problems", "capture")
    data = {"summary": summary, "scripts": [{k: r[k] for k in keep if k in r and r[k] not in (None, [], {})}
                                             for r in rows]}
    out = Path(ns.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.with_suffix(".json").write_text(json.dumps(data, indent=2) + "\n")
    md = [f"# Importing slime's public launch scripts ({ns.slime_label})", "",
          f"Measured {summary['measured']} at clawgym {summary['clawgym_commit']} with `tools/measure_import.py`: "
          "each script is imported with `clawgym import`, then the script's argv and the experiment's argv are "
          "both run through upstream's own startup path in a CPU trainer environment (tools/import_judge.py on "
          "tools/trainer_judge.py's stages: `parse_args()` with `slime_validate_args`, Megatron's `validate_args` "
          "and `sglang_validate_args`; the driver's `train()` up to placement; engine 0's SGLang `ServerArgs`; "
          "rank 0's `initialize_model_parallel`, micro-batch calculator and `TransformerConfig`), and the two "
          "namespaces `parse_args()` returns are compared dest by dest (`--sglang-config` by file content). "
          "The script's argv is the one the import itself captured (one run of the script), and the experiment's "
          "`${now:...}` values read that run's clock. A dest the importer itself reports as a deliberate "
          "difference (shown, not counted: `--use-tensorboard`, kept on so `clawgym runs` / `report` show curves) "
          "is listed per script and not counted.", "",
          f"**{len(passed)} of {len(accepted)} scripts that upstream's parser and startup checks accept import with "
          f"0 differences ({100 * (summary['share'] or 0):.1f}%)**; {len(rows) - len(accepted)} of {len(rows)} "
          "scripts are refused by upstream itself (or could not be judged) and not counted.", "",
          "| script | upstream | verdict | reason / notes |", "|---|---|---|---|"]
    for r in rows:
        notes = _why(r)
        extra = []
        if r.get("cluster") == "existing":
            extra.append("written for several nodes: imported for the cluster they form (cluster=existing; left to "
                         f"set at launch: {', '.join(r.get('left_to_set') or [])})")
        if r.get("env"):
            extra.append("env " + ", ".join(f"{k}={v}" for k, v in r["env"].items()))
        if r.get("setup"):
            extra.append(f"{len(r['setup'])} setup steps listed")
        if r.get("services"):
            extra.append("teacher server as services.teacher")
        if r.get("deliberate") and r.get("verdict") == "0 differences":
            extra.append("deliberate (not counted): " + ", ".join(sorted(r["deliberate"])))
        if r.get("upstream_not_judged"):
            extra.append("not judged: " + "; ".join(r["upstream_not_judged"]))
        if r.get("upstream_not_run"):
            extra.append("not run by this run: " + "; ".join(r["upstream_not_run"]))
        if NOTES.get(r["script"]) and r["verdict"] != "0 differences":
            extra.append(NOTES[r["script"]])
        cell = "; ".join([x for x in [notes, *extra] if x]).replace("|", "\\|")
        md.append(f"| `{r['script']}` | {r.get('upstream', '-')} | {r['verdict']} | {cell} |")
    md += ["", "Judge stand-ins (tools/import_judge.py):", ""]
    md += [f"- {s['what']}: {s['why']}" for s in meta.get("stand_ins", [])]
    out.with_suffix(".md").write_text("\n".join(md) + "\n")


def _why(r: Dict[str, Any]) -> str:
    """The one-line reason of a row: upstream's own refusal first (the script is not counted then)."""
    if r.get("verdict") == "upstream refuses":
        why = f"upstream: {r.get('upstream_reason', '')}"
        return why + (f"; clawgym's {r['reason']}" if r.get("reason") else "")
    return r.get("reason") or ""


def _git_head() -> str:
    try:
        return subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"], capture_output=True,
                              text=True).stdout.strip()
    except OSError:
        return "unknown"


def main(argv: Optional[List[str]] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--slime", required=True, help="slime checkout (e.g. v0.3.1) whose scripts are imported")
    ap.add_argument("--slime-label", default="THUDM/slime v0.3.1")
    ap.add_argument("--megatron", required=True, help="Megatron-LM tree of the slime image (1dcf0daf for v0.3.1)")
    ap.add_argument("--python", required=True, help="interpreter of the trainer environment (tools/README.md)")
    ap.add_argument("--tools", default=str(ROOT / "tools"), help="where trainer_env.py and trainer_judge.py live")
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "import_public_scripts"))
    ap.add_argument("--only", action="append", default=[], help="import only scripts containing this (repeatable)")
    ap.add_argument("--save-imports", metavar="FILE",
                    help="stop after importing: write the imports (argvs, env, files) to FILE for --from-imports")
    ap.add_argument("--save-answers", metavar="FILE", help="also write the judge's raw answers to FILE")
    ap.add_argument("--from-imports", metavar="FILE",
                    help="judge the imports a --save-imports run wrote (the judge alone needs the trainer env)")
    ns = ap.parse_args(argv)
    slime = Path(ns.slime).resolve()
    rows = []
    if ns.from_imports:
        rows = json.loads(Path(ns.from_imports).read_text())
    else:
        with tempfile.TemporaryDirectory(prefix="clawgym-measure-conf-") as conf:
            for rel in public_scripts(slime):
                if ns.only and not any(o in rel for o in ns.only):
                    continue
                rows.append(import_one(rel, slime, Path(conf)))
                print(f"imported {rel}: {'ok' if rows[-1].get('imported') else rows[-1].get('reason')}", flush=True)
        if ns.save_imports:
            Path(ns.save_imports).write_text(json.dumps(rows))
            return 0
    answers = judge(rows, ns)
    if ns.save_answers:
        Path(ns.save_answers).write_text(json.dumps(answers))
    verdicts(rows, answers)
    write(rows, answers["meta"], ns)
    for r in rows:
        print(f"{r['verdict']:18} {r['script']}  {_why(r)}"[:220])
    return 0


if __name__ == "__main__":
    sys.exit(main())
