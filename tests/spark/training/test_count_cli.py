"""``bpe-spark count``: the counts it writes are the core's, and training on them gives the
merges of training on the documents."""

from __future__ import annotations

import json

import pyarrow.parquet as pq
import pytest
from tests.conftest import corpus_lines

from bpe_spark import TrainerConfig, count_pretokens
from bpe_spark.cli import main
from bpe_spark.encoding.tokenizer import Tokenizer

pytestmark = pytest.mark.spark

EOT = "<|endoftext|>"


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    lines = corpus_lines("tiny_shakespeare", 20_000)
    lines = [line.replace(" the ", f" the{EOT}", 1) if i % 7 == 0 else line for i, line in enumerate(lines)]
    path = tmp_path_factory.mktemp("count-corpus") / "corpus.txt"
    path.write_text("".join(lines), encoding="utf-8")
    return path, lines


def written_counts(path) -> dict[str, int]:
    table = pq.read_table(path)
    assert table.column_names == ["pretoken", "count"]
    pretokens, counts = table.column("pretoken").to_pylist(), table.column("count").to_pylist()
    assert len(set(pretokens)) == len(pretokens)
    return dict(zip(pretokens, counts))


def test_count_writes_the_cores_counts_and_trains_to_the_same_merges(spark, corpus, tmp_path, capsys):
    path, lines = corpus
    counts = tmp_path / "counts.parquet"
    assert main(["count", "--input", str(path), "--special-token", EOT, "--out", str(counts)]) == 0
    expected = count_pretokens(lines, TrainerConfig(special_tokens=(EOT,)))
    assert f"wrote {len(expected):,} distinct pretokens ({sum(expected.values()):,} in all, from " \
           f"{len(lines):,} documents) to {counts}" in capsys.readouterr().out
    assert written_counts(counts) == dict(expected)

    from_counts, from_input = tmp_path / "from-counts", tmp_path / "from-input"
    common = ["--vocab-size", "320", "--special-token", EOT]
    assert main(["train", "--counts", str(counts), *common, "--out", str(from_counts)]) == 0
    assert main(["train", "--input", str(path), *common, "--out", str(from_input)]) == 0
    trained = Tokenizer.load(from_counts)
    assert trained.merges == Tokenizer.load(from_input).merges
    assert len(trained.merges) == 320 - 256 - 1
    assert trained.vocab == Tokenizer.load(from_input).vocab

    # an existing output stays as it is unless --overwrite
    assert main(["count", "--input", str(path), "--special-token", EOT, "--out", str(counts)]) == 2
    assert "--overwrite" in capsys.readouterr().err
    assert written_counts(counts) == dict(expected)


def test_count_jsonl_with_normalization_on_python(spark, corpus, tmp_path, capsys):
    _, lines = corpus
    source = tmp_path / "docs.jsonl"
    source.write_text("".join(json.dumps({"body": line}) + "\n" for line in lines), encoding="utf-8")
    counts = tmp_path / "counts"
    assert main(["count", "--input", str(source), "--input-format", "jsonl", "--text-column", "body",
                 "--pattern", "words", "--lowercase", "--normalization", "NFKC", "--out", str(counts)]) == 0
    cfg = TrainerConfig(pattern="words", lowercase=True, normalization="NFKC")
    assert written_counts(counts) == dict(count_pretokens(lines, cfg))
    assert f"from {len(lines):,} documents" in capsys.readouterr().out
