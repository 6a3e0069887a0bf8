"""The compiled o200k pretokenizer (bpe_spark/native/_pretokenizer.h, o200k_scan) splits exactly as
``regex.findall(PRESETS["o200k"], text)``: on the shared corpora, on every code point, on
hypothesis text from an alphabet that stresses its overlapping letter classes and its
backtracking, on hand-picked edge cases, and on bytes that are not UTF-8 (no read past the end);
and a model trained with the o200k pattern counts and encodes the same compiled and in Python,
with tiktoken's ids. Every test fails when the extension is not built (compiled_fixtures)."""

from __future__ import annotations

import random

import pytest
import regex
from tests.conftest import corpus_lines, corpus_text
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tests.encoding.test_encoder_equivalence import FUZZ_ALPHABET, _truncated_and_invalid

from bpe_spark import Tokenizer, TrainerConfig, train
from bpe_spark.native import compiled as _compiled
from bpe_spark.bpe.patterns import COMPILED_PRESETS, PRESETS
from bpe_spark.bpe.pretokenize import Pretokenizer

pytest_plugins = ("tests.compiled_fixtures",)  # the fastenc fixture
pytestmark = pytest.mark.usefixtures("fastenc")

FINDALL = regex.compile(PRESETS["o200k"]).findall

# Pieces that exercise each branch of o200k: upper (Lu), lower (Ll), titlecase (Lt), modifier
# (Lm) and other (Lo) letters, combining marks (M: in both letter classes, no \p{L}, so also a
# prefix and punctuation), digits of several kinds, the contractions in both cases (and U+017F,
# which (?i) folds to s), line breaks, '/', spaces regex's \s knows, punctuation, emoji.
O200K_PIECES = [
    "A", "Z", "\u00c9", "\u0391", "a", "z", "\u00e9", "\u03b1", "\u01c5", "\u1f88", "\u02b0", "\u3005",
    "\u4e2d", "\u05d0", "\u0301", "\u0903", "\u20dd", "1", "9", "\u0661", "\u00b2", "\u2167",
    "'", "'s", "'S", "'t", "'T", "'re", "'RE", "'rE", "'ve", "'VE", "'m", "'M", "'ll", "'LL", "'Ll",
    "'d", "'D", "'\u017f", "s", "t", "e", "l", "\r", "\n", "\r\n", "/", " ", "  ", "\t", "\x0b",
    "\x85", "\xa0", "\u2028", "\u3000", "!", ".", "-", "\U0001f600", "\u200d",
]


def _encoder():
    return _compiled._fastenc.Encoder([], list(range(256)), "o200k")


def test_o200k_is_compiled():
    assert "o200k" in COMPILED_PRESETS
    tok = train(["ab ab"], TrainerConfig(vocab_size=257, pattern="o200k"))
    assert tok.compiled_encoding


@pytest.mark.parametrize("name", ["en_books", "multilingual", "zh_classics", "tiny_shakespeare"])
def test_split_equals_regex_on_the_corpora(name):
    text = corpus_text(name, 300_000)
    assert _encoder().split(text) == FINDALL(text)


def test_split_equals_regex_on_every_code_point():
    """Each code point (surrogates too) next to letters of each class, spaces, digits and
    apostrophes: the class table (ensure_char_classes) is the regex module's."""
    around = "Aa\u01c5\u02b0\u0301'sS \n/1!"
    # 7919 is prime to 0x110000 (2**16 * 17): k * 7919 visits every code point, in a mixed order
    text = "".join(chr(k * 7919 % 0x110000) + around[k % len(around)] for k in range(0x110000))
    assert _encoder().split(text) == FINDALL(text)


@settings(max_examples=800, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.sampled_from(O200K_PIECES), max_size=16).map("".join))
def test_split_equals_regex_on_generated_text(text):
    assert _encoder().split(text) == FINDALL(text)


# Edge cases of the backtracking, with the split regex gives (see o200k_scan's comment).
EDGE_CASES = [
    ("HELLO world", ["HELLO", " world"]),  # A1 fails (no Ll, no Lm/Lo/M), A2 takes the capitals
    ("HELLOworld", ["HELLOworld"]),
    ("\u4e2dAB c", ["\u4e2d", "AB", " c"]),  # A1 ends at the last Lo of the run: before "AB"
    ("\u02b0AB", ["\u02b0", "AB"]),  # the same with Lm
    ("\u0301A ", ["\u0301", "A", " "]),  # a mark: as prefix A1 fails on "A", without it A1 takes it alone
    ("\u0301Ab", ["\u0301Ab"]),  # a mark as prefix of "Ab"
    ("x\u0301AB!", ["x\u0301", "AB", "!"]),
    ("e\u0301\u0301X", ["e\u0301\u0301", "X"]),
    ("!\u0301A", ["!\u0301", "A"]),  # '!' prefix, then the mark alone (A1's last "both")
    (" \u0301", [" \u0301"]),  # a space prefix to a lone mark
    ("a\u01c5b", ["a", "\u01c5b"]),  # titlecase is upper only
    ("\u01c5ungla", ["\u01c5ungla"]),
    ("I'M here", ["I'M", " here"]),  # A2 with a contraction
    ("DON'T", ["DON'T"]),
    ("don'ts", ["don't", "s"]),
    ("it'\u017f", ["it'\u017f"]),  # (?i) folds U+017F to s
    ("we'Re", ["we'Re"]),
    ("AB'S's", ["AB'S", "'s"]),
    ("'sa", ["'sa"]),  # no contraction alternative of its own: "'" is the prefix of "sa"
    (" 's", [" '", "s"]),
    ("\tWord", ["\tWord"]),  # any space but \r \n may be the prefix
    ("\u3000abc", ["\u3000abc"]),
    ("\rword", ["\r", "word"]),
    ("\xa0\xa0x", ["\xa0", "\xa0x"]),
    ("a\n\n  b", ["a", "\n\n", " ", " b"]),  # A5 to the last line break, A6 leaves one space
    ("\n   ", ["\n", "   "]),  # A5 comes before A6 at the end of the text too
    ("x  \n ", ["x", "  \n", " "]),
    ("!!\n/\n/x", ["!!\n/\n/", "x"]),  # [\r\n/]* after the punctuation
    (" ?/\r\n", [" ?/\r\n"]),
    ("12345", ["123", "45"]),
    ("\u0661\u0662\u0663\u0664", ["\u0661\u0662\u0663", "\u0664"]),
    ("a  b", ["a", " ", " b"]),
]


@pytest.mark.parametrize(("text", "expected"), EDGE_CASES)
def test_edge_cases(text, expected):
    assert FINDALL(text) == expected
    assert _encoder().split(text) == expected


def test_the_decoder_never_reads_past_the_end():
    """As for gpt2 / cl100k (tests/encoding/test_encoder_equivalence.py): pretokens end in order, inside
    the buffer, the last at its end, whatever the bytes; on valid UTF-8 where regex's end."""
    ends = _compiled._fastenc._pretoken_ends
    rng = random.Random(19)
    noise = [bytes(rng.randrange(256) for _ in range(rng.randint(1, 12))) for _ in range(5000)]
    noise += [rng.choice(O200K_PIECES).encode()[: rng.randint(1, 3)] + bytes([rng.randrange(128, 256)])
              for _ in range(2000)]
    for data in _truncated_and_invalid() + noise:
        got = ends("o200k", data)
        assert got and got[-1] == len(data), data
        assert all(a < b for a, b in zip([0] + got, got)), data
    for _ in range(2000):
        text = "".join(rng.choice(O200K_PIECES) for _ in range(rng.randint(1, 12)))
        pieces = FINDALL(text)
        expected = [len("".join(pieces[: k + 1]).encode("utf-8")) for k in range(len(pieces))]
        assert ends("o200k", text.encode("utf-8")) == expected, repr(text)


# --- a model trained with the o200k pattern ------------------------------------------------


def _fuzz(seed: int, count: int) -> list[str]:
    rng = random.Random(seed)
    alphabet = O200K_PIECES + FUZZ_ALPHABET
    return ["".join(rng.choice(alphabet) for _ in range(rng.randint(0, 24))) for _ in range(count)]


@pytest.fixture(scope="module")
def o200k_model():
    lines = corpus_lines("multilingual", 600_000) + _fuzz(23, 1000)
    return train(lines, TrainerConfig(vocab_size=2000, pattern="o200k"))


def test_counting_equals_python(monkeypatch):
    texts = corpus_lines("multilingual", 300_000) + corpus_lines("zh_classics", 100_000) + _fuzz(29, 2000)
    counts = Pretokenizer("o200k").count(iter(texts + ["", None]))
    monkeypatch.setenv("BPE_SPARK_ENCODER", "python")
    expected = Pretokenizer("o200k").count(texts)
    assert counts == expected
    assert sum(expected.values()) > 50_000


def test_trained_model_ids_equal_the_python_encoder(o200k_model, monkeypatch):
    tok = Tokenizer.from_dict(o200k_model.to_dict())
    with monkeypatch.context() as patch:
        patch.setenv("BPE_SPARK_ENCODER", "python")
        python = Tokenizer.from_dict(o200k_model.to_dict())
        python.encode_ordinary("warm up")  # decides the encoder now, under the patched environment
    assert tok.compiled_encoding and not python.compiled_encoding
    for name in ("en_books", "zh_classics", "multilingual"):
        lines = corpus_lines(name, 150_000) + _fuzz(31, 1500)
        expected = [python.encode_ordinary(line) for line in lines]
        assert [tok.encode_ordinary(line) for line in lines] == expected, name
        ids, lengths = tok.encode_ordinary_flat(lines)
        assert lengths.tolist() == [len(row) for row in expected]
        assert ids.tolist() == [i for row in expected for i in row]


def test_same_ids_as_tiktoken(o200k_model):
    tiktoken = pytest.importorskip("tiktoken")
    ranks = {value: token_id for token_id, value in o200k_model.vocab.items()}
    enc = tiktoken.Encoding("o200k-ours", pat_str=PRESETS["o200k"], mergeable_ranks=ranks, special_tokens={})
    lines = corpus_lines("multilingual", 200_000) + _fuzz(37, 1500)
    assert [o200k_model.encode_ordinary(line) for line in lines] == [enc.encode_ordinary(line) for line in lines]
