"""Datatrove's tokenized layout (no Spark): our writer's bytes, our reader, and datatrove's own
writer and reader (``TokenizedFile``, the merger's ``load_doc_ends`` / ``get_data_reader`` and
``DocumentTokenizerMerger``) on the same documents; ``data_paths.txt`` for Megatron."""

from __future__ import annotations

import struct

import numpy as np
import pytest

from bpe_spark import ConfigError, ModelFormatError
from bpe_spark.datasets.datatrove import DatatroveReader, DatatroveWriter, metadata_text, read_metadata, tokens_with_prefix
from bpe_spark.datasets.megatron import data_paths_text, megatron_data_path

DOCS = [[5, 6, 7], [], [65535, 0], [42]]


def _flat(docs):
    values = np.array([i for doc in docs for i in doc], dtype=np.int64)
    offsets = np.concatenate([[0], np.cumsum([len(d) for d in docs])]).astype(np.int64)
    return values, offsets


def _write(prefix, docs, dtype=np.uint16, tokenizer="models/en32k", batches=2):
    with DatatroveWriter(prefix, dtype, tokenizer) as writer:
        for part in np.array_split(np.arange(len(docs)), batches):
            writer.add_documents(*_flat([docs[i] for i in part]))
    return writer


def test_exact_bytes_of_a_tiny_shard(tmp_path):
    writer = _write(tmp_path / "shard-00000", DOCS)
    assert (writer.documents, writer.tokens) == (4, 6)
    assert (tmp_path / "shard-00000.ds").read_bytes() == struct.pack("<6H", 5, 6, 7, 65535, 0, 42)
    assert (tmp_path / "shard-00000.ds.index").read_bytes() == struct.pack("<4Q", 3, 3, 5, 6)
    assert (tmp_path / "shard-00000.ds.metadata").read_bytes() == b"models/en32k|2\n6\n6.00 T"
    assert [doc.tolist() for doc in DatatroveReader(tmp_path / "shard-00000.ds")] == DOCS


def test_uint32_tokens_take_four_bytes(tmp_path):
    docs = [[70000, 1], [2**31 - 1]]
    _write(tmp_path / "s", docs, np.uint32, batches=1)
    assert (tmp_path / "s.ds").read_bytes() == struct.pack("<3I", 70000, 1, 2**31 - 1)
    assert read_metadata(tmp_path / "s.ds") == ("models/en32k", 4)
    reader = DatatroveReader(tmp_path / "s.ds.index")  # any of the three names opens it
    assert reader.dtype == np.uint32 and [d.tolist() for d in reader] == docs
    with pytest.raises(ConfigError, match="does not fit uint16"):
        _write(tmp_path / "t", docs, np.uint16)
    with pytest.raises(ConfigError, match="uint16 or uint32"):
        DatatroveWriter(tmp_path / "u", np.int32, "x")


def test_an_empty_shard_and_a_damaged_one(tmp_path):
    _write(tmp_path / "e", [], batches=1)
    assert (tmp_path / "e.ds").read_bytes() == b"" and (tmp_path / "e.ds.index").read_bytes() == b""
    assert len(DatatroveReader(tmp_path / "e.ds")) == 0
    _write(tmp_path / "d", DOCS)
    (tmp_path / "d.ds").write_bytes(b"\0\0")
    with pytest.raises(ModelFormatError, match="2 bytes, but its index describes 12 bytes"):
        DatatroveReader(tmp_path / "d.ds")
    (tmp_path / "d.ds.metadata").write_text("name\n6")
    with pytest.raises(ModelFormatError, match="expected '<tokenizer>\\|2'"):
        DatatroveReader(tmp_path / "d.ds")


def test_metadata_counts_as_humanize_does_and_the_name_stays_one_field():
    import humanize  # datatrove's dependency, what it writes the metadata's third line with
    rng = np.random.default_rng(7)
    values = [0, 1, 9, 999, 1000, 9995, 99_950, 999_499, 999_500, 10**6, 2**40, 10**18]
    values += [int(rng.integers(0, 10 ** int(rng.integers(1, 19)))) for _ in range(3000)]
    assert [tokens_with_prefix(v) for v in values] == [humanize.metric(v, unit="T") for v in values]
    assert metadata_text("a|b\nc", 4, 1500) == "a_b_c|4\n1500\n1.50 kT"


def test_datatrove_writes_the_same_bytes_and_reads_ours(tmp_path):
    # datatrove is in the dev extra; its tokenizer.py and merger.py need no torch (its
    # DatatroveFolderDataset does: the folder test reads with the reader it is built on)
    from datatrove.pipeline.tokens.merger import get_data_reader, load_doc_ends
    from datatrove.pipeline.tokens.tokenizer import TokenizedFile

    theirs = TokenizedFile(str(tmp_path / "theirs"), "shard-00000.ds", tokenizer_name_or_path="models/en32k",
                           save_final_metadata=True, token_size=2)
    for doc in DOCS:
        theirs.write(doc, None)
    theirs.close()
    (tmp_path / "ours").mkdir()
    _write(tmp_path / "ours" / "shard-00000", DOCS)
    for suffix in (".ds", ".ds.index", ".ds.metadata"):
        assert (tmp_path / "ours" / f"shard-00000{suffix}").read_bytes() == \
            (tmp_path / "theirs" / f"shard-00000{suffix}").read_bytes(), suffix
    # datatrove's own reader of .ds files (what its merger reads them with)
    ends = load_doc_ends(open(tmp_path / "ours" / "shard-00000.ds.index", "rb"))  # noqa: SIM115 - it closes it
    chunks = get_data_reader(open(tmp_path / "ours" / "shard-00000.ds", "rb"), ends, nb_bytes=2)  # noqa: SIM115
    assert [np.frombuffer(chunk, "<u2").tolist() for chunk in chunks] == DOCS


def test_datatrove_merger_reads_a_folder_of_our_shards(tmp_path):
    from datatrove.pipeline.tokens.merger import DocumentTokenizerMerger

    docs = [[1, 2], [70000], [3, 4, 5], [6]]
    (tmp_path / "in").mkdir()
    _write(tmp_path / "in" / "shard-00000", docs[:2], np.uint32, batches=1)
    _write(tmp_path / "in" / "shard-00001", docs[2:], np.uint32, batches=1)
    DocumentTokenizerMerger(str(tmp_path / "in"), str(tmp_path / "out"), "merged", shuffle=False,
                            progress=False).run()
    merged = DatatroveReader(tmp_path / "out" / "000_merged.ds")
    assert read_metadata(merged.path) == ("models/en32k", 4)  # it took the token size from our metadata
    assert [d.tolist() for d in merged] == docs


def test_data_paths_is_megatrons_weighted_data_path():
    shards = [{"name": "shard-00000", "tokens": 120}, {"name": "shard-00001", "tokens": 0},
              {"name": "shard-00002", "tokens": 7}]
    text = data_paths_text(shards)
    assert text == "120 shard-00000\n7 shard-00002\n"
    # Megatron's --data-args-path reads the file with f.read().split(): weight prefix weight prefix
    assert text.split() == ["120", "shard-00000", "7", "shard-00002"]
    assert megatron_data_path(text, "/data/out/") == ["120", "/data/out/shard-00000", "7", "/data/out/shard-00002"]
    with pytest.raises(ModelFormatError, match="pairs"):
        megatron_data_path("120 a 7")
