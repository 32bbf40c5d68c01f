"""``clawgym resume``: the exact snapshot config, --load set, overrides shown as a diff."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from clawgym.cli import main as cli
from clawgym.commands.diff import flatten, parse_flags
from clawgym.commands.resume import build_resume
from clawgym.config.compose import to_plain
from clawgym.snapshot.records import recorded_launch
from tests.test_snapshot import SECRET_SGLANG, SECRET_WANDB, assert_no_secret_in_tree, launch_snapshot
from tests.test_snapshot_watcher import write_checkpoint


@pytest.fixture
def launched(tmp_path):
    """A save dir launched with a few overrides and holding two complete checkpoints."""
    save = tmp_path / "run"
    overrides = ["rollout.temperature=0.9", "gpu_layout=split_2_2", "+extra_env.FOO=bar", "extra_args=[--seed,7]"]
    cfg, plan, snap = launch_snapshot(save, overrides)
    for it in (1, 2):
        write_checkpoint(save, it)
    return save, cfg, plan, snap


def test_resume_reproduces_the_snapshot_config_exactly_with_load_set(launched, tmp_path, monkeypatch):
    save, cfg, plan, _ = launched
    want = to_plain(cfg)  # resolved now, in the launch's working dir
    want["checkpoint"]["load"] = str(save)
    # Resuming from elsewhere must not move paths that followed the launch's working dir.
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    monkeypatch.delenv("CLAWGYM_RL_ROOT", raising=False)
    _, new_cfg, new_plan, record = build_resume(save, environ={}, timestamp="20260102_000000")
    assert to_plain(new_cfg) == want
    # Same trainer argv except --load, which points at the save dir.
    old_flags, new_flags = parse_flags(plan.entrypoint[2:]), parse_flags(new_plan.entrypoint[2:])
    assert new_flags.pop("--load") == str(save) and "--load" not in old_flags
    assert new_flags == old_flags and new_plan.entrypoint[:2] == plan.entrypoint[:2]
    # Every launch keeps its TensorBoard events in its own folder of the save dir (named after
    # its submission id); the rest of the job's environment is the snapshot's.
    old_env, new_env = (dict(p.runtime_env["env_vars"]) for p in (plan, new_plan))
    assert new_env.pop("TENSORBOARD_DIR") == f"{save}/tensorboard/{new_plan.submission_id}"
    assert old_env.pop("TENSORBOARD_DIR") == f"{save}/tensorboard/{plan.submission_id}"
    assert new_env == old_env and set(new_plan.runtime_env) == set(plan.runtime_env)
    assert new_plan.submission_id != plan.submission_id
    assert record.origin["command"] == "resume" and record.origin["load"] == str(save)


def test_resume_overrides_apply_on_top_and_move_derived_values(launched):
    save, cfg, plan, _ = launched
    _, new_cfg, new_plan, record = build_resume(save, ["rollout.temperature=0.5", "gpu_layout.actor_gpus=1"],
                                                environ={})
    c = to_plain(new_cfg)
    assert c["rollout"]["temperature"] == 0.5
    # perf.tensor_parallel follows gpu_layout.actor_gpus, as it did at launch.
    assert c["perf"]["tensor_parallel"] == 1
    flags = parse_flags(new_plan.entrypoint[2:])
    assert flags["--rollout-temperature"] == "0.5" and flags["--tensor-model-parallel-size"] == "1"
    assert record.overrides[-2:] == ["rollout.temperature=0.5", "gpu_layout.actor_gpus=1"]


def test_resume_group_override_switches_the_option(launched):
    save, *_ = launched
    _, new_cfg, new_plan, record = build_resume(save, ["gpu_layout=colocate_4"], environ={})
    c = to_plain(new_cfg)
    assert c["gpu_layout"]["colocate"] is True and c["gpu_layout"]["trainer_script"] == "train.py"
    assert new_plan.entrypoint[1] == "train.py" and "--colocate" in new_plan.entrypoint
    assert record.choices["gpu_layout"] == "colocate_4"
    # Everything else is still the snapshot's.
    assert c["rollout"]["temperature"] == 0.9 and c["extra_env"] == {"FOO": "bar"}


def test_resume_dry_run_shows_the_diff_then_the_plan(launched, capsys):
    save, *_ = launched
    # split_2_2 holds Qwen3-4B at 64k context on 2 actor GPUs of 80 GB: its memory plan does not fit, so the
    # dry run exits 2 as train.py's does (a launch would be refused by the preflight check memory).
    assert cli(["resume", str(save), "rollout.temperature=0.5", "--dry-run"]) == 2
    captured = capsys.readouterr()
    out = captured.out
    assert "clawgym: DOES NOT FIT: the memory plan" in captured.err
    config_part, flags_part = out.split("trainer flags that differ")
    assert "config keys that differ (2)" in config_part
    assert "rollout.temperature" in config_part and "0.9" in config_part and "0.5" in config_part
    assert "checkpoint.load" in config_part
    assert "--rollout-temperature" in flags_part and f"--load {save}" in out
    assert "equivalent command:" in out  # the plan follows the diff
    # ... with its memory plan, as a dry run of train.py shows it.
    assert "memory plan per GPU" in out and "GPU peak" in out
    assert cli(["resume", str(save), "--dry-run", "skip_checks=[memory]"]) == 0


def test_resume_takes_options_and_overrides_in_any_order(launched, capsys):
    save, *_ = launched
    # The order the refusal's own fix text suggests: options first, then overrides, mixed.
    assert cli(["resume", str(save), "--dry-run", "rollout.temperature=0.5", "+extra_env.BAR=baz",
                "skip_checks=[memory]"]) == 0
    out = capsys.readouterr().out
    assert "rollout.temperature" in out and "0.5" in out and "extra_env.BAR" in out
    # An unknown option is still refused by argparse.
    with pytest.raises(SystemExit) as exc:
        cli(["resume", str(save), "--dry-run", "--no-such-option", "rollout.temperature=0.5"])
    assert exc.value.code == 2
    assert "unrecognized arguments: --no-such-option" in capsys.readouterr().err


def test_resume_names_the_last_complete_checkpoint_and_a_newer_incomplete_one_it_does_not_load(launched, capsys):
    save, *_ = launched
    # A save cut short: iter_0000003 is there, the tracker still says 2.
    (save / "iter_0000003").mkdir()
    assert cli(["resume", str(save), "--dry-run", "skip_checks=[memory]"]) == 0
    out = capsys.readouterr().out
    assert "from the last complete checkpoint: iter_0000002" in out
    assert "note: iter_0000003" in out and "not loaded" in out


def test_resume_without_checkpoint_says_so_and_fails(tmp_path, capsys):
    save = tmp_path / "run"
    launch_snapshot(save)
    write_checkpoint(save, 1, complete=False)  # a save that never finished
    assert cli(["resume", str(save), "--dry-run"]) == 2
    err = capsys.readouterr().err
    assert "no checkpoint to resume from" in err and str(save) in err


def test_resume_of_a_dir_without_snapshot_fails_clearly(tmp_path, capsys):
    assert cli(["resume", str(tmp_path), "--dry-run"]) == 2
    assert "no clawgym snapshot" in capsys.readouterr().err


def test_resume_refuses_a_moved_save_dir_unless_paths_save_follows(launched, tmp_path, capsys):
    save, *_ = launched
    moved = tmp_path / "moved"
    save.rename(moved)
    assert cli(["resume", str(moved), "--dry-run"]) == 2
    assert "paths.save=" in capsys.readouterr().err
    _, new_cfg, new_plan, _ = build_resume(moved, [f"paths.save={moved}"], environ={})
    assert new_cfg.checkpoint.load == str(moved) and parse_flags(new_plan.entrypoint)["--save"] == str(moved)


def test_resume_bad_override_is_a_user_error(launched, capsys):
    save, *_ = launched
    assert cli(["resume", str(save), "rollout.temprature=0.5", "--dry-run"]) == 2
    err = capsys.readouterr().err
    assert "rollout.temprature" in err and "Traceback" not in err
    assert cli(["resume", str(save), "rollout.temperature=-1", "--dry-run"]) == 2
    assert "temperature-positive" in capsys.readouterr().err
    assert cli(["resume", str(save), "rollout.temperature=[", "--dry-run"]) == 2
    assert "Traceback" not in capsys.readouterr().err


def test_resumed_launch_snapshot_records_where_it_came_from(launched):
    save, _, _, first = launched
    from clawgym.snapshot.write import write_launch_snapshot

    snap, cfg, plan, record = build_resume(save, ["rollout.temperature=0.5"], environ={},
                                           timestamp="20260102_000000")
    with recorded_launch(record):
        path = write_launch_snapshot(cfg, plan)
    meta = json.loads((path / "meta.json").read_text())
    assert meta["origin"]["from_snapshot"] == str(first)
    assert meta["checkpoints_at_launch"]["iterations"] == [1, 2]
    assert flatten(json.loads((path / "launch_plan.json").read_text()))["submission_id"] == plan.submission_id


def test_resume_real_launch_continues_with_load_and_stamps_new_checkpoints(
        clawgym_checkout, ray_cluster, tmp_path):
    """A real run on the session's Ray head, then a real resume of it (recording stand-in trainer)."""
    import subprocess
    import sys

    from clawgym.snapshot.checkpoints import list_checkpoints
    from clawgym.snapshot.read import list_snapshots
    from tests.fixtures.checkout import LAUNCH_SKIPS, checkout_overrides

    root = Path(__file__).resolve().parent.parent
    save = tmp_path / "run"
    records = tmp_path / "records"
    env = {k: v for k, v in os.environ.items() if k not in ("WANDB_API_KEY", "WANDB_KEY", "SGLANG_API_KEY")}
    # Secrets in the launcher's environment: none may end up in any file the launches write.
    env.update(PYTHONPATH=str(root), CLAWGYM_STATE_DIR=str(tmp_path / "state"),
               WANDB_API_KEY=SECRET_WANDB, SGLANG_API_KEY=SECRET_SGLANG)
    # The stand-in writes its checkpoints early, then keeps running: stamps must land meanwhile.
    # (Its knobs travel in the config, so the resumed run gets them from the snapshot.)
    standin = [f"+extra_env.STANDIN_RECORD_DIR={records}", "+extra_env.STANDIN_CHECKPOINT_EVERY=0.2",
               "+extra_env.STANDIN_SLEEP=4"]
    first = subprocess.run(
        [sys.executable, str(root / "train.py"), *checkout_overrides(clawgym_checkout, skip_checks=LAUNCH_SKIPS),
         *ray_cluster.overrides(), f"paths.save={save}", "+extra_env.STANDIN_CHECKPOINTS=2", *standin,
         "wandb.enabled=true", "wandb.config_file=true",
         f"hydra.run.dir={tmp_path}/hydra"],
        env=env, capture_output=True, text=True, timeout=300, cwd=root)
    assert first.returncode == 0, first.stdout[-3000:] + first.stderr[-3000:]
    (s1,) = list_snapshots(save)
    assert [c.stamp_id for c in list_checkpoints(save)] == [s1.id, s1.id]
    assert "+extra_env.STANDIN_CHECKPOINTS=2" in s1.overrides and s1.choices["gpu_layout"] == "split_4_4"
    rec1 = json.loads(next(records.glob("*.json")).read_text())
    stamped_at = json.loads((save / "iter_0000002" / "clawgym_snapshot" / "stamp.json").read_text())["stamped_at"]
    assert stamped_at < rec1["end"], "the snapshot was placed only after the trainer exited"

    second = subprocess.run([sys.executable, "-m", "clawgym", "resume", str(save),
                             "+extra_env.STANDIN_CHECKPOINTS=3"],
                            env=env, capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert second.returncode == 0, second.stdout[-3000:] + second.stderr[-3000:]
    assert "config keys that differ" in second.stdout and "checkpoint.load" in second.stdout
    s1b, s2 = list_snapshots(save)
    assert s1b.id == s1.id and s2.meta["origin"]["command"] == "resume"
    rec2 = [r for r in (json.loads(p.read_text()) for p in records.glob("*.json")) if "--load" in r["argv"]]
    assert len(rec2) == 1 and parse_flags(rec2[0]["argv"][1:])["--load"] == str(save)
    # Everything but --load is the first run's argv.
    argv2 = list(rec2[0]["argv"])
    i = argv2.index("--load")
    del argv2[i:i + 2]
    assert argv2 == rec1["argv"]
    # The stand-in restarts at iteration 1 (it ignores --load): all three are the resumed run's.
    assert [c.stamp_id for c in list_checkpoints(save)] == [s2.id, s2.id, s2.id]
    # show and diff on the real save dir.
    shown = subprocess.run([sys.executable, "-m", "clawgym", "show", str(save), "--no-config"], env=env,
                           capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert shown.returncode == 0 and "resume" in shown.stdout and f"--load {save}" in shown.stdout
    diffed = subprocess.run([sys.executable, "-m", "clawgym", "diff", str(s1.path), str(s2.path)], env=env,
                            capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert diffed.returncode == 0 and "extra_env.STANDIN_CHECKPOINTS" in diffed.stdout
    # Every file written (snapshots, stamps, plans, logs, W&B config, Hydra's dir, the job's records)
    # and every line printed is free of secret values.
    assert (save / "clawgym" / "wandb_config.yaml").is_file() and list((save / "logs").glob("train_*.log"))
    for tree in (save, tmp_path / "hydra", records):
        assert_no_secret_in_tree(tree)
    for proc in (first, second, shown, diffed):
        assert SECRET_WANDB not in proc.stdout + proc.stderr and SECRET_SGLANG not in proc.stdout + proc.stderr
