"""The scale of one document in the shard writers (issue 12, item 8): a shard holding a document
of ``LONG_ROW_TOKENS`` ids or more is written with plain ids in version 2 pages, read alike by
pyarrow, Spark and the repo's readers; other shards keep their options; binary shards write a
long document in blocks, the same bytes."""

from __future__ import annotations

import itertools

import numpy as np
import pyarrow.parquet as pq
import pytest

from bpe_spark import TrainerConfig, train
from bpe_spark.datasets.megatron import ShardReader, ShardWriter, iter_encoded_documents, read_shards
from bpe_spark.spark import encode_dataset
from bpe_spark.spark.encoding.output import LONG_ROW_TOKENS

pytestmark = pytest.mark.spark


def _ids_dictionary(path) -> bool:
    metadata = pq.ParquetFile(path).metadata
    return all(metadata.row_group(g).column(1).has_dictionary_page  # input_ids: the second column
               for g in range(metadata.num_row_groups))


def test_a_long_document_shard_is_written_without_dictionary_and_reads_alike(spark, tmp_path):
    tok = train(["ab cd ef gh"], TrainerConfig(vocab_size=257))  # bytes only: a token per byte
    rng = np.random.default_rng(0)
    words = ["".join(chr(c) for c in rng.integers(97, 123, 5)) for _ in range(200)]
    long_text = " ".join(words[i % 200] for i in range(LONG_ROW_TOKENS // 6 + 1000))
    short = [" ".join(words[i : i + 20]) for i in range(0, 200, 20)]
    texts = [*short, long_text, *short]
    df = spark.createDataFrame([(t,) for t in texts], "text string")
    encode_dataset(df, tok, str(tmp_path / "pq"), shard_tokens=2000)
    expected = [tok.encode(t) for t in texts]
    assert len(expected[len(short)]) >= LONG_ROW_TOKENS

    files = sorted((tmp_path / "pq").glob("*.parquet"))
    assert len(files) >= 3
    longest = {f.name: max(pq.read_table(f).column("n_tokens").to_pylist()) for f in files}
    for f in files:  # the data decides: only the shard holding the long document drops the dictionary
        assert _ids_dictionary(f) == (longest[f.name] < LONG_ROW_TOKENS), f.name
    assert sum(n >= LONG_ROW_TOKENS for n in longest.values()) == 1

    assert pq.read_table(tmp_path / "pq").column("input_ids").to_pylist() == expected
    assert list(iter_encoded_documents(tmp_path / "pq")) == expected
    rows = spark.read.parquet(str(tmp_path / "pq")).orderBy("doc_id").collect()
    assert [list(row["input_ids"]) for row in rows] == expected

    encode_dataset(df, tok, str(tmp_path / "bin"), output_format="bin", shard_tokens=2000)
    assert [doc.tolist() for doc in read_shards(tmp_path / "bin")] == expected


def test_shard_writer_writes_a_long_document_in_blocks_as_one(tmp_path):
    values = np.random.default_rng(1).integers(0, 65536, (5 << 20) // 2 + 7).astype(np.int32)
    offsets = np.array([0, 3, len(values) - 2, len(values)])
    with ShardWriter(tmp_path / "shard-00000", np.uint16) as writer:
        writer.add_documents(values, offsets)
    assert (tmp_path / "shard-00000.bin").read_bytes() == values.astype("<u2").tobytes()
    docs = [doc.tolist() for doc in ShardReader(tmp_path / "shard-00000")]
    assert docs == [values[a:b].tolist() for a, b in itertools.pairwise(offsets)]
