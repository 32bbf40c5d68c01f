"""The clawgym sweeper (``hydra/sweeper=clawgym``): an asynchronous Optuna study of clawgym jobs.

A real Ray head declaring 4 GPUs (started once for the module through clawgym.backends.head, stopped
through its record), ``python train.py -m hydra/sweeper=clawgym ...`` run as users run it, and
the fixture checkout's stand-in trainer, whose logged reward is a known function of the swept
values (STANDIN_PEAK_LR: a peak in log-lr, rising with the step) and whose trials last 1x to 3x
(STANDIN_SLEEP_BY_TEMPERATURE: the swept temperature stretches each step).
"""

from __future__ import annotations

import json
import math
import re
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Dict, List

import optuna
import pytest
from optuna.storages import JournalStorage
from optuna.storages.journal import JournalFileBackend
from optuna.trial import TrialState

from clawgym.backends.head import ports as head_ports, start as head_start
from tests.fixtures.checkout import checkout_overrides
from tests.fixtures.ray_cluster import head_argv

ROOT = Path(__file__).resolve().parent.parent
TRAIN = ROOT / "train.py"
SKIPS = ["gpus", "docker", "image", "memory"]
#: The reward's peak (STANDIN_PEAK_LR) and the study's log-lr range around it.
PEAK_LR = 1e-5
LR_SPACE = "optimizer.lr=tag(log, interval(1e-7, 1e-3))"
STEPS = 6
STUDY = "peak"
#: The ``clawgym`` commands docs/guide/tuning.md shows, run in a finished study's folder below.
DOC_COMMANDS = ("clawgym runs exp/ --sort=-objective", "clawgym report exp/ --out report.html")


@pytest.fixture(scope="module")
def head4():
    """A Ray head of our own declaring 4 GPUs: two 2-GPU trials fit at once."""
    argv = head_argv(port=head_ports.free_port(), dashboard_port=head_ports.free_port(), num_gpus=4)
    rec = head_start.start_head(argv, {"CLAWGYM_TEST_SESSION_HEAD": "1"}, secrets={}, quiet=True)
    try:
        yield rec.dashboard_address
    finally:
        head_start.stop_head(rec, quiet=True)
        try:
            rec.path.unlink()
        except FileNotFoundError:
            pass


def tune_argv(checkout: Path, tmp: Path, address: str, *extra: str, steps: int = STEPS,
              supervised: bool = False) -> List[str]:
    return [sys.executable, str(TRAIN), "-m", "hydra/sweeper=clawgym",
            *checkout_overrides(checkout, skip_checks=SKIPS, supervised=supervised),
            "sandbox.cleanup_leftovers=false",
            f"paths.save={tmp}/exp/${{run_name}}", f"+extra_env.STANDIN_RECORD_DIR={tmp}/records",
            "gpu_layout=split_1_1", f"ray.address={address}", f"hydra.sweep.dir={tmp}/multirun",
            f"+extra_env.STANDIN_ROLLOUT_STEPS={steps}", f"+extra_env.STANDIN_PEAK_LR={PEAK_LR}",
            "+extra_env.STANDIN_STEP_SLEEP=0.2", "+extra_env.STANDIN_SLEEP_BY_TEMPERATURE=1",
            f"hydra.sweeper.study_name={STUDY}", "hydra.sweeper.poll_interval=0.2", *extra]


def run(argv: List[str], tmp: Path, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run(argv, cwd=tmp, capture_output=True, text=True, timeout=timeout)


def load_study(tmp: Path, name: str = STUDY) -> optuna.Study:
    storage = JournalStorage(JournalFileBackend(str(tmp / "multirun" / f"{name}.journal")))
    return optuna.load_study(study_name=name, storage=storage)


def records(tmp: Path) -> Dict[str, dict]:
    """The stand-in trainers' records by Ray submission id."""
    out = {}
    for p in sorted((tmp / "records").glob("*.json")):
        try:
            rec = json.loads(p.read_text())
        except ValueError:
            continue  # being rewritten (atomic rename): read again later
        out[rec["submission_id"]] = rec
    return out


def max_overlap(recs: List[dict]) -> int:
    edges = sorted([(r["start"], 1) for r in recs] + [(r["end"], -1) for r in recs], key=lambda e: (e[0], e[1]))
    most = now = 0
    for _, d in edges:
        now += d
        most = max(most, now)
    return most


def ray_statuses(address: str, ids: List[str]) -> Dict[str, str]:
    from ray.job_submission import JobSubmissionClient

    client = JobSubmissionClient(address)
    return {sid: str(client.get_job_status(sid).value) for sid in ids}


def wait_for(cond, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if cond():
            return
        time.sleep(0.3)
    raise AssertionError(f"timed out waiting for {what}")


# ---------------------------------------------------------------- the 12-trial study

@pytest.fixture(scope="module")
def study_run(clawgym_checkout, head4, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("tune")
    proc = run(tune_argv(clawgym_checkout, tmp, head4, LR_SPACE, "rollout.temperature=interval(0.6, 1.2)",
                         "hydra.sweeper.n_trials=12", "hydra.sweeper.seed=3", "hydra.sweeper.pruner=median",
                         "hydra.sweeper.min_steps=2", "hydra.sweeper.metric=rollout/raw_reward:mean_last_3",
                         # Every trial supervised, as by default: a trial ends when its supervisor does.
                         f"rollout.num_rollout={STEPS}", "restart.poll_s=1", supervised=True), tmp)
    assert proc.returncode == 0, proc.stdout[-6000:] + proc.stderr[-3000:]
    return tmp, proc.stdout


def test_twelve_trials_run_two_at_a_time_each_replaced_as_soon_as_it_ends(study_run) -> None:
    tmp, out = study_run
    study = load_study(tmp)
    assert [t.number for t in study.trials] == list(range(12))
    assert {t.state for t in study.trials} <= {TrialState.COMPLETE, TrialState.PRUNED}
    recs = list(records(tmp).values())
    assert len(recs) == 12, "every trial is its own clawgym job"
    assert max_overlap(recs) <= 2, "4 GPUs hold two 2-GPU trials: never more than 2 at once"
    # The pipeline's progress lines are printed after a check of the running jobs has refilled the
    # freed GPUs: from the first time two run until the last trial is submitted, every line says 2
    # (a batch barrier would show 1 or 0 while the batch's slowest trial finishes).
    lines = out.splitlines()
    progress = [(i, int(m.group(1))) for i, line in enumerate(lines)
                for m in [re.search(r"\| running (\d+) \|", line)] if m]
    last_submit = max(i for i, line in enumerate(lines) if re.search(r"\] trial 11 submitted", line))
    first_two = next(i for i, n in progress if n == 2)
    between = [n for i, n in progress if first_two <= i < last_submit]
    assert between and set(between) == {2}, between
    # Trials last differently (the swept temperature stretches each step 1x to 3x), so the
    # replacements are not in lockstep.
    stretch = [1 + 2 * min(max((float(r["argv"][r["argv"].index("--rollout-temperature") + 1]) - 0.6) / 0.6, 0), 1)
               for r in recs]
    assert max(stretch) > 1.5 * min(stretch)


def test_pruned_trials_are_stopped_before_their_last_step_and_recorded_as_pruned(study_run) -> None:
    tmp, out = study_run
    study = load_study(tmp)
    pruned = [t for t in study.trials if t.state == TrialState.PRUNED]
    assert pruned, out[-4000:]
    recs = records(tmp)
    for t in pruned:
        rec = recs[t.user_attrs["clawgym_submission_id"]]
        logged = len(rec["logged"]["rollout/raw_reward"])
        # Stopped before its last step, or (pruned in the seconds its supervisor took to see the trainer
        # end at its last step) already over when the prune was recorded: never running on after it.
        save = Path(rec["argv"][rec["argv"].index("--save") + 1])
        pruned_at = json.loads((save / "clawgym" / "user_stopped.json").read_text())["at"]
        assert (logged < STEPS and rec["signal"] == "SIGTERM") or rec["end"] <= pruned_at, \
            (t.number, logged, rec["signal"], rec["end"], pruned_at)
        assert t.intermediate_values, "the pruner was fed the metric at every step"
    for t in study.trials:
        if t.state == TrialState.COMPLETE:
            assert len(recs[t.user_attrs["clawgym_submission_id"]]["logged"]["rollout/raw_reward"]) == STEPS
    assert "pruned" in out and "stopping its job" in out
    # Each trial had its supervisor: a pruned one was stopped for good through it (recorded as pruned,
    # never restarted), a complete one ended at its last rollout.
    from clawgym.snapshot.attempts import read_attempts

    for t in study.trials:
        rec = recs[t.user_attrs["clawgym_submission_id"]]
        attempts = read_attempts(rec["argv"][rec["argv"].index("--save") + 1])
        assert len(attempts.attempts) == 1, (t.number, attempts.to_dict())
        if t.state == TrialState.PRUNED:
            assert attempts.stopped["by"] == "pruned" and attempts.attempts[0].cls == "stopped-by-user", t.number
        else:
            assert attempts.stopped["by"] == "finished" and attempts.attempts[0].cls == "finished", t.number


def test_best_trial_lands_at_the_reward_peak_and_its_override_line_is_printed(study_run) -> None:
    tmp, out = study_run
    best = load_study(tmp).best_trial
    assert abs(math.log10(best.params["optimizer.lr"]) - math.log10(PEAK_LR)) < 0.5, best.params
    # The objective is the reduction of what the trainer logged (mean of the last 3 rewards).
    rec = records(tmp)[best.user_attrs["clawgym_submission_id"]]
    rewards = [v for _, v in rec["logged"]["rollout/raw_reward"]]
    assert best.value == pytest.approx(sum(rewards[-3:]) / 3, rel=1e-5)
    assert f"best trial #{best.number}: rollout/raw_reward:mean_last_3 = " in out
    assert re.search(rf"overrides: optimizer\.lr=\S+ rollout\.temperature=\S+", out)
    # The end table: a row per trial with its state and steps done.
    for t in load_study(tmp).trials:
        assert re.search(rf"^{t.number}\s+{t.state.name.lower()}\s", out, re.M), t.number


def test_runs_table_shows_each_trials_number_state_and_objective(study_run) -> None:
    tmp, _ = study_run
    proc = subprocess.run([sys.executable, "-m", "clawgym", "runs", str(tmp / "exp"), "--json"], cwd=tmp,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    rows = {r["trial"]: r for r in json.loads(proc.stdout)}
    for t in load_study(tmp).trials:
        row = rows[t.number]
        assert row["trial_state"] == t.state.name.lower()
        assert row["objective"] == (pytest.approx(t.value) if t.state == TrialState.COMPLETE else None)
        assert row["sweep"] == f"study {STUDY}"
    # The page's command: the best trial first.
    text = subprocess.run([sys.executable, "-m", "clawgym", *DOC_COMMANDS[0].split()[1:]], cwd=tmp,
                          capture_output=True, text=True, timeout=120).stdout
    best = load_study(tmp).best_trial
    assert text.splitlines()[2].startswith(f"{STUDY}_trial{best.number} "), text


def test_report_adds_the_studys_history_importances_and_pruned_curves(study_run) -> None:
    tmp, _ = study_run
    page = tmp / "report.html"
    proc = subprocess.run([sys.executable, "-m", "clawgym", *DOC_COMMANDS[1].split()[1:]],
                          cwd=tmp, capture_output=True, text=True, timeout=180)
    assert proc.returncode == 0, proc.stderr
    html = page.read_text()
    assert f"<h2>Study {STUDY}</h2>" in html
    from clawgym.runs.study import IMPORTANCE_MIN_COMPLETE

    complete = sum(1 for t in load_study(tmp).trials if t.state == TrialState.COMPLETE)
    titles = ["optimization history", "intermediate values"]
    if complete >= IMPORTANCE_MIN_COMPLETE:
        titles.append("parameter importances")
    else:
        # Too few completed trials for a ranking of the searched keys: said, not drawn.
        assert f"Parameter importances are not drawn: {complete} trial(s) completed" in html
        assert f"{STUDY}: parameter importances" not in html
    for title in titles:
        assert re.search(rf'<img alt="{STUDY}: {title}[^"]*" src="data:image/png;base64,', html), title
    assert "http://" not in html.split("<h2>Study")[1].split("<h2>Snapshots")[0]


def test_the_same_command_again_continues_the_numbering(clawgym_checkout, head4, study_run) -> None:
    tmp, _ = study_run
    proc = run(tune_argv(clawgym_checkout, tmp, head4, LR_SPACE, "rollout.temperature=interval(0.6, 1.2)",
                         "hydra.sweeper.n_trials=13", "hydra.sweeper.seed=3", "hydra.sweeper.pruner=median",
                         "hydra.sweeper.min_steps=2", "hydra.sweeper.metric=rollout/raw_reward:mean_last_3"), tmp)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    assert "12 trial(s) done, 1 to run" in proc.stdout
    study = load_study(tmp)
    assert [t.number for t in study.trials] == list(range(13))
    assert study.trials[12].state in (TrialState.COMPLETE, TrialState.PRUNED)
    # A resumed seeded sampler does not draw the first launch's values again.
    assert study.trials[12].params != study.trials[0].params
    assert (tmp / "exp" / f"{STUDY}_trial12").is_dir() and (tmp / "multirun" / "12" / ".hydra").is_dir()
    # Nothing is left running: every trial's job ended, as Ray and the trainers say.
    recs = records(tmp)
    assert len(recs) == 13 and all(r["end"] is not None for r in recs.values())
    assert set(ray_statuses(head4, list(recs)).values()) <= {"SUCCEEDED", "STOPPED"}


# ---------------------------------------------------------------- grid, refusals

def test_grid_sampler_runs_exactly_the_jobs_of_the_m_grid(clawgym_checkout, head4, tmp_path) -> None:
    proc = run(tune_argv(clawgym_checkout, tmp_path, head4, "optimizer.lr=choice(1e-6, 1e-5)",
                         "rollout.temperature=choice(0.6, 0.8)", "hydra.sweeper.sampler=grid",
                         "hydra.sweeper.n_trials=10", steps=1), tmp_path)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    grid = tmp_path / "grid"
    grid.mkdir()
    base = [a for a in tune_argv(clawgym_checkout, grid, head4, steps=1)
            if not a.startswith(("hydra/sweeper", "hydra.sweeper"))]
    dry = run([*base, "optimizer.lr=1e-6,1e-5", "rollout.temperature=0.6,0.8", "dry_run=true"], grid)
    assert dry.returncode == 0, dry.stderr[-3000:]

    def knobs(argv: List[str]) -> tuple:
        return float(argv[argv.index("--lr") + 1]), float(argv[argv.index("--rollout-temperature") + 1])

    plans = [json.loads(p.read_text()) for p in sorted((grid / "multirun").glob("*/launch_plan.json"))]
    trials = list(records(tmp_path).values())
    # The grid's 4 jobs, each once (n_trials=10 is capped at the grid's size), with the same flags.
    assert sorted(knobs(r["argv"]) for r in trials) == sorted(knobs(p["entrypoint"][1:]) for p in plans)
    assert len(trials) == 4
    flags = lambda argv: sorted(a for a in argv if a.startswith("--"))  # noqa: E731
    assert {tuple(flags(r["argv"])) for r in trials} == {tuple(flags(p["entrypoint"])) for p in plans}


def test_a_trial_restarted_by_its_supervisor_keeps_its_number_and_every_report(clawgym_checkout, head4,
                                                                             tmp_path) -> None:
    # One trial crashes once at rollout 3; its supervisor resumes it (a new submission, its own events
    # folder). The study must see one trial, with its number, fed every step of both attempts.
    proc = run(tune_argv(clawgym_checkout, tmp_path, head4, "optimizer.lr=choice(1e-6)", "hydra.sweeper.n_trials=1",
                         "hydra.sweeper.pruner=none", "rollout.num_rollout=6", "restart.poll_s=1",
                         "+extra_env.STANDIN_RUN_ROLLOUTS=6", "+extra_env.STANDIN_FAIL=crash@3",
                         f"+extra_env.STANDIN_FAIL_ONCE={tmp_path}/failed-once", supervised=True), tmp_path,
               timeout=400)
    assert proc.returncode == 0, proc.stdout[-6000:] + proc.stderr[-3000:]
    from clawgym.snapshot.attempts import read_attempts

    study = load_study(tmp_path)
    assert [(t.number, t.state) for t in study.trials] == [(0, TrialState.COMPLETE)]
    trial = study.trials[0]
    attempts = read_attempts(trial.user_attrs["clawgym_save_dir"])
    assert [a.cls for a in attempts.attempts] == ["crashed", "finished"], attempts.to_dict()
    # Steps 0-2 from the first attempt, 3-5 from the restart: none missing, the objective from the last 3.
    assert sorted(trial.intermediate_values) == [0, 1, 2, 3, 4, 5], trial.intermediate_values
    assert trial.user_attrs["clawgym_steps"] == 6


def test_a_refused_trial_is_told_fail_with_its_reason_and_holds_no_gpu(clawgym_checkout, head4, tmp_path) -> None:
    proc = run(tune_argv(clawgym_checkout, tmp_path, head4, "rollout.temperature=choice(-1, 0.7)",
                         "hydra.sweeper.sampler=grid", "hydra.sweeper.max_concurrent=1", steps=1), tmp_path)
    # The exit code does not hide the refused trial (as a -m sweep with a failed job exits 1).
    assert proc.returncode == 1, proc.stdout[-4000:] + proc.stderr[-2000:]
    study = load_study(tmp_path)
    refused = [t for t in study.trials if t.params["rollout.temperature"] == -1]
    ran = [t for t in study.trials if t.params["rollout.temperature"] == 0.7]
    assert len(refused) == 1 and len(ran) == 1
    assert refused[0].state == TrialState.FAIL and "rollout.temperature" in refused[0].user_attrs["clawgym_refused"]
    assert ran[0].state == TrialState.COMPLETE
    # No job, no snapshot, no save dir for the refused trial: it never held a GPU.
    assert "clawgym_submission_id" not in refused[0].user_attrs
    assert not (tmp_path / "exp" / f"{STUDY}_trial{refused[0].number}").exists()
    assert list(records(tmp_path)) == [ran[0].user_attrs["clawgym_submission_id"]]
    assert f"trial {refused[0].number} refused, told FAIL" in proc.stdout


# ---------------------------------------------------------------- a launcher killed, interrupted

def test_storage_survives_a_sigkill_and_the_next_launch_follows_the_orphans(clawgym_checkout, head4,
                                                                          tmp_path) -> None:
    argv = tune_argv(clawgym_checkout, tmp_path, head4, LR_SPACE, "hydra.sweeper.n_trials=3", "hydra.sweeper.seed=1",
                     "hydra.sweeper.on_orphan=follow", steps=12)
    launcher = subprocess.Popen(argv, cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                start_new_session=True)
    try:
        wait_for(lambda: len(records(tmp_path)) == 2, 120, "two trials running")
    finally:
        launcher.kill()  # SIGKILL: nothing of the launcher's own cleanup runs
        launcher.wait()
    study = load_study(tmp_path)
    assert [t.state for t in study.trials] == [TrialState.RUNNING, TrialState.RUNNING]
    orphans = {t.user_attrs["clawgym_submission_id"] for t in study.trials}
    assert orphans == set(records(tmp_path))
    proc = run(argv, tmp_path)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    assert "following 2 trial(s) an earlier launcher left running" in proc.stdout
    study = load_study(tmp_path)
    assert [t.number for t in study.trials] == [0, 1, 2]
    assert all(t.state == TrialState.COMPLETE for t in study.trials), [t.state for t in study.trials]
    recs = records(tmp_path)
    for t in study.trials[:2]:
        # Followed to its end: the objective is what the orphan's trainer logged.
        rewards = [v for _, v in recs[t.user_attrs["clawgym_submission_id"]]["logged"]["rollout/raw_reward"]]
        assert t.value == pytest.approx(sum(rewards[-5:]) / 5, rel=1e-5)
    assert set(ray_statuses(head4, list(recs)).values()) == {"SUCCEEDED"}


def test_orphans_are_failed_and_stopped_when_asked(clawgym_checkout, head4, tmp_path) -> None:
    argv = tune_argv(clawgym_checkout, tmp_path, head4, LR_SPACE, "hydra.sweeper.n_trials=3", steps=200)
    launcher = subprocess.Popen(argv, cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                start_new_session=True)
    try:
        wait_for(lambda: len(records(tmp_path)) == 2, 120, "two trials running")
    finally:
        launcher.kill()
        launcher.wait()
    # The same study again, its new trial short (one step).
    again = [a if not a.startswith("+extra_env.STANDIN_ROLLOUT_STEPS=") else "+extra_env.STANDIN_ROLLOUT_STEPS=1"
             for a in argv]
    proc = run([*again, "hydra.sweeper.on_orphan=fail"], tmp_path)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    study = load_study(tmp_path)
    assert [t.state for t in study.trials] == [TrialState.FAIL, TrialState.FAIL, TrialState.COMPLETE]
    assert all("left running by a killed launcher" in t.user_attrs["clawgym_reason"] for t in study.trials[:2])
    recs = records(tmp_path)
    for t in study.trials[:2]:
        assert recs[t.user_attrs["clawgym_submission_id"]]["signal"] == "SIGTERM"
    assert set(ray_statuses(head4, list(recs)).values()) <= {"SUCCEEDED", "STOPPED"}


def test_ctrl_c_stops_the_running_trials_and_leaves_the_study_consistent(clawgym_checkout, head4, tmp_path) -> None:
    argv = tune_argv(clawgym_checkout, tmp_path, head4, LR_SPACE, "hydra.sweeper.n_trials=4", steps=200)
    launcher = subprocess.Popen(argv, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                start_new_session=True)
    try:
        wait_for(lambda: len(records(tmp_path)) == 2, 120, "two trials running")
        launcher.send_signal(signal.SIGINT)
        out, _ = launcher.communicate(timeout=120)
    finally:
        if launcher.poll() is None:
            launcher.kill()
    assert launcher.returncode == 130, out[-3000:]
    study = load_study(tmp_path)
    assert [t.state for t in study.trials] == [TrialState.FAIL, TrialState.FAIL]
    assert all(t.user_attrs.get("clawgym_interrupted") for t in study.trials)
    recs = records(tmp_path)
    assert all(r["signal"] == "SIGTERM" for r in recs.values())
    assert set(ray_statuses(head4, list(recs)).values()) == {"STOPPED"}
