"""The generated reference pages (docs/reference/{config,rules,cli}.md) match the code.

``tools/gen_reference.py`` renders each page from the schema, the flag table, the validation
source and the argparse parsers; a page committed before a key, rule or option changed no longer
matches, and this test names it with the command that rewrites it.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def _generator():
    spec = importlib.util.spec_from_file_location("gen_reference", ROOT / "tools" / "gen_reference.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up
    spec.loader.exec_module(module)
    return module


GEN = _generator()


@pytest.mark.parametrize("page", sorted(GEN.PAGES))
def test_committed_reference_page_is_what_the_code_generates(page):
    committed = ROOT / "docs" / "reference" / page
    assert committed.exists(), f"docs/reference/{page} is missing: run tools/gen_reference.py"
    fresh = GEN.PAGES[page]()
    assert committed.read_text() == fresh, f"docs/reference/{page} is stale: run tools/gen_reference.py"


def test_every_schema_key_and_command_is_in_the_reference():
    # A key or command the generator missed would make the staleness test above pass vacuously.
    config = (ROOT / "docs" / "reference" / "config.md").read_text()
    for key in ("rollout.temperature", "gpu_layout.actor_gpus", "paths.root", "slurm.partition",
                "kuberay.image", "sglang.models[].name", "services.teacher.model_path", "exp_name", "extra_env"):
        assert f"`{key}`" in config, key
    assert "`--rollout-temperature`" in config  # rollout.temperature's trainer flag
    from clawgym.cli import COMMANDS
    cli = (ROOT / "docs" / "reference" / "cli.md").read_text()
    for name in COMMANDS:
        assert f"## clawgym {name.rstrip('_')}\n" in cli, name
    assert "## python train.py" in cli


def test_rules_page_names_each_rule_once_with_what_it_mirrors():
    rules = (ROOT / "docs" / "reference" / "rules.md").read_text()
    rows = [line for line in rules.splitlines() if line.startswith("| `")]
    codes = [row.split("`")[1] for row in rows]
    assert len(codes) == len(set(codes)) and len(codes) > 100
    row = next(r for r in rows if r.startswith("| `tp-divides-heads`"))
    assert "TransformerConfig.__post_init__" in row
    assert any(r.startswith("| `sequence-parallel-off-at-tp1` | warning") for r in rows)
