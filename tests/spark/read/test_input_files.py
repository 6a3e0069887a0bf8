"""The readers read exactly the files the one walk planned (bpe_spark/storage/input_walk.py),
whatever reader runs: a link loop is read once (training and encoding give what the directory
without the loop gives), a name holding ``?`` or ``[1]`` is that file, a glob matching names
with ``:`` reads through Spark's own readers; the input format comes from the files' names when
not given, and Parquet is never read as text."""

from __future__ import annotations

import gzip
import json
import os

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from bpe_spark import TrainerConfig
from bpe_spark.cli import main
from bpe_spark.errors import InputError
from bpe_spark.spark import read_counts, read_documents, train
from bpe_spark.spark.read import text_splits
from bpe_spark.spark.training.checkpoint import META_FILE
from bpe_spark.encoding.tokenizer import Tokenizer

pytestmark = pytest.mark.spark

LINES = ["the cat sat on the mat\n", "a dog ran in the park\n", "birds sing in the trees\n"]


def three_files(root):
    root.mkdir(parents=True)
    for i, line in enumerate(LINES):
        (root / f"f{i}.txt").write_text(line)
    return root


@pytest.fixture(scope="module")
def corpora(tmp_path_factory):
    """The same three one-line files, in a plain directory and in one holding ``ln -s . loop``."""
    base = tmp_path_factory.mktemp("walk")
    plain, looped = three_files(base / "plain"), three_files(base / "looped")
    os.symlink(".", looped / "loop")
    return plain, looped


def texts(df):
    return sorted(row[0] if len(row) == 1 else tuple(row) for row in df.collect())


def test_a_link_loop_is_read_once_by_every_reader(spark, corpora, caplog):
    _, looped = corpora
    for document in ("line", "file", "paragraph"):  # Spark's reader
        assert texts(read_documents(spark, str(looped), document=document)) == sorted(LINES)
    assert "symbolic links to a directory already walked (a loop)" in caplog.text
    docs = read_documents(spark, str(looped))
    assert len(text_splits.source_of(docs).files) == 3  # the Python tasks' reader
    (looped.parent / "looped.jsonl").mkdir()
    for i, line in enumerate(LINES):
        (looped.parent / "looped.jsonl" / f"{i}.jsonl").write_text(json.dumps({"text": line, "id": i}) + "\n")
    os.symlink(".", looped.parent / "looped.jsonl" / "loop")
    assert texts(read_documents(spark, str(looped.parent / "looped.jsonl"), keep_columns=["id"])) == \
        sorted((line, i) for i, line in enumerate(LINES))


def test_training_and_encoding_a_directory_with_a_loop_give_what_it_gives_without(spark, corpora, tmp_path,
                                                                                     capsys):
    plain, looped = corpora
    cfg = TrainerConfig(vocab_size=275)
    a, b = (train(read_documents(spark, str(path)), cfg) for path in (plain, looped))
    assert a.merges == b.merges and b.metadata["stats"]["documents"] == 3
    outputs = {}
    for name, path in (("plain", plain), ("looped", looped)):
        model, out = tmp_path / f"m-{name}", tmp_path / f"ids-{name}"
        assert main(["train", "--input", str(path), "--vocab-size", "275", "--out", str(model), "--no-report",
                     "--progress", "off"]) == 0
        assert main(["encode", "--model", str(model), "--input", str(path), "--out", str(out),
                     "--progress", "off"]) == 0
        assert "encoded 3 documents" in capsys.readouterr().out
        ids = pq.read_table(out / "part-00000.parquet").to_pylist()
        outputs[name] = (Tokenizer.load(model).merges, ids)
        assert len(ids) == 3
    assert outputs["plain"] == outputs["looped"]


def test_an_existing_name_with_glob_characters_is_that_file(spark, tmp_path, capsys):
    (tmp_path / "a?b.txt.gz").write_bytes(gzip.compress(b"one\ntwo\n"))
    (tmp_path / "axb.txt.gz").write_bytes(gzip.compress(b"sibling\n" * 5))
    (tmp_path / "n[1].txt").write_text("bracket\n")
    assert texts(read_documents(spark, str(tmp_path / "a?b.txt.gz"))) == ["one\n", "two\n"]
    assert texts(read_documents(spark, str(tmp_path / "a?b.txt.gz"), document="file")) == ["one\ntwo\n"]
    assert texts(read_documents(spark, str(tmp_path / "n[1].txt"))) == ["bracket\n"]
    assert len(read_documents(spark, str(tmp_path / "a*.txt.gz")).collect()) == 7  # no such name: a glob
    assert main(["count", "--input", str(tmp_path / "a?b.txt.gz"), "--out", str(tmp_path / "c"),
                 "--progress", "off"]) == 0
    assert "from 2 documents" in capsys.readouterr().out


def test_a_glob_matching_names_with_colons_reads_through_spark(spark, tmp_path):
    stamps = ("2024-01-01T10:00:00", "2024-01-01T11:00:00")
    for i, stamp in enumerate(stamps):
        (tmp_path / f"{stamp}.txt.gz").write_bytes(gzip.compress(f"line {i}\n".encode()))
        (tmp_path / f"{stamp}.jsonl").write_text(json.dumps({"text": f"record {i}", "id": i}) + "\n")
        pq.write_table(pa.table({"text": [f"row {i}"], "id": [i]}), tmp_path / f"{stamp}.parquet")
    glob = str(tmp_path / "2024-*")
    assert texts(read_documents(spark, glob + ".txt.gz")) == ["line 0\n", "line 1\n"]
    assert texts(read_documents(spark, glob + ".txt.gz", document="file")) == ["line 0\n", "line 1\n"]
    assert texts(read_documents(spark, glob + ".jsonl", keep_columns=["id"])) == [("record 0", 0), ("record 1", 1)]
    assert texts(read_documents(spark, glob + ".parquet", keep_columns=["id"])) == [("row 0", 0), ("row 1", 1)]


@pytest.fixture(scope="module")
def formats(tmp_path_factory):
    root = tmp_path_factory.mktemp("formats")
    records = [{"text": f"line {i}", "id": i} for i in range(3)]
    (root / "a.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    (root / "b.ndjson.gz").write_bytes(gzip.compress("".join(json.dumps(r) + "\n" for r in records).encode()))
    pq.write_table(pa.table({"text": [r["text"] for r in records]}), root / "c.parquet")
    pq.write_table(pa.table({"text": ["hidden parquet"]}), root / "d.txt")
    return root


def test_the_format_comes_from_the_names_when_not_given(spark, formats):
    expected = [f"line {i}" for i in range(3)]
    for name in ("a.jsonl", "b.ndjson.gz", "c.parquet"):
        assert texts(read_documents(spark, str(formats / name))) == expected, name
    raw = texts(read_documents(spark, str(formats / "a.jsonl"), input_format="text"))  # asked for: text
    assert raw[0].startswith('{"text": "line 0"')
    with pytest.raises(InputError, match="the inputs mix formats.*give input_format= to read them all as one"):
        read_documents(spark, [str(formats / "a.jsonl"), str(formats / "c.parquet")])
    for given in ("auto", "text"):
        with pytest.raises(InputError, match=r"d.txt is a Parquet file \(it starts with PAR1\), not text; give "
                                             "input_format='parquet'"):
            read_documents(spark, str(formats / "d.txt"), input_format=given)


def test_the_command_line_reads_the_format_the_names_say_and_resumes_it(spark, formats, tmp_path, capsys):
    assert main(["count", "--input", str(formats / "b.ndjson.gz"), "--out", str(tmp_path / "c"),
                 "--progress", "off"]) == 0
    assert "from 3 documents" in capsys.readouterr().out
    argv = ["train", "--input", str(formats / "a.jsonl"), "--vocab-size", "270", "--no-report", "--progress", "off",
            "--checkpoint-dir", str(tmp_path / "ckpt")]
    assert main([*argv, "--out", str(tmp_path / "m1")]) == 0
    recorded = json.loads((tmp_path / "ckpt" / META_FILE).read_text())
    assert recorded["input"]["options"]["input_format"] == "jsonl"
    vocab = json.loads((tmp_path / "m1" / "vocab.json").read_text()) if (tmp_path / "m1" / "vocab.json").exists() \
        else None
    assert vocab is None or not any("{" in token for token in vocab)  # no JSON syntax trained on
    assert main([*argv, "--out", str(tmp_path / "m2"), "--resume"]) == 0
    assert main([*argv, "--out", str(tmp_path / "m3"), "--resume", "--input-format", "jsonl"]) == 0
    capsys.readouterr()
    assert main(["encode", "--model", str(tmp_path / "m1"), "--input", str(formats / "d.txt"),
                 "--out", str(tmp_path / "ids")]) == 2
    err = capsys.readouterr().err.strip()
    assert err.endswith("d.txt is a Parquet file (it starts with PAR1), not text; give --input-format parquet")
    assert "\n" not in err and not (tmp_path / "ids").exists()


def test_a_fifo_named_as_input_is_one_clear_line(spark, tmp_path, capsys):
    os.mkfifo(tmp_path / "pipe")
    assert main(["count", "--input", str(tmp_path / "pipe"), "--out", str(tmp_path / "c")]) == 2
    err = capsys.readouterr().err.strip()
    assert err == (f"bpe-spark count: error: --input {tmp_path / 'pipe'}: a FIFO (named pipe), not a regular "
                   "file; bpe-spark reads files and directories (write the stream to a file first)")


def test_the_api_names_a_path_that_is_no_file(spark, tmp_path):
    os.mkfifo(tmp_path / "pipe")
    with pytest.raises(InputError, match=r"^input path .*pipe: a FIFO \(named pipe\), not a regular file"):
        read_documents(spark, str(tmp_path / "pipe"))


def test_pretoken_counts_are_read_by_the_same_walk(spark, corpora, tmp_path, capsys):
    plain, _ = corpora
    counts = tmp_path / "counts"
    assert main(["count", "--input", str(plain), "--out", str(counts), "--progress", "off"]) == 0
    expected = sorted(tuple(row) for row in read_counts(spark, str(counts)).collect())
    os.symlink(".", counts / "loop")
    assert sorted(tuple(row) for row in read_counts(spark, str(counts)).collect()) == expected
