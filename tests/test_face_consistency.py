"""The small inconsistencies a new user met (issue 27, "Inconsistent answers"): each answer now says the
same thing whichever way it is reached."""

from __future__ import annotations

import subprocess
import sys

from clawgym.config.compose import compose
from clawgym.plan.build import build_plan
from tests.conftest import ROOT


def test_no_proxy_names_each_host_once():
    plan = build_plan(compose([]), environ={}, timestamp="t")
    assert plan.runtime_env["env_vars"]["no_proxy"] == "127.0.0.1"
    plan = build_plan(compose(["ray.node_ip=10.0.0.5"]), environ={}, timestamp="t")
    assert plan.runtime_env["env_vars"]["no_proxy"] == "127.0.0.1,10.0.0.5"


def test_a_save_dir_typed_with_a_trailing_slash_makes_no_double_slash():
    # As launch scripts write it (--save /ckpt/run/): the flag keeps the user's text, the paths clawgym
    # derives from it do not double the slash.
    plan = build_plan(compose(["paths.save=/ckpt/Qwen3-4B_slime/", "services=opd_teacher"]), environ={},
                      timestamp="t")
    assert plan.log_file == "/ckpt/Qwen3-4B_slime/logs/train_t.log"
    assert plan.runtime_env["env_vars"]["TENSORBOARD_DIR"].startswith("/ckpt/Qwen3-4B_slime/tensorboard/")
    derived = [plan.log_file, *plan.files, *(s.get("log") or "" for s in plan.services)]
    assert derived and not [p for p in derived if "//" in p]


def test_help_pages_carry_no_restructuredtext_backticks():
    from clawgym.cli import build_parser

    parser = build_parser()
    pages = [parser.format_help()]
    for action in parser._subparsers._group_actions:
        for sub in action.choices.values():
            pages.append(sub.format_help())
    assert len(pages) > 10 and not [p.splitlines()[0] for p in pages if "``" in p]
    out = subprocess.run([sys.executable, "train.py", "--help"], cwd=ROOT, capture_output=True, text=True,
                         timeout=120).stdout
    assert "``" not in out and "--explain KEY" in out and "base_gpu_layout" not in out


def test_a_typed_false_stays_false_in_a_sweep(tmp_path):
    proc = subprocess.run([sys.executable, "train.py", "-m", "dry_run=true", "metrics.tensorboard=true,false",
                           "optimizer.lr=1e-6", f"hydra.sweep.dir={tmp_path}/s"], cwd=ROOT, capture_output=True,
                          text=True, timeout=240)
    assert proc.returncode == 0, proc.stderr
    assert "metrics.tensorboard=false" in proc.stdout and "False" not in proc.stdout
    assert "dry_run=true" in (tmp_path / "s" / "1" / ".hydra" / "overrides.yaml").read_text()
    assert "optimizer.lr=1e-6" in (tmp_path / "s" / "1" / ".hydra" / "overrides.yaml").read_text()
