"""One line and an exit status for every failure a user can cause, through ``main(argv)``
(bpe_spark.cli.failures): a bad or unreachable master (found before Spark starts), a closed
stdout pipe, Ctrl-C, an OSError on a path, an internal error, and the trace when asked for.
Spark's own errors (Py4JJavaError, AnalysisException) and the separate processes are in
tests/spark/runtime/test_quiet_cli.py."""

from __future__ import annotations

import errno
import os
import signal
import sys
import time

import pytest

from bpe_spark import TrainerConfig
from bpe_spark import train as core_train
from bpe_spark.cli import inspect, main, train
from bpe_spark.models import gpt2
from bpe_spark.cli.failures import TRACE_ENV

SAMPLE = "data/sample/tiny_shakespeare.txt.gz"


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    path = tmp_path_factory.mktemp("model") / "m"
    core_train(["the cat sat on the mat\n", "the dog sat on the log\n"] * 20, TrainerConfig(vocab_size=270)).save(path)
    return str(path)


def _one_line(capsys) -> str:
    err = capsys.readouterr().err
    assert "Traceback" not in err
    assert err.count("\n") == 1, err
    return err.strip()


@pytest.mark.parametrize(("master", "expected"), [
    ("foo://x", "bpe-spark train: error: Spark master 'foo://x' is not a master URL Spark knows"),
    ("local[two]", "bpe-spark train: error: Spark master 'local[two]' is not a master URL Spark knows"),
    ("spark://127.0.0.1:1", ("bpe-spark train: error: Spark master spark://127.0.0.1:1 does not answer "
                             "(127.0.0.1:1: Connection refused)")),
])
def test_a_bad_or_unreachable_master_is_one_line_before_spark_starts(master, expected, tmp_path, capsys):
    started = time.monotonic()
    status = main(["train", "--input", SAMPLE, "--vocab-size", "300", "--out", str(tmp_path / "m"),
                   "--master", master])
    assert status == 2
    assert _one_line(capsys).startswith(expected)
    assert time.monotonic() - started < 30  # not Spark's minute of retries (the line is ours: before Spark)
    assert not (tmp_path / "m").exists()


def test_a_closed_pipe_exits_141_silently(model, monkeypatch, capsys):
    read_end, write_end = os.pipe()
    os.close(read_end)
    stdout = os.fdopen(write_end, "w")
    monkeypatch.setattr(sys, "stdout", stdout)
    try:
        assert main(["inspect", model]) == 141
        stdout.write("x" * 100_000)  # stdout now points at devnull: the exit's flush cannot fail
        stdout.flush()
    finally:
        stdout.close()
    assert capsys.readouterr().err == ""


def test_ctrl_c_is_one_line_and_130(model, monkeypatch, capsys):
    def interrupted(args):
        raise KeyboardInterrupt

    monkeypatch.setattr(inspect, "run", interrupted)
    assert main(["inspect", model]) == 130
    assert _one_line(capsys) == "bpe-spark inspect: interrupted"


def test_sigterm_is_one_line_and_143(model, monkeypatch, capsys):
    def terminated(args):
        os.kill(os.getpid(), signal.SIGTERM)  # as timeout, YARN, Kubernetes or Slurm send it
        time.sleep(5)
        raise AssertionError("SIGTERM did not end the command")

    monkeypatch.setattr(inspect, "run", terminated)
    previous = signal.getsignal(signal.SIGTERM)
    assert main(["inspect", model]) == 143
    assert _one_line(capsys) == "bpe-spark inspect: terminated (SIGTERM)"
    assert signal.getsignal(signal.SIGTERM) == previous  # the command's handler only while it runs


def test_an_oserror_on_a_path_names_the_path(model, monkeypatch, capsys):
    def denied(args):
        raise PermissionError(13, "Permission denied", "/models/locked")

    monkeypatch.setattr(inspect, "run", denied)
    assert main(["inspect", model]) == 2
    assert _one_line(capsys) == "bpe-spark inspect: error: /models/locked: Permission denied"


def test_a_full_disk_in_export_names_the_output_and_its_free_space(model, tmp_path, monkeypatch, capsys):
    class FullDisk:  # a file whose writes fail as on a full disk: Python's write names no path
        def __init__(self, *args, **kwargs):
            pass

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            return False

        def write(self, data):
            raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(gpt2, "open", FullDisk, raising=False)
    out = tmp_path / "gpt2"
    assert main(["export", "--model", model, "--format", "gpt2", "--out", str(out)]) == 2
    line = _one_line(capsys)
    assert line.startswith(f"bpe-spark export: error: No space left on device (writing --out {out}); "), line
    assert " free of " in line and line.endswith(": free space there or write elsewhere")
    assert sorted(p.name for p in tmp_path.iterdir()) == []  # nothing staged is left


@pytest.mark.parametrize("exc", [OSError(errno.ENOSPC, "No space left on device"),
                                 ConnectionResetError(104, "Connection reset by peer"), OSError("odd")])
def test_an_oserror_is_never_internal(model, tmp_path, exc, monkeypatch, capsys):
    def failing(args):  # what a model's save meets at the end of train
        raise exc

    monkeypatch.setattr(train, "run", failing)
    assert main(["train", "--input", SAMPLE, "--vocab-size", "300", "--out", str(tmp_path / "m")]) == 2
    line = _one_line(capsys)
    assert line.startswith("bpe-spark train: error: ") and "internal" not in line
    if exc.errno == errno.ENOSPC:
        assert f"(writing --out {tmp_path / 'm'}); " in line and " free of " in line


def test_an_internal_error_is_one_line_and_the_trace_on_request(model, monkeypatch, capsys):
    def broken(args):
        raise RuntimeError("boom\nsecond line")

    monkeypatch.setattr(inspect, "run", broken)
    monkeypatch.delenv(TRACE_ENV, raising=False)
    assert main(["inspect", model]) == 1
    assert _one_line(capsys) == ("bpe-spark inspect: internal error: RuntimeError: boom "
                                 f"(run with {TRACE_ENV}=1 for the trace)")
    monkeypatch.setenv(TRACE_ENV, "1")
    assert main(["inspect", model]) == 1
    err = capsys.readouterr().err
    assert err.startswith("Traceback (most recent call last):")
    assert 'raise RuntimeError("boom' in err
    assert err.splitlines()[-1] == "bpe-spark inspect: internal error: RuntimeError: boom"


def test_a_user_error_still_names_what_to_fix(tmp_path, capsys):
    assert main(["inspect", str(tmp_path / "missing")]) == 2
    line = _one_line(capsys)
    assert line.startswith("bpe-spark inspect: error: ") and "missing" in line
