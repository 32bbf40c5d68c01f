"""Every secret name, every secret length, every command that prints a config (issue 28, finding 4).

Canary values this test makes, given through the environment or typed into overrides; after each
command they must appear in no output. A secret-named variable in extra_env is refused whatever its
value, a short secret (7 characters) is found like a long one, and ``clawgym diff``, ``show``, ``runs``
and ``report`` validate or mask like a launch does.
"""

from __future__ import annotations

import json

import pytest

from clawgym.config.compose import compose
from clawgym.common.secrets import MASK
from clawgym.validate import ConfigError, check
from tests.test_snapshot import launch_snapshot

WANDB = "wandb-canary-4242424242"
SHORT = "sk-1234"
ROUTER = "rk-canary-99"
HF = "hf_canary_77"


def _cli(argv, capsys):
    from clawgym.cli import main

    code = main(argv)
    got = capsys.readouterr()
    return code, got.out + got.err


@pytest.mark.parametrize("name", ["HF_TOKEN", "OPENAI_API_KEY", "DB_PASSWORD", "GITHUB_TOKEN", "MY_SECRET"])
def test_every_secret_named_variable_is_refused_in_extra_env(name):
    errors, _ = check(compose([f"+extra_env.{name}=v4lue-of-{name}"]), environ={})
    mine = [v for v in errors if v.code == "no-secrets-in-extra-env"]
    assert mine and mine[0].keys == [f"extra_env.{name}"], [v.code for v in errors]
    assert f"export {name} in the launcher's environment" in mine[0].fix
    assert f"v4lue-of-{name}" not in ConfigError(errors).report()


def test_a_secret_named_variable_is_refused_even_as_an_environment_reference():
    errors, _ = check(compose(["+extra_env.HF_TOKEN=${oc.env:HF_TOKEN,x}"]), environ={})
    assert "no-secrets-in-extra-env" in {v.code for v in errors}


def test_the_fix_says_how_the_secret_reaches_the_job_on_slurm():
    errors, _ = check(compose(["cluster=slurm", "+extra_env.HF_TOKEN=x"]), environ={})
    (v,) = [v for v in errors if v.code == "no-secrets-in-extra-env"]
    assert "sbatch --export=ALL" in v.fix


def test_a_short_secret_is_found_and_masked(monkeypatch):
    """SGLANG_API_KEY=sk-1234 (7 characters) was never searched for: ${oc.env:...} printed it."""
    monkeypatch.setenv("SGLANG_API_KEY", SHORT)
    errors, _ = check(compose(["+extra_env.FOO=${oc.env:SGLANG_API_KEY}"]), environ={"SGLANG_API_KEY": SHORT})
    assert "no-secret-values-in-config" in {v.code for v in errors}
    assert SHORT not in ConfigError(errors).report()


def test_redact_config_masks_secret_names_and_flags_whatever_their_length():
    from clawgym.common.secrets import redact_config

    c = {"extra_env": {"HF_TOKEN": "abc", "PLAIN": "keep"}, "extra_args": ["--router-api-key", "xy", "--lr", "1"],
         "args": {"sglang_api_key": "z"}, "note": f"holds {WANDB}"}
    out = redact_config(c, environ={"WANDB_API_KEY": WANDB})
    assert out["extra_env"] == {"HF_TOKEN": MASK, "PLAIN": "keep"}
    assert out["extra_args"] == ["--router-api-key", MASK, "--lr", "1"]
    assert out["args"] == {"sglang_api_key": MASK} and out["note"] == f"holds {MASK}"


@pytest.mark.parametrize("override,canary", [("+extra_env.FOO=${oc.env:WANDB_API_KEY}", WANDB),
                                             (f"extra_args=[--router-api-key,{ROUTER}]", ROUTER),
                                             ("+extra_env.FOO=${oc.env:SGLANG_API_KEY}", SHORT)])
def test_diff_refuses_an_override_set_the_launch_refuses_and_prints_no_secret(override, canary, tmp_path, capsys,
                                                                              monkeypatch):
    monkeypatch.setenv("WANDB_API_KEY", WANDB)
    monkeypatch.setenv("SGLANG_API_KEY", SHORT)
    save = tmp_path / "exp" / "run"
    launch_snapshot(save)
    code, out = _cli(["diff", str(save), override], capsys)
    assert code == 2, out
    assert "invalid configuration" in out and canary not in out


def test_show_diff_runs_and_report_mask_a_secret_an_old_snapshot_holds(tmp_path, capsys, monkeypatch):
    """A run launched before these rules (its snapshot holds HF_TOKEN and a router key): every command
    that prints it masks them."""
    save = tmp_path / "exp" / "old"
    launch_snapshot(save, [f"+extra_env.HF_TOKEN={HF}", f"extra_args=[--router-api-key,{ROUTER}]",
                           f"+extra_env.NOTE={SHORT}"])
    # The short key is the environment's now (the snapshot writer refuses a known secret's value).
    monkeypatch.setenv("SGLANG_API_KEY", SHORT)
    outputs = {}
    for argv in (["show", str(save)], ["diff", str(save), ""], ["runs", str(tmp_path / "exp"), "--json"],
                 ["report", str(tmp_path / "exp"), "--out", str(tmp_path / "report.html")]):
        code, out = _cli(argv, capsys)
        assert code == 0, out
        outputs[argv[0]] = out
    outputs["report.html"] = (tmp_path / "report.html").read_text()
    for where, text in outputs.items():
        for canary in (HF, ROUTER, SHORT):
            assert canary not in text, f"{canary} printed by {where}"
    assert MASK in outputs["show"] and MASK in outputs["diff"]
    json.loads(outputs["runs"])
