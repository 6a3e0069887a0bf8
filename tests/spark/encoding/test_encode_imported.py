"""Issue 14, deliverable 5: Spark's bulk encoding with models imported as tokenizers pipelines
(tokenizer.json layouts the fast path cannot hold) gives ``tokenizers``' ids, row for row: a
DeepSeek-style byte-level model with non-special added tokens, and a SentencePiece-style model
(byte_fallback, Metaspace) made by transformers' LlamaConverter."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from tests.hf_cases import CORPUS_NAMES, EDGE_CASES, HUB_PRE_TOKENIZERS, corpus_lines
from tests.models.test_hf_import import ADDED_TEXTS, _byte_level_bpe, _llama_converted
from tokenizers import AddedToken
from tokenizers import Tokenizer as HfTokenizer

from bpe_spark import Tokenizer
from bpe_spark.spark import encode, encode_dataset

pytestmark = pytest.mark.spark


@pytest.fixture(scope="module")
def rows() -> list[tuple[int, str]]:
    texts = list(EDGE_CASES.values()) + ADDED_TEXTS
    texts += [line for name in CORPUS_NAMES for line in corpus_lines(name, 60)]
    return list(enumerate(texts))


def _deepseek(tmp_path) -> tuple[HfTokenizer, Tokenizer]:
    hf = _byte_level_bpe(HUB_PRE_TOKENIZERS["deepseek_v3"], vocab_size=600)
    hf.add_tokens([AddedToken("<|fim_hole|>", special=False, normalized=False),
                   AddedToken("<tool>", special=False, normalized=False, lstrip=True)])
    path = tmp_path / "deepseek.json"
    path.write_text(hf.to_str(), encoding="utf-8")
    return hf, Tokenizer.load(path)


def _sentencepiece(tmp_path) -> tuple[HfTokenizer, Tokenizer]:
    import sentencepiece

    (tmp_path / "train.txt").write_text("".join(corpus_lines("en_books", 1000)), encoding="utf-8")
    sentencepiece.SentencePieceTrainer.train(
        input=str(tmp_path / "train.txt"), model_prefix=str(tmp_path / "bpe"), vocab_size=800, model_type="bpe",
        byte_fallback=True, normalization_rule_name="identity", minloglevel=2,
    )
    hf = _llama_converted(tmp_path / "bpe.model", legacy=False)
    path = tmp_path / "llama.json"
    path.write_text(hf.to_str(), encoding="utf-8")
    return hf, Tokenizer.load(path)


@pytest.mark.parametrize("build", [_deepseek, _sentencepiece], ids=["deepseek", "sentencepiece"])
def test_spark_encode_of_pipeline_models_gives_tokenizers_ids(spark, tmp_path, rows, build):
    hf, tok = build(tmp_path)
    assert tok.pipeline is not None
    expected = {i: e.ids for (i, _), e in zip(rows, hf.encode_batch([t for _, t in rows], add_special_tokens=False))}
    df = spark.createDataFrame(rows, ["id", "text"])
    out = encode(df, tok, id_cols=["id"], allowed_special="all")
    got = {row["id"]: list(row["input_ids"]) for row in out.collect()}
    assert got == expected
    # the bulk path of jobs/encode_dataset.py: Parquet parts in input order
    encode_dataset(df, tok, str(tmp_path / "parquet"), id_cols=["id"], allowed_special="all")
    table = pa.concat_tables([pq.read_table(p) for p in sorted((tmp_path / "parquet").glob("*.parquet"))])
    written = dict(zip(table.column("id").to_pylist(), table.column("input_ids").to_pylist()))
    assert written == expected
    # special-token text as ordinary text (the default): tokenizers' encode_special_tokens
    hf.encode_special_tokens = True
    ordinary = {row["id"]: list(row["input_ids"]) for row in encode(df, tok, id_cols=["id"]).collect()}
    assert ordinary == {i: hf.encode(t, add_special_tokens=False).ids for i, t in rows}
