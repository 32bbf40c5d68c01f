"""What ``clawgym runs``, ``show`` and ``report`` show of a supervised run: its health, attempts, last
class and GPU time lost to restarts, the rules and hangs its monitors tripped (with the stack files),
and the marks of each on the curves.

The save dirs are real: a launch's snapshot, real TensorBoard event files per attempt (tensorboardX,
with the wall times a run would have), the attempts recorded through clawgym.snapshot.attempts, and
the verdicts of the real monitors (a hang by the hang monitor, which writes its stack dump; a NaN
loss by the health rules reading the events) recorded as the supervisor's loop records them.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Dict, List

import pytest

from clawgym.cli import main as cli
from clawgym.common.exit_codes import REFUSED
from clawgym.runs import find_runs
from clawgym.runs.lost import Restart, gpu_time_lost
from clawgym.runs.table import build_rows, format_table
from clawgym.snapshot.attempts import read_attempts
from clawgym.snapshot.health import read_trips, record_trip
from tests.test_snapshot import launch_snapshot

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"


# ---------------------------------------------------------------- the definition (golden)

GOLDEN = [
    # (restarts, gpus, step_s, now, total GPU-seconds, [(idle_s, redone)])
    # A crash: 300 s from its last step to the next attempt's first training step; it had done steps
    # up to 29, the next one loaded iter 20: 9 steps of 60 s redone, on 8 GPUs.
    ([Restart(1000.0, 1300.0, 29, 20, 1)], 8, 60.0, 0.0, 8 * (300 + 9 * 60), [(300.0, 9)]),
    # Started over (no checkpoint loaded): every step done, 0..4, is redone.
    ([Restart(1000.0, 1100.0, 4, None, 1)], 2, 10.0, 0.0, 2 * (100 + 5 * 10), [(100.0, 5)]),
    # The next attempt is still starting: counted up to now.
    ([Restart(1000.0, None, 20, 20, 1)], 4, 30.0, 1500.0, 4 * 500, [(500.0, 0)]),
    # Two restarts; the middle attempt never trained (its end closes the first restart's downtime,
    # the second counts from there): nothing counted twice.
    ([Restart(1000.0, 1200.0, 9, 8, 1), Restart(1200.0, 1500.0, None, 8, 2)], 1, 100.0, 0.0,
     (200 + 100) + 300, [(200.0, 1), (300.0, 0)]),
    # No restart: nothing lost.
    ([], 8, 60.0, 0.0, 0.0, []),
]


@pytest.mark.parametrize("restarts,gpus,step_s,now,total,parts", GOLDEN)
def test_gpu_time_lost_is_gpus_times_downtime_plus_steps_redone(restarts, gpus, step_s, now, total, parts):
    got, per = gpu_time_lost(restarts, gpus, step_s, now)
    assert got == pytest.approx(total)
    assert [(p.idle_s, p.redone) for p in per] == parts


def test_gpu_time_lost_is_unknown_when_a_part_cannot_be_measured():
    # Steps were redone but no step time is known; the GPUs are not known.
    assert gpu_time_lost([Restart(0.0, 10.0, 5, 2, 1)], 8, None, 0.0)[0] is None
    assert gpu_time_lost([Restart(0.0, 10.0, 5, 2, 1)], None, 1.0, 0.0)[0] is None
    # Nothing redone: the step time is not needed.
    assert gpu_time_lost([Restart(0.0, 10.0, 2, 2, 1)], 8, None, 0.0)[0] == 80.0


# ---------------------------------------------------------------- a supervised run's save dir

def _events(save: Path, sid: str, steps: List[int], wall0: float, *, nan_at: int = -1) -> None:
    """Steps as slime logs them (rollout/* and perf/* at the rollout step, train/* at the train step, one
    train step per rollout here), 10 s apart from ``wall0``."""
    from tensorboardX import SummaryWriter

    w = SummaryWriter(str(save / "tensorboard" / sid))
    for n, step in enumerate(steps):
        wall = wall0 + 10 * n
        w.add_scalar("rollout/raw_reward", 0.1 * step, step, walltime=wall)
        w.add_scalar("perf/step_time", 10.0, step, walltime=wall)
        w.add_scalar("train/loss", float("nan") if step == nan_at else 1.0 / (step + 1), step, walltime=wall)
    w.close()


@pytest.fixture
def supervised(tmp_path) -> Dict[str, object]:
    """A run of three attempts: a CUDA OOM (a restart from iter 3), a hang caught by the hang monitor
    (a restart from iter 6), then a NaN loss caught by the health rules (stopped for good)."""
    from clawgym.supervisor.hang import HangMonitor
    from clawgym.supervisor.monitor import RunState
    from clawgym.supervisor.rules import HealthRules

    save = tmp_path / "runs" / "run"
    launch_snapshot(save)
    t0 = time.time() - 3600
    rec = read_attempts(save)
    config = {"health": {"nan_action": "stop"}, "rollout": {"num_steps_per_rollout": 1}}

    rec.start("raysubmit_a", now=t0)
    _events(save, "raysubmit_a", [0, 1, 2, 3, 4, 5], t0 + 10)  # last step 5 at t0+60
    rec.end("cuda-oom", "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 20.00 GiB.", 3, "resume",
            now=t0 + 70)

    rec.start("raysubmit_b", resumed_from=3, now=t0 + 80)
    _events(save, "raysubmit_b", [4, 5, 6, 7], t0 + 100)  # first train step at t0+100, last at t0+130
    state = RunState(save_dir=save, submission_id="raysubmit_b", attempt=2, started=t0 + 80, now=t0 + 200,
                     config=config)
    hang = HangMonitor(60.0, "health.stall_s", pids=lambda s: []).poll(state)
    assert hang is not None and hang.cls == "hang"
    record_trip(save, hang, 2, "raysubmit_b", t0 + 200, config)
    rec.end("hang", hang.evidence, 6, "resume", now=t0 + 205)

    rec.start("raysubmit_c", resumed_from=6, now=t0 + 210)
    _events(save, "raysubmit_c", [7, 8, 9], t0 + 240, nan_at=9)  # first train step at t0+240
    state = RunState(save_dir=save, submission_id="raysubmit_c", attempt=3, started=t0 + 210, now=t0 + 275,
                     config=config)
    nan = HealthRules(config).poll(state)
    assert nan is not None and nan.cls == "nan-loss"
    record_trip(save, nan, 3, "raysubmit_c", t0 + 275, config)
    rec.end("nan-loss", nan.evidence, 6, "stop", now=t0 + 276)
    rec.stop("supervisor", "NaN loss: its monitor stops the run for good", "see the evidence")
    return {"save": save, "t0": t0, "hang": hang, "nan": nan}


def _gpus(save: Path) -> int:
    from clawgym.plan.build import gpus_required

    return gpus_required(find_runs([save])[0].config)


def test_runs_counts_gpu_time_lost_from_the_attempts_and_each_attempts_events(supervised):
    save = supervised["save"]
    rows, _ = build_rows(find_runs([save]), resolve_status=False)
    row = rows[0]
    # Restart 1: last step of attempt 1 at t0+60, attempt 2 trains at t0+100 (40 s), steps 4, 5 redone
    # (it loaded iter 3) at the measured 10 s; restart 2: t0+130 -> t0+240 (110 s), step 7 redone.
    assert [(p["idle_s"], p["redone_steps"]) for p in row["gpu_time_lost"]] == [(40.0, 2), (110.0, 1)]
    assert row["gpu_time_lost_s"] == pytest.approx(_gpus(save) * (40 + 2 * 10 + 110 + 1 * 10))
    assert (row["attempts"], row["last_class"]) == (3, "nan-loss")
    assert row["rules_tripped"] == ["hang", "nan-loss"]


def test_a_run_stopped_for_good_and_launched_again_by_hand_counts_no_restart(tmp_path):
    save = tmp_path / "run"
    launch_snapshot(save)
    t0 = time.time() - 7 * 86400
    rec = read_attempts(save)
    rec.start("raysubmit_a", now=t0)
    _events(save, "raysubmit_a", [0, 1, 2], t0 + 10)
    rec.end("stopped-by-user", "stopped by clawgym jobs stop", 2, "stop", now=t0 + 40)
    rec.stop("user", "stopped by the user")
    rec.start("raysubmit_b", resumed_from=2, now=t0 + 5 * 86400)  # a resume typed days later
    _events(save, "raysubmit_b", [3, 4], t0 + 5 * 86400 + 60)
    rows, _ = build_rows(find_runs([save]), resolve_status=False)
    assert rows[0]["attempts"] == 2 and rows[0]["gpu_time_lost_s"] == 0.0 and rows[0]["gpu_time_lost"] == []


def test_runs_text_table_has_a_compact_health_column_and_the_gpu_time_lost(supervised):
    rows, columns = build_rows(find_runs([supervised["save"]]), resolve_status=False)
    header, _, line = format_table(rows, columns).splitlines()[:3]
    for title in ("health", "attempts", "last class", "GPU time lost"):
        assert title in header
    health = line[header.index("health"):]
    assert re.search(r"step \d+[smhd] ago; tripped hang, nan-loss; 0 ckpt/[\d.]+[KMGT] free", health), line
    assert f"{rows[0]['gpu_time_lost_s'] / 3600:.3g} GPU-h" in line


def test_runs_json_carries_the_health_fields(supervised, capsys):
    assert cli(["runs", str(supervised["save"]), "--json"]) == 0
    (row,) = json.loads(capsys.readouterr().out)
    assert row["rules_tripped"] == ["hang", "nan-loss"] and row["last_class"] == "nan-loss"
    assert row["attempts"] == 3 and row["gpu_time_lost_s"] > 0
    assert {"last_step_age_s", "checkpoints_complete", "disk_free_bytes"} <= set(row)
    nan = row["trips"][1]
    assert (nan["key"], nan["value"], nan["step"], nan["action"]) == ("train/loss", "nan", 9, "stop")


def test_the_trip_record_holds_the_stack_file_of_a_hang(supervised):
    hang, nan = read_trips(supervised["save"])
    assert hang.rule == "hang" and hang.key == "stall_s" and hang.attempt == 2
    (stack,) = hang.files
    assert Path(stack).is_file() and Path(stack).parent == supervised["save"] / "stacks"
    assert nan.submission_id == "raysubmit_c" and nan.evidence.startswith("nan: train/loss = nan at step 9")


# ---------------------------------------------------------------- --columns

def test_columns_choose_and_order_the_columns_of_the_table_and_the_json(supervised, capsys):
    assert cli(["runs", str(supervised["save"]), "--columns", "last_class,name,gpu_time_lost_s"]) == 0
    header = capsys.readouterr().out.splitlines()[0].split()
    assert header == ["last", "class", "run", "GPU", "time", "lost"]
    assert cli(["runs", str(supervised["save"]), "--columns", "rules_tripped,attempts", "--json"]) == 0
    (row,) = json.loads(capsys.readouterr().out)
    assert list(row) == ["rules_tripped", "attempts"] and row["attempts"] == 3
    # The report's runs table takes the same choice.
    page = supervised["save"].parent / "cols.html"
    assert cli(["report", str(supervised["save"]), "--columns", "name,last_class", "--out", str(page)]) == 0
    runs_table = page.read_text().split("<h2>Runs</h2>")[1].split("</table>")[0]
    assert re.findall(r"<th[^>]*>([^<]*)</th>", runs_table) == ["run", "last class"]


def test_an_unknown_column_is_refused_naming_the_closest_and_the_valid_ones(supervised, capsys):
    assert cli(["runs", str(supervised["save"]), "--columns", "name,rewrd"]) == REFUSED
    err = capsys.readouterr()
    assert err.out == ""
    assert "no column 'rewrd'; did you mean 'reward'?" in err.err
    assert "columns: name, status," in err.err and "gpu_time_lost_s" in err.err
    assert "Traceback" not in err.err
    assert cli(["report", str(supervised["save"]), "--columns", "healht", "--out",
                str(supervised["save"].parent / "r.html")]) == REFUSED
    assert "did you mean 'health'?" in capsys.readouterr().err


# ---------------------------------------------------------------- show

def test_show_lists_each_attempt_the_tripped_rules_and_the_stack_files_of_hangs(supervised, capsys):
    save = supervised["save"]
    assert cli(["show", str(save), "--no-config"]) == 0
    out = capsys.readouterr().out
    attempts = out[out.index("attempts (3;"):out.index("tripped (2;")]
    for text in ("raysubmit_a", "cuda-oom", "iter_0000003", "hang", "iter_0000006", "nan-loss",
                 "torch.OutOfMemoryError: CUDA out of memory."):
        assert text in attempts
    tripped = out[out.index("tripped (2;"):]
    assert re.search(r"│ 3 +│ nan-loss +│ train/loss +│ nan +│ 9 +│ stop\n", tripped), tripped
    assert "  nan-loss (attempt 3): nan: train/loss = nan at step 9 (a NaN or inf loss" in tripped
    assert re.search(r"│ 2 +│ hang +│ stall_s +│ \d+ ", tripped)
    (stack,) = read_trips(save)[0].files
    assert f"  {stack}  (hang of attempt 2)" in out


# ---------------------------------------------------------------- report marks

def _drawn_marks(run, metric: str):
    from clawgym.runs.plot import curves_png

    seen = {}

    def inspect(fig, ax):
        seen["lines"] = [(l.get_gid(), l.get_xdata()[0]) for l in ax.lines if (l.get_gid() or "").startswith(
            "clawgym-mark-")]
        seen["texts"] = [(t.get_gid(), t.get_text().strip()) for t in ax.texts]

    assert curves_png([run], metric, inspect=inspect) is not None
    return seen


def test_report_figures_draw_a_line_at_each_restart_hang_and_tripped_rule_labelled_with_its_class(supervised):
    (run,) = find_runs([supervised["save"]])
    # On the rollout-step axis: attempt 1 ended after step 5 (cuda-oom), the hang after step 7 (attempt
    # 2's last step), the NaN at step 9.
    seen = _drawn_marks(run, "rollout/raw_reward")
    assert seen["lines"] == [("clawgym-mark-restart", 5), ("clawgym-mark-hang", 7), ("clawgym-mark-rule", 9)]
    assert [t for g, t in seen["texts"] if g and g.startswith("clawgym-mark-label")] == ["cuda-oom", "hang",
                                                                                        "nan-loss"]
    # Without the marks nothing is drawn (the test above sees the marks, not something else).
    from clawgym.runs.plot import MARK_STYLE, curves_png

    bare = {}
    plain = curves_png([run], "rollout/raw_reward", marks=False,
                       inspect=lambda fig, ax: bare.setdefault("n", len([l for l in ax.lines if l.get_gid()])))
    assert bare["n"] == 0
    # And the PNG holds them: pixels of each mark's colour, none without the marks.
    marked = curves_png([run], "rollout/raw_reward")
    for kind, (colour, _) in MARK_STYLE.items():
        rgb = tuple(int(colour[i:i + 2], 16) for i in (1, 3, 5))
        assert _pixels(marked, rgb) > 40, kind
        assert _pixels(plain, rgb) == 0, kind


def _pixels(png: bytes, rgb, tol: int = 40) -> int:
    import io

    import numpy as np
    from PIL import Image

    with Image.open(io.BytesIO(png)) as img:
        a = np.asarray(img.convert("RGB"), dtype=int)
    return int((np.abs(a - np.array(rgb)).sum(axis=2) < tol).sum())


def test_report_page_lists_the_marks_of_each_curve_with_their_steps(supervised, tmp_path):
    page = tmp_path / "r.html"
    assert cli(["report", str(supervised["save"]), "--out", str(page)]) == 0
    text = page.read_text()
    marks = re.findall(r"data-kind='(\w+)' data-step='(\d+)' data-run='[^']*' data-metric='([^']+)'", text)
    assert ("restart", "5", "rollout/raw_reward") in marks
    assert ("hang", "7", "rollout/raw_reward") in marks
    assert ("rule", "9", "train/loss") in marks
    assert "attempt 1: cuda-oom; resumed from iter_0000003" in text
    assert "attempt 3: nan-loss (train/loss = nan); stopped" in text
    # The run's summary lists its attempts and trips, with the hang's stack file.
    (stack,) = read_trips(supervised["save"])[0].files
    assert re.search(r"<td class=\"\">attempt 2</td><td class=\"\">.*hang.*resumed from iter_0000003", text)
    assert stack in text and "GPU time lost" in text


def test_a_run_without_attempts_has_no_marks(tmp_path):
    save = tmp_path / "run"
    launch_snapshot(save)
    _events(save, "raysubmit_x", [0, 1, 2], time.time() - 100)
    (run,) = find_runs([save])
    assert _drawn_marks(run, "rollout/raw_reward")["lines"] == []


# ---------------------------------------------------------------- the loop records what it acts on

class StandinRunner:
    """The stand-in trainer as the job (its real SummaryWriter logs the steps), found by the hang
    monitor as Ray's job driver; stopped by the pid this test started."""

    backend = "local"

    def __init__(self, save: Path, sid: str, **env: str):
        from clawgym.demo.checkout import STANDIN

        env = {**os.environ, "TENSORBOARD_DIR": str(save / "tensorboard" / sid), "STANDIN_ROLLOUT_STEPS": "3",
               "STANDIN_STEP_SLEEP": "0", "STANDIN_HANG": "1",
               "RAY_JOB_CONFIG_JSON_ENV_VAR": json.dumps({"metadata": {"job_submission_id": sid}}), **env}
        self.proc = subprocess.Popen([sys.executable, str(STANDIN), "--use-tensorboard", "--save", str(save)],
                                     env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        # Its 3 steps logged before the supervision starts: an interpreter still importing tensorboardX
        # on a loaded machine is silent too, and the hang under test is the one after the steps.
        from clawgym.runs.events import read_scalars

        folder, deadline = save / "tensorboard" / sid, time.time() + 60
        while time.time() < deadline and self.proc.poll() is None:
            if folder.is_dir() and len(read_scalars(folder).get("rollout/raw_reward") or []) >= 3:
                break
            time.sleep(0.2)

    def running(self, sub):
        return self.proc.poll() is None

    def stop(self, sub):
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()

    def evidence(self, sub):
        from clawgym.supervisor.classify import Evidence

        return Evidence(exit_code=self.proc.wait(), lines=[])

    def user_stopped(self, sub):
        return False

    def submit(self, resume):
        raise AssertionError("no complete checkpoint: the loop must not restart")


def _supervise(tmp_path, sid: str, health: dict, **env: str):
    from omegaconf import OmegaConf

    from clawgym.supervisor.loop import supervise

    save = tmp_path / "run"
    cfg, _, _ = launch_snapshot(save)
    config = OmegaConf.to_container(cfg, resolve=True)
    config["restart"] = {"enabled": True, "max_attempts": 1, "poll_s": 0.1}
    config["health"] = {**config["health"], **health}
    runner = StandinRunner(save, sid, **env)
    try:
        rc = supervise(save, config, runner, sid, say=lambda line: None)
    finally:
        runner.stop(sid)
    return save, rc


@pytest.mark.skipif(shutil.which("py-spy") is None, reason="py-spy is a dependency (pyproject.toml)")
def test_the_supervisors_loop_records_the_hang_it_ends_an_attempt_for_with_its_stacks(tmp_path):
    """The real loop, the real hang monitor and py-spy on the stand-in hung after 3 steps: the trip is in
    health.jsonl with the stack file (naming the function it hangs in), and runs/show show it."""
    sid = f"raysubmit_loophang{os.getpid()}"
    save, rc = _supervise(tmp_path, sid, {"stall_s": 1.0})
    assert rc != 0
    (trip,) = read_trips(save)
    assert (trip.rule, trip.key, trip.attempt, trip.submission_id) == ("hang", "stall_s", 1, sid)
    (stack,) = trip.files
    assert "wait_in_collective_standin" in Path(stack).read_text()
    rows, _ = build_rows(find_runs([save]), resolve_status=False)
    assert rows[0]["rules_tripped"] == ["hang"] and "tripped hang" in rows[0]["health"]
    assert rows[0]["last_class"] == "hang"


def test_the_supervisors_loop_records_the_rule_it_stops_a_run_for(tmp_path):
    save, rc = _supervise(tmp_path, "raysubmit_nan", {"nan_action": "stop", "stall_s": 600.0}, STANDIN_NAN_AT="2")
    (trip,) = read_trips(save)
    assert (trip.rule, trip.key, trip.value) == ("nan-loss", "train/loss", "nan")
    rows, _ = build_rows(find_runs([save]), resolve_status=False)
    assert rows[0]["rules_tripped"] == ["nan-loss"] and rc != 0


# ---------------------------------------------------------------- the HTML wraps between words

MEASURE = """<script>
window.addEventListener('load', () => {
  const broken = [], over = [];
  for (const td of document.querySelectorAll('td, th')) {
    const walker = document.createTreeWalker(td, NodeFilter.SHOW_TEXT);
    for (let node = walker.nextNode(); node; node = walker.nextNode()) {
      const re = /\\S+/g; let m;
      while ((m = re.exec(node.data))) {
        const r = document.createRange(); r.setStart(node, m.index); r.setEnd(node, m.index + m[0].length);
        const tops = new Set([...r.getClientRects()].map(x => Math.round(x.top)));
        if (tops.size > 1) broken.push(m[0]);
        const box = td.getBoundingClientRect(), w = r.getBoundingClientRect();
        if (w.right > box.right + 1) over.push(m[0]);
      }
    }
  }
  const lines = [...document.querySelectorAll('td')].filter(td => td.getClientRects()[0].height > 30).length;
  document.body.setAttribute('data-result', JSON.stringify({broken, over, lines}));
});
</script>"""


@pytest.mark.skipif(not Path(CHROMIUM).exists(), reason="headless chromium is part of the test image")
def test_report_cells_wrap_between_words_never_inside_one(supervised, tmp_path):
    from clawgym.runs.report import render

    runs = find_runs([supervised["save"]])
    rows, columns = build_rows(runs, resolve_status=False)
    # Long cells of several words, and a long word: what the overrides and health cells hold.
    rows[0]["overrides"] = " ".join(f"rollout.temperature_schedule_number_{i}=0.{i}" for i in range(8))
    rows[0]["status_detail"] = "x"
    page = render(runs, rows, columns).replace("</body>", MEASURE + "</body>")
    path = tmp_path / "measure.html"
    path.write_text(page)
    done = subprocess.run(["unshare", "--net", CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu",
                           f"--user-data-dir={tmp_path / 'chromium'}", "--window-size=900,1200",
                           "--virtual-time-budget=5000", "--dump-dom", path.as_uri()],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    m = re.search(r'data-result="([^"]*)"', done.stdout)
    assert m, done.stdout[-2000:]
    result = json.loads(m.group(1).replace("&quot;", '"'))
    assert result["lines"] > 0, "no cell wrapped at all: the page measured nothing"
    assert result["broken"] == [], f"words broken across lines: {result['broken'][:5]}"
    assert result["over"] == [], f"words running out of their cell: {result['over'][:5]}"


def test_a_trip_record_masks_the_secrets_its_evidence_shows(tmp_path, monkeypatch):
    from clawgym.supervisor.monitor import Verdict

    secret = "sk-trip-record-secret-0123456789"
    env_secret = "wandb-env-secret-0123456789abcdef"
    monkeypatch.setenv("WANDB_API_KEY", env_secret)
    config = {"extra_env": {"OPENAI_API_KEY": secret}}
    verdict = Verdict("hang", f"hang: stack shows api_key={secret} and {env_secret}; stacks: {tmp_path}/s.txt")
    trip = record_trip(tmp_path, verdict, 1, "raysubmit_s", time.time(), config)
    text = (tmp_path / "clawgym" / "health.jsonl").read_text()
    assert secret not in text and env_secret not in text and trip is not None
    assert "stack shows api_key=" in text  # the rest of the evidence is kept


RULE_CASES = [
    # (events per step, health config, (rule, key, value, step)): the real rules' evidence, parsed.
    ([(s, {"train/loss": float("nan") if s == 3 else 1.0}) for s in range(4)], {"nan_action": "stop"},
     ("nan-loss", "train/loss", "nan", 3)),
    ([(s, {"train/train_rollout_logprob_abs_diff": 0.01 + 0.2 * s}) for s in range(4)],
     {"logprob_diff_max": 0.5, "logprob_diff_action": "stop"},
     ("logprob-drift", "train/train_rollout_logprob_abs_diff", "0.61", 3)),
    ([(s, {"rollout/raw_reward": 0.0 if s >= 2 else 0.3, "openclaw/total_samples": 64}) for s in range(5)],
     {"zero_reward_rollouts": 3, "zero_reward_action": "end"}, ("zero-reward", "rollout/raw_reward", "0", 4)),
    ([(1, {"openclaw/submitted_trajectories": 20, "openclaw/skipped_trajectories": 30,
           "openclaw/timed_out_trajectories": 14})], {"sandbox_failure_max": 0.5, "sandbox_failure_action": "end"},
     ("sandbox-failures", "sandbox failure rate", "69%", 1)),
]


@pytest.mark.parametrize("rows,health,want", RULE_CASES, ids=[c[2][0] for c in RULE_CASES])
def test_the_trip_record_reads_the_metric_value_and_step_of_each_health_rules_evidence(tmp_path, rows, health,
                                                                                      want):
    from tensorboardX import SummaryWriter

    from clawgym.supervisor.monitor import RunState
    from clawgym.supervisor.rules import HealthRules

    w = SummaryWriter(str(tmp_path / "tensorboard" / "raysubmit_r"))
    for step, metrics in rows:
        for tag, value in metrics.items():
            w.add_scalar(tag, value, step)
    w.close()
    config = {"health": health, "rollout": {"num_steps_per_rollout": 1}}
    state = RunState(save_dir=tmp_path, submission_id="raysubmit_r", attempt=1, started=0.0, now=time.time(),
                     config=config)
    verdict = HealthRules(config).poll(state)
    assert verdict is not None, want
    trip = record_trip(tmp_path, verdict, 1, "raysubmit_r", state.now, config)
    assert (trip.rule, trip.key, trip.value, trip.step) == want
    assert read_trips(tmp_path) == [trip]


def test_the_trip_record_reads_the_disk_guards_numbers(tmp_path):
    from clawgym.preflight.disk import CheckpointSize, free_bytes, gib
    from clawgym.supervisor.disk import DiskGuard
    from clawgym.supervisor.monitor import RunState

    config = {"checkpoint": {"save_interval": 10}}
    _, free = free_bytes(tmp_path)
    guard = DiskGuard(config, size=CheckpointSize(free * 4 + (1 << 40), "a test's checkpoint larger than the disk"))
    state = RunState(save_dir=tmp_path, submission_id="raysubmit_d", attempt=1, started=0.0, now=time.time(),
                     config=config)
    verdict = guard.poll(state)
    assert verdict is not None and verdict.cls == "disk-full"
    trip = record_trip(tmp_path, verdict, 1, "raysubmit_d", state.now, config)
    assert trip.key == "disk_free" and trip.value.endswith("iB")
    # The value is the free space the guard saw (the disk may move a little between two looks).
    assert trip.value.split()[1] == gib(free).split()[1]
