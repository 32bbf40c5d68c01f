"""Validation cannot be switched off or walked around (issue 14, "Validation can be switched off or
walked around", items 1-5): every way in is refused, with nothing written and no traceback."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import List

import pytest

from clawgym.config.compose import compose, to_plain
from clawgym.validate import ConfigError, check, violations
from tests.conftest import ROOT

SECRET = "sentinel-secret-7f3a91"


def train(args: List[str], tmp_path: Path, *, shell_tail: str = "", env: dict = None) -> subprocess.CompletedProcess:
    """``python train.py ARGS`` (optionally piped through ``shell_tail``), Hydra output under tmp_path/run."""
    cmd = [sys.executable, "train.py", *args]
    environ = {**os.environ, "HYDRA_FULL_ERROR": "0", **(env or {})}
    if shell_tail:
        import shlex

        line = " ".join(shlex.quote(c) for c in cmd) + " " + shell_tail
        return subprocess.run(["bash", "-c", line], cwd=ROOT, capture_output=True, text=True, timeout=180, env=environ)
    return subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=180, env=environ)


def nothing_written(tmp_path: Path) -> None:
    run = tmp_path / "run"
    assert not run.exists() or not any(run.rglob("*")), sorted(run.rglob("*"))


# ---------------------------------------------------------------- 1. lists are seen

def test_unresolvable_interpolation_inside_a_list_is_refused_with_nothing_written(tmp_path):
    proc = train(["extra_args=[${oc.env:CLAWGYM_TEST_UNSET_VAR}]", "exp_name=..",
                  f"+extra_env.WANDB_API_KEY={SECRET}", "dry_run=true", f"hydra.run.dir={tmp_path}/run"], tmp_path)
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr + proc.stdout
    assert "[resolves] extra_args.0=" in proc.stderr
    assert SECRET not in proc.stderr + proc.stdout
    nothing_written(tmp_path)


def test_unresolvable_interpolation_inside_an_args_list_is_found():
    found = violations(compose(["+args.eval_prompt_data=[aime,${oc.env:CLAWGYM_TEST_UNSET_VAR}]"]))
    assert [(v.code, v.keys) for v in found] == [("resolves", ["args.eval_prompt_data.1"])]


# ---------------------------------------------------------------- 2. no exception gets through

def test_a_rule_that_raises_is_a_refusal_not_an_exception(monkeypatch):
    import clawgym.validate as validate

    def rule_broken(v):
        raise RuntimeError("boom")

    monkeypatch.setattr(validate, "LOCAL_RULES", [rule_broken, *validate.LOCAL_RULES])
    errors, _ = check(compose([]))
    assert [v.code for v in errors] == ["check-could-not-run"]
    assert "broken" in errors[0].rule and "RuntimeError" in errors[0].rule


def test_callback_failure_exits_before_hydra_writes(monkeypatch, capsys):
    """Hydra turns a callback's exception into a warning and writes .hydra/; ours exits 2 instead."""
    import clawgym.validate as validate
    from clawgym.app import ClawGymCallback

    def explode(*a, **k):
        raise OSError("disk on fire")

    monkeypatch.setattr(validate, "check", explode)
    from hydra import compose as hcompose, initialize_config_dir

    with initialize_config_dir(config_dir=str(ROOT / "conf"), version_base="1.3"):
        cfg = hcompose("config", return_hydra_config=True)
    with pytest.raises(SystemExit) as info:
        ClawGymCallback().on_run_start(config=cfg)
    assert info.value.code == 2
    assert "could not be checked (OSError: disk on fire)" in capsys.readouterr().err


def test_closed_stderr_refuses_with_nothing_written(tmp_path):
    proc = train(["rollout.temperature=0", "dry_run=true", f"hydra.run.dir={tmp_path}/run"], tmp_path,
                 shell_tail="2>&1 | true; exit ${PIPESTATUS[0]}")
    assert proc.returncode == 2
    nothing_written(tmp_path)


def test_closed_stderr_refuses_a_sweep_with_nothing_written(tmp_path):
    proc = train(["-m", "rollout.temperature=0,0.5", "dry_run=true", f"hydra.sweep.dir={tmp_path}/run"], tmp_path,
                 shell_tail="2>&1 | true; exit ${PIPESTATUS[0]}")
    assert proc.returncode == 2
    nothing_written(tmp_path)


def test_dry_run_piped_to_head_writes_the_plan_without_traceback(tmp_path):
    err = tmp_path / "err.txt"
    proc = train(["dry_run=true", f"hydra.run.dir={tmp_path}/run"], tmp_path,
                 shell_tail=f"2>{err} | head -1; exit ${{PIPESTATUS[0]}}")
    assert proc.returncode == 0, err.read_text()
    assert "Traceback" not in err.read_text() and "BrokenPipe" not in err.read_text()
    assert (tmp_path / "run" / "launch_plan.json").is_file()


def test_a_400_digit_int_is_refused_without_overflow():
    from clawgym.registry import load_registry
    from clawgym.trainer.args import check_token

    huge = "9" * 400
    flag = load_registry("clawgym").by_dest("empty_unused_memory_level")
    assert check_token(flag, huge).code == "choices"  # math.isclose would overflow
    found = violations(compose([f"+args.empty_unused_memory_level={huge}"]))
    assert "numbers-in-range" in {v.code for v in found}


def test_a_300_byte_exp_name_is_refused_cleanly(tmp_path):
    proc = train([f"exp_name={'x' * 300}", "dry_run=true", f"hydra.run.dir={tmp_path}/run"], tmp_path)
    assert proc.returncode == 2
    assert "Traceback" not in proc.stderr
    assert "[name-within-name-max]" in proc.stderr
    nothing_written(tmp_path)


def test_nul_in_an_experiment_yaml_is_a_clear_error(tmp_path):
    conf = tmp_path / "conf" / "experiment"
    conf.mkdir(parents=True)
    (conf / "nul.yaml").write_bytes(b"# @package _global_\nexp_name: \"a\x00b\"\n")
    proc = train(["+experiment=nul", f"hydra.searchpath=[file://{tmp_path}/conf]", "dry_run=true",
                  f"hydra.run.dir={tmp_path}/run"], tmp_path)
    assert proc.returncode != 0
    assert "Traceback" not in proc.stderr
    assert "cannot read the config file" in proc.stderr and "nul.yaml" in proc.stderr
    nothing_written(tmp_path)


# ---------------------------------------------------------------- 3. args.* lists inject nothing

@pytest.mark.parametrize("value, code", [("[--wandb-key,VALUEVALUE]", "no-secrets-in-argv"),
                                         ("[--lr,0.5,--save,/elsewhere]", "args-value-looks-like-flag")])
def test_option_strings_inside_args_lists_are_refused(value, code):
    found = violations(compose([f"+args.data_path={value}"]))
    assert code in {v.code for v in found}
    assert "VALUEVALUE" not in ConfigError(found).report()


# ---------------------------------------------------------------- 4. every secret flag

def _secret_dests():
    from clawgym.registry import FLAVOURS, load_registry
    from clawgym.common.secrets import secret_options

    out = []
    for flavour in FLAVOURS:
        reg = load_registry(flavour)
        for opt in secret_options(flavour):
            flag = reg.by_option(opt)
            if flag is not None and flag.flag == opt:
                out.append((flavour, flag.dest, opt))
    return out


def test_the_registry_secret_flags_include_the_known_ones():
    found = {opt for _, _, opt in _secret_dests()}
    for opt in ("--wandb-key", "--sglang-api-key", "--sglang-admin-api-key", "--router-api-key",
                "--router-oracle-password", "--sglang-ssl-keyfile-password"):
        assert opt in found
    assert "--reward-key" not in found and "--router-tls-key-path" not in found


@pytest.mark.parametrize("flavour, dest, option", _secret_dests())
def test_every_secret_flag_is_refused_in_args_and_extra_args_without_echo(flavour, dest, option):
    for overrides in ([f"+args.{dest}={SECRET}"], [f"extra_args=[{option},{SECRET}]"],
                      [f"extra_args=['{option}={SECRET}']"]):
        found = violations(compose([f"trainer={flavour}", *overrides]))
        assert "no-secrets-in-argv" in {v.code for v in found}, (overrides, [v.code for v in found])
        assert SECRET not in ConfigError(found).report()


def test_a_refused_abbreviation_of_a_secret_flag_does_not_echo_its_value():
    found = violations(compose([f"extra_args=[--wandb-ke,{SECRET}]"]))
    assert "no-secrets-in-argv" in {v.code for v in found}
    assert SECRET not in ConfigError(found).report()


def test_clawgym_flags_does_not_offer_args_for_secret_flags():
    proc = subprocess.run([sys.executable, "-m", "clawgym", "flags", "api-key"], cwd=ROOT, capture_output=True,
                          text=True, timeout=60)
    assert "--wandb-key" in proc.stdout or "--sglang-api-key" in proc.stdout
    assert "args.sglang_api_key" not in proc.stdout and "args.router_api_key" not in proc.stdout
    assert "env SGLANG_API_KEY (secret)" in proc.stdout
    proc = subprocess.run([sys.executable, "-m", "clawgym", "flags", "wandb-key"], cwd=ROOT, capture_output=True,
                          text=True, timeout=60)
    assert "args.wandb_key" not in proc.stdout and "env WANDB_API_KEY" in proc.stdout


def test_import_strips_every_secret_flag():
    from clawgym.importer.parity import strip_secrets

    argv, removed = strip_secrets(["--router-api-key", SECRET, "--lr", "1e-6", f"--sglang-admin-api-key={SECRET}",
                                   "--router-oracle-password", SECRET])
    assert argv == ["--lr", "1e-6"]
    assert removed == ["--router-api-key", "--sglang-admin-api-key", "--router-oracle-password"]


@pytest.mark.parametrize("setting", ["hydra.run.dir={tmp}/run/${{oc.env:WANDB_API_KEY}}",
                                     "hydra.job.name=${{oc.env:WANDB_API_KEY}}"])
def test_hydra_dirs_and_job_name_holding_a_secret_are_refused(setting, tmp_path):
    args = [setting.format(tmp=tmp_path), "dry_run=true"]
    if not setting.startswith("hydra.run.dir"):
        args.append(f"hydra.run.dir={tmp_path}/run")
    proc = train(args, tmp_path, env={"WANDB_API_KEY": SECRET})
    assert proc.returncode == 2, proc.stderr
    assert SECRET not in proc.stdout + proc.stderr
    assert "[no-secret-values-in-config] hydra." in proc.stderr
    nothing_written(tmp_path)


# ---------------------------------------------------------------- 5. paths, numbers, no_*

@pytest.mark.parametrize("root", [".", "relative/root", "''"])
def test_relative_or_empty_paths_root_is_refused(root):
    found = violations(compose([f"paths.root={root}"]))
    mine = [v for v in found if v.code == "paths-absolute"]
    assert mine and mine[0].keys == ["paths.root"]
    if root != "''":
        assert f"paths.root={os.path.abspath(root)}" in mine[0].fix


@pytest.mark.parametrize("override, key", [("rollout.temperature=nan", "rollout.temperature"),
                                           ("optimizer.lr=inf", "optimizer.lr"),
                                           ("rollout.batch_size=10000000000000000000000", "rollout.batch_size"),
                                           ("+args.lr_warmup_iters=2000000000000", "args.lr_warmup_iters")])
def test_nan_inf_and_absurd_numbers_are_refused(override, key):
    found = violations(compose([override]))
    assert any(v.code in ("numbers-finite", "numbers-in-range") and v.keys == [key] for v in found), found


@pytest.mark.parametrize("override, emitted, absent", [
    ("+args.no_load_optim=true", "--no-load-optim", None),
    ("+args.no_load_optim=false", None, "--no-load-optim"),
    ("+args.no_gradient_accumulation_fusion=true", "--no-gradient-accumulation-fusion", None),
    ("+args.no_gradient_accumulation_fusion=false", None, "--no-gradient-accumulation-fusion"),
    ("+args.no_offload_rollout=true", "--no-offload-rollout", "--offload-rollout"),
    ("+args.no_offload_rollout=false", "--offload-rollout", "--no-offload-rollout"),
])
def test_args_no_star_means_the_option_it_spells(override, emitted, absent):
    from clawgym.plan.build import trainer_argv

    c = to_plain(compose([override]))
    assert violations(c) == []
    argv = trainer_argv(c, use_wandb=False)
    if emitted:
        assert emitted in argv
    if absent:
        assert absent not in argv
