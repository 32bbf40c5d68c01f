"""Where users see the memory plan: the preflight check ``memory`` refuses a launch that does not fit
(all at once, skippable, with advice), a dry run prints it and writes launch_plan.json["memory"],
sweeps print it per job, and ``clawgym show`` prints a run's plan."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import List

from clawgym.pipeline.prepare import attach_memory
from clawgym.cli import main as cli
from clawgym.config.compose import compose
from clawgym.plan.build import build_plan
from clawgym.preflight import PreflightError, check_names, run_preflight
from clawgym.validate import validate
from tests.conftest import ROOT
from tests.test_memory_plan import WHY
from tests.test_snapshot import launch_snapshot

#: Every check but memory (these tests are about that one).
OTHERS = [n for n in check_names() if n != "memory"]
FIELDS = ["gpu", "gpu_memory_gib", "fits", "advice"]
ACTOR = ["params_total", "params_per_gpu", "static_gib", "train_peak_gib", "logprob_peak_gib"]
ROLLOUT = ["weights_gib", "kv_pool_gib", "kv_tokens_per_engine", "kv_tokens_needed"]


def preflight(*overrides: str, skip: List[str] = OTHERS):
    cfg = compose([*overrides, f"skip_checks=[{','.join(skip)}]"])
    validate(cfg)
    plan = attach_memory(build_plan(cfg, environ={}, timestamp="20260101_000000"), cfg)
    lines: List[str] = []
    try:
        return run_preflight(cfg, plan, local_head=False, echo=lines.append), lines
    except PreflightError as err:
        return err, lines


def test_the_memory_check_refuses_the_issues_configs_with_their_problems_and_advice():
    for overrides in WHY.values():
        # Qwen3-235B's 4 query groups do not split over colocate_8's TP 8 (the fork's Megatron refuses it,
        # tp-divides-query-groups): at TP 4, as slime's scripts run it, it still does not fit.
        tp = ["perf.tensor_parallel=4"] if "model=qwen3_235b_a22b" in overrides else []
        err, lines = preflight(*overrides, *tp, "memory.gpu=h100_80gb")
        assert isinstance(err, PreflightError) and err.checks == ["memory"], lines
        line = err.checklist.by_name()["memory"]
        assert "does not fit" in line.detail and "GiB per GPU" in line.detail
        assert "=" in line.fix and "fits" in line.fix, line.fix  # advice names the overrides


def test_the_memory_check_passes_the_seed_run_and_says_how_many_trajectories_fit():
    report, _ = preflight("memory.gpu=h100_80gb")
    assert not isinstance(report, PreflightError)
    detail = report.by_name()["memory"].detail
    assert "of 79.2 GiB per GPU on h100_80gb" in detail and "24 of 64 concurrent fit at full context" in detail


def test_the_memory_check_is_skipped_by_name():
    report, _ = preflight(*WHY["qwen3_4b_colocate_1_128k"], "memory.gpu=h100_80gb", skip=[*OTHERS, "memory"])
    assert not isinstance(report, PreflightError)
    assert report.by_name()["memory"].status == "skipped"


def train(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(ROOT / "train.py"), *args], cwd=cwd, capture_output=True, text=True,
                          timeout=240)


def test_a_dry_run_prints_the_table_and_writes_the_plan_into_launch_plan_json(tmp_path):
    proc = train("dry_run=true", "memory.gpu=h100_80gb", f"hydra.run.dir={tmp_path}/run", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "memory plan per GPU (h100_80gb" in proc.stdout and "fits" in proc.stdout
    mem = json.loads((tmp_path / "run" / "launch_plan.json").read_text())["memory"]
    for key in FIELDS:
        assert key in mem
    assert all(k in mem["actor"] for k in ACTOR) and all(k in mem["rollout"] for k in ROLLOUT)
    assert "ram_gib_per_node" in mem["host"]
    assert isinstance(mem["actor"]["params_total"], int) and mem["actor"]["params_total"] == 4_022_468_096
    assert mem["fits"] is True and mem["advice"] == []


def test_a_sweep_dry_run_prints_a_short_block_per_job_and_one_summary_table(tmp_path):
    proc = train("-m", "dry_run=true", "memory.gpu=h100_80gb", "model=qwen3_4b,qwen3_1_7b",
                 f"hydra.sweep.dir={tmp_path}/sweep", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    # Each job: a few lines with its memory verdict (the whole plan is in its launch_plan.json).
    assert proc.stdout.count("memory:         GPU peak") == 2 and "(h100_80gb): fits" in proc.stdout
    assert "sweep dry run: 2 jobs, 2 fit, nothing was started" in proc.stdout
    assert f"{tmp_path}/sweep/1/launch_plan.json" in proc.stdout
    mems = [json.loads((tmp_path / "sweep" / str(n) / "launch_plan.json").read_text())["memory"] for n in (0, 1)]
    assert [m["actor"]["params_total"] for m in mems] == [4_022_468_096, 1_720_574_976]
    # Not 140 lines per job (566 for 4 jobs before).
    assert len(proc.stdout.splitlines()) < 30


def test_a_dry_run_whose_memory_plan_does_not_fit_exits_2_with_a_banner(tmp_path):
    proc = train("dry_run=true", "memory.gpu=h100_80gb", "gpu_layout=split_1_1", f"hydra.run.dir={tmp_path}/run",
                 cwd=tmp_path)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "clawgym: DOES NOT FIT: the memory plan" in proc.stderr and "advice:" in proc.stderr
    # The plan is printed and kept: it is what says why.
    assert "DOES NOT FIT" in proc.stdout and (tmp_path / "run" / "launch_plan.json").is_file()
    skipped = train("dry_run=true", "memory.gpu=h100_80gb", "gpu_layout=split_1_1", "skip_checks=[memory]",
                    f"hydra.run.dir={tmp_path}/run2", cwd=tmp_path)
    assert skipped.returncode == 0 and "DOES NOT FIT:" not in skipped.stderr
    sweep = train("-m", "dry_run=true", "memory.gpu=h100_80gb", "gpu_layout=split_1_1,split_4_4",
                  f"hydra.sweep.dir={tmp_path}/sweep", cwd=tmp_path)
    assert sweep.returncode == 2 and "1 fit" in sweep.stdout and "clawgym: DOES NOT FIT" in sweep.stderr


def test_the_memory_table_says_the_kv_cache_is_why_a_plan_whose_peak_fits_does_not_fit():
    from clawgym.memory import format_memory

    # SGLang keeps too little for its KV cache; the actor's peak (41 GiB) is well within the GPU.
    cfg = compose(["memory.gpu=h100_80gb", "sglang.mem_fraction_static=0.12"])
    from clawgym.config.compose import to_plain
    from clawgym.memory import memory_plan

    plan = memory_plan(to_plain(cfg)).to_dict()
    text = format_memory(plan)
    assert not plan["fits"] and plan["phases"]["peak_gib"] <= plan["gpu_memory_gib"], text
    assert "within the GPU, but the plan DOES NOT FIT: the KV cache is too small" in text


def test_the_memory_table_never_says_more_trajectories_fit_than_run():
    from clawgym.memory import trajectories_text

    assert trajectories_text({"trajectories_fit": 48, "concurrent_trajectories": 32, "engines": 4}) == \
        "all 32 concurrent fit at full context (room for 48)"
    assert trajectories_text({"trajectories_fit": 6, "concurrent_trajectories": 64, "engines": 1}).startswith(
        "6 of 64 concurrent fit")


def test_show_prints_a_runs_memory_plan(tmp_path, capsys):
    save = tmp_path / "run"
    cfg, plan, _ = launch_snapshot(save, ["memory.gpu=h200_141gb"])
    assert cli(["show", str(save), "--no-config"]) == 0
    out = capsys.readouterr().out
    assert "memory plan per GPU (h200_141gb" in out and "4,022,468,096 total" in out


def test_with_memory_gpu_null_the_check_uses_the_gpu_this_node_shows(tmp_path, monkeypatch):
    from tests.test_preflight import fake_nvidia_smi

    fake_nvidia_smi(tmp_path / "bin", [("NVIDIA H200", 143771)])
    monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}:{__import__('os').environ['PATH']}")
    monkeypatch.setitem(sys.modules, "pynvml", None)
    # Fits an H200 (140 GiB), not the 80 GB GPU a login node would assume.
    overrides = ["model=qwen3_4b", "gpu_layout=split_1_1", "perf.max_tokens_per_gpu=32768",
                 "rollout.max_context_len=32768"]
    report, _ = preflight(*overrides)
    assert not isinstance(report, PreflightError), report
    assert "on h200_141gb (detected on this node (NVIDIA H200))" in report.by_name()["memory"].detail
    err, _ = preflight(*overrides, "memory.gpu=h100_80gb")
    assert isinstance(err, PreflightError) and err.checks == ["memory"]
