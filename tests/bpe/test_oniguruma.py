"""hf_regex's Oniguruma translation against tokenizers' own Oniguruma (a Split pre-tokenizer):
each construct whose meaning differs from Python's, the hub patterns on the edge cases and the
corpora, every code point of the classes those patterns use, presets recognised by translation
only, and the constructs refused."""

from __future__ import annotations

import pytest
import regex
from tests.hf_cases import CL100K_PATTERN, CORPUS_NAMES, EDGE_CASES, HUB_PATTERNS, corpus_lines

from bpe_spark.bpe.oniguruma import (
    UnsupportedPattern,
    compile_onig,
    onig_pattern,
    onig_preset_name,
    python_pattern,
)
from bpe_spark.bpe.patterns import PRESETS
from bpe_spark.pipeline.pre_tokenizers import find_matches

tokenizers = pytest.importorskip("tokenizers")
from tokenizers import Regex
from tokenizers.pre_tokenizers import Split


def onig_pieces(pattern: str, text: str) -> list[str]:
    return [s for s, _ in Split(Regex(pattern), "isolated").pre_tokenize_str(text)]


def our_pieces(pattern: str, text: str) -> list[str]:
    return [text[s:e] for s, e, _ in find_matches(compile_onig(pattern), text) if s != e]


CONSTRUCTS = [
    (r"\p{N}{1,3}+", "1870 123456789 12"),
    (r"\p{N}{2}+", "123456789"),
    (r"a{2}?", "a aa aaa"),
    (r"a{1,2}?", "aaa"),
    (r"a{,2}", "aaa"),
    (r"(?>\p{N}{1,3})", "1870"),
    (r"\s++$", "a  \n  b  "),
    (r"\s+$", "a  \n  b  \n"),
    (r"$", "a\nb\n"),
    (r"^a", "a\na"),
    (r"a.b", "a\nb axb"),
    (r"(?m)a.b", "a\nb"),
    (r"\Z", "ab\n"),
    (r"\z", "ab\n"),
    (r"\h+", "ab 12 g"),
    (r"\w+", "x\u00b2 \u00bd ZW\u200dJ a_b \u2460"),
    (r"[^\w\s]+", "x\u00b2 \u00bd ZW\u200dJ"),
    (r"[\w]+|[^\s]", "x\u00b2\u00bd a\u200db"),
    (r"\W+", "x\u00b2 \u00bd ZW\u200dJ"),
    (r"\bab\b|\Bc", "ab abc cab x\u00b2ab"),
    (r"(?i:'s|'t)", "'S 's '\u017f 'T"),
    (r"(?i)ss|st|fi", "\u00df SS \u1e9e \ufb06 ST \ufb01 FI ss"),
    (r"a(?i)b|c", "aB C c AB"),
    (r"(?i:[sdmt]|ll)", "S LL \u017f"),
    (r"x*", "abxd"),
    (r"|a", "aa"),
    (r"[[:alpha:]]+", "ab1"),
    (r"\x41|\u0042|\x{43}", "ABC"),
    (r"\p{^L}+|\pL", "a1b"),
    (r"[\]a]+", "]a]"),
    (r"[^(\s|[.,!?])]+|[a[b-d]]", "x(y) z.w,!abcde"),
    (r"(?<n>a)b|(?:c)(?=d)|(?<=e)f|(?<!g)h", "ab cd ef gh h"),
]


@pytest.mark.parametrize(("pattern", "text"), CONSTRUCTS)
def test_construct_means_what_oniguruma_means(pattern, text):
    assert our_pieces(pattern, text) == onig_pieces(pattern, text)


@pytest.mark.parametrize("name", HUB_PATTERNS)
def test_hub_pattern_matches_oniguruma(name):
    pattern = HUB_PATTERNS[name]
    texts = [*EDGE_CASES.values(), *(line for n in CORPUS_NAMES for line in corpus_lines(n, 300))]
    for text in texts:
        assert our_pieces(pattern, text) == onig_pieces(pattern, text), text


def test_raw_cl100k_is_not_the_cl100k_preset():
    """tiktoken's raw cl100k pattern in a Split keeps "1870" whole in Oniguruma (its ``{1,3}+``
    repeats): no preset, and the translation splits as tokenizers does."""
    assert onig_pieces(CL100K_PATTERN, "in 1870") == ["in", " ", "1870"]
    assert our_pieces(CL100K_PATTERN, "in 1870") == ["in", " ", "1870"]
    assert regex.findall(PRESETS["cl100k"], "1870") == ["187", "0"]
    assert onig_preset_name(CL100K_PATTERN) is None


@pytest.mark.parametrize("name", ["gpt2", "cl100k", "o200k", "words", "whitespace"])
def test_export_reads_back_as_its_preset_where_the_meaning_is_kept(name):
    expected = None if name == "words" else name  # Oniguruma's \w is not Python's
    assert onig_preset_name(onig_pattern(PRESETS[name])) == expected


def test_hub_patterns_with_python_meaning_are_presets():
    assert onig_preset_name(HUB_PATTERNS["gpt2"]) == "gpt2"
    assert onig_preset_name(HUB_PATTERNS["o200k"]) == "o200k"
    assert onig_preset_name(HUB_PATTERNS["llama3"]) is None


def _gaps(pieces) -> list[tuple[int, int]]:
    return [(s, e) for s, e, is_match in pieces if not is_match and s != e]


def _onig_gaps(pattern: str, text: str) -> list[tuple[int, int]]:
    return [offsets for _, offsets in Split(Regex(pattern), "removed").pre_tokenize_str(text)]


def _onig_gaps_chunked(pattern: str, text: str, size: int = 8192) -> list[tuple[int, int]]:
    gaps = []
    for start in range(0, len(text), size):
        gaps += [(start + s, start + e) for s, e in _onig_gaps(pattern, text[start : start + size])]
    return gaps


def _our_gaps_chunked(pattern: str, text: str, size: int = 8192) -> list[tuple[int, int]]:
    compiled = compile_onig(pattern)
    gaps = []
    for start in range(0, len(text), size):
        gaps += [(start + s, start + e) for s, e in _gaps(find_matches(compiled, text[start : start + size]))]
    return gaps


def test_classes_agree_on_every_code_point_but_unicode_17():
    """Every code point up to U+3FFFF and the tags / variation selectors (planes 4-14 hold nothing
    else; 15-16 are private use), for each class the hub patterns use, compared as runs (the same
    gaps mean the same characters). Left out, as documented: the characters Oniguruma (Unicode
    16.0) has unassigned and the regex module assigns, and U+0295."""
    points = [*range(0xD800), *range(0xE000, 0x40000), *range(0xE0000, 0xE1000), 0xF0000, 0x10FFFD]
    every = "".join(map(chr, points))
    onig_assigned = _onig_gaps_chunked(r"\p{Cn}+", every)
    onig_unassigned = set(every) - {every[i] for s, e in onig_assigned for i in range(s, e)}
    newer = onig_unassigned - set(regex.findall(r"\p{Cn}", every))
    assert 0 < len(newer) < 20_000
    skip = newer | {"\u0295"}
    text = "".join(c for c in every if c not in skip)
    classes = [r"\p{L}", r"\p{N}", r"[\p{P}\p{S}]", r"\p{M}", r"[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]"]
    classes += [r"[\p{Ll}\p{Lm}\p{Lo}\p{M}]", r"\s", r"\w", r"[\w]", r"\d", r"[^\s\p{L}\p{N}]"]
    for pattern in classes:
        runs = f"(?:{pattern})+"
        assert _our_gaps_chunked(runs, text) == _onig_gaps_chunked(runs, text), pattern


@pytest.mark.parametrize(
    ("pattern", "what"),
    [
        (r"\X", "grapheme"),
        (r"\R", "linebreak"),
        (r"\K", "keep"),
        (r"[a&&b]", "intersection"),
        (r"[a[^bc]]", "negated nested"),
        (r"(a)\1", "back-reference"),
        (r"\k<n>", "named back-reference"),
        (r"(?~a)", "group"),
        (r"(?x) a", "group"),
        (r"[\W]", "\\W inside a class"),
        ("(?i)\u0130", "dotted I"),
        (r"(a", "unclosed"),
        (r"a)", "unbalanced"),
    ],
)
def test_unsupported_constructs_are_refused(pattern, what):
    with pytest.raises(UnsupportedPattern, match=regex.escape(what)):
        python_pattern(pattern)
    assert onig_preset_name(pattern) is None


@pytest.mark.parametrize(
    "pattern",
    [PRESETS["words"], PRESETS["cl100k"], r"\w+$|^\W|\S+\Z|[\W\d]+", r"[]a]+|[^]b]"],
)
def test_export_means_in_oniguruma_what_python_means(pattern):
    """onig_pattern: Python's \\w, \\W, ^, $ and \\Z written so that Oniguruma reads them alike."""
    compiled = regex.compile(pattern)
    texts = [*EDGE_CASES.values(), "x\u00b2 \u00bd ZW\u200dJ a_b", "ab\n", "ab\n\n", "a\nb"]
    for text in [*texts, *corpus_lines("multilingual", 200)]:
        ours = [text[s:e] for s, e, _ in find_matches(compiled, text) if s != e]
        assert onig_pieces(onig_pattern(pattern), text) == ours, text
