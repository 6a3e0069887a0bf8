"""tokenizers' pre-tokenizers, reproduced exactly: :func:`build_pre_tokenizer` turns the
``pre_tokenizer`` object of a tokenizer.json into a :class:`PreTokenizer` whose ``split(text)`` is
the strings of ``tokenizers``' ``pre_tokenize_str(text)``.

Supported: Split (String or Regex pattern, every behavior, invert), ByteLevel (add_prefix_space,
use_regex; trim_offsets only moves offsets), Metaspace (replacement, prepend_scheme
always/first/never or the legacy add_prefix_space, split), Whitespace, WhitespaceSplit, Digits,
Punctuation, CharDelimiterSplit and Sequence (nested, any mix). Anything else is refused by the
caller's ``error(field, message)``.

``first`` (Metaspace's prepend_scheme "first"): tokenizers prepends the replacement only to a
piece whose offset in the ORIGINAL input is 0 (``offsets_original().0 == 0``). When a tokenizer
splits its input on added tokens first, the pieces keep their offsets in the whole input: only the
text at the very start of the input (no added token before it) counts as first; a piece after an
added token, even one at the start of a line, is not. The offset is
the original one of the piece's first NORMALIZED character, so a normalizer can lose it too (a
Strip that removed leading whitespace; a Replace of a match at 0 longer than one character or
with empty content). So the runtime calls, for each piece between added tokens (tokenizers
normalizes each piece on its own: a Prepend normalizer prepends to every piece)::

    text, starts = normalizer.normalize_at_start(piece)   # or (piece, True) without a normalizer
    pieces = pre_tokenizer.split(text, first=starts and piece_is_at_offset_0_of_the_input)

Inside a Sequence, after a Split only the piece that starts at the split text's position 0
keeps ``first``.

Character predicates follow Rust's ``char`` methods (``is_whitespace``: the White_Space property;
``is_numeric``: general categories Nd/Nl/No; Punctuation: ASCII punctuation or a P* category),
with Python's ``unicodedata`` tables (Unicode 14.0 on Python 3.11; characters assigned later are
unassigned here).
"""

from __future__ import annotations

import time
import unicodedata
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import regex

from bpe_spark.errors import PatternTimeoutError
from bpe_spark.bpe.oniguruma import GPT2_ONIG_PATTERN as _GPT2
from bpe_spark.bpe.oniguruma import UnsupportedPattern, compile_onig
from bpe_spark.bpe.patterns import match_time_limit
from bpe_spark.bpe.symbols import bytes_to_unicode

ErrorFactory = Callable[[str, str], Exception]
Piece = tuple[str, bool]  # the text of a piece, and whether it starts the original input
Matches = list[tuple[int, int, bool]]

WHITE_SPACE = frozenset(
    "\t\n\x0b\x0c\r \x85\xa0\u1680\u2000\u2001\u2002\u2003\u2004\u2005\u2006\u2007\u2008\u2009"
    "\u200a\u2028\u2029\u202f\u205f\u3000"
)  # Rust's char::is_whitespace (the White_Space property)
BEHAVIORS = ("Removed", "Isolated", "MergedWithPrevious", "MergedWithNext", "Contiguous")


def is_numeric(c: str) -> bool:
    """Rust's ``char::is_numeric``."""
    return unicodedata.category(c) in ("Nd", "Nl", "No")


def is_punctuation(c: str) -> bool:
    """tokenizers' ``is_punc``: ASCII punctuation or a Unicode punctuation category."""
    return (c.isascii() and not c.isalnum() and c.isprintable() and c != " ") or unicodedata.category(c).startswith("P")


def find_matches(pattern: regex.Pattern, text: str) -> list[tuple[int, int, bool]]:
    """tokenizers' ``find_matches`` of a regex: ``(start, end, is_match)`` pieces in order
    covering ``text`` (the gaps with False), ``[(0, 0, False)]`` for the empty text.

    The matches are Oniguruma's ``find_iter``: an empty match right where the previous match
    ended is skipped (the search moves one character on), unlike Python's ``finditer``.

    A file's pattern is untrusted: the matching of one text runs under
    :func:`bpe_spark.bpe.patterns.match_time_limit`, and a pattern that backtracks past it is a
    :class:`~bpe_spark.errors.PatternTimeoutError` naming the pattern and the text.
    """
    if not text:
        return [(0, 0, False)]
    out: list[tuple[int, int, bool]] = []
    prev = 0
    limit = match_time_limit(len(text))
    try:
        for start, end in _onig_iter(pattern, text, time.monotonic() + limit):
            if prev != start:
                out.append((prev, start, False))
            out.append((start, end, True))
            prev = end
    except TimeoutError:
        raise PatternTimeoutError(
            f"the file's pattern {pattern.pattern[:60]!r} took over {limit:.3g} s on a text of {len(text)} "
            f"characters starting {text[:40]!r}; it backtracks too much for bpe-spark to run it"
        ) from None
    if prev != len(text):
        out.append((prev, len(text), False))
    return out


def _onig_iter(pattern: regex.Pattern, text: str, deadline: float) -> Iterator[tuple[int, int]]:
    fast = []
    for match in pattern.finditer(text, timeout=max(deadline - time.monotonic(), 0.001)):
        start, end = match.span()
        if start == end:
            break  # empty matches: follow Oniguruma's iteration exactly, below
        fast.append((start, end))
    else:
        yield from fast
        return
    pos, last_end = 0, None
    while pos <= len(text):
        match = pattern.search(text, pos, timeout=max(deadline - time.monotonic(), 0.001))
        if match is None:
            return
        start, end = match.span()
        if start == end and last_end == end:
            pos += 1
            continue
        pos = last_end = end
        yield start, end


def char_matches(text: str, predicate: Callable[[str], bool]) -> Matches:
    """``find_matches`` of a char predicate: each matching character is a match of its own."""
    out: Matches = []
    last = 0
    for i, c in enumerate(text):
        if predicate(c):
            if last < i:
                out.append((last, i, False))
            out.append((i, i + 1, True))
            last = i + 1
    if last < len(text):
        out.append((last, len(text), False))
    return out


def split_pieces(text: str, matches: Matches, behavior: str) -> list[tuple[int, int]]:
    """``NormalizedString::split``: the kept ``(start, end)`` ranges of ``text``, empty ones dropped."""
    if behavior == "Isolated":
        ranges = [(s, e) for s, e, _ in matches]
    elif behavior == "Removed":
        ranges = [(s, e) for s, e, m in matches if not m]
    elif behavior == "Contiguous":
        ranges, previous = [], False
        for s, e, m in matches:
            if m == previous and ranges:
                ranges[-1] = (ranges[-1][0], e)
            else:
                ranges.append((s, e))
            previous = m
    elif behavior == "MergedWithPrevious":
        ranges, previous = [], False
        for s, e, m in matches:
            if m and not previous and ranges:
                ranges[-1] = (ranges[-1][0], e)
            else:
                ranges.append((s, e))
            previous = m
    else:  # MergedWithNext
        ranges, previous = [], False
        for s, e, m in reversed(matches):
            if m and not previous and ranges:
                ranges[-1] = (s, ranges[-1][1])
            else:
                ranges.append((s, e))
            previous = m
        ranges.reverse()
    return [(s, e) for s, e in ranges if s != e]


def _cut(piece: Piece, matches: Matches, behavior: str) -> list[Piece]:
    text, first = piece
    return [(text[s:e], first and s == 0) for s, e in split_pieces(text, matches, behavior)]


class PreTokenizer:
    """One step (or a Sequence) of tokenizers' pre-tokenization."""

    byte_level = False  # a ByteLevel step ran: pieces are in GPT-2's printable byte alphabet

    def split(self, text: str, *, first: bool = True) -> list[str]:
        """The pieces of ``text``: tokenizers' ``pre_tokenize_str(text)`` strings. ``first``:
        ``text`` starts at offset 0 of the whole input (see the module docstring)."""
        return [t for t, _ in self.pieces([(text, first)]) if t]

    def pieces(self, pieces: list[Piece]) -> list[Piece]:
        out: list[Piece] = []
        for piece in pieces:
            if piece[0]:
                out.extend(p for p in self.one(piece) if p[0])
        return out

    def one(self, piece: Piece) -> list[Piece]:
        raise NotImplementedError


class SplitStep(PreTokenizer):
    def __init__(self, pattern: regex.Pattern, behavior: str, invert: bool) -> None:
        self.pattern, self.behavior, self.invert = pattern, behavior, invert

    def one(self, piece: Piece) -> list[Piece]:
        text = piece[0]
        matches = find_matches(self.pattern, text)
        if self.invert:
            matches = [(s, e, not m) for s, e, m in matches]
        return _cut(piece, matches, self.behavior)


class CharSplit(PreTokenizer):
    def __init__(self, predicate: Callable[[str], bool], behavior: str) -> None:
        self.predicate, self.behavior = predicate, behavior

    def one(self, piece: Piece) -> list[Piece]:
        return _cut(piece, char_matches(piece[0], self.predicate), self.behavior)


class ByteLevel(PreTokenizer):
    byte_level = True

    def __init__(self, add_prefix_space: bool, use_regex: bool) -> None:
        self.add_prefix_space = add_prefix_space
        self.pattern = compile_onig(_GPT2) if use_regex else None
        self.table = bytes_to_unicode()

    def one(self, piece: Piece) -> list[Piece]:
        text, first = piece
        if self.add_prefix_space and not text.startswith(" "):
            text = " " + text  # every piece, not only the first
        if self.pattern is None:
            parts = [(text, first)]
        else:
            parts = _cut((text, first), find_matches(self.pattern, text), "Isolated")
        table = self.table
        return [("".join(table[b] for b in t.encode("utf-8")), f) for t, f in parts]


class Metaspace(PreTokenizer):
    def __init__(self, replacement: str, prepend_scheme: str, split: bool) -> None:
        self.replacement, self.prepend_scheme, self.split_on = replacement, prepend_scheme, split

    def one(self, piece: Piece) -> list[Piece]:
        text, first = piece
        rep = self.replacement
        text = text.replace(" ", rep)
        if not text.startswith(rep) and (
            self.prepend_scheme == "always" or (self.prepend_scheme == "first" and first)
        ):
            text = rep + text
        if not self.split_on:
            return [(text, first)]
        return _cut((text, first), char_matches(text, rep.__eq__), "MergedWithNext")


class SequenceStep(PreTokenizer):
    def __init__(self, steps: Sequence[PreTokenizer]) -> None:
        self.steps = list(steps)
        self.byte_level = any(s.byte_level for s in self.steps)

    def pieces(self, pieces: list[Piece]) -> list[Piece]:
        for step in self.steps:
            pieces = step.pieces(pieces)
        return pieces


def get_option(spec: dict, key: str, kinds: type | tuple, field: str, error: ErrorFactory, default: Any = ...) -> Any:
    """``spec[key]`` checked to be of ``kinds``; ``default`` when absent (refused if none given).
    Shared by the three step modules."""
    if key not in spec:
        if default is ...:
            raise error(f"{field}.{key}", "is missing")
        return default
    value = spec[key]
    if not isinstance(value, kinds) or (kinds is int and isinstance(value, bool)):
        raise error(f"{field}.{key}", f"is {value!r}, of the wrong type")
    return value


def only_options(spec: dict, keys: set[str], field: str, error: ErrorFactory) -> None:
    """Refuse a key of ``spec`` other than ``type`` and ``keys`` (an option we do not reproduce)."""
    for key, value in spec.items():
        if key not in keys | {"type"}:
            raise error(f"{field}.{key}", f"is {value!r}: an option bpe-spark does not know, refused")


def pattern_of(spec: dict, field: str, error: ErrorFactory) -> regex.Pattern:
    """The compiled ``{"String": s}`` or ``{"Regex": onig}`` pattern of a Split or Replace (a
    String is matched literally; the empty one matches empty at every character)."""
    pattern = get_option(spec, "pattern", dict, field, error)
    if len(pattern) != 1 or next(iter(pattern)) not in ("String", "Regex"):
        raise error(f"{field}.pattern", f"is {pattern!r}; expected {{\"String\": ...}} or {{\"Regex\": ...}}")
    (kind, source), = pattern.items()
    if not isinstance(source, str):
        raise error(f"{field}.pattern.{kind}", f"is {source!r}; expected a string")
    if kind == "String":
        return regex.compile(regex.escape(source))
    try:
        return compile_onig(source)
    except UnsupportedPattern as exc:
        raise error(f"{field}.pattern.Regex", f"{source!r}: {exc}") from None


def build_pre_tokenizer(spec: Any, field: str, error: ErrorFactory) -> PreTokenizer | None:
    """The pre-tokenizer a tokenizer.json's ``pre_tokenizer`` object (at ``field``) describes;
    None for null. Raises ``error(field, message)`` for anything not reproduced exactly."""
    if spec is None:
        return None
    if not isinstance(spec, dict):
        raise error(field, f"is {spec!r}; expected an object")
    kind = spec.get("type")
    if kind == "Sequence":
        only_options(spec, {"pretokenizers"}, field, error)
        steps = get_option(spec, "pretokenizers", list, field, error)
        built = [build_pre_tokenizer(s, f"{field}.pretokenizers[{i}]", error) for i, s in enumerate(steps)]
        for i, step in enumerate(built):
            if step is None:
                raise error(f"{field}.pretokenizers[{i}]", "is null; expected a pre-tokenizer")
        return SequenceStep(built)
    if kind == "Split":
        only_options(spec, {"pattern", "behavior", "invert"}, field, error)
        behavior = _behavior(spec, field, error, None)
        invert = get_option(spec, "invert", bool, field, error, False)
        return SplitStep(pattern_of(spec, field, error), behavior, invert)
    if kind == "ByteLevel":
        only_options(spec, {"add_prefix_space", "trim_offsets", "use_regex"}, field, error)
        get_option(spec, "trim_offsets", bool, field, error)  # only offsets; required, as in tokenizers
        return ByteLevel(
            get_option(spec, "add_prefix_space", bool, field, error),
            get_option(spec, "use_regex", bool, field, error, True),
        )
    if kind == "Metaspace":
        return _metaspace(spec, field, error)
    if kind == "Whitespace":
        only_options(spec, set(), field, error)
        # Rust's regex crate (not Oniguruma), whose \w is Python's: Unicode word characters
        return SplitStep(regex.compile(r"\w+|[^\w\s]+"), "Removed", True)
    if kind == "WhitespaceSplit":
        only_options(spec, set(), field, error)
        return CharSplit(WHITE_SPACE.__contains__, "Removed")
    if kind == "Digits":
        only_options(spec, {"individual_digits"}, field, error)
        individual = get_option(spec, "individual_digits", bool, field, error, False)
        return CharSplit(is_numeric, "Isolated" if individual else "Contiguous")
    if kind == "Punctuation":
        only_options(spec, {"behavior"}, field, error)
        return CharSplit(is_punctuation, _behavior(spec, field, error, "Isolated"))
    if kind == "CharDelimiterSplit":
        only_options(spec, {"delimiter"}, field, error)
        delimiter = get_option(spec, "delimiter", str, field, error)
        if len(delimiter) != 1:
            raise error(f"{field}.delimiter", f"is {delimiter!r}; expected one character")
        return CharSplit(delimiter.__eq__, "Removed")
    raise error(
        f"{field}.type",
        f"{kind!r} is not supported (bpe-spark reproduces Split, ByteLevel, Metaspace, Whitespace, "
        "WhitespaceSplit, Digits, Punctuation, CharDelimiterSplit and Sequence)",
    )


def _behavior(spec: dict, field: str, error: ErrorFactory, default: str | None) -> str:
    behavior = get_option(spec, "behavior", str, field, error, ... if default is None else default)
    if behavior not in BEHAVIORS:
        raise error(f"{field}.behavior", f"is {behavior!r}; expected one of {', '.join(BEHAVIORS)}")
    return behavior


def _metaspace(spec: dict, field: str, error: ErrorFactory) -> Metaspace:
    return Metaspace(*metaspace_options(spec, field, error))


def metaspace_options(spec: dict, field: str, error: ErrorFactory) -> tuple[str, str, bool]:
    """``(replacement, prepend_scheme, split)`` of a Metaspace pre-tokenizer or decoder, the legacy
    ``add_prefix_space`` read as tokenizers reads it."""
    only_options(spec, {"replacement", "prepend_scheme", "split", "add_prefix_space", "str_rep"}, field, error)
    replacement = get_option(spec, "replacement", str, field, error)
    if len(replacement) != 1:
        raise error(f"{field}.replacement", f"is {replacement!r}; expected one character")
    legacy = get_option(spec, "add_prefix_space", bool, field, error, None)
    scheme = get_option(spec, "prepend_scheme", str, field, error, None)
    if scheme is not None and scheme not in ("always", "first", "never"):
        raise error(f"{field}.prepend_scheme", f"is {scheme!r}; expected always, first or never")
    scheme = scheme or "always"
    if legacy is False and scheme != "never":  # tokenizers refuses the file too
        raise error(f"{field}.add_prefix_space", f"is false but prepend_scheme is {scheme!r}")
    return replacement, scheme, get_option(spec, "split", bool, field, error, True)
