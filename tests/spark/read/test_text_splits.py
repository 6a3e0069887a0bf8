"""Text files counted by the Python tasks themselves (bpe_spark.spark.read.text_splits): the same
documents, hence the same counts and statistics, as Spark's text reader gives."""

from __future__ import annotations

import bz2
import gzip
import os
import random

import pytest
from tests.conftest import CORPUS_NAMES, corpus_text

from bpe_spark import TrainerConfig
from bpe_spark import count_pretokens as core_count
from bpe_spark.spark import count_pretokens, read_documents
from bpe_spark.spark.read import text_splits
from bpe_spark.spark.training.count import write_pretoken_counts
from bpe_spark.spark.read.text_splits import Split, iter_lines, plan_splits, source_of

pytestmark = pytest.mark.spark


def as_dict(counts_df) -> dict[str, int]:
    table = counts_df.toArrow()
    return dict(zip(table.column("pretoken").to_pylist(), table.column("count").to_pylist()))


def spark_lines(text: str) -> list[str]:
    """The documents Spark's text reader gives (lineSep "\\n", then "\\n" added back)."""
    lines = [line + "\n" for line in text.split("\n")]
    return lines[:-1] if text.endswith("\n") or not text else lines


@pytest.mark.parametrize("seed", range(40))
def test_splits_give_every_line_once_in_order(tmp_path, seed):
    rng = random.Random(seed)
    alphabet = ["a", "b", " ", "\r", "é", "中", "🙂", "\n", "\n"]
    text = "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 60)))
    path = tmp_path / "t.txt"
    path.write_bytes(text.encode("utf-8"))
    size = os.path.getsize(path)
    for step in range(1, size + 2):
        splits = [Split(str(path), lo, min(size, lo + step)) for lo in range(0, size, step)]
        got = [line for split in splits for batch in iter_lines(split) for line in batch]
        assert got == spark_lines(text), (text, step)


def test_compressed_files_are_one_split(tmp_path):
    with gzip.open(tmp_path / "a.txt.gz", "wt", encoding="utf-8") as fh:
        fh.write("x\ny")
    with bz2.open(tmp_path / "b.txt.bz2", "wt", encoding="utf-8") as fh:
        fh.write("z\n")
    (tmp_path / "c.txt").write_text("p\n" * 10, encoding="utf-8")
    source = text_splits.TextSource(tuple(str(tmp_path / n) for n in ("a.txt.gz", "b.txt.bz2", "c.txt")))
    splits = plan_splits(source, parallelism=8)
    assert [(os.path.basename(s.path), s.end) for s in splits] == [("a.txt.gz", -1), ("b.txt.bz2", -1), ("c.txt", 20)]
    assert [line for s in splits for b in iter_lines(s) for line in b] == ["x\n", "y\n", "z\n"] + ["p\n"] * 10


def test_only_plain_local_reads_are_tagged(spark, tmp_path):
    (tmp_path / "a.txt").write_text("a\n", encoding="utf-8")
    docs = read_documents(spark, str(tmp_path / "a.txt"))
    assert source_of(docs).files == (str(tmp_path / "a.txt"),)
    assert source_of(docs.where("text != ''")) is None  # a transformed DataFrame is read by Spark
    assert source_of(read_documents(spark, str(tmp_path), document="file")) is None


def test_tasks_read_local_files_only_where_every_executor_sees_them(spark, tmp_path, monkeypatch):
    from bpe_spark.spark.read import documents as io

    (tmp_path / "a.txt").write_text("a\nb\n", encoding="utf-8")
    assert source_of(read_documents(spark, str(tmp_path / "a.txt"))) is not None  # local[2,2]: the driver's machine
    monkeypatch.setattr(io, "_local_master", lambda session: False)  # a cluster's master
    cluster = read_documents(spark, str(tmp_path / "a.txt"))
    assert source_of(cluster) is None and [row.text for row in cluster.collect()] == ["a\n", "b\n"]  # Spark's reader
    assert source_of(read_documents(spark, str(tmp_path / "a.txt"), shared_input=True)) is not None


@pytest.mark.parametrize("name", CORPUS_NAMES)
def test_direct_counts_equal_spark_reader_and_core(spark, tmp_path, monkeypatch, name):
    text = corpus_text(name)[:300_000]
    text = text[: text.rfind("\n") + 1] + "no final newline"
    half = len(text) // 2
    (tmp_path / "b.txt").write_text(text[:half], encoding="utf-8")
    with gzip.open(tmp_path / "a.txt.gz", "wt", encoding="utf-8") as fh:
        fh.write(text[half:])
    monkeypatch.setattr(text_splits, "MIN_SPLIT_BYTES", 1)  # many splits, lines cut across them
    monkeypatch.setattr(text_splits, "MAX_SPLIT_BYTES", 10_000)
    cfg = TrainerConfig(pattern="gpt2", special_tokens=("<|endoftext|>",))
    docs = read_documents(spark, str(tmp_path))
    assert len(plan_splits(source_of(docs), 2)) > 5
    direct = as_dict(count_pretokens(docs, cfg))
    through_spark = as_dict(count_pretokens(docs, cfg, engine="jvm"))
    lines = [row.text for row in docs.collect()]
    assert direct == through_spark == dict(core_count(lines, cfg))


def test_direct_statistics_and_custom_patterns(spark, tmp_path):
    (tmp_path / "a.txt").write_bytes("Ab cd\n\nÉé".encode())
    docs = read_documents(spark, str(tmp_path / "a.txt"))
    cfg = TrainerConfig(pattern="words", lowercase=True)
    stats = write_pretoken_counts(docs, cfg, str(tmp_path / "counts"))
    assert stats == {"documents": 3, "bytes": 6 + 1 + 5, "pretokens": 3, "distinct_pretokens": 3,
                     "null_documents": 0, "replaced_sequences": 0, "affected_documents": 0, "skipped_files": 0,
                     "skipped_records": 0}
    assert as_dict(count_pretokens(docs, cfg)) == {"ab": 1, "cd": 1, "éé": 1}


def test_empty_text_files_are_an_empty_corpus(spark, tmp_path):
    from bpe_spark.errors import EmptyCorpusError
    from bpe_spark.spark import train

    (tmp_path / "a.txt").write_bytes(b"")
    (tmp_path / "b.txt.gz").write_bytes(gzip.compress(b""))
    docs = read_documents(spark, str(tmp_path))
    assert source_of(docs) is not None
    with pytest.raises(EmptyCorpusError):
        train(docs, TrainerConfig(vocab_size=300))
    (tmp_path / "c.txt").write_bytes(b"\xff\xfe not utf-8 \xc3\x28")  # replaced by U+FFFD, as the JVM does
    tok = train(read_documents(spark, str(tmp_path)), TrainerConfig(vocab_size=260))
    assert tok.metadata["stats"]["documents"] == 1 and tok.metadata["stats"]["bytes"] == 16


def test_head_lines_reads_the_first_lines_of_local_files_in_uri_order(tmp_path):
    with gzip.open(tmp_path / "b.jsonl.gz", "wb") as fh:
        fh.write(b'{"text": "b1"}\r\n{"text": "b2"}\n')
    with bz2.open(tmp_path / "c.jsonl.bz2", "wb") as fh:
        fh.write(b'{"text": "c1"}\n')
    (tmp_path / "a.jsonl").write_bytes(b'{"text": "\xff"}\n\n')
    files = sorted(str(p) for p in tmp_path.iterdir())
    assert text_splits.head_lines(files, 100) == ['{"text": "\ufffd"}', "", '{"text": "b1"}\r', '{"text": "b2"}',
                                                  '{"text": "c1"}']
    assert text_splits.head_lines(files, 3) == ['{"text": "\ufffd"}', "", '{"text": "b1"}\r']
    assert text_splits.head_lines([], 3) == []
    # not local, another codec, or unreadable: None (the caller asks Spark)
    assert text_splits.head_lines(["s3a://bucket/a.jsonl"], 3) is None
    (tmp_path / "d.jsonl.zst").write_bytes(b"\x28\xb5\x2f\xfd")
    assert text_splits.head_lines([str(tmp_path / "d.jsonl.zst")], 3) is None
    (tmp_path / "e.jsonl.gz").write_bytes(b"not gzip")
    assert text_splits.head_lines([str(tmp_path / "e.jsonl.gz")], 3) is None


def test_local_jsonl_columns_are_checked_on_the_driver_without_a_job(spark, tmp_path):
    from bpe_spark.errors import ColumnError

    with gzip.open(tmp_path / "d.jsonl.gz", "wt", encoding="utf-8") as fh:
        fh.write('{"body": "first doc", "id": 7}\n')
    context = spark.sparkContext
    context.setJobGroup("bpe-spark-head-lines", "head lines")
    try:
        with pytest.raises(ColumnError, match="'text' not found.*body"):
            read_documents(spark, str(tmp_path / "d.jsonl.gz"), input_format="jsonl")
        docs = read_documents(spark, str(tmp_path / "d.jsonl.gz"), input_format="jsonl", text_col="body")
        assert context.statusTracker().getJobIdsForGroup("bpe-spark-head-lines") == []
        # kept columns take their types from the same first lines
        kept = read_documents(spark, str(tmp_path / "d.jsonl.gz"), input_format="jsonl", text_col="body",
                              keep_columns=["id"])
    finally:
        context.setLocalProperty("spark.jobGroup.id", None)
    assert [tuple(r) for r in docs.collect()] == [("first doc",)]
    assert kept.schema["id"].dataType.typeName() == "long"
    assert [tuple(r) for r in kept.collect()] == [("first doc", 7)]
