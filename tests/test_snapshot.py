"""Launch snapshots: content, atomicity, no overwrite, no secrets (clawgym/snapshot/)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import List, Optional, Sequence

import pytest
import yaml

from clawgym.snapshot import write as snap_write
from clawgym.snapshot import marks as snap_marks
from clawgym.config.compose import compose, config_dir
from clawgym.plan.build import build_plan
from clawgym.config.schema import GROUPS
from clawgym.snapshot.layout import (CHOICES_FILE, CONFIG_FILE, MANIFEST_FILE, META_FILE, OVERRIDES_FILE, PLAN_FILE, RESOLVED_FILE, SUBMITTED_FILE, SnapshotError)
from clawgym.snapshot.read import find_snapshot, list_snapshots
from clawgym.snapshot.records import LaunchRecord, recorded_launch
from clawgym.snapshot.write import write_launch_snapshot

ROOT = Path(__file__).resolve().parent.parent
#: Secret values the tests put into the environment; none may ever be written.
SECRET_WANDB = "wandb-sentinel-0123456789abcdef0123456789abcdef"
SECRET_SGLANG = "sglang-sentinel-fedcba9876543210"
SNAPSHOT_FILES = {CONFIG_FILE, RESOLVED_FILE, OVERRIDES_FILE, CHOICES_FILE, PLAN_FILE, META_FILE}


def launch_snapshot(save: Path, overrides: Sequence[str] = (), *, timestamp: str = "20260101_000000",
                    environ: Optional[dict] = None, record: Optional[LaunchRecord] = None, submitted: bool = True):
    """Compose, plan and snapshot a launch into ``save`` as the launcher does, then (unless
    ``submitted`` is false) mark it submitted as the launcher does once Ray took the job;
    (cfg, plan, path)."""
    ov = [f"paths.save={save}", *overrides]
    cfg = compose(ov)
    plan = build_plan(cfg, environ=environ if environ is not None else {}, timestamp=timestamp)
    with recorded_launch(record or LaunchRecord(overrides=ov, choices={"model": "qwen3_4b"})):
        path = write_launch_snapshot(cfg, plan)
    if submitted:
        snap_marks.mark_submitted(path, plan.submission_id)
    return cfg, plan, path


def files_under(path: Path) -> List[Path]:
    return [p for p in Path(path).rglob("*") if p.is_file()]


def assert_no_secret_in_tree(path: Path, secrets: Sequence[str] = (SECRET_WANDB, SECRET_SGLANG)) -> None:
    files = files_under(path)
    assert files, f"nothing written under {path}"
    for f in files:
        data = f.read_bytes()
        for s in secrets:
            assert s.encode() not in data, f"secret value found in {f}"


@pytest.fixture
def secret_env(monkeypatch):
    monkeypatch.setenv("WANDB_API_KEY", SECRET_WANDB)
    monkeypatch.setenv("SGLANG_API_KEY", SECRET_SGLANG)


def test_snapshot_holds_config_overrides_choices_plan_and_meta(tmp_path):
    save = tmp_path / "run"
    cfg, plan, path = launch_snapshot(save, ["rollout.temperature=0.9"])
    assert path.parent == save / "clawgym" / "snapshots"
    assert {p.name for p in path.iterdir()} == SNAPSHOT_FILES | {MANIFEST_FILE, SUBMITTED_FILE}
    unresolved = yaml.safe_load((path / CONFIG_FILE).read_text())
    resolved = yaml.safe_load((path / RESOLVED_FILE).read_text())
    # The unresolved config keeps interpolations; the resolved one holds what the run used.
    assert unresolved["perf"]["tensor_parallel"] == "${gpu_layout.actor_gpus}"
    assert resolved["perf"]["tensor_parallel"] == 4
    assert resolved["rollout"]["temperature"] == 0.9
    assert resolved["paths"]["save"] == str(save)
    assert yaml.safe_load((path / OVERRIDES_FILE).read_text()) == [f"paths.save={save}", "rollout.temperature=0.9"]
    assert yaml.safe_load((path / CHOICES_FILE).read_text()) == {"model": "qwen3_4b"}
    assert json.loads((path / PLAN_FILE).read_text()) == plan.to_dict()
    meta = json.loads((path / META_FILE).read_text())
    assert meta["submission_id"] == plan.submission_id and meta["id"] == path.name
    assert set(meta["versions"]) >= {"clawgym", "hydra-core", "omegaconf", "ray"}
    assert meta["versions"]["hydra-core"] and meta["versions"]["omegaconf"]
    assert meta["host"] and meta["created"] and meta["created_unix"] > 0
    assert meta["checkpoints_at_launch"]["iterations"] == []


def test_snapshot_records_trainer_git_commit_and_dirty_flag(tmp_path):
    repo = tmp_path / "rl"
    (repo / "slime").mkdir(parents=True)
    env = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t",
           "GIT_COMMITTER_EMAIL": "t@t"}
    git = lambda *a: subprocess.run(["git", "-C", str(repo), *a], check=True, capture_output=True, env=env)  # noqa: E731
    git("init", "-q")
    (repo / "slime" / "train.py").write_text("print('v1')\n")
    git("add", ".")
    git("commit", "-q", "-m", "v1")
    head = subprocess.run(["git", "-C", str(repo), "rev-parse", "HEAD"], capture_output=True, text=True).stdout.strip()
    _, _, clean = launch_snapshot(tmp_path / "a", [f"paths.root={repo}"])
    (repo / "slime" / "train.py").write_text("print('v2')\n")
    _, _, dirty = launch_snapshot(tmp_path / "b", [f"paths.root={repo}"])
    git_clean = json.loads((clean / META_FILE).read_text())["git"]
    git_dirty = json.loads((dirty / META_FILE).read_text())["git"]
    assert git_clean["root"]["commit"] == head and git_clean["root"]["dirty"] is False
    assert git_clean["slime"]["commit"] == head
    assert git_dirty["root"]["dirty"] is True
    # Megatron-LM does not exist in this checkout: recorded as such, not an error.
    assert git_clean["megatron"]["commit"] is None and git_clean["megatron"]["error"]


def test_snapshot_of_non_git_checkout_says_so(tmp_path):
    root = tmp_path / "plain"
    (root / "slime").mkdir(parents=True)
    _, _, path = launch_snapshot(tmp_path / "s", [f"paths.root={root}"])
    info = json.loads((path / META_FILE).read_text())["git"]["slime"]
    # tmp dirs are outside any repository here.
    assert info["commit"] is None and info["error"] == "not a git checkout"


def test_second_launch_adds_a_snapshot_and_never_overwrites(tmp_path):
    save = tmp_path / "run"
    _, _, first = launch_snapshot(save, ["rollout.temperature=0.7"])
    before = {p.name: p.read_bytes() for p in first.iterdir()}
    # Same submission id on purpose: the name clash must not replace the first snapshot.
    _, _, second = launch_snapshot(save, ["rollout.temperature=0.8"])
    _, _, third = launch_snapshot(save, ["rollout.temperature=0.9"], timestamp="20260101_000500")
    assert len({first, second, third}) == 3
    assert {p.name: p.read_bytes() for p in first.iterdir()} == before
    temps = [s.config["rollout"]["temperature"] for s in list_snapshots(save)]
    assert temps == [0.7, 0.8, 0.9]
    assert find_snapshot(save)[0].path == third


def test_failed_write_leaves_no_partial_snapshot(tmp_path, monkeypatch):
    save = tmp_path / "run"
    real = snap_write.write_synced
    calls = []

    def failing(path, text):
        calls.append(path)
        if len(calls) == 3:
            raise OSError(28, "No space left on device")
        real(path, text)

    monkeypatch.setattr(snap_write, "write_synced", failing)
    with pytest.raises(SnapshotError) as err:
        launch_snapshot(save)
    assert "No space left on device" in str(err.value) and "fix:" in str(err.value)
    base = save / "clawgym" / "snapshots"
    assert list(base.iterdir()) == []  # not even the temp dir
    assert list_snapshots(save) == []


def test_crash_mid_write_leaves_no_visible_snapshot(tmp_path):
    """A process killed while writing (no cleanup runs) leaves only a hidden temp dir."""
    save = tmp_path / "run"
    script = textwrap.dedent(f"""
        import os, sys
        sys.path.insert(0, {str(ROOT)!r})
        from clawgym.snapshot import write as snapshot
        from clawgym.config.compose import compose
        from clawgym.plan.build import build_plan
        real, n = snapshot.write_synced, []
        def dying(path, text):
            n.append(path)
            real(path, text)
            if len(n) == 2:
                os._exit(9)
        snapshot.write_synced = dying
        cfg = compose(["paths.save={save}"])
        snapshot.write_launch_snapshot(cfg, build_plan(cfg, environ={{}}, timestamp="20260101_000000"))
    """)
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 9, proc.stderr
    entries = list((save / "clawgym" / "snapshots").iterdir())
    assert len(entries) == 1 and entries[0].name.startswith(".tmp-")
    assert list_snapshots(save) == []
    with pytest.raises(SnapshotError):
        find_snapshot(save)
    # The next launch clears what the dead process left and writes a whole snapshot.
    _, _, path = launch_snapshot(save)
    assert [p.name for p in (save / "clawgym" / "snapshots").iterdir()] == [path.name]


def test_secret_values_never_written_only_their_names(tmp_path, secret_env):
    save = tmp_path / "run"
    cfg, plan, path = launch_snapshot(save, ["wandb.enabled=true"], environ=dict(os.environ))
    meta = json.loads((path / META_FILE).read_text())
    assert meta["secret_env"] == {"SGLANG_API_KEY": ["SGLANG_API_KEY"], "WANDB_API_KEY": ["WANDB_KEY", "WANDB_API_KEY"]}
    assert (save / "clawgym" / "wandb_config.yaml").is_file()
    assert_no_secret_in_tree(save)


def test_secret_value_in_config_refuses_snapshot_and_writes_nothing(tmp_path, secret_env):
    save = tmp_path / "run"
    with pytest.raises(SnapshotError) as err:
        launch_snapshot(save, [f"+extra_env.LEAK={SECRET_SGLANG}"])
    msg = str(err.value)
    assert "$SGLANG_API_KEY" in msg and "fix:" in msg and SECRET_SGLANG not in msg
    assert not save.exists()


def test_hydra_run_records_task_overrides_and_group_choices(tmp_path):
    """Under @hydra.main the snapshot takes overrides and choices from HydraConfig."""
    save = tmp_path / "run"
    app = tmp_path / "app.py"
    app.write_text(textwrap.dedent(f"""
        import os, sys
        sys.path.insert(0, {str(ROOT)!r})
        import hydra
        import clawgym.config.compose
        from clawgym.plan.build import build_plan
        from clawgym.snapshot.write import write_launch_snapshot

        @hydra.main(version_base="1.3", config_path={str(config_dir())!r}, config_name="config")
        def main(cfg):
            print(write_launch_snapshot(cfg, build_plan(cfg, environ={{}}, timestamp="20260101_000000")))

        main()
    """))
    overrides = [f"paths.save={save}", "gpu_layout=colocate_8", "rollout.temperature=0.6",
                 f"hydra.run.dir={tmp_path / 'hydra'}"]
    proc = subprocess.run([sys.executable, str(app), *overrides], capture_output=True, text=True, timeout=120,
                          cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    # Written, never submitted: read it by its path (the save dir lists no launch).
    s = find_snapshot(proc.stdout.strip().splitlines()[-1])[0]
    assert s.overrides == overrides[:3]
    assert s.choices["gpu_layout"] == "colocate_8" and s.choices["model"] == "qwen3_4b"
    # Choices of clawgym's groups only (not Hydra's own, such as hydra/launcher).
    assert set(s.choices) == set(GROUPS)
    assert s.config["gpu_layout"]["trainer_script"] == "train.py"
    assert s.meta["origin"]["command"] == "hydra"


def test_sweep_jobs_each_snapshot_their_own_overrides_and_stamp_their_checkpoints(
        clawgym_checkout, ray_cluster, tmp_path):
    """A real two-job sweep on the session's Ray head: per-job overrides, choices and stamps."""
    from clawgym.snapshot.checkpoints import list_checkpoints
    from tests.fixtures.checkout import LAUNCH_SKIPS, checkout_overrides

    overrides = [*checkout_overrides(clawgym_checkout, skip_checks=LAUNCH_SKIPS), *ray_cluster.overrides(),
                 "sandbox.cleanup_leftovers=false", f"paths.save={tmp_path}/exp/${{run_name}}",
                 f"hydra.sweep.dir={tmp_path}/multirun", "gpu_layout=split_1_1",
                 "+extra_env.STANDIN_CHECKPOINTS=1", "+extra_env.STANDIN_CHECKPOINT_EVERY=0.2",
                 "+extra_env.STANDIN_SLEEP=3", "rollout.temperature=0.6,0.8"]
    env = {k: v for k, v in os.environ.items() if k not in ("WANDB_API_KEY", "WANDB_KEY", "SGLANG_API_KEY")}
    env.update(CLAWGYM_STATE_DIR=str(tmp_path / "state"))
    proc = subprocess.run([sys.executable, str(ROOT / "train.py"), "-m", *overrides], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    saves = sorted((tmp_path / "exp").iterdir())
    assert len(saves) == 2
    for save, temp in zip(saves, ("0.6", "0.8")):
        (s,) = list_snapshots(save)
        # This job's concrete override, not the sweep's "0.6,0.8".
        assert f"rollout.temperature={temp}" in s.overrides and "rollout.temperature=0.6,0.8" not in s.overrides
        assert s.choices["gpu_layout"] == "split_1_1" and s.meta["origin"]["command"] == "sweep"
        assert s.config["rollout"]["temperature"] == float(temp)
        assert [c.stamp_id for c in list_checkpoints(save)] == [s.id]


def test_unwritable_save_dir_is_a_user_error(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("not a dir")
    with pytest.raises(SnapshotError) as err:
        launch_snapshot(blocker / "run")
    assert str(blocker / "run") in str(err.value) and "paths.save" in str(err.value)
