"""Parquet text columns as Spark and pyarrow write them (issue 43, item 9): a dictionary-encoded
string column is text; a top-level column whose name holds a dot (``meta.text``) is named as it
is or in backticks (``\\`meta.text\\```, as Spark writes it), never read as a struct's field."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from bpe_spark import Tokenizer, TrainerConfig, train
from bpe_spark.cli import main
from bpe_spark.datasets.megatron import iter_encoded_documents
from bpe_spark.spark.read.documents import read_documents

pytestmark = pytest.mark.spark

TEXTS = [f"the quick brown fox {i % 7} jumps over the lazy dog\n" for i in range(60)]


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    root = tmp_path_factory.mktemp("parquet-columns")
    pq.write_table(pa.table({"text": pa.array(TEXTS).dictionary_encode(), "id": list(range(60))}), root / "dict.parquet")
    pq.write_table(pa.table({"meta.text": TEXTS, "meta.id": list(range(60)), "text": ["other\n"] * 60}),
                   root / "dotted.parquet")
    assert pa.types.is_dictionary(pq.read_schema(root / "dict.parquet").field("text").type)
    return root


def test_a_dictionary_encoded_column_trains_and_encodes_as_text(spark, files, tmp_path, capsys):
    expected = train(TEXTS, TrainerConfig(vocab_size=300))
    model = tmp_path / "model"
    assert main(["train", "--input", str(files / "dict.parquet"), "--input-format", "parquet", "--vocab-size", "300",
                 "--out", str(model), "--no-report"]) == 0, capsys.readouterr().err
    assert Tokenizer.load(model).merges == expected.merges
    for extra in ([], ["--id-column", "id"]):  # the tasks read the file, or Spark's reader does
        out = tmp_path / f"ids{len(extra)}"
        assert main(["encode", "--model", str(model), "--input", str(files / "dict.parquet"), "--input-format",
                     "parquet", *extra, "--out", str(out)]) == 0, capsys.readouterr().err
        assert list(iter_encoded_documents(out)) == [expected.encode(t) for t in TEXTS]


@pytest.mark.parametrize("name", ["meta.text", "`meta.text`"])
def test_a_dotted_column_is_the_column_of_that_name(spark, files, tmp_path, name, capsys):
    expected = train(TEXTS, TrainerConfig(vocab_size=300))
    model = tmp_path / "model"
    assert main(["train", "--input", str(files / "dotted.parquet"), "--input-format", "parquet",
                 "--text-column", name, "--vocab-size", "300", "--out", str(model), "--no-report"]) == 0, \
        capsys.readouterr().err
    assert Tokenizer.load(model).merges == expected.merges
    out = tmp_path / "ids"
    assert main(["encode", "--model", str(model), "--input", str(files / "dotted.parquet"), "--input-format", "parquet",
                 "--text-column", name, "--id-column", name.replace("text", "id"), "--out", str(out)]) == 0, \
        capsys.readouterr().err
    assert list(iter_encoded_documents(out)) == [expected.encode(t) for t in TEXTS]
    assert pq.read_table(out).column("meta.id").to_pylist() == list(range(60))
    docs = read_documents(spark, str(files / "dotted.parquet"), input_format="parquet", text_col=name)
    assert docs.columns == ["meta.text"] and [r[0] for r in docs.collect()] == TEXTS
