"""The documentation site builds with ``mkdocs build --strict`` (mkdocs.yml: Material theme, nav).

Strict mode turns MkDocs' warnings into a failed build: a link to a page that does not exist,
an anchor no heading makes, a page left out of the nav. The second test proves the build really
fails on a broken link, so the first cannot pass by building nothing.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def build(config: Path, site: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "-f", str(config), "-d", str(site)],
                          capture_output=True, text=True, timeout=300, env={"NO_MKDOCS_2_WARNING": "1",
                                                                            "PATH": "/usr/bin:/bin"})


def test_docs_site_builds_strict_with_every_page(tmp_path):
    proc = build(ROOT / "mkdocs.yml", tmp_path / "site")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    for page in ("index.html", "guide/getting-started/index.html", "reference/config/index.html",
                 "reference/rules/index.html", "reference/cli/index.html", "architecture/index.html",
                 "contributing/index.html", "design/benchmarks/index.html"):
        assert (tmp_path / "site" / page).exists(), page


def test_a_broken_link_fails_the_strict_build(tmp_path):
    shutil.copytree(ROOT / "docs", tmp_path / "docs")
    shutil.copy(ROOT / "mkdocs.yml", tmp_path / "mkdocs.yml")
    page = tmp_path / "docs" / "guide" / "sweeps.md"
    page.write_text(page.read_text() + "\nSee [the missing page](no-such-page.md) and [a lost anchor](runs.md#nowhere).\n")
    proc = build(tmp_path / "mkdocs.yml", tmp_path / "site")
    assert proc.returncode != 0
    assert "no-such-page.md" in proc.stdout + proc.stderr


def test_readme_is_a_front_page_whose_links_resolve():
    text = (ROOT / "README.md").read_text()
    assert len(text.splitlines()) <= 250
    links = re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", text)
    local = [link for link in links if not re.match(r"^[a-z]+://", link)]
    assert "docs/report.png" in local and "docs/guide/getting-started.md" in local
    missing = [link for link in local if not (ROOT / link).exists()]
    assert not missing, missing
