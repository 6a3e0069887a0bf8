"""subword-nmt codes files, and subword-nmt's ``@@ `` rendering of segmented text.

A codes file (what ``subword-nmt learn-bpe`` writes) is one merge per line, ``left right``, in
rank order. Version 0.2 starts with ``#version: 0.2`` and fuses the end-of-word marker onto a
word's last character (``th e</w>``): our char scheme with ``end_of_word="fused"``. A file with no
version line is version 0.1, where ``</w>`` is a separate symbol (``end_of_word="separate"``).

Reading a codes file gives the keyword arguments of :class:`~bpe_spark.encoding.tokenizer.Tokenizer`.
Segmenting renders each word's subwords joined by ``@@ `` (the marker not shown), as
``subword-nmt apply-bpe`` prints them; the subwords come from :meth:`Tokenizer.encode_pretoken`.

>>> from bpe_spark import TrainerConfig, train_from_counts
>>> cfg = TrainerConfig(vocab_size=100, scheme="char", end_of_word="fused", pattern="whitespace",
...                     tie_break="lexicographic", min_frequency=2)
>>> tok = train_from_counts({"low": 5, "lower": 2, "newest": 6, "widest": 3}, cfg)
>>> Segmenter(tok).segment_line("lowest newer\\n")
'lo@@ west ne@@ wer\\n'
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from bpe_spark.bpe.config import END_OF_WORD_MARKER
from bpe_spark.errors import ConfigError, ModelFormatError, option
from bpe_spark.bpe.fields import check_count, check_file_size, check_token
from bpe_spark.bpe.words import bpe_merge, initial_symbols

CODES_VERSION_PREFIX = "#version:"
SEPARATOR = "@@"
# subtle: subword-nmt strips these from both ends of a line and splits what is left on single
# spaces, so a tab or a no-break space is part of a word, not a boundary.
_STRIP_CHARS = "\r\n "
# subword-nmt's own word split as a pattern. The ``whitespace`` preset (\S+) gives the same words
# unless the text holds whitespace other than spaces and line breaks (tabs, U+00A0, ...).
SUBWORD_NMT_WORDS = r"[^ \r\n]+"
_MARKER = END_OF_WORD_MARKER
_VERSION_END_OF_WORD = {(0, 1): "separate", (0, 2): "fused"}


def write_codes(tok, path) -> None:
    """Write ``tok``'s merges as a subword-nmt codes file (char scheme only).

    A fused ``</w>`` gives a ``#version: 0.2`` file; a separate one a version 0.1 file (no header),
    as subword-nmt writes them. Special tokens, lowercasing and the pattern have no place in the
    format and are not written.
    """
    if tok.scheme != "char":
        raise ConfigError(
            "subword-nmt codes hold character merges; this tokenizer uses the byte scheme "
            f"(train with {option('scheme', 'char')} to export subword-nmt codes)"
        )
    if tok.end_of_word not in ("fused", "separate") or tok.end_of_word_marker != _MARKER:
        raise ConfigError(
            f"subword-nmt codes need the end-of-word marker {_MARKER!r} (fused or separate); this "
            f"tokenizer has end_of_word={tok.end_of_word!r}, marker {tok.end_of_word_marker!r}"
        )
    lines = ["#version: 0.2"] if tok.end_of_word == "fused" else []
    for rank, (left, right) in enumerate(tok.merges):
        for side in (left, right):
            if any(ch in side for ch in _STRIP_CHARS):
                raise ConfigError(
                    f"merge {rank} ({left!r}, {right!r}) holds a space or line break, which a "
                    "subword-nmt codes file cannot represent; train with a pattern that splits on them"
                )
        lines.append(f"{left} {right}")
    text = "".join(line + "\n" for line in lines)
    Path(path).write_text(text, encoding="utf-8", newline="\n")


def _parse_version(line: str, path: Path) -> tuple[int, ...]:
    value = line[len(CODES_VERSION_PREFIX) :].strip()
    try:
        version = tuple(int(part) for part in re.sub(r"(\.0+)*$", "", value).split("."))
    except ValueError:
        raise ModelFormatError(
            f"{path}, line 1: unreadable version {value!r}; expected '#version: 0.2'"
        ) from None
    if version not in _VERSION_END_OF_WORD:
        raise ModelFormatError(
            f"{path}, line 1: subword-nmt codes version {value!r} is not supported (0.1 and 0.2 are)"
        )
    return version


def _chars_of(symbol: str, end_of_word: str) -> str:
    """The characters a symbol spells, its end-of-word marker left out."""
    if symbol.endswith(_MARKER) and (end_of_word == "separate" or len(symbol) > len(_MARKER)):
        return symbol[: -len(_MARKER)]
    return symbol


def read_codes(
    path, *, max_merges: int | None = None, pattern: str = "whitespace"
) -> dict[str, Any]:
    """The keyword arguments of a char-scheme Tokenizer from a subword-nmt codes file.

    Ids follow our char-scheme layout: the alphabet (every character the codes spell) in
    code-point order, then the end-of-word symbol(s) (version 0.2: ``c</w>`` for each character),
    then the merges; a merge whose result already exists reuses its id, and of two equal lines
    the first counts (as in subword-nmt). ``max_merges`` keeps only the first merges (subword-nmt's
    ``--merges``). ``pattern`` splits text into words for ``encode``; pass
    :data:`SUBWORD_NMT_WORDS` to split on spaces only, exactly as subword-nmt does.
    """
    path = Path(path)
    if max_merges is not None and (not isinstance(max_merges, int) or max_merges < 0):
        raise ConfigError(f"max_merges must be None or an integer >= 0, got {max_merges!r}")
    check_file_size(path)
    try:
        text = path.read_text(encoding="utf-8-sig")
    except UnicodeDecodeError as exc:
        raise ModelFormatError(
            f"{path}: not UTF-8 text ({exc}); is this a subword-nmt codes file?"
        ) from None
    lines = text.rstrip("\n").split("\n") if text.strip() else []
    first_line = 1
    version = (0, 1)
    if lines and lines[0].startswith(CODES_VERSION_PREFIX):
        version = _parse_version(lines[0], path)
        lines = lines[1:]
        first_line = 2
    end_of_word = _VERSION_END_OF_WORD[version]
    if max_merges is not None:
        lines = lines[:max_merges]
    check_count(len(lines), str(path), "merges")

    pairs: list[tuple[str, str, int]] = []
    for offset, line in enumerate(lines):
        line_no = first_line + offset
        parts = line.strip(_STRIP_CHARS).split(" ")
        if len(parts) != 2 or not all(parts):
            raise ModelFormatError(
                f"{path}, line {line_no}: expected two subword units separated by one space, got {line!r}"
            )
        for part in parts:
            check_token(part, f"{path}, line {line_no}")
        pairs.append((parts[0], parts[1], line_no))

    alphabet = sorted(
        {
            ch
            for left, right, _ in pairs
            for side in (left, right)
            for ch in _chars_of(side, end_of_word)
        }
    )
    values: list[str] = list(alphabet)
    values += [ch + _MARKER for ch in alphabet] if end_of_word == "fused" else [_MARKER]
    ids = {value: token_id for token_id, value in enumerate(values)}
    merges: list[tuple[int, int]] = []
    for left, right, line_no in pairs:
        for side in (left, right):
            if side not in ids:
                raise ModelFormatError(
                    f"{path}, line {line_no}: merge '{left} {right}' uses {side!r}, which is neither "
                    "a single character nor made by an earlier merge"
                )
        merged = left + right
        check_token(merged, f"{path}, line {line_no}")
        if merged not in ids:
            ids[merged] = len(values)
            values.append(merged)
        merges.append((ids[left], ids[right]))
    return {
        "scheme": "char",
        "vocab": dict(enumerate(values)),
        "merges": merges,
        "pattern": pattern,
        "end_of_word": end_of_word,
        "end_of_word_marker": _MARKER,
        "metadata": {
            "source": "subword-nmt",
            "path": str(path),
            "codes_version": ".".join(map(str, version)),
        },
    }


class Segmenter:
    """Renders text the way ``subword-nmt apply-bpe`` does, with a char-scheme tokenizer.

    Each line keeps its leading and trailing spaces and line breaks; inside it, words are what
    single spaces separate (runs of spaces collapse to one); every subword but a word's last
    gets ``separator``. A character the tokenizer does not know stays a subword of its own, as
    in subword-nmt (no merge can involve it).

    >>> from bpe_spark import Tokenizer
    >>> tok = Tokenizer(scheme="char", vocab={0: "a", 1: "b", 2: "a</w>", 3: "b</w>", 4: "ab</w>"},
    ...                 merges=[(0, 3)], end_of_word="fused", pattern="whitespace")
    >>> Segmenter(tok).segment_line("  ab  cab\\n")
    '  ab c@@ ab\\n'
    """

    def __init__(self, tok, *, separator: str = SEPARATOR):
        if tok.scheme != "char" or tok.end_of_word not in ("fused", "separate"):
            raise ConfigError(
                "subword-nmt segmentation needs a char-scheme tokenizer with an end-of-word marker; "
                f"got scheme={tok.scheme!r}, end_of_word={tok.end_of_word!r}"
            )
        self.tok = tok
        self.separator = separator
        self._marker = tok.end_of_word_marker
        special_ids = set(tok.special_tokens.values())
        self._values = {
            token_id: value for token_id, value in tok.vocab.items() if token_id not in special_ids
        }
        self._symbol_ids: dict[str, int] = {}
        for token_id, value in self._values.items():
            self._symbol_ids.setdefault(value, token_id)
        self._pair_rank: dict[tuple[int, int], tuple[int, int]] | None = None
        self._cache: dict[str, tuple[str, ...]] = {}

    def _merge_with_unknowns(self, symbols: list[str]) -> list[str]:
        """BPE over symbols some of which the vocabulary lacks: they get ids no merge uses."""
        if self._pair_rank is None:
            self._pair_rank = {}
            for rank, (left, right, new_id) in enumerate(self.tok.merge_ids):
                self._pair_rank.setdefault((left, right), (rank, new_id))
        unknown: dict[int, str] = {}
        ids = []
        for symbol in symbols:
            token_id = self._symbol_ids.get(symbol)
            if token_id is None:
                token_id = -1 - len(unknown)
                unknown[token_id] = symbol
            ids.append(token_id)
        pair_rank = self._pair_rank
        merged = bpe_merge(ids, lambda left, right: pair_rank.get((left, right)))
        return [unknown[i] if i < 0 else self._values[i] for i in merged]

    def subwords(self, word: str) -> tuple[str, ...]:
        """The subwords of one word (no spaces in it), the end-of-word marker not shown.

        >>> from bpe_spark import Tokenizer
        >>> tok = Tokenizer(scheme="char", vocab={0: "a", 1: "b", 2: "</w>", 3: "ab"},
        ...                 merges=[(0, 1)], end_of_word="separate", pattern="whitespace")
        >>> Segmenter(tok).subwords("abba")
        ('ab', 'b', 'a')
        """
        cached = self._cache.get(word)
        if cached is not None:
            return cached
        if len(word) <= 1:
            return (word,)  # subword-nmt leaves one-character words as they are
        symbols = initial_symbols(word, self.tok.end_of_word, self._marker)
        if all(symbol in self._symbol_ids for symbol in symbols):
            values = [self._values[token_id] for token_id in self.tok.encode_pretoken(word)]
        else:
            values = self._merge_with_unknowns(symbols)
        marker = self._marker
        if values[-1] == marker:
            values.pop()
        elif values[-1].endswith(marker):
            values[-1] = values[-1][: -len(marker)]
        result = tuple(values)
        self._cache[word] = result
        return result

    def segment_line(self, line: str) -> str:
        """One line rendered as ``subword-nmt apply-bpe`` prints it (line break kept)."""
        body = line.strip(_STRIP_CHARS)
        lead = len(line) - len(line.lstrip(_STRIP_CHARS))
        trail = len(line) - len(line.rstrip(_STRIP_CHARS))
        body = self.tok.pretokenizer.normalize(body)
        rendered: list[str] = []
        separator = self.separator
        for word in body.split(" "):
            if not word:
                continue
            subwords = self.subwords(word)
            rendered.extend(subword + separator for subword in subwords[:-1])
            rendered.append(subwords[-1])
        out = line[:lead] + " ".join(rendered)
        if trail and trail != len(line):
            out += line[len(line) - trail :]
        return out

    def segment_lines(self, lines: Iterable[str]) -> Iterator[str]:
        for line in lines:
            yield self.segment_line(line)


def segment_line(tok, line: str, *, separator: str = SEPARATOR) -> str:
    """One-off :meth:`Segmenter.segment_line` (build a :class:`Segmenter` for many lines)."""
    return Segmenter(tok, separator=separator).segment_line(line)
