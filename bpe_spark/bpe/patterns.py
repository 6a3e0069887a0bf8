"""The pretokenization patterns: the presets in one table (:data:`PRESET_TABLE`: each regex, and
which of them the compiled pretokenizer, tokenizer.json's Split and Spark's Java regex take as
they are), compiling a preset name or a custom regex, and matching it (:func:`pretoken_finder`).
A leaf: it imports nothing of ours but the errors, so every layer (config, pretokenizer,
compiled accelerators, formats, the Spark side's Java regex) can name a pattern without
importing another.

Custom patterns are untrusted (a model file may carry any regex, and ``(?:a|a)+$`` backtracks
for seconds on 20 characters): they are matched under a time limit of ``MATCH_SECONDS +
MATCH_SECONDS_PER_CHAR * len(text)`` (1 s plus 10 microseconds a character: any pattern that
matches at 100,000 characters a second or faster never meets it), and a text that exceeds it
raises :class:`PatternTimeoutError` naming the text. Custom patterns also count the
characters other than whitespace (the regex's ``\\s``) that they leave unmatched, which
pretokenization drops, and warn once. Whitespace between pretokens may go, as in the ``words``
and ``whitespace`` presets and subword-nmt, where a word boundary stands for it. The presets
are matched without either: their worst case is linear (but for digits-rtl3 under ``regex``,
whose lookahead reads the rest of a digit run at each group: quadratic in a run's length, 12 s
for 40,000 digits; the compiled pretokenizer reads a run once), the covering presets match every
character, and ``words`` / ``whitespace`` drop whitespace only (tests/bpe/test_pattern_safety.py).

>>> compile_pattern("words").findall("a, b")
['a', ',', 'b']
>>> compiled_preset(PRESETS["gpt2"]), compiled_preset("words")
('gpt2', None)
>>> finder = pretoken_finder("[a-z]+")
>>> finder("ab c"), finder.dropped_characters
(['ab', 'c'], 0)
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from dataclasses import dataclass

import regex

from bpe_spark.errors import ConfigError, PatternTimeoutError

@dataclass(frozen=True)
class Preset:
    """One pretokenization preset: its ``regex`` (Python ``regex`` syntax) and what each part of
    bpe-spark knows of it. ``compiled``: the compiled pretokenizer (:mod:`bpe_spark.native`)
    implements it by hand over UTF-8. ``covering``: it matches every character of any text, so a
    ``tokenizer.json`` Split "Isolated" gives exactly its pretokens. ``java``: its Java form (the
    same regex under ``(?Ud)``) was checked to give the Python pretokens on the shared corpora, so
    Spark SQL may count with it (:mod:`bpe_spark.spark.training.java_regex`). ``split``: the regex
    a ``tokenizer.json`` Split "Isolated" writes, when shorter than ``regex`` (a preset defined as
    the pieces around a split's matches)."""

    name: str
    regex: str
    used_by: str
    compiled: bool = False
    covering: bool = False
    java: bool = False
    split: str | None = None


_O200K = "|".join(  # noqa: FLY002 (one alternative per line reads better)
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
# SuperBPE's stage-2 split (the reference scripts' regex_string): digit groups, runs of two or more
# punctuation characters, and runs of spaces before whitespace; all else lies between the matches
SUPERBPE_SPLIT = r"""\p{N}{1,3}| ?[^\s\p{L}\p{N}]{2,}[\r\n/]*| +(?!\S)"""


def _isolated(split: str) -> str:
    """The findall form of tokenizers' Split "Isolated" by ``split``: its matches, and each run
    of text between them (where no match starts) as one more piece."""
    return rf"(?:{split})|(?:(?!(?:{split}))[\s\S])+"


# The presets, one row each: adding one is a row here (and, for ``compiled``, its C code).
# subtle: these are the exact patterns of the reference implementations (GPT-2's encoder.py and
# tiktoken's cl100k_base / o200k_base), so that pretokens, hence merges and ids, agree with them.
PRESET_TABLE: tuple[Preset, ...] = (
    Preset(
        "gpt2", r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+""",
        "GPT-2, RoBERTa, CS336", compiled=True, covering=True, java=True,
    ),
    Preset(
        "cl100k",
        r"""'(?i:[sdmt]|ll|ve|re)|[^\r\n\p{L}\p{N}]?+\p{L}++|\p{N}{1,3}+| ?[^\s\p{L}\p{N}]++[\r\n]*+"""
        r"""|\s++$|\s*[\r\n]|\s+(?!\S)|\s""",
        "GPT-4 (tiktoken's cl100k_base), minbpe", compiled=True, covering=True, java=True,
    ),
    Preset(
        "o200k", _O200K,
        "GPT-4o (tiktoken's o200k_base)", compiled=True, covering=True, java=True,
    ),
    Preset("words", r"""\w+|[^\s\w]+""", "the seed articles (with lowercase)", java=True),
    # o200k with its digit rule changed: each digit alone (Llama 1 and 2's split_digits, DeepSeek),
    # or digit runs in groups of three counted from the right (1234567 -> 1 234 567)
    Preset("single-digits", _O200K.replace(r"\p{N}{1,3}", r"\p{N}"),
           "o200k, one digit a pretoken", compiled=True, covering=True, java=True),
    Preset("digits-rtl3", _O200K.replace(r"\p{N}{1,3}", r"\p{N}{1,3}(?=(?:\p{N}{3})*(?!\p{N}))"),
           "o200k, digits in groups of three from the right", compiled=True, covering=True, java=True),
    # SuperBPE's stage 2 (docs/design.md 1.7): its reference scripts split with SUPERBPE_SPLIT as
    # tokenizers' Split "Isolated", which keeps the text between matches as pretokens too: words,
    # single spaces and lone punctuation run together into one multi-word pretoken
    Preset("superbpe", _isolated(SUPERBPE_SPLIT), "SuperBPE's stage 2", compiled=True, covering=True, java=True,
           split=SUPERBPE_SPLIT),
    Preset("whitespace", r"""\S+""", "subword-nmt", java=True),
)
PRESETS: dict[str, str] = {preset.name: preset.regex for preset in PRESET_TABLE}
# Presets the compiled pretokenizer (bpe_spark.native._fastenc) implements by hand over UTF-8.
COMPILED_PRESETS = tuple(preset.name for preset in PRESET_TABLE if preset.compiled)
# Presets whose regex matches every character of any text: Split "Isolated" (which keeps the text
# between matches too) then gives exactly our pretokens. Other patterns drop unmatched text, which
# Split "Removed" with invert=True reproduces.
COVERING_PRESETS = tuple(preset.name for preset in PRESET_TABLE if preset.covering)
# Presets whose Java form was checked against the Python pretokenizer on the shared corpora.
JAVA_PRESETS = tuple(preset.name for preset in PRESET_TABLE if preset.java)


MAX_PATTERN_CHARS = 10_000  # a custom regex longer than this is refused (o200k's is 480)
MATCH_SECONDS = 1.0
MATCH_SECONDS_PER_CHAR = 10e-6


def compile_pattern(pattern: str) -> regex.Pattern:
    """Compile a preset name or a custom regex (Python ``regex`` syntax) of at most
    ``MAX_PATTERN_CHARS`` characters."""
    if not isinstance(pattern, str) or not pattern:
        raise ConfigError(f"pattern must be a preset name {sorted(PRESETS)} or a regex, got {pattern!r}")
    if len(pattern) > MAX_PATTERN_CHARS:
        raise ConfigError(
            f"pretokenization regex {pattern[:40]!r}... has {len(pattern)} characters; at most "
            f"{MAX_PATTERN_CHARS} are allowed"
        )
    source = PRESETS.get(pattern)
    if source is None:
        if _PRESET_LIKE.fullmatch(pattern):
            # A bare word that is no preset is almost certainly a typo, not a regex meant to match it.
            raise ConfigError(
                f"unknown pattern preset {pattern!r}; choose one of {sorted(PRESETS)} or give a regex"
            )
        source = pattern
    try:
        compiled = regex.compile(source)
    except regex.error as exc:
        raise ConfigError(f"invalid pretokenization regex {pattern!r}: {exc}") from None
    if compiled.search("") is not None and compiled.fullmatch("") is not None:
        raise ConfigError(f"pretokenization regex {pattern!r} matches the empty string; it must not")
    return compiled


def split_source(pattern: str) -> str:
    """The regex of a tokenizer.json Split "Isolated" that gives a covering pattern's pretokens.

    >>> split_source("superbpe") == SUPERBPE_SPLIT, split_source("gpt2") == PRESETS["gpt2"]
    (True, True)
    """
    for preset in PRESET_TABLE:
        if pattern in (preset.name, preset.regex) and preset.split is not None:
            return preset.split
    return pattern_source(pattern)


def pattern_source(pattern: str) -> str:
    """The regex source of a preset name or a custom regex."""
    return PRESETS.get(pattern, pattern)


def preset_name(pattern: str) -> str | None:
    """The preset a pattern is (given by name or by its exact regex), or None for a custom one."""
    if pattern in PRESETS:
        return pattern
    for name, source in PRESETS.items():
        if source == pattern:
            return name
    return None


def compiled_preset(pattern: str | None) -> str | None:
    """The name the compiled pretokenizer knows ``pattern`` by (a name or its regex), or None
    (also for no pattern)."""
    if pattern is None:
        return None
    name = preset_name(pattern)
    return name if name in COMPILED_PRESETS else None


def match_time_limit(length: int) -> float:
    """Seconds a custom pattern may take on a text of ``length`` characters.

    >>> match_time_limit(1_000_000)
    11.0
    """
    return MATCH_SECONDS + MATCH_SECONDS_PER_CHAR * length


_SPACE = regex.compile(r"\s+")
_PRESET_LIKE = regex.compile(r"[A-Za-z][A-Za-z0-9_]*(?:-[A-Za-z0-9_]+)*")  # a name, not a regex


class DroppedTextWarning(UserWarning):
    """A custom pretokenization pattern left characters of a text unmatched."""


class _BoundedFinder:
    """``findall`` of a custom pattern under :func:`match_time_limit`, counting what it drops."""

    def __init__(self, pattern: str, compiled: regex.Pattern):
        self.pattern = pattern
        self._findall = compiled.findall
        self.dropped_characters = 0
        self.dropped_texts = 0

    def __call__(self, text: str) -> list[str]:
        limit = match_time_limit(len(text))
        try:
            pieces = self._findall(text, timeout=limit)
        except TimeoutError:
            raise PatternTimeoutError(
                f"pretokenization pattern {self.pattern[:60]!r} took over {limit:.3g} s on a text of "
                f"{len(text)} characters starting {text[:40]!r}; the pattern backtracks too much: "
                "simplify it or use a preset (gpt2, cl100k, o200k, words, whitespace)"
            ) from None
        kept = sum(map(len, pieces))
        # subtle: only when something is left out, count what was not whitespace
        dropped = 0 if kept == len(text) else len(_SPACE.sub("", text)) - len(_SPACE.sub("", "".join(pieces)))
        if dropped:
            if not self.dropped_characters:
                warnings.warn(
                    f"pretokenization pattern {self.pattern[:60]!r} leaves {dropped} characters "
                    f"(not whitespace) of a text starting {text[:40]!r} unmatched; they are dropped "
                    "(this warning is given once; add an alternative such as '|.' to keep all text)",
                    DroppedTextWarning, stacklevel=2,
                )
            self.dropped_characters += dropped
            self.dropped_texts += 1
        return pieces


def pretoken_finder(pattern: str, compiled: regex.Pattern | None = None) -> Callable[[str], list[str]]:
    """The function that splits text into pretokens: a preset's plain ``findall``, or for a
    custom pattern ``findall`` under the time limit, with ``dropped_characters`` and
    ``dropped_texts`` counting the characters (other than whitespace) it left unmatched and the
    texts that lost some (see the module docstring)."""
    compiled = compile_pattern(pattern) if compiled is None else compiled
    if preset_name(pattern) is not None:
        return compiled.findall
    return _BoundedFinder(pattern, compiled)
