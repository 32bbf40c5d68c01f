"""Runs read back from their save dirs: ``clawgym runs`` and ``clawgym report``.

Real launches on the session's Ray head, with the fixture checkout's stand-in trainer logging
slime's keys through a real ``SummaryWriter`` (tensorboardX) into ``TENSORBOARD_DIR``: one
sweep of three learning rates (shared by the module), one followed single run, one detached
run still running. The table must show what the trainer logged (its record keeps every
value), the pictures must decode with one line per run, and the report must render in
headless Chromium without network. The launcher side never imports torch: a ``torch`` on the
path that records any import attempt proves it.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Dict, List

import pytest
import yaml

from tests.fixtures.checkout import checkout_overrides

ROOT = Path(__file__).resolve().parent.parent
TRAIN = ROOT / "train.py"
SKIPS = ["gpus", "docker", "image", "memory"]  # no GPUs, gateway image or Docker needed by the stand-in
LRS = ["1e-06", "2e-06", "4e-06"]
STEPS = 4
CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
#: matplotlib's first colours (tab10), the lines of runs 0..3.
TAB10 = [(0x1F, 0x77, 0xB4), (0xFF, 0x7F, 0x0E), (0x2C, 0xA0, 0x2C), (0xD6, 0x27, 0x28)]
SECRET_VARS = ("SGLANG_API_KEY", "WANDB_KEY", "WANDB_API_KEY")


# ---------------------------------------------------------------- helpers

@pytest.fixture(scope="module")
def fake_torch(tmp_path_factory) -> Dict[str, str]:
    """A ``torch`` first on the launcher's path that records every import attempt and fails it."""
    base = tmp_path_factory.mktemp("fake_torch")
    (base / "torch").mkdir()
    marker = base / "imported"
    (base / "torch" / "__init__.py").write_text(
        "import traceback\n"
        f"with open({str(marker)!r}, 'a') as fh:\n"
        "    fh.write(''.join(traceback.format_stack()) + '\\n')\n"
        "raise ImportError('torch must not be imported on the launcher side')\n")
    return {"path": str(base), "marker": str(marker)}


def launcher_env(fake_torch: Dict[str, str], state_dir: Path) -> Dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in SECRET_VARS and k != "RAY_ADDRESS"}
    env["PYTHONPATH"] = os.pathsep.join([fake_torch["path"], str(ROOT)])
    env["CLAWGYM_STATE_DIR"] = str(state_dir)
    return env


def cli(args: List[str], env: Dict[str, str], cwd: Path = ROOT, timeout: float = 120) -> subprocess.CompletedProcess:
    """``clawgym ...`` as users run it: a process of its own (with the recording torch on its path)."""
    return subprocess.run([sys.executable, "-m", "clawgym", *args], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=timeout)


def cli_here(args: List[str]) -> subprocess.CompletedProcess:
    """``clawgym ...`` in this process (the same entry point, without a Python start per call)."""
    import contextlib
    import io

    from clawgym.cli import main

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            rc = main(args)
        except SystemExit as exc:  # argparse
            rc = int(exc.code or 0)
    return subprocess.CompletedProcess(["clawgym", *args], rc, out.getvalue(), err.getvalue())


def runs_json(paths: List[Path], env: Dict[str, str], *extra: str) -> List[dict]:
    proc = cli_here(["runs", *map(str, paths), "--json", *extra])
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return json.loads(proc.stdout)


def records(folder: Path) -> Dict[str, dict]:
    """The stand-in trainers' records by Ray submission id."""
    found = [json.loads(p.read_text()) for p in folder.glob("*.json")]
    return {r["submission_id"]: r for r in found}


def mean(values: List[float]) -> float:
    return sum(values) / len(values)


def values(rec: dict, tag: str) -> List[float]:
    return [v for _, v in rec["logged"][tag]]


def colour_pixels(png: Path, colour, tol: int = 12) -> int:
    import numpy as np
    from PIL import Image

    with Image.open(png) as img:
        rgb = np.asarray(img.convert("RGB"), dtype=int)
    return int((np.abs(rgb - np.array(colour)).max(axis=2) <= tol).sum())


def overrides(checkout: Path, tmp: Path) -> List[str]:
    return [*checkout_overrides(checkout, skip_checks=SKIPS), "sandbox.cleanup_leftovers=false",
            f"paths.save={tmp}/exp/${{run_name}}", f"+extra_env.STANDIN_RECORD_DIR={tmp}/records",
            "gpu_layout=split_1_1", "eval.interval=2"]


# ---------------------------------------------------------------- the module's launches

@pytest.fixture(scope="module")
def state_dir(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("clawgym_state")


@pytest.fixture(scope="module")
def sweep(clawgym_checkout, ray_cluster, tmp_path_factory, fake_torch, state_dir):
    """Three jobs, one learning rate each, run together on the session head; the launcher's output."""
    tmp = tmp_path_factory.mktemp("runs_sweep")
    env = launcher_env(fake_torch, state_dir)
    proc = subprocess.run(
        [sys.executable, str(TRAIN), "-m", *overrides(clawgym_checkout, tmp), *ray_cluster.overrides(),
         f"hydra.sweep.dir={tmp}/multirun", "hydra.launcher.poll_interval=0.2",
         f"+extra_env.STANDIN_ROLLOUT_STEPS={STEPS}", f"optimizer.lr={','.join(LRS)}"],
        cwd=tmp, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    recs = records(tmp / "records")
    assert len(recs) == 3, recs.keys()
    return {"tmp": tmp, "exp": tmp / "exp", "proc": proc, "records": recs, "env": env}


@pytest.fixture(scope="module")
def sweep_rows(sweep) -> List[dict]:
    return runs_json([sweep["exp"]], sweep["env"])


def row_of(rows: List[dict], lr: str) -> dict:
    (row,) = [r for r in rows if r["overrides"] == f"optimizer.lr={lr}"]
    return row


# ---------------------------------------------------------------- the plan (pure)

@pytest.mark.parametrize("flavour", ["clawgym", "slime"])
def test_events_go_to_the_save_dir_in_both_flavours_unless_turned_off(flavour):
    from clawgym.config.compose import compose
    from clawgym.plan.build import build_plan

    base = [f"trainer={flavour}", "paths.root=/ckpt/ClawGym-RL"]
    plan = build_plan(compose(base), environ={}, timestamp="20260101_000000")
    env = plan.runtime_env["env_vars"]
    assert plan.entrypoint.count("--use-tensorboard") == 1
    assert env["TENSORBOARD_DIR"] == f"{plan.save_dir}/tensorboard/{plan.submission_id}"
    off = build_plan(compose([*base, "metrics.tensorboard=false"]), environ={}, timestamp="20260101_000000")
    assert "--use-tensorboard" not in off.entrypoint and "TENSORBOARD_DIR" not in off.runtime_env["env_vars"]
    # A flag the trainer's parser has (both flavours' slime/utils/arguments.py add_tensorboard_arguments).
    from clawgym.registry import load_registry

    assert load_registry(flavour).by_option("--use-tensorboard") is not None


# ---------------------------------------------------------------- the launch's own output

def test_sweep_ends_with_the_runs_table_of_its_jobs(sweep):
    out = sweep["proc"].stdout
    table = out[out.index("runs (again, or with curves: clawgym runs"):]
    for lr, rec in zip(LRS, sorted(sweep["records"].values(), key=lambda r: r["start"])):
        assert f"optimizer.lr={lr}" in table
    header = table.splitlines()[1]
    for column in ("status", "steps", "reward(last 5)", "rollout", "log-probs", "train", "weight update", "waiting"):
        assert column in header
    assert table.count("succeeded") == 3


def test_sweep_progress_lines_show_the_latest_rollout_step_and_reward(sweep):
    out = sweep["proc"].stdout
    done = re.findall(r"job #(\d) succeeded after [0-9:]+ \(rollout step (\d+), raw reward ([0-9.]+)\)", out)
    assert len(done) == 3, out
    by_lr = {r["argv"][r["argv"].index("--lr") + 1]: r for r in sweep["records"].values()}
    for num, step, reward in done:
        rec = by_lr[LRS[int(num)]]
        assert int(step) == STEPS - 1
        assert float(reward) == pytest.approx(values(rec, "rollout/raw_reward")[-1], rel=1e-3)


def test_single_run_follow_output_shows_the_latest_rollout_step_and_reward(clawgym_checkout, ray_cluster,
                                                                            tmp_path, fake_torch, state_dir):
    env = launcher_env(fake_torch, state_dir)
    proc = subprocess.run([sys.executable, str(TRAIN), *overrides(clawgym_checkout, tmp_path),
                           *ray_cluster.overrides(), "run_name=single", "+extra_env.STANDIN_ROLLOUT_STEPS=2",
                           f"hydra.run.dir={tmp_path}/hydra"], cwd=tmp_path, env=env, capture_output=True,
                          text=True, timeout=240)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    (rec,) = records(tmp_path / "records").values()
    last = values(rec, "rollout/raw_reward")[-1]
    lines = [line for line in proc.stdout.splitlines() if line.startswith("[clawgym] metrics: ")]
    assert lines and lines[-1] == f"[clawgym] metrics: rollout step 1, raw reward {float(f'{last:.4g}'):.4g}"


# ---------------------------------------------------------------- clawgym runs

def test_table_values_equal_what_the_trainer_logged(sweep, sweep_rows):
    assert len(sweep_rows) == 3
    assert len({r["sweep"] for r in sweep_rows}) == 1 and sweep_rows[0]["sweep"] != "-"
    for row in sweep_rows:
        rec = sweep["records"][row["submission_id"]]
        assert row["overrides"] == f"optimizer.lr={rec['argv'][rec['argv'].index('--lr') + 1]}"
        assert row["status"] == "succeeded", row["status_detail"]
        assert (row["flavour"], row["model"], row["layout"]) == ("clawgym", "qwen3_4b", "split_1_1")
        assert (row["steps"], row["last_step"]) == (STEPS, STEPS - 1)
        approx = lambda v: pytest.approx(v, rel=1e-6)  # noqa: E731 - events keep float32
        assert row["reward"] == approx(mean(values(rec, "rollout/raw_reward")[-5:]))
        evals = values(rec, "eval/clawgym_eval")
        assert row["eval/clawgym_eval"] == approx(evals[-1]) and row["eval/clawgym_eval:best"] == approx(max(evals))
        assert row["tok_s_gpu"] == approx(mean(values(rec, "perf/tokens_per_gpu_per_sec")))
        assert row["train_tok_s"] == approx(mean(values(rec, "perf/actor_train_tok_per_s")))
        assert row["step_s"] == approx(mean(values(rec, "perf/step_time")))
        assert row["rollout_s"] == approx(mean(values(rec, "perf/rollout_time")))
        assert row["log_probs_s"] == approx(mean(values(rec, "perf/log_probs_time"))
                                            + mean(values(rec, "perf/ref_log_probs_time")))
        assert row["train_s"] == approx(mean(values(rec, "perf/actor_train_time")))
        assert row["update_s"] == approx(mean(values(rec, "perf/update_weights_time")))
        assert row["wait_s"] == approx(mean(values(rec, "perf/train_wait_time")))
        assert row["duration"] and row["duration"] > 0 and row["started"] <= rec["start"]
    # The higher learning rate of the stand-in learns faster: the table says which run is better.
    assert row_of(sweep_rows, "4e-06")["reward"] > row_of(sweep_rows, "2e-06")["reward"] > \
        row_of(sweep_rows, "1e-06")["reward"]


def test_last_n_steps_and_metric_choose_the_columns(sweep):
    rows = runs_json([sweep["exp"]], sweep["env"], "--last", "2", "--metric", "train/loss")
    for row in rows:
        rec = sweep["records"][row["submission_id"]]
        assert row["reward"] == pytest.approx(mean(values(rec, "rollout/raw_reward")[-2:]), rel=1e-6)
        assert row["train/loss"] == pytest.approx(values(rec, "train/loss")[-1], rel=1e-6)
        assert row["train/loss:best"] == pytest.approx(max(values(rec, "train/loss")), rel=1e-6)
        assert "eval/clawgym_eval" not in row


def test_sort_and_where_pick_and_order_rows(sweep):
    env, exp = sweep["env"], sweep["exp"]
    rows = runs_json([exp], env, "--sort", "reward", "--desc")
    assert [r["overrides"] for r in rows] == [f"optimizer.lr={lr}" for lr in reversed(LRS)]
    rows = runs_json([exp], env, "--sort", "eval/clawgym_eval")
    assert [r["overrides"] for r in rows] == [f"optimizer.lr={lr}" for lr in LRS]
    assert [r["overrides"] for r in runs_json([exp], env, "--where", "overrides=optimizer.lr=2e-06")] == \
        ["optimizer.lr=2e-06"]
    middle = row_of(runs_json([exp], env), "2e-06")["reward"]
    assert len(runs_json([exp], env, "--where", f"reward>={middle}", "--where", "status=succeeded")) == 2
    proc = cli_here(["runs", str(exp), "--where", "rewrd=1"])
    assert proc.returncode == 2 and "no column 'rewrd'" in proc.stderr and "reward" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_text_table_shows_every_run_with_its_reward(sweep, sweep_rows):
    proc = cli_here(["runs", str(sweep["exp"])])
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert len(lines) == 2 + 3
    for row in sweep_rows:
        (line,) = [line for line in lines if line.startswith(row["name"] + " ")]
        assert f"{row['reward']:.4g}" in line and "succeeded" in line


def test_default_paths_are_the_checkouts_save_dirs_and_the_current_directory(sweep, sweep_rows, tmp_path,
                                                                            monkeypatch):
    names = sorted(r["name"] for r in sweep_rows)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    monkeypatch.setenv("CLAWGYM_RL_ROOT", str(sweep["tmp"]))
    assert sorted(r["name"] for r in runs_json([], {})) == names
    # Without CLAWGYM_RL_ROOT the current directory is the checkout (paths.root's default).
    monkeypatch.delenv("CLAWGYM_RL_ROOT")
    assert runs_json([], {}) == []
    monkeypatch.chdir(sweep["tmp"])
    assert sorted(r["name"] for r in runs_json([], {})) == names


def test_missing_path_is_refused_naming_it(sweep):
    proc = cli_here(["runs", str(sweep["tmp"] / "nope")])
    assert proc.returncode == 2 and "no such path" in proc.stderr and "nope" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_plot_writes_one_png_per_metric_with_one_line_per_run(sweep, tmp_path):
    from PIL import Image

    out = tmp_path / "plots"
    proc = cli(["runs", str(sweep["exp"]), "--plot", "rollout/raw_reward,eval/clawgym_eval,no/such", "--out",
                str(out), "--smooth", "0.3"], sweep["env"])
    assert proc.returncode == 0, proc.stderr
    assert "no run logged no/such" in proc.stderr
    pngs = sorted(out.glob("*.png"))
    assert [p.name.split("__")[0] for p in pngs] == ["eval_clawgym_eval", "rollout_raw_reward"]
    for png in pngs:
        with Image.open(png) as img:
            img.verify()
        with Image.open(png) as img:
            assert img.format == "PNG" and img.size[0] >= 600
        # Three runs: matplotlib's first three line colours are drawn (a legend swatch is far
        # fewer pixels than a line), the fourth is not.
        counts = [colour_pixels(png, c) for c in TAB10]
        assert all(n > 300 for n in counts[:3]), counts
        assert counts[3] < 20, counts


def test_report_renders_in_headless_chromium_without_network(sweep, sweep_rows, tmp_path):
    from PIL import Image

    page = tmp_path / "report.html"
    proc = cli(["report", str(sweep["exp"]), "--out", str(page)], sweep["env"])
    assert proc.returncode == 0, proc.stderr
    text = page.read_text()
    # Self-contained: nothing to fetch (no scripts, style sheets or pictures by URL).
    assert not re.search(r"""(src|href)\s*=\s*["']?(https?:|//)""", text)
    assert "<script" not in text and text.count("data:image/png;base64,") >= 3
    for row in sweep_rows:
        assert row["name"] in text
    for section in ("Runs", "Config differences", "Curves", "Step time", "Snapshots"):
        assert f"<h2>{section}</h2>" in text
    # optimizer.lr is the one training difference the config table shows.
    assert "<td class=\"\">optimizer.lr</td>" in text
    shot = tmp_path / "shot.png"
    browser = subprocess.run(
        ["unshare", "--net", CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
         f"--user-data-dir={tmp_path / 'chromium'}", "--window-size=1280,2400", f"--screenshot={shot}",
         page.as_uri()], capture_output=True, text=True, timeout=120)
    assert browser.returncode == 0 and shot.is_file(), browser.stderr[-2000:]
    import numpy as np

    with Image.open(shot) as img:
        rgb = np.asarray(img.convert("RGB"), dtype=int)
    non_white = int((rgb.sum(axis=2) < 720).sum())
    assert non_white > 0.03 * rgb.shape[0] * rgb.shape[1], "the screenshot is (nearly) blank"
    # The inlined curves were decoded and drawn by the browser: every run's line colour is on screen.
    for colour in TAB10[:3]:
        assert colour_pixels(shot, colour) > 200


# ---------------------------------------------------------------- runs in other states

def _copy_run(sweep, lr: str, dest: Path) -> Path:
    row = row_of(runs_json([sweep["exp"]], sweep["env"]), lr)
    target = dest / Path(row["save_dir"]).name
    shutil.copytree(row["save_dir"], target)
    return target


def test_run_with_no_events_yet_is_listed_without_metrics(sweep, tmp_path):
    save = _copy_run(sweep, "1e-06", tmp_path)
    shutil.rmtree(save / "tensorboard")
    (row,) = runs_json([tmp_path], sweep["env"])
    assert row["steps"] == 0 and row["reward"] is None and row["events"] == []
    proc = cli_here(["runs", str(tmp_path)])
    assert proc.returncode == 0 and row["name"] in proc.stdout
    report = cli_here(["report", str(tmp_path), "--out", str(tmp_path / "r.html")])
    assert report.returncode == 0, report.stderr
    assert "No events yet" in (tmp_path / "r.html").read_text()


def test_truncated_event_file_reads_the_steps_before_the_cut(sweep, tmp_path):
    save = _copy_run(sweep, "2e-06", tmp_path)
    (actor,) = (save / "tensorboard").glob("*/events.out.tfevents.*.actor")
    data = actor.read_bytes()
    actor.write_bytes(data[: len(data) // 2 + 7])  # mid-record, as a writer killed while writing leaves it
    (row,) = runs_json([tmp_path], sweep["env"])
    rec = sweep["records"][row["submission_id"]]
    logged = values(rec, "rollout/raw_reward")
    # The rollout manager's file is whole, so every step is still counted; the actor's rewards stop at the cut.
    assert row["steps"] == STEPS
    (kept,) = runs_json([tmp_path], sweep["env"], "--metric", "rollout/raw_reward", "--last", "0")
    assert kept["rollout/raw_reward:step"] is not None and kept["rollout/raw_reward:step"] < STEPS - 1
    n = kept["rollout/raw_reward:step"] + 1
    assert kept["reward"] == pytest.approx(mean(logged[:n]), rel=1e-6)


def test_save_dir_from_an_older_clawgym_is_listed(sweep, tmp_path):
    """Format-1 snapshot (no manifest, no submission record), no metrics group, no events."""
    save = _copy_run(sweep, "4e-06", tmp_path)
    shutil.rmtree(save / "tensorboard")
    (snap,) = (save / "clawgym" / "snapshots").iterdir()
    meta = json.loads((snap / "meta.json").read_text())
    meta["format"] = 1
    (snap / "meta.json").write_text(json.dumps(meta))
    (snap / "manifest.json").unlink()
    (snap / "submitted.json").unlink()
    for name in ("config.yaml", "config.resolved.yaml"):
        cfg = yaml.safe_load((snap / name).read_text())
        del cfg["metrics"]
        (snap / name).write_text(yaml.safe_dump(cfg))
    (row,) = runs_json([tmp_path], sweep["env"])
    # Its meta and plan still name the job, and the session's Ray still knows it.
    assert row["status"] == "succeeded", row["status_detail"]
    assert row["model"] == "qwen3_4b" and row["steps"] == 0 and row["reward"] is None


def test_running_job_shows_running_with_the_steps_logged_so_far(clawgym_checkout, ray_cluster, tmp_path,
                                                                  fake_torch, state_dir):
    from ray.job_submission import JobSubmissionClient

    env = launcher_env(fake_torch, state_dir)
    run = f"running-{uuid.uuid4().hex[:6]}"
    proc = subprocess.run([sys.executable, str(TRAIN), *overrides(clawgym_checkout, tmp_path),
                           *ray_cluster.overrides(), f"run_name={run}", "ray.detach=true",
                           "+extra_env.STANDIN_ROLLOUT_STEPS=2", "+extra_env.STANDIN_SLEEP=120",
                           f"hydra.run.dir={tmp_path}/hydra"], cwd=tmp_path, env=env, capture_output=True,
                          text=True, timeout=240)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    client = JobSubmissionClient(ray_cluster.address)
    sid = None
    try:
        deadline = time.time() + 90
        while time.time() < deadline:
            recs = records(tmp_path / "records")
            if recs and len(next(iter(recs.values())).get("logged", {}).get("rollout/raw_reward", [])) == 2:
                sid = next(iter(recs))
                break
            time.sleep(0.5)
        assert sid, "the detached job never logged its two steps"
        (row,) = runs_json([tmp_path / "exp"], env)
        assert row["status"] == "running" and row["steps"] == 2 and row["submission_id"] == sid
        assert row["reward"] == pytest.approx(mean(values(records(tmp_path / "records")[sid], "rollout/raw_reward")),
                                              rel=1e-6)
    finally:
        for job in client.list_jobs():
            if job.submission_id and job.submission_id.startswith(f"clawgym-{run}") or job.submission_id == sid:
                client.stop_job(job.submission_id)
                deadline = time.time() + 60
                while not client.get_job_status(job.submission_id).is_terminal() and time.time() < deadline:
                    time.sleep(0.5)
    (row,) = runs_json([tmp_path / "exp"], env)
    assert row["status"] == "stopped"


def test_launcher_side_never_imported_torch(sweep, sweep_rows, fake_torch):
    """Every launch and command above ran with a ``torch`` on the path that records an import."""
    marker = Path(fake_torch["marker"])
    assert cli(["report", str(sweep["exp"]), "--out", str(sweep["tmp"] / "r.html")], sweep["env"]).returncode == 0
    assert not marker.exists(), marker.read_text()
    # The fake is what `import torch` finds in that environment, so an import would have been recorded.
    probe = subprocess.run([sys.executable, "-c", "import torch"], env=sweep["env"], capture_output=True, text=True)
    assert "must not be imported on the launcher side" in probe.stderr and marker.exists()
    marker.unlink()


def test_status_of_a_run_whose_cluster_is_gone_is_the_end_the_launcher_saw(sweep, tmp_path):
    save = _copy_run(sweep, "1e-06", tmp_path)
    (snap,) = (save / "clawgym" / "snapshots").iterdir()
    ended = json.loads((snap / "ended.json").read_text())
    assert ended["status"] == "succeeded" and ended["exit_code"] == 0
    # The snapshot is still whole (ended.json is one of the files added after it was written).
    from clawgym.snapshot.manifest import verify_snapshot

    verify_snapshot(snap)
    sub = json.loads((snap / "submitted.json").read_text())
    from clawgym.backends.head import ports as head_ports

    sub["address"] = f"http://127.0.0.1:{head_ports.free_port()}"  # nobody answers there
    (snap / "submitted.json").write_text(json.dumps(sub))
    (row,) = runs_json([tmp_path], sweep["env"])
    assert row["status"] == "succeeded" and "as the launcher saw it end" in row["status_detail"]
    (snap / "ended.json").unlink()
    (row,) = runs_json([tmp_path], sweep["env"])
    assert row["status"] == "unknown" and "no Ray dashboard answers" in row["status_detail"]


# ---------------------------------------------------------------- hostile names, paths and values

def _add_events(save: Path, tag: str, values) -> None:
    """Scalars under ``tag`` exactly as given (add_scalar would clean ``$`` out of a tag; the file writer
    takes the summary as it is, as torch's writer does)."""
    from tensorboardX import SummaryWriter
    from tensorboardX.proto.summary_pb2 import Summary

    (folder,) = [p for p in (save / "tensorboard").iterdir() if p.is_dir()]
    w = SummaryWriter(str(folder), filename_suffix=".extra")
    for step, v in enumerate(values):
        w._get_file_writer().add_summary(Summary(value=[Summary.Value(tag=tag, simple_value=v)]), step)
    w.close()


def test_tags_with_two_dollar_signs_draw_as_text_in_plots_and_the_report(sweep, tmp_path):
    save = _copy_run(sweep, "1e-06", tmp_path / "runs")
    _add_events(save, "eval/$x_$", [0.1, 0.2, 0.3])
    proc = cli_here(["runs", str(tmp_path / "runs"), "--plot", "eval/$x_$", "--out", str(tmp_path / "plots")])
    assert proc.returncode == 0, proc.stderr
    assert len(list((tmp_path / "plots").glob("*.png"))) == 1
    report = cli_here(["report", str(tmp_path / "runs"), "--metric", "eval/$x_$", "--out", str(tmp_path / "r.html")])
    assert report.returncode == 0, report.stderr
    assert "eval/$x_$" in (tmp_path / "r.html").read_text()


def test_plot_never_writes_through_a_link_planted_in_the_out_folder(sweep, tmp_path):
    out = tmp_path / "plots"
    out.mkdir()
    canary = tmp_path / "canary.txt"
    canary.write_text("keep me")
    name = "rollout_raw_reward__" + "x"  # the temp names are random: plant links at the old fixed ones too
    for planted in (out / ".rollout_raw_reward__runs.png.tmp", out / f".{name}.png.tmp"):
        planted.symlink_to(canary)
    proc = cli_here(["runs", str(sweep["exp"]), "--plot", "rollout/raw_reward", "--out", str(out)])
    assert proc.returncode == 0, proc.stderr
    assert canary.read_text() == "keep me"
    assert [p.name for p in out.glob("*.png")], proc.stdout
    assert not [p for p in out.iterdir() if p.name.endswith(".tmp") and not p.is_symlink()]


@pytest.mark.parametrize("out", ["DIR", "/", "", "/proc/clawgym-x.html"])
def test_report_out_that_cannot_be_a_page_is_a_one_line_error(sweep, tmp_path, out):
    target = str(tmp_path) if out == "DIR" else out
    before = set(os.listdir(tmp_path))
    proc = cli(["report", str(sweep["exp"]), "--out", target], sweep["env"])
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr and proc.stderr.startswith("clawgym report: --out"), proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    assert set(os.listdir(tmp_path)) == before  # no temp page left behind


def test_plot_out_that_cannot_be_a_folder_is_a_one_line_error(sweep, tmp_path):
    afile = tmp_path / "afile"
    afile.write_text("")
    for out in ("/proc/clawgym-x", str(afile), ""):
        proc = cli_here(["runs", str(sweep["exp"]), "--plot", "rollout/raw_reward", "--out", out])
        assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
        assert proc.stderr.startswith("clawgym runs: "), proc.stderr


def test_json_has_null_for_nan_and_infinity(sweep, tmp_path):
    save = _copy_run(sweep, "2e-06", tmp_path)
    _add_events(save, "eval/odd", [float("nan"), float("inf")])
    proc = cli_here(["runs", str(tmp_path), "--json", "--metric", "eval/odd"])
    assert proc.returncode == 0, proc.stderr
    assert "NaN" not in proc.stdout and "Infinity" not in proc.stdout
    (row,) = json.loads(proc.stdout, parse_constant=lambda c: pytest.fail(f"bare {c} in --json"))
    assert row["eval/odd"] is None


def test_a_filter_that_keeps_nothing_says_no_runs_match(sweep):
    proc = cli_here(["runs", str(sweep["exp"]), "--where", "model=nosuch"])
    assert proc.returncode == 0
    assert "no runs match --where model=nosuch (3 run(s) found before the filter)" in proc.stdout


def test_a_damaged_event_record_is_said_by_runs(sweep, tmp_path):
    save = _copy_run(sweep, "4e-06", tmp_path)
    (actor,) = (save / "tensorboard").glob("*/events.out.tfevents.*.actor")
    data = bytearray(actor.read_bytes())
    data[-8] ^= 0xFF
    actor.write_bytes(bytes(data))
    proc = cli_here(["runs", str(tmp_path)])
    assert proc.returncode == 0
    assert "damaged record(s) skipped" in proc.stderr, proc.stderr
    (row,) = runs_json([tmp_path], sweep["env"])
    assert any("damaged record" in p for p in row["problems"])


# ---------------------------------------------------------------- the report reads right

def test_report_marks_the_best_value_and_keeps_run_names_on_one_line(sweep, sweep_rows, tmp_path):
    page = tmp_path / "r.html"
    assert cli_here(["report", str(sweep["exp"]), "--out", str(page)]).returncode == 0
    text = page.read_text()
    best = max(sweep_rows, key=lambda r: r["reward"])
    cells = re.findall(r'<td class="num best">([^<]*)</td>', text)
    assert f"{best['reward']:.4g}" in cells, cells
    assert re.search(r"td\.name[^{]*\{[^}]*white-space: nowrap", text)
    assert text.count('<td class="name">') == len(sweep_rows)


def test_split_layout_step_bars_say_that_phases_overlap(sweep_rows):
    from clawgym.runs import plot

    row = dict(sweep_rows[0], step_s=5.13, rollout_s=3.0, log_probs_s=0.5, train_s=2.5, update_s=0.2, wait_s=0.0)
    assert plot.overlapping(row)
    assert not plot.overlapping(dict(row, step_s=6.3))
    assert plot.time_bars_png([row]) is not None


def test_split_layout_report_explains_bars_longer_than_the_step(sweep, tmp_path):
    from clawgym.runs.discover import find_runs
    from clawgym.runs.report import render
    from clawgym.runs.table import build_rows

    runs = find_runs([sweep["exp"]])
    rows, columns = build_rows(runs)
    rows = [dict(r, step_s=5.13, rollout_s=3.0, train_s=2.5, update_s=0.2) for r in rows]
    assert "Phases overlap in" in render(runs, rows, columns)
    rows = [dict(r, step_s=9.0) for r in rows]
    assert "Phases overlap in" not in render(runs, rows, columns)


def test_a_nearly_flat_curve_is_drawn_in_a_band_proportionate_to_its_values():
    from clawgym.runs.plot import y_limits

    lo, hi = y_limits([5.10, 5.15, 5.20])
    assert lo < 5.10 and hi > 5.20 and (hi - lo) == pytest.approx(0.05 * 5.20)
    assert y_limits([0.1, 0.5, 0.9]) is None  # varies: matplotlib's autoscale draws it
    assert y_limits([0.0, 0.0]) is None


def test_latest_values_at_different_steps_say_their_step(sweep, tmp_path):
    from clawgym.runs.discover import find_runs
    from clawgym.runs.report import render
    from clawgym.runs.table import build_rows

    runs = find_runs([sweep["exp"]])
    rows, columns = build_rows(runs, metrics=["rollout/raw_reward"])
    assert "@ step" not in render(runs, rows, columns)
    rows[0]["rollout/raw_reward:step"] = 1
    page = render(runs, rows, columns)
    assert "rollout/raw_reward (latest)" in page and "@ step 1" in page
    assert "logged at different steps" in page
