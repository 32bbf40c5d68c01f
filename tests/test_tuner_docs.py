"""docs/guide/tuning.md: every command it shows runs, with the outcome it documents.

``python train.py ...`` commands run here as dry runs (the search space and the first trial's
plan; nothing submitted, no storage written) on the fixture checkout; ``clawgym runs`` /
``clawgym report`` commands are run by tests/test_tuner.py on a finished study
(``DOC_COMMANDS`` there), and this test holds the page to that list.
"""

from __future__ import annotations

import re
import shlex
import subprocess
import sys
from pathlib import Path
from typing import List

import pytest

from tests.fixtures.checkout import checkout_overrides
from tests.test_tuner import DOC_COMMANDS

ROOT = Path(__file__).resolve().parent.parent
PAGE = ROOT / "docs" / "guide" / "tuning.md"


def page_blocks(lang: str) -> List[str]:
    return re.findall(rf"```{lang}\n(.*?)```", PAGE.read_text(), re.S)


def page_commands() -> List[str]:
    return [line.strip() for block in page_blocks("bash") for line in block.splitlines() if line.strip()]


def test_every_clawgym_command_on_the_page_is_run_by_the_study_tests() -> None:
    shown = [c for c in page_commands() if c.startswith("clawgym ")]
    assert shown and set(shown) <= set(DOC_COMMANDS), set(shown) - set(DOC_COMMANDS)
    # Nothing else hides in the page's bash blocks: every one is run here or by the study tests.
    assert all(c.startswith(("clawgym ", "python train.py ")) for c in page_commands()), page_commands()


@pytest.mark.parametrize("command", [c for c in page_commands() if c.startswith("python train.py")])
def test_train_commands_on_the_page_dry_run_the_study_they_show(command, clawgym_checkout, tmp_path) -> None:
    # The page's config-file example, where the command finds it (+experiment=tune_lr).
    conf = tmp_path / "conf" / "experiment"
    conf.mkdir(parents=True)
    conf.joinpath("tune_lr.yaml").write_text(page_blocks("yaml")[0])
    argv = shlex.split(command)[2:]
    argv += [*checkout_overrides(clawgym_checkout), f"hydra.sweep.dir={tmp_path}/sweep",
             f"hydra.searchpath=[file://{tmp_path / 'conf'}]"]
    if "dry_run=true" not in argv:
        argv.append("dry_run=true")
    proc = subprocess.run([sys.executable, str(ROOT / "train.py"), *argv], cwd=tmp_path, capture_output=True,
                          text=True, timeout=180)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    out = proc.stdout
    assert "search space:" in out and "first trial: " in out and re.search(r"trainer:\s+python3", out)
    for key in ("optimizer.lr", "rollout.temperature"):
        assert re.search(rf"^  {re.escape(key)}: float in ", out, re.M), key
    if "+experiment=tune_lr" in command:
        # The file's space, with the command line's temperature winning.
        assert "optimizer.lr: float in [1e-07, 0.0001] (log)" in out and "rollout.temperature: float in [0.7, 1.0]" in out
    assert not list((tmp_path / "sweep").glob("*.journal")), "a dry run writes no study"
