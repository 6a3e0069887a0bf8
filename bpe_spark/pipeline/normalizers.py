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
from collections.abc import Callable, Sequence
from typing import Any

import regex

from bpe_spark.formats.hf_regex import find_matches
from bpe_spark.pipeline.pre_tokenizers import (
    WHITE_SPACE,
    ErrorFactory,
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
    """A normalizer: ``normalizer(text)`` is tokenizers' ``normalize_str(text)``."""

    def __init__(self, function: Callable[[str], str], kind: str) -> None:
        self.function, self.kind = function, kind

    def __call__(self, text: str) -> str:
        return self.function(text)

    def __repr__(self) -> str:
        return f"Normalizer({self.kind})"


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


def _sequence(steps: Sequence[Callable[[str], str]]) -> Callable[[str], str]:
    def run(text: str) -> str:
        for step in steps:
            text = step(text)
        return text

    return run


def build_normalizer(spec: Any, field: str, error: ErrorFactory) -> Normalizer | None:
    """The normalizer a tokenizer.json's ``normalizer`` object (at ``field``) describes; None for
    null. Raises ``error(field, message)`` for anything not reproduced exactly."""
    if spec is None:
        return None
    if not isinstance(spec, dict):
        raise error(field, f"is {spec!r}; expected an object")
    return Normalizer(_function(spec, field, error), str(spec.get("type")))


def _function(spec: Any, field: str, error: ErrorFactory) -> Callable[[str], str]:
    if not isinstance(spec, dict):
        raise error(field, f"is {spec!r}; expected an object")
    kind = spec.get("type")
    if kind in _FORMS:
        only_options(spec, set(), field, error)
        return lambda text: unicodedata.normalize(kind, text)
    if kind == "Lowercase":
        only_options(spec, set(), field, error)
        return lowercase
    if kind == "Replace":
        only_options(spec, {"pattern", "content"}, field, error)
        return replace_function(pattern_of(spec, field, error), get_option(spec, "content", str, field, error))
    if kind == "Prepend":
        only_options(spec, {"prepend"}, field, error)
        prepend = get_option(spec, "prepend", str, field, error)
        return lambda text: prepend + text if text else text
    if kind == "Strip":
        only_options(spec, {"strip_left", "strip_right"}, field, error)
        left = get_option(spec, "strip_left", bool, field, error)
        right = get_option(spec, "strip_right", bool, field, error)
        if left and right:
            return lambda text: text.strip(_WHITE_SPACE)
        if left:
            return lambda text: text.lstrip(_WHITE_SPACE)
        if right:
            return lambda text: text.rstrip(_WHITE_SPACE)
        return lambda text: text
    if kind == "Sequence":
        only_options(spec, {"normalizers"}, field, error)
        steps = get_option(spec, "normalizers", list, field, error)
        return _sequence([_function(s, f"{field}.normalizers[{i}]", error) for i, s in enumerate(steps)])
    reason = _REFUSED.get(kind, "bpe-spark reproduces NFC, NFD, NFKC, NFKD, Lowercase, Replace, Prepend, Strip and Sequence")
    raise error(f"{field}.type", f"{kind!r} is not supported: {reason}")
