"""SLURM (issue 28, finding 9): what goes into a batch script cannot inject or expand, and a
run's status comes from the cluster it was submitted to.

The status tests use the real one-node cluster of tests/fixtures/slurm_cluster.py (its
``ClusterName=clawgymtest``); the refusals need no cluster (validation refuses first).
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Dict

import pytest

from clawgym.snapshot import marks as snap_marks
from tests.fixtures.checkout import LAUNCH_SKIPS, checkout_overrides
from tests.test_snapshot import launch_snapshot

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.parametrize("override,code,key", [
    ("exp_name=sl%u", "slurm-output-path-plain", "exp_name"),
    ("exp_name=sl sp", "slurm-output-path-plain", "exp_name"),
    ("slurm.partition=debug\n#SBATCH --gres=gpu:0", "slurm-values-plain", "slurm.partition"),
    ("slurm.account=acct%x", "slurm-values-plain", "slurm.account"),
    ("slurm.qos=normal high", "slurm-values-plain", "slurm.qos"),
])
def test_a_value_sbatch_would_split_or_expand_is_refused_before_any_batch_script(clawgym_checkout, tmp_path,
                                                                                  override, code, key):
    key_, _, value = override.partition("=")
    quoted = f"{key_}='{value}'"
    env = {k: v for k, v in os.environ.items() if k not in ("RAY_ADDRESS", "WANDB_API_KEY", "WANDB_KEY")}
    env["CLAWGYM_STATE_DIR"] = str(tmp_path / "state")
    save = tmp_path / "save"
    res = subprocess.run([sys.executable, str(ROOT / "train.py"), *checkout_overrides(clawgym_checkout,
                                                                                     skip_checks=LAUNCH_SKIPS,
                                                                                     supervised=True),
                          "cluster=slurm", f"hydra.run.dir={tmp_path}/run", *([] if key == "exp_name" else
                                                                            [f"paths.save={save}"]), quoted],
                         cwd=ROOT, env=env, capture_output=True, text=True, timeout=180)
    assert res.returncode == 2, res.stdout + res.stderr
    assert f"[{code}]" in res.stderr and key in res.stderr and "Traceback" not in res.stderr
    # The fix names a value sbatch takes as written.
    fix = next(line for line in res.stderr.splitlines() if line.strip().startswith("fix:") and key in line)
    fixed = fix.split(f"{key}=", 1)[1].split()[0]
    assert not any(ch in fixed for ch in "% \n"), fix
    # Nothing was written: no batch script, no save dir, no Hydra output dir.
    assert not save.exists() and not (clawgym_checkout / "exp" / value).exists()
    assert not (tmp_path / "run").exists()


@pytest.fixture()
def slurm_env(slurm_cluster, monkeypatch) -> Dict[str, str]:
    for k, v in slurm_cluster.env.items():
        monkeypatch.setenv(k, v)
    return slurm_cluster.env


def _completed_job(slurm_cluster) -> str:
    """A real job of this cluster that COMPLETED (what 'another cluster's job N' answers with)."""
    job = slurm_cluster.run("sbatch", "--parsable", "--wrap", "true", "-o", "/dev/null").stdout.strip().split(";")[0]
    deadline = time.time() + 120
    while slurm_cluster.run("scontrol", "show", "job", "-o", job).stdout.find("JobState=COMPLETED") < 0:
        assert time.time() < deadline, "the canary job did not complete"
        time.sleep(0.5)
    return job


def _status(save: Path):
    from clawgym.runs.discover import find_runs
    from clawgym.runs.status import resolve

    (run,) = find_runs([save])
    return resolve(run)


def test_the_recorded_cluster_and_end_win_over_another_clusters_job_with_the_same_id(slurm_cluster, slurm_env,
                                                                                     tmp_path):
    from clawgym.common.ownership import slurm_cluster as cluster_here

    here = cluster_here()
    assert here.get("cluster") == "clawgymtest" and here.get("controller"), here
    job = _completed_job(slurm_cluster)
    # A run submitted to another cluster, whose job there failed: this cluster's job with that id
    # COMPLETED, and must not make it "succeeded".
    elsewhere = {"kind": "slurm", "job_id": job, "cluster": "prodcluster", "controller": "ctl-prod"}
    _, _, failed = launch_snapshot(tmp_path / "failed", submitted=False)
    snap_marks.mark_submitted(failed, f"slurm:{job}", job=elsewhere)
    snap_marks.mark_ended(failed, "failed", 1)
    run = _status(tmp_path / "failed")
    assert run.status == "failed", (run.status, run.status_detail)
    # No recorded end: unknown, naming the cluster it was submitted to, not this one's answer.
    _, _, pending = launch_snapshot(tmp_path / "pending", submitted=False)
    snap_marks.mark_submitted(pending, f"slurm:{job}", job=elsewhere)
    run = _status(tmp_path / "pending")
    assert run.status == "unknown" and "prodcluster" in run.status_detail, (run.status, run.status_detail)
    # Submitted to this very cluster: its answer counts.
    _, _, mine = launch_snapshot(tmp_path / "mine", submitted=False)
    snap_marks.mark_submitted(mine, f"slurm:{job}", job={"kind": "slurm", "job_id": job, **here})
    assert _status(tmp_path / "mine").status == "succeeded"
