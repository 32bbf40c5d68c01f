"""The layout search (clawgym/search), ``clawgym layout`` and ``gpu_layout=auto``: every layout it
offers starts (the whole validation) and fits (the memory plan); what it cannot offer it explains."""

from __future__ import annotations

import json
import subprocess
import sys
from functools import lru_cache
from pathlib import Path
from typing import List, Tuple

import pytest

from clawgym.config.compose import compose, config_dir, to_plain
from clawgym.memory import memory_plan
from clawgym.search.constraints import constraint_keys
from clawgym.search.layout import search
from clawgym.validate import violations
from tests.conftest import ROOT

MODELS = sorted(p.stem for p in (Path(config_dir()) / "model").glob("*.yaml"))
GPUS = (8, 16, 32, 64)
CARDS = ("h100_80gb", "h200_141gb")


@lru_cache(maxsize=None)
def plain(*overrides: str) -> dict:
    return to_plain(compose(list(overrides)))


def fits_and_starts(overrides: List[str], gpus: int = 8) -> Tuple[bool, list]:
    """Compose the line as train.py would: (the memory plan fits, the validation errors). Over one
    node's GPUs the line is launched on a cluster of several nodes (an existing Ray cluster here)."""
    if gpus > 8:
        overrides = [*overrides, "ray.address=http://127.0.0.1:8265"]
    cfg = compose(overrides)
    errors = violations(cfg)
    return memory_plan(to_plain(cfg)).fits, [v.code for v in errors]


def cli(*args: str, timeout: int = 300) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "clawgym", *args], capture_output=True, text=True, cwd=ROOT,
                          timeout=timeout)


@pytest.mark.parametrize("model", MODELS)
def test_every_model_on_8_to_64_h100_or_h200_gets_a_layout_or_the_constraint_that_binds(model):
    c = plain(f"model={model}")
    for gpu in CARDS:
        for n in GPUS:
            r = search(c, gpus=n, gpu=gpu, top=1, explain=False)
            if r.layouts:
                best = r.layouts[0]
                assert best.fits and best.gpu_peak_gib <= best.gpu_memory_gib, (model, gpu, n)
                assert best.step_s > 0 and best.tok_s_per_gpu > 0
            else:
                # Nothing fits: the search names what binds: the actor's memory, the KV cache, the memory
                # plan of both together, or a validation rule no layout lifts (with its fix).
                assert r.refused, (model, gpu, n)
                codes = {x["rule"] for x in r.refused}
                assert ("GiB" in r.binding or "tokens" in r.binding
                        or any(f"rule {code} " in r.binding for code in codes)), (model, gpu, n, r.binding)


@pytest.mark.parametrize("model,gpus,gpu", [("qwen3_4b", 8, "h100_80gb"), ("qwen3_30b_a3b", 8, "h100_80gb"),
                                            ("qwen3_32b", 16, "h200_141gb"), ("glm4_5_106b_a12b", 32, "h100_80gb"),
                                            ("deepseek_v3_5layer", 8, "h200_141gb")])
def test_the_top_layouts_composed_from_their_override_line_pass_validation_and_fit(model, gpus, gpu):
    r = search(plain(f"model={model}"), gpus=gpus, gpu=gpu, top=2, user_overrides=[f"model={model}"])
    assert r.layouts, r.binding
    for layout in r.layouts:
        fits, errors = fits_and_starts([*layout.overrides, f"memory.gpu={gpu}"], gpus)
        assert errors == [] and fits, (layout.overrides, errors)


def test_keys_set_on_the_command_line_are_constraints_the_search_never_changes():
    overrides = ["model=qwen3_30b_a3b", "perf.tensor_parallel=2", "sglang.tp=2", "gpu_layout.colocate=false"]
    r = search(plain(*overrides), gpus=16, gpu="h200_141gb", constraints=constraint_keys(overrides), top=5)
    assert r.layouts, r.binding
    for layout in r.layouts:
        assert layout.settings.get("perf.tensor_parallel", 2) == 2
        assert "sglang.tp" not in layout.settings or layout.settings["sglang.tp"] == 2
        assert layout.settings["gpu_layout.colocate"] is False
        assert not any(o.startswith(("perf.tensor_parallel=", "sglang.tp=")) for o in layout.overrides)


def test_the_refused_summary_counts_each_rule_with_one_example():
    r = search(plain("model=qwen3_30b_a3b"), gpus=8, gpu="h100_80gb")
    rules = {x["rule"]: x for x in r.refused}
    # Divisibility (the trainer rules' codes) before any memory plan, then the memory plan.
    assert "model-parallel-divides-actor-gpus" in rules and "memory-actor-peak" in rules
    for x in r.refused:
        assert x["count"] >= 1 and x["example"]


def test_without_any_layout_the_search_names_the_binding_constraint_and_what_lifts_it():
    r = search(plain("optimizer.lr=1e-6"), gpus=2, gpu="h100_80gb", user_overrides=["optimizer.lr=1e-6"])
    assert not r.layouts
    assert "actor's memory" in r.binding
    lifts = " ".join(r.lifts)
    # (A shorter context is offered only where one fits: with SGLang's working memory counted, 2 x H100
    # hold no colocated layout at the contexts tried.)
    assert "more GPUs: 4 x h100_80gb" in lifts and "b200_180gb" in lifts
    # Each lift was found by a search: its line, followed, fits.
    line = r.lifts[0].split("(", 1)[1].rstrip(")").split()
    fits, errors = fits_and_starts(line)
    assert errors == [] and fits, (line, errors)


def test_clawgym_layouts_first_line_pasted_after_train_py_is_accepted_and_fits(tmp_path):
    proc = cli("layout", "model=qwen3_30b_a3b", "--gpus", "8")
    assert proc.returncode == 0, proc.stderr
    # The first layout is rank 1, alone ("1. ") or tied with others ("1= (tie) ").
    first = next(line for line in proc.stdout.splitlines() if line.startswith(("1. ", "1= (tie) ")))
    overrides = first.split(" ", 2)[-1].split() if first.startswith("1= ") else first[3:].split()
    assert overrides[0] == "model=qwen3_30b_a3b"
    assert "GPU peak" in proc.stdout and "tokens/s per GPU" in proc.stdout and "refused" in proc.stdout
    run = subprocess.run([sys.executable, "train.py", *overrides, "dry_run=true", f"hydra.run.dir={tmp_path}"],
                         capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert run.returncode == 0, run.stderr[-2000:]
    mem = json.loads((tmp_path / "launch_plan.json").read_text())["memory"]
    assert mem["fits"] is True, mem["problems"]


def test_clawgym_layout_json_gives_layouts_with_their_step_parts_and_the_refused_summary():
    proc = cli("layout", "model=qwen3_4b", "--gpus", "8", "--gpu", "h200_141gb", "--top", "3", "--json")
    assert proc.returncode == 0, proc.stderr
    d = json.loads(proc.stdout)
    assert 1 <= len(d["layouts"]) <= 3 and d["refused"]
    for x in d["layouts"]:
        assert isinstance(x["overrides"], list) and x["fits"] is True
        assert set(x["step"]) == {"rollout_s", "logprob_s", "train_s", "weight_update_s", "offload_s"}
        assert x["step_s"] > 0 and x["tok_s_per_gpu"] > 0 and x["gpu_peak_gib"] <= x["gpu_memory_gib"]
    # Ranked: a later rank is slower than every layout of an earlier one; one rank is a tie (steps within
    # the model's error) in any order.
    ranks = [x["rank"] for x in d["layouts"]]
    assert ranks == sorted(ranks)
    for a in d["layouts"]:
        for b in d["layouts"]:
            if a["rank"] < b["rank"] and a["in_margin"] == b["in_margin"]:
                assert a["step_s"] <= b["step_s"]


@pytest.mark.parametrize("args,names", [
    (["model=qwen3_4b", "--gpus", "8", "--gpu", "h1000"], "--gpu h1000"),
    (["model=qwen3_4b", "--gpus", "0"], "--gpus 0"),
    (["model=no_such_model", "--gpus", "8"], "model"),
    (["model=qwen3_4b", "--gpus", "12"], "--gpus 12"),
])
def test_clawgym_layout_refuses_bad_input_with_exit_2_naming_the_key(args, names):
    proc = cli("layout", *args)
    assert proc.returncode == 2 and names in proc.stderr and "Traceback" not in proc.stderr, proc.stderr


def test_clawgym_layout_exits_2_when_nothing_fits_and_says_what_binds():
    proc = cli("layout", "model=kimi_k2", "--gpus", "8", "--gpu", "h100_80gb")
    assert proc.returncode == 2
    assert "no layout fits: the actor's memory" in proc.stdout and "lifts it:" in proc.stdout


def test_gpu_layout_auto_dry_run_of_qwen3_32b_plans_a_fitting_layout_on_an_80gb_gpu(tmp_path):
    run = subprocess.run([sys.executable, "train.py", "model=qwen3_32b", "gpu_layout=auto", "memory.gpu=h100_80gb",
                          "dry_run=true", f"hydra.run.dir={tmp_path}"], capture_output=True, text=True, cwd=ROOT,
                         timeout=300)
    assert run.returncode == 0, run.stderr[-2000:]
    assert "layout (gpu_layout=auto, 8 x h100_80gb):" in run.stdout and "runner-up" in run.stdout
    plan = json.loads((tmp_path / "launch_plan.json").read_text())
    assert plan["memory"]["fits"] is True and plan["memory"]["gpu"] == "h100_80gb"
    layout = plan["layout"]
    assert layout["auto"] is True and layout["chosen"] and layout["runners_up"]
    # The trainer's argv is the chosen layout's.
    argv = plan["entrypoint"]
    tp = argv[argv.index("--tensor-model-parallel-size") + 1]
    assert f"perf.tensor_parallel={tp}" in layout["chosen"]
    # The chosen line, composed by hand, is the same run.
    fits, errors = fits_and_starts(["model=qwen3_32b", *layout["chosen"], "memory.gpu=h100_80gb"])
    assert fits and errors == []


def test_gpu_layout_auto_keeps_the_keys_the_user_set():
    from clawgym.search.auto import resolve_auto

    overrides = ["model=qwen3_32b", "gpu_layout=auto", "memory.gpu=h200_141gb", "sglang.tp=4"]
    out, rec = resolve_auto(plain(*overrides), overrides)
    assert out["sglang"]["tp"] == 4 and rec["gpu"] == "h200_141gb"
    assert not any(o.startswith("sglang.tp=") for o in rec["chosen"])


def test_a_sweep_over_gpu_layout_auto_searches_each_job_on_its_own(tmp_path):
    run = subprocess.run([sys.executable, "train.py", "-m", "gpu_layout=auto", "model=qwen3_4b,qwen3_32b",
                          "memory.gpu=h100_80gb", "dry_run=true", f"hydra.sweep.dir={tmp_path}"],
                         capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert run.returncode == 0, run.stderr[-2000:]
    plans = [json.loads(p.read_text()) for p in sorted(tmp_path.glob("*/launch_plan.json"))]
    assert len(plans) == 2
    assert all(p["layout"]["auto"] and p["memory"]["fits"] for p in plans)
    assert plans[0]["layout"]["chosen"] != plans[1]["layout"]["chosen"]


def test_gpu_layout_auto_with_nothing_that_fits_is_refused_with_exit_2(tmp_path):
    run = subprocess.run([sys.executable, "train.py", "model=kimi_k2", "gpu_layout=auto", "memory.gpu=h100_80gb",
                          "dry_run=true", f"hydra.run.dir={tmp_path}/out"], capture_output=True, text=True,
                         cwd=ROOT, timeout=300)
    assert run.returncode == 2 and "gpu_layout=auto found no layout" in run.stderr, run.stderr[-2000:]
    assert "Traceback" not in run.stderr and not (tmp_path / "out").exists()


def test_the_snapshot_of_an_auto_launch_records_the_choice_and_clawgym_show_prints_it(tmp_path, capsys):
    from clawgym.snapshot import marks as snap_marks
    from clawgym.app import apply_layout
    from clawgym.cli import main
    from clawgym.plan.build import build_plan_from_dict
    from clawgym.search.auto import resolve_auto
    from clawgym.snapshot.records import LaunchRecord, recorded_launch
    from clawgym.snapshot.write import write_launch_snapshot

    # What app.run does for a launch with gpu_layout=auto, up to the snapshot the pipeline writes.
    overrides = [f"paths.save={tmp_path}", "model=qwen3_4b", "gpu_layout=auto", "memory.gpu=h100_80gb"]
    cfg = compose(overrides)
    resolved, rec = resolve_auto(to_plain(cfg), overrides)
    plan = build_plan_from_dict(resolved, environ={}, timestamp="20260101_000000")
    plan.layout = rec
    apply_layout(cfg, rec)
    with recorded_launch(LaunchRecord(overrides=overrides, choices={"model": "qwen3_4b", "gpu_layout": "auto"})):
        path = write_launch_snapshot(cfg, plan)
    snap_marks.mark_submitted(path, plan.submission_id)
    assert json.loads((path / "launch_plan.json").read_text())["layout"]["chosen"] == rec["chosen"]
    # The snapshot's config is the layout that runs, not the search's placeholders.
    assert f"tensor_parallel: {resolved['perf']['tensor_parallel']}" in (path / "config.resolved.yaml").read_text()
    assert main(["show", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "layout (gpu_layout=auto, 8 x h100_80gb): " + " ".join(rec["chosen"]) in out
    assert "runner-up" in out


def _doc_commands() -> List[Tuple[str, int]]:
    """(command, documented exit status) of every ```bash block of docs/guide/layouts.md."""
    text = (ROOT / "docs" / "guide" / "layouts.md").read_text()
    out = []
    for block in text.split("```bash")[1:]:
        for line in block.split("```", 1)[0].strip().splitlines():
            cmd, _, note = line.partition("#")
            out.append((cmd.strip(), 2 if "exit 2" in note else 0))
    return out


@pytest.mark.parametrize("command,status", _doc_commands())
def test_every_command_of_the_layouts_guide_runs_with_its_documented_outcome(command, status, tmp_path):
    import shlex

    argv = shlex.split(command)
    if argv[0] == "clawgym":
        proc = cli(*argv[1:])
        assert proc.returncode == status, (command, proc.stderr[-2000:])
        return
    assert argv[:2] == ["python", "train.py"]
    sweep = "-m" in argv
    where = f"hydra.sweep.dir={tmp_path}" if sweep else f"hydra.run.dir={tmp_path}"
    proc = subprocess.run([sys.executable, *argv[1:], where], capture_output=True, text=True, cwd=ROOT,
                          timeout=600)
    assert proc.returncode == status, (command, proc.stderr[-2000:])
    plans = sorted(tmp_path.glob("*/launch_plan.json" if sweep else "launch_plan.json"))
    assert plans
    for p in plans:
        # Every documented launch fits its GPU (the README examples' replacements included).
        mem = json.loads(p.read_text())["memory"]
        assert mem["fits"] is True, (command, mem["problems"])


def test_for_each_importable_public_script_the_best_layout_fits_and_is_no_slower_or_the_output_says_why():
    # Data of benchmarks/layout_vs_public_scripts.py (it imports slime v0.3.1's scripts, which a test here
    # cannot fetch): every script that imports has a row, and each row holds the promise or its reason.
    listed = json.loads((ROOT / "benchmarks" / "import_public_scripts.json").read_text())["scripts"]
    importable = {s["script"] for s in listed if s.get("verdict") == "0 differences"}
    rows = json.loads((ROOT / "benchmarks" / "layout_vs_public_scripts.json").read_text())["scripts"]
    assert {r["script"] for r in rows} == importable
    for r in rows:
        if r["verdict"].startswith("best fits, step <= the script's"):
            assert r["best_fits"] is True and r["best"] is not None
            assert not r["script_fits"] or r["best_step_s"] <= r["script_step_s"] * 1.005, r
        else:
            assert r["verdict"].startswith("the script's layout is faster by the model: it uses "), r
