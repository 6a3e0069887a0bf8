"""The core batch encoder (bpe_spark.encoding.batch_encoder), without Spark: flat ids and offsets equal
Tokenizer.encode text for text, on the compiled and the Python path, for every special-token
policy, with null and empty texts and BOS/EOS."""

from __future__ import annotations

import gzip
from pathlib import Path

import pytest

from bpe_spark import ConfigError, DisallowedSpecialTokenError, TrainerConfig, train
from bpe_spark.bpe.token_options import resolve_token
from bpe_spark.encoding.batch_encoder import BatchEncoder
from bpe_spark.encoding.options import EncodeOptions, encode_options

EOT = "<|endoftext|>"
PAD = "<|pad|>"
SAMPLE = Path(__file__).resolve().parents[2] / "data" / "sample" / "tiny_shakespeare.txt.gz"


@pytest.fixture(scope="module")
def lines():
    with gzip.open(SAMPLE, "rt", encoding="utf-8") as fh:
        return fh.read(200_000).splitlines(keepends=True)[:-1]


@pytest.fixture(scope="module")
def tok(lines):
    return train(lines[::2], TrainerConfig(vocab_size=700, special_tokens=(EOT, PAD)))


def documents(encoder, texts):
    values, offsets, nulls = encoder.encode_texts(texts)
    assert values.dtype.name == "int32" and offsets.dtype.name == "int64" and len(offsets) == len(texts) + 1
    return [values[offsets[i]:offsets[i + 1]].tolist() for i in range(len(texts))], nulls.tolist()


def test_null_and_empty_texts_with_bos_and_eos(tok):
    eot = tok.special_tokens[EOT]
    docs, nulls = documents(BatchEncoder(tok, EncodeOptions(bos_id=eot, eos_id=eot)), ["a b", None, "", "x"])
    assert nulls == [False, True, False, False]
    assert docs == [[eot, *tok.encode("a b"), eot], [], [eot, eot], [eot, *tok.encode("x"), eot]]
    docs, nulls = documents(BatchEncoder(tok, EncodeOptions(eos_id=3)), [None, None])
    assert docs == [[], []] and nulls == [True, True]
    docs, _ = documents(BatchEncoder(tok, EncodeOptions(bos_id=3)), ["", "a"])
    assert docs == [[3], [3, *tok.encode("a")]]
    values, offsets, nulls = BatchEncoder(tok).encode_texts([])
    assert values.tolist() == [] and offsets.tolist() == [0] and nulls.tolist() == []


def test_cached_pretokens_give_the_same_ids_again():
    tok = train(["ab ab ab cd"], TrainerConfig(vocab_size=260, special_tokens=(EOT,)))
    encoder = BatchEncoder(tok, EncodeOptions(bos_id=1, eos_id=2, allowed_special="all"))
    encoder.compiled = False  # the slot cache belongs to the Python path
    texts = ["ab cd ab", None, "", f"ab{EOT}x", "ab"]
    docs, nulls = documents(encoder, texts)
    assert nulls == [False, True, False, False, False]
    assert docs[0] == [1, *tok.encode("ab cd ab"), 2]
    assert docs[1] == [] and docs[2] == [1, 2]
    assert docs[3] == [1, *tok.encode(f"ab{EOT}x", allowed_special="all"), 2]
    assert documents(encoder, texts) == (docs, nulls)  # the second batch is served by the cache


POLICIES = {
    "ordinary": {},
    "all": {"allowed_special": "all"},
    "eot only": {"allowed_special": {EOT}},
}


@pytest.mark.parametrize("policy", sorted(POLICIES))
def test_compiled_and_python_paths_give_tokenizer_encode_ids(tok, lines, policy):
    kwargs = POLICIES[policy]
    texts = [
        f"{EOT}starts", f"ends{EOT}", f"{EOT}{EOT}", EOT, f"a{EOT}b{PAD}c\n", f"{PAD}{EOT}", "plain text\n",
        None, "", "  spaces  \n\n", "héllo wörld 123 ☃", *lines[:300],
    ]
    expected = [None if text is None else [5, *tok.encode(text, disallowed_special=(), **kwargs), 7]
                for text in texts]
    compiled = BatchEncoder(tok, EncodeOptions(bos_id=5, eos_id=7, **kwargs))
    # the C encoder must be built (make install): else both paths below would be the Python one
    assert compiled.compiled, "bpe_spark.native._fastenc is not built or BPE_SPARK_ENCODER=python; run make install"
    python = BatchEncoder(tok, EncodeOptions(bos_id=5, eos_id=7, **kwargs))
    python.compiled = False  # the Python regex + slot-cache path
    for encoder in (compiled, python):
        docs, nulls = documents(encoder, texts)
        assert nulls == [text is None for text in texts]
        assert [None if null else doc for doc, null in zip(docs, nulls)] == expected
        assert docs[texts.index(None)] == []
    if policy == "eot only":
        assert all(tok.special_tokens[PAD] not in doc for doc in docs)  # PAD stays ordinary text


def test_disallowed_special_tokens_raise(tok):
    encoder = BatchEncoder(tok, EncodeOptions(disallowed_special={PAD}))
    assert documents(encoder, [f"a{EOT}"])[0] == [tok.encode(f"a{EOT}", disallowed_special=())]
    with pytest.raises(DisallowedSpecialTokenError, match=r"special token '<\|pad\|>' at offset 1"):
        encoder.encode_texts(["ok", None, f"a{PAD}"])
    with pytest.raises(DisallowedSpecialTokenError, match="endoftext"):
        BatchEncoder(tok, EncodeOptions(allowed_special={PAD}, disallowed_special="all")).encode_texts([EOT])


def test_options_resolve_once_to_plain_sorted_values(tok):
    assert EncodeOptions().resolved(tok) == EncodeOptions(allowed_special=(), disallowed_special=())
    options = EncodeOptions(allowed_special="all", bos="a", eos=EOT).resolved(tok)
    assert options == EncodeOptions(allowed_special=(EOT, PAD), disallowed_special=(),
                                    bos_id=tok.token_to_id(b"a"), eos_id=tok.special_tokens[EOT])
    assert options.resolved(tok) == options and hash(options) == hash(options.resolved(tok))
    assert options.added_ids == 2 and options.record() == {
        "allowed_special": [EOT, PAD], "disallowed_special": [], "bos_id": options.bos_id, "eos_id": options.eos_id}
    assert EncodeOptions(allowed_special={PAD}, disallowed_special="all").resolved(tok).disallowed_special == (EOT,)
    # the resolved options build the same encoder as the policy they came from
    texts = [f"x{EOT}y{PAD}"]
    assert documents(BatchEncoder(tok, options), texts) == documents(
        BatchEncoder(tok, EncodeOptions(allowed_special="all", bos_id=options.bos_id, eos_id=options.eos_id)), texts)
    with pytest.raises(ConfigError, match="not special tokens"):
        EncodeOptions(allowed_special={"<|nope|>"}).resolved(tok)
    with pytest.raises(ConfigError, match=r"eos '<\|nope\|>' is neither a special token of the model"):
        resolve_token(tok, "eos", text="<|nope|>")
    with pytest.raises(ConfigError, match="bos_id 100000 is not a token id of the model"):
        resolve_token(tok, "bos", token_id=100_000)
    with pytest.raises(ConfigError, match="eos takes token text"):
        resolve_token(tok, "eos", text=True)
    with pytest.raises(ConfigError, match=r"as options= or as keyword arguments \(eos_id\), not both"):
        encode_options(options, eos_id=3)


@pytest.mark.parametrize("extra", [{}, {"bos_id": 1, "eos_id": 2}])
def test_texts_from_one_utf8_buffer_give_encode_texts_ids(tok, lines, extra):
    import numpy as np

    encoder = BatchEncoder(tok, EncodeOptions(**extra))
    assert encoder.takes_utf8 == encoder.compiled
    if not encoder.takes_utf8:
        pytest.skip("the compiled encoder is not built here")
    texts = [*lines[:500], "", "héllo  wörld 😀 123\n", "x" * 3000, EOT, " \n\n  "]
    raw = [text.encode("utf-8") for text in texts]
    offsets = np.concatenate([[0], np.cumsum([len(r) for r in raw])])
    got = encoder.encode_utf8(b"".join(raw), offsets)
    want = encoder.encode_texts(texts)
    for a, b in zip(got, want):
        assert a.tolist() == b.tolist()


def test_only_an_encoder_with_nothing_to_cut_check_or_normalize_takes_utf8(tok, lines):
    assert not BatchEncoder(tok, EncodeOptions(allowed_special="all")).takes_utf8
    assert not BatchEncoder(tok, EncodeOptions(disallowed_special="all")).takes_utf8
    lowered = train(lines[::4], TrainerConfig(vocab_size=300, lowercase=True))
    assert not BatchEncoder(lowered).takes_utf8
    with pytest.raises(ValueError, match="takes_utf8"):
        BatchEncoder(lowered).encode_utf8(b"ab", [0, 2])
