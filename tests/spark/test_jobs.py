"""The spark-submit jobs and the ``bpe-spark train`` command (issue 3 deliverables 5-7)."""

from __future__ import annotations

import json
import os
import runpy
import subprocess
import sys
from pathlib import Path

import pytest
from tests.conftest import ROOT, corpus_lines

from bpe_spark import TrainerConfig
from bpe_spark import train as core_train
from bpe_spark.cli import main
from bpe_spark.encoding.tokenizer import Tokenizer

pytestmark = pytest.mark.spark

MODEL_FILES = {"_BPE_SPARK", "bpe_spark.json", "merges.parquet", "vocab.parquet", "tokenizer.json",
               "tokenizer_config.json", "special_tokens_map.json"}


@pytest.fixture(scope="module")
def corpus_file(tmp_path_factory):
    lines = corpus_lines("tiny_shakespeare", 30_000)
    path = tmp_path_factory.mktemp("corpus") / "shakespeare.txt"
    path.write_text("".join(lines), encoding="utf-8")
    return path, lines


def run_job(name: str, *args: str, monkeypatch) -> int:
    """Run ``jobs/<name>.py`` in this process as spark-submit runs it (as ``__main__``, with ``args``)."""
    path = ROOT / "jobs" / f"{name}.py"
    monkeypatch.setattr(sys, "argv", [str(path), *args])
    with pytest.raises(SystemExit) as exited:
        runpy.run_path(str(path), run_name="__main__")
    return exited.value.code


def test_spark_submit_trains_in_local_mode(corpus_file, tmp_path):
    path, lines = corpus_file
    out = tmp_path / "model"
    env = dict(os.environ, PYSPARK_PYTHON=sys.executable, PYSPARK_DRIVER_PYTHON=sys.executable)
    command = [
        str(Path(sys.executable).parent / "spark-submit"), "--master", "local[2]",  # the venv of the tests
        "--conf", "spark.ui.enabled=false",
        # the documented quiet logs of a client-mode job (conf/log4j2.properties)
        "--driver-java-options", f"-Dlog4j2.configurationFile={ROOT / 'conf' / 'log4j2.properties'}",
        str(ROOT / "jobs" / "train_tokenizer.py"),
        "--input", str(path), "--vocab-size", "320", "--special-token", "<|endoftext|>", "--out", str(out),
    ]
    result = subprocess.run(command, capture_output=True, text=True, env=env, cwd=ROOT, timeout=300, check=False)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "vocabulary: 320" in result.stdout
    # no Spark log line; the JVM's incubator warning (printed before any logging) is spark-submit's
    noise = [line for line in result.stderr.splitlines() if line.strip() and not line.startswith("bpe-spark ")]
    assert noise in ([], ["WARNING: Using incubator modules: jdk.incubator.vector"]), result.stderr[-3000:]
    assert {p.name for p in out.iterdir()} == MODEL_FILES | {"report.html"}  # in-process runs skip it (conftest)
    tok = Tokenizer.load(out)
    expected = core_train(lines, TrainerConfig(vocab_size=320, special_tokens=("<|endoftext|>",)))
    assert tok.merges == expected.merges
    meta = json.loads((out / "bpe_spark.json").read_text(encoding="utf-8"))
    assert meta["stats"]["documents"] == len(lines)
    assert meta["stats"]["rounds"] == 1


def test_cli_train_prints_a_summary_and_writes_the_model(spark, corpus_file, tmp_path, capsys):
    path, lines = corpus_file
    out = tmp_path / "model"
    code = main(["train", "--input", str(path), "--vocab-size", "300", "--out", str(out),
                 "--tie-break", "lexicographic", "--driver-budget", "100%", "--sample", "Good morrow, sir"])
    assert code == 0
    printed = capsys.readouterr().out
    for part in ("vocabulary: 300 = 256 bytes + 44 merges", "corpus: ", "rounds: ", "merges per round: ",
                 "time: count", "sample: 'Good morrow, sir' -> ["):
        assert part in printed, printed
    tok = Tokenizer.load(out)
    assert tok.merges == core_train(lines, TrainerConfig(vocab_size=300, tie_break="lexicographic")).merges
    meta = json.loads((out / "bpe_spark.json").read_text(encoding="utf-8"))
    assert meta["stats"]["mode"] == "driver" and meta["stats"]["rounds"] == 1
    assert meta["stats"]["driver_budget"] == meta["stats"]["distinct_pretokens"]
    assert [r["merges"] for r in meta["metadata"]["rounds"]] == [44]
    assert {"count_seconds", "merge_seconds", "total_seconds"} <= set(meta["timings"])


def test_counts_job_then_train_from_counts(spark, corpus_file, tmp_path, capsys, monkeypatch):
    path, lines = corpus_file
    counts = tmp_path / "counts.parquet"
    assert run_job("count_pretokens", "--input", str(path), "--out", str(counts), monkeypatch=monkeypatch) == 0
    assert "distinct pretokens" in capsys.readouterr().out
    out = tmp_path / "model"
    assert main(["train", "--counts", str(counts), "--vocab-size", "290", "--out", str(out)]) == 0
    assert Tokenizer.load(out).merges == core_train(lines, TrainerConfig(vocab_size=290)).merges


def test_cli_config_file(spark, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(ROOT)
    out = tmp_path / "example"
    config = json.loads((ROOT / "conf" / "train-example.json").read_text(encoding="utf-8"))
    assert main(["train", "--config", "conf/train-example.json", "--vocab-size", "400", "--out", str(out)]) == 0
    tok = Tokenizer.load(out)
    assert tok.vocab_size == 400  # the command line wins over the file
    assert tok.special_tokens == {token: 399 for token in config["special_tokens"]}
    assert config["sample"] in capsys.readouterr().out


def test_cli_bad_inputs_fail_clearly_and_leave_no_output(spark, corpus_file, tmp_path, capsys):
    path, _ = corpus_file
    out = tmp_path / "model"
    (tmp_path / "empty.txt").write_text("", encoding="utf-8")
    (tmp_path / "docs.jsonl").write_text('{"body": "hello"}\n', encoding="utf-8")
    cases = [
        (["--input", str(tmp_path / "missing*.txt")], "matches no input file"),
        (["--input", str(tmp_path / "empty.txt")], "no pretoken"),
        (["--input", str(tmp_path / "docs.jsonl"), "--input-format", "jsonl"], "column 'text' not found"),
        (["--input", str(path), "--resume"], "--checkpoint-dir"),
        (["--input", str(path), "--driver-budget", "lots"], "driver budget"),
    ]
    for extra, message in cases:
        assert main(["train", *extra, "--vocab-size", "300", "--out", str(out)]) == 2
        assert message in capsys.readouterr().err
        assert not out.exists()
    out.mkdir()
    (out / "keep.txt").write_text("precious", encoding="utf-8")
    assert main(["train", "--input", str(path), "--vocab-size", "300", "--out", str(out)]) == 2
    assert "--overwrite" in capsys.readouterr().err
    assert (out / "keep.txt").read_text(encoding="utf-8") == "precious"
    # --overwrite replaces only an earlier model (or an empty directory), never other files
    assert main(["train", "--input", str(path), "--vocab-size", "300", "--out", str(out), "--overwrite"]) == 2
    assert "is not an earlier bpe-spark model output" in capsys.readouterr().err
    assert (out / "keep.txt").read_text(encoding="utf-8") == "precious"
    (out / "keep.txt").unlink()
    assert main(["train", "--input", str(path), "--vocab-size", "300", "--out", str(out), "--overwrite"]) == 0
    assert {p.name for p in out.iterdir()} == MODEL_FILES
