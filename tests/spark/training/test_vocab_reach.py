"""A ``vocab_size`` beyond what the corpus can fill (issue 43, item 5): the driver budget stays
what the corpus needs (one round on the driver, not 55), the merges are those of any larger
size, and a run that runs out of pairs says so (the CLI, the Python API, the model's stats)."""

from __future__ import annotations

import logging

import pytest

from bpe_spark import TrainerConfig
from bpe_spark import train as core_train
from bpe_spark.cli import main
from bpe_spark.encoding.tokenizer import Tokenizer
from bpe_spark.spark import train as spark_train

pytestmark = pytest.mark.spark

TEXT = [f"the quick brown fox {i * 7919} jumps\n" for i in range(12_000)]  # 12,000+ distinct pretokens


def test_a_huge_vocab_size_trains_on_the_driver_to_the_same_merges(spark, caplog):
    docs = spark.createDataFrame([(line,) for line in TEXT], ["text"])
    with caplog.at_level(logging.WARNING, logger="bpe_spark"):
        tok = spark_train(docs, TrainerConfig(vocab_size=2**31))
    stats = tok.metadata["stats"]
    assert stats["distinct_pretokens"] > 12_000  # more than the budget of 10,000 that vocab_size made
    assert stats["mode"] == "driver" and stats["rounds"] == 1 and stats["driver_budget"] > 10**6
    expected = core_train(TEXT, TrainerConfig(vocab_size=100_000))
    assert tok.merges == expected.merges and tok.vocab_size == expected.vocab_size < 100_000
    reason = f"ran out of pairs at {len(tok.merges):,} merges: the vocabulary is {tok.vocab_size:,}, below vocab_size=2147483648"
    assert stats["stopped_early"] == reason
    assert expected.metadata["stats"]["stopped_early"] == reason.replace("2147483648", "100000")
    noticed = [r.getMessage() for r in caplog.records if "ran out of" in r.getMessage()]
    assert noticed == [f"bpe-spark: {reason}", f"bpe-spark: {reason.replace('2147483648', '100000')}"]


def test_the_cli_says_when_training_ran_out_of_pairs(spark, tmp_path, capsys, caplog):
    (tmp_path / "docs.txt").write_text("".join(TEXT), encoding="utf-8")
    out = tmp_path / "model"
    with caplog.at_level(logging.WARNING, logger="bpe_spark"):  # on stderr, through logging's last resort
        assert main(["train", "--input", str(tmp_path / "docs.txt"), "--vocab-size", "2147483648", "--out", str(out),
                     "--no-report"]) == 0
    tok = Tokenizer.load(out)
    assert (f"bpe-spark: ran out of pairs at {len(tok.merges):,} merges: the vocabulary is {tok.vocab_size:,}, "
            "below --vocab-size 2147483648") in caplog.text
    assert "rounds: 1 (driver" in capsys.readouterr().out
    caplog.clear()
    # a run that reaches its size, or stops at --max-merges, says nothing of it
    assert main(["train", "--input", str(tmp_path / "docs.txt"), "--vocab-size", "270", "--out", str(out),
                 "--overwrite", "--no-report"]) == 0
    assert "ran out of" not in caplog.text
