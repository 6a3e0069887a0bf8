"""Superword training on Spark equals it in process (docs/design.md 1.7): SuperBPE's two stages
from documents and from count tables, on the driver and in exact rounds forced by a small driver
budget; a checkpointed run interrupted in stage 2 resumes to the same model; the stage-2 count
table is reported. (The in-process stages are proven against the paper's definition in
tests/training/test_superword.py.)"""

from __future__ import annotations

import pytest
from tests.conftest import corpus_lines

from bpe_spark import TrainerConfig
from bpe_spark import train as core_train
from bpe_spark.spark import count_pretokens, train, train_from_counts

pytestmark = pytest.mark.spark
CFG = TrainerConfig(vocab_size=256 + 160 + 1, superword_transition=100, special_tokens=("<|endoftext|>",))


@pytest.fixture(scope="module")
def lines():
    return corpus_lines("en_books", 15_000)


@pytest.fixture(scope="module")
def docs(spark, lines):
    df = spark.createDataFrame([(line,) for line in lines], "text string").repartition(2).cache()
    yield df
    df.unpersist()


@pytest.fixture(scope="module")
def expected(lines):
    return core_train(lines, CFG)


def assert_same(tok, expected):
    assert tok.merges == expected.merges
    assert tok.vocab == expected.vocab and tok.special_tokens == expected.special_tokens
    assert tok.fingerprint == expected.fingerprint
    def table(model):
        return {k: v for k, v in model.metadata["superword"]["stage2"].items() if k != "seconds"}

    assert table(tok) == table(expected)


def test_superword_training_on_spark_equals_in_process_on_the_driver_and_in_rounds(spark, docs, expected):
    for budget, mode in (("auto", "driver"), (150, "rounds")):
        tok = train(docs, CFG, driver_budget=budget)
        assert tok.metadata["stats"]["mode"] == mode, budget
        assert_same(tok, expected)
    stage2 = tok.metadata["superword"]["stage2"]
    assert stage2["distinct_pretokens"] > 150 and stage2["pretoken_bytes"] > 0
    assert any(b" " in (left + right).strip() for left, right in tok.merges[100:])


def test_superword_training_from_count_tables_equals_in_process(spark, docs, expected):
    first = count_pretokens(docs, CFG)
    second = count_pretokens(docs, CFG.replace(pattern=CFG.superword_pattern))
    for budget in ("auto", 150):
        assert_same(train_from_counts(first, CFG, superword_counts=second, driver_budget=budget), expected)


def test_an_interrupted_superword_run_resumes_in_stage_two_to_the_same_model(spark, docs, expected, tmp_path):
    checkpoint = str(tmp_path / "ckpt")

    class Interrupted(Exception):
        pass

    seen = []

    def stop_in_stage_two(record):
        seen.append(record)
        if (tmp_path / "ckpt" / "stage2" / "training.json").exists():
            raise Interrupted

    with pytest.raises(Interrupted):
        train(docs, CFG, driver_budget=150, checkpoint_dir=checkpoint, on_round=stop_in_stage_two)
    assert (tmp_path / "ckpt" / "stage1" / "training.json").exists()
    tok = train(docs, CFG, driver_budget=150, checkpoint_dir=checkpoint, resume=True)
    assert_same(tok, expected)
    assert tok.metadata["rounds"][0].get("resumed")
