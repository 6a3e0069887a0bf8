"""Progress on Spark: a train (on the driver and in rounds) and an encode with a log-mode reporter
write their phases' lines with the totals, from the status tracker and the merge loop, and the
results are those of a run without progress; the CLI's non-terminal stderr holds the lines."""

from __future__ import annotations

import io
import re

import pytest
from tests.conftest import corpus_lines, encode_output_bytes

from bpe_spark.cli import main
from bpe_spark.bpe.config import TrainerConfig
from bpe_spark.spark.runtime.progress import FAILURE_WORDS, Progress
from bpe_spark.spark import encode_dataset, read_documents, train
from bpe_spark.encoding.tokenizer import Tokenizer

pytestmark = pytest.mark.spark


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    path = tmp_path_factory.mktemp("progress-corpus") / "corpus.txt"
    path.write_text("".join(corpus_lines("tiny_shakespeare", 20_000)), encoding="utf-8")
    return path


def log_reporter(command: str) -> tuple[Progress, io.StringIO]:
    out = io.StringIO()
    return Progress("log", command=command, stream=out, every=0.0), out


def clean(lines: list[str]) -> None:
    assert lines
    for line in lines:
        assert line.startswith("bpe-spark "), line
        assert not any(word in line for word in FAILURE_WORDS), line


def test_train_and_encode_write_their_phases_and_the_same_results(spark, corpus, tmp_path):
    size = corpus.stat().st_size
    cfg = TrainerConfig(vocab_size=600)
    docs = read_documents(spark, str(corpus))
    plain = train(docs, cfg)
    progress, out = log_reporter("train")
    shown = train(read_documents(spark, str(corpus)), cfg, progress=progress)
    assert shown.merges == plain.merges and shown.vocab == plain.vocab

    lines = out.getvalue().splitlines()
    clean(lines)
    mb = f"{size / 1e6:.2f}"  # below 1 MB: two decimals
    counted = [line for line in lines if line.startswith("bpe-spark train: counting: done, ")]
    assert len(counted) == 1
    assert re.fullmatch(rf"bpe-spark train: counting: done, {mb}/{mb} MB in \d+ s, (\d+)/\1 tasks, [\d.]+ MB/s",
                        counted[0]), counted[0]
    assert f"bpe-spark train: merging: 256/{len(plain.merges)} merges" in out.getvalue()
    assert re.fullmatch(rf"bpe-spark train: merging: done, {len(plain.merges)}/{len(plain.merges)} merges in \d+ s"
                        r"(, [\d,.]+ merges/s)?", lines[-1]), lines[-1]

    encoded, silent = tmp_path / "shown", tmp_path / "silent"
    progress, out = log_reporter("encode")
    encode_dataset(read_documents(spark, str(corpus)), plain, str(encoded), progress=progress)
    encode_dataset(read_documents(spark, str(corpus)), plain, str(silent))
    assert encode_output_bytes(encoded) == encode_output_bytes(silent)
    lines = out.getvalue().splitlines()
    clean(lines)
    assert any(line.startswith(f"bpe-spark encode: encoding: done, {mb}/{mb} MB in ") for line in lines), lines
    assert re.fullmatch(r"bpe-spark encode: writing: done, (\d+)/\1 tasks in \d+ s(, [\d.]+ tasks/s)?",
                        lines[-1]), lines[-1]


def test_rounds_show_the_round_merges_so_far_and_threshold(spark, corpus):
    cfg = TrainerConfig(vocab_size=300)
    progress, out = log_reporter("train")
    tok = train(read_documents(spark, str(corpus)), cfg, driver_budget=0.05, progress=progress)
    rounds = tok.metadata["rounds"]
    assert tok.metadata["stats"]["mode"] == "rounds" and len(rounds) > 1
    text = out.getvalue()
    clean(text.splitlines())
    done = 0
    for record in rounds:
        done += record["merges"]
        threshold = f", threshold {record['threshold']:,}" if record.get("threshold") is not None else ""
        assert f"bpe-spark train: round {record['round']}: {done:,} merges so far{threshold}\n" in text
        assert f"bpe-spark train: round {record['round']}: counting pairs: done, " in text
    assert done == len(tok.merges) == 44


def test_the_cli_logs_progress_on_a_non_terminal_stderr(spark, corpus, tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("BPE_SPARK_PROGRESS_SECONDS", "0.5")
    model = tmp_path / "model"
    assert main(["train", "--input", str(corpus), "--vocab-size", "300", "--out", str(model)]) == 0
    err = capsys.readouterr().err
    shown = [line for line in err.splitlines() if line.startswith("bpe-spark train: ")]
    clean(shown)
    assert any(line.startswith("bpe-spark train: counting: done, ") for line in shown), err
    assert "bpe-spark train: merging: done, 44/44 merges in " in err
    assert len(Tokenizer.load(model).merges) == 44

    assert main(["train", "--input", str(corpus), "--vocab-size", "300", "--out", str(tmp_path / "quiet"),
                 "--progress", "off"]) == 0
    assert "bpe-spark train: " not in capsys.readouterr().err


def test_input_bytes_are_known_for_local_files_only(spark, corpus, tmp_path):
    from bpe_spark.spark.read.documents import local_input_bytes

    assert local_input_bytes(read_documents(spark, str(corpus))) == corpus.stat().st_size
    assert local_input_bytes(spark.createDataFrame([("a",)], "text string")) is None
