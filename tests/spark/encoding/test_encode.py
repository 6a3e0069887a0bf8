"""Bulk encoding on Spark (issue 4): ids equal Tokenizer.encode row for row, whatever the input
format and partitioning; GPT-2 / cl100k ids equal tiktoken's; shards reproduce the Parquet output;
bad input fails cleanly with no partial output."""

from __future__ import annotations

import contextlib
import gzip
import hashlib
import itertools
import json
import os

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from tests.conftest import CORPUS_NAMES, PEERS, corpus_lines

from bpe_spark import ConfigError, Tokenizer, TrainerConfig, UnknownCharacterError, train
from bpe_spark.encoding.options import EncodeOptions
from bpe_spark.errors import ColumnError, DisallowedSpecialTokenError, OutputExistsError
from bpe_spark.datasets.megatron import MANIFEST_NAME, read_manifest, read_shards
from bpe_spark.models.fingerprint import model_fingerprint
from bpe_spark.spark import encode, encode_dataset
from bpe_spark.spark.read.documents import read_documents

pytestmark = pytest.mark.spark

SAMPLE_BYTES = 200_000
EOT = "<|endoftext|>"


@pytest.fixture(scope="module")
def inputs(tmp_path_factory):
    """The four shared corpora (first 200 KB each), as text, JSON Lines and Parquet files."""
    root = tmp_path_factory.mktemp("encode-inputs")
    expected = []  # (id, text) in file-path order, then line order
    for fmt in ("text", "jsonl", "parquet"):
        (root / fmt).mkdir()
    for name in sorted(CORPUS_NAMES):
        lines = corpus_lines(name, SAMPLE_BYTES)
        ids = [f"{name}:{i}" for i in range(len(lines))]
        expected += list(zip(ids, lines))
        (root / "text" / f"{name}.txt").write_text("".join(lines), encoding="utf-8")
        with open(root / "jsonl" / f"{name}.jsonl", "w", encoding="utf-8") as fh:
            fh.writelines(json.dumps({"id": doc_id, "text": line}, ensure_ascii=False) + "\n" for doc_id, line in zip(ids, lines))
        # small row groups, so that a Parquet file splits into several partitions
        pq.write_table(pa.table({"id": ids, "text": lines}), root / "parquet" / f"{name}.parquet", row_group_size=200)
    return root, expected


@pytest.fixture(scope="module")
def tok(inputs):
    _, expected = inputs
    texts = [text for _, text in expected[::3]]
    return train(texts, TrainerConfig(vocab_size=1200, special_tokens=(EOT,)))


@contextlib.contextmanager
def small_splits(spark, max_bytes=16_384):
    """Files cut into many small splits while the block runs (the scan reads these at execution)."""
    keys = ("spark.sql.files.maxPartitionBytes", "spark.sql.files.openCostInBytes")
    saved = {key: spark.conf.get(key) for key in keys}
    spark.conf.set(keys[0], str(max_bytes))
    spark.conf.set(keys[1], "1")
    try:
        yield
    finally:
        for key, value in saved.items():
            spark.conf.set(key, value)


def read_input(spark, root, fmt, partitions, **kwargs):
    docs = read_documents(spark, str(root / fmt), input_format=fmt, **kwargs)
    docs = docs.coalesce(partitions)
    assert docs.rdd.getNumPartitions() == partitions
    return docs


class Reference:
    """Tokenizer.encode of each distinct text, computed once."""

    def __init__(self, encode_text):
        self.encode_text = encode_text
        self.cache = {}

    def __call__(self, text):
        ids = self.cache.get(text)
        if ids is None:
            ids = self.cache[text] = self.encode_text(text)
        return ids


@pytest.fixture(scope="module")
def tok_reference(tok):
    """``tok.encode`` of each distinct text, computed once for every case below."""
    return Reference(lambda text: tok.encode(text, disallowed_special=()))


@pytest.mark.parametrize("partitions", [1, 8])
@pytest.mark.parametrize("fmt", ["text", "jsonl", "parquet"])
def test_ids_equal_tokenizer_encode_row_for_row(spark, inputs, tok, tok_reference, fmt, partitions):
    root, expected = inputs
    reference = tok_reference
    with small_splits(spark):
        docs = read_input(spark, root, fmt, partitions)
        out = encode(docs, tok)
        got = out.toArrow()
        texts = docs.select("text").toArrow().column("text").to_pylist()
    assert got.column_names == ["doc_id", "input_ids", "n_tokens"]
    assert len(texts) == got.num_rows == len(expected)
    doc_ids = got.column("doc_id").to_pylist()
    assert sorted(doc_ids) == list(range(len(expected)))
    for doc_id, text, ids, n_tokens in zip(
        doc_ids, texts, got.column("input_ids").to_pylist(), got.column("n_tokens").to_pylist()
    ):
        assert ids == reference(text)  # row for row, in the input's order
        assert n_tokens == len(ids)
        assert expected[doc_id][1] == text  # doc_id: file order, then line order, any partitioning


@pytest.mark.parametrize("fmt", ["jsonl", "parquet"])
def test_id_columns_are_carried_in_input_order(spark, inputs, tok, fmt):
    root, expected = inputs
    by_id = dict(expected)
    with small_splits(spark):
        docs = read_input(spark, root, fmt, 3, keep_columns=["id"])
        got = encode(docs, tok, id_cols=["id"], eos=EOT).toArrow()
        input_ids_in_order = docs.select("id").toArrow().column("id").to_pylist()
    assert got.column_names == ["id", "input_ids", "n_tokens"]
    assert got.column("id").to_pylist() == input_ids_in_order
    eot = tok.special_tokens[EOT]
    for doc_id, ids in zip(got.column("id").to_pylist()[::5], got.column("input_ids").to_pylist()[::5]):
        assert ids == tok.encode(by_id[doc_id], disallowed_special=()) + [eot]


@pytest.mark.parametrize("model", ["gpt2", "cl100k_base"])
def test_gpt2_and_cl100k_ids_equal_tiktoken(spark, inputs, model):
    import tiktoken

    root, expected = inputs
    if model == "gpt2":
        tok_model = Tokenizer.load(PEERS / "cs336" / "gpt2_vocab.json")
    else:
        url = "https://openaipublic.blob.core.windows.net/encodings/cl100k_base.tiktoken"
        cache = os.environ["TIKTOKEN_CACHE_DIR"]
        tok_model = Tokenizer.load(os.path.join(cache, hashlib.sha1(url.encode()).hexdigest()))
    reference = Reference(tiktoken.get_encoding(model).encode_ordinary)
    with small_splits(spark):
        docs = read_input(spark, root, "text", 3)
        got = encode(docs, tok_model).select("doc_id", "input_ids").toArrow()
    assert got.num_rows == len(expected)
    for doc_id, ids in zip(got.column("doc_id").to_pylist(), got.column("input_ids").to_pylist()):
        assert ids == reference(expected[doc_id][1])


def _files(directory):
    return {p.name: p.read_bytes() for p in sorted(directory.iterdir()) if p.name != MANIFEST_NAME}


def test_shards_reproduce_the_parquet_output_and_decode_to_the_input(spark, inputs, tok, tmp_path):
    root, expected = inputs
    eot = tok.special_tokens[EOT]
    manifests = {}
    with small_splits(spark):
        for fmt, partitions in (("bin", 8), ("parquet", 8), ("bin", 1), ("parquet", 1)):
            docs = read_input(spark, root, "text", partitions)
            manifests[fmt, partitions] = encode_dataset(
                docs, tok, str(tmp_path / f"{fmt}{partitions}"), output_format=fmt, eos=EOT, shard_tokens=60_000,
            )
    # same bytes whatever the partitioning
    assert _files(tmp_path / "bin1") == _files(tmp_path / "bin8")
    assert _files(tmp_path / "parquet1") == _files(tmp_path / "parquet8")

    manifest = read_manifest(tmp_path / "bin8")
    assert manifest == manifests["bin", 8]
    shards = read_shards(tmp_path / "bin8")
    parquet = pq.read_table(tmp_path / "parquet8")  # part files in name order = doc_id order
    assert parquet.column_names == ["doc_id", "input_ids", "n_tokens"]
    assert parquet.column("doc_id").to_pylist() == list(range(len(expected)))
    parquet_ids = parquet.column("input_ids").to_pylist()
    assert len(shards) == len(parquet_ids) == len(expected)
    for (_, text), from_shards, from_parquet in zip(expected, shards, parquet_ids):
        assert from_shards.tolist() == from_parquet
        assert from_parquet[-1] == eot
        assert tok.decode(from_parquet[:-1]) == text

    text_bytes = sum(len(text.encode("utf-8")) for _, text in expected)
    tokens = sum(map(len, parquet_ids))
    assert manifest["documents"] == len(expected) and manifest["null_documents"] == 0
    assert manifest["tokens"] == tokens == shards.num_tokens
    assert manifest["bytes"] == text_bytes
    assert manifest["bytes_per_token"] == pytest.approx(text_bytes / tokens, rel=1e-6)
    assert manifest["model"]["fingerprint"] == model_fingerprint(tok)
    assert manifest["dtype"] == "uint16" and manifest["eos_id"] == eot
    assert len(manifest["shards"]) > 3  # shard_tokens cut the stream at document boundaries
    assert [s["first_document"] for s in manifest["shards"]] == list(
        np.cumsum([0] + [s["documents"] for s in manifest["shards"]][:-1])
    )
    assert all(s["tokens"] < 60_000 + 5_000 for s in manifest["shards"])
    assert manifests["parquet", 8]["tokens"] == tokens
    # nanoGPT style: the .bin files, concatenated, are the whole token stream
    stream = np.concatenate([
        np.memmap(tmp_path / "bin8" / f"{s['name']}.bin", dtype=np.uint16, mode="r") for s in manifest["shards"]
    ])
    assert stream.tolist() == [i for ids in parquet_ids for i in ids]
    # Spark reads the Parquet output too (the manifest's leading "_" keeps it out of the data)
    assert spark.read.parquet(str(tmp_path / "parquet8")).count() == len(expected)


def test_null_and_empty_texts(spark, tok, tmp_path):
    rows = [(0, "a b"), (1, None), (2, ""), (3, "x")]
    df = spark.createDataFrame(rows, "id long, text string")
    eot = tok.special_tokens[EOT]
    got = encode(df, tok, id_cols=["id"], bos=EOT, eos=EOT).toArrow().to_pylist()
    assert got == [
        {"id": 0, "input_ids": [eot, *tok.encode("a b"), eot], "n_tokens": len(tok.encode("a b")) + 2},
        {"id": 1, "input_ids": None, "n_tokens": 0},
        {"id": 2, "input_ids": [eot, eot], "n_tokens": 2},
        {"id": 3, "input_ids": [eot, *tok.encode("x"), eot], "n_tokens": len(tok.encode("x")) + 2},
    ]
    manifest = encode_dataset(df, tok, str(tmp_path / "bin"), output_format="bin", id_cols=["id"])
    assert manifest["null_documents"] == 1 and manifest["documents"] == 4
    assert [doc.tolist() for doc in read_shards(tmp_path / "bin")] == [tok.encode("a b"), [], [], tok.encode("x")]
    encode_dataset(df, tok, str(tmp_path / "pq"), id_cols=["id"])
    table = pq.read_table(tmp_path / "pq")
    assert table.column_names == ["id", "input_ids", "n_tokens"]
    assert table.column("input_ids").to_pylist() == [tok.encode("a b"), None, [], tok.encode("x")]


def test_documents_not_read_from_files_are_numbered_in_order(spark, tok):
    texts = [f"line {i} of {'many ' * (i % 5)}" for i in range(50)]
    df = spark.createDataFrame([(t,) for t in texts], "text string").repartition(1).coalesce(1)
    got = encode(df, tok).toArrow()
    assert got.column("doc_id").to_pylist() == list(range(50))
    assert got.column("input_ids").to_pylist() == [tok.encode(t) for t in texts]
    # several partitions (no file: numbered by partition, with no segment column per row)
    spread = spark.sparkContext.parallelize([(t,) for t in texts], 4).toDF("text string")
    got = encode(spread, tok).toArrow().sort_by("doc_id")
    assert got.column("doc_id").to_pylist() == list(range(50))
    assert got.column("input_ids").to_pylist() == [tok.encode(t) for t in texts]


def test_rows_from_files_and_from_memory_are_numbered_together(spark, tok, tmp_path):
    path = tmp_path / "lines.txt"
    path.write_text("from a file\nand another\n", encoding="utf-8")
    files = read_documents(spark, str(path))
    memory = spark.createDataFrame([("in memory",)], "text string")
    got = encode(files.unionByName(memory), tok).toArrow().sort_by("doc_id")
    assert got.column("doc_id").to_pylist() == [0, 1, 2]
    texts = ["in memory", "from a file\n", "and another\n"]  # rows of no file first, then by file
    assert got.column("input_ids").to_pylist() == [tok.encode(t) for t in texts]


def test_special_token_policy(spark, tok, tmp_path):
    text = f"one{EOT}two"
    df = spark.createDataFrame([(text,)], "text string")
    ordinary = encode(df, tok).first().input_ids
    allowed = encode(df, tok, allowed_special="all").first().input_ids
    named = encode(df, tok, allowed_special={EOT}).first().input_ids
    assert encode(df, tok, options=EncodeOptions(allowed_special={EOT})).first().input_ids == named
    with pytest.raises(ConfigError, match=r"as options= or as keyword arguments \(eos\), not both"):
        encode(df, tok, eos=EOT, options=EncodeOptions(allowed_special={EOT}))
    assert ordinary == tok.encode(text, disallowed_special=())
    assert allowed == named == tok.encode(text, allowed_special="all")
    assert tok.special_tokens[EOT] in allowed and tok.special_tokens[EOT] not in ordinary
    with pytest.raises(ConfigError, match=r"allowed_special names tokens that are not special tokens: \['<\|nope\|>'\]"):
        encode(df, tok, allowed_special={"<|nope|>"})
    manifest = encode_dataset(df, tok, str(tmp_path / "allowed"), allowed_special="all")
    assert manifest["allowed_special"] == [EOT] and manifest["disallowed_special"] == []
    assert pq.read_table(tmp_path / "allowed").column("input_ids").to_pylist() == [allowed]
    # a disallowed token found on an executor fails the job with the core's error, and no output
    with pytest.raises(DisallowedSpecialTokenError, match=r"text contains the special token '<\|endoftext\|>' at offset 3"):
        encode_dataset(df, tok, str(tmp_path / "refused"), disallowed_special="all")
    assert not (tmp_path / "refused").exists()


def test_schema_errors_come_before_any_work(spark, tok, tmp_path):
    df = spark.createDataFrame([("a", [1])], "text string, input_ids array<int>")
    with pytest.raises(ColumnError, match="Output column input_ids already exists in the input; rename or drop it first"):
        encode(df, tok)
    with pytest.raises(ColumnError, match=r"column 'body' not found in the input; its columns are \['text', 'input_ids'\]; "
                       r"choose the text column with text_col=$"):
        encode(df, tok, "body", output_col="ids")
    with pytest.raises(ColumnError, match=r"column 'url' not found in the input; .*choose id columns with id_cols="):
        encode_dataset(df.drop("input_ids"), tok, str(tmp_path / "out"), id_cols=["url"])
    with pytest.raises(ConfigError, match="is neither a special token of the model"):
        encode(df, tok, output_col="ids", eos="<|nope|>")
    with pytest.raises(ColumnError, match="column 'text' of the input has type int, not string"):
        encode(spark.createDataFrame([(1,)], "text int"), tok)
    with pytest.raises(ConfigError, match=r"output column names repeat: \['doc_id', 'ids', 'ids'\]"):
        encode(df, tok, output_col="ids", n_tokens_col="ids")
    assert not (tmp_path / "out").exists()


def test_vocabulary_too_big_for_the_dtype_fails_before_work(spark, tmp_path):
    url = "https://openaipublic.blob.core.windows.net/encodings/cl100k_base.tiktoken"
    cl100k = Tokenizer.load(os.path.join(os.environ["TIKTOKEN_CACHE_DIR"], hashlib.sha1(url.encode()).hexdigest()))
    df = spark.createDataFrame([("hello world",)], "text string")
    with pytest.raises(ConfigError, match=r"largest token id is 100276, which does not fit uint16"):
        encode_dataset(df, cl100k, str(tmp_path / "out"), output_format="bin", dtype="uint16")
    assert list(tmp_path.iterdir()) == []
    manifest = encode_dataset(df, cl100k, str(tmp_path / "out"), output_format="bin", eos=EOT)
    assert manifest["dtype"] == "uint32"
    stream = np.memmap(tmp_path / "out" / "shard-00000.bin", dtype=np.uint32, mode="r")
    assert stream.tolist() == [15339, 1917, 100257]  # tiktoken's cl100k ids of "hello world", then EOT


def test_existing_output_needs_overwrite_and_failures_leave_nothing(spark, tok, tmp_path):
    df = spark.createDataFrame([("some text",)], "text string")
    out = tmp_path / "out"
    encode_dataset(df, tok, str(out))
    before = _files(out)
    with pytest.raises(OutputExistsError, match="already exists; pass overwrite=True"):
        encode_dataset(df, tok, str(out), output_format="bin")
    assert _files(out) == before
    encode_dataset(df, tok, str(out), output_format="bin", overwrite=True)
    assert read_manifest(out)["output_format"] == "bin" and not (out / "part-00000.parquet").exists()

    # a job that fails on the executors (a character the char-scheme model never saw)
    char_tok = train(["abc abc"], TrainerConfig(vocab_size=8, scheme="char", pattern="words"))
    bad = spark.createDataFrame([("abc",), ("abz",)], "text string")
    with pytest.raises(UnknownCharacterError, match=r"'z' \(U\+007A\)"):
        encode_dataset(bad, char_tok, str(tmp_path / "failed"))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]  # no output, no staging left


@pytest.mark.parametrize("output_format", ["parquet", "bin"])
def test_text_files_read_by_the_tasks_give_the_same_files_as_spark_reader(spark, inputs, tok, tmp_path,
                                                                        monkeypatch, output_format):
    """Local text files are read by the encoding tasks (text_splits); a transformed DataFrame goes
    through Spark's reader. Same documents, same order (file URIs sort like Spark's, even with
    spaces in names), same files byte for byte."""
    from bpe_spark.spark.read import text_splits

    root, _ = inputs
    corpus = tmp_path / "corpus dir"
    corpus.mkdir()
    for i, path in enumerate(sorted((root / "text").iterdir())):
        data = path.read_bytes()
        if i % 2:
            with gzip.open(corpus / f"{path.stem} #{i}.txt.gz", "wb") as fh:
                fh.write(data[:-1])  # no final newline
        else:
            (corpus / f"{path.stem} {i}.txt").write_bytes(data)
    monkeypatch.setattr(text_splits, "MIN_SPLIT_BYTES", 1)
    monkeypatch.setattr(text_splits, "MAX_SPLIT_BYTES", 20_000)
    docs = read_documents(spark, str(corpus))
    assert text_splits.source_of(docs) is not None
    assert len(text_splits.plan_splits(text_splits.source_of(docs), 2)) > 6
    _same_as_spark_reader(docs, tok, tmp_path, output_format)


def _same_as_spark_reader(docs, tok, tmp_path, output_format) -> dict:
    """encode_dataset of ``docs`` (read by the tasks) and of ``docs`` transformed (read by
    Spark): the same files byte for byte, the same totals; the first's manifest."""
    direct = encode_dataset(docs, tok, str(tmp_path / "direct"), output_format=output_format, eos=EOT)
    through_spark = encode_dataset(docs.select("text"), tok, str(tmp_path / "spark"),
                                   output_format=output_format, eos=EOT)
    assert _files(tmp_path / "direct") == _files(tmp_path / "spark")
    for key in ("documents", "null_documents", "replaced_sequences", "affected_documents", "tokens", "bytes",
                "shards"):
        assert direct[key] == through_spark[key]
    return direct


@pytest.mark.parametrize("output_format", ["parquet", "bin"])
def test_parquet_files_read_by_the_tasks_give_the_same_files_as_spark_reader(spark, inputs, tok, tmp_path,
                                                                           monkeypatch, output_format):
    """Local Parquet files are read by the encoding tasks (parquet_splits, whole row groups per
    split); a transformed DataFrame goes through Spark's reader. Same documents (nulls, invalid
    UTF-8 by the text rule), same order, same files byte for byte."""
    from bpe_spark.spark.read import parquet_splits, text_splits

    root, _ = inputs
    corpus = tmp_path / "corpus dir"
    corpus.mkdir()
    for i, path in enumerate(sorted((root / "parquet").iterdir())):
        texts = pq.read_table(path, columns=["text"]).column("text").combine_chunks().view(pa.binary()).to_pylist()
        texts[3], texts[5] = None, b"bad \xff\xfe utf-8\n"
        column = pa.array(texts, pa.large_binary() if i % 2 else pa.binary())
        column = column.view(pa.large_string() if i % 2 else pa.string())
        pq.write_table(pa.table({"text": column}), corpus / f"{path.stem} #{i}.parquet", row_group_size=97 + i)
    monkeypatch.setattr(text_splits, "MIN_SPLIT_BYTES", 1)
    monkeypatch.setattr(text_splits, "MAX_SPLIT_BYTES", 20_000)
    docs = read_documents(spark, str(corpus), input_format="parquet")
    assert parquet_splits.source_of(docs) is not None
    assert len(parquet_splits.plan_splits(parquet_splits.source_of(docs), 2)) > 6
    direct = _same_as_spark_reader(docs, tok, tmp_path, output_format)
    assert direct["null_documents"] == 4 and direct["replaced_sequences"] >= 4


def test_parquet_row_groups_follow_the_documents_not_the_pieces(tmp_path):
    from bpe_spark.spark.encoding.output import RowGroupWriter

    rng = np.random.default_rng(0)
    n_tokens = rng.integers(0, 40, size=500).astype(np.int32)
    ids = pa.ListArray.from_arrays(pa.array(np.concatenate([[0], np.cumsum(n_tokens)]).astype(np.int32)),
                                   pa.array(np.arange(int(n_tokens.sum())), pa.int32()))
    table = pa.table({"doc_id": np.arange(500), "input_ids": ids, "n_tokens": n_tokens})
    outputs = []
    for cuts in ([0, 500], [0, 1, 2, 250, 499, 500], list(range(0, 501, 7)) + [500]):
        path = tmp_path / f"{len(cuts)}.parquet"
        writer = RowGroupWriter(pq.ParquetWriter(path, table.schema, compression="zstd"), max_tokens=600, max_rows=50)
        for lo, hi in itertools.pairwise(cuts):
            writer.add(table.slice(lo, hi - lo))
        writer.close()
        outputs.append(path.read_bytes())
        assert pq.read_table(path).equals(table)
    assert outputs[0] == outputs[1] == outputs[2]
    assert pq.ParquetFile(tmp_path / "2.parquet").num_row_groups > 10
