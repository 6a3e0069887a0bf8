"""Shared fixtures: the peer fixtures kept in the repository (tests/fixtures/peers), the corpora
(../shared/corpora beside the clone, tiny Shakespeare from data/sample), and one local[2] SparkSession."""

from __future__ import annotations

import atexit
import gzip
import os
import shutil
import sys
import tempfile
from functools import cache
from pathlib import Path

import pytest

from tests import peer_files

ROOT = Path(__file__).resolve().parent.parent
SHARED = ROOT.parent / "shared"
CORPORA = SHARED / "corpora"
# the small reference files of other projects, with their licenses (tests/fixtures/peers/README.md)
PEERS = peer_files.PEERS
CORPUS_NAMES = ("en_books", "zh_classics", "multilingual", "tiny_shakespeare")
# corpora the repository holds itself (the same bytes as ../shared/corpora's): their tests always run
REPO_CORPORA = {"tiny_shakespeare": ROOT / "data" / "sample" / "tiny_shakespeare.txt.gz"}


def _private_tiktoken_cache() -> None:
    """tiktoken writes into its cache directory (files it fetched or rebuilt), so the suite gives
    it a private one, built from the repository's GPT-2 and cl100k_base files: tiktoken runs offline."""
    target = peer_files.fill_tiktoken_cache(Path(tempfile.mkdtemp(prefix="bpe-spark-tiktoken-")))
    os.environ["TIKTOKEN_CACHE_DIR"] = str(target)
    atexit.register(shutil.rmtree, target, ignore_errors=True)


_private_tiktoken_cache()
os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)


def corpus_path(name: str) -> Path:
    """The gzip file of a corpus: the repository's copy if it holds one, else ../shared/corpora's.
    Without it the test skips, its one reason line naming the missing file (a test that needs the
    large corpora runs only where ../shared sits beside the clone)."""
    if name in REPO_CORPORA:
        return REPO_CORPORA[name]
    path = CORPORA / f"{name}.txt.gz"
    if not path.is_file():
        pytest.skip(f"needs the shared corpora (../shared/corpora/{name}.txt.gz), not present beside this clone")
    return path


def require_corpora(*names: str) -> None:
    """Skip unless every corpus of ``names`` (all of them if none) can be read: for a test that
    reads a corpus late, after work that would otherwise be wasted."""
    for name in names or CORPUS_NAMES:
        corpus_path(name)


@cache
def corpus_text(name: str, max_bytes: int | None = None) -> str:
    """The first ``max_bytes`` of a corpus, cut back to whole lines (skips the test without it)."""
    with gzip.open(corpus_path(name), "rb") as fh:
        raw = fh.read() if max_bytes is None else fh.read(max_bytes)
    if max_bytes is not None and len(raw) == max_bytes:
        raw = raw[: raw.rfind(b"\n") + 1]
    return raw.decode("utf-8")


def corpus_lines(name: str, max_bytes: int | None = None) -> list[str]:
    """Documents as ``tokenizers`` trains on a text file: each line with its ``\\n``."""
    return corpus_text(name, max_bytes).splitlines(keepends=True)


# what an encode manifest says about the run rather than the data: its time, and what the reader
# could count (Spark's reader reports no skipped files or records: null, where the task reader says 0)
MANIFEST_RUN_FIELDS = ("seconds", "created", "skipped_files", "skipped_records")


def encode_output_bytes(directory: Path) -> dict[str, bytes]:
    """Every file of an encode output by its relative path; the manifest without
    :data:`MANIFEST_RUN_FIELDS`. Two outputs of the same data compare equal."""
    import json

    files = {}
    for path in sorted(Path(directory).rglob("*")):
        if path.is_file():
            data = path.read_bytes()
            if path.name == "_manifest.json":
                manifest = {k: v for k, v in json.loads(data).items() if k not in MANIFEST_RUN_FIELDS}
                data = json.dumps(manifest, sort_keys=True).encode()
            files[str(path.relative_to(directory))] = data
    return files


@pytest.fixture(scope="session")
def spark():
    """The one session-scoped local[2] SparkSession of the suite: two cores, each task tried
    twice (``local[2,2]``), so that an injected task failure is retried (tests/spark/runtime/test_faults.py)."""
    from bpe_spark.spark.runtime.session import build_session

    session = build_session(
        "bpe-spark-tests",
        master="local[2,2]",
        overrides={
            "spark.ui.enabled": "false",
            "spark.sql.shuffle.partitions": "4",
            "spark.default.parallelism": "4",
            "spark.driver.memory": "2g",
            "spark.sql.adaptive.enabled": "false",
        },
    )
    yield session
    session.stop()


@pytest.fixture(autouse=True)
def _training_report_only_where_tested(request, monkeypatch):
    """``bpe-spark train`` writes report.html after the model (about a second of plotting): in
    the tests of other things it does not; tests marked ``report`` make it (tests/spark/training/test_report_train.py)."""
    if request.node.get_closest_marker("report") is None:
        monkeypatch.setattr("bpe_spark.cli.train.train_report", lambda spark, tok, out, options: None)
        monkeypatch.setattr("bpe_spark.cli.train.preload_plotting", lambda: None)


@pytest.fixture()
def no_spark(monkeypatch):
    """Every Spark command (train, count, encode, evaluate) fails the test if it gets as far as starting Spark."""
    from bpe_spark.cli import count, encode, evaluate, train

    def refuse(*args, **kwargs):
        raise AssertionError("Spark started before the error")

    for module in (train, count, encode, evaluate):
        monkeypatch.setattr(module, "start_spark", refuse)
