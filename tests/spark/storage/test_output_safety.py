"""Outputs are safe (issue 12, item 1), as a user meets them on the command line: a refused output
is a one-line error before Spark starts and touches nothing; --overwrite replaces only an earlier
output of the same kind; every output carries its marker; a dead run's staging is removed by the
next run, and a killed encode leaves nothing that looks complete."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from bpe_spark import TrainerConfig, train
from bpe_spark.storage import output_guard, owners
from bpe_spark.storage import markers
from bpe_spark.cli import main
from bpe_spark.errors import OutputRefusedError
from bpe_spark.datasets.megatron import read_manifest

pytestmark = pytest.mark.spark

TEXT = "hello world\nthe quick brown fox\njumps over the lazy dog\n"


@pytest.fixture()
def place(tmp_path):
    """A working directory with an input file, an input directory and a trained model."""
    (tmp_path / "self.txt").write_text(TEXT)
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "in.txt").write_text(TEXT)
    (tmp_path / "data" / "unrelated.bin").write_bytes(b"\x00keep")
    (tmp_path / "file.txt").write_text("not a directory")
    train(TEXT.splitlines(keepends=True), TrainerConfig(vocab_size=270)).save(tmp_path / "model")
    return tmp_path


def _snapshot(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


@pytest.fixture()
def no_spark(monkeypatch):
    """Fail the test if a command gets as far as starting Spark."""
    import bpe_spark.cli.count
    import bpe_spark.cli.encode
    import bpe_spark.cli.train

    def refuse(*args, **kwargs):
        raise AssertionError("Spark was started")

    for module in (bpe_spark.cli.count, bpe_spark.cli.encode, bpe_spark.cli.train):
        monkeypatch.setattr(module, "start_spark", refuse)


REFUSED = [
    (["encode", "--model", "model", "--input", "self.txt", "--out", "self.txt", "--overwrite"],
     "--out self.txt is the input (self.txt)"),
    (["encode", "--model", "model", "--input", "data/in.txt", "--out", "data", "--overwrite"],
     "--out data holds the input (data/in.txt)"),
    (["encode", "--model", "model", "--input", "data/*.txt", "--out", "data/ids"],
     "--out data/ids lies inside the input (data/*.txt)"),
    (["encode", "--model", "model", "--input", "self.txt", "--out", "model", "--overwrite"],
     "--out model is the model (model)"),
    (["encode", "--model", "model", "--input", "self.txt", "--out", "/proc/model"],
     "--out /proc/model: cannot write in /proc"),
    (["encode", "--model", "model", "--input", "self.txt", "--out", "file.txt/x"],
     "file.txt is a file, so nothing can be written under it"),
    (["encode", "--model", "model", "--input", "self.txt", "--out", "data", "--overwrite"],
     "not an earlier bpe-spark encoded output"),
    (["train", "--input", "data", "--vocab-size", "270", "--out", "data/model"],
     "--out data/model lies inside the input (data)"),
    (["train", "--input", "self.txt", "--vocab-size", "270", "--out", "model", "--overwrite",
      "--checkpoint-dir", "model/ck"], "--out model holds the checkpoint (model/ck)"),
    (["train", "--input", "self.txt", "--vocab-size", "270", "--out", "m2", "--checkpoint-dir", "data"],
     "--checkpoint-dir data holds files that are not a bpe-spark checkpoint"),
    (["count", "--input", "self.txt", "--out", "self.txt", "--overwrite"], "--out self.txt is the input"),
    (["count", "--input", "self.txt", "--out", "model", "--overwrite"], "not an earlier bpe-spark counts output"),
    (["export", "--model", "model", "--format", "gpt2", "--out", "model", "--overwrite"],
     "--out model is the model (model)"),
    (["export", "--model", "model", "--format", "tiktoken", "--out", "model/m.tiktoken"],
     "--out model/m.tiktoken lies inside the model"),
]


@pytest.mark.parametrize("argv, expected", REFUSED, ids=[" ".join(argv) for argv, _ in REFUSED])
def test_refused_before_spark_and_nothing_touched(place, no_spark, monkeypatch, capsys, argv, expected):
    monkeypatch.chdir(place)
    before = _snapshot(place)
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1, err
    assert expected in err
    assert _snapshot(place) == before
    assert sorted(p.name for p in place.iterdir()) == ["data", "file.txt", "model", "self.txt"]


PATH_OPTIONS = ("--model", "--input", "--out", "--checkpoint-dir")


def _in(place: Path, argv: list[str]) -> list[str]:
    """``argv`` with the values of its path options made absolute under ``place`` (Spark's JVM
    keeps the working directory it started in)."""
    return [str(place / a) if i and argv[i - 1] in PATH_OPTIONS else a for i, a in enumerate(argv)]


def test_overwrite_replaces_an_earlier_encoding_and_counts(spark, place, capsys):
    def run(*argv):
        return main(_in(place, list(argv)))

    assert run("encode", "--model", "model", "--input", "self.txt", "--out", "ids") == 0
    assert markers.kind_of(str(place / "ids")) == "encoded"
    first = read_manifest(place / "ids")
    assert run("encode", "--model", "model", "--input", "self.txt", "--out", "ids", "--overwrite") == 0
    assert read_manifest(place / "ids")["tokens"] == first["tokens"]
    assert run("count", "--input", "self.txt", "--out", "counts") == 0
    marker = json.loads((place / "counts" / markers.MARKER_FILE).read_text())
    assert marker["kind"] == "counts"
    assert run("count", "--input", "self.txt", "--out", "counts", "--overwrite") == 0
    capsys.readouterr()
    assert run("encode", "--model", "model", "--input", "self.txt", "--out", "counts", "--overwrite") == 2
    assert "not an earlier bpe-spark encoded output" in capsys.readouterr().err
    assert (place / "counts" / markers.MARKER_FILE).is_file()
    assert not [p.name for p in place.iterdir() if p.name.startswith(".")]  # no staging left


def test_train_marks_the_model_and_the_checkpoint(spark, place):
    assert main(_in(place, ["train", "--input", "self.txt", "--vocab-size", "270", "--out", "model",
                            "--overwrite", "--checkpoint-dir", "ck"])) == 0
    assert markers.kind_of(str(place / "model")) == "model"
    assert markers.kind_of(str(place / "ck")) == "checkpoint"


def test_python_api_refuses_the_same_way(spark, place):
    from bpe_spark.spark import encode_dataset, read_documents
    from bpe_spark.spark import train as spark_train
    from bpe_spark.encoding.tokenizer import Tokenizer

    docs = read_documents(spark, str(place / "data"))
    before = _snapshot(place)
    with pytest.raises(OutputRefusedError, match="holds the input"):
        encode_dataset(docs, Tokenizer.load(place / "model"), str(place / "data"), overwrite=True)
    with pytest.raises(OutputRefusedError, match="holds the input"):
        spark_train(docs, TrainerConfig(vocab_size=270), checkpoint_dir=str(place))
    assert _snapshot(place) == before


def _dead_staging(parent: Path, name: str, tag: str) -> Path:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    me = owners.current_owner()
    stale = parent / f".{name}.{tag}-{me.host}-{child.pid}-{me.start}-0123abcd"
    (stale / "_pieces").mkdir(parents=True)
    (stale / "_pieces" / "piece-00000-00000.arrow").write_bytes(b"half")
    return stale


def test_next_run_removes_a_dead_runs_staging(spark, place):
    stale = _dead_staging(place, "ids", "staging")
    alive = place / output_guard.staging_name("ids", "staging")  # this process: a run still going
    alive.mkdir()
    assert main(_in(place, ["encode", "--model", "model", "--input", "self.txt", "--out", "ids"])) == 0
    assert not stale.exists() and alive.is_dir()
    stale_counts = _dead_staging(place, "counts", "staging")
    assert main(_in(place, ["count", "--input", "self.txt", "--out", "counts"])) == 0
    assert not stale_counts.exists()


@pytest.mark.slow
def test_killed_encode_leaves_nothing_complete_and_the_rerun_cleans_up(spark, place):
    big = place / "big.txt"
    big.write_text(TEXT * 40_000)
    bin_dir = Path(sys.executable).parent
    argv = ["encode", "--model", "model", "--input", "big.txt", "--out", "ids", "--master", "local[1]"]
    command = [str(bin_dir / "bpe-spark"), *argv]
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable, "PYSPARK_DRIVER_PYTHON": sys.executable}
    run = subprocess.Popen(command, cwd=place, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                           start_new_session=True)
    deadline = time.time() + 300
    while time.time() < deadline and not list(place.glob(".ids.staging-*")) and run.poll() is None:
        time.sleep(0.05)
    os.killpg(run.pid, signal.SIGKILL)
    run.wait()
    left = list(place.glob(".ids.staging-*"))
    assert left, "the encode ended before its staging directory appeared"
    assert not (place / "ids").exists()
    assert not list(place.glob(f".ids.*/{markers.MARKER_FILE}"))
    assert not list(place.glob(".ids.*/_manifest.json"))
    # the rerun in this process (the suite's session: no second JVM to start); the dead run's
    # staging directory is the driver's to remove
    assert main(_in(place, argv)) == 0
    assert not list(place.glob(".ids.*"))
    assert read_manifest(place / "ids")["documents"] == 3 * 40_000
