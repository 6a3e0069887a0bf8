"""Documents too long to hold as one ``str``: kept as their bytes, read as text in pieces.

A 100 MB line as a Python ``str`` takes up to 400 MB (4 bytes per character once one character
is outside the Basic Multilingual Plane), and its pretokens as a list several GB. A
:class:`LongDocument` keeps the document's UTF-8 bytes (read in place into a ``bytearray``) and
hands them out as text in pieces of about ``PIECE_BYTES``, each decoded by the rule of
:mod:`bpe_spark.text`. The pieces are cut before a byte that is not a UTF-8 continuation byte,
so no character and no ill-formed sequence is split: the pieces decode to the whole document's
text, with the same replacements.

The compiled pretokenizer (``bpe_spark._fastenc``, gpt2 / cl100k) counts and encodes such a
document piece by piece (:func:`count_pieces`, :func:`encode_pieces`): each call takes the pretokens
that no later text can change and returns the rest, to be prepended to the next piece, so the
pretokens and ids equal those of the whole text. Other pretokenizers get the whole text
(:meth:`LongDocument.text`).

>>> doc = LongDocument(bytearray("añb\\n".encode()), piece_bytes=2)
>>> list(doc.pieces()), doc.text(), len(doc)
(['a', 'ñ', 'b\\n'], 'añb\\n', 5)
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np

from bpe_spark.text import decode_counted

PIECE_BYTES = 1 << 20
LONG_DOCUMENT_BYTES = 16 << 20  # lines longer than this are read as a LongDocument


class LongDocument:
    """One document as its UTF-8 (or not quite UTF-8) bytes; ``tally`` (a
    :class:`~bpe_spark.text.InputTally`), when given, counts the text rule's replacements the
    first time the pieces are read."""

    __slots__ = ("data", "piece_bytes", "tally")

    def __init__(self, data: bytes | bytearray, tally=None, piece_bytes: int = PIECE_BYTES):
        self.data = data
        self.tally = tally
        self.piece_bytes = piece_bytes

    def __len__(self) -> int:
        return len(self.data)

    def pieces(self) -> Iterator[str]:
        """The document's text in pieces of about ``piece_bytes`` bytes, in order."""
        view = memoryview(self.data)
        n, start, replaced = len(view), 0, 0
        while start < n:
            end = min(n, start + self.piece_bytes)
            end = _character_boundary(view, start, end)
            text, count = decode_counted(bytes(view[start:end]))
            replaced += count
            yield text
            start = end
        view.release()
        if self.tally is not None:
            self.tally.count(replaced)
            self.tally = None  # counted once

    def text(self) -> str:
        """The whole text (for pretokenizers that cannot take it in pieces)."""
        return "".join(self.pieces())


def _character_boundary(view: memoryview, start: int, end: int) -> int:
    """A cut at or near ``end`` (after ``start``) that splits no UTF-8 sequence, valid or not:
    just before a byte that is not a continuation byte (0x80-0xBF), or after three continuation
    bytes in a row (no sequence start is that close)."""
    n = len(view)
    if end >= n:
        return n
    for cut in range(end, max(start, end - 3), -1):
        if view[cut] & 0xC0 != 0x80:
            return cut
    for cut in range(end + 1, min(n, end + 3)):
        if view[cut] & 0xC0 != 0x80:
            return cut
    return min(n, end + 3)


def count_pieces(counter, pieces: Iterator[str]) -> None:
    """Count the pretokens of one document given in pieces with a compiled ``PretokenCounter``."""
    tail = ""
    for piece in pieces:
        tail = counter.add_piece(tail + piece, False)
    counter.add_piece(tail, True)


def encode_pieces(encoder, pieces: Iterator[str]) -> np.ndarray:
    """The int32 ids of one document given in pieces, by a compiled ``Encoder``: one buffer
    that grows in place (no list of ids, no second copy)."""
    out = bytearray()
    tail = ""
    for piece in pieces:
        tail = encoder.encode_piece(tail + piece, False, out)
    encoder.encode_piece(tail, True, out)
    return np.frombuffer(out, dtype=np.int32)
