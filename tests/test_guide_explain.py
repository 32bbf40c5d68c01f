"""Every command of docs/guide/explain.md runs with its documented outcome (``# -> exit N (text)``)."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys

import pytest

from tests.conftest import ROOT

PAGE = ROOT / "docs" / "guide" / "explain.md"


def commands():
    out = []
    for block in re.findall(r"```bash\n(.*?)```", PAGE.read_text(), re.S):
        lines = block.strip().splitlines()
        for cmd, outcome in zip(lines[::2], lines[1::2]):
            found = re.match(r"# -> exit (\d+)(?: \((.*)\))?$", outcome)
            assert found, f"{cmd!r} has no documented outcome"
            out.append((cmd, int(found.group(1)), found.group(2) or ""))
    return out


@pytest.mark.parametrize("cmd, code, text", commands())
def test_the_guides_command_does_what_it_says(cmd, code, text, tmp_path):
    argv = shlex.split(cmd)
    argv = [sys.executable, "-m", "clawgym", *argv[1:]] if argv[0] == "clawgym" else \
        [sys.executable, str(ROOT / argv[1]), *argv[2:]]
    argv = [a.replace("/tmp/clawgym-doc-dry-run", str(tmp_path / "run")) for a in argv]
    env = {k: v for k, v in os.environ.items() if k != "CLAWGYM_RL_ROOT"}
    proc = subprocess.run(argv, cwd=tmp_path, capture_output=True, text=True, timeout=240, env=env)
    assert proc.returncode == code, proc.stdout + proc.stderr
    assert text in proc.stdout + proc.stderr
    # Nothing but what a dry run writes on purpose is left in the folder it ran in.
    assert [p.name for p in tmp_path.iterdir()] in ([], ["run"])
