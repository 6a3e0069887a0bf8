"""Paragraph documents of local text files, read in byte-range splits by the Python tasks
(:mod:`bpe_spark.spark.read.text_splits`, ``document="paragraph"``), with the documents of the
whole files (the rule: :mod:`bpe_spark.spark.read.documents`; a document is a maximal run of
non-empty lines, each with its ``\\n``, one added to a file's last line that lacks it).

A paragraph *starts* at a byte that is not ``\\n`` and follows two ``\\n`` (the file's start
counts as two): the start of a non-empty line after an empty one, or the file's first non-empty
line. A split ``[start, end)`` owns the paragraphs that start inside it: it reads from the first
paragraph start at or after ``start`` to the first at or after ``end`` (:func:`owned_chunks`:
past ``end`` to finish its last paragraph; the empty lines after it hold no document). So a
split edge anywhere (inside the ``\\n\\n`` separator, a run of empty lines, a ``\\r`` line, a
paragraph) gives the whole files' documents, each once. A compressed file is one split.

>>> paragraph_documents(b"\\n\\na\\nb\\n\\n\\n\\r\\n\\nc").to_pylist()
[b'a\\nb\\n', b'\\r\\n', b'c\\n']
"""

from __future__ import annotations

import re
from collections.abc import Iterator

import numpy as np
import pyarrow as pa

from bpe_spark.bpe.long_documents import LongDocument

_START = re.compile(rb"\n\n[^\n]")  # a paragraph starts at the third byte
_PARAGRAPH = re.compile(rb"[^\n](?:[^\n]|\n(?=[^\n]))*")  # a paragraph without its last "\n"


def paragraph_start(fh, position: int, read_bytes: int = 8 << 20) -> int:
    """The first paragraph start at or after ``position`` in the binary file ``fh`` (its end
    when there is none)."""
    low = max(0, position - 2)
    fh.seek(low)
    buf = b"\n" * (2 - (position - low)) + fh.read(read_bytes)  # the file's start counts as "\n\n"
    base = low - (2 - (position - low))  # the offset of buf[0]
    while True:
        found = _START.search(buf)
        if found:
            return base + found.start() + 2
        chunk = fh.read(read_bytes)
        if not chunk:
            return base + len(buf)
        base += len(buf) - 2
        buf = buf[-2:] + chunk


def owned_chunks(path: str, start: int, end: int, read_bytes: int = 8 << 20) -> Iterator[tuple[int, bytes]]:
    """``(file offset, bytes)`` of the split ``[start, end)`` of the file at ``path``: from its
    first paragraph start to the first paragraph start at or after ``end``."""
    with open(path, "rb") as fh:
        first = paragraph_start(fh, start, read_bytes)
        if first >= end:
            return
        stop = paragraph_start(fh, end, read_bytes)
        fh.seek(first)
        position = first
        while position < stop and (chunk := fh.read(min(read_bytes, stop - position))):
            yield position, chunk
            position += len(chunk)


def paragraph_blocks(chunks: Iterator[tuple[int | None, bytes]], long_bytes: int) -> Iterator:
    """The chunks' paragraphs as blocks: Arrow binary arrays of documents
    (:func:`paragraph_documents`), a paragraph longer than ``long_bytes`` alone as a
    :class:`~bpe_spark.bpe.long_documents.LongDocument` (its bytes held: one copy)."""
    carry = bytearray()  # from the end of the last whole paragraph
    for _, chunk in chunks:
        searched = max(0, len(carry) - 1)
        carry += chunk
        cut = carry.rfind(b"\n\n", searched)
        if cut < 0:
            continue
        block, carry = carry, bytearray(carry[cut + 2:])
        del block[cut + 2:]
        yield from _documents(block, long_bytes)
    if carry:
        yield from _documents(carry, long_bytes)


def _documents(block: bytearray, long_bytes: int) -> Iterator:
    if len(block) <= long_bytes:
        documents = paragraph_documents(bytes(block))
        if len(documents):
            yield documents
        return
    spans = [match.span() for match in _PARAGRAPH.finditer(block)]
    if len(spans) == 1 and spans[0][1] - spans[0][0] > long_bytes:  # one paragraph: its bytes, no copy
        low, high = spans[0]
        del block[high:]
        del block[:low]
        block += b"\n"
        yield LongDocument(block)
        return
    group_start = None
    for low, high in spans:
        if high - low > long_bytes:
            if group_start is not None:
                yield paragraph_documents(bytes(block[group_start:low]))
                group_start = None
            yield LongDocument(bytearray(block[low:high]) + b"\n")
        elif group_start is None:
            group_start = low
    if group_start is not None:
        yield paragraph_documents(bytes(block[group_start:]))


def paragraph_documents(data: bytes) -> pa.BinaryArray:
    """The paragraphs of ``data`` (whole ones), each with its last ``\\n``, as an Arrow binary array."""
    spans = [match.span() for match in _PARAGRAPH.finditer(data)]
    if not spans:
        return pa.array([], pa.binary())
    joined = b"\n".join(data[low:high] for low, high in spans) + b"\n"
    offsets = np.zeros(len(spans) + 1, dtype=np.int32)
    np.cumsum([high - low + 1 for low, high in spans], out=offsets[1:])
    return pa.Array.from_buffers(pa.binary(), len(spans), [None, pa.py_buffer(offsets), pa.py_buffer(joined)])
