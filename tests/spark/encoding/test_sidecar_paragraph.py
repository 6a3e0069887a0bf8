"""Issue 17 items 3 and 4: the ids sidecar of binary shards (read back equal to the input's id
columns, its offsets equal to the .idx), paragraph documents (equal to a pure-Python split of
the file, at any split size, in training and encoding), and ``--min-tokens`` (checked against
the core Tokenizer), through the Python API and bpe_spark.cli.main."""

from __future__ import annotations

import json
import random

import numpy as np
import pyarrow.parquet as pq
import pytest

from bpe_spark import ConfigError, TrainerConfig, train
from bpe_spark.cli import main
from bpe_spark.datasets.megatron import read_index, read_manifest, read_shards
from bpe_spark.spark import encode_dataset
from bpe_spark.spark.read.documents import read_documents
from bpe_spark.spark.encoding.sidecar import SIDECAR_SUFFIX

pytestmark = pytest.mark.spark

EOT = "<|endoftext|>"
WORDS = ["the", "cat", "sat", "on", "a", "mat", "while", "an", "old", "dog", "slept", "by", "warm", "fire", "of",
         "winter"]


def _texts(n: int, seed: int = 7) -> list[str]:
    rng = random.Random(seed)
    return [" ".join(rng.choice(WORDS) for _ in range(rng.randint(0, 12))) + "\n" for _ in range(n)]


@pytest.fixture(scope="module")
def tok():
    return train(_texts(400, seed=1), TrainerConfig(vocab_size=300, special_tokens=(EOT,)))


@pytest.fixture()
def jsonl_input(tmp_path):
    texts = _texts(300)
    path = tmp_path / "in" / "docs.jsonl"
    path.parent.mkdir()
    with open(path, "w", encoding="utf-8") as fh:
        fh.writelines(json.dumps({"url": f"https://x.test/{i}", "n": i * 3, "text": text}) + "\n"
                      for i, text in enumerate(texts))
    return path, texts


def _sidecars(out, manifest):
    return [pq.read_table(out / f"{shard['name']}{SIDECAR_SUFFIX}") for shard in manifest["shards"]]


# --- the sidecar --------------------------------------------------------------------------------
def test_sidecar_holds_the_id_columns_and_the_idx_offsets(spark, tmp_path, tok, jsonl_input):
    path, texts = jsonl_input
    docs = read_documents(spark, str(path), input_format="jsonl", keep_columns=["url", "n"]).coalesce(3)
    out = tmp_path / "out"
    manifest = encode_dataset(docs, tok, str(out), output_format="bin", id_cols=["url", "n"], eos=EOT,
                              shard_tokens=400)
    assert len(manifest["shards"]) > 2
    assert manifest["sidecar_columns"] == ["doc_id", "url", "n", "offset", "length"]
    listed = {name for shard in manifest["shards"] for name in shard["files"]} | {manifest["data_paths"]}
    on_disk = {p.name for p in out.iterdir() if not p.name.startswith("_")}
    assert listed == on_disk  # exactly what was written
    tables = _sidecars(out, manifest)
    for shard, table in zip(manifest["shards"], tables):
        assert table.column_names == manifest["sidecar_columns"]
        _, lengths, pointers = read_index(out / f"{shard['name']}.idx")
        itemsize = np.dtype(manifest["dtype"]).itemsize
        assert table.column("length").to_pylist() == lengths.tolist()
        assert table.column("offset").to_pylist() == (pointers // itemsize).tolist()
        assert table.column("doc_id").to_pylist()[0] == shard["first_document"]
    doc_ids = [d for t in tables for d in t.column("doc_id").to_pylist()]
    assert doc_ids == list(range(len(texts)))
    assert [u for t in tables for u in t.column("url").to_pylist()] == [f"https://x.test/{i}" for i in range(len(texts))]
    assert [v for t in tables for v in t.column("n").to_pylist()] == [3 * i for i in range(len(texts))]
    shards = read_shards(out)
    eot = tok.special_tokens[EOT]
    assert [list(shards[i]) for i in range(len(texts))] == [tok.encode(t) + [eot] for t in texts]
    # the same bytes whatever the partitioning
    again = tmp_path / "again"
    encode_dataset(docs.coalesce(1), tok, str(again), output_format="bin", id_cols=["url", "n"], eos=EOT,
                   shard_tokens=400)
    for shard in manifest["shards"]:
        name = shard["name"] + SIDECAR_SUFFIX
        assert (out / name).read_bytes() == (again / name).read_bytes()


def test_bin_without_ids_has_no_sidecar(spark, tmp_path, tok, jsonl_input):
    path, _ = jsonl_input
    docs = read_documents(spark, str(path), input_format="jsonl")
    manifest = encode_dataset(docs, tok, str(tmp_path / "out"), output_format="bin")
    assert "sidecar_columns" not in manifest
    assert not list((tmp_path / "out").glob(f"*{SIDECAR_SUFFIX}"))


# --- paragraphs ---------------------------------------------------------------------------------
PARAGRAPH_TEXT = (
    "\n\nFirst line\nsecond line\n\nalone\n\n\n\n  indented\n \nspace line above is not empty\n"
    "crlf\r\n\r\nstill crlf\n\n" + "".join(f"p{i} a\np{i} b\n" + "\n" * (1 + i % 3) for i in range(40))
    + "last without newline"
)


def python_paragraphs(text: str) -> list[str]:
    """The reference: maximal runs of non-empty lines, each line with its \\n."""
    docs, current = [], []
    for line in text.split("\n"):
        if line:
            current.append(line + "\n")
        elif current:
            docs.append("".join(current))
            current = []
    if current:
        docs.append("".join(current))
    return docs


@pytest.fixture()
def paragraph_files(tmp_path):
    root = tmp_path / "paras"
    root.mkdir()
    (root / "a.txt").write_text(PARAGRAPH_TEXT, encoding="utf-8")
    (root / "b.txt").write_text("one\n\ntwo\nthree\n", encoding="utf-8")
    return root, python_paragraphs(PARAGRAPH_TEXT) + python_paragraphs("one\n\ntwo\nthree\n")


@pytest.mark.parametrize("max_bytes", [None, 7, 64])
def test_paragraph_documents_equal_a_python_split(spark, paragraph_files, max_bytes):
    root, expected = paragraph_files
    keys = ("spark.sql.files.maxPartitionBytes", "spark.sql.files.openCostInBytes")
    saved = {key: spark.conf.get(key) for key in keys}
    try:
        if max_bytes:
            spark.conf.set(keys[0], str(max_bytes))
            spark.conf.set(keys[1], "1")
        docs = read_documents(spark, str(root), document="paragraph")
        if max_bytes:
            assert docs.rdd.getNumPartitions() == 2  # one per file: a file is never split
        got = [row.text for row in docs.collect()]
    finally:
        for key, value in saved.items():
            spark.conf.set(key, value)
    assert got == expected
    # a line of spaces or a lone "\r" is not empty: it stays inside its paragraph
    assert "  indented\n \nspace line above is not empty\ncrlf\r\n\r\nstill crlf\n" in got
    assert "last without newline\n" in got and got[-2:] == ["one\n", "two\nthree\n"]


def test_paragraph_refused_for_jsonl(spark, jsonl_input):
    with pytest.raises(ConfigError, match="paragraph"):
        read_documents(spark, str(jsonl_input[0]), input_format="jsonl", document="paragraph")


# --- min tokens ---------------------------------------------------------------------------------
def test_min_tokens_against_the_core_tokenizer(spark, tmp_path, tok, jsonl_input):
    path, texts = jsonl_input
    docs = read_documents(spark, str(path), input_format="jsonl").coalesce(2)
    manifest = encode_dataset(docs, tok, str(tmp_path / "out"), eos=EOT, min_tokens=4)
    eot = tok.special_tokens[EOT]
    kept = [tok.encode(t) + [eot] for t in texts if len(tok.encode(t)) >= 4]
    assert 0 < len(kept) < len(texts)
    assert manifest["dropped_short_documents"] == len(texts) - len(kept)
    assert manifest["min_tokens"] == 4 and manifest["documents"] == len(kept)
    table = pq.read_table(tmp_path / "out").sort_by("doc_id")
    assert table.column("doc_id").to_pylist() == list(range(len(kept)))  # contiguous
    assert table.column("input_ids").to_pylist() == kept
    with pytest.raises(ConfigError, match="min_tokens"):
        encode_dataset(docs, tok, str(tmp_path / "bad"), min_tokens=-1)


# --- the command line ---------------------------------------------------------------------------
def test_cli_paragraph_min_tokens_bin(spark, tmp_path, tok, paragraph_files, capsys):
    root, expected = paragraph_files
    model = tmp_path / "model"
    tok.save(model)
    out = tmp_path / "shards"
    assert main(["encode", "--model", str(model), "--input", str(root), "--document", "paragraph",
                 "--min-tokens", "8", "--output-format", "bin", "--eos", EOT, "--out", str(out)]) == 0
    manifest = read_manifest(out)
    kept = [tok.encode(t) for t in expected if len(tok.encode(t)) >= 8]
    assert manifest["dropped_short_documents"] == len(expected) - len(kept) > 0
    eot = tok.special_tokens[EOT]
    assert [list(doc) for doc in read_shards(out)] == [ids + [eot] for ids in kept]
    assert manifest["source"]["document"] == "paragraph"
    capsys.readouterr()
    assert main(["encode", "--model", str(model), "--input", str(root), "--min-tokens", "-2",
                 "--out", str(tmp_path / "x")]) == 2
    assert "--min-tokens" in capsys.readouterr().err


def test_cli_bin_with_id_column_writes_sidecars(spark, tmp_path, tok, jsonl_input):
    path, texts = jsonl_input
    model = tmp_path / "model"
    tok.save(model)
    out = tmp_path / "shards"
    assert main(["encode", "--model", str(model), "--input", str(path), "--input-format", "jsonl",
                 "--id-column", "url", "--output-format", "bin", "--out", str(out)]) == 0
    manifest = read_manifest(out)
    assert manifest["shards"][0]["files"] == ["shard-00000.bin", "shard-00000.idx", "shard-00000.ids.parquet"]
    table = pq.read_table(out / "shard-00000.ids.parquet")
    assert table.column("url").to_pylist() == [f"https://x.test/{i}" for i in range(len(texts))]


def test_cli_train_on_paragraphs(spark, tmp_path, paragraph_files):
    root, _ = paragraph_files
    out = tmp_path / "model"
    assert main(["train", "--input", str(root), "--document", "paragraph", "--vocab-size", "270",
                 "--out", str(out)]) == 0
    assert main(["train", "--input", str(root), "--input-format", "jsonl", "--document", "paragraph",
                 "--vocab-size", "270", "--out", str(tmp_path / "m2")]) == 2
