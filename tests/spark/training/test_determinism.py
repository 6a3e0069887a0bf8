"""Determinism (issue 12 item 9): the same merges and the same output bytes across runs, partition
counts 1, 2, 7 and 64, input files given in another order, the driver and the rounds paths, and
the JVM and Python engines and readers.

tests/spark/training/test_train.py already shows DataFrames in 1, 3 and 8 partitions and budgets forcing
rounds at 3 partitions give the core's merges; this file fills the rest, on small corpora.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from tests.conftest import corpus_lines, encode_output_bytes

from bpe_spark import TrainerConfig
from bpe_spark import train as core_train
from bpe_spark.spark import encode_dataset, read_documents, train
from bpe_spark.spark.read import jsonl as jsonl_reader

pytestmark = pytest.mark.spark
PARTITIONS = (1, 2, 7, 64)
CFG = TrainerConfig(vocab_size=320, special_tokens=("<|endoftext|>",))


@pytest.fixture(scope="module")
def lines():
    return corpus_lines("tiny_shakespeare", 24_000)


@pytest.fixture(scope="module")
def expected(lines):
    return core_train(lines, CFG)


@pytest.fixture(scope="module")
def files(lines, tmp_path_factory) -> dict[str, list[str]]:
    """The lines in three text files and in three JSON Lines files, in path order."""
    root = tmp_path_factory.mktemp("determinism")
    third = -(-len(lines) // 3)
    parts = [lines[i : i + third] for i in range(0, len(lines), third)]
    made: dict[str, list[str]] = {"text": [], "jsonl": []}
    for i, part in enumerate(parts):
        text, jsonl = root / f"part-{i}.txt", root / f"part-{i}.jsonl"
        text.write_text("".join(part), encoding="utf-8")
        jsonl.write_text("".join(json.dumps({"text": line}) + "\n" for line in part), encoding="utf-8")
        made["text"].append(str(text))
        made["jsonl"].append(str(jsonl))
    return made


def test_partition_counts_give_the_same_merges_on_the_driver_and_in_rounds(spark, lines, expected):
    docs = spark.createDataFrame([(line,) for line in lines], "text string")
    distinct = None
    for partitions in PARTITIONS:
        frame = docs.repartition(partitions)
        assert frame.rdd.getNumPartitions() == partitions
        tok = train(frame, CFG)
        assert tok.merges == expected.merges and tok.vocab == expected.vocab, partitions
        assert tok.metadata["stats"]["mode"] == "driver"
        distinct = tok.metadata["stats"]["distinct_pretokens"]
    # the rounds path, forced by a budget of half the distinct pretokens, at 7 partitions
    # (test_train.py: 3)
    tok = train(docs.repartition(7), CFG, driver_budget=max(1, distinct // 2))
    assert tok.metadata["stats"]["mode"] == "rounds" and tok.metadata["stats"]["rounds"] > 1
    assert tok.merges == expected.merges and tok.vocab == expected.vocab


def test_readers_engines_and_file_order_give_the_same_merges(spark, files, expected):
    runs = {
        "text, read by the tasks": (read_documents(spark, files["text"]), "auto"),
        "text, files in reverse order": (read_documents(spark, files["text"][::-1]), "auto"),
        "text, Spark's reader, JVM regex": (read_documents(spark, files["text"]).select("text"), "jvm"),
        "text, Spark's reader, Python regex": (read_documents(spark, files["text"]).select("text"), "python"),
        "jsonl, shuffled order": (read_documents(spark, [files["jsonl"][i] for i in (2, 0, 1)],
                                                 input_format="jsonl"), "auto"),
    }
    for name, (docs, engine) in runs.items():
        tok = train(docs, CFG, engine=engine)
        assert tok.merges == expected.merges and tok.vocab == expected.vocab, name


def spark_reader(docs):
    """``docs`` without the mark that lets the encoding tasks read its JSON Lines files
    themselves (:func:`bpe_spark.spark.read.jsonl.tag`): Spark's reader reads them."""
    vars(docs).pop(jsonl_reader._ATTRIBUTE)
    return docs


def test_encoded_bytes_are_the_same_whatever_the_partitions_reader_and_file_order(spark, files, expected,
                                                                                  tmp_path):
    outputs = {}

    def encoded(name: str, docs) -> None:
        out = tmp_path / name.replace(" ", "-")
        encode_dataset(docs, expected, str(out), output_format="bin", shard_tokens=4000)
        outputs[name] = encode_output_bytes(out)

    encoded("text read by the tasks", read_documents(spark, files["text"]))
    encoded("text in reverse order", read_documents(spark, files["text"][::-1]))
    encoded("text through Spark's reader", read_documents(spark, files["text"]).select("text"))
    encoded("jsonl read by the tasks", read_documents(spark, files["jsonl"][::-1], input_format="jsonl"))
    # JSON Lines through Spark's reader, in 1 (coalesced) to 64 partitions (small file splits)
    total = sum(Path(p).stat().st_size for p in files["jsonl"])
    seen = []
    for partitions in PARTITIONS:
        if partitions > 1:
            spark.conf.set("spark.sql.files.maxPartitionBytes", str(max(256, total // partitions + 1)))
            spark.conf.set("spark.sql.files.openCostInBytes", "0")
        try:
            docs = spark_reader(read_documents(spark, files["jsonl"][::-1], input_format="jsonl"))
            docs = docs.coalesce(1) if partitions == 1 else docs
            seen.append(docs.rdd.getNumPartitions())
            encoded(f"jsonl in {partitions} partitions", docs)
        finally:
            spark.conf.unset("spark.sql.files.maxPartitionBytes")
            spark.conf.unset("spark.sql.files.openCostInBytes")
    assert seen[0] == 1 and seen[-1] >= 60 and seen == sorted(set(seen)), seen
    first = next(iter(outputs.values()))
    assert len([name for name in first if name.endswith(".bin")]) > 1  # several shards
    for name, produced in outputs.items():
        assert produced == first, name
