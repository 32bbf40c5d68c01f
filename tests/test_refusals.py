"""Bad names, secret values and unusable output dirs are refused the same way in a dry
run, ``preflight_only``, a launch and a sweep: before Hydra writes anything, with the
report alone, no secret value echoed, and no output dir left behind."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Dict, List

import pytest

from clawgym.config.compose import compose
from clawgym.validate import ConfigError, violations
from tests.conftest import ROOT

SECRET = "sentinel-wandb-key-4711"

#: Where each mode would go if the refusal failed: nowhere that starts anything.
MODES = {
    "dry_run": ["dry_run=true"],
    "preflight_only": ["preflight_only=true"],
    # A launch to a cluster that cannot answer (port 1): refused before it is tried.
    "launch": ["ray.address=http://127.0.0.1:1"],
}


def train(args: List[str], tmp: Path, env: Dict[str, str] | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "train.py", *args], cwd=ROOT, capture_output=True, text=True, timeout=180,
                          env={**os.environ, "HYDRA_FULL_ERROR": "0", "WANDB_API_KEY": SECRET, **(env or {})})


def files_under(path: Path) -> List[Path]:
    return [p for p in path.rglob("*")] if path.exists() else []


@pytest.mark.parametrize("mode, name", [(m, "..") for m in MODES] + [("dry_run", "."), ("preflight_only", "x" * 300),
                                                                     ("launch", "x" * 300)])
def test_unsafe_exp_name_is_refused_in_every_mode_before_any_file(tmp_path, mode, name):
    run_dir = tmp_path / "out"
    proc = train([f"exp_name={name}", f"hydra.run.dir={run_dir}", *MODES[mode]], tmp_path)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert proc.stderr.startswith("clawgym: invalid configuration"), proc.stderr
    assert "[names-are-folder-names]" in proc.stderr or "[name-within-name-max]" in proc.stderr
    assert "Traceback" not in proc.stderr
    assert not run_dir.exists()


def test_sweep_job_with_an_unsafe_name_refuses_the_sweep_and_leaves_no_sweep_dir(tmp_path):
    sweep_dir = tmp_path / "sweep"
    proc = train(["-m", "run_name=..,fine", f"hydra.sweep.dir={sweep_dir}", "dry_run=true"], tmp_path)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "[names-are-folder-names]" in proc.stderr
    assert not sweep_dir.exists(), files_under(sweep_dir)


def test_sweep_suffix_counts_toward_name_max():
    # exp_name fits alone; a sweep job that sets run_name to it plus a long suffix does not.
    base = "e" * 150
    assert not [v for v in violations(compose([f"exp_name={base}"])) if v.code == "name-within-name-max"]
    found = violations(compose([f"exp_name={base}", f"run_name='{base}_" + "k=v," * 20 + "'"]))
    assert [v.keys for v in found if v.code == "name-within-name-max"] == [["run_name"]]


SECRET_OVERRIDES = {
    "extra_env named after the secret": [f"+extra_env.WANDB_API_KEY={SECRET}"],
    "extra_env under another name": [f"+extra_env.FOO={SECRET}"],
    "extra_env interpolating the secret": ["+extra_env.FOO=${oc.env:WANDB_API_KEY}"],
    "extra_args flag and value in one element": [f"extra_args=['--wandb-key {SECRET}']"],
    "extra_args flag=value": [f"extra_args=['--wandb-key={SECRET}']"],
    "any other key": [f"wandb.project={SECRET}"],
}


@pytest.mark.parametrize("overrides, mode", [(o, "dry_run") for o in SECRET_OVERRIDES.values()]
                         + [(SECRET_OVERRIDES["extra_env interpolating the secret"], "launch")],
                         ids=[*SECRET_OVERRIDES, "launch"])
def test_secret_value_anywhere_in_the_config_is_refused_before_any_file_and_never_echoed(tmp_path, overrides, mode):
    run_dir = tmp_path / "out"
    proc = train([*overrides, f"hydra.run.dir={run_dir}", *MODES[mode]], tmp_path)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert SECRET not in proc.stdout + proc.stderr
    assert "<redacted>" in proc.stderr
    # No .hydra/*.yaml, no launch_plan.json, no output dir at all.
    assert not run_dir.exists(), files_under(run_dir)


@pytest.mark.parametrize("overrides", [[f"+extra_env.FOO={SECRET}"], ["+extra_env.FOO=${oc.env:WANDB_API_KEY}"]],
                         ids=["literal", "interpolated"])
def test_sweep_with_a_secret_value_writes_nothing(tmp_path, overrides):
    sweep_dir = tmp_path / "sweep"
    proc = train(["-m", *overrides, "rollout.temperature=0.5,0.7", f"hydra.sweep.dir={sweep_dir}", "dry_run=true"],
                 tmp_path)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert SECRET not in proc.stdout + proc.stderr
    assert not sweep_dir.exists(), files_under(sweep_dir)


def test_every_report_masks_a_secret_typed_into_extra_args():
    # The value given after --wandb-key also turns up in another key, whose rule prints it.
    found = violations(compose([f"extra_args=[--wandb-key,{SECRET}]", f"exp_name=runs/{SECRET}"]), environ={})
    assert {"names-are-folder-names", "no-secrets-in-argv"} <= {v.code for v in found}
    report = ConfigError(found).report()
    assert SECRET not in report and "<redacted>" in report


def test_environment_secrets_are_masked_in_preflight_lines(monkeypatch):
    from clawgym.preflight.core import FAILED, CheckResult

    monkeypatch.setenv("SGLANG_API_KEY", "sentinel-sglang-0042")
    line = CheckResult("tasks", "task folders", FAILED, "no tasks in /data/sentinel-sglang-0042", "fix it").format()
    assert "sentinel-sglang-0042" not in line and "<redacted>" in line


def test_unwritable_run_dir_is_a_clear_error(tmp_path):
    proc = train(["hydra.run.dir=/proc/clawgym-cannot-exist", "dry_run=true"], tmp_path)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr
    assert "clawgym: cannot use hydra.run.dir=/proc/clawgym-cannot-exist" in proc.stderr
    assert "fix:" in proc.stderr


def test_valid_dry_run_still_writes_its_output_dir(tmp_path):
    run_dir = tmp_path / "out"
    proc = train([f"hydra.run.dir={run_dir}", "dry_run=true"], tmp_path, env={"WANDB_API_KEY": ""})
    assert proc.returncode == 0, proc.stderr
    assert (run_dir / "launch_plan.json").is_file() and (run_dir / ".hydra" / "config.yaml").is_file()


def test_hydra_callback_refuses_before_the_output_dir_exists(tmp_path, monkeypatch):
    """The check runs in on_run_start, which Hydra calls before run_job creates the output dir
    and dumps .hydra/*.yaml (hydra/_internal/hydra.py: Hydra.run)."""
    from clawgym.app import ClawGymCallback

    monkeypatch.setenv("WANDB_API_KEY", SECRET)
    out = tmp_path / "out"
    for bad in (["exp_name=.."], ["+extra_env.FOO=${oc.env:WANDB_API_KEY}"], [f"wandb.project={SECRET}"]):
        cfg = compose([*bad, f"hydra.run.dir={out}"], return_hydra_config=True)
        with pytest.raises(SystemExit) as exit_:
            ClawGymCallback().on_run_start(config=cfg)
        assert exit_.value.code == 2 and not out.exists()
    ClawGymCallback().on_run_start(config=compose([f"hydra.run.dir={out}"], return_hydra_config=True))
    assert out.is_dir()


def test_a_root_that_names_no_folder_is_refused_naming_paths_root_and_writes_nothing(tmp_path):
    """issue 35: paths.root=/nonexistent/RL dry_run=true printed a whole plan and exited 0."""
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    proc = subprocess.run([sys.executable, str(ROOT / "train.py"), f"paths.root={tmp_path}/nonexistent/RL", "dry_run=true"],
                          cwd=cwd, capture_output=True, text=True, timeout=180,
                          env={k: v for k, v in os.environ.items() if k != "CLAWGYM_RL_ROOT"})
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "[checkout-exists] paths.root=" in proc.stderr and "fix:  set paths.root" in proc.stderr
    assert "Traceback" not in proc.stderr
    assert files_under(cwd) == []  # no Hydra outputs/ in the cwd


def test_a_root_for_another_machine_plans_when_its_checkout_check_is_skipped(tmp_path):
    run_dir = tmp_path / "out"
    proc = train(["paths.root=/nonexistent/RL", "skip_checks=[checkout]", f"hydra.run.dir={run_dir}", "dry_run=true"],
                 tmp_path, env={"WANDB_API_KEY": ""})
    assert proc.returncode == 0, proc.stderr
    assert (run_dir / "launch_plan.json").is_file()


@pytest.mark.parametrize("override, said", [
    ("gpu_layout=split_44", "did you mean split_4_4?"), ("model=qwen3-4b", "did you mean qwen3_4b?")])
def test_a_misspelled_group_option_is_refused_with_the_closest_option(tmp_path, override, said):
    proc = train([override, "dry_run=true", f"hydra.run.dir={tmp_path / 'out'}"], tmp_path)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert proc.stderr.startswith(f"clawgym: {override} is not an option of {override.split('=')[0]}; {said}"), proc.stderr
    assert f"fix:  {override.split('=')[0]}={said.split()[-1].rstrip('?')}" in proc.stderr
    assert "Available options in" not in proc.stderr and "Config search path" not in proc.stderr
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("override, said, fix", [
    ("optimizer.lr=fast", "optimizer.lr='fast' is not a number", "optimizer.lr=1e-06"),
    ("optimizer.cpu_offload=fast", "optimizer.cpu_offload='fast' is not true or false", "optimizer.cpu_offload=true"),
    ("rollout.batch_size=1.5", "rollout.batch_size='1.5' is not a whole number", "rollout.batch_size=")])
def test_a_value_of_the_wrong_type_is_worded_by_clawgym_with_key_type_and_fix(tmp_path, override, said, fix):
    proc = train([override, "dry_run=true", f"hydra.run.dir={tmp_path / 'out'}"], tmp_path)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert proc.stderr.startswith(f"clawgym: {said}"), proc.stderr
    assert "is typed" in proc.stderr and f"fix:  {fix}" in proc.stderr
    assert "OptimizerConfig" not in proc.stderr and "reference_type" not in proc.stderr
    assert not (tmp_path / "out").exists()


def test_a_tuner_dry_run_whose_first_trial_does_not_fit_exits_2_as_a_dry_run_does(tmp_path, clawgym_checkout):
    """issue 35: the tuner's dry run printed DOES NOT FIT and exited 0 (docs/guide/explain.md: 2)."""
    from tests.fixtures.checkout import checkout_overrides

    proc = subprocess.run([sys.executable, str(ROOT / "train.py"), "-m", "hydra/sweeper=clawgym",
                           "optimizer.lr=interval(1e-7,1e-4)", "hydra.sweeper.n_trials=2", "gpu_layout=split_1_1",
                           "memory.gpu=h100_80gb", *checkout_overrides(clawgym_checkout),
                           f"hydra.sweep.dir={tmp_path}/sweep", "dry_run=true"],
                          cwd=tmp_path, capture_output=True, text=True, timeout=180)
    assert proc.returncode == 2, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "clawgym: DOES NOT FIT" in proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr


def test_a_dry_run_from_a_folder_that_is_no_checkout_writes_nothing_there_and_says_why(tmp_path):
    """Issue 35: from /tmp with no slime checkout, `python train.py dry_run=true` planned /tmp/slime and
    wrote Hydra's outputs/ into the cwd, with only a warning. It stays a warning (a dry run may plan for
    a checkout elsewhere) but writes nothing into that folder and says so, naming paths.root and a fix."""
    cwd = tmp_path / "somewhere"
    cwd.mkdir()
    proc = subprocess.run([sys.executable, str(ROOT / "train.py"), "dry_run=true"], cwd=cwd, capture_output=True,
                          text=True, timeout=180, env={k: v for k, v in os.environ.items() if k != "CLAWGYM_RL_ROOT"})
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert f"[checkout-exists] paths.root='{cwd}'" in proc.stderr
    assert f"nothing is written: paths.root={cwd} is no ClawGym-RL checkout" in proc.stderr
    assert "fix:  run it with paths.root=" in proc.stderr and "Traceback" not in proc.stderr
    assert "equivalent command:" in proc.stdout  # the plan is still shown
    assert files_under(cwd) == [] and list(cwd.iterdir()) == []
    # Asked for an output dir, it writes the plan there.
    run_dir = tmp_path / "kept"
    proc = subprocess.run([sys.executable, str(ROOT / "train.py"), "dry_run=true", f"hydra.run.dir={run_dir}"],
                          cwd=cwd, capture_output=True, text=True, timeout=180,
                          env={k: v for k, v in os.environ.items() if k != "CLAWGYM_RL_ROOT"})
    assert proc.returncode == 0 and (run_dir / "launch_plan.json").is_file() and list(cwd.iterdir()) == []
