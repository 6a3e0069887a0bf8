"""A line longer than LONG_DOCUMENT_BYTES in a local text file, through the Spark jobs: counted
and encoded in pieces by the tasks (bpe_spark.bpe.long_documents), with the counts and ids of the
whole text (the memory figures are bench case R1)."""

from __future__ import annotations

import gzip

import numpy as np
import pyarrow.parquet as pq
import pytest
from tests.conftest import corpus_text

from bpe_spark import TrainerConfig, train_from_counts
from bpe_spark.bpe.long_documents import LONG_DOCUMENT_BYTES
from bpe_spark.bpe.pretokenize import Pretokenizer
from bpe_spark.spark import count_pretokens, encode_dataset, read_documents

pytestmark = pytest.mark.spark


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


@pytest.mark.parametrize("name", ["long.txt", "long.txt.gz"])
def test_a_long_line_counts_and_encodes_as_its_text(spark, long_line_file, name, tmp_path):
    folder, documents = long_line_file
    cfg = TrainerConfig(vocab_size=400, pattern="gpt2")
    counts = count_pretokens(read_documents(spark, str(folder / name)), cfg).toArrow()
    expected = Pretokenizer("gpt2").count(documents)
    assert dict(zip(counts.column("pretoken").to_pylist(), counts.column("count").to_pylist())) == expected

    tok = train_from_counts(dict(expected), cfg)
    manifest = encode_dataset(read_documents(spark, str(folder / name)), tok, str(tmp_path / "ids"))
    ids = pq.read_table(tmp_path / "ids" / "part-00000.parquet").column("input_ids").combine_chunks()
    values, lengths = tok.encode_ordinary_flat(documents)  # numpy: no Python int per id
    assert np.array_equal(ids.values.to_numpy(), values)
    assert np.array_equal(np.diff(ids.offsets.to_numpy()), lengths)
    assert manifest["documents"] == 4
    assert manifest["replaced_sequences"] == 2 and manifest["affected_documents"] == 2
