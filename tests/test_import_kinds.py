"""``clawgym import`` of run kinds and script habits: SFT, an OPD teacher server, a generated
``--sglang-config``, setup steps, ``python3 -u``, Ray's ``${VAR}`` in the runtime env; the
error paths (a failed import writes nothing, ``--check --force``, a broken experiment); null
curated keys; the in-job service supervisor.

The six fixture scripts (tests/fixtures/import_scripts/, our own text in the style of slime's
public scripts) each round-trip: import -> experiment file -> compose + plan -> parity with 0
differences, and ``--check`` against the written file agrees.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from clawgym.importer.capture import run_script
from tests.fixtures.slime_checkout import LAYOUT, build_slime_checkout

KINDS = ["run-qwen3-4B-sft.sh", "run-qwen3-4B-opd-teacher.sh", "run-qwen3-4B-pd-config.sh",
         "run-qwen3-4B-setup.sh", "run-qwen3-4B-unbuffered.sh", "run-qwen3-4B-ray-env.sh"]


@pytest.fixture(scope="module")
def checkout(tmp_path_factory) -> Path:
    root = build_slime_checkout(Path(os.path.realpath(tmp_path_factory.mktemp("slime"))))
    if shutil.which("git"):
        subprocess.run(["git", "init", "-q", str(root)], check=True, timeout=60)
    return root


@pytest.fixture(scope="module")
def kinds(checkout, tmp_path_factory):
    from clawgym.importer.entry import format_result, import_script

    out_dir = tmp_path_factory.mktemp("conf")
    return {name: (r, format_result(r)) for name in KINDS
            for r in [import_script(checkout / LAYOUT[name], out_dir=out_dir)]}


def _plan(result):
    from clawgym.config.compose import compose
    from clawgym.plan.build import build_plan

    out_dir = result.path.parent.parent
    cfg = compose([f"hydra.searchpath=[file://{out_dir}]", f"+experiment={result.name}"])
    return cfg, build_plan(cfg, environ={}, timestamp="t")


@pytest.mark.parametrize("name", KINDS)
def test_run_kind_fixture_round_trips_with_zero_differences(name, kinds, checkout):
    from clawgym.importer.entry import format_result, import_script

    result, report = kinds[name]
    assert result.ok, report
    assert "parity: the experiment launches the same run (0 differences)" in report
    text = result.path.read_text()
    again = import_script(checkout / LAYOUT[name], out_dir=result.path.parent.parent, check=True)
    assert again.ok, format_result(again)
    assert result.path.read_text() == text


def test_sft_script_becomes_a_layout_without_rollout_engine(kinds):
    result, _ = kinds["run-qwen3-4B-sft.sh"]
    assert result.body["gpu_layout"]["rollout_engine"] is False
    cfg, plan = _plan(result)
    argv = plan.entrypoint
    assert argv[1] == "train_async.py" and "--debug-train-only" in argv
    assert "--rollout-num-gpus" not in argv
    # The run holds the actor's GPUs only; the memory plan sizes no rollout engine.
    assert plan.gpus_required == 8
    from clawgym.config.compose import to_plain
    from clawgym.memory import memory_plan

    mem = memory_plan(to_plain(cfg)).to_dict()
    assert mem["rollout"]["engines"] == 0 and mem["rollout"]["kv_pool_gib"] == 0.0


def test_opd_teacher_becomes_a_service_started_inside_the_job(kinds):
    result, report = kinds["run-qwen3-4B-opd-teacher.sh"]
    teacher = result.body["services"]["teacher"]
    assert teacher["enabled"] is True and teacher["model_path"] == "/data/ckpt/Qwen3-32B"
    assert teacher["gpus"] == "7" and teacher["port"] == 15123 and teacher["host"] == "0.0.0.0"
    assert teacher["extra_args"] == ["--chunked-prefill-size", "8192"]
    assert "servers the script starts" in report and "curl -sf http://127.0.0.1:15123/health_generate" in report
    _, plan = _plan(result)
    job = plan.job_entrypoint
    assert job[1].endswith("/clawgym/run_services.py") and job[3] == "--" and job[4:] == plan.entrypoint
    (svc,) = json.loads(plan.files[job[2]])["services"]
    assert svc["env"] == {"CUDA_VISIBLE_DEVICES": "7"}
    assert svc["health_url"] == "http://127.0.0.1:15123/health_generate"
    assert svc["argv"][:3] == ["python3", "-m", "sglang.launch_server"]


def test_generated_sglang_config_is_a_typed_key_compared_by_content(kinds, checkout, tmp_path, capsys):
    result, _ = kinds["run-qwen3-4B-pd-config.sh"]
    (model,) = result.body["sglang"]["models"]
    assert [g["worker_type"] for g in model["server_groups"]] == ["prefill", "decode"]
    _, plan = _plan(result)
    path = plan.entrypoint[plan.entrypoint.index("--sglang-config") + 1]
    # The script's --save ends with "/": the generated file's path has no doubled slash.
    assert path == f"{plan.save_dir.rstrip('/')}/clawgym/sglang_config.yaml"
    assert "max_running_requests: 256" in plan.files[path]
    # A changed engine group is a difference, found by content (the paths always differ).
    out_dir = tmp_path / "conf"
    (out_dir / "experiment").mkdir(parents=True)
    changed = result.path.read_text().replace("max_running_requests: 256", "max_running_requests: 128")
    assert changed != result.path.read_text()
    (out_dir / "experiment" / "pd.yaml").write_text(changed)
    from clawgym.cli import main

    code = main(["import", str(checkout / LAYOUT["run-qwen3-4B-pd-config.sh"]), "--out", str(out_dir),
                 "--name", "pd", "--check"])
    out = capsys.readouterr().out
    assert code == 1 and "--sglang-config (sglang_config)" in out, out


def test_setup_steps_are_prerequisites_and_strict_refuses_them(kinds, checkout, tmp_path):
    from clawgym.importer.entry import import_script

    result, report = kinds["run-qwen3-4B-setup.sh"]
    steps = "\n".join(result.setup)
    for step in ("pip install -U transformers>=4.57", "mkdir -p /data/models /data/datasets",
                 "hf download Qwen/Qwen3-4B", "python3 tools/convert_hf_to_torch_dist.py"):
        assert step in steps, steps
    header = result.path.read_text().split("defaults:")[0]
    assert "# Prerequisites:" in header and "hf download Qwen/Qwen3-4B" in header
    # pip list answered with slime's image: the script read megatron-core's location from it.
    assert any(a.startswith("`pip list`") for a in result.answered), result.answered
    assert result.body["extra_env"]["PYTHONPATH"] == "/root/Megatron-LM/"
    out_dir = tmp_path / "conf"
    strict = import_script(checkout / LAYOUT["run-qwen3-4B-setup.sh"], out_dir=out_dir, strict=True)
    assert not strict.ok and any("--strict" in t for t in strict.inexpressible)
    # A failed import writes nothing.
    assert strict.path is None and not (out_dir / "experiment").exists()


def test_python_options_and_inline_programs(kinds):
    result, report = kinds["run-qwen3-4B-unbuffered.sh"]
    assert any(n.startswith("python3 -u") for n in result.notes)
    assert any("an inline program" in a for a in result.answered)
    assert "MASTER_ADDR" not in (result.body.get("extra_env") or {})


def test_inline_program_may_compute_but_not_write(tmp_path):
    mark = tmp_path / "written"
    script = tmp_path / "launch.sh"
    script.write_text(f"python3 -c \"open('{mark}', 'w')\" || echo refused\n"
                      "X=$(python3 -c 'import json; print(json.dumps({\"a\": 1}))')\necho \"got $X\"\n")
    cap = run_script(script)
    assert "refused" in cap.output and 'got {"a": 1}' in cap.output
    assert not mark.exists()


def test_ray_runtime_env_variables_stay_literal(kinds):
    result, _ = kinds["run-qwen3-4B-ray-env.sh"]
    text = result.path.read_text()
    assert "\\${MASTER_ADDR}" in text
    cfg, plan = _plan(result)
    env = plan.runtime_env["env_vars"]
    assert env["NODE_ADDR"] == "${MASTER_ADDR}" and env["no_proxy"] == "localhost,127.0.0.1,${MASTER_ADDR}"


def test_nvidia_smi_answers_for_the_gpus_per_node(tmp_path):
    script = tmp_path / "probe.sh"
    script.write_text("set -euo pipefail\necho \"gpus=$(nvidia-smi -L | wc -l)\"\n"
                      "echo \"nv=$(nvidia-smi topo -m | grep -o 'NV[0-9]*' | wc -l)\"\n")
    cap = run_script(script, gpus_per_node=4)
    assert "gpus=4" in cap.output and "nv=12" in cap.output, cap.output
    cap = run_script(script, gpus_per_node=2, nvlink=False)
    assert "gpus=2" in cap.output and "nv=0" in cap.output, cap.output


def test_failed_import_with_force_puts_the_old_file_back(checkout, tmp_path):
    from clawgym.importer.entry import import_script

    target = tmp_path / "conf" / "experiment" / "mine.yaml"
    target.parent.mkdir(parents=True)
    target.write_text("# @package _global_\n# my own experiment\n")
    result = import_script(checkout / LAYOUT["run-qwen3-4B-setup.sh"], out_dir=tmp_path / "conf", name="mine",
                           force=True, strict=True)
    assert not result.ok and result.path is None
    assert target.read_text() == "# @package _global_\n# my own experiment\n"


def test_check_force_reimports_a_stale_experiment(kinds, checkout, tmp_path):
    from clawgym.importer.entry import import_script

    result, _ = kinds["run-qwen3-4B-ray-env.sh"]
    out_dir = tmp_path / "conf"
    (out_dir / "experiment").mkdir(parents=True)
    stale = result.path.read_text().replace("num_rollout: 100", "num_rollout: 101")
    assert stale != result.path.read_text()
    (out_dir / "experiment" / "env.yaml").write_text(stale)
    checked = import_script(checkout / LAYOUT["run-qwen3-4B-ray-env.sh"], out_dir=out_dir, name="env", check=True)
    assert not checked.ok and (out_dir / "experiment" / "env.yaml").read_text() == stale
    forced = import_script(checkout / LAYOUT["run-qwen3-4B-ray-env.sh"], out_dir=out_dir, name="env", check=True,
                           force=True)
    assert forced.ok and any("--check --force" in n for n in forced.notes)
    assert "num_rollout: 100" in (out_dir / "experiment" / "env.yaml").read_text()


@pytest.mark.parametrize("edit, words", [
    (lambda t: t + "\nrollout: [unclosed\n", "does not compose"),
    (lambda t: t.replace("\nrollout:\n", "\nrollout:\n  batch_sise: 3\n", 1), "batch_sise"),
])
def test_check_after_a_broken_edit_is_a_clean_error(edit, words, kinds, checkout, tmp_path):
    from clawgym.cli import main

    result, _ = kinds["run-qwen3-4B-ray-env.sh"]
    out_dir = tmp_path / "conf"
    (out_dir / "experiment").mkdir(parents=True)
    broken = edit(result.path.read_text())
    (out_dir / "experiment" / "env.yaml").write_text(broken)
    proc = subprocess.run([sys.executable, "-m", "clawgym", "import", str(checkout / LAYOUT["run-qwen3-4B-ray-env.sh"]),
                           "--out", str(out_dir), "--name", "env", "--check"], capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr and words in proc.stderr and "env.yaml" in proc.stderr, proc.stderr
    assert main is not None


def test_null_curated_key_emits_no_flag_and_validates_with_the_trainer_default():
    from clawgym.config.compose import compose, to_plain
    from clawgym.trainer.effective import effective_config
    from clawgym.plan.build import build_plan
    from clawgym.validate import violations

    cfg = compose(["trainer=slime", "sandbox=none", "sglang.mem_fraction_static=null", "rollout.temperature=null",
                   "grpo.eps_clip_high=null"])
    argv = build_plan(cfg, environ={}, timestamp="t").entrypoint
    for flag in ("--sglang-mem-fraction-static", "--rollout-temperature", "--eps-clip-high"):
        assert flag not in argv
    eff = effective_config(to_plain(cfg))
    # slime's own defaults: temperature 1.0; eps_clip_high follows eps_clip (slime_validate_args).
    assert eff["rollout"]["temperature"] == 1.0 and eff["grpo"]["eps_clip_high"] == eff["grpo"]["eps_clip"]
    assert [v.code for v in violations(cfg)] == []


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_supervisor_starts_service_waits_for_health_and_stops_it(tmp_path):
    """run_services.py: the service answers before the command runs; it is stopped after."""
    from clawgym.snapshot.write import write_job_files
    from clawgym.plan.build import LaunchPlan

    port = _free_port()
    pidfile = tmp_path / "service.pid"
    server = ("import http.server, os, sys; open(sys.argv[1], 'w').write(str(os.getpid())); "
              "http.server.HTTPServer(('127.0.0.1', int(sys.argv[2])), http.server.SimpleHTTPRequestHandler)"
              ".serve_forever()")
    svc = {"name": "teacher", "argv": [sys.executable, "-c", server, str(pidfile), str(port)], "env": {},
           "health_url": f"http://127.0.0.1:{port}/", "timeout_s": 60, "log": str(tmp_path / "logs" / "t.log")}
    save = tmp_path / "save"
    plan = LaunchPlan(entrypoint=[sys.executable, "-c",
                                  f"import urllib.request; print(urllib.request.urlopen('http://127.0.0.1:{port}/')"
                                  ".status)"],
                      working_dir=str(tmp_path), runtime_env={"env_vars": {}}, ray_start=None, ray_start_env={},
                      submission_id="x", address="", save_dir=str(save), services=[svc],
                      files={f"{save}/clawgym/services.json": json.dumps({"services": [svc]})})
    write_job_files(plan)
    job = plan.job_entrypoint
    job[0] = sys.executable
    proc = subprocess.run(job, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "200" in proc.stdout and "teacher is up" in proc.stdout
    pid = int(pidfile.read_text())
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)


@pytest.mark.parametrize("name", ["run-qwen3-4B-sft.sh", "run-qwen3-4B-pd-config.sh", "run-qwen3-4B-ray-env.sh"])
def test_run_kinds_round_trip_under_the_fork_flavour_too(name, checkout, tmp_path):
    """Parity by the fork's parser (trainer=clawgym): the same kinds, its registry and defaults."""
    from clawgym.importer.entry import format_result, import_script

    result = import_script(checkout / LAYOUT[name], out_dir=tmp_path / "conf", trainer="clawgym")
    assert result.ok and result.flavour == "clawgym", format_result(result)


def test_script_with_tensorboard_keeps_it_and_clawgym_names_the_folder(checkout, tmp_path):
    """A script with --use-tensorboard and --save but no TENSORBOARD_DIR (slime's default folder)
    imports with metrics.tensorboard on; the folder clawgym gives (the run's save dir) is a
    deliberate difference (slime's run-minimax-m2.sh)."""
    from clawgym.importer.entry import format_result, import_script

    original = checkout / LAYOUT["run-qwen3-4B-unbuffered.sh"]
    script = original.with_name("run-qwen3-4B-tensorboard.sh")
    text = original.read_text()
    assert "   --actor-num-nodes 1 \\\n" in text
    script.write_text(text.replace("   --actor-num-nodes 1 \\\n", "   --actor-num-nodes 1 \\\n   --use-tensorboard \\\n"
                                   "   --save /data/ckpt/tb-run \\\n   --save-interval 20 \\\n", 1))
    try:
        result = import_script(script, out_dir=tmp_path / "conf")
    finally:
        script.unlink()
    report = format_result(result)
    assert result.ok, report
    assert "metrics.tensorboard" not in result.path.read_text() or "tensorboard: true" in result.path.read_text()
    assert any(d.name == "TENSORBOARD_DIR" and "save dir" in d.note for d in result.deliberate), report
