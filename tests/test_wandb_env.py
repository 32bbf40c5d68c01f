"""W&B gets clawgym's nested config, tags and notes through the job environment; never the key."""

from __future__ import annotations

import json
import os
import struct
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any, Dict, List

import yaml

from clawgym.commands.diff import parse_flags
from clawgym.config.compose import compose, to_plain
from clawgym.plan.build import build_plan_from_dict
from clawgym.snapshot.records import LaunchRecord
from clawgym.trainer.wandb_env import CONFIG_FILE_ENV, run_tags, wandb_job_env
from tests.test_snapshot import SECRET_SGLANG, SECRET_WANDB, assert_no_secret_in_tree, launch_snapshot


def plain(overrides=()) -> Dict[str, Any]:
    return to_plain(compose(list(overrides)))


def test_no_wandb_no_wandb_env():
    assert wandb_job_env(plain(), use_wandb=False) == {}


def test_tags_and_notes_come_from_experiment_and_sweep_run_name():
    c = plain(["exp_name=grpo4b"])
    # As clawgym.sweep.core names a sweep job.
    c["run_name"] = "grpo4b_rollout.temperature=0.8,gpu_layout=split_1_1"
    env = wandb_job_env(c, use_wandb=True)
    assert env["WANDB_TAGS"].split(",") == ["grpo4b", "grpo4b_rollout.temperature=0.8;gpu_layout=split_1_1",
                                            "rollout.temperature=0.8", "gpu_layout=split_1_1"]
    assert "grpo4b_rollout.temperature=0.8,gpu_layout=split_1_1" in env["WANDB_NOTES"]


def test_tags_stay_within_wandb_limits():
    c = plain(["exp_name=" + "x" * 100])
    assert all(0 < len(t) <= 64 for t in run_tags(c))


def test_config_file_only_where_the_job_sees_the_launcher_filesystem(tmp_path):
    local = plain([f"paths.save={tmp_path}"])
    assert wandb_job_env(local, use_wandb=True)[CONFIG_FILE_ENV] == f"{tmp_path}/clawgym/wandb_config.yaml"
    remote = plain([f"paths.save={tmp_path}", "ray.address=http://head:8265"])
    assert CONFIG_FILE_ENV not in wandb_job_env(remote, use_wandb=True)
    shared = plain([f"paths.save={tmp_path}", "ray.address=http://head:8265", "wandb.config_file=true"])
    assert CONFIG_FILE_ENV in wandb_job_env(shared, use_wandb=True)
    assert CONFIG_FILE_ENV not in wandb_job_env(plain(["paths.save=null", "checkpoint.save_interval=null"]),
                                                use_wandb=True)
    assert CONFIG_FILE_ENV not in wandb_job_env(plain(["paths.save=relative/run"]), use_wandb=True)


def test_key_never_in_argv_or_plan(monkeypatch):
    monkeypatch.setenv("WANDB_API_KEY", SECRET_WANDB)
    plan = build_plan_from_dict(plain(), environ=dict(os.environ), timestamp="t")
    assert "--use-wandb" in plan.entrypoint and "--wandb-key" not in plan.entrypoint
    assert SECRET_WANDB not in plan.to_json()


# ---------------------------------------------------------------- offline run, as slime starts it

def read_wandb_records(path: Path) -> List[Any]:
    """Records of a wandb transaction log (a LevelDB-style log of protobuf Records)."""
    from wandb.proto import wandb_internal_pb2 as pb

    data = path.read_bytes()
    assert data[:4] == b":W&B", "not a wandb transaction log"
    block, pos, out, pending = 32768, 7, [], b""
    while pos + 7 <= len(data):
        left = block - pos % block
        if left < 7:  # block trailer padding
            pos += left
            continue
        _crc, length, kind = struct.unpack("<IHB", data[pos:pos + 7])
        chunk = data[pos + 7:pos + 7 + length]
        pos += 7 + length
        if kind == 0 and length == 0:
            continue
        if kind == 1:
            whole = chunk
        elif kind == 2:
            pending = chunk
            continue
        elif kind == 3:
            pending += chunk
            continue
        else:
            whole = pending + chunk
        rec = pb.Record()
        rec.ParseFromString(whole)
        out.append(rec)
    return out


def run_config_of(records: List[Any]) -> Dict[str, Any]:
    config: Dict[str, Any] = {}
    for rec in records:
        items = []
        if rec.HasField("run"):
            items = rec.run.config.update
        elif rec.HasField("config"):
            items = rec.config.update
        for item in items:
            key = item.key or ".".join(item.nested_key)
            config[key] = json.loads(item.value_json)
    return config


SLIME_LIKE_INIT = textwrap.dedent("""
    import json, sys
    import wandb
    args = json.loads(sys.argv[1])
    # As slime's init_wandb_primary: group with a random suffix, name from the group, the flat args as config.
    group = args["wandb_group"] + "_" + "abc123"
    run = wandb.init(mode="offline", project=args["wandb_project"], group=group, name=group + "-RANK_0",
                     config=args)
    print(json.dumps({"dir": run.dir, "tags": list(run.tags), "notes": run.notes, "name": run.name, "id": run.id}))
    run.finish()
""")


def slime_args(entrypoint: List[str]) -> Dict[str, Any]:
    """The flat ``args.__dict__`` slime would hand to wandb (no key: clawgym never passes one)."""
    args = {k.lstrip("-").replace("-", "_"): (True if v == "(set)" else v) for k, v in parse_flags(entrypoint[2:]).items()}
    args["wandb_key"] = None
    return args


def test_offline_wandb_run_gets_nested_config_and_no_secret(tmp_path, monkeypatch):
    monkeypatch.setenv("WANDB_API_KEY", SECRET_WANDB)
    monkeypatch.setenv("SGLANG_API_KEY", SECRET_SGLANG)
    save = tmp_path / "run"
    overrides = ["exp_name=wb", "run_name='wb_rollout.temperature=0.8'", "rollout.temperature=0.8"]
    _, plan, snap = launch_snapshot(save, overrides, environ=dict(os.environ),
                                    record=LaunchRecord(overrides=overrides, choices={"model": "qwen3_4b"}))
    job_env = plan.runtime_env["env_vars"]
    assert job_env[CONFIG_FILE_ENV] == str(save / "clawgym" / "wandb_config.yaml")
    # The job sees the plan's environment plus the key (as a head started by clawgym passes it).
    env = {"PATH": os.environ["PATH"], "HOME": str(tmp_path), **job_env, "WANDB_API_KEY": SECRET_WANDB,
           "SGLANG_API_KEY": SECRET_SGLANG, "WANDB_DIR": str(tmp_path / "wb"), "WANDB_SILENT": "true",
           "PYTHONPATH": ""}
    (tmp_path / "wb").mkdir()
    proc = subprocess.run([sys.executable, "-c", SLIME_LIKE_INIT, json.dumps(slime_args(plan.entrypoint))],
                          env=env, capture_output=True, text=True, timeout=180, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    info = json.loads(proc.stdout.strip().splitlines()[-1])
    assert info["tags"] == ["wb", "wb_rollout.temperature=0.8", "rollout.temperature=0.8"]
    assert "wb_rollout.temperature=0.8" in info["notes"]
    # The run's name comes from the sweep overrides (slime builds it from --wandb-group).
    assert info["name"].startswith("wb_rollout.temperature=0.8_")
    (log,) = list((tmp_path / "wb" / "wandb").glob("offline-run-*/run-*.wandb"))
    config = run_config_of(read_wandb_records(log))
    nested = config["clawgym"]
    assert nested["rollout"]["temperature"] == 0.8 and nested["model"]["name"] == "qwen3_4b"
    assert nested["run_name"] == "wb_rollout.temperature=0.8" and nested["wandb"]["group"] == "wb_rollout.temperature=0.8"
    assert config["clawgym_launch"]["overrides"] == overrides
    assert config["clawgym_launch"]["id"] == snap.name
    # slime's own flat args are still there, beside ours.
    assert config["rollout_temperature"] == "0.8" and config["wandb_key"] is None
    # Neither secret anywhere: the offline run dir, the snapshot, the W&B config file.
    assert_no_secret_in_tree(tmp_path / "wb")
    assert_no_secret_in_tree(save)
    assert yaml.safe_load((save / "clawgym" / "wandb_config.yaml").read_text())["wandb_version"] == 1


def test_every_attempt_of_a_run_logs_to_one_wandb_run(tmp_path):
    # A supervisor's restart and a `clawgym resume` build the plan again from the recorded config, with
    # checkpoint.load at the save dir: the W&B run id must be the first launch's, so the curves go on.
    save, environ = tmp_path / "run", {"WANDB_API_KEY": SECRET_WANDB}

    def env_of(*overrides: str) -> Dict[str, str]:
        plan = build_plan_from_dict(plain([f"paths.save={save}", *overrides]), environ=environ,
                                    timestamp="20260101_000000")
        return plan.runtime_env["env_vars"]

    first, resumed = env_of(), env_of(f"checkpoint.load={save}")
    other = build_plan_from_dict(plain([f"paths.save={tmp_path / 'other'}"]), environ=environ,
                                 timestamp="20260101_000000").runtime_env["env_vars"]
    assert first["WANDB_RUN_ID"] == resumed["WANDB_RUN_ID"] != other["WANDB_RUN_ID"]
    assert first["WANDB_RESUME"] == "allow"
    assert env_of("+extra_env.WANDB_RUN_ID=mine")["WANDB_RUN_ID"] == "mine"  # the user's own id wins
    # wandb itself takes the id from the environment under slime's primary init (which passes no id).
    env = {"PATH": os.environ["PATH"], "HOME": str(tmp_path), "WANDB_DIR": str(tmp_path / "wb"),
           "WANDB_SILENT": "true", "PYTHONPATH": "", "WANDB_RUN_ID": first["WANDB_RUN_ID"],
           "WANDB_RESUME": first["WANDB_RESUME"]}
    (tmp_path / "wb").mkdir()
    args = {"wandb_group": "g", "wandb_project": "p"}
    proc = subprocess.run([sys.executable, "-c", SLIME_LIKE_INIT, json.dumps(args)], env=env, capture_output=True,
                          text=True, timeout=180, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert json.loads(proc.stdout.strip().splitlines()[-1])["id"] == first["WANDB_RUN_ID"]


def test_the_wandb_run_id_is_one_wandb_accepts():
    c = plain(["run_name='a run/with:odd#chars?" + "x" * 80 + "'", "paths.save=/runs/x"])
    from clawgym.trainer.wandb_env import run_id

    rid = run_id(c)
    assert len(rid) <= 64 and all(ch.isalnum() or ch in "_.-" for ch in rid)
    assert run_id(plain(["paths.save=null", "checkpoint.save_interval=null"])) is None
