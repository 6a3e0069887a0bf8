"""The compiled encoder (``bpe_spark.native._fastenc``) gives exactly what the pure-Python encoder
gives: the same pretokens as ``regex.findall`` for the gpt2, cl100k and o200k presets, the same BPE as
``bpe_merge``, and the same ids from ``Tokenizer.encode_ordinary`` / ``encode_ordinary_flat``,
on the real corpora and on random text; and tiktoken's ids with the same vocabulary. Every test
fails when the extension is not built (compiled_fixtures)."""

from __future__ import annotations

import random
import re

import pytest
import regex
from tests.conftest import corpus_lines, corpus_text

from bpe_spark import Tokenizer, TrainerConfig, train_from_counts
from bpe_spark.native import compiled as _compiled
from bpe_spark.bpe.patterns import PRESETS
from bpe_spark.training.trainer import count_pretokens
from bpe_spark.bpe.words import bpe_merge

pytest_plugins = ("tests.compiled_fixtures",)  # the fastenc fixture
pytestmark = pytest.mark.usefixtures("fastenc")

# Characters that exercise every branch of the two patterns: the spaces regex's \s knows (and
# \x1c, which str.isspace() calls space but \s does not), apostrophes and contraction letters in
# both cases (and U+017F, which (?i) folds to s), digits of several kinds, letters of several
# scripts, combining marks, emoji, punctuation.
FUZZ_ALPHABET = list(
    " \t\n\r\x0b\x0c\x1c\x85\xa0\u2028\u3000'sStTdDmMlLvVeErR\u017f0123456789\u0661\u00b2\u00bd\u2167"
    "abcXYZ\u00e9\u4e2d\u6587\ud55c!?.,-_()[]\"/\\\U0001f600\u0301\u200d"
)


def _encoder(pattern: str, merges=()):
    return _compiled._fastenc.Encoder(list(merges), list(range(256)), pattern)


@pytest.mark.parametrize("pattern", ["gpt2", "cl100k"])
def test_split_equals_regex_on_real_text(pattern):
    encoder = _encoder(pattern)
    findall = regex.compile(PRESETS[pattern]).findall
    for name in ("en_books", "zh_classics", "multilingual", "tiny_shakespeare"):
        lines = corpus_lines(name, 1_500_000)
        assert [encoder.split(line) for line in lines] == [findall(line) for line in lines], name
        whole = corpus_text(name, 400_000)
        assert encoder.split(whole) == findall(whole), name


@pytest.mark.parametrize("pattern", ["gpt2", "cl100k"])
def test_split_equals_regex_on_random_text(pattern):
    encoder = _encoder(pattern)
    findall = regex.compile(PRESETS[pattern]).findall
    rng = random.Random(5)
    for _ in range(40_000):
        text = "".join(rng.choice(FUZZ_ALPHABET) for _ in range(rng.randint(0, 14)))
        assert encoder.split(text) == findall(text), repr(text)


def _random_merges(rng: random.Random, n_symbols: int, n_merges: int) -> list[tuple[int, int, int]]:
    """Merges over symbols 0..n_symbols-1 with new ids from n_symbols, some reusing an earlier
    id (as a trained vocabulary does when two merges make the same token)."""
    merges = []
    next_id = n_symbols
    for _ in range(n_merges):
        left, right = rng.randrange(next_id), rng.randrange(next_id)
        if merges and rng.random() < 0.15:
            new_id = rng.choice(merges)[2]  # a reused id
        else:
            new_id = next_id
            next_id += 1
        merges.append((left, right, new_id))
    return merges


def test_bpe_equals_bpe_merge():
    rng = random.Random(11)
    for trial in range(400):
        n_symbols = rng.randint(2, 6)
        merges = _random_merges(rng, n_symbols, rng.randint(1, 40))
        encoder = _compiled._fastenc.Encoder(merges, None, None)
        rank = {}
        for position, (left, right, new_id) in enumerate(merges):
            rank.setdefault((left, right), (position, new_id))
        for _ in range(20):
            # short words take the rescan path, long ones (> 64) the heap path
            ids = [rng.randrange(n_symbols) for _ in range(rng.choice([rng.randint(0, 12), rng.randint(60, 300)]))]
            assert encoder.bpe(ids) == bpe_merge(ids, lambda a, b, r=rank: r.get((a, b))), (trial, ids)


def test_cache_limit_does_not_change_ids():
    merges = [(97, 98, 256), (256, 99, 257), (32, 256, 258)]
    big = _compiled._fastenc.Encoder(merges, list(range(256)), "gpt2")
    tiny = _compiled._fastenc.Encoder(merges, list(range(256)), "gpt2", cache_limit=2)
    text = "abc ab abc abd x ab abcabc " * 20
    assert tiny.encode(text) == big.encode(text)
    assert tiny.cache_size() <= 2 < big.cache_size()


@pytest.fixture(scope="module")
def models():
    """Byte-scheme models trained on 1 MB of multilingual text with each compiled pattern."""
    lines = corpus_lines("multilingual", 1_000_000)
    out = {}
    for pattern in ("gpt2", "cl100k"):
        cfg = TrainerConfig(vocab_size=3000, pattern=pattern)
        out[pattern] = train_from_counts(count_pretokens(lines, cfg), cfg)
    cfg = TrainerConfig(vocab_size=1500, pattern="gpt2", lowercase=True, normalization="NFKC")
    out["normalized"] = train_from_counts(count_pretokens(lines, cfg), cfg)
    return out


def _python_twin(tok: Tokenizer, monkeypatch) -> Tokenizer:
    with monkeypatch.context() as patch:
        patch.setenv("BPE_SPARK_ENCODER", "python")
        twin = Tokenizer.from_dict(tok.to_dict())
        twin.encode_ordinary("warm up")  # decides the encoder now, under the patched environment
    assert twin._fast is None
    return twin


@pytest.mark.parametrize("kind", ["gpt2", "cl100k", "normalized"])
def test_tokenizer_ids_equal_the_python_encoder(models, kind, monkeypatch):
    tok = Tokenizer.from_dict(models[kind].to_dict())
    python = _python_twin(tok, monkeypatch)
    assert tok._fast_encoder() is not None and tok._fast_split
    rng = random.Random(3)
    fuzz = ["".join(rng.choice(FUZZ_ALPHABET) for _ in range(rng.randint(0, 30))) for _ in range(3000)]
    for name in ("en_books", "zh_classics", "multilingual"):
        lines = corpus_lines(name, 300_000) + fuzz
        expected = [python.encode_ordinary(line) for line in lines]
        assert [tok.encode_ordinary(line) for line in lines] == expected, name
        ids, lengths = tok.encode_ordinary_flat(lines + [None, ""])
        assert lengths.tolist() == [len(row) for row in expected] + [0, 0]
        assert ids.tolist() == [i for row in expected for i in row]
        flat_ids, flat_lengths = python.encode_ordinary_flat(lines[:50] + [None])
        assert flat_lengths.tolist() == lengths[:50].tolist() + [0]
        assert flat_ids.tolist() == ids[: int(lengths[:50].sum())].tolist()
        assert [tok.encode_pretoken(p) for p in fuzz[:200]] == [python.encode_pretoken(p) for p in fuzz[:200]]


def test_char_scheme_uses_compiled_bpe_with_the_same_ids(monkeypatch):
    lines = corpus_lines("tiny_shakespeare", 200_000)
    cfg = TrainerConfig(vocab_size=600, scheme="char", pattern="words", end_of_word="fused")
    tok = train_from_counts(count_pretokens(lines, cfg), cfg)
    python = _python_twin(tok, monkeypatch)
    assert tok._fast_encoder() is not None and not tok._fast_split  # BPE in C, split in Python
    assert [tok.encode_ordinary(line) for line in lines] == [python.encode_ordinary(line) for line in lines]


def test_same_ids_as_tiktoken(models):
    tiktoken = pytest.importorskip("tiktoken")
    tok = models["cl100k"]
    ranks = {value: token_id for token_id, value in tok.vocab.items()}
    enc = tiktoken.Encoding("bench", pat_str=PRESETS["cl100k"], mergeable_ranks=ranks, special_tokens={})
    lines = corpus_lines("multilingual", 400_000)
    assert [tok.encode_ordinary(line) for line in lines] == [enc.encode_ordinary(line) for line in lines]


@pytest.mark.parametrize(
    "options",
    [
        {"pattern": "gpt2"},
        {"pattern": "cl100k"},
        {"pattern": "gpt2", "special_tokens": ("<|endoftext|>", "\n\n")},
        {"pattern": "cl100k", "lowercase": True, "normalization": "NFKC"},
    ],
)
def test_compiled_counting_equals_python(options, monkeypatch):
    from bpe_spark.bpe.pretokenize import Pretokenizer

    rng = random.Random(8)
    fuzz = ["".join(rng.choice(FUZZ_ALPHABET) for _ in range(rng.randint(0, 30))) for _ in range(2000)]
    texts = corpus_lines("multilingual", 500_000) + corpus_lines("zh_classics", 300_000) + fuzz + ["", None]
    texts += ["a<|endoftext|>b\n\nc <|endoftext|>"]
    compiled = Pretokenizer(**options)
    counts = compiled.count(iter(texts))  # a one-shot iterator, consumed in chunks
    monkeypatch.setenv("BPE_SPARK_ENCODER", "python")
    expected = Pretokenizer(**options).count(text for text in texts if text is not None)
    assert counts == expected
    assert all(type(count) is int for count in counts.values())


# --- lone surrogates and bytes that are not UTF-8 ------------------------------------------

SURROGATE_TEXTS = [
    "\ud800", "a \ud800 b", "x\udfff\ud800y 12\ud800", "'\ud800s", " \ud800\n\n", "\ud83d\ude00 \ud800\u4e2d",
]


@pytest.mark.parametrize("pattern", ["gpt2", "cl100k"])
def test_lone_surrogates_split_and_count_as_in_python(pattern, monkeypatch):
    """A str may hold lone surrogates: the compiled pretokenizer splits and counts them as the
    regex does (their "surrogatepass" bytes), where the strict UTF-8 codec would refuse them."""
    from bpe_spark.bpe.pretokenize import Pretokenizer

    rng = random.Random(13)
    alphabet = FUZZ_ALPHABET + ["\ud800", "\udbff", "\udc00", "\udfff"]
    fuzz = ["".join(rng.choice(alphabet) for _ in range(rng.randint(0, 20))) for _ in range(3000)]
    texts = SURROGATE_TEXTS + fuzz
    encoder, findall = _encoder(pattern), regex.compile(PRESETS[pattern]).findall
    assert [encoder.split(text) for text in texts] == [findall(text) for text in texts]
    counts = Pretokenizer(pattern).count(texts)
    monkeypatch.setenv("BPE_SPARK_ENCODER", "python")
    assert counts == Pretokenizer(pattern).count(texts)


@pytest.mark.parametrize("kind", ["gpt2", "cl100k"])
def test_lone_surrogates_encode_as_replacement_characters(models, kind, monkeypatch):
    """The text rule (bpe_spark.bpe.text): each lone surrogate is one U+FFFD, in the compiled and
    the pure-Python encoder alike, one text or many."""
    tok = Tokenizer.from_dict(models[kind].to_dict())
    python = _python_twin(tok, monkeypatch)
    assert tok.compiled_encoding and not python.compiled_encoding
    for text in SURROGATE_TEXTS:
        replaced = re.sub("[\ud800-\udfff]", "\ufffd", text)
        expected = tok.encode_ordinary(replaced)
        assert "\ufffd" in replaced and expected
        for encoder in (tok, python):
            assert encoder.encode_ordinary(text) == expected
            ids, lengths = encoder.encode_ordinary_flat(["ab", text])
            assert lengths.tolist()[1] == len(expected) and ids.tolist()[-len(expected):] == expected


def _truncated_and_invalid() -> list[bytes]:
    """Multibyte sequences cut short at the end of the buffer, stray continuation bytes and
    bytes that never occur in UTF-8, alone and after text."""
    cut = [b"\xc3", b"\xe4", b"\xe4\xb8", b"\xf0", b"\xf0\x9f", b"\xf0\x9f\x98", b"\xc5", b"\xed\xa0"]
    odd = [b"\x80", b"\xbf\xbf", b"\xff", b"\xfe\xfe", b"\xf8\x88\x80\x80\x80"]
    prefixes = [b"", b"a", b" ", b"'", b"12", b"\xe4\xb8\xad", b"  ", b"\n", b"'l"]
    return [prefix + piece for prefix in prefixes for piece in cut + odd]


@pytest.mark.parametrize("pattern", ["gpt2", "cl100k"])
def test_the_decoder_never_reads_past_the_end(pattern):
    """The pretokenizer's reads stay inside the buffer whatever its bytes: pretokens end in
    order, inside it, and the last at its end (a cut-short sequence counts as one byte). The
    hook reads from an exactly sized copy, so an over-read also shows under AddressSanitizer.
    On valid UTF-8 the ends are those of regex.findall."""
    ends = _compiled._fastenc._pretoken_ends
    rng = random.Random(17)
    noise = [bytes(rng.randrange(256) for _ in range(rng.randint(1, 12))) for _ in range(5000)]
    cases = _truncated_and_invalid() + noise
    for data in cases:
        got = ends(pattern, data)
        assert got and got[-1] == len(data), data
        assert all(a < b for a, b in zip([0] + got, got)), data
    findall = regex.compile(PRESETS[pattern]).findall
    for _ in range(2000):
        text = "".join(rng.choice(FUZZ_ALPHABET) for _ in range(rng.randint(1, 14)))
        pieces = findall(text)
        expected = [len("".join(pieces[: k + 1]).encode("utf-8")) for k in range(len(pieces))]
        assert ends(pattern, text.encode("utf-8")) == expected, repr(text)
