"""Preflight checks that need no engine: checkpoint, GPUs, ports, checkout, tasks, hooks, skips, CLI.

Every test works on a real fixture checkout on disk (tests/fixtures/checkout.py); GPU
and port checks run against this machine.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any, List, Tuple

import pytest

from clawgym.config.compose import compose
from clawgym.plan.build import build_plan
from clawgym.preflight import PreflightError, Report, check_names, run_preflight
from clawgym.preflight.checkpoint import layer_pattern
from clawgym.validate import validate
from tests.fixtures.checkout import QWEN3_4B_INSTRUCT_2507_CONFIG, build_checkout

ROOT = Path(__file__).resolve().parent.parent

#: Sandbox and machine checks these tests do not exercise (their own files do).
# Machine and cluster checks have their own tests; these run as for an existing cluster (local_head=False).
# memory: the memory plan has its own tests (tests/test_memory_preflight.py); these configs (e.g. an
# MoE model on the default split_4_4 layout) need not fit a GPU to test the other checks.
# disk: sized for the model's real checkpoints (398 GiB for Qwen3-30B-A3B), not this machine's
# disk; its own tests run on a small tmpfs (tests/test_supervisor_disk.py).
OFF = ["docker", "image", "gpus", "ports", "cluster", "memory", "disk"]

QWEN3_30B_A3B_CONFIG = {
    "architectures": ["Qwen3MoeForCausalLM"], "model_type": "qwen3_moe", "hidden_size": 2048,
    "num_hidden_layers": 48, "num_attention_heads": 32, "num_key_value_heads": 4, "intermediate_size": 6144,
    "moe_intermediate_size": 768, "num_experts": 128, "num_experts_per_tok": 8, "decoder_sparse_step": 1,
    "tie_word_embeddings": False, "rms_norm_eps": 1e-06, "rope_theta": 1000000.0, "vocab_size": 151936,
}


def free_ports(n: int) -> List[int]:
    """n distinct free ports (all held while choosing, so none repeats)."""
    socks = [socket.socket() for _ in range(n)]
    try:
        for s in socks:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def preflight(root: Path, *overrides: str, skip: List[str] = OFF, local_head: bool = False
              ) -> Tuple[Any, List[str]]:
    """(Report or PreflightError, printed lines) of the composed config for checkout ``root``."""
    cfg = compose([f"paths.root={root}", f"skip_checks=[{','.join(skip)}]", *overrides])
    validate(cfg)
    plan = build_plan(cfg, environ={}, timestamp="20260101_000000")
    lines: List[str] = []
    try:
        return run_preflight(cfg, plan, local_head=local_head, echo=lines.append), lines
    except PreflightError as err:
        return err, lines


def failed(outcome: Any, name: str) -> str:
    assert isinstance(outcome, PreflightError), f"expected check {name!r} to fail, got {outcome}"
    assert outcome.check == name, outcome.report()
    return outcome.report()


def passed(outcome: Any) -> Report:
    assert isinstance(outcome, Report), outcome.report()
    return outcome


@pytest.fixture
def checkout(tmp_path) -> Path:
    """A private fixture checkout the test may break."""
    return build_checkout(tmp_path / "rl")


def write_config(root: Path, dirname: str, config: dict) -> None:
    folder = root / "local" / "models" / dirname
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(json.dumps(config))


# ---------------------------------------------------------------- checkpoint

def test_checkpoint_real_qwen3_4b_instruct_2507_values_agree(clawgym_checkout):
    report = passed(preflight(clawgym_checkout)[0])
    line = report.by_name()["checkpoint"]
    assert line.status == "ok"
    for key in ("hidden_size", "num_layers", "num_attention_heads", "num_query_groups", "ffn_hidden_size",
                "untie_embeddings_and_output_weights", "norm_epsilon", "rotary_base"):
        assert key in line.detail


def test_checkpoint_rope_theta_mismatch_names_both_values_and_the_key(checkout):
    write_config(checkout, "Qwen3-4B-Instruct-2507", {**QWEN3_4B_INSTRUCT_2507_CONFIG, "rope_theta": 1000000})
    text = failed(preflight(checkout)[0], "checkpoint")
    assert "model.rotary_base=5000000 but config.json rope_theta=1000000" in text
    assert "set model.rotary_base=1000000" in text


def test_checkpoint_nested_rope_parameters_theta_is_compared(checkout):
    config = {k: v for k, v in QWEN3_4B_INSTRUCT_2507_CONFIG.items() if k != "rope_theta"}
    write_config(checkout, "Qwen3-4B-Instruct-2507", {**config, "rope_parameters": {"rope_theta": 5000000.0}})
    assert passed(preflight(checkout)[0]).by_name()["checkpoint"].status == "ok"
    write_config(checkout, "Qwen3-4B-Instruct-2507", {**config, "rope_parameters": {"rope_theta": 10000.0}})
    text = failed(preflight(checkout)[0], "checkpoint")
    assert "config.json rope_parameters.rope_theta=10000" in text


def test_checkpoint_tied_embeddings_mismatch_says_which_untie_value_to_set(checkout):
    write_config(checkout, "Qwen3-4B-Instruct-2507", {**QWEN3_4B_INSTRUCT_2507_CONFIG, "tie_word_embeddings": False})
    text = failed(preflight(checkout)[0], "checkpoint")
    assert "model.untie_embeddings_and_output_weights=false but config.json tie_word_embeddings=false" in text
    assert "set model.untie_embeddings_and_output_weights=true" in text


def test_checkpoint_reports_every_mismatch_at_once(checkout):
    write_config(checkout, "Qwen3-4B-Instruct-2507",
                 {**QWEN3_4B_INSTRUCT_2507_CONFIG, "hidden_size": 4096, "num_key_value_heads": 4})
    text = failed(preflight(checkout)[0], "checkpoint")
    assert "model.hidden_size=2560 but config.json hidden_size=4096" in text
    assert "model.num_query_groups=8 but config.json num_key_value_heads=4" in text


def test_checkpoint_moe_qwen3_30b_a3b_agrees_and_skips_dense_ffn_for_all_moe_models(checkout):
    write_config(checkout, "Qwen3-30B-A3B", QWEN3_30B_A3B_CONFIG)
    line = passed(preflight(checkout, "model=qwen3_30b_a3b")[0]).by_name()["checkpoint"]
    fields = line.detail.split("(", 1)[1].rstrip(")").split(", ")
    assert "moe_ffn_hidden_size" in fields and "ffn_hidden_size" not in fields
    # Every layer is MoE ("[1]*48"): slime skips intermediate_size, and so do we.
    write_config(checkout, "Qwen3-30B-A3B", {**QWEN3_30B_A3B_CONFIG, "intermediate_size": 1})
    passed(preflight(checkout, "model=qwen3_30b_a3b")[0])
    write_config(checkout, "Qwen3-30B-A3B", {**QWEN3_30B_A3B_CONFIG, "moe_intermediate_size": 1536})
    text = failed(preflight(checkout, "model=qwen3_30b_a3b")[0], "checkpoint")
    assert "model.moe_ffn_hidden_size=768 but config.json moe_intermediate_size=1536" in text


def test_checkpoint_dense_ffn_is_compared_when_some_layers_are_dense(checkout):
    write_config(checkout, "Qwen3-30B-A3B", {**QWEN3_30B_A3B_CONFIG, "intermediate_size": 1})
    text = failed(preflight(checkout, "model=qwen3_30b_a3b", "model.moe_layer_freq='[0]*1+[1]*47'")[0],
                  "checkpoint")
    assert "model.ffn_hidden_size=6144 but config.json intermediate_size=1" in text


def test_moe_layer_freq_literals_are_read_without_eval():
    assert layer_pattern("[1]*48", 48) == [1] * 48
    assert layer_pattern("[0]*3+[1]*45", 48) == [0] * 3 + [1] * 45
    assert layer_pattern(2, 4) == [1, 0, 1, 0]
    assert layer_pattern(None, 3) == [1, 1, 1]
    assert layer_pattern("__import__('os')", 3) is None


def test_checkpoint_missing_folder_says_how_to_download(checkout):
    text = failed(preflight(checkout, "paths.hf_checkpoint=/nonexistent/ckpt")[0], "checkpoint")
    assert "paths.hf_checkpoint=/nonexistent/ckpt does not exist" in text
    assert "hf download Qwen/Qwen3-4B-Instruct-2507 --local-dir /nonexistent/ckpt" in text


def test_checkpoint_folder_without_config_json_is_not_a_hf_checkpoint(checkout, tmp_path):
    empty = tmp_path / "empty_ckpt"
    empty.mkdir()
    text = failed(preflight(checkout, f"paths.hf_checkpoint={empty}")[0], "checkpoint")
    assert "has no config.json" in text


# ---------------------------------------------------------------- machine

def test_gpus_fail_when_the_node_shows_fewer_than_the_layout_holds(clawgym_checkout, monkeypatch):
    # An empty CUDA_VISIBLE_DEVICES hides every GPU, on any machine.
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    skip = ["docker", "image", "ports"]
    text = failed(preflight(clawgym_checkout, "gpu_layout=split_1_1", skip=skip, local_head=True)[0], "gpus")
    assert "the run needs 2 GPUs (1 actor + 1 rollout) but this node shows 0" in text
    assert "run on a GPU node" in text


def fake_nvidia_smi(bin_dir: Path, gpus: List[Tuple[str, int]]) -> None:
    """A stand-in nvidia-smi answering -L and the name/memory query for ``gpus`` (name, MiB)."""
    bin_dir.mkdir(parents=True, exist_ok=True)
    listing = "\n".join(f"GPU {i}: {name} (UUID: GPU-{i:08d})" for i, (name, _) in enumerate(gpus))
    query = "\n".join(f"{name}, {mib}" for name, mib in gpus)
    script = bin_dir / "nvidia-smi"
    script.write_text(f"""#!/bin/sh
case "$1" in
  -L) printf '%s\\n' "{listing}" ;;
  --query-gpu=name,memory.total) printf '%s\\n' "{query}" ;;
  *) exit 2 ;;
esac
""")
    script.chmod(0o755)


def test_gpus_on_a_one_gpu_node_suggest_a_layout_that_fits_and_name_the_model(clawgym_checkout, tmp_path,
                                                                              monkeypatch):
    fake_nvidia_smi(tmp_path / "bin", [("NVIDIA H200", 143771)])
    monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    monkeypatch.setitem(sys.modules, "pynvml", None)  # counted by the stand-in, as without NVML
    # (memory: qwen3_4b's 65536-token micro-batch does not fit one GPU; tests/test_memory_preflight.py)
    skip = ["docker", "image", "ports", "memory"]
    err = preflight(clawgym_checkout, "gpu_layout=split_1_1", skip=skip, local_head=True)[0]
    text = failed(err, "gpus")
    line = err.checklist.by_name()["gpus"]
    assert "this node shows 1 (1x NVIDIA H200 (140 GiB); nvidia-smi -L)" in line.detail
    # The fix names the colocated 1-GPU layout, never the layout that just failed.
    assert "gpu_layout=colocate_1 (1 GPU)" in line.fix and "split_1_1" not in line.fix, text
    report = passed(preflight(clawgym_checkout, "gpu_layout=colocate_1", skip=skip, local_head=True)[0])
    assert "1 (1x NVIDIA H200 (140 GiB); nvidia-smi -L) visible" in report.by_name()["gpus"].detail


def test_gpus_and_ports_are_not_checked_for_an_existing_cluster(clawgym_checkout, monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    address = f"http://127.0.0.1:{free_ports(1)[0]}"
    report, lines = preflight(clawgym_checkout, f"ray.address={address}", skip=["docker", "image", "cluster"])
    results = passed(report).by_name()
    assert results["gpus"].status == "n/a" and results["ports"].status == "n/a"
    assert any("gpus" in line and f"not checked (the job runs on the existing cluster at {address})"
               in line for line in lines)


def test_cluster_that_does_not_answer_fails_before_anything_is_written(clawgym_checkout, tmp_path):
    address = f"http://127.0.0.1:{free_ports(1)[0]}"
    save = tmp_path / "exp" / "run"
    text = failed(preflight(clawgym_checkout, f"ray.address={address}", f"paths.save={save}",
                            skip=["docker", "image"])[0], "cluster")
    assert f"ray.address: no Ray dashboard answers at {address}" in text and "fix:" in text
    assert not save.exists()


def test_cluster_declaring_enough_gpus_passes_and_too_few_fails(clawgym_checkout, ray_cluster):
    report = passed(preflight(clawgym_checkout, *ray_cluster.overrides(), skip=["docker", "image"])[0])
    assert "8 GPUs for the run's 8" in report.by_name()["cluster"].detail
    text = failed(preflight(clawgym_checkout, *ray_cluster.overrides(), "gpu_layout.num_gpus=16",
                            "gpu_layout.actor_gpus=8", "gpu_layout.rollout_gpus=8", skip=["docker", "image"])[0],
                  "cluster")
    assert "declares 8 GPUs; this run holds 16" in text


@pytest.mark.parametrize("key", ["sglang.api_port", "ray.dashboard_port", "ray.port"])
def test_ports_busy_port_fails_naming_the_key(clawgym_checkout, key):
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen(1)
        ports = dict(zip(["sglang.api_port", "ray.dashboard_port", "ray.port"], free_ports(3)))
        ports[key] = holder.getsockname()[1]
        outcome, _ = preflight(clawgym_checkout, *(f"{k}={v}" for k, v in ports.items()),
                               skip=["docker", "image", "gpus"], local_head=True)
        text = failed(outcome, "ports")
    assert f"{key}={ports[key]} on 127.0.0.1: in use" in text
    assert f"set {key} to a free port" in text


def test_ports_free_ports_pass(clawgym_checkout):
    ports = [f"{k}={p}" for k, p in zip(["sglang.api_port", "ray.dashboard_port", "ray.port"], free_ports(3))]
    report, _ = preflight(clawgym_checkout, *ports, skip=["docker", "image", "gpus"], local_head=True)
    assert passed(report).by_name()["ports"].status == "ok"


def test_ports_shared_by_two_services_fail(clawgym_checkout):
    port = free_ports(1)[0]
    outcome, _ = preflight(clawgym_checkout, f"sglang.api_port={port}", f"ray.dashboard_port={port}",
                           skip=["docker", "image", "gpus"], local_head=True)
    assert "is also sglang.api_port" in failed(outcome, "ports")


# ---------------------------------------------------------------- checkout, tasks, hooks

def test_checkout_missing_trainer_script_names_the_key(checkout):
    (checkout / "slime" / "train_async.py").unlink()
    text = failed(preflight(checkout)[0], "checkout")
    assert f"gpu_layout.trainer_script=train_async.py is not in paths.slime={checkout}/slime" in text


def test_checkout_colocated_layout_needs_the_synchronous_trainer(checkout):
    (checkout / "slime" / "train.py").unlink()
    passed(preflight(checkout)[0])  # split layout: train_async.py is all it needs
    text = failed(preflight(checkout, "gpu_layout=colocate_8")[0], "checkout")
    assert "gpu_layout.trainer_script=train.py" in text


def test_checkout_missing_megatron_names_the_key(checkout):
    text = failed(preflight(checkout, "paths.megatron=/nonexistent/Megatron-LM")[0], "checkout")
    assert "paths.megatron=/nonexistent/Megatron-LM does not exist" in text


def test_tasks_counts_are_reported(clawgym_checkout):
    report, lines = preflight(clawgym_checkout)
    assert passed(report).by_name()["tasks"].detail == "train 3 tasks, eval 2 tasks"
    assert any("train 3 tasks, eval 2 tasks" in line for line in lines)


def test_tasks_eval_folder_not_needed_without_periodic_eval(checkout):
    report, _ = preflight(checkout, "eval.interval=null", "paths.eval_tasks=/nonexistent")
    assert "eval folder not needed" in passed(report).by_name()["tasks"].detail


def test_tasks_missing_folder_names_the_key(checkout):
    text = failed(preflight(checkout, "paths.eval_tasks=/nonexistent/eval")[0], "tasks")
    assert "paths.eval_tasks=/nonexistent/eval" in text


def test_tasks_entries_the_rollout_rejects_fail(checkout):
    train = checkout / "data" / "clawgym_train"
    (train / "README.txt").write_text("not a task\n")
    (train / "task_0001" / "reward" / "reward.sh").unlink()
    text = failed(preflight(checkout)[0], "tasks")
    assert "README.txt is a file, not a task folder" in text
    assert "task_0001/ has no reward/reward.sh" in text


def test_tasks_empty_folder_holds_no_tasks(checkout, tmp_path):
    empty = tmp_path / "no_tasks"
    empty.mkdir()
    assert "holds no tasks" in failed(preflight(checkout, f"paths.train_tasks={empty}")[0], "tasks")


def test_functions_found_on_the_job_pythonpath(clawgym_checkout):
    detail = passed(preflight(clawgym_checkout)[0]).by_name()["functions"].detail
    assert "clawgym_rl_rollout.generate_rollout_clawgym_rl" in detail
    assert "clawgym_rl_api_server.reward_func" in detail


def test_functions_missing_attribute_fails(checkout):
    text = failed(preflight(checkout, "rollout.reward_function_path=clawgym_rl_api_server.reward")[0], "functions")
    assert "rollout.reward_function_path=clawgym_rl_api_server.reward" in text
    assert "defines no top-level reward" in text


def test_functions_missing_module_fails_naming_the_key(checkout):
    text = failed(preflight(checkout, "eval.function_path=my_eval.run")[0], "functions")
    assert "eval.function_path=my_eval.run: module my_eval is not on the job's PYTHONPATH" in text


def test_functions_package_module_under_slime_is_found(checkout):
    pkg = checkout / "slime" / "slime" / "rollout"
    pkg.mkdir(parents=True)
    (pkg / "sglang_rollout.py").write_text("async def generate_rollout(args, rollout_id, data_buffer):\n    pass\n")
    passed(preflight(checkout, "eval.function_path=slime.rollout.sglang_rollout.generate_rollout")[0])


# ---------------------------------------------------------------- order, skips

def test_every_check_runs_and_all_failures_are_reported_together(checkout):
    write_config(checkout, "Qwen3-4B-Instruct-2507", {**QWEN3_4B_INSTRUCT_2507_CONFIG, "hidden_size": 1})
    (checkout / "slime" / "train_async.py").unlink()
    err, lines = preflight(checkout)
    assert isinstance(err, PreflightError)
    assert err.checks == ["checkpoint", "checkout"] and err.check == "checkpoint"
    names = [r.name for r in err.checklist.results]
    # Checks after the first failure still ran.
    assert names.index("tasks") > names.index("checkout") and err.checklist.by_name()["tasks"].status == "ok"
    text = err.report()
    assert text.count("fix:") == 2
    assert "preflight failed at 'checkpoint', 'checkout' (2 checks): nothing was started" in text
    assert "skip_checks=[checkpoint,checkout]" in text


def test_skipped_check_is_printed_and_not_run(checkout):
    write_config(checkout, "Qwen3-4B-Instruct-2507", {**QWEN3_4B_INSTRUCT_2507_CONFIG, "hidden_size": 1})
    report, lines = preflight(checkout, skip=OFF + ["checkpoint"])
    assert passed(report).by_name()["checkpoint"].status == "skipped"
    assert any("checkpoint" in line and "skipped (skip_checks)" in line for line in lines)


def test_unknown_skip_name_fails_listing_the_names(clawgym_checkout):
    text = failed(preflight(clawgym_checkout, skip=["gpu"])[0], "skip_checks")
    assert "unknown check(s): gpu" in text and ", ".join(check_names()) in text


# ---------------------------------------------------------------- end to end

def _cli_env() -> dict:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    env.pop("CUDA_VISIBLE_DEVICES", None)
    return env


def _ports() -> List[str]:
    return [f"{k}={p}" for k, p in zip(["sglang.api_port", "ray.dashboard_port", "ray.port"], free_ports(3))]


def test_preflight_only_prints_the_checklist_and_exits_zero(clawgym_checkout, tmp_path):
    out = subprocess.run(
        [sys.executable, str(ROOT / "train.py"), "preflight_only=true", f"paths.root={clawgym_checkout}",
         "skip_checks=[docker,image,gpus,disk]", f"hydra.run.dir={tmp_path}/run", *_ports()],
        cwd=tmp_path, env=_cli_env(), capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "✓ checkpoint" in out.stdout and "train 3 tasks, eval 2 tasks" in out.stdout
    assert "- gpus" in out.stdout and "skipped (skip_checks)" in out.stdout
    assert "preflight passed" in out.stdout
    assert "Traceback" not in out.stderr


def test_preflight_only_failure_exits_2_like_a_preflight_failure_during_a_launch(checkout, tmp_path):
    write_config(checkout, "Qwen3-4B-Instruct-2507", {**QWEN3_4B_INSTRUCT_2507_CONFIG, "rope_theta": 1000000})
    out = subprocess.run(
        [sys.executable, str(ROOT / "train.py"), "preflight_only=true", f"paths.root={checkout}",
         "skip_checks=[docker,image,gpus,disk]", f"hydra.run.dir={tmp_path}/run", *_ports()],
        cwd=tmp_path, env=_cli_env(), capture_output=True, text=True, timeout=120)
    # Refused before anything started (clawgym/common/exit_codes.py): 2, as the same failure during a launch.
    assert out.returncode == 2, out.stdout + out.stderr
    assert "✗ checkpoint" in out.stdout and "set model.rotary_base=1000000" in out.stdout
    assert "preflight failed at 'checkpoint' (1 check)" in out.stderr and "Traceback" not in out.stderr
    # Refused before anything started: the output dir this command created is gone again.
    assert not (tmp_path / "run").exists()


def test_clawgym_preflight_subcommand_composes_overrides(clawgym_checkout, tmp_path):
    base = [sys.executable, "-m", "clawgym", "preflight", f"paths.root={clawgym_checkout}",
            "skip_checks=[docker,image,gpus,disk]", *_ports()]
    out = subprocess.run(base, cwd=tmp_path, env=_cli_env(), capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "✓ tasks" in out.stdout and "preflight passed" in out.stdout
    four_b = clawgym_checkout / "local" / "models" / "Qwen3-4B-Instruct-2507"
    bad = subprocess.run(base + ["model=qwen3_8b", f"paths.hf_checkpoint={four_b}"], cwd=tmp_path, env=_cli_env(), capture_output=True,
                         text=True, timeout=120)
    assert bad.returncode == 2
    assert "model.hidden_size=4096 but config.json hidden_size=2560" in bad.stdout
    typo = subprocess.run(base + ["model=qwen3_9b"], cwd=tmp_path, env=_cli_env(), capture_output=True,
                          text=True, timeout=120)
    assert typo.returncode == 2 and "Traceback" not in typo.stderr


def test_clawgym_preflight_cluster_flag_after_overrides_skips_machine_checks(clawgym_checkout, tmp_path):
    env = {**_cli_env(), "CUDA_VISIBLE_DEVICES": ""}
    out = subprocess.run([sys.executable, "-m", "clawgym", "preflight", f"paths.root={clawgym_checkout}",
                          "skip_checks=[docker,image,cluster,disk]", "--cluster"],
                         cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "gpus" in out.stdout and "not checked (the job runs on the existing cluster" in out.stdout
    bad = subprocess.run([sys.executable, "-m", "clawgym", "preflight", "model=qwen3_4b", "--bogus"],
                         cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert bad.returncode == 2 and "unknown option --bogus" in bad.stderr


def _write_checkpoints(save: Path, n: int) -> None:
    for i in range(1, n + 1):
        (save / f"iter_{i:07d}").mkdir(parents=True)
    (save / "latest_checkpointed_iteration.txt").write_text(str(n))


def test_save_dir_fresh_run_refuses_to_overwrite_earlier_checkpoints(checkout, tmp_path):
    save = tmp_path / "exp" / "run"
    _write_checkpoints(save, 2)
    text = failed(preflight(checkout, f"paths.save={save}")[0], "save_dir")
    assert f"paths.save={save}" in text and "latest 2" in text
    assert f"clawgym resume {save}" in text and "run_name=" in text
    # Nothing was touched.
    assert sorted(p.name for p in save.iterdir()) == ["iter_0000001", "iter_0000002", "latest_checkpointed_iteration.txt"]


def test_save_dir_continuing_from_it_passes(checkout, tmp_path):
    save = tmp_path / "exp" / "run"
    _write_checkpoints(save, 2)
    report = passed(preflight(checkout, f"paths.save={save}", f"checkpoint.load={save}")[0])
    assert "continues from checkpoint 2" in report.by_name()["save_dir"].detail


def test_save_dir_loading_another_run_into_a_full_save_dir_is_refused(checkout, tmp_path):
    save, other = tmp_path / "exp" / "run", tmp_path / "exp" / "other"
    _write_checkpoints(save, 1)
    _write_checkpoints(other, 1)
    failed(preflight(checkout, f"paths.save={save}", f"checkpoint.load={other}")[0], "save_dir")


def test_save_dir_with_only_logs_and_snapshots_passes(checkout, tmp_path):
    save = tmp_path / "exp" / "run"
    (save / "logs").mkdir(parents=True)
    (save / "clawgym" / "snapshots").mkdir(parents=True)
    passed(preflight(checkout, f"paths.save={save}")[0])


def test_wandb_enabled_without_a_key_anywhere_fails_preflight_with_the_fix(checkout, tmp_path, monkeypatch):
    for name in ("WANDB_KEY", "WANDB_API_KEY", "WANDB_MODE", "NETRC"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))  # no ~/.netrc of `wandb login`
    report = failed(preflight(checkout, "wandb.enabled=true", local_head=True,
                              skip=[*OFF, "save_dir"])[0], "wandb")
    assert "wandb.enabled=true but no W&B key is set" in report and "$WANDB_KEY, $WANDB_API_KEY" in report
    assert "export WANDB_API_KEY=" in report and "wandb.enabled=false" in report
    # A key in the environment, or in wandb login's netrc on a local head, passes; W&B off needs none.
    monkeypatch.setenv("WANDB_API_KEY", "k-0000")
    assert passed(preflight(checkout, "wandb.enabled=true", skip=[*OFF, "save_dir"])[0]).by_name()["wandb"].status == "ok"
    monkeypatch.delenv("WANDB_API_KEY")
    (tmp_path / "home").mkdir()
    (tmp_path / "home" / ".netrc").write_text("machine api.wandb.ai\n  login user\n  password k-1111\n")
    (tmp_path / "home" / ".netrc").chmod(0o600)
    ok = passed(preflight(checkout, "wandb.enabled=true", local_head=True, skip=[*OFF, "save_dir"])[0])
    assert "netrc" in ok.by_name()["wandb"].detail
    assert passed(preflight(checkout, "wandb.enabled=false", skip=[*OFF, "save_dir"])[0]).by_name()["wandb"].status == "n/a"
