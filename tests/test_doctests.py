"""The ``>>>`` examples in the core's docstrings run and give what they show."""

from __future__ import annotations

import doctest
import importlib
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "bpe_spark"
CORE = sorted(
    ".".join(path.relative_to(PACKAGE.parent).with_suffix("").parts).removesuffix(".__init__")
    for path in PACKAGE.rglob("*.py")
    if "spark" not in path.relative_to(PACKAGE).parts[:-1] and "cli" not in path.relative_to(PACKAGE).parts[:-1]
    and path.name != "cli.py"
)


@pytest.mark.parametrize("name", CORE)
def test_docstring_examples(name, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # examples that save files write here
    module = importlib.import_module(name)
    result = doctest.testmod(module, optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    assert result.failed == 0, f"{result.failed} of {result.attempted} examples in {name} failed (see the output above)"
