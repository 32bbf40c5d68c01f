"""What ``sbatch`` refuses is a clean refusal: "nothing was started" with sbatch's reason, no traceback.

Against the real one-node cluster of tests/fixtures/slurm_cluster.py (8 GPUs, partition
``debug``): an unknown partition and more GPUs than the node has are refused by sbatch
itself; a job name with a space never reaches sbatch (validation refuses it).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Dict, List

import pytest

from tests.fixtures.checkout import LAUNCH_SKIPS, checkout_overrides

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture()
def env(slurm_cluster, tmp_path) -> Dict[str, str]:
    e = {k: v for k, v in os.environ.items() if k not in ("RAY_ADDRESS", "WANDB_API_KEY", "WANDB_KEY")}
    e.update(slurm_cluster.env)
    e["CLAWGYM_STATE_DIR"] = str(tmp_path / "state")
    return e


def launch(checkout: Path, env: Dict[str, str], tmp_path: Path, *overrides: str) -> subprocess.CompletedProcess:
    cmd = [sys.executable, str(ROOT / "train.py"), *checkout_overrides(checkout, skip_checks=LAUNCH_SKIPS, supervised=True),
           "cluster=slurm", f"hydra.run.dir={tmp_path}/run", *overrides]
    return subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=180)


@pytest.mark.parametrize("override,reason", [
    ("slurm.partition=nosuchpartition", "invalid partition"),
    ("slurm.gpus_per_node=64", "node configuration is not available"),
])
def test_sbatch_refusal_is_a_clean_error_and_starts_nothing(slurm_cluster, clawgym_checkout, env, tmp_path,
                                                            override, reason):
    run_name = f"slref{os.getpid()}{len(reason)}"
    res = launch(clawgym_checkout, env, tmp_path, f"run_name={run_name}", override)
    out = res.stdout + res.stderr
    assert res.returncode == 2, out
    assert "Traceback" not in out, out
    assert "nothing was started" in res.stderr and "sbatch refused" in res.stderr, out
    assert reason in res.stderr.lower(), out
    # SLURM holds no job of ours, and the save dir holds no snapshot that counts as a launch.
    assert not slurm_cluster.jobs()
    shown = subprocess.run([sys.executable, "-m", "clawgym", "show", str(clawgym_checkout / "exp" / run_name)],
                           cwd=ROOT, env=env, capture_output=True, text=True, timeout=60)
    assert "submitted" not in shown.stdout


def test_slurm_job_name_with_a_space_is_refused_by_validation(slurm_cluster, clawgym_checkout, env, tmp_path):
    res = launch(clawgym_checkout, env, tmp_path, "run_name=slname", "slurm.job_name='my job'")
    assert res.returncode == 2, res.stdout + res.stderr
    assert "Traceback" not in res.stderr
    assert "slurm-job-name-one-word" in res.stderr and "slurm.job_name" in res.stderr
    assert not slurm_cluster.jobs()
