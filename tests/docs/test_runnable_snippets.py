"""Every runnable example of the README and the docs runs (``tests/docs/snippets.py`` says which
blocks are runnable): each page's blocks in order, in a fresh folder holding the repository's
``data/``; ``bash`` blocks command by command through the CLI's ``main`` (every command must exit
0), ``python`` blocks in this process, sharing one namespace per page, where ``spark`` is the suite's
shared session (and a Spark example's ``SparkSession.builder...getOrCreate()`` returns it)."""

from __future__ import annotations

import shlex
from pathlib import Path

import pytest

from tests.docs.snippets import ROOT, all_snippets

PAGES = all_snippets()


def test_the_readme_and_the_guides_have_runnable_examples():
    assert "README.md" in PAGES
    assert sum(len(blocks) for blocks in PAGES.values()) >= 8


@pytest.fixture
def workspace(tmp_path: Path, monkeypatch) -> Path:
    (tmp_path / "data").symlink_to(ROOT / "data", target_is_directory=True)
    monkeypatch.chdir(tmp_path)
    return tmp_path


def _run_commands(code: str, where: str) -> None:
    """A ``bash`` block's commands, each through ``bpe_spark.cli.main`` in this process (the suite's
    warm session, not a JVM per command): a runnable shell block holds only ``bpe-spark`` lines
    and comments, each of which must succeed."""
    from bpe_spark.cli import main

    for number, line in enumerate(code.splitlines(), start=1):
        words = shlex.split(line, comments=True)
        if not words:
            continue
        assert words[0] == "bpe-spark", f"{where} line {number}: a runnable shell block runs bpe-spark only"
        status = main(words[1:])
        assert status == 0, f"{where} line {number}: {line!r} exited with {status}"


@pytest.mark.parametrize("page", sorted(PAGES))
def test_runnable_examples_run(page: str, workspace: Path, request):
    namespace: dict = {"__name__": "snippet"}  # a page's Python blocks share it, as cells of a notebook
    if any(s.language == "bash" or "spark" in s.code for s in PAGES[page]):
        namespace["spark"] = request.getfixturevalue("spark")  # what the guides call `spark`
    for snippet in PAGES[page]:
        assert "spark.stop()" not in snippet.code, f"{snippet.name}: the examples share one session"
        if snippet.language == "bash":
            _run_commands(snippet.code, snippet.name)
        else:
            exec(compile(snippet.code, snippet.name, "exec"), namespace)  # noqa: S102 - the docs' own examples
