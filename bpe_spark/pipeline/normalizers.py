"""tokenizers' normalizers, reproduced exactly: :func:`build_normalizer` turns the ``normalizer``
object of a tokenizer.json into a :class:`Normalizer`, ``normalizer(text)`` being tokenizers'
``normalize_str(text)``.

Supported: NFC, NFD, NFKC, NFKD, Lowercase, Replace (``{"String": s}`` or ``{"Regex": onig}``
pattern; the content inserted as is), Prepend, Strip and Sequence (nested too). Refused, with the
field and the value: Precompiled (SentencePiece's compiled charsmap), BertNormalizer,
StripAccents, Nmt, ByteLevel and any other type.

Exactness notes: Unicode forms and lowercasing use Python's ``unicodedata`` / ``str.lower``
tables (Unicode 14.0 on Python 3.11) where tokenizers' Rust crates use newer ones: characters
assigned since are left as they are. Lowercase maps each character on its own
(``char::to_lowercase``): a final capital sigma becomes "σ", never "ς". Strip trims Rust's
``char::is_whitespace`` (not Python's ``str.isspace``, which also counts U+001C..U+001F).
"""

from __future__ import annotations

import unicodedata
from collections.abc import Callable
from typing import Any

import regex

from bpe_spark.pipeline.pre_tokenizers import (
    WHITE_SPACE,
    ErrorFactory,
    find_matches,
    get_option,
    only_options,
    pattern_of,
)

_WHITE_SPACE = "".join(sorted(WHITE_SPACE))
_FORMS = ("NFC", "NFD", "NFKC", "NFKD")
_REFUSED = {
    "Precompiled": "SentencePiece's precompiled charsmap is not reproduced",
    "BertNormalizer": "BERT's normalizer (WordPiece models) is not reproduced",
    "StripAccents": "its table of combining marks is not reproduced exactly",
    "Nmt": "the NMT normalizer is not reproduced",
    "ByteLevel": "a ByteLevel normalizer is not reproduced",
}


class Normalizer:
    """A normalizer: ``normalizer(text)`` is tokenizers' ``normalize_str(text)``;
    :meth:`normalize_at_start` also says whether the result still starts at the text's origin."""

    def __init__(self, steps: list[Step], kind: str) -> None:
        self.steps, self.kind = steps, kind

    def __call__(self, text: str) -> str:
        for step in self.steps:
            text = step.function(text)
        return text

    def normalize_at_start(self, text: str) -> tuple[str, bool]:
        """``(normalizer(text), starts)``: ``starts`` is whether the first normalized character
        still comes from offset 0 of ``text`` (tokenizers' ``offsets_original().0 == 0``, which
        Metaspace's prepend_scheme "first" asks): a Strip that removed leading whitespace, or a
        Replace of a match at 0 that is empty-content or longer than one character, loses it."""
        starts = True
        for step in self.steps:
            starts = starts and step.keeps_start(text)
            text = step.function(text)
        return text, starts

    def __repr__(self) -> str:
        return f"Normalizer({self.kind})"


class Step:
    """One normalizer: its function, and whether on a given input it keeps the first
    character's origin."""

    def __init__(self, function: Callable[[str], str], keeps_start: Callable[[str], bool] | None = None) -> None:
        self.function = function
        self.keeps_start = keeps_start or (lambda text: True)


def lowercase(text: str) -> str:
    """Rust's ``char::to_lowercase`` of each character (no final-sigma rule)."""
    if "\u03a3" not in text:
        return text.lower()  # Python's only context-dependent mapping is the final sigma
    return "".join(c.lower() for c in text)


def replace_function(pattern: regex.Pattern, content: str) -> Callable[[str], str]:
    """Each match of ``pattern`` replaced by ``content`` (Replace normalizer and decoder)."""

    def replace(text: str) -> str:
        return "".join(content if is_match else text[s:e] for s, e, is_match in find_matches(pattern, text))

    return replace


def _replace_keeps_start(pattern: regex.Pattern, content: str) -> Callable[[str], bool]:
    def keeps(text: str) -> bool:
        first = pattern.search(text)
        if first is None or first.start() != 0 or first.end() == 0:
            return True
        return first.end() == 1 and content != ""

    return keeps


def build_normalizer(spec: Any, field: str, error: ErrorFactory) -> Normalizer | None:
    """The normalizer a tokenizer.json's ``normalizer`` object (at ``field``) describes; None for
    null. Raises ``error(field, message)`` for anything not reproduced exactly."""
    if spec is None:
        return None
    if not isinstance(spec, dict):
        raise error(field, f"is {spec!r}; expected an object")
    return Normalizer(_steps(spec, field, error), str(spec.get("type")))


def _steps(spec: Any, field: str, error: ErrorFactory) -> list[Step]:
    if not isinstance(spec, dict):
        raise error(field, f"is {spec!r}; expected an object")
    kind = spec.get("type")
    if kind in _FORMS:
        only_options(spec, set(), field, error)
        return [Step(lambda text: unicodedata.normalize(kind, text))]
    if kind == "Lowercase":
        only_options(spec, set(), field, error)
        return [Step(lowercase)]
    if kind == "Replace":
        only_options(spec, {"pattern", "content"}, field, error)
        pattern, content = pattern_of(spec, field, error), get_option(spec, "content", str, field, error)
        return [Step(replace_function(pattern, content), _replace_keeps_start(pattern, content))]
    if kind == "Prepend":
        only_options(spec, {"prepend"}, field, error)
        prepend = get_option(spec, "prepend", str, field, error)
        return [Step(lambda text: prepend + text if text else text)]
    if kind == "Strip":
        only_options(spec, {"strip_left", "strip_right"}, field, error)
        left = get_option(spec, "strip_left", bool, field, error)
        right = get_option(spec, "strip_right", bool, field, error)

        def strip(text: str) -> str:
            text = text.lstrip(_WHITE_SPACE) if left else text
            return text.rstrip(_WHITE_SPACE) if right else text

        return [Step(strip, lambda text: not (left and text[:1] in WHITE_SPACE))]
    if kind == "Sequence":
        only_options(spec, {"normalizers"}, field, error)
        steps = get_option(spec, "normalizers", list, field, error)
        return [step for i, s in enumerate(steps) for step in _steps(s, f"{field}.normalizers[{i}]", error)]
    reason = _REFUSED.get(kind, "bpe-spark reproduces NFC, NFD, NFKC, NFKD, Lowercase, Replace, Prepend, Strip and Sequence")
    raise error(f"{field}.type", f"{kind!r} is not supported: {reason}")
