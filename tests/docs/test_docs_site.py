"""The documentation builds and holds together: ``mkdocs build --strict`` (mkdocs.yml; a broken
link or anchor, a page missing from the navigation, an API name that no longer exists all fail),
a README short enough to read whose links all reach a file, and the command-line reference
generated from the parsers."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

from tests.docs.snippets import ROOT

README_MAX_LINES = 250
LINK = re.compile(r"\]\(([^)#\s]+)(#[^)\s]*)?\)")


def test_the_site_builds_strictly(tmp_path: Path):
    done = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path / "site")],
                          cwd=ROOT, capture_output=True, text=True, timeout=600,
                          env={**__import__("os").environ, "NO_MKDOCS_2_WARNING": "1"})
    assert done.returncode == 0, done.stderr[-4000:]
    cli = (tmp_path / "site" / "reference" / "cli" / "index.html").read_text(encoding="utf-8")
    for command in ("train", "count", "encode", "decode", "inspect", "export", "report"):
        assert f"bpe-spark {command}" in cli
    assert "--superword-transition" in cli  # the options themselves, from the parser
    api = (tmp_path / "site" / "reference" / "python-api" / "index.html").read_text(encoding="utf-8")
    assert "train_from_counts" in api and "TrainerConfig" in api


def test_the_readme_is_short_and_its_links_reach_files():
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    assert len(text.splitlines()) <= README_MAX_LINES
    targets = [m.group(1) for m in LINK.finditer(text) if not m.group(1).startswith(("http://", "https://"))]
    assert targets, "the README links into the docs"
    missing = [t for t in targets if not (ROOT / t).exists()]
    assert not missing, f"README links to files that do not exist: {missing}"


def test_the_cli_reference_is_generated_from_the_parsers():
    sys.path.insert(0, str(ROOT / "docs" / "_hooks"))
    try:
        import cli_reference
    finally:
        sys.path.pop(0)
    page = cli_reference.on_page_markdown("# CLI\n\n" + cli_reference.MARKER + "\n", None, None, None)
    assert cli_reference.MARKER not in page
    assert "usage: bpe-spark train" in page and "--vocab-size" in page
    assert cli_reference.render() == cli_reference.render()  # the same page on any terminal
