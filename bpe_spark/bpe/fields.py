"""Checking what a model file holds: the one field validator of the format readers, the limits
every reader enforces, and the one check that a byte-level vocabulary has all 256 single bytes
(a leaf: it imports only the errors, the symbols and the pattern limits).

Every error is a :class:`ModelFormatError` that names the file and the field path (for example
``model.merges[3]``) and shows the value found in JSON spelling, as it stands in the file.

Model files are untrusted: reading one never runs code from it (JSON, Parquet and text only, no
pickle), and every reader bounds what it takes (docs/design.md 5, "Untrusted files"):

- a file of at most ``MAX_FILE_BYTES`` (1 GiB), checked before it is read;
- at most ``MAX_TOKENS`` (2**24 = 16,777,216) vocabulary entries, and as many merges and
  special tokens;
- token ids from 0 to ``MAX_TOKEN_ID`` (2**31 - 1: ids are int32 in every output);
- tokens (ordinary or special) of at most ``MAX_TOKEN_BYTES`` (4096) UTF-8 bytes;
- a custom pretokenization regex of at most ``MAX_PATTERN_CHARS`` (10,000) characters, which
  encoding then matches under a time limit (:mod:`bpe_spark.bpe.patterns`).

>>> fields = Fields("tokenizer.json")
>>> fields.get({"model": {"vocab": []}}["model"], "vocab", dict, within="model")
Traceback (most recent call last):
...
bpe_spark.errors.ModelFormatError: tokenizer.json: field 'model.vocab' is []; expected an object
"""

from __future__ import annotations

import json
from collections.abc import Callable, Collection, Container
from pathlib import Path
from typing import Any

from bpe_spark.errors import ModelFormatError
from bpe_spark.bpe.patterns import MAX_PATTERN_CHARS
from bpe_spark.bpe.symbols import missing_bytes

MAX_FILE_BYTES = 2**30
MAX_TOKENS = 2**24
MAX_TOKEN_ID = 2**31 - 1
MAX_TOKEN_BYTES = 4096
ID_RANGE = f"an integer from 0 to {MAX_TOKEN_ID}"

_JSON_KINDS = {
    dict: "an object",
    list: "a list",
    str: "a string",
    int: "an integer",
    bool: "a boolean",
    float: "a number",
}


def show(value: Any) -> str:
    """``value`` as JSON spells it, cut to 80 characters (for error messages)."""
    text = json.dumps(value, ensure_ascii=False)
    return text if len(text) <= 80 else text[:77] + "..."


def _as_tuple(types) -> tuple:
    return types if isinstance(types, tuple) else (types,)


def _kinds(types) -> str:
    return " or ".join(_JSON_KINDS.get(t, t.__name__) for t in _as_tuple(types))


def _choices(choices: Collection) -> str:
    shown = [show(choice) for choice in choices]
    return shown[0] if len(shown) == 1 else ", ".join(shown[:-1]) + " or " + shown[-1]


def is_integer(value: Any) -> bool:
    """An int that is not a bool (JSON ``true`` is no number)."""
    return isinstance(value, int) and not isinstance(value, bool)


def is_id(value: Any) -> bool:
    """A token id: an integer from 0 to ``MAX_TOKEN_ID``."""
    return is_integer(value) and 0 <= value <= MAX_TOKEN_ID


def check_file_size(path) -> None:
    """Refuse a file larger than ``MAX_FILE_BYTES`` before reading it (a missing file passes:
    its reader names it)."""
    try:
        size = Path(path).stat().st_size
    except OSError:
        return
    if size > MAX_FILE_BYTES:
        raise ModelFormatError(
            f"{path}: {size:,} bytes; bpe-spark reads model files of at most {MAX_FILE_BYTES:,} bytes"
        )


def check_count(count: int, where: str, what: str) -> None:
    """Refuse more than ``MAX_TOKENS`` entries (``what``: "vocabulary entries", "merges"...)."""
    if count > MAX_TOKENS:
        raise ModelFormatError(f"{where}: {count:,} {what}; at most {MAX_TOKENS:,} are allowed")


def check_token(token: bytes | str, where: str) -> None:
    """Refuse a token of more than ``MAX_TOKEN_BYTES`` UTF-8 bytes."""
    size = len(token.encode("utf-8") if isinstance(token, str) else token)
    if size > MAX_TOKEN_BYTES:
        shown = token[:20]
        raise ModelFormatError(
            f"{where}: the token {shown!r}... has {size:,} bytes; tokens of at most "
            f"{MAX_TOKEN_BYTES} bytes are allowed"
        )


def check_pattern(pattern: str, where: str) -> None:
    """Refuse a regex of more than ``MAX_PATTERN_CHARS`` characters."""
    if len(pattern) > MAX_PATTERN_CHARS:
        raise ModelFormatError(
            f"{where}: the regex has {len(pattern):,} characters; at most {MAX_PATTERN_CHARS:,} are allowed"
        )


class Fields:
    """The fields of one model file: typed access, and errors naming the file and the field."""

    def __init__(self, path):
        self.path = Path(path)

    def where(self, field: str) -> str:
        """``path: field 'field'``: the place the ``check_*`` functions name."""
        return f"{self.path}: field '{field}'"

    def error(self, field: str, message: str) -> ModelFormatError:
        """``path: field 'field': message``."""
        return ModelFormatError(f"{self.where(field)}: {message}")

    def bad(self, field: str, value: Any, expected: str) -> ModelFormatError:
        """``path: field 'field' is <value>; expected <expected>``."""
        return ModelFormatError(
            f"{self.path}: field '{field}' is {show(value)}; expected {expected}"
        )

    def top(self, data: Any) -> dict:
        """The file's top level, which must be a JSON object."""
        if not isinstance(data, dict):
            raise ModelFormatError(f"{self.path}: expected a JSON object at the top level")
        return data

    def get(self, obj: dict, key: str, types, *, within: str = "", optional: bool = False):
        """``obj[key]``, of one of ``types`` (a type or a tuple of types; bool is never an int).

        ``within`` is the field path of ``obj`` itself. ``optional``: a missing key or null gives
        None; otherwise both are errors.
        """
        field = f"{within}.{key}" if within else key
        if key not in obj or (obj[key] is None and optional):
            if optional:
                return None
            raise ModelFormatError(f"{self.path}: field '{field}' is missing")
        value = obj[key]
        if not isinstance(value, types) or (
            isinstance(value, bool) and bool not in _as_tuple(types)
        ):
            raise self.bad(field, value, _kinds(types))
        return value

    def choice(
        self, obj: dict, key: str, choices: Collection, *, within: str = "", optional: bool = False
    ):
        """``obj[key]``, which must be one of ``choices`` (or, if ``optional``, missing or null)."""
        field = f"{within}.{key}" if within else key
        if key not in obj and not optional:
            raise ModelFormatError(f"{self.path}: field '{field}' is missing")
        value = obj.get(key)
        allowed = ((None,) if optional else ()) + tuple(choices)
        if value not in allowed:
            raise self.bad(field, value, _choices(allowed))
        return value


def require_all_bytes(
    tokens: Container[bytes], where: str, *, show_byte: Callable[[bytes], Any] | None = None
) -> None:
    """Raise a :class:`ModelFormatError` for ``where`` (a file, a file and field) unless ``tokens``
    holds every single byte; the missing ones are listed as ``show_byte`` gives them (default:
    their values)."""
    missing = missing_bytes(tokens)
    if missing:
        listed = [show_byte(bytes([b])) for b in missing[:8]] if show_byte else missing[:8]
        raise ModelFormatError(
            f"{where}: lacks single bytes {listed}; a byte-level vocabulary needs all 256"
        )
