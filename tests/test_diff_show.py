"""``clawgym diff`` and ``clawgym show`` on real snapshots and override sets."""

from __future__ import annotations

from clawgym.cli import main as cli
from clawgym.commands.diff import SET, clip, config_changes, flag_changes, parse_flags, resolve_side
from tests.test_snapshot import launch_snapshot
from tests.test_snapshot_watcher import write_checkpoint


def test_flags_follow_argparse_semantics():
    flags = parse_flags(["--a", "1", "--b", "--c", "x", "y", "--a", "2", "--d=v", "--e", "-3"])
    # The last --a wins, a bare flag is set, nargs values stay together, negative numbers are values.
    assert flags == {"--a": "2", "--b": SET, "--c": "x y", "--d": "v", "--e": "-3"}


def test_config_and_flag_changes_include_added_and_removed():
    assert config_changes({"a": {"b": 1, "c": 2}}, {"a": {"b": 1, "c": 3, "d": 4}}) == [
        ("a.c", 2, 3), ("a.d", "(absent)", 4)]
    assert flag_changes(["python3", "train.py", "--x", "1", "--colocate"],
                        ["python3", "train_async.py", "--x", "2"]) == [
        ("(trainer script)", "train.py", "train_async.py"), ("--x", "1", "2"), ("--colocate", SET, "(absent)")]


def test_diff_two_save_dirs_shows_changed_keys_and_flags(tmp_path, capsys):
    a, b = tmp_path / "a", tmp_path / "b"
    launch_snapshot(a, ["rollout.temperature=0.7"])
    launch_snapshot(b, ["rollout.temperature=0.9", "gpu_layout=colocate_8", "rollout.train_num_workers=32"])
    assert cli(["diff", str(a), str(b)]) == 0
    out = capsys.readouterr().out
    rows = {line.split("│")[0].strip(): [c.strip() for c in line.split("│")[1:]]
            for line in out.splitlines() if "│" in line}
    assert rows["rollout.temperature"] == ["0.7", "0.9"]
    assert rows["gpu_layout.colocate"] == ["false", "true"]
    # Long values lose their middle, not their ends: two save dirs still read differently.
    assert rows["paths.save"] == [clip(str(a)), clip(str(b))] and clip(str(a)) != clip(str(b))
    assert rows["--rollout-temperature"] == ["0.7", "0.9"]
    assert rows["(trainer script)"] == ["train_async.py", "train.py"]
    assert rows["--colocate"] == ["(absent)", "(set)"]
    assert rows["--tensor-model-parallel-size"] == ["4", "8"]
    # Keys that reach the job through its environment show there.
    assert rows["OPENCLAW_TRAIN_NUM_WORKERS"] == ["64", "32"]
    # Unchanged keys stay out of the table.
    assert "model.num_layers" not in rows and "--num-layers" not in rows


def test_diff_snapshot_against_override_set(tmp_path, capsys):
    save = tmp_path / "a"
    _, _, snap = launch_snapshot(save, ["rollout.batch_size=16"])
    assert cli(["diff", str(snap), f"paths.save={save} rollout.batch_size=32"]) == 0
    out = capsys.readouterr().out
    assert "config keys that differ (1)" in out and "rollout.batch_size" in out
    assert "--rollout-batch-size" in out and "composed from overrides" in out


def test_diff_two_override_sets_and_identical_sides(capsys):
    a = resolve_side("rollout.temperature=0.8")
    b = resolve_side("rollout.temperature=0.8 gpu_layout=colocate_8")
    assert ("gpu_layout.colocate", False, True) in config_changes(a.config, b.config)
    assert cli(["diff", "", "sglang.tp=1"]) == 0
    out = capsys.readouterr().out
    assert "config: identical" in out and "trainer flags: identical" in out


def test_diff_reports_missing_path_and_bad_override_without_traceback(tmp_path, capsys):
    assert cli(["diff", str(tmp_path / "nope"), ""]) == 2
    assert "does not exist" in capsys.readouterr().err
    assert cli(["diff", "rollout.temprature=1", ""]) == 2
    err = capsys.readouterr().err
    assert "temprature" in err and "Traceback" not in err


def test_show_prints_config_overrides_argv_versions_and_checkpoints(tmp_path, capsys):
    save = tmp_path / "run"
    _, plan, first = launch_snapshot(save, ["rollout.temperature=0.6"], timestamp="20260101_000000")
    from clawgym.snapshot.checkpoints import CheckpointWatcher

    w = CheckpointWatcher(save, first, poll_interval=60)
    write_checkpoint(save, 1)
    w.stop()
    write_checkpoint(save, 2)  # written while no launcher watched
    _, _, second = launch_snapshot(save, ["rollout.temperature=0.5"], timestamp="20260101_010000")
    assert cli(["show", str(save)]) == 0
    out = capsys.readouterr().out
    assert first.name in out and second.name + " *" in out  # both launches, the latest shown
    assert "rollout.temperature=0.5" in out
    assert "--rollout-temperature 0.5" in out
    assert "hydra-core" in out and "omegaconf" in out
    lines = {line.split("│")[0].strip(): line for line in out.splitlines() if line.strip().startswith("iter_")}
    assert first.name in lines["iter_0000001"] and "none" in lines["iter_0000002"]
    assert f"clawgym stamp {save}" in out
    assert "config (resolved):" in out and "temperature: 0.5" in out
    # A single snapshot or a checkpoint dir can be shown too; the unresolved config keeps interpolations.
    assert cli(["show", str(save / "iter_0000001"), "--unresolved"]) == 0
    out = capsys.readouterr().out
    assert "temperature: 0.6" in out and "${gpu_layout.actor_gpus}" in out


def test_show_of_a_dir_without_snapshot_fails_clearly(tmp_path, capsys):
    assert cli(["show", str(tmp_path)]) == 2
    assert "no clawgym snapshot" in capsys.readouterr().err


def test_a_long_cell_keeps_both_ends():
    assert clip("abc", width=5) == "abc"
    assert clip("/tmp/a-very-long-folder/run-a", width=12) == "/tmp/a…run-a"
    assert len(clip("x" * 100, width=12)) == 12


def _parts(out: str):
    """(set part, derived part) of a diff's config section: rows by key."""
    head, _, rest = out.partition("derived keys that follow")
    derived, _, _ = rest.partition("trainer flags")
    rows = lambda text: {line.split("│")[0].strip() for line in text.splitlines() if "│" in line}  # noqa: E731
    return rows(head.partition("trainer flags")[0]), rows(derived)


def test_diff_shows_interpolated_keys_as_derived_apart_from_the_key_the_user_changed(capsys):
    """Issue 35: one change of run_name read as "5 keys differ" (paths.save, wandb.group, slurm.job_name,
    kuberay.mount_path follow it through their ${...})."""
    assert cli(["diff", "", "run_name=foo"]) == 0
    out = capsys.readouterr().out
    assert "config keys that differ (1):" in out
    changed, derived = _parts(out)
    assert changed == {"key", "run_name"}
    assert {"wandb.group", "slurm.job_name", "paths.save", "kuberay.mount_path"} <= derived
    # A derived key the user sets on one side is a change of its own.
    assert cli(["diff", "", "run_name=foo wandb.group=mine"]) == 0
    changed, derived = _parts(capsys.readouterr().out)
    assert "wandb.group" in changed and "wandb.group" not in derived and "slurm.job_name" in derived


def test_diff_of_two_sweep_jobs_shows_the_swept_key_and_what_the_sweep_assigned_apart(tmp_path, capsys, monkeypatch):
    """Two jobs of `-m rollout.temperature=0.7,0.9`: the sweep set each job's run_name and api port;
    the user changed one key."""
    from clawgym.snapshot.records import LaunchRecord

    monkeypatch.setattr("sys.argv", ["train.py", "-m", "rollout.temperature=0.7,0.9"])
    snaps = []
    for n, t in enumerate(("0.7", "0.9")):
        save = tmp_path / f"job{n}"
        ov = [f"rollout.temperature={t}", f"run_name=sweep-t{t}", f"sglang.api_port={30000 + n}"]
        record = LaunchRecord(overrides=[f"paths.save={save}", *ov], choices={"model": "qwen3_4b"},
                              origin={"command": "hydra", "mode": "RunMode.MULTIRUN"})
        launch_snapshot(save, ov, record=record)
        snaps.append(save)
    assert cli(["diff", str(snaps[0]), str(snaps[1])]) == 0
    out = capsys.readouterr().out
    changed, derived = _parts(out)
    # paths.save was typed per job here (the fixture's override); the rest is the sweep's or follows.
    assert "rollout.temperature" in changed
    assert {"run_name", "sglang.api_port", "wandb.group", "slurm.job_name"} <= derived
    assert "run_name" not in changed and "sglang.api_port" not in changed
