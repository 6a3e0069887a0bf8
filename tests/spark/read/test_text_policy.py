"""One text rule for every reader (bpe_spark.bpe.text): Spark's readers hand the raw bytes on, and
the JVM path (make_valid_utf8) and the Python tasks' path give identical documents, counts,
statistics and encoded files for any bytes; JSON Lines documents follow the same rule."""

from __future__ import annotations

import json
import random

import pyarrow.parquet as pq
import pytest
from pyspark.sql import Observation
from pyspark.sql import functions as F
from tests.bpe.test_text import CRAFTED

from bpe_spark import TrainerConfig
from bpe_spark.spark import count_pretokens, encode, encode_dataset, read_documents, train
from bpe_spark.spark.read import text_splits
from bpe_spark.spark.training.count import valid_text
from bpe_spark.bpe.text import decode_counted

pytestmark = pytest.mark.spark

SPECIAL = [b"\xef\xbb\xbfbom first", b"cr\rinside", b"crlf\r", b"nul\x00byte", b"", b"\xef\xbf\xbd kept"]
CFG = TrainerConfig(vocab_size=300)


def crafted_lines() -> list[bytes]:
    rng = random.Random(7)
    lines = [b"x " + data + b" y" for data in sorted(CRAFTED)] + SPECIAL
    lines += [bytes(rng.randrange(256) for _ in range(rng.randrange(1, 30))).replace(b"\n", b"") for _ in range(300)]
    return lines


@pytest.fixture(scope="module")
def crafted(tmp_path_factory):
    """A file of every kind of invalid UTF-8, BOM, \\r, \\r\\n, NUL, its last line without a
    newline; and the documents the rule gives."""
    lines = crafted_lines()
    path = tmp_path_factory.mktemp("crafted") / "crafted.txt"
    path.write_bytes(b"\n".join(lines))  # no final newline
    documents = [line.decode("utf-8", "replace") + "\n" for line in lines]
    replaced = [decode_counted(line)[1] for line in lines]
    return path, documents, sum(replaced), sum(1 for r in replaced if r)


def test_spark_text_reader_keeps_the_raw_bytes(spark, crafted):
    path = crafted[0]
    rows = spark.read.text(str(path), lineSep="\n").select(F.col("value").cast("binary")).collect()
    assert [bytes(row[0]) for row in rows] == path.read_bytes().split(b"\n")


def test_make_valid_utf8_is_the_python_rule(spark):
    rng = random.Random(3)
    cases = [data for data in CRAFTED] + [bytes(rng.randrange(256) for _ in range(rng.randrange(1, 12)))
                                          for _ in range(5000)]
    frame = spark.createDataFrame([(c,) for c in cases], "raw binary")
    rows = frame.select(valid_text(F.col("raw").cast("string")).cast("binary")).collect()
    assert [bytes(row[0]) for row in rows] == [c.decode("utf-8", "replace").encode("utf-8") for c in cases]


@pytest.mark.parametrize("split_bytes", [None, 97])
def test_jvm_and_task_readers_give_identical_documents(spark, crafted, monkeypatch, split_bytes):
    path, documents, _, _ = crafted
    if split_bytes:
        monkeypatch.setattr(text_splits, "MIN_SPLIT_BYTES", 1)
        monkeypatch.setattr(text_splits, "MAX_SPLIT_BYTES", split_bytes)
    docs = read_documents(spark, str(path))
    source = text_splits.source_of(docs)
    by_tasks = [line for split in text_splits.plan_splits(source, 4) for batch in text_splits.iter_lines(split)
                for line in batch]
    by_jvm = [row[0] for row in docs.select(valid_text("text")).collect()]
    assert by_tasks == documents
    assert by_jvm == documents


def test_counts_and_statistics_agree_across_readers_and_engines(spark, crafted):
    path, documents, replaced, affected = crafted
    results = []
    for engine, through_spark in (("auto", False), ("auto", True), ("jvm", False), ("python", True)):
        docs = read_documents(spark, str(path))
        docs = docs.select("text") if through_spark else docs  # a transformed frame: Spark's reader
        observation = Observation(f"o-{engine}-{through_spark}")
        table = count_pretokens(docs, CFG, engine=engine, observation=observation).toArrow()
        counts = dict(zip(table.column("pretoken").to_pylist(), table.column("count").to_pylist()))
        stats = observation.get
        assert (stats["documents"], stats["replaced_sequences"], stats["affected_documents"]) == (
            len(documents), replaced, affected)
        assert stats["bytes"] == path.stat().st_size + 1  # as read, the added final newline included
        results.append(counts)
    assert all(counts == results[0] for counts in results)
    assert replaced > 300 and affected > 100


def test_training_statistics_count_the_replacements(spark, crafted):
    path, _, replaced, affected = crafted
    by_tasks = train(read_documents(spark, str(path)), CFG)
    by_jvm = train(read_documents(spark, str(path)), CFG, engine="jvm")
    assert by_tasks.merges == by_jvm.merges
    for tok in (by_tasks, by_jvm):
        stats = tok.metadata["stats"]
        assert (stats["replaced_sequences"], stats["affected_documents"]) == (replaced, affected)
        assert (stats["skipped_records"], stats["null_documents"]) == (0, 0)
    assert by_tasks.metadata["stats"]["skipped_files"] == 0


def test_encoded_files_and_manifest_agree_across_readers(spark, crafted, tmp_path):
    path, documents, replaced, affected = crafted
    tok = train(read_documents(spark, str(path)), CFG)
    docs = read_documents(spark, str(path))
    direct = encode_dataset(docs, tok, str(tmp_path / "direct"))
    through_spark = encode_dataset(docs.select("text"), tok, str(tmp_path / "spark"))
    for manifest in (direct, through_spark):
        assert (manifest["replaced_sequences"], manifest["affected_documents"]) == (replaced, affected)
        assert manifest["documents"] == len(documents)
    expected = [tok.encode(doc) for doc in documents]
    for out in ("direct", "spark"):
        assert pq.read_table(tmp_path / out).column("input_ids").to_pylist() == expected
    lazy = encode(docs.select("text"), tok).orderBy("doc_id").select("input_ids").collect()
    assert [row[0] for row in lazy] == expected


def _json_string(raw: bytes) -> bytes:
    """``raw`` as the body of a JSON string: ASCII controls, quote and backslash escaped, every
    other byte (invalid UTF-8 included) left as it is."""
    out = bytearray()
    for byte in raw:
        out += f"\\u{byte:04x}".encode() if byte < 0x20 or byte in b'"\\' else bytes([byte])
    return bytes(out)


def test_jsonl_documents_follow_the_same_rule(spark, crafted, tmp_path):
    lines = crafted_lines()
    path = tmp_path / "crafted.jsonl"
    records = [b'{"text": "' + _json_string(line) + b'", "id": ' + str(i).encode() + b"}"
               for i, line in enumerate(lines)]
    records.append(b'{"text": "lone \\ud800 and \\udfff", "id": -1}')
    path.write_bytes(b"\n".join(records) + b"\r\n")  # a \r\n line end is JSON whitespace
    docs = read_documents(spark, str(path), input_format="jsonl", keep_columns=["id"])
    got = dict(docs.select("id", "text").collect())
    expected = {i: line.decode("utf-8", "replace") for i, line in enumerate(lines)}
    expected[-1] = "lone \ufffd and \ufffd"
    assert got == expected
    tok = train(read_documents(spark, str(path), input_format="jsonl"), CFG)
    _, _, replaced, affected = crafted
    # the BOM of "\xef\xbb\xbfbom first" sits inside a JSON string: text, kept
    assert tok.metadata["stats"]["replaced_sequences"] == replaced + 2
    assert tok.metadata["stats"]["affected_documents"] == affected + 1
    assert json.loads(json.dumps(tok.metadata["stats"]))["skipped_records"] == 0
