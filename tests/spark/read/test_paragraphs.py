"""Paragraph documents of local text files read by the Python tasks in byte-range splits
(bpe_spark.spark.read.paragraphs): each split owns the paragraphs that start inside it, so any
split edge (inside the "\\n\\n" separator, inside a run of empty lines, on a "\\r" line, inside a
paragraph) gives the documents of the whole files, each once; gz files are one split; counting
and encoding in 1 or 8 splits give the counts and ids (the same output bytes) of Spark's
whole-file reader."""

from __future__ import annotations

import gzip
import itertools
import random

import numpy as np
import pyarrow.parquet as pq
import pytest
from tests.conftest import encode_output_bytes
from tests.spark.encoding.test_sidecar_paragraph import PARAGRAPH_TEXT, python_paragraphs

from bpe_spark import TrainerConfig, train_from_counts
from bpe_spark.bpe.long_documents import LongDocument
from bpe_spark.bpe.pretokenize import Pretokenizer
from bpe_spark.spark import count_pretokens, encode_dataset, read_documents
from bpe_spark.spark.read import text_splits
from bpe_spark.spark.read.text_splits import Split, documents_array, iter_blocks, iter_lines

EDGES = [b"", b"a", b"\n", b"\n\n\n", b"a\n\nb", b"a\n\n\n\nb\n", b"\r\n\r\n\n\r", b"x\n \n\ny\r\n\n\n\nz",
         b"\n\nlead\n\n", b"no final newline\n\nlast"]


def _expected(data: bytes) -> list[bytes]:
    return [doc.encode("utf-8", "surrogateescape")
            for doc in python_paragraphs(data.decode("utf-8", "surrogateescape"))]


def _read(path, cuts) -> list[bytes]:
    got = []
    for start, end in itertools.pairwise(cuts):
        for block in iter_blocks(Split(str(path), start, end, paragraphs=True)):
            got.extend([bytes(block.data)] if isinstance(block, LongDocument) else documents_array(block).to_pylist())
    return got


@pytest.mark.parametrize("read_bytes", [2, 5, 8 << 20])
def test_every_split_edge_gives_the_whole_files_paragraphs(tmp_path, monkeypatch, read_bytes):
    monkeypatch.setattr(text_splits, "_READ_BYTES", read_bytes)
    monkeypatch.setattr(text_splits, "LONG_DOCUMENT_BYTES", 40)  # longer paragraphs come alone, whole
    rng = random.Random(read_bytes)
    samples = EDGES + [PARAGRAPH_TEXT.encode()[:400], b"long " * 30 + b"\n\nshort\n\n" + b"longer " * 20]
    samples += [b"".join(rng.choice([b"\n", b"\n\n", b"\n\n\n", b"ab", b"\r", b"\r\n", b" ", "é".encode(), b"\xff"])
                         for _ in range(rng.randint(0, 30))) for _ in range(40)]
    path = tmp_path / "p.txt"
    for data in samples:
        path.write_bytes(data)
        expected, size = _expected(data), len(data)
        for cuts in ([0, size], *([0, cut, size] for cut in range(1, size)), [*range(0, size, 3), size]):
            assert _read(path, cuts) == expected, (data, cuts)
        gz = tmp_path / "p.txt.gz"
        gz.write_bytes(gzip.compress(data))
        assert _read(gz, [0, -1]) == expected, data


def test_long_paragraphs_are_long_documents(tmp_path, monkeypatch):
    monkeypatch.setattr(text_splits, "LONG_DOCUMENT_BYTES", 100)
    monkeypatch.setattr(text_splits, "_READ_BYTES", 16)
    data = b"a\n\n" + b"word word\n" * 30 + b"\n\n\nb\nc\n\n" + b"x" * 150
    path = tmp_path / "p.txt"
    path.write_bytes(data)
    blocks = [block for cuts in ([0, len(data)], [0, 50, 200, len(data)]) for start, end in itertools.pairwise(cuts)
              for block in iter_blocks(Split(str(path), start, end, paragraphs=True))]
    long = [block for block in blocks if isinstance(block, LongDocument)]
    assert [len(doc) for doc in long] == [300, 151] * 2
    texts = [doc for lines in iter_lines(Split(str(path), 0, len(data), paragraphs=True)) for doc in lines]
    assert [doc.text() if isinstance(doc, LongDocument) else doc for doc in texts] == \
        [doc.decode() for doc in _expected(data)]


@pytest.fixture(scope="module")
def paragraph_corpus(tmp_path_factory):
    """Three files: one of many paragraphs with every kind of edge, one without a final newline,
    a gz (one split)."""
    root = tmp_path_factory.mktemp("paragraphs")
    rng = random.Random(7)
    words = ["alpha", "beta", "γάμμα", "中文", "😀", "\r", " ", "x" * 30]
    paragraphs = ["\n".join(" ".join(rng.choice(words) for _ in range(rng.randint(1, 12)))
                            for _ in range(rng.randint(1, 4))) for _ in range(600)]
    text = "\n\n".join(p + "\n" * rng.choice([0, 0, 1, 2, 3]) for p in paragraphs)
    (root / "a.txt").write_text("\n\n" + text + "\n")
    (root / "b.txt").write_text(PARAGRAPH_TEXT)
    (root / "c.txt.gz").write_bytes(gzip.compress(b"gz one\ngz two\n\n\ngz three"))
    return root


def test_paragraphs_in_1_and_8_splits_count_and_encode_as_whole_files(spark, paragraph_corpus, tmp_path,
                                                                        monkeypatch):
    docs = read_documents(spark, str(paragraph_corpus), document="paragraph")
    source = text_splits.source_of(docs)
    assert source is not None and source.paragraphs  # read by the tasks, in splits
    whole = [row.text for row in docs.collect()]  # Spark's reader: each file whole
    assert len(whole) > 600 and "gz three\n" in whole and "last without newline\n" in whole
    cfg = TrainerConfig(vocab_size=300, pattern="gpt2")
    expected_counts = Pretokenizer("gpt2").count(whole)
    tok = train_from_counts(dict(expected_counts), cfg)
    outputs = []
    for splits in (1, 8):
        total = sum(p.stat().st_size for p in paragraph_corpus.iterdir())
        monkeypatch.setattr(text_splits, "MIN_SPLIT_BYTES", 1)
        monkeypatch.setattr(text_splits, "MAX_SPLIT_BYTES", total if splits == 1 else -(-total // 8))
        planned = text_splits.plan_splits(source, 2)
        assert len(planned) >= (3 if splits == 1 else 8)
        docs = read_documents(spark, str(paragraph_corpus), document="paragraph")
        counts = count_pretokens(docs, cfg).toArrow()
        assert dict(zip(counts.column("pretoken").to_pylist(), counts.column("count").to_pylist())) == expected_counts
        out = tmp_path / f"ids{splits}"
        manifest = encode_dataset(docs, tok, str(out))
        assert manifest["documents"] == len(whole)
        ids = pq.read_table(out / "part-00000.parquet").column("input_ids").combine_chunks()
        values, lengths = tok.encode_ordinary_flat(whole)
        assert np.array_equal(ids.values.to_numpy(), values) and np.array_equal(np.diff(ids.offsets.to_numpy()), lengths)
        outputs.append(encode_output_bytes(out))
    assert outputs[0] == outputs[1]
