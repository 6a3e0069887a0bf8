"""Pretokenization (docs/design.md 1.2): presets against the reference patterns, special-token splitting
(longest first, found before normalization), normalization."""

from __future__ import annotations

import pytest
import regex
import tiktoken
from tests.conftest import corpus_text

from bpe_spark import PRESETS, ConfigError, Pretokenizer
from bpe_spark.bpe.patterns import compile_pattern
from bpe_spark.bpe.pretokenize import SpecialTokenMatcher, normalize

GPT2_ENCODER_PY = r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"""
SAMPLES = [
    "Hello world's end",
    "I'm  here -- they'll've 12345 apples!!\n\n  indented\ttab\r\nend   ",
    "DON'T shout   \n",
    "价格是1234元。東京 Ünïcödé naïve café",
    "emoji 👍🏽 x\u00a0y\u2003z",
    "    ",
    "",
]


def test_gpt2_is_gpt2s_encoder_pattern():
    assert PRESETS["gpt2"] == GPT2_ENCODER_PY
    assert Pretokenizer("gpt2").pretokens("Hello world's end") == ["Hello", " world", "'s", " end"]
    assert Pretokenizer("gpt2").pretokens("a   b\n") == ["a", "  ", " b", "\n"]
    assert Pretokenizer("gpt2").pretokens("x 123 4") == ["x", " 123", " 4"]


def test_cl100k_and_o200k_are_tiktokens_patterns(monkeypatch):
    assert PRESETS["cl100k"] == tiktoken.get_encoding("cl100k_base")._pat_str
    from tiktoken_ext import openai_public

    # read o200k's pattern without downloading its ranks
    monkeypatch.setattr(openai_public, "load_tiktoken_bpe", lambda *args, **kwargs: {})
    assert PRESETS["o200k"] == openai_public.o200k_base()["pat_str"]


def test_cl100k_splits_digits_in_threes_and_case_insensitive_contractions():
    assert Pretokenizer("cl100k").pretokens("1234567 DON'T") == ["123", "456", "7", " DON", "'T"]
    assert Pretokenizer("gpt2").pretokens("1234567 DON'T") == ["1234567", " DON", "'", "T"]


@pytest.mark.parametrize("name", ["gpt2", "cl100k"])
def test_presets_agree_with_tiktoken_patterns_on_real_text(name):
    # tiktoken's GPT-2 pattern is written differently (possessive, \s++$) but splits alike
    encoding = {"gpt2": "gpt2", "cl100k": "cl100k_base"}[name]
    reference = regex.compile(tiktoken.get_encoding(encoding)._pat_str)
    text = corpus_text("multilingual", 200_000) + "".join(SAMPLES)
    ours = Pretokenizer(name).pretokens(text)
    assert ours == reference.findall(text)
    assert "".join(ours) == text  # these presets cover every character


def test_words_and_whitespace_presets():
    assert Pretokenizer("words", lowercase=True).pretokens("Hello, World!") == [
        "hello",
        ",",
        "world",
        "!",
    ]
    assert Pretokenizer("words").pretokens("daisy-chain (as well)") == [
        "daisy",
        "-",
        "chain",
        "(",
        "as",
        "well",
        ")",
    ]
    assert Pretokenizer("whitespace").pretokens(" a\tb  c,d\n") == ["a", "b", "c,d"]


@pytest.mark.parametrize("text", SAMPLES)
@pytest.mark.parametrize("name", sorted(PRESETS))
def test_presets_are_the_python_regex_findall(name, text):
    assert Pretokenizer(name).pretokens(text) == regex.findall(PRESETS[name], text)


def test_custom_regex():
    assert Pretokenizer(r"\d+|[a-z]+").pretokens("abc123 de4") == ["abc", "123", "de", "4"]


def test_special_tokens_longest_first():
    matcher = SpecialTokenMatcher(["<|a|>", "<|a|><|b|>", "<|b|>"])
    assert matcher.split("x<|a|><|b|>y<|a|>z<|b|>") == [
        ("x", False),
        ("<|a|><|b|>", True),
        ("y", False),
        ("<|a|>", True),
        ("z", False),
        ("<|b|>", True),
    ]
    assert SpecialTokenMatcher(["<s>", "<s>x"]).split("<s>x<s>") == [("<s>x", True), ("<s>", True)]


def test_special_tokens_are_literal_and_boundaries():
    pre = Pretokenizer("gpt2", special_tokens=["[SEP]", "a.b"])
    assert pre.pretokens("one[SEP]two axb a.b") == ["one", "two", " axb", " "]
    assert SpecialTokenMatcher([]).split("abc") == [("abc", False)]
    assert not SpecialTokenMatcher([])


def test_special_tokens_are_found_before_normalization():
    pre = Pretokenizer("words", lowercase=True, special_tokens=["<|EOT|>"])
    assert pre.pretokens("A<|EOT|>B") == ["a", "b"]
    # lowercased text that only looks like the token after lowercasing is ordinary text
    assert pre.pretokens("a<|eot|>b") == ["a", "<|", "eot", "|>", "b"]


def test_normalization():
    assert normalize("e\u0301", "NFC", False) == "\u00e9"
    assert normalize("ｆｕｌｌ ﬁ", "NFKC", False) == "full fi"
    assert normalize("ÉCOLE", None, True) == "école"
    assert normalize("Ｅ", "NFKC", True) == "e"  # normalization first, then lowercase
    pre = Pretokenizer("whitespace", normalization="NFKC", lowercase=True)
    assert pre.pretokens("ＡＢＣ  ﬁx") == ["abc", "fix"]
    assert Pretokenizer("whitespace").pretokens("ＡＢＣ") == ["ＡＢＣ"]


def test_count():
    counts = Pretokenizer("whitespace", special_tokens=["<|e|>"]).count(["a b a", "", "b<|e|>a"])
    assert counts == {"a": 3, "b": 2}


@pytest.mark.parametrize(
    ("pattern", "message"),
    [
        ("gpt3", "unknown pattern preset 'gpt3'"),
        ("(unclosed", "invalid pretokenization regex"),
        ("a*", "matches the empty string"),
        ("", "preset name"),
        (None, "preset name"),
    ],
)
def test_bad_patterns(pattern, message):
    with pytest.raises(ConfigError, match=regex.escape(message)):
        compile_pattern(pattern)


@pytest.mark.parametrize("options", [{}, {"lowercase": True}, {"special_tokens": ("<|endoftext|>",)}])
@pytest.mark.parametrize("pattern", ["gpt2", "cl100k", "o200k", "words"])
def test_a_tally_counts_an_arrow_column_as_its_texts(pattern, options):
    """An Arrow string column of valid UTF-8 is counted from its buffers where the counter is
    compiled (no str per text), as its texts otherwise: the same counts either way."""
    import pyarrow as pa

    texts = corpus_text("multilingual", 60_000).splitlines(keepends=True) + ["", "a<|endoftext|>B\n"]
    pretokenizer = Pretokenizer(pattern, **options)
    by_str, by_arrow = pretokenizer.tally(), pretokenizer.tally()
    by_str.add(texts)
    by_arrow.add(pa.array(texts, pa.string()).slice(3))
    by_str_rest = pretokenizer.tally()
    by_str_rest.add(texts[3:])
    assert sorted(zip(*by_arrow.items())) == sorted(zip(*by_str_rest.items()))
    assert len(by_str) >= len(by_arrow)
