"""``max_token_length`` on Spark: driver mode and forced exact rounds give the in-process merges,
and ``bpe-spark train --max-token-length N`` (or ``max_token_length`` in a --config file) reaches
the saved model."""

from __future__ import annotations

import json

import pytest
from tests.conftest import corpus_lines

from bpe_spark import Tokenizer, TrainerConfig
from bpe_spark import train as core_train
from bpe_spark.cli import main
from bpe_spark.spark import train

pytestmark = pytest.mark.spark


def lines() -> list[str]:
    return corpus_lines("tiny_shakespeare", 20_000)


def frame(spark, docs, partitions):
    return spark.createDataFrame([(d,) for d in docs], "text string").repartition(partitions)


def assert_same_model(tok, expected):
    assert tok.merges == expected.merges
    assert tok.vocab == expected.vocab
    assert tok.metadata["merge_counts"] == expected.metadata["merge_counts"]


CONFIGS = [
    TrainerConfig(vocab_size=400, max_token_length=3),
    TrainerConfig(vocab_size=10_000, max_merges=150, scheme="char", max_token_length=2),
    TrainerConfig(vocab_size=10_000, max_merges=150, scheme="char", end_of_word="fused", max_token_length=4),
]


@pytest.mark.parametrize("cfg", CONFIGS, ids=lambda c: f"{c.scheme}-{c.end_of_word}-{c.max_token_length}")
def test_driver_mode_and_rounds_equal_in_process(spark, cfg):
    docs = lines()
    expected = core_train(docs, cfg)
    lengths = [len(left + right) - (4 if (left + right).endswith("</w>") else 0) if isinstance(left, str)
               else len(left + right) for left, right in expected.merges]
    assert max(lengths) == cfg.max_token_length
    df = frame(spark, docs, 3).cache()
    assert_same_model(train(df, cfg), expected)
    tok = train(df, cfg, driver_budget=0.1)
    assert tok.metadata["stats"]["mode"] == "rounds" and tok.metadata["stats"]["rounds"] > 1
    assert_same_model(tok, expected)
    df.unpersist()


def test_rounds_that_ship_few_pairs_stay_exact_under_a_limit(spark, monkeypatch):
    from bpe_spark.spark.training import rounds as spark_rounds

    cfg = TrainerConfig(vocab_size=350, max_token_length=3)
    docs = lines()
    expected = core_train(docs, cfg)
    monkeypatch.setattr(spark_rounds, "_MAX_BROADCAST_PAIRS", 5)
    tok = train(frame(spark, docs, 2), cfg, driver_budget=0.3)
    assert_same_model(tok, expected)
    assert sum(r["shipped"] > 0 for r in tok.metadata["rounds"]) > 2


def test_cli_max_token_length_reaches_the_model(spark, tmp_path):
    corpus = tmp_path / "c.txt"
    corpus.write_text("".join(lines()), encoding="utf-8")
    out = tmp_path / "model"
    assert main(["train", "--input", str(corpus), "--vocab-size", "300", "--max-token-length", "3",
                 "--out", str(out), "--no-report"]) == 0
    tok = Tokenizer.load(out)
    assert tok.config.max_token_length == 3
    assert json.loads((out / "bpe_spark.json").read_text())["config"]["max_token_length"] == 3
    assert max(len(left + right) for left, right in tok.merges) == 3
    assert tok.merges == core_train(lines(), TrainerConfig(vocab_size=300, max_token_length=3)).merges
    config = tmp_path / "train.json"
    config.write_text(json.dumps({"max_token_length": 2, "scheme": "char"}))
    again = tmp_path / "model2"
    assert main(["train", "--config", str(config), "--input", str(corpus), "--vocab-size", "200",
                 "--out", str(again), "--no-report"]) == 0
    assert Tokenizer.load(again).config.max_token_length == 2


def test_the_ml_estimator_takes_max_token_length():
    from bpe_spark.spark.ml import BPETokenizer

    assert BPETokenizer(vocabSize=400, maxTokenLength=3).trainer_config() == TrainerConfig(vocab_size=400,
                                                                                          max_token_length=3)
    assert BPETokenizer().trainer_config().max_token_length is None
