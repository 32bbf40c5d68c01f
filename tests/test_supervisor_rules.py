"""Health rules on real event files: the stand-in trainer's NaN loss and rising log-prob diff
(written by its real SummaryWriter), and ClawGym's rollout counts written with one."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path


from clawgym.demo.checkout import STANDIN
from clawgym.supervisor.monitor import RunState
from clawgym.supervisor.rules import RULES, HealthRules, never_logged

HEALTH = {"nan_action": "stop", "logprob_diff_max": 0.5, "logprob_diff_action": "stop",
          "zero_reward_rollouts": 3, "zero_reward_action": "end", "sandbox_failure_max": 0.5,
          "sandbox_failure_action": "end"}
SID = "raysubmit_rules"


def _config(**health):
    return {"health": {**HEALTH, **health}, "rollout": {"num_steps_per_rollout": 1}}


def _standin(save: Path, steps: int, **env):
    folder = save / "tensorboard" / SID
    subprocess.run([sys.executable, str(STANDIN), "--use-tensorboard", "--save", str(save)], check=True,
                   env={**os.environ, "TENSORBOARD_DIR": str(folder), "STANDIN_ROLLOUT_STEPS": str(steps),
                        "STANDIN_STEP_SLEEP": "0", **env}, capture_output=True)


def _state(save: Path, config):
    return RunState(save_dir=save, submission_id=SID, attempt=1, started=0.0, now=time.time(), config=config)


def _write(save: Path, rows):
    from tensorboardX import SummaryWriter

    w = SummaryWriter(str(save / "tensorboard" / SID))
    for step, metrics in rows:
        for tag, value in metrics.items():
            w.add_scalar(tag, value, step)
    w.close()


def test_a_healthy_run_trips_nothing(tmp_path):
    _standin(tmp_path, 4)
    assert HealthRules(_config()).poll(_state(tmp_path, _config())) is None


def test_nan_loss_stops_the_run_with_the_value(tmp_path):
    _standin(tmp_path, 4, STANDIN_NAN_AT="2")
    v = HealthRules(_config()).poll(_state(tmp_path, _config()))
    assert v is not None and v.cls == "nan-loss" and v.action == "stop"
    assert "train/loss = nan at step 3" in v.evidence


def test_rising_logprob_diff_trips_after_the_first_weight_update_only(tmp_path):
    # 0.01 + 0.2 x step: 0.61 at train step 3; a threshold of 0.005 is passed at step 0 already, but
    # step 0 trained on rollout 0, generated before any weight update: the first value read is step 1's.
    _standin(tmp_path, 4, STANDIN_LOGPROB_DIFF_RISE="0.2")
    v = HealthRules(_config()).poll(_state(tmp_path, _config()))
    assert v is not None and v.cls == "logprob-drift" and "at train step 3" in v.evidence, v
    v = HealthRules(_config(logprob_diff_max=0.005)).poll(_state(tmp_path, _config()))
    assert "at train step 1" in v.evidence
    assert HealthRules(_config(logprob_diff_action="off")).poll(_state(tmp_path, _config())) is None


def test_zero_reward_while_samples_are_produced_ends_the_attempt(tmp_path):
    _write(tmp_path, [(s, {"rollout/raw_reward": 0.0 if s >= 2 else 0.3, "openclaw/total_samples": 64})
                      for s in range(5)])
    v = HealthRules(_config()).poll(_state(tmp_path, _config()))
    assert v is not None and v.cls == "zero-reward" and v.action == "end" and "steps 2..4" in v.evidence


def test_zero_reward_without_samples_is_not_a_broken_reward(tmp_path):
    _write(tmp_path, [(s, {"rollout/raw_reward": 0.0, "openclaw/total_samples": 0}) for s in range(5)])
    assert HealthRules(_config()).poll(_state(tmp_path, _config())) is None


def test_sandbox_failure_rate_is_computed_from_the_rollout_counts(tmp_path):
    _write(tmp_path, [(0, {"openclaw/submitted_trajectories": 60, "openclaw/skipped_trajectories": 2,
                           "openclaw/timed_out_trajectories": 2, "rollout/raw_reward": 0.4}),
                      (1, {"openclaw/submitted_trajectories": 20, "openclaw/skipped_trajectories": 30,
                           "openclaw/timed_out_trajectories": 14, "rollout/raw_reward": 0.4})])
    v = HealthRules(_config()).poll(_state(tmp_path, _config()))
    assert v is not None and v.cls == "sandbox-failures" and "69% at rollout 1" in v.evidence, v


def test_each_rule_names_its_keys_and_what_it_protects_against_and_says_when_never_logged():
    for rule in RULES:
        assert rule.keys and rule.protects
    drift = next(r for r in RULES if r.name == "logprob-drift")
    fork = {"trainer": {"flavour": "clawgym"}, "args": {}, "sandbox": {"backend": "docker"}}
    assert "never logged" in never_logged(drift, fork)
    assert never_logged(drift, {**fork, "args": {"train_backend": "fsdp"}}) is None
    assert never_logged(drift, {**fork, "trainer": {"flavour": "slime"}}) is None


def test_explain_says_when_the_chosen_flavour_never_logs_a_rules_key_and_shows_the_derived_stall_time():
    from clawgym.commands.explain import explain

    out, _, code = explain(["health.logprob_diff_max"])
    assert code == 0 and "reads train/train_rollout_logprob_abs_diff" in out and "never logged" in out
    out, _, _ = explain(["health.logprob_diff_max", "args.train_backend=fsdp"])
    assert "never logged" not in out
    out, _, _ = explain(["health.stall_s"])
    assert "the supervisor's stall time for this config:" in out
