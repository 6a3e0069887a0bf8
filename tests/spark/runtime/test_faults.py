"""Faults change nothing (issue 12 item 7): a task that fails once while counting, in a training
round or while encoding is retried by Spark (local mode too) to the identical result; a driver
killed during rounds resumes to the same merges; a killed encode, run again, writes the same bytes.

The faults come from the test hook of :mod:`bpe_spark.spark.runtime.faults`; that they really happened
is read from Spark's status tracker (failed tasks of the test's job group).
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
from tests.conftest import ROOT, corpus_lines, encode_output_bytes

from bpe_spark import TrainerConfig
from bpe_spark import train as core_train
from bpe_spark.cli import main
from bpe_spark.spark import count_pretokens, encode, encode_dataset, read_documents, train
from bpe_spark.spark.runtime import faults
from bpe_spark.spark.training.checkpoint import MERGES_FILE
from bpe_spark.spark.runtime.session import with_task_retries
from bpe_spark.encoding.tokenizer import Tokenizer

pytestmark = pytest.mark.spark


@contextlib.contextmanager
def injected(spark, stage: str):
    """Run the block's jobs with the fault ``stage``; yields a function giving the tasks that
    failed in them so far."""
    sc = spark.sparkContext
    group = f"fault-{stage}-{uuid.uuid4().hex[:8]}"
    sc.setJobGroup(group, f"injected fault: {stage}")
    sc.setLocalProperty(faults.PROPERTY, stage)

    def failed_tasks() -> int:
        tracker = sc.statusTracker()
        stages = [s for job in tracker.getJobIdsForGroup(group) for s in tracker.getJobInfo(job).stageIds]
        return sum(info.numFailedTasks for info in map(tracker.getStageInfo, stages) if info is not None)

    try:
        yield failed_tasks
    finally:
        sc.setLocalProperty(faults.PROPERTY, None)
        sc.setLocalProperty("spark.jobGroup.id", None)


@pytest.fixture(scope="module")
def lines():
    return corpus_lines("tiny_shakespeare", 16_000)


@pytest.fixture(scope="module")
def corpus_files(lines, tmp_path_factory):
    """The lines in two text files (two splits, so two counting and encoding tasks)."""
    root = tmp_path_factory.mktemp("fault-corpus")
    half = len(lines) // 2
    for name, part in (("part-0.txt", lines[:half]), ("part-1.txt", lines[half:])):
        (root / name).write_text("".join(part), encoding="utf-8")
    return sorted(str(p) for p in root.iterdir())


def test_local_masters_get_task_retries(spark):
    assert with_task_retries("local[2]") == "local[2,4]"
    assert with_task_retries("local[*]", "3") == "local[*,3]"
    assert with_task_retries("local[2,1]") == "local[2,1]"  # the user's choice stays
    assert spark.sparkContext.master == "local[2,2]"


@pytest.mark.parametrize("source", ["dataframe", "text files"])
def test_a_counting_task_that_fails_once_gives_the_same_counts(spark, lines, corpus_files, source):
    cfg = TrainerConfig(pattern="words", lowercase=True)  # counted by the Python tasks
    if source == "dataframe":
        docs = spark.createDataFrame([(line,) for line in lines], "text string").repartition(3)
    else:
        docs = read_documents(spark, corpus_files)  # read by the tasks themselves (textsplits)
    with injected(spark, "none") as failed:  # no fault named: no failure
        expected = sorted(map(tuple, count_pretokens(docs, cfg).collect()))
        assert failed() == 0
    with injected(spark, "count") as failed:
        counts = sorted(map(tuple, count_pretokens(docs, cfg).collect()))
        assert failed() >= 1
    assert counts == expected


def test_a_round_task_that_fails_once_gives_the_same_merges(spark, lines):
    cfg = TrainerConfig(vocab_size=280)
    docs = spark.createDataFrame([(line,) for line in lines], "text string").repartition(3)
    with injected(spark, "round") as failed:
        tok = train(docs, cfg, driver_budget=0.3)
        assert failed() >= 1
    assert tok.metadata["stats"]["mode"] == "rounds"
    assert tok.merges == core_train(lines, cfg).merges


@pytest.fixture(scope="module")
def model(lines, tmp_path_factory):
    path = tmp_path_factory.mktemp("fault-model") / "model"
    core_train(lines, TrainerConfig(vocab_size=400)).save(path)
    return path


@pytest.mark.parametrize("output_format", ["bin", "parquet"])
def test_an_encoding_task_that_fails_once_gives_the_same_bytes(spark, corpus_files, model, tmp_path, output_format):
    tok = Tokenizer.load(model)
    docs = read_documents(spark, corpus_files)
    encode_dataset(docs, tok, str(tmp_path / "plain"), output_format=output_format)
    with injected(spark, "encode") as failed:
        encode_dataset(docs, tok, str(tmp_path / "faulty"), output_format=output_format)
        assert failed() >= 1
    assert encode_output_bytes(tmp_path / "faulty") == encode_output_bytes(tmp_path / "plain")


def test_the_lazy_encode_retried_gives_the_same_rows(spark, lines, model):
    tok = Tokenizer.load(model)
    docs = spark.createDataFrame([(line,) for line in lines], "text string").repartition(3)
    expected = [tuple(row) for row in encode(docs, tok).orderBy("doc_id").collect()]
    with injected(spark, "encode") as failed:
        rows = [tuple(row) for row in encode(docs, tok).orderBy("doc_id").collect()]
        assert failed() >= 1
    assert rows == expected
    assert sorted(list(r[1]) for r in rows) == sorted(tok.encode(line) for line in lines)


# --- killed drivers -------------------------------------------------------------------------------
def start_cli(args: list[str], **env) -> subprocess.Popen:
    """``bpe-spark ARGS`` in its own process group (the driver and the JVM it starts)."""
    return subprocess.Popen([sys.executable, "-m", "bpe_spark.cli", *args], cwd=ROOT, start_new_session=True,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env={**os.environ, **env})


def kill_when(process: subprocess.Popen, ready, timeout: float = 300) -> None:
    """SIGKILL ``process``'s group as soon as ``ready()``; fail if it ends or times out first."""
    deadline = time.monotonic() + timeout
    try:
        while not ready():
            if process.poll() is not None:
                pytest.fail(f"the run ended before it was killed: {process.stderr.read().decode()[-2000:]}")
            if time.monotonic() > deadline:
                pytest.fail("the run never reached the point where it is killed")
            time.sleep(0.05)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        process.wait()
    assert process.returncode == -signal.SIGKILL


def test_a_driver_killed_during_rounds_resumes_to_the_same_merges(spark, lines, corpus_files, tmp_path):
    checkpoint, out = tmp_path / "ckpt", tmp_path / "model"
    args = ["train", "--input", *corpus_files, "--vocab-size", "290", "--driver-budget", "0.2",
            "--checkpoint-dir", str(checkpoint), "--out", str(out), "--master", "local[2]"]

    def rounds_checkpointed() -> int:
        return len(list((checkpoint / MERGES_FILE).glob("part-*.parquet")))

    kill_when(start_cli(args), lambda: rounds_checkpointed() >= 2)
    assert not out.exists()
    assert main([*args, "--resume"]) == 0  # the dead run's lock is stale: taken over
    tok = Tokenizer.load(out)
    resumed = [r for r in tok.metadata["rounds"] if r.get("resumed")]
    assert len(resumed) >= 2
    assert tok.merges == core_train(lines, TrainerConfig(vocab_size=290)).merges


def test_a_killed_encode_run_again_writes_the_same_bytes(spark, corpus_files, model, tmp_path):
    def args(out: Path) -> list[str]:
        return ["encode", "--model", str(model), "--input", *corpus_files, "--out", str(out),
                "--output-format", "bin", "--master", "local[2]"]

    out = tmp_path / "ids"

    def a_piece_is_written() -> bool:  # partition 1's piece; partition 0 stalls
        return any(p.is_file() for p in tmp_path.glob(".ids.*/**/*"))

    kill_when(start_cli(args(out), **{faults.ENV: "encode:stall"}), a_piece_is_written)
    assert not out.exists()  # nothing that looks complete
    assert main(args(out)) == 0
    assert main(args(tmp_path / "uninterrupted")) == 0
    assert encode_output_bytes(out) == encode_output_bytes(tmp_path / "uninterrupted")
