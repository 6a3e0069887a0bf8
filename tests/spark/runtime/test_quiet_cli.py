"""Quiet runs and one-line Spark failures (issue 16, acceptance 1 and 2): a failed Spark job
(Py4JJavaError, a task's root cause) and an AnalysisException through ``main(argv)``; Ctrl-C of a
running ``train`` process exits 130 in one line. (``train`` then ``encode`` as separate processes
with stderr free of JVM and Spark lines: tests/spark/encoding/test_encode_cli.py's end-to-end test.)"""

from __future__ import annotations

import gzip
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from tests.conftest import ROOT

from bpe_spark import TrainerConfig
from bpe_spark import train as core_train
from bpe_spark.cli import main, train

pytestmark = pytest.mark.spark

SAMPLE = str(ROOT / "data" / "sample" / "tiny_shakespeare.txt.gz")
TRAIN_ARGS = ["train", "--input", SAMPLE, "--vocab-size", "300"]


def _one_line(capsys) -> str:
    err = capsys.readouterr().err
    assert "Traceback" not in err
    assert err.count("\n") == 1, err
    return err.strip()


def test_a_failed_spark_job_is_its_root_cause_in_one_line(spark, tmp_path, monkeypatch, capsys):
    def failing_job(args):
        spark.sparkContext.parallelize([1, 2], 2).map(lambda x: x // 0).collect()

    monkeypatch.setattr(train, "run", failing_job)
    assert main([*TRAIN_ARGS, "--out", str(tmp_path / "m")]) == 1
    assert _one_line(capsys) == ("bpe-spark train: error: a Spark task failed: ZeroDivisionError: integer "
                                 "division or modulo by zero (run with --verbose for the trace)")


def test_an_analysis_exception_is_a_user_error_in_one_line(spark, tmp_path, monkeypatch, capsys):
    def bad_query(args):
        spark.sql("SELECT no_such_column").collect()

    monkeypatch.setattr(train, "run", bad_query)
    assert main([*TRAIN_ARGS, "--out", str(tmp_path / "m")]) == 2
    line = _one_line(capsys)
    assert line.startswith("bpe-spark train: error: AnalysisException: ")
    assert "no_such_column" in line


def test_a_full_disk_in_a_task_names_the_output_and_the_free_space(spark, tmp_path, monkeypatch, capsys):
    def full_disk(args):  # pyarrow's error on a full disk names no file
        def write(x):
            raise OSError("[Errno 28] Error writing bytes to file. Detail: [errno 28] No space left on device")

        spark.sparkContext.parallelize([1], 1).map(write).collect()

    monkeypatch.setattr(train, "run", full_disk)
    out = tmp_path / "m"
    assert main([*TRAIN_ARGS, "--out", str(out)]) == 2
    line = _one_line(capsys)
    assert line.startswith("bpe-spark train: error: a Spark task failed: OSError: [Errno 28] "), line
    assert f"--out {out}: " in line and " free of " in line and "Spark's scratch space " in line
    assert line.endswith(": free space there or write elsewhere") and "internal" not in line


def _command(*args: str) -> list[str]:
    return [sys.executable, "-m", "bpe_spark.cli", *args]


def _env() -> dict[str, str]:
    # the worktree's package first, and the quiet default: no --verbose, no trace
    env = dict(os.environ, PYSPARK_PYTHON=sys.executable, PYSPARK_DRIVER_PYTHON=sys.executable,
               PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep))
    env.pop("BPE_SPARK_TRACE", None)
    return env


def _has_java_child(pid: int) -> bool:
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == pid and "java" in (stat.parent / "comm").read_text():
            return True
    return False


@pytest.mark.slow
@pytest.mark.skipif(not Path("/proc").is_dir(), reason="finds the driver JVM through /proc")
def test_ctrl_c_of_a_running_train_exits_130_in_one_line(tmp_path):
    process = subprocess.Popen(_command(*TRAIN_ARGS, "--out", str(tmp_path / "m"), "--master", "local[2]"),
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=_env(), cwd=ROOT)
    try:
        deadline = time.monotonic() + 120
        while not _has_java_child(process.pid) and process.poll() is None and time.monotonic() < deadline:
            time.sleep(0.2)
        time.sleep(2)  # the JVM starting, or the first job running: Ctrl-C ends either in one line
        process.send_signal(signal.SIGINT)
        interrupted = time.monotonic()
        _, err = process.communicate(timeout=120)
    finally:
        process.kill()
    assert process.returncode == 130, err[-3000:]
    assert err == "bpe-spark train: interrupted\n"
    assert time.monotonic() - interrupted < 60
    assert not (tmp_path / "m").exists()


@pytest.mark.slow
def test_sigterm_of_a_running_encode_cleans_up_and_exits_143_in_one_line(tmp_path):
    model = tmp_path / "model"
    core_train(["the cat sat on the mat\n", "the dog sat on the log\n"] * 20, TrainerConfig(vocab_size=270)).save(model)
    corpus = tmp_path / "corpus.txt.gz"  # big enough to be running when SIGTERM comes
    corpus.write_bytes(gzip.compress(gzip.decompress(Path(SAMPLE).read_bytes()) * 8, compresslevel=1))
    out = tmp_path / "ids"
    process = subprocess.Popen(_command("encode", "--model", str(model), "--input", str(corpus), "--out", str(out),
                                        "--master", "local[2]"),
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=_env(), cwd=ROOT)
    try:
        deadline = time.monotonic() + 120
        while (process.poll() is None and time.monotonic() < deadline
               and not any(p.name.startswith(".ids.staging-") for p in tmp_path.iterdir())):
            time.sleep(0.1)
        assert process.poll() is None, "the encode ended before its staging directory was seen"
        time.sleep(1)  # its tasks writing into the staging directory
        process.send_signal(signal.SIGTERM)  # what timeout, YARN, Kubernetes and Slurm send
        _, err = process.communicate(timeout=120)
    finally:
        process.kill()
    assert process.returncode == 143, err[-3000:]
    assert err == "bpe-spark encode: terminated (SIGTERM)\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["corpus.txt.gz", "model"]  # no staging left


def test_a_python_worker_out_of_memory_names_the_worker_and_the_setting(spark, tmp_path, monkeypatch, capsys):
    def hungry(args):
        def allocate(x):
            raise MemoryError  # what a worker over spark.executor.pyspark.memory meets

        spark.sparkContext.parallelize([1], 1).map(allocate).collect()

    monkeypatch.setattr(train, "run", hungry)
    assert main([*TRAIN_ARGS, "--out", str(tmp_path / "m")]) == 2
    line = _one_line(capsys)
    assert line.startswith("bpe-spark train: error: a Python worker ran out of memory (MemoryError): raise --set "
                           "spark.executor.pyspark.memory=... (now "), line


def test_a_driver_jvm_that_exited_out_of_memory_is_named_not_a_refused_connection(monkeypatch):
    from pyspark import SparkContext

    from bpe_spark.cli.failures import describe_failure

    class Gateway:  # a JVM that Spark's handler ended on an OutOfMemoryError (exit status 52)
        proc = subprocess.Popen(["sh", "-c", "exit 52"])

    monkeypatch.setattr(SparkContext, "_gateway", Gateway)
    monkeypatch.setattr(SparkContext, "_active_spark_context", None)
    status, line = describe_failure(ConnectionRefusedError(111, "Connection refused"))
    assert status == 2
    assert line.startswith("error: the Spark driver JVM ran out of memory and exited (Java heap space) (a local "
                           "master runs the tasks in it): raise its memory with --set spark.driver.memory=...")


_HEAP_HUNGRY = """
import sys
from bpe_spark.cli import main, train
from bpe_spark.cli.arguments import start_spark

def heap_hungry(args):  # a task whose JVM side needs more than the driver's heap
    spark = start_spark(args, "train")
    spark.range(4).repartition(1).selectExpr("repeat('x', 400000000) AS s").selectExpr("length(concat(s, s, s))").collect()

train.run = heap_hungry
sys.exit(main(sys.argv[1:]))
"""


@pytest.mark.slow
def test_a_jvm_out_of_memory_names_the_process_and_the_setting(tmp_path):
    done = subprocess.run([sys.executable, "-c", _HEAP_HUNGRY, *TRAIN_ARGS, "--out", str(tmp_path / "m"),
                           "--master", "local[1]", "--set", "spark.driver.memory=512m"],
                          capture_output=True, text=True, env=_env(), cwd=ROOT, timeout=300, check=False)
    assert done.returncode == 2, done.stderr[-3000:]
    assert done.stderr.splitlines()[-1] == (
        "bpe-spark train: error: the Spark driver JVM ran out of memory (Java heap space) (a local master runs the "
        "tasks in it): raise its memory with --set spark.driver.memory=... (now 512m)")
