"""Tokenizer (docs/design.md 1.5): encoding by merge rank, tiktoken's special-token policy, decoding,
readable tokens, and pickling from plain data."""

from __future__ import annotations

import pickle

import pytest
from tests.conftest import corpus_text

from bpe_spark import (
    ConfigError,
    DisallowedSpecialTokenError,
    Tokenizer,
    TrainerConfig,
    UnknownCharacterError,
    train,
)
from bpe_spark.bpe.words import bpe_merge

EOT, PAD = "<|endoftext|>", "<|pad|>"


@pytest.fixture(scope="module")
def tok() -> Tokenizer:
    text = corpus_text("en_books", 300_000)
    return train(
        text.splitlines(keepends=True), TrainerConfig(vocab_size=700, special_tokens=(EOT, PAD))
    )


@pytest.fixture(scope="module")
def char_tok() -> Tokenizer:
    text = corpus_text("en_books", 100_000)
    cfg = TrainerConfig(
        vocab_size=400, scheme="char", end_of_word="fused", pattern="words", lowercase=True
    )
    return train(text.splitlines(), cfg)


def test_encode_applies_merges_by_rank(tok):
    ids = tok.encode("the cat")
    assert tok.decode(ids) == "the cat"
    assert all(256 <= i < 698 for i in ids)  # both pretokens fully merged
    # the lowest-ranked merge wins, wherever it sits in the pretoken
    assert bpe_merge([1, 2, 3], lambda a, b: {(2, 3): (0, 9), (1, 2): (1, 8)}.get((a, b))) == [1, 9]
    assert bpe_merge([1, 2, 1, 2], lambda a, b: {(1, 2): (0, 9)}.get((a, b))) == [9, 9]


def test_encode_equals_replaying_the_merges(tok):
    # encoding a pretoken = applying every merge in rank order (the training-time rewrite)
    for pretoken in [" the", " nevertheless", " Hello", "\n\n", " 1999", " unbelievably"]:
        symbols = list(pretoken.encode("utf-8"))
        for left, right, new_id in tok.merge_ids:
            out, i = [], 0
            while i < len(symbols):
                if i + 1 < len(symbols) and symbols[i] == left and symbols[i + 1] == right:
                    out.append(new_id)
                    i += 2
                else:
                    out.append(symbols[i])
                    i += 1
            symbols = out
        assert tok.encode_pretoken(pretoken) == symbols, pretoken


def test_special_tokens_are_disallowed_by_default(tok):
    with pytest.raises(DisallowedSpecialTokenError) as info:
        tok.encode(f"a{EOT}b")
    message = str(info.value)
    assert (
        repr(EOT) in message and "allowed_special" in message and "disallowed_special=()" in message
    )


def test_allowed_special(tok):
    eot, pad = tok.special_tokens[EOT], tok.special_tokens[PAD]
    assert (eot, pad) == (698, 699)
    text = f"hi{EOT}there{PAD}"
    ids = tok.encode(text, allowed_special="all")
    assert ids == tok.encode("hi") + [eot] + tok.encode("there") + [pad]
    # only EOT allowed: PAD is still disallowed (the default disallows every other special)
    with pytest.raises(DisallowedSpecialTokenError, match=r"'<\|pad\|>'"):
        tok.encode(text, allowed_special={EOT})
    # ... unless disallowed_special says otherwise: then it is ordinary text
    ids = tok.encode(text, allowed_special={EOT}, disallowed_special=())
    assert ids == tok.encode("hi") + [eot] + tok.encode_ordinary(f"there{PAD}")
    assert pad not in ids
    assert tok.decode(ids) == text
    with pytest.raises(ConfigError, match="not special tokens"):
        tok.encode("x", allowed_special={"<|nope|>"})


def test_disallowed_special_empty_encodes_as_text(tok):
    ids = tok.encode(f"a{EOT}b", disallowed_special=())
    assert ids == tok.encode_ordinary(f"a{EOT}b")
    assert tok.special_tokens[EOT] not in ids
    assert tok.decode(ids) == f"a{EOT}b"
    # a subset: the listed one raises, the other is text
    with pytest.raises(DisallowedSpecialTokenError):
        tok.encode(f"{PAD}{EOT}", disallowed_special={EOT})
    assert tok.encode(PAD, disallowed_special={EOT}) == tok.encode_ordinary(PAD)


def test_encode_ordinary_ignores_special_tokens(tok):
    assert tok.encode_ordinary(f"x{EOT}") == tok.encode_ordinary("x") + tok.encode_ordinary(EOT)
    assert tok.encode_ordinary("") == []


def test_decode_and_decode_bytes(tok):
    text = "Ünïcödé — 東京 ok\n"
    ids = tok.encode(text)
    assert tok.decode(ids) == text
    assert tok.decode_bytes(ids) == text.encode("utf-8")
    # a cut through a multi-byte character decodes with U+FFFD, as tiktoken does
    e_acute = tok.encode("é")
    assert len(e_acute) == 2 and tok.decode(e_acute[:1]) == "\ufffd"
    assert tok.decode([tok.special_tokens[EOT]]) == EOT
    with pytest.raises(KeyError, match="not in the vocabulary"):
        tok.decode([10_000])


def test_tokens_for_people(tok):
    assert tok.tokens("the end") == [tok.decode([i]) for i in tok.encode("the end")]
    assert tok.tokens("é") == ["\\xc3", "\\xa9"]
    assert tok.tokens(f"a{EOT}", allowed_special="all")[-1] == EOT


def test_vocab_and_merges_views(tok):
    assert len(tok.vocab) == tok.vocab_size == 700
    assert tok.vocab[tok.special_tokens[EOT]] == EOT.encode()
    assert all(
        tok.vocab[new_id] == tok.vocab[left] + tok.vocab[right]
        for left, right, new_id in tok.merge_ids
    )
    assert tok.merges[0] == (tok.vocab[tok.merge_ids[0][0]], tok.vocab[tok.merge_ids[0][1]])
    assert (
        tok.token_to_id(EOT) == 698 and tok.token_to_id(b"a") == 97 and tok.id_to_token(97) == b"a"
    )


def test_pickle_round_trip(tok, char_tok):
    for original, text in (
        (tok, corpus_text("en_books", 20_000) + EOT),
        (char_tok, corpus_text("en_books", 20_000)),
    ):
        clone = pickle.loads(pickle.dumps(original))
        assert clone.encode(text, disallowed_special=()) == original.encode(
            text, disallowed_special=()
        )
        assert clone.vocab == original.vocab and clone.merges == original.merges
        assert clone.special_tokens == original.special_tokens
        assert clone.config == original.config
        assert Tokenizer.from_dict(original.to_dict()).merge_ids == original.merge_ids


def test_to_dict_is_plain_data(tok):
    def plain(value) -> bool:
        if isinstance(value, dict):
            return all(plain(k) and plain(v) for k, v in value.items())
        if isinstance(value, (list, tuple)):
            return all(plain(v) for v in value)
        return value is None or isinstance(value, (str, bytes, int, float, bool))

    assert plain(tok.to_dict())


def test_char_scheme_encode_decode(char_tok):
    text = "Alice was beginning to get very tired, wasn't she?"
    ids = char_tok.encode(text)
    assert char_tok.decode(ids) == "alice was beginning to get very tired , wasn ' t she ?"
    tokens = char_tok.tokens(text)
    assert tokens[0].startswith("al") and all(t in char_tok.vocab.values() for t in tokens)
    assert sum(t.endswith("</w>") for t in tokens) == 13  # one end per word


def test_char_scheme_unknown_character(char_tok):
    with pytest.raises(UnknownCharacterError, match=r"'\u2603' \(U\+2603\)"):
        char_tok.encode("snow \u2603 man")


def test_char_scheme_unk_token():
    cfg = TrainerConfig(
        vocab_size=60,
        scheme="char",
        end_of_word="separate",
        pattern="words",
        special_tokens=("<unk>",),
        unk_token="<unk>",
    )
    tok = train(["hello world, hello there"], cfg)
    assert tok.special_tokens == {"<unk>": 0}
    ids = tok.encode("hellz wörld")
    assert ids.count(0) == 2
    assert tok.decode(ids) == "hell<unk> w<unk>rld"


def test_encode_batch(tok):
    assert tok.encode_batch(["a b", "c"]) == [tok.encode("a b"), tok.encode("c")]


def test_constructor_checks_plain_data():
    vocab = {0: "a", 1: "b", 2: "ab"}
    with pytest.raises(ConfigError, match="not in the vocabulary"):
        Tokenizer(scheme="char", vocab=vocab, merges=[(0, 5)], end_of_word=None)
    with pytest.raises(ConfigError, match="makes 'ba'"):
        Tokenizer(scheme="char", vocab=vocab, merges=[(1, 0)], end_of_word=None)
    with pytest.raises(ConfigError, match="which the vocabulary uses"):
        Tokenizer(
            scheme="char", vocab=vocab, merges=[], special_tokens={"<s>": 2}, end_of_word=None
        )
    with pytest.raises(ConfigError, match="256 single bytes"):
        Tokenizer(scheme="byte", vocab={0: b"a"}, merges=[])
    with pytest.raises(ConfigError, match="scheme"):
        Tokenizer(scheme="word", vocab=vocab, merges=[])
