"""Readers and pretoken counting on Spark (docs/design.md 1.1, 1.2, 2.1 step 2)."""

from __future__ import annotations

import bz2
import gzip
import json

import pytest
from tests.conftest import CORPUS_NAMES, corpus_text

from bpe_spark import TrainerConfig
from bpe_spark import count_pretokens as core_count
from bpe_spark.errors import EmptyCorpusError, OutputExistsError
from bpe_spark.bpe.patterns import JAVA_PRESETS, PRESETS
from bpe_spark.spark import (
    ColumnError,
    InputNotFoundError,
    count_pretokens,
    read_counts,
    read_documents,
)
from bpe_spark.spark.training.count import choose_engine, write_pretoken_counts

pytestmark = pytest.mark.spark


def as_dict(counts_df) -> dict[str, int]:
    table = counts_df.toArrow()
    return dict(zip(table.column("pretoken").to_pylist(), table.column("count").to_pylist()))


def spread_lines(name: str, target_bytes: int) -> list[str]:
    """About ``target_bytes`` of whole lines taken evenly across the whole corpus, so that every
    section (every script of the multilingual file) is represented."""
    lines = corpus_text(name).splitlines(keepends=True)
    total = sum(len(line.encode("utf-8")) for line in lines)
    stride = max(1, total // target_bytes)
    return [line for i, line in enumerate(lines) if i % stride == 0]


def frame(spark, docs, partitions=3):
    return spark.createDataFrame([(d,) for d in docs], "text string").repartition(partitions)


# --- the JVM regex path is exactly the core pretokenizer ------------------------------------------
@pytest.mark.parametrize("name", CORPUS_NAMES)
def test_jvm_counts_equal_core_counts_for_every_preset(spark, name):
    lines = spread_lines(name, 400_000)
    df = frame(spark, lines).cache()
    try:
        for preset in JAVA_PRESETS:
            cfg = TrainerConfig(pattern=preset)
            assert choose_engine(cfg) == "jvm"
            spark_counts = as_dict(count_pretokens(df, cfg))
            expected = core_count(lines, cfg)
            assert spark_counts == dict(expected), (name, preset)
    finally:
        df.unpersist()


def test_jvm_splits_on_special_tokens_longest_first(spark):
    docs = [
        "Hello<|endoftext|>world's end\n",
        "<|endoftext|><|endoftext|>  spaced  <|end|>x\n",
        "a<|endoftext|><|pad|>b \\E tricky \\Q quote\n",
        "<|endoftext|>",
        "",
    ]
    cfg = TrainerConfig(vocab_size=300, special_tokens=("<|end|>", "<|endoftext|>", "<|pad|>", "\\E"))
    assert choose_engine(cfg) == "jvm"
    result = as_dict(count_pretokens(frame(spark, docs, 2), cfg))
    assert result == dict(core_count(docs, cfg))
    assert not any("<|" in p for p in result)


def test_python_engine_for_normalization_matches_core(spark):
    docs = [
        "ΟΔΥΣΣΕΥΣ ΚΑΙ Η ΘΑΛΑΣΣΑ ΣΑΣ.\n",  # Greek capital sigma: final-sigma lowercasing
        "ﬁne Ⅻ ｆｕｌｌｗｉｄｔｈ café\u0301 İstanbul\n",  # NFKC folds, combining marks
        "<|endoftext|>MiXeD<|endoftext|>CASE\n",
    ]
    for cfg in (
        TrainerConfig(pattern="words", lowercase=True, special_tokens=("<|endoftext|>",)),
        TrainerConfig(pattern="gpt2", normalization="NFKC"),
        TrainerConfig(pattern="gpt2", normalization="NFC", lowercase=True),
        TrainerConfig(pattern=r"\S+|\s+"),  # a custom pattern
    ):
        assert choose_engine(cfg) == "python"
        assert as_dict(count_pretokens(frame(spark, docs, 2), cfg)) == dict(core_count(docs, cfg))


def test_both_engines_agree_and_counts_are_64_bit(spark):
    lines = spread_lines("multilingual", 100_000)
    df = frame(spark, lines)
    cfg = TrainerConfig(pattern="cl100k")
    jvm = count_pretokens(df, cfg, engine="jvm")
    assert dict(jvm.dtypes) == {"pretoken": "string", "count": "bigint"}
    assert as_dict(jvm) == as_dict(count_pretokens(df, cfg, engine="python"))


def test_observation_gives_documents_and_bytes(spark, tmp_path):
    docs = ["ab cd\n", "", None, "é\n"]
    df = spark.createDataFrame([(d,) for d in docs], "text string")
    stats = write_pretoken_counts(df, TrainerConfig(), str(tmp_path / "counts"))
    # a DataFrame not made by read_documents: its reader's skips are unknown (None)
    assert stats == {"documents": 2, "bytes": 6 + 3, "pretokens": 5, "distinct_pretokens": 4, "null_documents": 1,
                     "replaced_sequences": 0, "affected_documents": 0, "skipped_files": None,
                     "skipped_records": None}
    assert as_dict(read_counts(spark, str(tmp_path / "counts"))) == {"ab": 1, " cd": 1, "\n": 2, "é": 1}
    with pytest.raises(OutputExistsError):
        write_pretoken_counts(df, TrainerConfig(), str(tmp_path / "counts"))


def test_empty_corpus_writes_nothing(spark, tmp_path):
    df = spark.createDataFrame([("",), ("<|endoftext|>",)], "text string")
    with pytest.raises(EmptyCorpusError):
        write_pretoken_counts(df, TrainerConfig(special_tokens=("<|endoftext|>",)), str(tmp_path / "out"))
    assert not (tmp_path / "out").exists()


# --- readers ------------------------------------------------------------------------------------
def texts(df, col="text") -> list[str]:
    return sorted(row[col] for row in df.collect())


def test_text_lines_keep_their_line_ending(spark, tmp_path):
    (tmp_path / "a.txt").write_bytes(b"one\r\ntwo\n\nthree\rstill three\n")
    docs = read_documents(spark, str(tmp_path / "a.txt"))
    assert texts(docs) == sorted(["one\r\n", "two\n", "\n", "three\rstill three\n"])


def test_compressed_globs_and_directories(spark, tmp_path):
    corpus = tmp_path / "corpus"
    (corpus / "sub").mkdir(parents=True)
    with gzip.open(corpus / "a.txt.gz", "wt", encoding="utf-8") as fh:
        fh.write("gz line\nsecond\n")
    (corpus / "sub" / "b.txt.bz2").write_bytes(bz2.compress(b"bz2 line\n"))
    (corpus / "c.txt").write_text("plain\n", encoding="utf-8")
    everything = sorted(["gz line\n", "second\n", "bz2 line\n", "plain\n"])
    assert texts(read_documents(spark, str(corpus))) == everything
    assert texts(read_documents(spark, [str(corpus / "*.gz"), str(corpus / "sub")])) == sorted(
        ["gz line\n", "second\n", "bz2 line\n"]
    )
    assert texts(read_documents(spark, "file://" + str(corpus / "c.txt"))) == ["plain\n"]


def test_one_document_per_file(spark, tmp_path):
    (tmp_path / "a.txt").write_text("line 1\nline 2\n", encoding="utf-8")
    with gzip.open(tmp_path / "b.txt.gz", "wt", encoding="utf-8") as fh:
        fh.write("no final newline")
    docs = read_documents(spark, str(tmp_path), document="file")
    assert texts(docs) == sorted(["line 1\nline 2\n", "no final newline"])


def test_jsonl_and_parquet_columns(spark, tmp_path):
    records = [{"id": 1, "body": "first doc"}, {"id": 2, "body": "second\ndoc"}, {"id": 3, "body": None}]
    (tmp_path / "d.jsonl").write_text("\n".join(json.dumps(r) for r in records) + "\n", encoding="utf-8")
    docs = read_documents(spark, str(tmp_path / "d.jsonl"), input_format="jsonl", text_col="body")
    assert docs.columns == ["body"]
    assert sorted(r.body for r in docs.collect() if r.body) == ["first doc", "second\ndoc"]
    with pytest.raises(ColumnError, match="'text' not found.*body"):
        read_documents(spark, str(tmp_path / "d.jsonl"), input_format="jsonl")

    spark.createDataFrame([(1, "alpha"), (2, "beta")], "id long, content string").write.parquet(
        str(tmp_path / "p.parquet")
    )
    docs = read_documents(spark, str(tmp_path / "p.parquet"), input_format="parquet", text_col="content",
                          keep_columns=["id"])
    assert sorted(tuple(r) for r in docs.collect()) == [("alpha", 1), ("beta", 2)]
    with pytest.raises(ColumnError, match="'text' not found.*content"):
        read_documents(spark, str(tmp_path / "p.parquet"), input_format="parquet")


def test_missing_paths_are_clear_errors(spark, tmp_path):
    for input_format in ("text", "jsonl", "parquet"):
        with pytest.raises(InputNotFoundError, match="input path not found"):
            read_documents(spark, str(tmp_path / "nope*.txt"), input_format=input_format)
    with pytest.raises(InputNotFoundError):
        read_counts(spark, str(tmp_path / "missing.parquet"))


def test_presets_all_have_java_forms():
    assert set(JAVA_PRESETS) == set(PRESETS)
