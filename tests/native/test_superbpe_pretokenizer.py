"""The compiled superbpe, single-digits and digits-rtl3 pretokenizers (bpe_spark/native/_pretokenizer.h:
superbpe_next, and o200k_scan with another digit rule) split exactly as ``regex.findall`` of
their presets: on the shared corpora, on every code point, on hypothesis text, on adversarial
strings (runs of spaces before letters, line breaks and the end; punctuation runs with and without
a leading space; ``[\\r\\n/]*`` tails; digit runs of every length), and on bytes that are not UTF-8
(no read past the end); and a model trained with each counts and encodes the same compiled and in
Python. Every test fails when the extension is not built (compiled_fixtures)."""

from __future__ import annotations

import itertools
import random

import pytest
import regex
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tests.conftest import corpus_lines, corpus_text
from tests.encoding.test_encoder_equivalence import FUZZ_ALPHABET, _truncated_and_invalid
from tests.native.test_o200k_pretokenizer import O200K_PIECES

from bpe_spark import Tokenizer, TrainerConfig, train
from bpe_spark.bpe.patterns import COMPILED_PRESETS, PRESETS, SUPERBPE_SPLIT
from bpe_spark.bpe.pretokenize import Pretokenizer
from bpe_spark.native import compiled as _compiled

pytest_plugins = ("tests.compiled_fixtures",)  # the fastenc fixture
pytestmark = pytest.mark.usefixtures("fastenc")

NEW_PRESETS = ["superbpe", "single-digits", "digits-rtl3"]
FINDALL = {name: regex.compile(PRESETS[name]).findall for name in NEW_PRESETS}

# Pieces that start or end each superbpe alternative: digits of several kinds, punctuation
# (marks too: no \p{L}), spaces and other whitespace, the [\r\n/] tail, letters of other scripts.
SUPERBPE_PIECES = [
    "a", "Z", "\u00e9", "\u4e2d", "\u0301", "1", "9", "\u0661", "\u00b2", "\u2167", " ", "  ", "   ",
    "\t", "\n", "\r", "\r\n", "/", "//", "!", ".", ",", "-", "--", "...", "?!", "'", "'s", "\xa0",
    "\u3000", "\u2028", "\x85", "\U0001f600", "\u200d", "\x00", "\x1c",
]


def _encoder(name: str):
    return _compiled._fastenc.Encoder([], list(range(256)), name)


def _check(name: str, text: str) -> None:
    assert _encoder(name).split(text) == FINDALL[name](text), (name, text[:80])


@pytest.mark.parametrize("name", NEW_PRESETS)
def test_new_presets_are_compiled(name):
    assert name in COMPILED_PRESETS
    tok = train(["ab ab 12345, !! x"], TrainerConfig(vocab_size=257, pattern=name))
    assert tok.compiled_encoding


@pytest.mark.parametrize("corpus", ["en_books", "multilingual", "zh_classics", "tiny_shakespeare"])
@pytest.mark.parametrize("name", NEW_PRESETS)
def test_split_equals_regex_on_the_corpora(name, corpus):
    _check(name, corpus_text(corpus, 300_000))


@pytest.mark.parametrize("name", NEW_PRESETS)
def test_split_equals_regex_on_every_code_point(name):
    """Each code point (surrogates too) next to letters, spaces, digits, punctuation and the
    [\\r\\n/] tail: the class table (ensure_char_classes) is the regex module's."""
    around = "a \n/1!. 7  \r\u0301\t"
    text = "".join(chr(k * 7919 % 0x110000) + around[k % len(around)] for k in range(0x110000))
    _check(name, text)
    # and each code point twice (a run of two others, of two digits, of two spaces)
    _check(name, "".join(chr(k * 7919 % 0x110000) * 2 + around[k % len(around)] for k in range(0, 0x110000, 3)))


@settings(max_examples=600, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from(NEW_PRESETS), st.lists(st.sampled_from(SUPERBPE_PIECES + O200K_PIECES), max_size=20).map("".join))
def test_split_equals_regex_on_generated_text(name, text):
    _check(name, text)


def _adversarial() -> list[str]:
    """Runs of spaces before each kind of character and the end, punctuation runs with and without
    a leading space and with [\\r\\n/] tails, digit runs of every length up to 13."""
    spaces = [" " * k for k in range(7)]
    after = ["", "a", "\n", "\r\n", "\t", "\xa0", "!", "!!", "1", "\u4e2d", "\u0301", "/", " "]
    texts = [f"x{run}{tail}" for run in spaces for tail in after]
    texts += [f"{run}{tail}" for run in spaces for tail in after]
    punct = ["!", "?!", "...", "/", "//", "-/", "\u0301", "\u0301\u0301", "!\u0301"]
    tails = ["", "\n", "\r\n", "/", "\n/\r", "\n\n/x", "a", " ", "  ", "1"]
    texts += [f"{lead}{p}{t}" for lead in ["", " ", "  ", "a", "a "] for p in punct for t in tails]
    digits = ["7" * k for k in range(1, 14)] + ["\u0661" * k for k in range(1, 8)] + ["1\u00b22\u21673" * 3]
    texts += [f"{a}{d}{b}" for d in digits for a in ["", "a", " ", "!"] for b in ["", "a", " ", ".", "\u0661"]]
    texts += [" ".join(digits), "a1 22,333.4444 55555/666666\n7777777!!", "x" * 50 + "  y" + "!!" * 3]
    return texts


@pytest.mark.parametrize("name", NEW_PRESETS)
def test_split_equals_regex_on_adversarial_strings(name):
    for text in _adversarial():
        _check(name, text)
    for text in map("".join, itertools.product(["a", " ", "!", "1", "\n", "/"], repeat=5)):
        _check(name, text)


# Edge cases with the pieces regex gives (superbpe_next's and rtl3_end's comments).
EDGE_CASES = [
    ("superbpe", "Hello, world. Bye", ["Hello, world. Bye"]),  # no match: one gap, lone punctuation in it
    ("superbpe", "a1234b", ["a", "123", "4", "b"]),
    ("superbpe", "a  b", ["a", " ", " b"]),  # two spaces before \S: the first matches, the last is gap
    ("superbpe", "a \nb", ["a", " ", "\nb"]),  # one space before whitespace matches; \n is gap text
    ("superbpe", "a   ", ["a", "   "]),  # spaces at the end
    ("superbpe", "a ", ["a", " "]),
    ("superbpe", "a !b", ["a !b"]),  # one punctuation character is no match
    ("superbpe", "a !!b", ["a", " !!", "b"]),
    ("superbpe", "a!!\n/\r\nb", ["a", "!!\n/\r\n", "b"]),  # the [\r\n/]* tail
    ("superbpe", "x...\n\ny", ["x", "...\n\n", "y"]),
    ("superbpe", "  !!", [" ", " !!"]),
    ("superbpe", "\u0301\u0301a", ["\u0301\u0301", "a"]),  # marks are no \p{L}
    ("single-digits", "a 1234!", ["a", " ", "1", "2", "3", "4", "!"]),
    ("digits-rtl3", "1234567", ["1", "234", "567"]),
    ("digits-rtl3", "x12345 678", ["x", "12", "345", " ", "678"]),
    ("digits-rtl3", "\u0661\u0662\u0663\u0664", ["\u0661", "\u0662\u0663\u0664"]),
]


@pytest.mark.parametrize(("name", "text", "expected"), EDGE_CASES)
def test_edge_cases(name, text, expected):
    assert FINDALL[name](text) == expected
    assert _encoder(name).split(text) == expected


@pytest.mark.parametrize("name", NEW_PRESETS)
def test_the_decoder_never_reads_past_the_end(name):
    """As for o200k: pretokens end in order, inside the buffer, the last at its end, whatever the
    bytes; on valid UTF-8 where regex's end."""
    ends = _compiled._fastenc._pretoken_ends
    rng = random.Random(41)
    noise = [bytes(rng.randrange(256) for _ in range(rng.randint(1, 12))) for _ in range(5000)]
    noise += [rng.choice(SUPERBPE_PIECES).encode()[: rng.randint(1, 3)] + bytes([rng.randrange(128, 256)])
              for _ in range(2000)]
    for data in _truncated_and_invalid() + noise:
        got = ends(name, data)
        assert got and got[-1] == len(data), data
        assert all(a < b for a, b in zip([0] + got, got)), data
    for _ in range(2000):
        text = "".join(rng.choice(SUPERBPE_PIECES) for _ in range(rng.randint(1, 12)))
        pieces = FINDALL[name](text)
        expected = [len("".join(pieces[: k + 1]).encode("utf-8")) for k in range(len(pieces))]
        assert ends(name, text.encode("utf-8")) == expected, repr(text)


def test_superbpe_is_the_isolated_split():
    """The preset is SUPERBPE_SPLIT's matches and the text between them (tokenizers' Split
    "Isolated"), checked here without the preset's own regex."""
    text = corpus_text("en_books", 200_000)
    pieces, at = [], 0
    for match in regex.finditer(SUPERBPE_SPLIT, text):
        if match.start() > at:
            pieces.append(text[at : match.start()])
        pieces.append(match.group())
        at = match.end()
    pieces += [text[at:]] if at < len(text) else []
    assert _encoder("superbpe").split(text) == pieces


# --- models trained with the new patterns --------------------------------------------------


def _fuzz(seed: int, count: int) -> list[str]:
    rng = random.Random(seed)
    alphabet = SUPERBPE_PIECES + FUZZ_ALPHABET
    return ["".join(rng.choice(alphabet) for _ in range(rng.randint(0, 24))) for _ in range(count)]


@pytest.mark.parametrize("name", NEW_PRESETS)
def test_counting_equals_python(name, monkeypatch):
    texts = corpus_lines("multilingual", 200_000) + corpus_lines("en_books", 100_000) + _fuzz(43, 2000)
    counts = Pretokenizer(name).count(iter(texts + ["", None]))
    monkeypatch.setenv("BPE_SPARK_ENCODER", "python")
    expected = Pretokenizer(name).count(texts)
    assert counts == expected
    assert sum(expected.values()) > 5_000


@pytest.mark.parametrize("name", NEW_PRESETS)
def test_trained_model_ids_equal_the_python_encoder(name, monkeypatch):
    model = train(corpus_lines("en_books", 300_000) + _fuzz(47, 500), TrainerConfig(vocab_size=1200, pattern=name))
    tok = Tokenizer.from_dict(model.to_dict())
    with monkeypatch.context() as patch:
        patch.setenv("BPE_SPARK_ENCODER", "python")
        python = Tokenizer.from_dict(model.to_dict())
        python.encode_ordinary("warm up")  # decides the encoder now, under the patched environment
    assert tok.compiled_encoding and not python.compiled_encoding
    lines = corpus_lines("multilingual", 100_000) + corpus_lines("en_books", 100_000)[-300:] + _fuzz(53, 1000)
    expected = [python.encode_ordinary(line) for line in lines]
    assert [tok.encode_ordinary(line) for line in lines] == expected
    ids, lengths = tok.encode_ordinary_flat(lines)
    assert lengths.tolist() == [len(row) for row in expected]
    assert ids.tolist() == [i for row in expected for i in row]
