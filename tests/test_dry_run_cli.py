"""``python train.py ... dry_run=true`` as a user runs it (subprocesses; kept few)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Dict, List

import yaml

from tests.conftest import ROOT

SECRETS = {"WANDB_API_KEY": "wandb-api-secret-1234567890", "WANDB_KEY": "wandb-key-secret-0987654321",
           "SGLANG_API_KEY": "sglang-secret-abcdef"}
PLAN_KEYS = ("entrypoint", "working_dir", "runtime_env", "ray_start", "ray_start_env", "submission_id")


def train(args: List[str], env: Dict[str, str] | None = None) -> subprocess.CompletedProcess:
    base = {k: v for k, v in os.environ.items() if k not in SECRETS and k != "CLAWGYM_RL_ROOT"}
    return subprocess.run([sys.executable, "train.py", *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=180, env={**base, **(env or {})})


def assert_no_secret(texts: List[str], folder: Path) -> None:
    blobs = list(texts) + [p.read_text(errors="replace") for p in folder.rglob("*") if p.is_file()]
    for value in SECRETS.values():
        assert not any(value in blob for blob in blobs), "a secret value leaked"


def test_dry_run_writes_launch_plan_into_hydra_output_dir(tmp_path):
    run_dir = tmp_path / "run"
    # A plan for another machine's checkout: this machine's folders are not checked (skip_checks=[checkout]).
    proc = train(["dry_run=true", "paths.root=/ckpt/ClawGym-RL", "skip_checks=[checkout]", f"hydra.run.dir={run_dir}"],
                 SECRETS)
    assert proc.returncode == 0, proc.stderr
    plan_file = run_dir / "launch_plan.json"
    assert f"plan written to {plan_file}" in proc.stdout
    assert "equivalent command:" in proc.stdout and "ray job submit" in proc.stdout
    plan = json.loads(plan_file.read_text())
    for key in PLAN_KEYS:
        assert key in plan
    assert plan["entrypoint"][:2] == ["python3", "train_async.py"]
    assert all(isinstance(a, str) for a in plan["entrypoint"])
    assert plan["working_dir"] == "/ckpt/ClawGym-RL/slime"
    assert isinstance(plan["runtime_env"]["env_vars"], dict)
    assert plan["ray_start"][:3] == ["ray", "start", "--head"]
    assert plan["ray_start_env"]["RAY_health_check_failure_threshold"] == "20"
    assert plan["submission_id"].startswith("clawgym-rl-4b-instruct-2507-")
    # A W&B key in the environment turns W&B on, by name only.
    assert "--use-wandb" in plan["entrypoint"] and "--wandb-key" not in plan["entrypoint"]
    assert plan["secret_env"]["WANDB_API_KEY"] == ["WANDB_KEY", "WANDB_API_KEY"]
    assert_no_secret([proc.stdout, proc.stderr], run_dir)
    # Nothing half-written is left behind.
    assert not [p for p in run_dir.iterdir() if p.name.startswith(".launch_plan")]


def test_multirun_dry_run_writes_one_plan_per_job(tmp_path):
    sweep_dir = tmp_path / "sweep"
    proc = train(["-m", "sandbox=docker,chroot", "sandbox.rootfs=/srv/rootfs", "dry_run=true",
                  f"hydra.sweep.dir={sweep_dir}"], SECRETS)
    assert proc.returncode == 0, proc.stderr
    plans = sorted(sweep_dir.rglob("launch_plan.json"))
    assert len(plans) == 2, plans
    assert len({p.parent for p in plans}) == 2
    rootfs = sorted(json.loads(p.read_text())["runtime_env"]["env_vars"]["OPENCLAW_ROOTFS"] for p in plans)
    assert rootfs == ["", "/srv/rootfs"]
    ids = [json.loads(p.read_text())["submission_id"] for p in plans]
    assert len(set(ids)) == 2
    assert_no_secret([proc.stdout, proc.stderr], sweep_dir)


def test_unknown_key_fails_with_hydra_error(tmp_path):
    proc = train(["model.foo=1", "dry_run=true", f"hydra.run.dir={tmp_path / 'run'}"])
    assert proc.returncode != 0
    assert "foo" in proc.stderr and "Traceback" not in proc.stderr
    assert not list(tmp_path.rglob("launch_plan.json"))


def test_cfg_job_resolve_prints_the_resolved_config(tmp_path):
    proc = train(["--cfg", "job", "--resolve", "paths.root=/r", f"hydra.run.dir={tmp_path / 'run'}"])
    assert proc.returncode == 0, proc.stderr
    cfg = yaml.safe_load(proc.stdout)
    assert cfg["model"]["name"] == "qwen3_4b"
    assert cfg["paths"]["hf_checkpoint"] == "/r/local/models/Qwen3-4B-Instruct-2507"
    assert cfg["sglang"]["context_length"] == 65536
    assert not list(tmp_path.rglob("launch_plan.json"))


def test_help_is_clawgyms_own_page_without_schema_entries():
    proc = subprocess.run([sys.executable, "train.py", "--help"], cwd=ROOT, capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    assert out.startswith("clawgym:") and "powered by Hydra" not in out
    # Each group with what it decides and its options, the chosen one marked; no base_<group> schema entries.
    assert "gpu_layout: How the node's GPUs are split" in out and "split_4_4*" in out and "colocate_1" in out
    assert "base_" not in out
    assert "python train.py dry_run=true" in out and "clawgym show" in out and "README.md" in out
