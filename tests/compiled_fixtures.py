"""Fixtures for the tests of the compiled extensions: each one fails the test, never skips it,
when its extension is not built (or is stale), so that a comparison of the compiled and the
Python paths cannot pass by comparing Python with itself. A test module loads them with
``pytest_plugins = ("tests.compiled_fixtures",)``."""

from __future__ import annotations

import pytest

from bpe_spark.native import compiled as _compiled


def _built(name: str):
    module = getattr(_compiled, name)
    if module is None:
        pytest.fail(
            f"bpe_spark.{name} is not built (or was built from older sources): run `make install`",
            pytrace=False,
        )
    return module


@pytest.fixture
def fastbpe(monkeypatch):
    """``bpe_spark.native._fastbpe``, with the default engine backend ("auto": the compiled one)."""
    monkeypatch.delenv("BPE_SPARK_ENGINE", raising=False)
    return _built("_fastbpe")


@pytest.fixture
def fastenc(monkeypatch):
    """``bpe_spark.native._fastenc`` with its character classes set, and the compiled encoder in use."""
    monkeypatch.delenv("BPE_SPARK_ENCODER", raising=False)
    module = _built("_fastenc")
    _compiled.ensure_char_classes()
    return module
