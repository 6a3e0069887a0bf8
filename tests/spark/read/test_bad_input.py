"""Bad input (docs/design.md 5, "Bad records"): a corrupt compressed file or a bad JSON Lines record is
named (file, line) in a one-line error by default, or skipped and counted with
on_bad_input="skip" (--on-bad-input skip; spark.sql.files.ignoreCorruptFiles=true for files); a
non-string text is never trained on as its JSON text; null documents are counted."""

from __future__ import annotations

import contextlib
import gzip
import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from bpe_spark import TrainerConfig
from bpe_spark.cli import main
from bpe_spark.errors import BadInputError, ColumnError
from bpe_spark.spark import encode_dataset, read_documents, train
from bpe_spark.spark.read import jsonl, text_splits
from bpe_spark.bpe.text import InputTally

pytestmark = pytest.mark.spark

CFG = TrainerConfig(vocab_size=270)


@contextlib.contextmanager
def spark_conf(spark, **values):
    saved = {key: spark.conf.get(key, None) for key in values}
    for key, value in values.items():
        spark.conf.set(key, value)
    try:
        yield
    finally:
        for key, value in saved.items():
            if value is None:
                spark.conf.unset(key)
            else:
                spark.conf.set(key, value)


@pytest.fixture(scope="module")
def gz_dir(tmp_path_factory):
    """A truncated .gz beside a good one."""
    root = tmp_path_factory.mktemp("gz")
    data = gzip.compress(b"hello world\n" * 50_000)
    (root / "a-truncated.txt.gz").write_bytes(data[: len(data) // 2])
    (root / "b-good.txt.gz").write_bytes(gzip.compress(b"good words\n" * 3))
    return root


@pytest.mark.parametrize("engine", ["auto", "jvm"])  # the tasks read the files / Spark's reader does
def test_a_truncated_gz_is_named_in_one_line(spark, gz_dir, engine):
    with pytest.raises(BadInputError) as raised:
        train(read_documents(spark, str(gz_dir)), CFG, engine=engine)
    message = str(raised.value)
    assert "a-truncated.txt.gz" in message and "pass on_bad_input='skip' to skip it" in message  # the API's words
    assert "\n" not in message


def test_skip_skips_and_counts_the_corrupt_file(spark, gz_dir):
    tok = train(read_documents(spark, str(gz_dir), on_bad_input="skip"), CFG)
    stats = tok.metadata["stats"]
    assert stats["skipped_files"] == 1
    assert stats["documents"] >= 3  # the good file's lines (and what the damaged one held before the damage)
    by_jvm = train(read_documents(spark, str(gz_dir), on_bad_input="skip"), CFG, engine="jvm")
    assert by_jvm.metadata["stats"]["skipped_files"] is None  # Spark's reader skips without telling
    assert by_jvm.metadata["stats"]["documents"] >= 3


def test_ignore_corrupt_files_means_skip_for_the_task_reader(spark, gz_dir):
    with spark_conf(spark, **{"spark.sql.files.ignoreCorruptFiles": "true"}):
        tok = train(read_documents(spark, str(gz_dir)), CFG)
    assert tok.metadata["stats"]["skipped_files"] == 1


JSONL = [
    '{"text": "one two", "id": 1}',
    '{"text": null, "id": 2}',  # a null document
    "",  # no record
    '{"text": 12345, "id": 4}',  # bad: a number
    '{"text": ["x"], "id": 5}',  # bad: an array
    '{"text": {"t": "y"}, "id": 6}',  # bad: an object
    '{"id": 7}',  # bad: no text field
    "{not json",  # bad
    '["a list"]',  # bad: not an object
    '{"text": true, "id": 10}',  # bad: a boolean
    '{"text": "three four", "id": 11}',
]


@pytest.fixture(scope="module")
def jsonl_path(tmp_path_factory):
    path = tmp_path_factory.mktemp("jsonl") / "rows.jsonl"
    filler = [json.dumps({"text": f"filler {i}", "id": 100 + i}) for i in range(200)]
    path.write_text("\n".join(filler + JSONL) + "\n", encoding="utf-8")
    return path, len(filler)


@pytest.mark.parametrize("split_bytes", [None, "512"])
def test_a_bad_jsonl_record_is_named_by_file_and_line(spark, jsonl_path, split_bytes):
    path, offset = jsonl_path
    conf = {"spark.sql.files.maxPartitionBytes": split_bytes, "spark.sql.files.openCostInBytes": "1"} \
        if split_bytes else {}
    with spark_conf(spark, **conf), pytest.raises(BadInputError) as raised:
        train(read_documents(spark, str(path), input_format="jsonl"), CFG)
    message = str(raised.value)
    assert f"rows.jsonl, line {offset + 4} is a bad JSON Lines record" in message
    assert 'its "text" field is a number, not a string' in message and "\n" not in message
    assert message.endswith("choose the text field with text_col=, or pass on_bad_input='skip' to skip such records")


@pytest.mark.parametrize("by_tasks", [True, False])  # the encoding tasks parse the lines / Spark's reader reads
def test_encoding_names_a_bad_jsonl_record_by_file_and_line(spark, jsonl_path, tmp_path, by_tasks):
    path, offset = jsonl_path
    docs = read_documents(spark, str(path), input_format="jsonl")
    assert jsonl.source_of(docs) is not None
    if not by_tasks:
        vars(docs).pop(jsonl._ATTRIBUTE)
    tok = train(read_documents(spark, str(path), input_format="jsonl", on_bad_input="skip"), CFG)
    with pytest.raises(BadInputError) as raised:
        encode_dataset(docs, tok, str(tmp_path / "enc"))
    message = str(raised.value)
    assert f"rows.jsonl, line {offset + 4} is a bad JSON Lines record" in message and "\n" not in message
    assert message.endswith("choose the text field with text_col=, or pass on_bad_input='skip' to skip such records")


def test_a_split_read_by_a_task_names_its_lines_from_the_file_start(tmp_path):
    """A split that starts inside a file (text_splits: it owns the lines starting at or after its
    start) counts its lines from the file's start, whichever byte it starts at."""
    lines = [json.dumps({"text": f"line {i}"}) for i in range(40)]
    lines[25] = '{"text": false}'
    path = tmp_path / "split.jsonl"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    data = path.read_bytes()
    line_start = sum(len(line) + 1 for line in lines[:20])
    source = text_splits.local_source([str(path)])
    records = jsonl.JsonlSource(source, "text", "fix it")
    for start in (line_start - 1, line_start, line_start + 1):  # 20 or 21 lines before its first
        split = text_splits.Split(str(path), start, len(data), str(path))
        with pytest.raises(BadInputError, match=r"split.jsonl, line 26 is a bad JSON Lines record: its \"text\" "
                                                r"field is a boolean, not a string; fix it$"):
            list(jsonl.SplitRecords(records, InputTally()).texts(split))
    good = text_splits.Split(str(path), line_start, line_start + len(lines[20]), str(path))
    reader = jsonl.SplitRecords(records, InputTally())
    assert [array.to_pylist() for array in reader.texts(good)] == [["line 20"]]


def test_skipped_records_and_null_documents_are_counted_never_trained_on(spark, jsonl_path, tmp_path):
    path, offset = jsonl_path
    docs = read_documents(spark, str(path), input_format="jsonl", keep_columns=["id"], on_bad_input="skip")
    assert {row.id: row.text for row in docs.collect() if row.id < 100} == {1: "one two", 2: None, 11: "three four"}
    tok = train(read_documents(spark, str(path), input_format="jsonl", on_bad_input="skip"), CFG)
    stats = tok.metadata["stats"]
    assert (stats["skipped_records"], stats["null_documents"], stats["documents"]) == (7, 1, offset + 2)
    vocab = {bytes(token) for token in tok.vocab.values() if isinstance(token, bytes)}
    assert not any(b"12345" in token or b"true" in token for token in vocab)
    manifest = encode_dataset(read_documents(spark, str(path), input_format="jsonl", on_bad_input="skip"),
                              tok, str(tmp_path / "enc"))
    assert (manifest["skipped_records"], manifest["null_documents"], manifest["documents"]) == (7, 1, offset + 3)


def test_parquet_null_text_is_a_null_document_and_a_non_string_column_is_refused(spark, tmp_path):
    pq.write_table(pa.table({"text": ["a b", None, "c d"]}), tmp_path / "t.parquet")
    tok = train(read_documents(spark, str(tmp_path / "t.parquet"), input_format="parquet"), CFG)
    assert (tok.metadata["stats"]["null_documents"], tok.metadata["stats"]["documents"]) == (1, 2)
    pq.write_table(pa.table({"text": [1, 2]}), tmp_path / "n.parquet")
    with pytest.raises(ColumnError, match="text"):
        read_documents(spark, str(tmp_path / "n.parquet"), input_format="parquet")


def test_cli_reports_skips_and_errors_in_one_line(spark, gz_dir, jsonl_path, tmp_path, capsys):
    assert main(["count", "--input", str(gz_dir), "--out", str(tmp_path / "c1")]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("bpe-spark count: error: input file") and "a-truncated.txt.gz" in err
    assert err.endswith("pass --on-bad-input skip to skip it")  # built in a task, in the command line's words
    assert len(err.splitlines()) == 1
    assert main(["count", "--input", str(gz_dir), "--on-bad-input", "skip", "--out", str(tmp_path / "c2")]) == 0
    assert "1 corrupt files skipped" in capsys.readouterr().out
    path, _ = jsonl_path
    assert main(["train", "--input", str(path), "--input-format", "jsonl", "--on-bad-input", "skip",
                 "--vocab-size", "270", "--out", str(tmp_path / "model")]) == 0
    out = capsys.readouterr().out
    assert "input: 1 null documents (no text) left out, 7 bad records skipped" in out
    assert main(["count", "--input", str(path), "--input-format", "jsonl", "--out", str(tmp_path / "c3")]) == 2
    assert capsys.readouterr().err.strip().endswith(  # the same error as above, in the command line's words
        "choose the text field with --text-column, or pass --on-bad-input skip to skip such records")
