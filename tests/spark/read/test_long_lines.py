"""A line longer than LONG_DOCUMENT_BYTES in a local text file, through the Spark jobs: counted
and encoded in pieces by the tasks (bpe_spark.bpe.long_documents), with the counts and ids of the
whole text (the memory figures are bench case R1)."""

from __future__ import annotations

import gzip
import json

import numpy as np
import pyarrow.parquet as pq
import pytest
from tests.conftest import corpus_text

from bpe_spark import TrainerConfig, train_from_counts
from bpe_spark.bpe.long_documents import LONG_DOCUMENT_BYTES
from bpe_spark.bpe.pretokenize import Pretokenizer
from bpe_spark.bpe.text import InputTally
from bpe_spark.errors import BadInputError
from bpe_spark.spark import count_pretokens, encode_dataset, read_documents
from pyspark.sql import Observation

pytestmark = pytest.mark.spark
CFG = TrainerConfig(vocab_size=400, pattern="gpt2")


@pytest.fixture(scope="module")
def long_line_file(tmp_path_factory):
    """A short line, a line just over LONG_DOCUMENT_BYTES (every corpus, newlines as spaces, an
    invalid byte in it), another short line, and the long line again without its newline."""
    text = "".join(corpus_text(name) for name in ("tiny_shakespeare", "zh_classics", "multilingual"))
    text = text.replace("\n", " ").replace("\r", " ")
    long_line = (text * (LONG_DOCUMENT_BYTES // len(text.encode()) + 1)).encode()
    long_line = long_line[: LONG_DOCUMENT_BYTES // 2] + b"\xff" + long_line[LONG_DOCUMENT_BYTES // 2 :]
    data = b"first line\n" + long_line + b"\nmiddle\n" + long_line
    folder = tmp_path_factory.mktemp("long")
    (folder / "long.txt").write_bytes(data)
    (folder / "long.txt.gz").write_bytes(gzip.compress(data, compresslevel=1))
    documents = [line + "\n" for line in data.decode("utf-8", "replace").split("\n")]
    return folder, documents


@pytest.fixture(scope="module")
def long_line_model(long_line_file):
    """The pretoken counts of the long line's text, and a tokenizer trained on them: each 16 MB
    of work done once for the tests below."""
    _, documents = long_line_file
    counts = Pretokenizer("gpt2").count([documents[1]])
    return counts, train_from_counts(dict(counts), CFG)


def test_a_long_line_counts_and_encodes_as_its_text(spark, long_line_file, long_line_model, tmp_path):
    """Counted from the plain file (read in splits), encoded from the gzip one (read whole)."""
    folder, documents = long_line_file
    long_counts, tok = long_line_model
    counts = count_pretokens(read_documents(spark, str(folder / "long.txt")), CFG).toArrow()
    # Pretokenizer("gpt2").count(documents): the two short lines', and the long line's twice
    assert documents[3] == documents[1]
    expected = Pretokenizer("gpt2").count([documents[0], documents[2]])
    expected.update(long_counts)
    expected.update(long_counts)
    assert dict(zip(counts.column("pretoken").to_pylist(), counts.column("count").to_pylist())) == expected

    manifest = encode_dataset(read_documents(spark, str(folder / "long.txt.gz")), tok, str(tmp_path / "ids"))
    ids = pq.read_table(tmp_path / "ids" / "part-00000.parquet").column("input_ids").combine_chunks()
    values, lengths = tok.encode_ordinary_flat(documents)  # numpy: no Python int per id
    assert np.array_equal(ids.values.to_numpy(), values)
    assert np.array_equal(np.diff(ids.offsets.to_numpy()), lengths)
    assert manifest["documents"] == 4
    assert manifest["replaced_sequences"] == 2 and manifest["affected_documents"] == 2


# --- one long JSON Lines record -----------------------------------------------------------------
def _jsonl_source(path, on_bad_input="error"):
    from bpe_spark.spark.read import jsonl, text_splits

    return jsonl.JsonlSource(text_splits.local_source([str(path)], on_bad_input), "text", "fix it")


def test_a_long_record_is_read_in_pieces_across_split_edges(tmp_path, monkeypatch):
    """In the task's reader, with the long-line threshold lowered (in this process): a record
    longer than it comes as one JsonText (never one str), its text with escapes and surrogate
    pairs the same as json.loads', whatever the splits; a bad long record names file and line."""
    from bpe_spark.bpe import long_records
    from bpe_spark.bpe.long_records import JsonText
    from bpe_spark.spark.read import jsonl, text_splits
    from bpe_spark.spark.read.text_splits import Split

    monkeypatch.setattr(text_splits, "LONG_DOCUMENT_BYTES", 1000)
    monkeypatch.setattr(text_splits, "_READ_BYTES", 64)
    monkeypatch.setattr(long_records, "LONG_STRING_CHARS", 100)
    long_text = "word \n\t\"é\" 中文😀 \\ \ud800 " * 80 + "end\n"
    records = [{"text": "short"}, {"id": 1, "text": long_text}, {"text": None}, {"text": "after"},
               {"text": long_text[:-1], "b": "x" * 1500}]
    lines = [json.dumps(records[0]), json.dumps(records[1], ensure_ascii=True), json.dumps(records[2]),
             json.dumps(records[3]), json.dumps(records[4], ensure_ascii=False).replace("\ud800", "\\ud800")]
    data = ("\n".join(lines) + "\n").encode("utf-8", "surrogatepass")
    path = tmp_path / "long.jsonl"
    path.write_bytes(data)
    clean = long_text.replace("\ud800", "\ufffd")
    expected = ["short", clean, None, "after", clean[:-1]]
    size = len(data)
    for cuts in ([0, size], [0, 5, size], [0, 900, 2500, size], list(range(0, size, 333)) + [size]):
        got, tally = [], InputTally()
        reader = jsonl.SplitRecords(_jsonl_source(path), tally)
        for start, end in zip(cuts, cuts[1:]):
            for texts in reader.texts(Split(str(path), start, end), long_documents=True):
                if isinstance(texts, JsonText):
                    got.append("".join(texts.pieces()))
                else:
                    assert all(text is None or len(text) < 100 for text in texts.to_pylist())
                    got.extend(texts.to_pylist())
        assert got == expected, cuts
        assert (tally.replaced, tally.affected) == (160, 2)
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"text": "a"}\n{"text": "' + "x" * 2000 + '\\q"}\n')
    with pytest.raises(BadInputError, match=r"bad\.jsonl, line 2 is a bad JSON Lines record: it is not JSON \(Invalid"):
        list(jsonl.SplitRecords(_jsonl_source(bad), InputTally()).texts(Split(str(bad), 0, bad.stat().st_size)))
    reader = jsonl.SplitRecords(_jsonl_source(bad, "skip"), InputTally())
    assert [t.to_pylist() for t in reader.texts(Split(str(bad), 0, bad.stat().st_size))] == [["a"]]
    assert reader.skipped == 1


def test_a_long_json_record_trains_and_encodes_as_its_text(spark, long_line_file, long_line_model, tmp_path):
    """A JSON Lines record longer than LONG_DOCUMENT_BYTES (its text escaped: \\uXXXX, surrogate
    pairs, \\n) is counted by the Python tasks in pieces, never through the JVM's line reader,
    and trains the merges of the same text as a line of a .txt file; encoding it gives the
    text's ids."""
    folder, documents = long_line_file
    text = documents[1]  # the long line with its "\n", U+FFFD where its invalid byte was
    record = json.dumps({"id": 3, "text": text}, ensure_ascii=True)  # every non-ASCII character escaped
    (tmp_path / "long.jsonl").write_text('{"text": null}\n' + record + "\n")
    docs = read_documents(spark, str(tmp_path / "long.jsonl"), input_format="jsonl")
    observation = Observation("long_record")
    counts = count_pretokens(docs, CFG, observation=observation)
    plan = counts._jdf.queryExecution().optimizedPlan().toString()
    assert "Relation" not in plan and "Range" in plan  # the tasks read the file, not Spark's reader
    from_json = dict(zip(*counts.toArrow().to_pydict().values()))
    stats = observation.get
    assert (stats["documents"], stats["null_documents"], stats["bytes"]) == (1, 1, len(text.encode()))
    from_text, tok = long_line_model  # what the text as a .txt line counts (the test above), and trains
    assert from_json == from_text  # the same counts: the merges training makes of them on the driver
    assert len(tok.merges) > 100
    # encoded by the tasks in pieces too (bpe_spark.spark.encoding.pieces): the text's ids
    manifest = encode_dataset(read_documents(spark, str(tmp_path / "long.jsonl"), input_format="jsonl"), tok,
                              str(tmp_path / "ids"))
    ids = pq.read_table(tmp_path / "ids" / "part-00000.parquet").column("input_ids").combine_chunks()
    assert ids.null_count == 1 and np.array_equal(ids.values.to_numpy(), tok.encode_ordinary_flat([text])[0])
    assert (manifest["documents"], manifest["null_documents"], manifest["bytes"]) == (2, 1, len(text.encode()))
