"""The text rule: how input bytes (and ``str`` holding lone surrogates) become document text,
the same for every reader and engine, and how its replacements are counted.

The rule. Bytes are decoded as UTF-8; each *maximal subpart* of an ill-formed sequence becomes
one U+FFFD (the Unicode Standard's recommended practice, chapter 3, "U+FFFD Substitution of
Maximal Subparts"). That is Python's ``bytes.decode("utf-8", "replace")`` and Spark's
``make_valid_utf8`` (the test suite checks the two agree on crafted and random bytes):
``b"\\xed\\xa0\\x80"`` (a surrogate, encoded) gives three U+FFFD, ``b"\\xf0\\x9f\\x98"`` (a
truncated sequence) one. In ``str`` input every lone surrogate (U+D800..U+DFFF, as a JSON
``"\\ud800"`` escape gives) becomes one U+FFFD. Nothing else changes: a BOM, ``\\r``, NUL and
every valid character are kept as they are.

Counting. A *replaced sequence* is one U+FFFD the rule inserted (a U+FFFD already in the input
is text, not counted); an *affected document* holds at least one. Valid input (nearly all of
it) takes the fast path: one strict decode, nothing counted; an Arrow column of it goes to the
compiled pretokenizer as its buffers (:func:`utf8_buffers`), with no ``str`` per text.

>>> decode_counted(b"a\\xed\\xa0\\x80b")
('a\\ufffd\\ufffd\\ufffdb', 3)
>>> clean_counted("x\\ud800")
('x\\ufffd', 1)
"""

from __future__ import annotations

import re

REPLACEMENT = "\ufffd"
_REPLACEMENT_UTF8 = REPLACEMENT.encode("utf-8")
_SURROGATE = re.compile("[\ud800-\udfff]")
TEXT_RULE = (
    "invalid UTF-8: one U+FFFD per maximal invalid subpart (bytes.decode('utf-8', 'replace'), "
    "Spark's make_valid_utf8); lone surrogates in str: one U+FFFD each"
)


def decode_counted(data: bytes) -> tuple[str, int]:
    """``data`` as text by the rule, and the number of U+FFFD the rule inserted.

    >>> decode_counted(b"ok \\xef\\xbf\\xbd"), decode_counted(b"\\xc0\\xaf\\xff")
    (('ok \\ufffd', 0), ('\\ufffd\\ufffd\\ufffd', 3))
    """
    try:
        return data.decode("utf-8"), 0
    except UnicodeDecodeError:
        text = data.decode("utf-8", "replace")
    # subtle: the bytes EF BF BD always decode to one U+FFFD of the input (0xEF is a lead byte,
    # so no ill-formed subpart can swallow it), so the rule inserted the rest.
    return text, text.count(REPLACEMENT) - data.count(_REPLACEMENT_UTF8)


def decode_lines(data: bytes) -> tuple[list[str], int, int]:
    """The documents of ``data`` (which ends with ``\\n``): lines cut at ``\\n`` only, each
    keeping it; and the replaced sequences and affected documents among them.

    >>> decode_lines(b"a\\r\\n\\xffb\\n\\n")
    (['a\\r\\n', '\\ufffdb\\n', '\\n'], 1, 1)
    """
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        return _decode_lines_counted(data)
    # split on "\n" only (str.splitlines would also cut at \r, \x0b, \x1c, U+2028...)
    parts = text.split("\n")
    parts.pop()  # data ends with "\n": the last part is empty
    return [part + "\n" for part in parts], 0, 0


def _decode_lines_counted(data: bytes) -> tuple[list[str], int, int]:
    lines, replaced, affected = [], 0, 0
    parts = data.split(b"\n")
    parts.pop()
    for part in parts:
        line, count = decode_counted(part)
        lines.append(line + "\n")
        if count:
            replaced += count
            affected += 1
    return lines, replaced, affected


def clean_counted(text: str) -> tuple[str, int]:
    """``text`` with each lone surrogate replaced by U+FFFD, and how many there were.

    >>> clean_counted("ok"), clean_counted("\\udc80\\ud83d")
    (('ok', 0), ('\\ufffd\\ufffd', 2))
    """
    if text.isascii() or _SURROGATE.search(text) is None:
        return text, 0
    return _SURROGATE.subn(REPLACEMENT, text)


def clean(text: str) -> str:
    """``text`` by the rule (lone surrogates -> U+FFFD); ``text`` itself when it has none."""
    return clean_counted(text)[0]


BAD_INPUT_POLICIES = ("error", "skip")  # --on-bad-input: stop at the first bad input, or skip and count it


def utf8_buffers(column) -> tuple | None:
    """``(data, int64 offsets)`` of an Arrow (large) string or binary column whose bytes are all
    valid UTF-8: text ``i`` is ``data[offsets[i]:offsets[i + 1]]`` (a slice's own rows too), what
    the compiled encoder and counter take (``encode_utf8``, ``add_utf8``); None when some bytes
    are not valid UTF-8 (the rule above then decodes them, text by text).

    >>> import pyarrow as pa
    >>> data, offsets = utf8_buffers(pa.array(["ab", "", "cd"]).slice(1))
    >>> bytes(data)[offsets[0]:offsets[-1]], offsets.tolist()
    (b'cd', [2, 2, 4])
    >>> utf8_buffers(pa.array([b"\\xff"]))
    """
    as_string = utf8_view(column)
    return None if as_string is None else string_buffers(as_string)


def string_buffers(strings) -> tuple:
    """``(data, int64 offsets)`` of an Arrow (large) string array as it is, its UTF-8 not checked
    again (:func:`utf8_view` checked it)."""
    import numpy as np
    import pyarrow as pa

    _, offsets, data = strings.buffers()
    start, wide = strings.offset, pa.types.is_large_string(strings.type)
    positions = np.frombuffer(offsets, dtype=np.int64 if wide else np.int32)[start:start + len(strings) + 1]
    return (data if data is not None else b""), positions.astype(np.int64)


def utf8_view(column):
    """An Arrow (large) string or binary column as (large) string when all its bytes are valid
    UTF-8 (Arrow checks them at once, no copy), else None: the fast path of the rule.

    >>> import pyarrow as pa
    >>> utf8_view(pa.array([b"ok"], pa.large_binary())).type, utf8_view(pa.array([b"\\xff"]))
    (DataType(large_string), None)
    """
    import pyarrow as pa

    large = pa.types.is_large_string(column.type) or pa.types.is_large_binary(column.type)
    as_string = column.view(pa.large_string() if large else pa.string())
    try:
        as_string.validate(full=True)
    except pa.ArrowInvalid:
        return None
    return as_string


def check_bad_input_policy(on_bad_input: str) -> str:
    if on_bad_input not in BAD_INPUT_POLICIES:
        from bpe_spark.errors import ConfigError

        raise ConfigError(f"on_bad_input must be one of {BAD_INPUT_POLICIES}, got {on_bad_input!r}")
    return on_bad_input


class InputTally:
    """Running totals of what reading did to the input: ``replaced`` sequences and ``affected``
    documents (the text rule), ``skipped_files`` (corrupt, with ``on_bad_input="skip"``).

    >>> tally = InputTally()
    >>> tally.add_bytes(b"\\xff\\xfe"), tally.add_bytes(b"ok")
    ('\\ufffd\\ufffd', 'ok')
    >>> tally.replaced, tally.affected
    (2, 1)
    """

    __slots__ = ("affected", "replaced", "skipped_files")

    def __init__(self) -> None:
        self.replaced = 0
        self.affected = 0
        self.skipped_files = 0

    def count(self, replaced: int, affected: int = 1) -> None:
        if replaced:
            self.replaced += replaced
            self.affected += affected

    def add_bytes(self, data: bytes) -> str:
        text, replaced = decode_counted(data)
        self.count(replaced)
        return text

    def add_str(self, text: str) -> str:
        cleaned, replaced = clean_counted(text)
        self.count(replaced)
        return cleaned

    def as_stats(self) -> dict[str, int]:
        return {"replaced_sequences": self.replaced, "affected_documents": self.affected,
                "skipped_files": self.skipped_files}
