"""``clawgym import``: a launch script becomes an experiment that launches the same run.

The fixture scripts (tests/fixtures/import_scripts/, in the style of slime's public
launch scripts) sit in a fixture slime checkout (tests/fixtures/slime_checkout.py) and
run for real under bash with the importer's stand-ins. Each must round-trip: import ->
experiment file -> compose + dry-run plan -> parity with zero differences. What cannot be
expressed is named and fails the import; a changed experiment prints the difference table.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from clawgym.importer.capture import HARMLESS_TOOLS, STANDINS, classify, run_script
from tests.conftest import ROOT
from tests.fixtures.slime_checkout import LAYOUT, build_slime_checkout
from tests.test_seed_parity import SEED, seed_checkout  # noqa: F401  (the seed's fixture checkout)


def _registries_present() -> bool:
    try:
        from clawgym.registry import FLAVOURS, load_registry

        for flavour in FLAVOURS:
            load_registry(flavour)
        import clawgym.trainer.flagmap  # noqa: F401
    except Exception:  # noqa: BLE001 - any failure means: not there yet
        return False
    return True


needs_registry = pytest.mark.skipif(
    not _registries_present(),
    reason="the flag registries (clawgym/registry/data/*.json) or the owner table (clawgym/trainer/flagmap.py) are "
           "absent: parity needs the trainer's parser as data",
)

#: Fixture scripts that must import with zero differences.
ROUND_TRIP = ["run-qwen3-4B-colocate.sh", "run-qwen3-30B-A3B-async.sh", "run-glm4.5-106B-A12B-4nodes.sh"]


@pytest.fixture(scope="module")
def slime_checkout(tmp_path_factory) -> Path:
    """A fixture slime checkout, a git repository when git is installed (the importer's default
    --slime-root is the script's git toplevel, else the folder above it holding scripts/models/)."""
    root = build_slime_checkout(Path(os.path.realpath(tmp_path_factory.mktemp("slime"))))
    git = shutil.which("git")
    if git:
        subprocess.run([git, "init", "-q", str(root)], check=True, timeout=60)
    return root


def run_cli(argv, capsys):
    from clawgym.cli import main

    code = main(["import", *argv])
    out = capsys.readouterr()
    return code, out.out + out.err


# ---------------------------------------------------------------- the capture (no registry needed)


def test_stand_ins_shadow_every_tool_that_kills_starts_or_submits():
    for tool in ("ray", "pkill", "killall", "sleep", "nvidia-smi", "docker", "ssh", "pdsh", "wget", "tee"):
        assert tool in STANDINS
    for tool in ("python", "python3", "bash", "sh", "kill", "pkill", "ray", "torchrun", "docker", "find"):
        assert tool not in HARMLESS_TOOLS


def test_script_runs_nothing_it_calls(tmp_path):
    """Python, file writers, kills and Ray are recorded, never run; the submit is read back."""
    marks = [tmp_path / "by_python", tmp_path / "by_touch"]
    script = tmp_path / "launch.sh"
    script.write_text(
        "set -e\n"
        f"python3 make_marks.py {marks[0]}\n"
        f"touch {marks[1]}\n"
        "kill -9 1\n"
        "pkill -9 python\n"
        "ray start --head --num-gpus 2\n"
        "ray job submit --address=http://127.0.0.1:8265 -- python3 train.py --lr 1e-5\n"
    )
    cap = run_script(script)
    assert cap.returncode == 0, cap.output
    assert not any(m.exists() for m in marks)
    tools = [c.tool for c in cap.calls]
    assert tools == ["<not found>", "touch", "kill", "pkill", "ray", "ray"]
    assert cap.calls[0].argv[0] == "python3" and cap.calls[2].argv == ["-9", "1"]
    (sub,) = cap.submits
    assert sub.entrypoint == ["python3", "train.py", "--lr", "1e-5"]
    assert cap.head_options()["--num-gpus"] == "2"
    kinds = dict((text.split("`")[1], kind) for kind, text in classify(cap))
    assert kinds[f"touch {marks[1]}"] == "setup"
    assert kinds["pkill -9 python"] == "ignored"


def test_model_file_comes_from_slime_root_and_paths_name_the_repository(slime_checkout, tmp_path):
    """--slime-root decides which scripts/models/ file is sourced; temporary paths map back."""
    other = build_slime_checkout(tmp_path / "other_slime")
    models = other / "scripts" / "models" / "qwen3-4B.sh"
    models.write_text(models.read_text().replace("--num-layers 36", "--num-layers 99"))
    script = slime_checkout / LAYOUT["run-qwen3-4B-colocate.sh"]

    home = run_script(script)
    (sub,) = home.submits
    assert sub.entrypoint[sub.entrypoint.index("--num-layers") + 1] == "36"
    assert home.model_files == [str(slime_checkout / "scripts" / "models" / "qwen3-4B.sh")]
    assert home.repo_root == slime_checkout

    moved = run_script(script, slime_root=other)
    (sub,) = moved.submits
    assert sub.entrypoint[sub.entrypoint.index("--num-layers") + 1] == "99"
    assert moved.model_files == [str(models)]

    # ${SCRIPT_DIR} in the runtime env names the real examples folder, not a temporary copy.
    cap = run_script(slime_checkout / LAYOUT["run-qwen3-30B-A3B-async.sh"])
    (sub,) = cap.submits
    assert sub.env_vars["PYTHONPATH"] == f"/opt/Megatron-LM/:{slime_checkout / 'examples' / 'async_moe'}"
    assert "clawgym-import-" not in repr([c.argv for c in cap.calls]) + repr(sub.env_vars)
    # The job would run in the checkout the script is launched from.
    assert sub.working_dir == str(slime_checkout)


def test_files_a_script_writes_are_named(slime_checkout):
    cap = run_script(slime_checkout / LAYOUT["run-inexpressible.sh"])
    # Conversions and written files are setup steps: listed as prerequisites (refused with --strict).
    rows = [text for kind, text in classify(cap) if kind == "setup"]
    assert any("python3 tools/convert_hf_to_torch_dist.py" in r for r in rows), rows
    assert any(str(slime_checkout / "scripts" / "hostfile") in r for r in rows), rows
    # ...and nothing was written into the real checkout.
    assert not (slime_checkout / "scripts" / "hostfile").exists()


# ---------------------------------------------------------------- import -> experiment -> parity

#: A W&B key in the multi-node script's environment: it must never reach the experiment.
WANDB_SECRET = "wandb-secret-0123456789abcdef"


@pytest.fixture(scope="module")
def imported(slime_checkout, tmp_path_factory):
    """Each round-trip fixture imported once into one config dir: name -> (result, report)."""
    if not _registries_present():
        pytest.skip("the flag registries or the owner table are absent (see needs_registry)")
    from clawgym.importer.entry import format_result, import_script

    out_dir = tmp_path_factory.mktemp("conf")
    done = {}
    for name in ROUND_TRIP:
        env = {"WANDB_API_KEY": WANDB_SECRET} if "4nodes" in name else None
        result = import_script(slime_checkout / LAYOUT[name], out_dir=out_dir, env=env)
        done[name] = (result, format_result(result))
    return done


@needs_registry
@pytest.mark.parametrize("name", ROUND_TRIP)
def test_fixture_script_round_trips_with_zero_differences(name, imported, slime_checkout):
    from clawgym.importer.entry import format_result, import_script

    result, report = imported[name]
    assert result.ok, report
    assert result.differences == [] and result.inexpressible == [] and result.violations == []
    text = result.path.read_text()
    assert text.startswith("# @package _global_\n")
    assert "parity: the experiment launches the same run (0 differences)" in report
    # The written file alone reproduces it (--check composes it again, writes nothing).
    env = {"WANDB_API_KEY": WANDB_SECRET} if "4nodes" in name else None
    again = import_script(slime_checkout / LAYOUT[name], out_dir=result.path.parent.parent, check=True, env=env)
    assert again.ok, format_result(again)
    assert result.path.read_text() == text


@needs_registry
def test_upstream_scripts_import_as_trainer_slime_without_sandbox(imported):
    result, _ = imported["run-qwen3-30B-A3B-async.sh"]
    assert result.flavour == "slime"
    assert result.choices["model"] == "qwen3_30b_a3b"
    if "none" in _options("sandbox"):
        assert result.choices["sandbox"] == "none"
    assert result.choices["gpu_layout"] == "split_4_4"
    # Flags no group owns go through args.<dest>, typed.
    from clawgym.registry import load_registry

    reg = load_registry("slime")
    args = result.body.get("args", {})
    assert args[reg.by_option("--sglang-cuda-graph-bs").dest] == [1, 2, 4, 8, 16, 24, 32, 40, 48, 56, 64]
    assert args[reg.by_option("--sglang-ep-size").dest] == 4
    assert args[reg.by_option("--sglang-enable-dp-attention").dest] is True and args["use_tis"] is True
    # Custom function paths go to the keys that own them, or args.
    assert result.body["rollout"]["reward_function_path"] == "my_rewards.math_reward"
    assert args["dynamic_sampling_filter_path"] == "my_filters.keep_nonzero_std"


@needs_registry
def test_model_and_layout_are_the_closest_options(imported):
    """The dense model is matched by its architecture (rotary base 1e6: the hybrid Qwen3-4B, not
    the 2507 Instruct option), the multi-node MoE by its own family's option."""
    colocate, _ = imported["run-qwen3-4B-colocate.sh"]
    assert colocate.choices["gpu_layout"] == "colocate_8"
    assert "model" not in colocate.body or "num_layers" not in colocate.body.get("model", {})
    glm, _ = imported["run-glm4.5-106B-A12B-4nodes.sh"]
    assert glm.choices["model"].startswith("glm4_5_106b")
    assert glm.body["ray"]["address"] == "http://10.0.0.1:8265"
    assert glm.body["gpu_layout"]["actor_num_nodes"] == 4


def _options(group):
    from clawgym.config.compose import group_options

    return group_options(group)


@needs_registry
@pytest.mark.skipif(not SEED.is_file(), reason=f"seed script {SEED} not found (../shared is absent outside "
                                                 "the team workplace)")
def test_seed_import_reproduces_todays_clawgym_defaults(seed_checkout, tmp_path):  # noqa: F811
    from clawgym.importer.entry import format_result, import_script

    result = import_script(seed_checkout / SEED.name, out_dir=tmp_path / "conf")
    assert result.ok, format_result(result)
    assert result.flavour == "clawgym"
    assert {g: o for g, o in result.choices.items() if g != "trainer"} == {
        "model": "qwen3_4b", "gpu_layout": "split_4_4", "sandbox": "docker"}
    # Nearly empty: where the checkout is. TensorBoard events stay on (the seed keeps none), so
    # clawgym runs / clawgym report show the imported run's curves; the import says so.
    assert result.body == {"paths": {"root": str(seed_checkout)}}
    # The seed binds 0.0.0.0; clawgym keeps loopback and says so; the events, with their folder; and
    # the head serves the stacks of a hung job.
    assert sorted(d.name for d in result.deliberate) == ["--use-tensorboard (use_tensorboard)", "HOST",
                                                         "RAY_DASHBOARD_ENABLE_PROFILING", "TENSORBOARD_DIR"]
    assert any("clawgym runs / report show its curves" in d.note for d in result.deliberate)


def _seed_in_a_repository(seed_checkout, tmp_path) -> Path:  # noqa: F811
    """The seed's fixture checkout as ``RL/`` of a git repository whose top level is the folder
    above it (as in ClawGym-Agents: the script's checkout is not the repository's top)."""
    top = Path(os.path.realpath(tmp_path)) / "ClawGym-Agents"
    shutil.copytree(seed_checkout, top / "RL", symlinks=True)
    if not shutil.which("git"):
        pytest.skip("git is needed to make the fixture a repository")
    subprocess.run(["git", "init", "-q", str(top)], check=True, timeout=60)
    return top / "RL"


@needs_registry
@pytest.mark.skipif(not SEED.is_file(), reason=f"seed script {SEED} not found (../shared is absent outside "
                                                 "the team workplace)")
def test_seed_below_the_repository_top_imports_its_paths_relative_to_its_root(seed_checkout, tmp_path):  # noqa: F811
    """``RL/run_qwen3_4b.sh`` in a repository whose top is above ``RL``: the root is ``RL`` (the folder
    the script's paths derive from), the only key set, so ``paths.root=/elsewhere`` moves every path."""
    from omegaconf import OmegaConf

    from clawgym.config.compose import compose, to_plain
    from clawgym.importer.entry import format_result, import_script
    from clawgym.importer.writing import searchpath_override

    rl = _seed_in_a_repository(seed_checkout, tmp_path)
    out_dir = tmp_path / "conf"
    result = import_script(rl / SEED.name, out_dir=out_dir)
    assert result.ok, format_result(result)
    assert result.body == {"paths": {"root": str(rl)}}
    report = format_result(result)
    assert "keys set: 1" in report
    # docs/guide/import.md shows this import (tests/test_docs_commands.py points here): what it promises holds.
    page = (ROOT / "docs" / "guide" / "import.md").read_text()
    assert "$ clawgym import RL/run_qwen3_4b.sh\n" in page
    for promised in ("  keys set: 1\n", "  root: /path/to/ClawGym-Agents/RL\n",
                     "  options: trainer=clawgym, model=qwen3_4b, gpu_layout=split_4_4, sandbox=docker\n"):
        assert promised in page
        assert promised.replace("/path/to/ClawGym-Agents/RL", str(rl)) in report + result.path.read_text() + "\n"
    moved = compose([*searchpath_override(out_dir), f"+experiment={result.name}", "paths.root=/elsewhere/RL"])
    text = OmegaConf.to_yaml(OmegaConf.create(to_plain(moved)))
    assert str(rl.parent) not in text, [line for line in text.splitlines() if str(rl.parent) in line]


@needs_registry
@pytest.mark.skipif(not SEED.is_file(), reason=f"seed script {SEED} not found (../shared is absent outside "
                                                 "the team workplace)")
def test_paths_a_script_sets_under_its_root_are_written_relative_to_the_root(seed_checkout, tmp_path):  # noqa: F811
    """A checkpoint the script takes from elsewhere under its checkout (``HF_CKPT``) is written as
    ``${paths.root}/...``, never as the absolute folder of the machine it was imported on."""
    from clawgym.importer.entry import format_result, import_script

    rl = _seed_in_a_repository(seed_checkout, tmp_path)
    result = import_script(rl / SEED.name, out_dir=tmp_path / "conf",
                           env={"HF_CKPT": str(rl / "local" / "models" / "other-ckpt")})
    assert result.ok, format_result(result)
    assert result.body["paths"]["hf_checkpoint"] == "${paths.root}/local/models/other-ckpt"
    keys = [line.split("#")[0] for line in result.path.read_text().splitlines() if not line.lstrip().startswith("#")]
    assert [line for line in keys if str(rl) in line] == [f"  root: {rl}"]


def _seed_alone(tmp_path, *, with_slime: bool) -> Path:
    """The seed copied out of its checkout: no ``slime/`` beside it, or one without the model."""
    folder = Path(os.path.realpath(tmp_path)) / "alone"
    folder.mkdir()
    shutil.copy(SEED, folder / SEED.name)
    if with_slime:
        from tests.test_seed_parity import QWEN3_4B_MODEL_SCRIPT

        models = folder / "slime" / "scripts" / "models"
        models.mkdir(parents=True)
        (models / "qwen3-4B.sh").write_text(QWEN3_4B_MODEL_SCRIPT)
    return folder / SEED.name


@pytest.mark.skipif(not SEED.is_file(), reason=f"seed script {SEED} not found (../shared is absent outside "
                                                 "the team workplace)")
def test_seed_outside_its_checkout_is_refused_naming_the_folder_it_wants(tmp_path, capsys):
    script = _seed_alone(tmp_path, with_slime=False)
    code, out = run_cli([str(script), "--out", str(tmp_path / "conf")], capsys)
    assert code == 2, out
    assert "Traceback" not in out
    assert "submitted no Ray job (exit status 1)" in out
    assert f"the script's own check failed: `cd -- {script.parent / 'slime'}`" in out
    assert f"it wants the folder {script.parent / 'slime'}" in out


@pytest.mark.skipif(not SEED.is_file(), reason=f"seed script {SEED} not found (../shared is absent outside "
                                                 "the team workplace)")
def test_seed_without_its_model_is_refused_with_its_own_message_and_the_env_that_satisfies_it(tmp_path, capsys):
    script = _seed_alone(tmp_path, with_slime=True)
    folder = script.parent / "local" / "models" / "Qwen3-4B-Instruct-2507"
    code, out = run_cli([str(script), "--out", str(tmp_path / "conf")], capsys)
    assert code == 2, out
    assert "Traceback" not in out
    assert f"the script's own check failed: `[ ! -d {folder} ]`" in out
    assert f"it says: ERROR: HF model not found at {folder}" in out
    assert f"it wants the folder {folder}" in out
    assert "or pass --env HF_CKPT=FOLDER" in out


@needs_registry
def test_inexpressible_script_names_each_problem_and_exits_nonzero(slime_checkout, tmp_path, capsys):
    code, out = run_cli([str(slime_checkout / LAYOUT["run-inexpressible.sh"]), "--out", str(tmp_path / "conf")],
                        capsys)
    assert code == 1, out
    assert "--rollout-batch-sise: not a flag of trainer=" in out and "closest: --rollout-batch-size" in out
    assert "`python3 tools/convert_hf_to_torch_dist.py --hf-checkpoint" in out
    assert f"the script writes {slime_checkout / 'scripts' / 'hostfile'}" in out
    assert "parity: NOT the same run" in out


@needs_registry
def test_a_changed_experiment_prints_the_difference_table(imported, slime_checkout, tmp_path, capsys):
    result, _ = imported["run-qwen3-4B-colocate.sh"]
    out_dir = tmp_path / "conf"
    path = out_dir / "experiment" / "colo.yaml"
    path.parent.mkdir(parents=True)
    text = result.path.read_text()
    assert "\n  batch_size: 16\n" in text
    path.write_text(text.replace("\n  batch_size: 16\n", "\n  batch_size: 3\n", 1))
    script = str(slime_checkout / LAYOUT["run-qwen3-4B-colocate.sh"])
    code, out = run_cli([script, "--out", str(out_dir), "--name", "colo", "--check"], capsys)
    assert code == 1, out
    assert "differences (1):" in out
    # The differences table (the deliberate one above it lists --use-tensorboard, kept on on purpose).
    (row,) = [line for line in out.split("differences (1):")[1].splitlines() if line.startswith("flag ")]
    assert row.split()[1:5] == ["--rollout-batch-size", "(rollout_batch_size)", "16", "3"]


@needs_registry
def test_an_existing_experiment_is_not_overwritten(slime_checkout, tmp_path, capsys):
    script = str(slime_checkout / LAYOUT["run-qwen3-4B-colocate.sh"])
    target = tmp_path / "conf" / "experiment" / "mine.yaml"
    target.parent.mkdir(parents=True)
    target.write_text("# my own experiment\n")
    code, out = run_cli([script, "--out", str(tmp_path / "conf"), "--name", "mine"], capsys)
    assert code == 2 and "exists" in out and "--force" in out
    assert target.read_text() == "# my own experiment\n"


@needs_registry
def test_secret_values_never_reach_the_experiment(imported):
    result, report = imported["run-glm4.5-106B-A12B-4nodes.sh"]
    assert WANDB_SECRET not in result.path.read_text() and WANDB_SECRET not in report
    assert "--wandb-key: secrets are read from the environment at launch" in report
    assert result.body["wandb"]["enabled"] is True


@needs_registry
def test_imported_experiment_dry_runs_through_train_py(imported, slime_checkout, tmp_path):
    """`python train.py +experiment=NAME dry_run=true` plans exactly the script's trainer argv."""
    import json

    from clawgym.importer.parity import build_parser, parse_argv
    from clawgym.registry import load_registry

    result, _ = imported["run-qwen3-4B-colocate.sh"]
    out_dir = result.path.parent.parent
    proc = subprocess.run(
        [sys.executable, str(ROOT / "train.py"), f"hydra.searchpath=[file://{out_dir}]",
         f"+experiment={result.name}", "dry_run=true", f"hydra.run.dir={tmp_path / 'run'}"],
        cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    plan = json.loads((tmp_path / "run" / "launch_plan.json").read_text())
    reg = load_registry("slime")
    parser = build_parser(reg)
    (sub,) = run_script(slime_checkout / LAYOUT["run-qwen3-4B-colocate.sh"]).submits
    ours = parse_argv(parser, reg, plan["entrypoint"][2:]).values
    theirs = parse_argv(parser, reg, sub.entrypoint[2:]).values
    assert plan["entrypoint"][1] == "train.py"
    # The one deliberate difference: TensorBoard events stay on, so clawgym runs / report show curves.
    assert {k: (theirs[k], v) for k, v in ours.items() if v != theirs[k]} == {"use_tensorboard": (False, True)}


# ---------------------------------------------------------------- scripts written for a multi-node cluster


@needs_registry
def test_multi_node_script_imports_to_an_existing_cluster_with_the_address_left_to_set(slime_checkout, tmp_path,
                                                                                         capsys):
    """A script that starts a head here and asks for more GPUs than this node has (slime v0.3.1's
    run-qwen3-235B-A22B.sh and 7 others) runs on a cluster of several nodes: the experiment names
    cluster=existing, leaves ray.address to give, validates with it given, and the import exits 0."""
    from clawgym.config.compose import compose
    from clawgym.validate import violations

    out_dir = tmp_path / "conf"
    # The head node's address, as a user of the script gives it (the script passes it to the job as
    # MASTER_ADDR, as slime v0.3.1's multi-node scripts do): the experiment's job gets the same.
    code, out = run_cli([str(slime_checkout / LAYOUT["run-qwen3-30B-A3B-2nodes.sh"]), "--out", str(out_dir),
                         "--name", "two_nodes", "--env", "MASTER_ADDR=10.0.0.1"], capsys)
    assert code == 0, out
    assert "local-head-gpus-fit" not in out
    assert "left to set" in out and "ray.address" in out
    assert "ray.address=http://127.0.0.1:8265" in out  # the command to run names the address to give
    text = (out_dir / "experiment" / "two_nodes.yaml").read_text()
    assert "override /cluster: existing" in text
    search = [f"hydra.searchpath=[file://{out_dir}]", "+experiment=two_nodes"]
    assert "Left to set at launch" in text and "ray.address" in text
    # Without the address it is refused naming the key to set; with it, it validates where it runs.
    assert [v.code for v in violations(compose(search)) if v.severity == "error"] == ["existing-cluster-needs-address"]
    assert [v.format() for v in violations(compose([*search, "ray.address=http://10.0.0.1:8265"]))
            if v.severity == "error"] == []
    assert "node_ip: 10.0.0.1" in text  # the job's MASTER_ADDR (ray.node_ip), not the loopback default


def test_a_file_compared_by_content_keeps_a_launch_that_starts_no_head():
    """slime v0.3.1's run-glm5.2-744B-A40B.sh is a multi-node script that also passes a generated
    --sglang-config: comparing that file by its content must keep the experiment's launch one that starts
    no head (cluster=existing), or the script's `ray start --num-gpus 8` counts as a difference."""
    from types import SimpleNamespace

    from clawgym.importer.compare import Launch
    from clawgym.importer.parity import Parsed
    from clawgym.importer.solver import Importer

    owner = SimpleNamespace(kind="file", key="sglang.models")
    me = SimpleNamespace(owners=SimpleNamespace(for_dest=lambda dest: [(None, owner)] if dest == "sglang_config" else []))
    engines = "sglang:\n  - name: default\n    server_groups:\n      - worker_type: regular\n        num_gpus: 8\n"
    ours = Launch("train.py", Parsed({"sglang_config": "/tmp/engines.yaml"}, []), {}, "/slime", None,
                  starts_head=False)
    got = Importer.by_content(me, ours, {"/tmp/engines.yaml": engines})
    assert isinstance(got.parsed.values["sglang_config"], dict)  # compared by content
    assert got.starts_head is False and got.head_gpus is None and got.env == {} and got.working_dir == "/slime"


# ---------------------------------------------------------------- clean refusals


@pytest.mark.parametrize("out", ["/proc/x", "/dev/null/conf"])
def test_an_unwritable_out_is_a_clean_refusal_naming_the_option(out, slime_checkout, capsys):
    code, text = run_cli([str(slime_checkout / LAYOUT["run-qwen3-4B-colocate.sh"]), "--out", out], capsys)
    assert code == 2, text
    assert "Traceback" not in text
    assert f"--out {out}" in text and "--out conf" in text
