"""Normalization, special-token splitting and regex pretokenization.

The same :class:`Pretokenizer` runs in plain-Python training, in ``Tokenizer.encode`` and (as a
reference) in the Spark jobs, so a pretoken is the same string everywhere.

>>> Pretokenizer("gpt2").pretokens("Hello world's end")
['Hello', ' world', "'s", ' end']
"""

from __future__ import annotations

import unicodedata
from collections import Counter
from collections.abc import Iterable, Iterator
from itertools import islice

import regex

from bpe_spark.native import compiled as _compiled
from bpe_spark.bpe.long_documents import LongDocument, count_pieces
from bpe_spark.bpe.patterns import compile_pattern, compiled_preset, pretoken_finder
from bpe_spark.bpe.text import string_buffers


def normalize(text: str, normalization: str | None, lowercase: bool) -> str:
    """Unicode normalization first, then lowercasing (the order of ``tokenizers``' usual Sequence)."""
    if normalization:
        text = unicodedata.normalize(normalization, text)
    if lowercase:
        text = text.lower()
    return text


def longest_first(special_tokens: Iterable[str]) -> list[str]:
    """Distinct special tokens in match order: longest first, so that where one token holds
    another (``<|a|>`` in ``<|a|><|b|>``) the longer wins; then by text, for a stable order.

    >>> longest_first(["<s>", "<|a|>", "<s>"])
    ['<|a|>', '<s>']
    """
    return sorted(set(special_tokens), key=lambda t: (-len(t), t))


class SpecialTokenMatcher:
    """Finds special tokens in text, longest first where they overlap.

    >>> SpecialTokenMatcher(["<|a|>", "<|a|><|b|>"]).split("x<|a|><|b|>y")
    [('x', False), ('<|a|><|b|>', True), ('y', False)]
    """

    def __init__(self, special_tokens: Iterable[str]):
        self.tokens = tuple(special_tokens)
        ordered = longest_first(self.tokens)
        self._regex = regex.compile("|".join(regex.escape(t) for t in ordered)) if ordered else None

    def __bool__(self) -> bool:
        return self._regex is not None

    def finditer(self, text: str) -> Iterator[regex.Match]:
        return self._regex.finditer(text) if self._regex is not None else iter(())

    def split(self, text: str) -> list[tuple[str, bool]]:
        """``text`` cut into ``(segment, is_special)`` pieces, empty ordinary pieces left out."""
        pieces: list[tuple[str, bool]] = []
        start = 0
        for match in self.finditer(text):
            if match.start() > start:
                pieces.append((text[start : match.start()], False))
            pieces.append((match.group(), True))
            start = match.end()
        if start < len(text):
            pieces.append((text[start:], False))
        return pieces

    def ordinary_segments(self, text: str) -> list[str]:
        """The text between special tokens: what training counts."""
        if self._regex is None:
            return [text] if text else []
        return [segment for segment in self._regex.split(text) if segment]


class Pretokenizer:
    """Normalize, split on special tokens, then apply the pretokenization regex.

    >>> Pretokenizer("words", lowercase=True).pretokens("Hello, World!")
    ['hello', ',', 'world', '!']
    """

    def __init__(
        self,
        pattern: str = "gpt2",
        *,
        lowercase: bool = False,
        normalization: str | None = None,
        special_tokens: Iterable[str] = (),
    ):
        self.pattern = pattern
        self.lowercase = lowercase
        self.normalization = normalization
        self.regex = compile_pattern(pattern)
        # subtle: match through findall, never self.regex directly: custom patterns run under a
        # time limit and count the characters they drop (bpe_spark.bpe.patterns.pretoken_finder)
        self.findall = pretoken_finder(pattern, self.regex)
        self.specials = SpecialTokenMatcher(special_tokens)

    @classmethod
    def from_config(cls, cfg) -> Pretokenizer:
        return cls(
            cfg.pattern,
            lowercase=cfg.lowercase,
            normalization=cfg.normalization,
            special_tokens=cfg.special_tokens,
        )

    def normalize(self, text: str) -> str:
        return normalize(text, self.normalization, self.lowercase)

    @property
    def dropped_characters(self) -> int:
        """Characters a custom pattern left unmatched so far (0 for the presets)."""
        return getattr(self.findall, "dropped_characters", 0)

    def split_ordinary(self, text: str) -> list[str]:
        """Pretokens of text that holds no special token (normalization already applied)."""
        return self.findall(text)

    def pretokens(self, text: str) -> list[str]:
        """All pretokens of a document, special tokens removed (they are boundaries).

        Special tokens are found in the raw text, before normalization, so that lowercasing
        or NFKC never hides or forges one; each segment between them is then normalized.
        """
        findall = self.findall
        if not self.specials:
            return findall(self.normalize(text))
        out: list[str] = []
        for segment in self.specials.ordinary_segments(text):
            out.extend(findall(self.normalize(segment)))
        return out

    def count(self, texts: Iterable[str], counts: Counter | None = None) -> Counter:
        """Pretoken counts of many documents (added to ``counts`` when given)."""
        counts = Counter() if counts is None else counts
        tally = self.tally()
        texts = iter(texts)
        while chunk := list(islice(texts, 10_000)):
            tally.add(chunk)
        pretokens, numbers = tally.items()
        counts.update(dict(zip(pretokens, numbers)))
        return counts

    def tally(self) -> Tally:
        """An accumulator of pretoken counts: compiled for the compiled presets (``COMPILED_PRESETS``)."""
        return Tally(self)


class Tally:
    """Pretoken counts of the documents added so far: ``add(texts)``, ``items()``, ``len()``.

    The compiled presets (``COMPILED_PRESETS``) split and count in C (``bpe_spark.native._fastenc``); other patterns use
    the regex and a Counter. Both give the same counts.

    >>> tally = Pretokenizer("gpt2").tally(); tally.add(["a b", "a"]); sorted(zip(*tally.items()))
    [(' b', 1), ('a', 2)]
    """

    def __init__(self, pretokenizer: Pretokenizer):
        self.pretokenizer = pretokenizer
        self._compiled = _compiled.new_counter(compiled_preset(pretokenizer.pattern))
        self._plain = not pretokenizer.specials and not (pretokenizer.normalization or pretokenizer.lowercase)
        self._counts: Counter = Counter()

    def add(self, texts) -> None:
        """Count the pretokens of ``texts``; a batch may also be one
        :class:`~bpe_spark.bpe.long_documents.LongDocument`, counted piece by piece when compiled,
        or an Arrow string array without nulls whose UTF-8 the caller checked
        (:func:`~bpe_spark.bpe.text.utf8_view`), counted from its buffers when compiled (no ``str``
        per text)."""
        p = self.pretokenizer
        if hasattr(texts, "buffers"):  # an Arrow array
            if self._compiled is not None and self._plain:
                self._compiled.add_utf8(*string_buffers(texts))
                return
            texts = texts.to_pylist()
        if len(texts) == 1 and isinstance(texts[0], LongDocument):
            if self._compiled is not None and self._plain:
                count_pieces(self._compiled, texts[0].pieces())
                return
            texts = [texts[0].text()]
        if self._compiled is None:
            for text in texts:
                if text:
                    self._counts.update(p.pretokens(text))
        elif self._plain:
            self._compiled.add(texts)
        else:
            self._compiled.add([
                p.normalize(segment) for text in texts if text for segment in p.specials.ordinary_segments(text)
            ])

    def items(self) -> tuple[list[str], list[int]]:
        """``(pretokens, counts)``, two lists in the same order."""
        if self._compiled is not None:
            return self._compiled.items()
        return list(self._counts), list(self._counts.values())

    def arrow_items(self):
        """``(pretokens, counts)`` as Arrow arrays (string, int64): from the compiled counter's
        buffers, with no Python object per pretoken."""
        import pyarrow as pa

        if self._compiled is not None:
            offsets, data, counts = self._compiled.buffers()
            n = len(counts) // 8
            pretokens = pa.Array.from_buffers(pa.string(), n, [None, pa.py_buffer(offsets), pa.py_buffer(data)])
            try:
                pretokens.validate(full=True)
                return pretokens, pa.Array.from_buffers(pa.int64(), n, [None, pa.py_buffer(counts)])
            except pa.ArrowInvalid:  # a lone surrogate's bytes: items() gives it as Python does
                pass
        pretokens, counts = self.items()
        return pa.array(pretokens, pa.string()), pa.array(counts, pa.int64())

    @property
    def compiled(self):
        """The compiled counter that holds the counts, or None (counted in Python)."""
        return self._compiled

    def clear(self) -> None:
        if self._compiled is not None:
            self._compiled.clear()
        self._counts.clear()

    def __len__(self) -> int:
        return len(self._compiled) if self._compiled is not None else len(self._counts)
