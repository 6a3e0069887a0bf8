"""Documents too long to hold as one ``str``: kept as their bytes, read as text in pieces.

A 100 MB line as a Python ``str`` takes up to 400 MB (4 bytes per character once one character
is outside the Basic Multilingual Plane), and its pretokens as a list several GB. A
:class:`LongDocument` keeps the document's UTF-8 bytes (read in place into a ``bytearray``) and
hands them out as text in pieces of about ``PIECE_BYTES``, each decoded by the rule of
:mod:`bpe_spark.bpe.text`. The pieces are cut before a byte that is not a UTF-8 continuation byte,
so no character and no ill-formed sequence is split: the pieces decode to the whole document's
text, with the same replacements.

The compiled pretokenizer (``bpe_spark.native._fastenc``, ``COMPILED_PRESETS``) counts and encodes such a
document piece by piece (:func:`count_pieces`, :func:`encode_pieces`): each call takes the pretokens
that no later text can change and returns the rest, to be prepended to the next piece, so the
pretokens and ids equal those of the whole text. Other pretokenizers get the whole text
(:meth:`LongDocument.text`).

>>> doc = LongDocument(bytearray("añb\\n".encode()), piece_bytes=2)
>>> list(doc.pieces()), doc.text(), len(doc)
(['a', 'ñb', '\\n'], 'añb\\n', 5)
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np

from bpe_spark.bpe.text import decode_counted

PIECE_BYTES = 1 << 20
LONG_DOCUMENT_BYTES = 16 << 20  # lines longer than this are read as a LongDocument
# the compiled encoder's pretoken cache grows to at most this while it encodes a long document
# (the most frequent pretokens come first, so the cache still answers most of them)
LONG_CACHE_ENTRIES = 1 << 16


class LongDocument:
    """One document as its UTF-8 (or not quite UTF-8) bytes: held (``data``), or a byte range
    of a local file read again when the pieces are read (:meth:`in_file`), ``newline_added``
    when the file's last line lacked its ``\\n``. ``tally`` (a
    :class:`~bpe_spark.bpe.text.InputTally`), when set, counts the text rule's replacements the first
    time the pieces are read."""

    __slots__ = ("_range", "data", "piece_bytes", "tally")

    def __init__(self, data: bytes | bytearray = b"", tally=None, piece_bytes: int = PIECE_BYTES):
        self.data = data
        self.tally = tally
        self.piece_bytes = piece_bytes
        self._range: tuple[str, int, int, bool] | None = None

    @classmethod
    def in_file(cls, path: str, start: int, end: int, *, newline_added: bool = False) -> LongDocument:
        """The document of bytes ``start:end`` of the file at ``path`` (plus a ``\\n``)."""
        document = cls()
        document._range = (path, start, end, newline_added)
        return document

    def __len__(self) -> int:
        if self._range is None:
            return len(self.data)
        _, start, end, newline_added = self._range
        return end - start + newline_added

    def _blocks(self) -> Iterator[bytes]:
        if self._range is None:
            view = memoryview(self.data)
            for start in range(0, len(view), self.piece_bytes):
                yield bytes(view[start : start + self.piece_bytes])
            view.release()
            return
        path, position, end, newline_added = self._range
        with open(path, "rb") as fh:
            fh.seek(position)
            while position < end:
                block = fh.read(min(self.piece_bytes, end - position))
                if not block:
                    raise OSError(f"{path} is shorter than when it was read ({position} < {end} bytes)")
                position += len(block)
                yield block
        if newline_added:
            yield b"\n"

    def pieces(self) -> Iterator[str]:
        """The document's text in pieces of about ``piece_bytes`` bytes, in order."""
        carry, replaced = b"", 0
        for block in self._blocks():
            data = carry + block
            cut = safe_cut(data)
            carry = data[cut:]
            if cut:
                text, count = decode_counted(data[:cut])
                replaced += count
                yield text
        if carry:
            text, count = decode_counted(carry)
            replaced += count
            yield text
        if self.tally is not None:
            self.tally.count(replaced)
            self.tally = None  # counted once

    def text(self) -> str:
        """The whole text (for pretokenizers that cannot take it in pieces)."""
        return "".join(self.pieces())


def safe_cut(data: bytes) -> int:
    """The end of the longest prefix of ``data`` that no byte after ``data`` can join to a
    UTF-8 sequence, valid or not: before the last lead byte among the last four bytes (its
    sequence may go on), else all of it (an ASCII byte ends any sequence; four continuation
    bytes end one too)."""
    n = len(data)
    for cut in range(n - 1, max(-1, n - 5), -1):
        if data[cut] & 0xC0 != 0x80:
            return n if data[cut] < 0x80 else cut
    return n


def _stream(step, pieces: Iterator[str]) -> None:
    """Feed ``pieces`` to a compiled ``step(text, final) -> tail``, each call given the last
    call's tail followed by the text that came since.

    subtle: a pretoken may be longer than a piece (a superbpe gap runs to the next digit, run of
    punctuation or of spaces, possibly the whole document), and then comes back whole as the tail.
    Calling again only once as much new text has come keeps the rescans of such a tail linear in
    all, instead of quadratic in its length."""
    tail, pending, size = "", [], 0
    for piece in pieces:
        pending.append(piece)
        size += len(piece)
        if size >= len(tail):
            tail = step(tail + "".join(pending), False)
            pending, size = [], 0
    step(tail + "".join(pending), True)


def count_pieces(counter, pieces: Iterator[str]) -> None:
    """Count the pretokens of one document given in pieces with a compiled ``PretokenCounter``."""
    _stream(counter.add_piece, pieces)


def encode_pieces(encoder, pieces: Iterator[str]) -> np.ndarray:
    """The int32 ids of one document given in pieces, by a compiled ``Encoder``: one buffer
    that grows in place (no list of ids, no second copy). The encoder's pretoken cache takes no
    new entry once it holds ``LONG_CACHE_ENTRIES``: one document's pretokens would fill it to its
    full size (about 0.9x a 100 MB document), and the ids are the same either way."""
    out = bytearray()
    _stream(lambda text, final: encoder.encode_piece(text, final, out, LONG_CACHE_ENTRIES), pieces)
    return np.frombuffer(out, dtype=np.int32)
