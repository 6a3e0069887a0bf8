"""Binary shards (no Spark): the .bin/.idx layout that nanoGPT- and Megatron-style loaders read."""

from __future__ import annotations

import io
import json
import struct

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from bpe_spark import ConfigError, ModelFormatError, Tokenizer, TrainerConfig, train
from bpe_spark.storage import markers
from bpe_spark.datasets.megatron import MANIFEST_NAME, ShardReader, ShardWriter, index_bytes, iter_encoded_documents, read_index, read_shards, shard_name, token_dtype, write_index
from bpe_spark.models.fingerprint import model_fingerprint

DOCS = [[5, 6, 7], [], [65535, 0], [42]]


def _flat(docs):
    values = np.array([i for doc in docs for i in doc], dtype=np.int64)
    offsets = np.concatenate([[0], np.cumsum([len(doc) for doc in docs])])
    return values, offsets


def _megatron_index(path):
    """An independent reading of the MMIDIDX layout, field by field (what Megatron parses)."""
    raw = path.read_bytes()
    assert raw[:9] == b"MMIDIDX\x00\x00"
    version, code, n, doc_count = struct.unpack_from("<QBQQ", raw, 9)
    offset = 9 + 8 + 1 + 8 + 8
    lengths = np.frombuffer(raw, "<i4", n, offset)
    pointers = np.frombuffer(raw, "<i8", n, offset + 4 * n)
    doc_index = np.frombuffer(raw, "<i8", doc_count, offset + 12 * n)
    assert len(raw) == offset + 12 * n + 8 * doc_count
    return version, code, lengths, pointers, doc_index


def test_token_dtype_follows_the_vocabulary():
    assert token_dtype(255) == np.uint16 and token_dtype(65535) == np.uint16
    assert token_dtype(65536) == np.uint32 and token_dtype(100276, "uint32") == np.uint32
    with pytest.raises(ConfigError, match=r"100276.*does not fit uint16.*uint32"):
        token_dtype(100276, "uint16")
    with pytest.raises(ConfigError, match="dtype must be one of"):
        token_dtype(10, "int8")


def test_shard_names_are_deterministic_and_sortable():
    assert [shard_name(i, 3) for i in range(3)] == ["shard-00000", "shard-00001", "shard-00002"]
    assert shard_name(7, 200_000, "part") == "part-000007"


def test_writer_reader_round_trip_in_two_batches(tmp_path):
    prefix = tmp_path / "shard-00000"
    with ShardWriter(prefix, np.uint16) as writer:
        values, offsets = _flat(DOCS[:2])
        writer.add_documents(values, offsets)
        values, offsets = _flat(DOCS[2:])
        # a batch whose offsets do not start at 0, as in a sliced Arrow list column
        writer.add_documents(np.concatenate([[9, 9], values]), offsets + 2)
    assert (writer.documents, writer.tokens) == (4, 6)
    reader = ShardReader(prefix)
    assert [doc.tolist() for doc in reader] == DOCS
    assert reader[2].tolist() == [65535, 0]
    # nanoGPT: the .bin file alone is the flat token stream
    stream = np.memmap(tmp_path / "shard-00000.bin", dtype=np.uint16, mode="r")
    assert stream.tolist() == [i for doc in DOCS for i in doc]
    # Megatron: the .idx fields, read independently
    version, code, lengths, pointers, doc_index = _megatron_index(tmp_path / "shard-00000.idx")
    assert (version, code) == (1, 8)
    assert lengths.tolist() == [3, 0, 2, 1]
    assert pointers.tolist() == [0, 6, 6, 10]  # byte offsets, 2 bytes per token
    assert doc_index.tolist() == [0, 1, 2, 3, 4]


def test_uint32_shards_use_megatrons_int32_code(tmp_path):
    prefix = tmp_path / "wide"
    with ShardWriter(prefix, np.uint32) as writer:
        writer.add_documents(*_flat([[100276, 1], [70000]]))
    _, code, _, pointers, _ = _megatron_index(tmp_path / "wide.idx")
    assert code == 4 and pointers.tolist() == [0, 8]
    assert np.memmap(tmp_path / "wide.bin", dtype=np.uint32, mode="r").tolist() == [100276, 1, 70000]
    dtype, _, _ = read_index(tmp_path / "wide.idx")
    assert dtype == np.int32  # Megatron's type: the same bytes for ids < 2**31


def test_writer_refuses_ids_beyond_its_dtype(tmp_path):
    writer = ShardWriter(tmp_path / "s", np.uint16)
    with pytest.raises(ConfigError, match="does not fit uint16"):
        writer.add_documents(*_flat([[65536]]))
    writer.close()


def test_damaged_shards_are_named(tmp_path):
    with ShardWriter(tmp_path / "s", np.uint16) as writer:
        writer.add_documents(*_flat(DOCS))
    data = (tmp_path / "s.bin").read_bytes()
    (tmp_path / "s.bin").write_bytes(data[:-2])
    with pytest.raises(ModelFormatError, match=r"s\.bin: 10 bytes, but its index describes 12"):
        ShardReader(tmp_path / "s")
    (tmp_path / "bad.idx").write_bytes(b"not an index at all, sorry")
    with pytest.raises(ModelFormatError, match=r"bad\.idx: not a token index"):
        read_index(tmp_path / "bad.idx")
    assert len(index_bytes(np.zeros(0), np.uint16)) == 34 + 8


def _write_dataset(directory, docs_per_shard):
    directory.mkdir()
    shards, first = [], 0
    for i, docs in enumerate(docs_per_shard):
        name = shard_name(i, len(docs_per_shard))
        with ShardWriter(directory / name, np.uint16) as writer:
            writer.add_documents(*_flat(docs))
        shards.append({"name": name, "documents": len(docs), "first_document": first,
                       "tokens": sum(map(len, docs))})
        first += len(docs)
    manifest = {"format": "bpe-spark-encoded", "format_version": 1, "output_format": "bin",
                "dtype": "uint16", "shards": shards}
    (directory / MANIFEST_NAME).write_text(json.dumps(manifest))
    markers.write_marker(directory, "encoded")


def test_read_shards_spans_shards_in_document_order(tmp_path):
    _write_dataset(tmp_path / "ds", [DOCS, [[1], [2, 3]]])
    ds = read_shards(tmp_path / "ds")
    assert len(ds) == 6 and ds.num_tokens == 9
    assert [doc.tolist() for doc in ds] == DOCS + [[1], [2, 3]]
    assert ds[4].tolist() == [1] and ds[-1].tolist() == [2, 3]
    with pytest.raises(IndexError):
        ds[6]
    assert list(iter_encoded_documents(tmp_path / "ds", limit=2)) == [[5, 6, 7], []]


def test_read_shards_needs_a_finished_output(tmp_path):
    _write_dataset(tmp_path / "ds", [DOCS])
    (tmp_path / "ds" / MANIFEST_NAME).unlink()
    with pytest.raises(ModelFormatError, match="not a finished encode output"):
        read_shards(tmp_path / "ds")


def test_read_shards_refuses_an_output_being_written(tmp_path):
    _write_dataset(tmp_path / "ds", [DOCS])
    (tmp_path / "ds" / markers.MARKER_FILE).unlink()  # an earlier version's output: no marker
    assert len(read_shards(tmp_path / "ds")) == len(DOCS)
    markers.write_marker(tmp_path / "ds", "encoded", complete=False)
    with pytest.raises(ModelFormatError, match="an incomplete bpe-spark encoded output"):
        read_shards(tmp_path / "ds")


def test_iter_encoded_documents_reads_parquet_parts_in_name_order(tmp_path):
    out = tmp_path / "pq"
    out.mkdir()
    for name, docs in (("part-00001", [[3], None]), ("part-00000", [[1, 2]])):
        pq.write_table(pa.table({"input_ids": pa.array(docs, pa.list_(pa.int32()))}), out / f"{name}.parquet")
    assert list(iter_encoded_documents(out)) == [[1, 2], [3], []]
    assert list(iter_encoded_documents(out / "part-00001.parquet", limit=1)) == [[3]]


def test_model_fingerprint_follows_what_decides_the_ids():
    tok = train(["low lower lowest"] * 3, TrainerConfig(vocab_size=262, special_tokens=("<|eot|>",)))
    same = Tokenizer.from_dict({**tok.to_dict(), "metadata": {"stats": {"other": 1}}})
    assert model_fingerprint(tok) == model_fingerprint(same)
    assert model_fingerprint(tok).startswith("sha256:") and len(model_fingerprint(tok)) == 71
    fewer = Tokenizer.from_dict({**tok.to_dict(), "merges": tok.to_dict()["merges"][:-1]})
    assert model_fingerprint(fewer) != model_fingerprint(tok)
    other_pattern = Tokenizer.from_dict({**tok.to_dict(), "pattern": "words"})
    assert model_fingerprint(other_pattern) != model_fingerprint(tok)
    # a tokenizer's own fingerprint is the same digest, computed once (every encode's manifest asks)
    assert tok.fingerprint == model_fingerprint(tok.to_dict()) and tok.fingerprint is tok.fingerprint
    assert fewer.fingerprint != tok.fingerprint


def test_an_index_written_in_blocks_is_the_index_built_whole(monkeypatch):
    from bpe_spark.datasets import megatron

    monkeypatch.setattr(megatron, "_WRITE_BLOCK", 3)  # batches cut into blocks, and blocks across batches
    lengths = np.array([4, 0, 7, 1, 65535, 2, 9, 3], dtype=np.int64)
    whole = index_bytes(lengths, np.uint16)
    sink = io.BytesIO()
    assert write_index(sink, [lengths[:5], lengths[5:5], lengths[5:]], np.uint16) == len(whole)
    assert sink.getvalue() == whole
    _, sizes, pointers = read_index_bytes(whole)
    assert sizes.tolist() == lengths.tolist() and pointers.tolist() == (np.cumsum(lengths) - lengths).tolist()
    with pytest.raises(ConfigError, match="0..2"):
        write_index(io.BytesIO(), [lengths, np.array([-1])], np.uint16)


def read_index_bytes(raw: bytes):
    """dtype code, sizes and token offsets of an index (the offsets in bytes / 2: uint16)."""
    _, code, n, _ = struct.unpack_from("<QBQQ", raw, 9)
    sizes = np.frombuffer(raw, dtype="<i4", count=n, offset=34)
    pointers = np.frombuffer(raw, dtype="<i8", count=n, offset=34 + 4 * n) // 2
    return code, sizes, pointers
