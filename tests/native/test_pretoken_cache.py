"""The compiled encoder's pretoken cache (bpe_spark/native/_pretoken_cache.h) and its int objects
(_fastenc.c): keys held in their slot (up to 16 bytes) or in the arena, ids in the slot (up to
two) or in the arena, a cache that starts over when full, ids past the table of shared int
objects, an encoder with no byte ids, a call made while a list of ids is being built, and a rank
model's tokens table with special tokens. Each
case is checked against an encoder that caches nothing (cache_limit=1) and the pure-Python
``bpe_merge``."""

from __future__ import annotations

import gc
import random

import pytest

from bpe_spark.native import compiled as _compiled
from bpe_spark.bpe.words import bpe_merge

pytest_plugins = ("tests.compiled_fixtures",)  # the fastenc fixture
pytestmark = pytest.mark.usefixtures("fastenc")

# merges over 'a'..'d' that make tokens of several lengths: a pretoken gives one id, two, or more
MERGES = [(97, 98, 256), (256, 99, 257), (257, 100, 258), (258, 258, 259), (259, 259, 260), (99, 100, 261),
          (32, 256, 262), (98, 99, 263)]
RANKS = {(left, right): (rank, new_id) for rank, (left, right, new_id) in enumerate(MERGES)}


def _expected(pretoken: str) -> list[int]:
    return bpe_merge(list(pretoken.encode("utf-8")), lambda a, b: RANKS.get((a, b)))


def _encoder(**kwargs):
    return _compiled._fastenc.Encoder(MERGES, list(range(256)), "gpt2", **kwargs)


def test_every_key_length_and_id_count_equals_bpe_merge():
    rng = random.Random(7)
    # letters only: each text is one pretoken, of 1 to 60 bytes (the slot holds up to 16)
    pretokens = ["".join(rng.choice("abcd") for _ in range(n)) for n in range(1, 61) for _ in range(30)]
    pretokens += ["\u00e9" * n for n in range(1, 30)] + ["abcd" * n for n in range(1, 16)]
    cached, uncached = _encoder(), _encoder(cache_limit=1)
    for _ in range(3):  # the second and third rounds are hits
        rng.shuffle(pretokens)
        for pretoken in pretokens:
            expected = _expected(pretoken)
            assert cached.encode(pretoken) == expected, pretoken
            assert uncached.encode(pretoken) == expected, pretoken
    assert {len(_expected(p)) for p in pretokens} >= {1, 2, 3, 4}
    assert cached.cache_size() == len({p for p in pretokens if len(p.encode()) > 2})
    assert uncached.cache_size() <= 1


def test_keys_that_differ_in_one_byte_or_in_length_stay_apart():
    # same first 16 bytes, same padded words (a trailing NUL), same hash inputs but the length
    base = "abcdabcdabcdabcd"
    pretokens = [base, base + "a", base + "b", base[:-1], base[:8], base[:8] + "\x00", "\x00" * 3, "\x00" * 4,
                 "ab\x00", "ab\x00\x00", base + "abcdabcdabcdabcd", base + "abcdabcdabcdabce"]
    encoder = _encoder()
    for _ in range(2):
        for pretoken in pretokens:
            ids = encoder.encode_pretokens([pretoken])
            assert ids == _expected(pretoken), repr(pretoken)


def test_a_full_cache_starts_over_with_the_same_ids():
    rng = random.Random(9)
    texts = [" ".join("".join(rng.choice("abcd") for _ in range(rng.randint(3, 30))) for _ in range(20))
             for _ in range(300)]
    expected = _encoder(cache_limit=1).encode_many(texts)
    for limit in (2, 7, 64, 1000):
        small = _encoder(cache_limit=limit)
        assert small.encode_many(texts) == expected
        assert small.encode_many(texts) == expected  # hits, and clears, the second time
        assert 0 < small.cache_size() <= limit
        assert [small.encode(text) for text in texts[:50]] == [_encoder().encode(text) for text in texts[:50]]


def test_ids_past_the_table_of_int_objects():
    # ID_OBJECTS in _fastenc.c is 1 << 22: an id above it is a new int each time, with the same value
    big = (1 << 22) + 5
    merges = [(97, 98, big), (big, 99, big + 1), (99, 100, 300)]
    encoder = _compiled._fastenc.Encoder(merges, list(range(256)), "gpt2")
    assert encoder.encode("ab abc abcd cd") == [big, 32, big + 1, 32, big + 1, 100, 32, 300]
    assert encoder.encode("abc") == [big + 1]  # from the cache
    assert encoder.bpe([97, 98, 99]) == [big + 1]
    # ids given to bpe() that the encoder cannot make: negative, past its ids
    assert encoder.bpe([-3, 7_000_000, 97, 98]) == [-3, 7_000_000, big]


def test_an_encoder_without_byte_ids_or_vocabulary():
    # bpe() only: the ids come from the merges, the table of int objects from their new ids
    encoder = _compiled._fastenc.Encoder([(1, 2, 10), (10, 10, 11)], None, None)
    assert encoder.bpe([1, 2, 1, 2, 3]) == [11, 3]
    assert encoder.bpe([]) == []
    empty = _compiled._fastenc.Encoder([], None, None)
    assert empty.bpe([5, 6]) == [5, 6]
    with pytest.raises(ValueError):
        empty.encode("ab")


def test_a_call_made_while_the_list_is_built_gets_its_own_buffer():
    # a garbage collection runs while encode() builds its list (the threshold makes every
    # allocation collect); its callback encodes with the same encoder in the middle of it
    encoder = _encoder()
    text = "abcd abc ab " * 40 + "ddd" * 30
    expected = _encoder(cache_limit=1).encode(text)
    inner: list[list[int]] = []

    def callback(phase, info):
        if phase == "start" and len(inner) < 50:
            inner.append(encoder.encode(text))

    threshold = gc.get_threshold()
    gc.callbacks.append(callback)
    try:
        gc.set_threshold(1)
        outer = [encoder.encode(text) for _ in range(20)]
    finally:
        gc.set_threshold(*threshold)
        gc.callbacks.remove(callback)
    assert inner and all(ids == expected for ids in inner)
    assert all(ids == expected for ids in outer)


def test_special_tokens_and_whole_tokens_of_a_rank_model(monkeypatch):
    # tiktoken's rule: a pretoken that is a token comes from the tokens table, looked up before
    # the cache; special tokens are cut out first and keep their ids, their text ordinary otherwise
    from tests.encoding.test_encoder_equivalence import _python_twin

    from bpe_spark import Tokenizer

    vocab = {b: bytes([b]) for b in range(256)}
    for token in (b"ab", b"abc", b" ab", b" abc", b"cd", b"abcd", b"<|", b"|>", b"abcdabcdabcdabcdab"):
        vocab[len(vocab)] = token
    tok = Tokenizer(scheme="byte", vocab=vocab, pattern="gpt2", merge_rule="ranks",
                    special_tokens={"<|end|>": 400, "abc": 401})
    python = _python_twin(tok, monkeypatch)
    texts = ["abc abcd<|end|> abc", "<|end|><|end|>abcdabcdabcdabcdab abcdabcdabcdabcdabc", " abc\u00e9abc ", ""]
    for text in texts:
        for allowed in ("all", {"<|end|>"}, set()):
            expected = python.encode(text, allowed_special=allowed, disallowed_special=())
            assert tok.encode(text, allowed_special=allowed, disallowed_special=()) == expected, (text, allowed)
        assert tok.encode_ordinary(text) == python.encode_ordinary(text)
    assert tok.encode("abc<|end|>", allowed_special="all") == [401, 400]
    assert tok.encode_ordinary("abc abc") == [vocab_id(vocab, b"abc"), vocab_id(vocab, b" abc")]
    assert tok.encode_ordinary("abcdabcdabcdabcdab") == [vocab_id(vocab, b"abcdabcdabcdabcdab")]  # a long key


def vocab_id(vocab: dict[int, bytes], token: bytes) -> int:
    return next(i for i, value in vocab.items() if value == token)
