"""``clawgym import`` reads only what its jail shows, and writes no secret (issue 28, findings 1 and 4).

Each script is a fixture script of tests/fixtures/import_scripts/ with one line changed, run for real
in the jail. Canaries this test makes: a file outside every view of the jail (an SGLang-shaped YAML
and a token), a token in the HOME of the importing process, secret values the script exports for its
job. None of them may appear in the report, in conf/experiment/*.yaml or anywhere under --out.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from clawgym.importer import sandbox
from tests.fixtures.slime_checkout import LAYOUT, build_slime_checkout

CANARY = "canary-7f3a9c-do-not-read"


@pytest.fixture
def checkout(tmp_path) -> Path:
    try:
        sandbox.probe()
    except sandbox.SandboxError as exc:
        if os.environ.get("CLAWGYM_REQUIRE_SANDBOX") == "1":
            pytest.fail(f"no jail on this machine: {exc}")
        pytest.skip(f"no jail on this machine: {exc}")
    root = build_slime_checkout(Path(os.path.realpath(tmp_path)) / "slime")
    if shutil.which("git"):
        subprocess.run(["git", "init", "-q", str(root)], check=True, timeout=60)
    return root


def _variant(checkout: Path, base: str, old: str, new: str) -> Path:
    src = checkout / LAYOUT[base]
    text = src.read_text()
    assert old in text, f"{base} no longer holds {old!r}"
    path = src.with_name(f"variant-{src.name}")
    path.write_text(text.replace(old, new))
    return path


def _import(script: Path, out: Path, capsys, *args: str):
    from clawgym.cli import main

    code = main(["import", str(script), "--out", str(out), *args])
    got = capsys.readouterr()
    return code, got.out + got.err


def _everything_under(folder: Path) -> str:
    return "".join(p.read_text(errors="replace") for p in folder.rglob("*") if p.is_file()) if folder.exists() else ""


def test_an_sglang_config_outside_the_jail_is_refused_and_never_read(checkout, tmp_path, capsys):
    """Finding 1: an SGLang-shaped YAML outside the jail's views was read by the importer itself,
    copied into the experiment and counted as 0 differences."""
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    engines = outside / "engines.yaml"
    engines.write_text("sglang:\n  - name: default\n    server_groups:\n      - worker_type: regular\n"
                       f"        num_gpus: 4\n        overrides:\n          api_key: {CANARY}\n")
    script = _variant(checkout, "run-qwen3-4B-pd-config.sh", '--sglang-config "${ENGINES_YAML}"',
                      f"--sglang-config {engines}")
    out = tmp_path / "conf"
    code, report = _import(script, out, capsys)
    assert code != 0, report
    assert f"the script passes {engines}, which the import's jail does not show" in report
    assert CANARY not in report and CANARY not in _everything_under(out)


def test_a_tilde_path_means_the_jails_home_not_the_users(checkout, tmp_path, capsys, monkeypatch):
    """Finding 1: ``--sglang-config ~/.cache/huggingface/token`` read the user's token (~ was mapped
    back to the real home) and printed it in the parity table."""
    home = tmp_path / "home"
    (home / ".cache" / "huggingface").mkdir(parents=True)
    (home / ".cache" / "huggingface" / "token").write_text(f"hf_{CANARY}\n")
    monkeypatch.setenv("HOME", str(home))
    script = _variant(checkout, "run-qwen3-4B-pd-config.sh", '--sglang-config "${ENGINES_YAML}"',
                      "--sglang-config ~/.cache/huggingface/token")
    out = tmp_path / "conf"
    code, report = _import(script, out, capsys)
    assert code != 0, report
    assert "which the import's jail does not show" in report
    assert CANARY not in report and CANARY not in _everything_under(out)


def test_a_file_the_script_writes_in_its_own_home_is_read_in_the_jail(checkout, tmp_path, capsys):
    """What the jail does show is still read: a config the script writes under ~ round-trips."""
    script = _variant(checkout, "run-qwen3-4B-pd-config.sh", "ENGINES_YAML=$(mktemp /tmp/engines_qwen3_4b_XXXXXX.yaml)",
                      "ENGINES_YAML=~/engines.yaml")
    out = tmp_path / "conf"
    code, report = _import(script, out, capsys)
    assert code == 0, report
    assert "max_running_requests: 256" in _everything_under(out)


def test_secrets_the_script_exports_for_its_job_are_never_written(checkout, tmp_path, capsys):
    """Finding 4: an imported script's HF_TOKEN / DB_PASSWORD landed in plain text in the experiment."""
    token, password = f"hf_{CANARY}", "pw-1"  # a short one too: masked whatever its length
    script = _variant(checkout, "run-qwen3-4B-colocate.sh", '\\"CUDA_DEVICE_MAX_CONNECTIONS\\": \\"1\\",',
                      f'\\"CUDA_DEVICE_MAX_CONNECTIONS\\": \\"1\\", \\"HF_TOKEN\\": \\"{token}\\", '
                      f'\\"DB_PASSWORD\\": \\"{password}\\",')
    out = tmp_path / "conf"
    code, report = _import(script, out, capsys)
    assert code == 0, report
    written = _everything_under(out)
    assert "HF_TOKEN" not in written and token not in written and password not in written
    assert token not in report and f'"{password}"' not in report and f" {password} " not in report
    # The import says where the secrets come from instead.
    assert "a secret, never stored: export HF_TOKEN at launch" in report
    assert "a secret, never stored: export DB_PASSWORD at launch" in report


# ---------------------------------------------------------------- values made from the clock (finding 12)

def _clocked(checkout: Path) -> Path:
    """The colocate fixture with slime's coding_agent_rl habit: a run folder named after the clock."""
    script = _variant(checkout, "run-qwen3-4B-colocate.sh", "   --save-interval 10\n",
                      "   --save-interval 10\n   --save-debug-rollout-data /data/debug/${RUN_ID}/rollout_{rollout_id}.pt\n")
    text = script.read_text().replace("set -ex\n", "set -ex\nRUN_ID=$(date +%Y%m%d_%H%M%S)\n", 1)
    script.write_text(text)
    return script


def test_a_value_the_script_makes_from_the_clock_stays_dynamic(checkout, tmp_path, capsys):
    """``$(date +%Y%m%d_%H%M%S)`` was frozen at import time: every launch of the experiment wrote into
    the same folder while the script makes a new one per run, and parity said 0 differences."""
    out = tmp_path / "conf"
    code, report = _import(_clocked(checkout), out, capsys)
    assert code == 0, report
    text = (out / "experiment" / "variant_run_qwen3_4b_colocate.yaml").read_text()
    assert "save_debug_rollout_data: /data/debug/${now:%Y%m%d_%H%M%S}/rollout_{rollout_id}.pt" in text, text
    assert "parity launched twice" in report and "kept dynamic as ${now:%Y%m%d_%H%M%S}" in report


def test_parity_launches_twice_and_reports_a_frozen_clock_value(checkout, tmp_path, capsys):
    """The same experiment with the value frozen (what the importer wrote before): the first launch
    matches, the second (the script run again, later) does not, and --check says so."""
    import time

    from clawgym.importer.capture import CLOCK_EPOCHS

    script = _clocked(checkout)
    out = tmp_path / "conf"
    code, report = _import(script, out, capsys)
    assert code == 0, report
    target = out / "experiment" / "variant_run_qwen3_4b_colocate.yaml"
    frozen = time.strftime("%Y%m%d_%H%M%S", time.localtime(CLOCK_EPOCHS[0]))
    target.write_text(target.read_text().replace("${now:%Y%m%d_%H%M%S}", frozen))
    code, report = _import(script, out, capsys, "--check", "--name", "variant_run_qwen3_4b_colocate")
    assert code == 1, report
    assert "second launch (the script run again, its clock later)" in report
