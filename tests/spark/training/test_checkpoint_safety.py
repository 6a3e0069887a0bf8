"""Checkpoints are safe to resume (issue 12 item 4): a checkpoint records a fingerprint of its
input (files, sizes, modification times, the options that decide the counts) and of the config;
``--resume`` refuses another input or config, and a checkpoint directory that does not exist or
holds no checkpoint, each with one line; a run holds a lock on its checkpoint directory."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from tests.conftest import corpus_lines

from bpe_spark import TrainerConfig
from bpe_spark.storage import owners
from bpe_spark.storage import markers
from bpe_spark.cli import main
from bpe_spark.errors import CheckpointError, CheckpointLockedError
from bpe_spark.spark import read_documents, train
from bpe_spark.spark.training.checkpoint import META_FILE
from bpe_spark.spark.training.checkpoint_lock import LOCK_FILE
from bpe_spark.encoding.tokenizer import Tokenizer

pytestmark = pytest.mark.spark
HOST = owners.current_owner().host


@pytest.fixture(scope="module")
def corpora(tmp_path_factory):
    """Two small corpora: lines of tiny Shakespeare, and the same with one more line."""
    root = tmp_path_factory.mktemp("ckpt-corpora")
    lines = corpus_lines("tiny_shakespeare", 12_000)
    first, second = root / "a.txt", root / "b.txt"
    first.write_text("".join(lines), encoding="utf-8")
    second.write_text("".join(lines) + "Exeunt all, at last.\n", encoding="utf-8")
    return first, second


def train_args(corpus, checkpoint, out, *extra):
    return ["train", "--input", str(corpus), "--vocab-size", "300",
            "--checkpoint-dir", str(checkpoint), "--out", str(out), "--master", "local[2]", "--progress", "off", *extra]


def one_line_error(capsys) -> str:
    err = capsys.readouterr().err.strip()
    assert err.startswith("bpe-spark train: error: ") and "\n" not in err, err
    return err


def test_resume_refuses_another_input_and_says_what_differs(spark, corpora, tmp_path, capsys):
    first, second = corpora
    corpus = tmp_path / "a.txt"  # a copy, changed at the end
    corpus.write_bytes(first.read_bytes())
    checkpoint = tmp_path / "ckpt"
    assert main(train_args(corpus, checkpoint, tmp_path / "m1")) == 0
    recorded = json.loads((checkpoint / META_FILE).read_text())
    (uri, size, mtime), = recorded["input"]["files"]
    assert uri.endswith("a.txt") and size == corpus.stat().st_size and mtime == corpus.stat().st_mtime_ns // 10**6
    assert recorded["input"]["options"]["input_format"] == "text"
    assert not (checkpoint / LOCK_FILE).exists()  # released at the end

    assert main(train_args(second, checkpoint, tmp_path / "m2", "--resume")) == 2
    err = one_line_error(capsys)
    assert "another input" in err and "b.txt: new" in err and "a.txt: no longer read" in err
    assert not (tmp_path / "m2").exists()
    # the options that decide the counts are in it too, and the config
    assert main(train_args(corpus, checkpoint, tmp_path / "m3", "--resume", "--document", "file")) == 2
    assert "document: 'line' there, 'file' now" in one_line_error(capsys)
    assert main(train_args(corpus, checkpoint, tmp_path / "m4", "--resume", "--vocab-size", "301")) == 2
    assert "another config (vocab_size: 300 there, 301 now)" in one_line_error(capsys)

    # the same input and settings resume (to the finished model)
    assert main(train_args(corpus, checkpoint, tmp_path / "m5", "--resume")) == 0
    assert Tokenizer.load(tmp_path / "m5").merges == Tokenizer.load(tmp_path / "m1").merges
    # the same file, changed since: its size and time are in the fingerprint
    with corpus.open("a", encoding="utf-8") as fh:
        fh.write("One more line.\n")
    assert main(train_args(corpus, checkpoint, tmp_path / "m6", "--resume")) == 2
    assert "a.txt: changed since" in one_line_error(capsys)


def test_resume_refuses_a_missing_or_empty_checkpoint_directory(spark, corpora, tmp_path, capsys):
    first, _ = corpora
    missing = tmp_path / "no-such-ckpt"
    assert main(train_args(first, missing, tmp_path / "m", "--resume")) == 2
    err = one_line_error(capsys)
    assert str(missing) in err and "does not exist" in err
    assert not missing.exists() and not (tmp_path / "m").exists()

    empty = tmp_path / "empty-ckpt"
    empty.mkdir()
    assert main(train_args(first, empty, tmp_path / "m", "--resume")) == 2
    assert "holds no checkpoint" in one_line_error(capsys)


def test_a_second_run_on_a_locked_checkpoint_directory_refuses(spark, corpora, tmp_path):
    first, _ = corpora
    cfg = TrainerConfig(vocab_size=300)
    docs = read_documents(spark, str(first))
    checkpoint = tmp_path / "ckpt"
    markers.write_marker(checkpoint.mkdir() or checkpoint, "checkpoint")
    # a run alive on this host (this test's parent process stands in for it)
    parent = os.getppid()
    owner = {"host": HOST, "pid": parent, "start": owners.process_start(parent),
             "started": "2026-01-01T00:00:00Z"}
    (checkpoint / LOCK_FILE).write_text(json.dumps(owner))
    with pytest.raises(CheckpointLockedError, match=f"pid {os.getppid()}") as caught:
        train(docs, cfg, checkpoint_dir=str(checkpoint))
    assert "\n" not in str(caught.value) and LOCK_FILE in str(caught.value)
    assert json.loads((checkpoint / LOCK_FILE).read_text()) == owner  # untouched
    assert not (checkpoint / META_FILE).exists()
    # a run on another host: never judged from here
    (checkpoint / LOCK_FILE).write_text(json.dumps({**owner, "host": "elsewhere.example", "pid": 1}))
    with pytest.raises(CheckpointLockedError, match="elsewhere.example"):
        train(docs, cfg, checkpoint_dir=str(checkpoint))


def test_a_lock_left_by_a_dead_process_is_taken_over_with_a_warning(spark, corpora, tmp_path, caplog):
    first, _ = corpora
    cfg = TrainerConfig(vocab_size=300)
    docs = read_documents(spark, str(first))
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True,
                          text=True, check=True)
    checkpoint = tmp_path / "ckpt"
    markers.write_marker(checkpoint.mkdir() or checkpoint, "checkpoint")
    stale = {"host": HOST, "pid": int(dead.stdout), "start": 1764590400, "started": "2026-01-01T00:00:00Z"}
    (checkpoint / LOCK_FILE).write_text(json.dumps(stale))
    with caplog.at_level("WARNING", logger="bpe_spark"):
        tok = train(docs, cfg, checkpoint_dir=str(checkpoint))
    assert tok.merges == train(docs, cfg).merges
    assert any("stale" in r.getMessage() and str(stale["pid"]) in r.getMessage() for r in caplog.records)
    assert not (checkpoint / LOCK_FILE).exists()
    assert (checkpoint / META_FILE).exists()


def test_the_lock_is_released_when_training_fails(spark, tmp_path):
    docs = spark.createDataFrame([("<s>",)], "text string")
    checkpoint = tmp_path / "ckpt"
    with pytest.raises(Exception, match="no pretoken"):
        train(docs, TrainerConfig(vocab_size=300, special_tokens=("<s>",)), checkpoint_dir=str(checkpoint))
    assert not (checkpoint / LOCK_FILE).exists()


def test_an_old_checkpoint_without_fingerprint_is_refused(spark, corpora, tmp_path):
    first, _ = corpora
    cfg = TrainerConfig(vocab_size=300)
    checkpoint = tmp_path / "ckpt"
    checkpoint.mkdir()
    (checkpoint / META_FILE).write_text(json.dumps({"config": cfg.to_dict(), "stats": {}}))
    with pytest.raises(CheckpointError, match="no input fingerprint"):
        train(read_documents(spark, str(first)), cfg, checkpoint_dir=str(checkpoint), resume=True)
