"""``encode_dataset(output_format="datatrove")`` and ``bpe-spark encode --output-format datatrove``
(issue 17, item 5): every document equal to the core tokenizer's ids, read by datatrove's own
reader and merger; the same bytes whatever the partitioning; ``data_paths.txt`` beside bin shards."""

from __future__ import annotations

import random

import numpy as np
import pytest

from bpe_spark import TrainerConfig, train
from bpe_spark.cli import main
from bpe_spark.datasets.datatrove import DatatroveReader, read_datatrove, read_metadata
from bpe_spark.datasets.megatron import megatron_data_path
from bpe_spark.errors import ConfigError
from bpe_spark.datasets.remote import encoded_documents
from bpe_spark.datasets.megatron import MANIFEST_NAME, read_manifest, read_shards
from bpe_spark.models.fingerprint import model_fingerprint
from bpe_spark.spark import encode_dataset
from bpe_spark.spark.read.documents import read_documents

pytestmark = pytest.mark.spark

EOT = "<|endoftext|>"


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    """A text file of 3000 lines (some empty), the model trained on it, and the lines."""
    rng = random.Random(17)
    words = ["the", "shard", "token", "data", "trove", "ünïcode", "日本", "spark", "1234", "a", "--"]
    lines = [" ".join(rng.choice(words) for _ in range(rng.randrange(0, 40))) + "\n" for _ in range(3000)]
    root = tmp_path_factory.mktemp("datatrove-input")
    path = root / "docs.txt"
    path.write_text("".join(lines), encoding="utf-8")
    tok = train(lines, TrainerConfig(vocab_size=400, special_tokens=(EOT,)))
    model = root / "model"
    tok.save(model)
    return path, tok, lines


def _files(directory):
    return {p.name: p.read_bytes() for p in sorted(directory.iterdir()) if p.name != MANIFEST_NAME}


def _encode(spark, corpus, out, partitions, **options):
    """Encode the corpus read in small splits, coalesced to ``partitions`` (input order kept)."""
    path, tok, _ = corpus
    keys = {"spark.sql.files.maxPartitionBytes": "16384", "spark.sql.files.openCostInBytes": "1"}
    saved = {key: spark.conf.get(key) for key in keys}
    for key, value in keys.items():
        spark.conf.set(key, value)
    try:
        docs = read_documents(spark, str(path)).coalesce(partitions)
        assert docs.rdd.getNumPartitions() == partitions
        return encode_dataset(docs, tok, str(out), eos=EOT, shard_tokens=5000, **options)
    finally:
        for key, value in saved.items():
            spark.conf.set(key, value)


def test_datatrove_output_holds_every_document_and_datatrove_reads_it(spark, corpus, tmp_path):
    from datatrove.pipeline.tokens.merger import (
        DocumentTokenizerMerger,
        get_data_reader,
        load_doc_ends,
    )

    _, tok, lines = corpus
    expected = [tok.encode(line) + [tok.special_tokens[EOT]] for line in lines]
    manifests = {n: _encode(spark, corpus, tmp_path / f"ds{n}", n, output_format="datatrove") for n in (1, 3)}
    out = tmp_path / "ds3"
    assert _files(tmp_path / "ds1") == _files(out)  # the same bytes whatever the partitioning
    manifest = read_manifest(out)
    assert manifest == manifests[3] and manifest["output_format"] == "datatrove" and manifest["dtype"] == "uint16"
    assert len(manifest["shards"]) > 3
    listed = [name for entry in manifest["shards"] for name in entry["files"]]
    assert sorted(listed) == sorted(set(_files(out)) - {"_BPE_SPARK"})  # the manifest lists every file
    assert "data_paths" not in manifest
    assert listed[:3] == ["shard-00000.ds", "shard-00000.ds.index", "shard-00000.ds.metadata"]

    # datatrove's own reader (what its merger reads .ds files with), file by file, in shard order
    got = []
    for entry in manifest["shards"]:
        name = out / entry["name"]
        assert read_metadata(f"{name}.ds") == (model_fingerprint(tok), 2)  # no model path given: its fingerprint
        assert (out / f"{entry['name']}.ds.metadata").read_text().splitlines()[1] == str(entry["tokens"])
        ends = load_doc_ends(open(f"{name}.ds.index", "rb"))  # noqa: SIM115 - it closes the file
        chunks = list(get_data_reader(open(f"{name}.ds", "rb"), ends, nb_bytes=2))  # noqa: SIM115
        assert len(chunks) == entry["documents"]
        got += [np.frombuffer(chunk, "<u2").tolist() for chunk in chunks]
    assert got == expected
    # our reader, and decode's
    assert [ids.tolist() for ids in read_datatrove(out)] == expected
    assert list(encoded_documents(str(out), limit=5)) == expected[:5]
    # datatrove's merger takes the folder as its own tokenizer output (token size from our metadata)
    DocumentTokenizerMerger(str(out), str(tmp_path / "merged"), "all", shuffle=False, progress=False).run()
    merged = DatatroveReader(tmp_path / "merged" / "000_all.ds")
    assert merged.dtype == np.uint16 and [ids.tolist() for ids in merged] == expected


def test_bin_output_lists_its_prefixes_for_megatrons_data_path(spark, corpus, tmp_path):
    _, tok, lines = corpus
    manifest = _encode(spark, corpus, tmp_path / "bin", 2, output_format="bin")
    out = tmp_path / "bin"
    text = (out / "data_paths.txt").read_text()
    assert manifest["data_paths"] == "data_paths.txt"
    assert text == "".join(f"{entry['tokens']} {entry['name']}\n" for entry in manifest["shards"])
    assert sum(int(line.split()[0]) for line in text.splitlines()) == manifest["tokens"]
    # every prefix opens as a Megatron dataset prefix (.bin + .idx), in order: every document
    values = megatron_data_path(text, out)
    assert values[1::2] == [str(out / entry["name"]) for entry in manifest["shards"]]
    eot = tok.special_tokens[EOT]
    assert [ids.tolist() for ids in read_shards(out)] == [tok.encode(line) + [eot] for line in lines]


def test_cli_encode_output_format_datatrove(spark, corpus, tmp_path, capsys):
    path, tok, lines = corpus
    out = tmp_path / "cli"
    model = path.parent / "model"
    code = main(["encode", "--model", str(model), "--input", str(path), "--out", str(out),
                 "--output-format", "datatrove", "--eos", EOT, "--shard-tokens", "20000", "--dtype", "uint32"])
    assert code == 0
    summary = capsys.readouterr().out
    manifest = read_manifest(out)
    assert f"in {len(manifest['shards'])} shards at {out}" in summary
    assert manifest["dtype"] == "uint32"
    assert read_metadata(out / "shard-00000.ds") == (str(model), 4)  # the model as given names the tokenizer
    eot = tok.special_tokens[EOT]
    assert [ids.tolist() for ids in read_datatrove(out)] == [tok.encode(line) + [eot] for line in lines]
    capsys.readouterr()
    assert main(["decode", "--model", str(model), "--input", str(out), "--limit", "2"]) == 0
    assert capsys.readouterr().out == "".join(line + EOT + "\n" for line in lines[:2])


def test_parquet_output_refuses_a_datatrove_dtype_and_datatrove_id_columns_go_to_the_sidecar(spark, corpus, tmp_path):
    with pytest.raises(ConfigError, match="applies to bin and datatrove output only"):
        _encode(spark, corpus, tmp_path / "p", 1, output_format="parquet", dtype="uint16")
    assert not (tmp_path / "p").exists()
    _, tok, _ = corpus
    docs = spark.createDataFrame([(f"u{i}", f"line {i} of text\n") for i in range(40)], "url string, text string")
    manifest = encode_dataset(docs.coalesce(1), tok, str(tmp_path / "d"), output_format="datatrove", id_cols=["url"],
                              shard_tokens=100)
    assert len(manifest["shards"]) > 1
    listed = {name for shard in manifest["shards"] for name in shard["files"]}
    assert {p.name for p in (tmp_path / "d").iterdir() if not p.name.startswith("_")} == listed
    assert manifest["sidecar_columns"] == ["doc_id", "url", "offset", "length"]
    assert all(shard["files"][-1] == shard["name"] + ".ids.parquet" for shard in manifest["shards"])
