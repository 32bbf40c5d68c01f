"""``clawgym explain KEY...`` and ``python train.py --explain KEY``: a key's help, its value, and every
layer that set it (schema, group option, global file, experiment, import, command line, interpolation)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from clawgym.commands.explain import explain
from tests.conftest import ROOT


def test_explain_names_help_value_and_the_command_line_override_as_typed():
    out, err, code = explain(["rollout.temperature", "model=qwen3_4b", "rollout.temperature=0.80"])
    assert code == 0, err
    assert "Sampling temperature" in out  # the schema's comment above the field
    assert "value: 0.8   (typed 0.80)" in out
    lines = out.splitlines()
    schema = next(i for i, ln in enumerate(lines) if "schema default" in ln)
    override = next(i for i, ln in enumerate(lines) if "command line" in ln)
    # First to last; the last one (the override) wins.
    assert schema < override and lines[override].lstrip().startswith("->")


def test_explain_follows_an_interpolation_into_the_group_option_that_set_it():
    out, _, code = explain(["perf.tensor_parallel", "gpu_layout=split_2_2"])
    assert code == 0
    assert "= ${gpu_layout.actor_gpus}" in out
    assert "${gpu_layout.actor_gpus} = 2, from:" in out
    assert "conf/gpu_layout/split_2_2.yaml" in out


def test_explain_shows_a_global_file_and_a_typed_false_as_typed():
    out, _, code = explain(["trainer.flavour", "metrics.tensorboard", "trainer=slime", "metrics.tensorboard=false"])
    assert code == 0
    assert "conf/trainer/slime.yaml" in out and "global file" in out
    # YAML's spelling, as the user typed it: never Python's False.
    assert "value: false" in out and "False" not in out


def test_explain_names_an_experiment_and_the_script_an_import_came_from(tmp_path):
    (tmp_path / "experiment").mkdir()
    (tmp_path / "experiment" / "mine.yaml").write_text("# @package _global_\noptimizer:\n  lr: 2.0e-06\n")
    (tmp_path / "experiment" / "imp.yaml").write_text(
        "# @package _global_\n# Imported by `clawgym import run-x.sh` from /src/run-x.sh.\nrollout:\n  temperature: 0.9\n")
    search = f"hydra.searchpath=[file://{tmp_path}]"
    out, _, code = explain(["optimizer.lr", "+experiment=mine", search])
    assert code == 0 and "experiment" in out and str(tmp_path / "experiment" / "mine.yaml") in out
    assert "value: 2e-06" in out
    out, _, code = explain(["rollout.temperature", "+experiment=imp", search])
    assert code == 0 and "import" in out and "imported from /src/run-x.sh" in out


@pytest.mark.parametrize("key, closest", [("rollout.temprature", "rollout.temperature"),
                                          ("perf.tensor_paralel", "perf.tensor_parallel"),
                                          ("lr", "optimizer.lr"),
                                          ("perf.tensor_model_parallel_size", "perf.tensor_parallel")])
def test_explain_refuses_an_unknown_key_naming_the_closest(key, closest):
    out, err, code = explain([key])
    assert code == 2 and not out
    assert f"{key} is not a config key" in err and closest in err


def test_explain_never_shows_a_secret_value():
    env = {"MY_API_TOKEN": "tok-abcdefghijkl"}
    out, err, code = explain(["extra_env.MY_API_TOKEN", "+extra_env.MY_API_TOKEN=tok-abcdefghijkl"], environ=env)
    assert code == 0, err
    assert "tok-abcdefghijkl" not in out + err and "<redacted>" in out


def test_train_py_explain_takes_the_overrides_of_a_run_and_starts_nothing(tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "CLAWGYM_RL_ROOT"}
    proc = subprocess.run([sys.executable, "train.py", "--explain", "optimizer.lr", "model=qwen3_4b",
                           "optimizer.lr=1e-6", f"hydra.run.dir={tmp_path / 'run'}"],
                          cwd=ROOT, capture_output=True, text=True, timeout=120, env=env)
    assert proc.returncode == 0, proc.stderr
    assert "value: 1e-06   (typed 1e-6)" in proc.stdout
    assert not (tmp_path / "run").exists()  # Hydra launched nothing
    proc = subprocess.run([sys.executable, "train.py", "--explain=rollout.temprature"], cwd=ROOT,
                          capture_output=True, text=True, timeout=120, env=env)
    assert proc.returncode == 2 and "did you mean rollout.temperature?" in proc.stderr


def test_clawgym_explain_is_a_command():
    proc = subprocess.run([sys.executable, "-m", "clawgym", "explain", "rollout.temperature", "perf.tensor_parallel",
                           "model=qwen3_4b", "rollout.temperature=0.8"], cwd=ROOT, capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.count("set by, first to last") == 2


def test_explain_of_a_map_masks_its_secret_named_children():
    import subprocess
    import sys

    from tests.conftest import ROOT

    proc = subprocess.run([sys.executable, "-m", "clawgym", "explain", "extra_env", "args",
                           "+extra_env.WANDB_API_KEY=abc123secret", "+args.hub_token=tok999"],
                          capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "abc123secret" not in proc.stdout + proc.stderr and "tok999" not in proc.stdout + proc.stderr
    assert '"WANDB_API_KEY": "<redacted>"' in proc.stdout and '"hub_token": "<redacted>"' in proc.stdout
