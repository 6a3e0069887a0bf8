"""One JSON Lines record too long to hold as one ``str``: a line read as a
:class:`~bpe_spark.bpe.long_documents.LongDocument` (longer than ``LONG_DOCUMENT_BYTES``), whose
text field is handed out in pieces, never as one string.

Two passes over the line's text pieces (the line is read again, never held as text):

1. :func:`scan_record` copies the record with each string longer than ``LONG_STRING_CHARS``
   replaced by a placeholder (a random nonce and the string's index): the *skeleton*, which
   ``json.loads`` parses for the record's shape (not an object, no text field, a number, a
   duplicate key: the last wins) exactly as it parses the whole line. Each long string's body
   is checked on the way by ``json``'s own string scanner, in chunks cut where no escape is split
   (a ``\\uXXXX`` escape, and a high surrogate's escape kept with the 6 characters after it,
   which may be its low surrogate), and its lone surrogates counted.
2. :class:`JsonText` hands out one long string (the record's text) in pieces: decoded again
   chunk by chunk with the same cuts, lone surrogates replaced (the rule of
   :mod:`bpe_spark.bpe.text`), so the pieces join to what ``json.loads`` gives for the whole line.
   It is a LongDocument: the counters and encoders take it piece by piece
   (:func:`~bpe_spark.bpe.long_documents.count_pieces`).

A byte-order mark opening the line is dropped, as :func:`bpe_spark.spark.read.jsonl.parse_record` does.

>>> line = LongDocument(bytearray(b'{"id": 1, "text": "a\\\\nb\\\\ud83d\\\\ude00c"}\\n'), piece_bytes=3)
>>> scan = scan_record(line.pieces(), long_chars=4)
>>> json.loads(scan.skeleton)["text"] == scan.placeholder(0), "".join(JsonText(line, *scan.longs[0][:2]).pieces())
(True, 'a\\nb😀c')
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field

from bpe_spark.bpe.long_documents import LONG_DOCUMENT_BYTES, LongDocument
from bpe_spark.bpe.text import clean_counted

LONG_STRING_CHARS = 1 << 16  # a string longer than this is not copied into the skeleton
_BODY = re.compile(r'[^"\\]*(?:\\[\s\S][^"\\]*)*')  # a string's body up to its closing quote
_SCAN_STRING = json.decoder.scanstring  # what json.loads runs on a string (strict: no control character)


class BadString(ValueError):
    """A long string's body is not valid JSON; the message says where, as ``json.loads`` would."""


def escape_cut(body: str) -> int:
    """The end of the longest prefix of ``body`` (a JSON string's body, from an escape boundary)
    that splits no escape: before a trailing incomplete escape, or before a ``\\uD800``-``\\uDBFF``
    escape less than 6 characters from the end (its low surrogate may follow).

    >>> [escape_cut(s) for s in ("ab", "a\\\\", "a\\\\\\\\", "a\\\\u00", "a\\\\ud83d", "a\\\\ud83dxxxxxx", "a\\\\u0041")]
    [2, 1, 3, 1, 1, 13, 7]
    """
    n = len(body)
    for i in range(max(0, n - 11), n):
        if body[i] != "\\" or not _escape_starts(body, i):
            continue
        if i + 2 > n:
            return i
        if body[i + 1] == "u" and (i + 6 > n or (i + 12 > n and body[i + 2:i + 4].lower() in ("d8", "d9", "da", "db"))):
            return i
    return n


def _escape_starts(body: str, i: int) -> bool:
    """Whether the backslash at ``i`` starts an escape (an even number of backslashes before it)."""
    j = i
    while j > 0 and body[j - 1] == "\\":
        j -= 1
    return (i - j) % 2 == 0


def decode_body(body: str, at: int = 0) -> tuple[str, int]:
    """A string body cut by :func:`escape_cut` (or whole) as text, lone surrogates replaced by
    U+FFFD, and how many; :class:`BadString` (its place counted from ``at``) when not JSON."""
    try:
        text, _ = _SCAN_STRING(body + '"', 0, True)
    except json.JSONDecodeError as exc:
        where = at + exc.pos
        raise BadString(f"{exc.msg}: line 1 column {where + 1} (char {where})") from None
    return clean_counted(text)


@dataclass
class RecordScan:
    """The record's skeleton and its long strings: ``(start, end, lone surrogates)`` of each
    body, in characters of the line's text (after a byte-order mark)."""

    skeleton: str = ""
    longs: list[tuple[int, int, int]] = field(default_factory=list)
    nonce: str = field(default_factory=lambda: os.urandom(16).hex())

    def placeholder(self, index: int) -> str:
        """The skeleton's stand-in for long string ``index``, as ``json.loads`` gives it."""
        return f"\x00{self.nonce}:{index}"

    def long_index(self, value) -> int | None:
        """The index of the long string ``value`` (from the parsed skeleton) stands for, or None."""
        prefix = f"\x00{self.nonce}:"
        if isinstance(value, str) and value.startswith(prefix) and value[len(prefix):].isdigit():
            index = int(value[len(prefix):])
            return index if index < len(self.longs) else None
        return None


def _without_bom(pieces: Iterable[str]) -> Iterator[str]:
    first = True
    for piece in pieces:
        if first and piece:
            piece, first = piece.removeprefix("\ufeff"), False
        yield piece


def scan_record(pieces: Iterable[str], long_chars: int | None = None, check: bool = True) -> RecordScan:
    """The first pass (see the module docstring) over the text pieces of one line, strings
    longer than ``long_chars`` (default ``LONG_STRING_CHARS``) left out of the skeleton; raises
    :class:`BadString` when a long string's body is not valid JSON (``check=False``: long
    strings are not checked nor their surrogates counted, for a look at the fields only)."""
    long_chars = LONG_STRING_CHARS if long_chars is None else long_chars
    scan = RecordScan()
    parts: list[str] = []
    buf, base = "", 0  # text not consumed yet, and its offset in the line
    in_string = False
    start = short_len = surrogates = 0
    short: list[str] = []
    is_long = False
    for piece in _with_end(_without_bom(pieces)):
        final = piece is None
        buf += piece or ""
        pos = 0
        while pos < len(buf):
            if not in_string:
                quote = buf.find('"', pos)
                if quote < 0:
                    parts.append(buf[pos:])
                    pos = len(buf)
                    break
                parts.append(buf[pos:quote + 1])
                pos, in_string = quote + 1, True
                start, short, short_len, is_long, surrogates = base + pos, [], 0, False, 0
                continue
            end = _BODY.match(buf, pos).end()
            closed = end < len(buf) and buf[end] == '"'
            if not closed and final:  # unterminated: the skeleton says so
                parts.append("".join(short) + buf[pos:])
                pos = len(buf)
                break
            cut = end if closed else pos + escape_cut(buf[pos:end])
            body = buf[pos:cut]
            if not is_long and short_len + len(body) <= long_chars:
                short.append(body)
                short_len += len(body)
            else:
                if check:
                    chunk, at = (body, base + pos) if is_long else ("".join(short) + body, start)
                    surrogates += decode_body(chunk, at)[1]
                short, is_long = [], True
            if not closed:
                pos = cut
                break
            if is_long:
                scan.longs.append((start, base + end, surrogates))
                parts.append(json.dumps(scan.placeholder(len(scan.longs) - 1))[1:])  # with its closing quote
            else:
                parts.append("".join(short) + '"')
            pos, in_string = end + 1, False
        buf, base = buf[pos:], base + pos
    scan.skeleton = "".join(parts)
    return scan


def _with_end(pieces: Iterable[str]) -> Iterator[str | None]:
    yield from pieces
    yield None


class JsonText(LongDocument):
    """The body of one long string of a :class:`LongDocument` line (``start:end`` of the line's
    text, a byte-order mark dropped), as text in pieces (the second pass of the module
    docstring). ``text_bytes``: the UTF-8 size of the text, once the pieces are read."""

    __slots__ = ("end", "line", "start", "text_bytes")

    def __init__(self, line: LongDocument, start: int, end: int):
        super().__init__()
        self.line, self.start, self.end = line, start, end
        self.text_bytes = 0

    def __len__(self) -> int:
        return self.end - self.start  # characters of the JSON body: about the text's size

    def pieces(self) -> Iterator[str]:
        offset, carry, size = 0, "", 0
        for piece in _without_bom(self.line.pieces()):
            lo, offset = offset, offset + len(piece)
            if offset <= self.start:
                continue
            body = carry + piece[max(0, self.start - lo):self.end - lo]
            cut = len(body) if offset >= self.end else escape_cut(body)
            carry = body[cut:]
            if cut:
                text = decode_body(body[:cut])[0]
                size += len(text.encode("utf-8", "surrogatepass"))
                yield text
            if offset >= self.end:
                break
        self.text_bytes = size


def read_head_line(fh, long_bytes: int = LONG_DOCUMENT_BYTES) -> bytes | LongDocument:
    """The next line of the binary file ``fh`` (its ``\\n`` kept; ``b""`` at the end): its bytes,
    or, past ``long_bytes``, a :class:`LongDocument` holding them (one copy, never a ``str``)."""
    line = fh.readline(long_bytes + 1)
    if len(line) <= long_bytes or line.endswith(b"\n"):
        return line
    data = bytearray(line)
    while chunk := fh.readline(8 << 20):
        data += chunk
        if chunk.endswith(b"\n"):
            break
    return LongDocument(data)


def skeleton_of(line: LongDocument) -> str:
    """A long line's skeleton, for a look at a record's fields (its long strings not checked)."""
    return scan_record(line.pieces(), check=False).skeleton
