"""Shuffled and split encoded datasets (issue 17, item 1 and acceptance 1): the same seed gives
the same bytes in 1, 3 and 8 partitions, another seed another order, every document exactly
once (decoded against the input lines); splits by a seeded hash of the doc id."""

from __future__ import annotations

import json

import pyarrow.parquet as pq
import pytest
from tests.conftest import encode_output_bytes

from bpe_spark import ConfigError, TrainerConfig, train
from bpe_spark.cli import main
from bpe_spark.datasets.doc_order import split_of
from bpe_spark.datasets.megatron import iter_encoded_documents, read_manifest, read_shards
from bpe_spark.spark import encode_dataset

pytestmark = pytest.mark.spark

LINES = [f"line {i} of the {'odd' if i % 2 else 'even'} kind, {'x' * (i % 7)}\n" for i in range(600)]


@pytest.fixture(scope="module")
def tok():
    return train(LINES[::2], TrainerConfig(vocab_size=300))


def docs(spark, partitions):
    df = spark.createDataFrame([(t,) for t in LINES], "text string")
    return df.coalesce(1) if partitions == 1 else spark.createDataFrame(
        spark.sparkContext.parallelize([(t,) for t in LINES], partitions), "text string")


def decoded_parquet(tok, out):
    rows = []
    for part in sorted(out.glob("part-*.parquet")):
        table = pq.read_table(part)
        rows += zip(table.column("doc_id").to_pylist(), table.column("input_ids").to_pylist())
    return [(doc_id, tok.decode(ids)) for doc_id, ids in rows]


def test_same_seed_same_bytes_in_1_3_8_partitions(spark, tok, tmp_path):
    outputs = {}
    for partitions in (1, 3, 8):
        df = docs(spark, partitions)
        assert df.rdd.getNumPartitions() == partitions
        encode_dataset(df, tok, str(tmp_path / f"p{partitions}"), shuffle=True, seed=7, shard_tokens=1500)
        outputs[partitions] = encode_output_bytes(tmp_path / f"p{partitions}")
    assert outputs[1] == outputs[3] == outputs[8]
    assert len([name for name in outputs[1] if name.endswith(".parquet")]) > 2
    rows = decoded_parquet(tok, tmp_path / "p1")
    # every document exactly once, its doc_id its input line
    assert sorted(doc_id for doc_id, _ in rows) == list(range(len(LINES)))
    assert all(LINES[doc_id] == text for doc_id, text in rows)
    order = [doc_id for doc_id, _ in rows]
    assert order != sorted(order)
    manifest = read_manifest(tmp_path / "p1")
    assert manifest["order"]["shuffle"] is True and manifest["order"]["seed"] == 7
    assert manifest["documents"] == len(LINES)

    encode_dataset(docs(spark, 3), tok, str(tmp_path / "other"), shuffle=True, seed=8, shard_tokens=1500)
    other = [doc_id for doc_id, _ in decoded_parquet(tok, tmp_path / "other")]
    assert sorted(other) == sorted(order) and other != order


def test_bin_shuffled_every_document_once(spark, tok, tmp_path):
    out = tmp_path / "bin"
    encode_dataset(docs(spark, 3), tok, str(out), output_format="bin", shuffle=True, seed=1, shard_tokens=2000)
    texts = [tok.decode(ids.tolist()) for ids in read_shards(out)]
    assert sorted(texts) == sorted(LINES) and texts != LINES
    encode_dataset(docs(spark, 8), tok, str(tmp_path / "bin8"), output_format="bin", shuffle=True, seed=1,
                   shard_tokens=2000)
    assert encode_output_bytes(out) == encode_output_bytes(tmp_path / "bin8")


@pytest.mark.parametrize("shuffle", [False, True])
@pytest.mark.parametrize("output_format", ["parquet", "bin"])
def test_splits(spark, tok, tmp_path, shuffle, output_format):
    out = tmp_path / "out"
    manifest = encode_dataset(docs(spark, 3), tok, str(out), output_format=output_format, shuffle=shuffle, seed=5,
                              splits=["validation=0.1,test=0.2"], shard_tokens=1500)
    expected = split_of(list(range(len(LINES))), 5, (("validation", 0.1), ("test", 0.2)))
    names = ["validation", "test", "train"]
    seen = []
    for index, name in enumerate(names):
        sub = read_manifest(out / name)
        assert sub["split"] == name
        texts = [tok.decode(ids) for ids in iter_encoded_documents(out / name)]
        want = [LINES[i] for i in range(len(LINES)) if expected[i] == index]
        assert (sorted(texts) if shuffle else texts) == (sorted(want) if shuffle else want)
        assert sub["documents"] == len(want)
        seen += texts
        if output_format == "parquet":
            doc_ids = [i for part in sorted((out / name).glob("*.parquet"))
                       for i in pq.read_table(part).column("doc_id").to_pylist()]
            assert all(expected[i] == index for i in doc_ids)
    assert sorted(seen) == sorted(LINES)  # union of the splits: every document once
    counts = {entry["name"]: entry["documents"] for entry in manifest["splits"]}
    assert counts["validation"] == pytest.approx(60, abs=25) and counts["test"] == pytest.approx(120, abs=35)
    assert sum(counts.values()) == manifest["documents"] == len(LINES)
    assert sum(entry["tokens"] for entry in manifest["splits"]) == manifest["tokens"]


def test_cli_shuffle_and_split(spark, tok, tmp_path, capsys):
    (tmp_path / "in.txt").write_text("".join(LINES), encoding="utf-8")
    tok.save(tmp_path / "model")
    out = tmp_path / "out"
    assert main(["encode", "--model", str(tmp_path / "model"), "--input", str(tmp_path / "in.txt"), "--out", str(out),
                 "--output-format", "bin", "--shuffle", "--seed", "3", "--split", "validation=0.05"]) == 0
    top = json.loads((out / "_manifest.json").read_text())
    assert [s["name"] for s in top["splits"]] == ["validation", "train"]
    texts = [tok.decode(ids.tolist()) for name in ("validation", "train") for ids in read_shards(out / name)]
    assert sorted(texts) == sorted(LINES)


@pytest.mark.parametrize("args, message", [
    (["--split", "validation=0"], "must be > 0"),
    (["--split", "a=0.5,b=0.5"], "sum to 1"),
    (["--split", "0.01"], "NAME=FRACTION"),
    (["--split", "=0.01"], "NAME=FRACTION"),
    (["--split", "train=0.1"], "train takes the rest"),
    (["--split", "v=abc"], "not a number"),
])
def test_bad_split_values_are_one_line_errors(tmp_path, capsys, no_spark, args, message):
    (tmp_path / "in.txt").write_text("a\n", encoding="utf-8")
    code = main(["encode", "--model", str(tmp_path / "nomodel"), "--input", str(tmp_path / "in.txt"),
                 "--out", str(tmp_path / "out"), *args])
    err = capsys.readouterr().err
    assert code != 0 and message in err and len(err.strip().splitlines()) == 1


def test_bad_values_in_python(spark, tok, tmp_path):
    df = docs(spark, 1)
    with pytest.raises(ConfigError, match="sum to"):
        encode_dataset(df, tok, str(tmp_path / "a"), splits={"a": 0.6, "b": 0.4})
    with pytest.raises(ConfigError, match="seed"):
        encode_dataset(df, tok, str(tmp_path / "b"), shuffle=True, seed=-1)
    with pytest.raises(ConfigError, match="output_format"):
        encode_dataset(df, tok, str(tmp_path / "c"), output_format="csv", shuffle=True)
