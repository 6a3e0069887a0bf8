"""Shared inputs of the tokenizer.json parity tests (issue 14): the edge-case strings every parity
test encodes, the Oniguruma patterns published hub files carry (as their tokenizer.json holds
them, JSON-decoded), and :func:`corpus_lines`, the first lines of a corpus.

Not a test module (no ``test_`` prefix): tests import it as they import conftest's helpers
(``from hf_cases import EDGE_CASES, corpus_lines``).
"""

from __future__ import annotations

import gzip
from functools import cache

from tests.conftest import corpus_path

CORPUS_NAMES = ("en_books", "multilingual", "tiny_shakespeare", "zh_classics")

# Strings whose pieces differ between careless reproductions: each names what it exercises.
EDGE_CASES: dict[str, str] = {
    "empty": "",
    "space": " ",
    "spaces": "   ",
    "leading_spaces": "   hello",
    "trailing_spaces": "hello   ",
    "inner_spaces": "hello    world  again",
    "tab": "a\tb\t\tc",
    "tabs_spaces": " \t \t x",
    "crlf": "line one\r\nline two\r\n",
    "cr": "a\rb",
    "lf_lf": "para one\n\npara two\n\n\n",
    "lone_newline": "\n",
    "newline_space": "a \n b\n \n",
    "digits_1870": "1870",
    "digits_long": "123456789",
    "digits_mixed": "in 1870, 12 or 1234567 and 3.14159 (42%) x1y22z333",
    "fullwidth_digits": "１２３４ and ٣٤٥ and ५६",
    "contractions": "I'm we'll they've she's it'd you're DON'T I'M",
    "apostrophes": "rock 'n' roll '' 's 'S ’s",
    "punctuation": "Hello, world! (yes) -- \"quoted\" ... a/b\\c #tag @user $5 ¿qué?",
    "emoji_zwj_family": "\U0001f468\u200d\U0001f469\u200d\U0001f467\u200d\U0001f466 family",
    "emoji_flags": "\U0001f1fa\U0001f1f8\U0001f1ef\U0001f1f5 flags \U0001f3f4\U000e0067\U000e0062\U000e0065\U000e006e\U000e0067\U000e007f",
    "emoji_skin_tones": "\U0001f44d\U0001f3fd \U0001f44b\U0001f3ff ok\U0001f44c\U0001f3fb",
    "emoji_keycap": "1\ufe0f\u20e3 #\ufe0f\u20e3 \u2764\ufe0f",
    "combining_acute": "cafe\u0301 e\u0301te\u0301 \u00e9t\u00e9",
    "hangul_jamo": "\u1100\u1161\u11a8 \ud55c\uad6d\uc5b4 \u1112\u1161\u11ab",
    "compat_chars": "\ufb01le \u2460 \u00bd \u2126 \u212b x\u00b2 \uff21\uff22",
    "cjk": "我们的生活很好。天下大势，分久必合",
    "cjk_mixed": "中文English混合123テスト",
    "japanese": "吾輩は猫である。名前はまだ無い。カタカナ ひらがな",
    "arabic_rtl": "مرحبا بالعالم 123",
    "devanagari": "नमस्ते दुनिया",
    "thai": "สวัสดีชาวโลก",
    "mixed_case": "HeLLo WORLD ÀÉÎ İstanbul ǅ ß ΣΑΣ",
    "nbsp_zwsp": "a\u00a0b\u2009c\u200bd\u3000e",
    "special_tokens": "<|endoftext|>hi<s> x</s><|begin_of_text|><|eot_id|> <unk>",
    "metaspace_char": "\u2581already \u2581 marked\u2581",
    "byte_level_chars": "Ġhello Ċ Ā",
    "control_chars": "a\x00b\x1bc\x7fd",
    "private_use": "\ue000\uf8ff",
    "long_word": "a" * 300,
    "long_spaces": " " * 50 + "x",
}

# Oniguruma patterns of published tokenizer.json files (their Split pre-tokenizer's {"Regex": ...})
# and of tiktoken's encodings as a Split would carry them.
GPT2_PATTERN = r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"""
CL100K_PATTERN = (  # tiktoken's raw cl100k_base pat_str (possessive in Python's regex)
    r"""'(?i:[sdmt]|ll|ve|re)|[^\r\n\p{L}\p{N}]?+\p{L}++|\p{N}{1,3}+| ?[^\s\p{L}\p{N}]++[\r\n]*+"""
    r"""|\s++$|\s*[\r\n]|\s+(?!\S)|\s"""
)
O200K_PATTERN = "|".join(  # noqa: FLY002 (tiktoken_ext/openai_public.py, o200k_base)
    [
        r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?""",
        r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?""",
        r"""\p{N}{1,3}""",
        r""" ?[^\s\p{L}\p{N}]+[\r\n/]*""",
        r"""\s*[\r\n]+""",
        r"""\s+(?!\S)""",
        r"""\s+""",
    ]
)
LLAMA3_PATTERN = (
    r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"""
    r"""|\s*[\r\n]+|\s+(?!\S)|\s+"""
)
QWEN2_PATTERN = (
    r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"""
    r"""|\s*[\r\n]+|\s+(?!\S)|\s+"""
)
# DeepSeek V3: three Splits, each Isolated, then ByteLevel(add_prefix_space=false, use_regex=false).
# In its tokenizer.json the \u3040 and the \r\n of the third pattern are JSON escapes, so the
# pattern holds the characters themselves (a CR and an LF inside the classes).
DEEPSEEK_V3_PATTERNS = (
    r"""\p{N}{1,3}""",
    "[一-龥\u3040-ゟ゠-ヿ]+",
    (
        r"""[!"#$%&'()*+,\-./:;<=>?@\[\\\]^_`{|}~][A-Za-z]+|[^"""
        "\r\n"
        r"""\p{L}\p{P}\p{S}]?[\p{L}\p{M}]+| ?[\p{P}\p{S}]+["""
        "\r\n"
        r"""]*|\s*["""
        "\r\n"
        r"""]+|\s+(?!\S)|\s+"""
    ),
)
BLOOM_PATTERN = " ?[^(\\s|[.,!?…。，、।۔،])]+"  # BLOOM's Split (a nested class: a union in Oniguruma)
HUB_PATTERNS: dict[str, str] = {
    "bloom": BLOOM_PATTERN,
    "gpt2": GPT2_PATTERN,
    "cl100k": CL100K_PATTERN,
    "o200k": O200K_PATTERN,
    "llama3": LLAMA3_PATTERN,
    "qwen2": QWEN2_PATTERN,
    **{f"deepseek_v3_{i}": p for i, p in enumerate(DEEPSEEK_V3_PATTERNS)},
}


def split_spec(pattern: str, behavior: str = "Isolated", invert: bool = False) -> dict:
    """A Split pre-tokenizer of a tokenizer.json with a Regex pattern."""
    return {"type": "Split", "pattern": {"Regex": pattern}, "behavior": behavior, "invert": invert}


BYTE_LEVEL_NO_REGEX = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": False}

# The pre_tokenizer objects of published files, as their tokenizer.json holds them.
HUB_PRE_TOKENIZERS: dict[str, dict] = {
    "gpt2": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True},
    "llama3": {"type": "Sequence", "pretokenizers": [split_spec(LLAMA3_PATTERN), BYTE_LEVEL_NO_REGEX]},
    "qwen2": {"type": "Sequence", "pretokenizers": [split_spec(QWEN2_PATTERN), BYTE_LEVEL_NO_REGEX]},
    "deepseek_v3": {
        "type": "Sequence",
        "pretokenizers": [*(split_spec(p) for p in DEEPSEEK_V3_PATTERNS), BYTE_LEVEL_NO_REGEX],
    },
    "cl100k_raw": {"type": "Sequence", "pretokenizers": [split_spec(CL100K_PATTERN), BYTE_LEVEL_NO_REGEX]},
    "o200k": {"type": "Sequence", "pretokenizers": [split_spec(O200K_PATTERN), BYTE_LEVEL_NO_REGEX]},
    "bloom": {"type": "Sequence", "pretokenizers": [split_spec(BLOOM_PATTERN), BYTE_LEVEL_NO_REGEX]},
    "falcon": {
        "type": "Sequence",
        "pretokenizers": [
            {"type": "Punctuation", "behavior": "Contiguous"},
            {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True},
            {"type": "Digits", "individual_digits": False},
            split_spec("[0-9][0-9][0-9]"),
        ],
    },
    "mistral_metaspace": {"type": "Metaspace", "replacement": "\u2581", "prepend_scheme": "first", "split": False},
}


@cache
def corpus_lines(name: str, n: int = 1000) -> tuple[str, ...]:
    """The first ``n`` non-empty lines of a corpus, each with its ``\\n`` (as tokenizers sees a
    line of a text file it is given; the corpora have no ``\\r``). Without the corpus the test
    skips (tests/conftest.py's ``corpus_path``): call it in a test or a fixture, never at collection."""
    lines: list[str] = []
    with gzip.open(corpus_path(name), "rt", encoding="utf-8", newline="") as fh:
        for line in fh:
            if line.strip("\n"):
                lines.append(line)
                if len(lines) == n:
                    break
    return tuple(lines)
