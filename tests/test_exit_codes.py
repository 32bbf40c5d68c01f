"""One exit-code table (clawgym/common/exit_codes.py) for train.py and every clawgym command: 0 done, 1 the job
failed, 2 refused before anything started (composition, validation, preflight, memory), 130 interrupted.
Failed jobs (1, with the trainer's code in the message) and Ctrl-C (130) are driven through a real Ray head
in tests/test_launch.py and tests/test_sweep.py; a memory plan that does not fit in tests/test_memory_preflight.py."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from clawgym.common import exit_codes
from tests.conftest import ROOT


def run(args, cwd: Path, module: bool = False) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "clawgym", *args] if module else [sys.executable, str(ROOT / "train.py"), *args]
    env = {k: v for k, v in os.environ.items() if k != "CLAWGYM_RL_ROOT"}
    return subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=180, env=env)


def test_the_exit_code_page_is_generated_from_the_table_and_current():
    page = ROOT / "docs" / "reference" / "exit-codes.md"
    assert page.read_text() == exit_codes.markdown(), \
        "regenerate: python -m clawgym.common.exit_codes > docs/reference/exit-codes.md"
    assert [r.code for r in exit_codes.TABLE] == [0, 1, 2, 129, 130]


def test_no_exit_status_is_written_as_a_bare_number_outside_the_table():
    # Every exit of train.py's task function, the sweep, the pipeline, preflight and the clawgym commands
    # names the table's constant; a literal 1 or 2 would be a second source of truth.
    files = [ROOT / "clawgym" / f for f in ("app.py", "sweep/core.py", "pipeline/pipeline.py", "pipeline/single.py", "cli.py", "preflight/__init__.py")]
    files += sorted((ROOT / "clawgym" / "commands").glob("*.py"))
    bare = re.compile(r"sys\.exit\([12]\)|\breturn [12]\b")
    found = [f"{p.relative_to(ROOT)}:{n}" for p in files if p.name != "report.py"
             for n, line in enumerate(p.read_text().splitlines(), 1) if bare.search(line)]
    assert not found, found


def test_the_job_failed_message_names_the_trainers_own_code():
    assert exit_codes.job_failed(3) == "the job failed (trainer exited 3)"


@pytest.mark.parametrize("override, closest", [
    ("rollout.temprature=0.8", "rollout.temperature"),   # Hydra's hint would say: use +rollout.temprature=0.8
    ("+rollout.temprature=0.8", "rollout.temperature"),  # following that hint used to exit 0 and train at 0.7
    ("+perf.tensor_paralel=2", "perf.tensor_parallel"),
    ("+lr=1e-5", "optimizer.lr"),
])
def test_a_key_the_schema_does_not_define_is_refused_with_the_closest_key(override, closest, tmp_path):
    proc = run([override, "dry_run=true", f"hydra.run.dir={tmp_path}/run"], tmp_path)
    assert proc.returncode == exit_codes.REFUSED, proc.stdout + proc.stderr
    assert f"did you mean {closest}?" in proc.stderr
    assert "To append to your config use" not in proc.stderr and "Traceback" not in proc.stderr
    # Nothing is left behind: no output dir, no plan, no Hydra files.
    assert not (tmp_path / "run").exists() and not list(tmp_path.rglob("*.yaml"))


def test_the_open_maps_still_take_new_keys(tmp_path):
    proc = run(["+extra_env.MY_FLAG=1", "args.lr_warmup_iters=10", "dry_run=true", f"hydra.run.dir={tmp_path}/run"],
               tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "MY_FLAG=1" in proc.stdout and "--lr-warmup-iters 10" in proc.stdout


def test_a_hydra_composition_error_exits_2_not_1(tmp_path):
    proc = run(["gpu_layout=split_9_9", "dry_run=true", f"hydra.run.dir={tmp_path}/run"], tmp_path)
    assert proc.returncode == exit_codes.REFUSED, proc.stderr
    assert "clawgym: gpu_layout=split_9_9 is not an option of gpu_layout" in proc.stderr
    # The typed schema entry is no option a user picks.
    assert "base_gpu_layout" not in proc.stderr and "split_4_4" in proc.stderr
    proc = run(["rollout.temperature=[", "dry_run=true"], tmp_path)
    assert proc.returncode == exit_codes.REFUSED and "Traceback" not in proc.stderr


def test_a_validation_refusal_exits_2(tmp_path):
    proc = run(["rollout.temperature=0", "dry_run=true", f"hydra.run.dir={tmp_path}/run"], tmp_path)
    assert proc.returncode == exit_codes.REFUSED and "rollout.temperature" in proc.stderr
    assert not (tmp_path / "run").exists()


def test_a_failed_preflight_only_exits_2_like_a_preflight_failure_during_a_launch(tmp_path):
    args = ["preflight_only=true", f"paths.root={tmp_path}/no-checkout", "skip_checks=[docker,image,gpus,ports]"]
    proc = run([*args, f"hydra.run.dir={tmp_path}/run"], tmp_path)
    assert proc.returncode == exit_codes.REFUSED, proc.stdout + proc.stderr
    assert "preflight failed at" in proc.stderr and not (tmp_path / "run").exists()
    sub = run(["preflight", *args], tmp_path, module=True)
    assert sub.returncode == exit_codes.REFUSED, sub.stdout + sub.stderr


def test_clawgym_commands_refuse_with_2(tmp_path):
    assert run(["explain", "rollout.temprature"], tmp_path, module=True).returncode == exit_codes.REFUSED
    proc = run(["explain", "rollout.temperature", "model=nope"], tmp_path, module=True)
    assert proc.returncode == exit_codes.REFUSED and "model=nope is not an option of model" in proc.stderr
    assert run(["show", str(tmp_path / "nothing-here")], tmp_path, module=True).returncode == exit_codes.REFUSED
    assert run(["no-such-command"], tmp_path, module=True).returncode == exit_codes.REFUSED
