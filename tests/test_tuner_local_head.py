"""The tuner on a local head, as the README and docs/guide/tuning.md run it (no ``ray.address``):
the study starts its own Ray head, owns it and its ports like any sweep, and runs every trial.

Real parts: ``python train.py -m hydra/sweeper=clawgym ...`` on the fixture checkout's stand-in
trainer, a Ray head clawgym starts itself (free ports, ``ray.num_gpus=4``) and stops at the end,
a real Optuna journal.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import List

from optuna.trial import TrialState

from clawgym.backends.head import ports as head_ports
from tests.test_tuner import LR_SPACE, load_study, records, run, tune_argv


def local_argv(checkout: Path, tmp: Path, *extra: str, steps: int = 2) -> List[str]:
    """The study's argv with a head of its own: no ray.address, its own free ports, 4 GPUs declared."""
    argv = [a for a in tune_argv(checkout, tmp, "", *extra, steps=steps) if not a.startswith("ray.address=")]
    return [*argv, f"ray.port={head_ports.free_port()}", f"ray.dashboard_port={head_ports.free_port()}",
            "ray.num_gpus=4"]


def test_a_study_on_its_own_local_head_runs_every_trial(clawgym_checkout, tmp_path) -> None:
    proc = run(local_argv(clawgym_checkout, tmp_path, LR_SPACE, "hydra.sweeper.n_trials=4", "hydra.sweeper.seed=2"),
               tmp_path)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-6000:]
    study = load_study(tmp_path)
    assert [t.state for t in study.trials] == [TrialState.COMPLETE] * 4, \
        [(t.number, t.state.name, t.user_attrs.get("clawgym_refused", "")[:300]) for t in study.trials]
    assert len(records(tmp_path)) == 4, "every trial ran its trainer"
    # The journal holds every trial's params and records: its owner's alone.
    assert (tmp_path / "multirun" / "peak.journal").stat().st_mode & 0o777 == 0o600
    # Its own head is never a clash.
    assert "ray.port" not in "".join(t.user_attrs.get("clawgym_refused", "") for t in study.trials)


def test_trials_wait_for_one_pinned_api_port_instead_of_failing(clawgym_checkout, tmp_path) -> None:
    port = head_ports.free_port()
    proc = run(local_argv(clawgym_checkout, tmp_path, LR_SPACE, "hydra.sweeper.n_trials=3",
                          f"sglang.api_port={port}"), tmp_path)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-6000:]
    study = load_study(tmp_path)
    assert [t.state for t in study.trials] == [TrialState.COMPLETE] * 3, \
        [(t.number, t.state.name, t.user_attrs.get("clawgym_refused", "")[:300]) for t in study.trials]
    recs = sorted(records(tmp_path).values(), key=lambda r: r["start"])
    # One API server port: the trials ran one after another (GPUs for two at once notwithstanding).
    assert all(a["end"] <= b["start"] for a, b in zip(recs, recs[1:])), recs


def _seed_whose_first_draw_is(value: float) -> int:
    """A random-sampler seed whose first draw of the choice below is ``value`` (the study's sampler
    with that seed draws the same)."""
    import optuna
    from optuna.distributions import CategoricalDistribution

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    for seed in range(100):
        study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=seed))
        if study.ask({"rollout.temperature": CategoricalDistribution([-1, 0.7])}).params["rollout.temperature"] == value:
            return seed
    raise AssertionError("no seed draws it first")


def test_a_refused_trial_never_uses_up_the_budget_and_the_exit_code_says_so(clawgym_checkout, tmp_path) -> None:
    seed = _seed_whose_first_draw_is(-1)
    proc = run(local_argv(clawgym_checkout, tmp_path, "rollout.temperature=choice(-1, 0.7)",
                          "hydra.sweeper.sampler=random", f"hydra.sweeper.seed={seed}", "hydra.sweeper.n_trials=2",
                          "hydra.sweeper.max_concurrent=1", steps=1), tmp_path)
    out = proc.stdout + proc.stderr
    study = load_study(tmp_path)
    ran = [t for t in study.trials if t.state == TrialState.COMPLETE]
    refused = [t for t in study.trials if t.user_attrs.get("clawgym_refused")]
    # n_trials counts trials that ran: two ran, however many were refused on the way.
    assert len(ran) == 2 and refused and refused[0].number == 0, [(t.number, t.state.name) for t in study.trials]
    assert len(records(tmp_path)) == 2
    # A -m sweep with a failed job exits 1; so does a study with a refused trial.
    assert proc.returncode == 1, out[-4000:]
    assert f"{len(refused)} refused" in proc.stdout
    # The table says why in full (a reason cut at the table's width hides the rule and its fix).
    assert "why trials were refused or failed:" in proc.stdout
    for line in refused[0].user_attrs["clawgym_refused"].splitlines():
        assert line.strip() in proc.stdout, line
    # The report lists the refused trial (it has no save dir, so no run) and draws no importances
    # from two completed trials.
    page = tmp_path / "report.html"
    rep = subprocess.run([sys.executable, "-m", "clawgym", "report", str(tmp_path / "exp"), "--out", str(page)],
                         cwd=tmp_path, capture_output=True, text=True, timeout=180)
    assert rep.returncode == 0, rep.stderr[-3000:]
    html = page.read_text()
    assert "trials refused or failed" in html and f'<td class="">{refused[0].number}</td><td class="">refused</td>' in html
    assert "Parameter importances are not drawn: 2 trial(s) completed" in html
    assert "peak: parameter importances" not in html


def test_a_nan_objective_fails_its_trial_with_the_reason_and_the_study_resumes(clawgym_checkout, tmp_path) -> None:
    argv = [*local_argv(clawgym_checkout, tmp_path, LR_SPACE, "hydra.sweeper.n_trials=1", "hydra.sweeper.pruner=median",
                        "hydra.sweeper.min_steps=1", steps=2), "+extra_env.STANDIN_NAN_FROM_STEP=0"]
    proc = run(argv, tmp_path)
    out = proc.stdout + proc.stderr
    assert "Traceback" not in out, out[-4000:]
    assert proc.returncode == 1, out[-4000:]
    study = load_study(tmp_path)
    assert [t.state for t in study.trials] == [TrialState.FAIL], "no trial is left RUNNING"
    assert "nan" in study.trials[0].user_attrs["clawgym_reason"].lower()
    # The same command again (one more trial) resumes the study cleanly.
    again = [a if a != "hydra.sweeper.n_trials=1" else "hydra.sweeper.n_trials=2" for a in argv]
    again = [a for a in again if a != "+extra_env.STANDIN_NAN_FROM_STEP=0"]
    proc = run(again, tmp_path)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0 and "Traceback" not in out, out[-4000:]
    assert [t.state for t in load_study(tmp_path).trials] == [TrialState.FAIL, TrialState.COMPLETE]


def test_two_launchers_on_one_rdb_study_leave_each_others_live_trials_alone(clawgym_checkout, tmp_path) -> None:
    import optuna

    from tests.test_tuner import wait_for

    db = f"sqlite:///{tmp_path}/study.db"
    common = (LR_SPACE, f"hydra.sweeper.storage={db}", "hydra.sweeper.n_trials=3", "hydra.sweeper.max_concurrent=1")
    first = subprocess.Popen(local_argv(clawgym_checkout, tmp_path, *common, steps=15), cwd=tmp_path,
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)
    try:
        wait_for(lambda: len(records(tmp_path)) >= 1, 120, "the first launcher's trial running")
        # The second launcher joins while the first one's trial runs: it is no orphan of a killed launcher.
        second = run(local_argv(clawgym_checkout, tmp_path, *common, "hydra.sweeper.on_orphan=fail", steps=1), tmp_path)
        out_first, _ = first.communicate(timeout=300)
    finally:
        if first.poll() is None:
            first.kill()
    assert "Traceback" not in out_first + second.stdout + second.stderr, (out_first + second.stderr)[-4000:]
    assert "left to it" in second.stdout, second.stdout[-3000:]
    assert first.returncode == 0, out_first[-4000:]
    assert second.returncode == 0, (second.stdout + second.stderr)[-4000:]
    study = optuna.load_study(study_name="peak", storage=db)
    assert [t.state for t in study.trials] == [TrialState.COMPLETE] * 3, \
        [(t.number, t.state.name, t.user_attrs.get("clawgym_reason")) for t in study.trials]
    # The first trial ran to its last step: nobody stopped it.
    assert all(r["signal"] is None for r in records(tmp_path).values())


def test_trials_a_killed_launcher_left_show_how_they_ended_in_clawgym_runs(clawgym_checkout, tmp_path) -> None:
    import json

    from tests.test_tuner import wait_for

    argv = local_argv(clawgym_checkout, tmp_path, LR_SPACE, "hydra.sweeper.n_trials=3", steps=12)
    launcher = subprocess.Popen(argv, cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                start_new_session=True)
    try:
        wait_for(lambda: len(records(tmp_path)) == 2, 120, "two trials running")
    finally:
        launcher.kill()  # SIGKILL: its trials are orphans, its head stays
        launcher.wait()
    proc = run(argv, tmp_path)
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-4000:]
    assert "following 2 trial(s)" in proc.stdout
    rows = json.loads(subprocess.run([sys.executable, "-m", "clawgym", "runs", str(tmp_path / "exp"), "--json"],
                                     cwd=tmp_path, capture_output=True, text=True, timeout=120).stdout)
    by_trial = {r["trial"]: r for r in rows}
    for n in (0, 1):
        # Followed to their end by the second launcher: the status says so, not "unknown".
        assert by_trial[n]["status"] == "succeeded" and by_trial[n]["trial_state"] == "complete", by_trial[n]
