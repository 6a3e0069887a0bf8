"""Text files read by the Python tasks themselves, one document per line.

Counting pretokens needs nothing from the JVM but the files' bytes. Spark's text reader turns
each line into a JVM string, then into an Arrow batch for Python: on en_books that hand-off and
the JVM's cold start cost more than the counting. When ``read_documents`` reads local text
files line by line where every task sees them (a local master, or ``shared_input=True``: a file
system every node mounts alike), it tags the DataFrame with their list (:func:`source_of`); counting then
plans byte-range splits of those files on the driver and lets each Python task read its split
(``plan_splits`` / ``iter_lines``), with the same documents as the Spark reader gives: lines cut
at ``\\n`` only, each keeping its ``\\n`` (one is added to a last line that lacks it).

A split owns the lines that start inside it: a task seeks to its start, skips the rest of a line
begun before it, and reads on past its end to finish its last line. Bytes become text by the
rule of :mod:`bpe_spark.bpe.text` (as ``make_valid_utf8`` does on Spark's reader path), counted in
an :class:`~bpe_spark.bpe.text.InputTally`. Compressed files (``.gz``, ``.bz2``) are one split each;
a corrupt or truncated one raises :class:`~bpe_spark.errors.BadInputError` naming it, or, with
``on_bad_input="skip"``, ends at the damage (the documents before it are kept, as Spark's
``ignoreCorruptFiles`` does) and counts as a skipped file. Other sources (HDFS, S3, other codecs, transformed DataFrames)
keep Spark's reader. Encoding reads them the same way (``encode_dataset``), in the same document
order as through Spark (files in URI order, then lines), so ``doc_id`` does not change.
"""

from __future__ import annotations

import bz2
import gzip
import json
import os
import zlib
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from urllib.parse import unquote, urlparse

import numpy as np
import pyarrow as pa

from bpe_spark.errors import BadInputError, current_interface, interface, option
from bpe_spark.bpe.long_documents import LONG_DOCUMENT_BYTES, LongDocument
from bpe_spark.bpe.long_records import read_head_line, skeleton_of
from bpe_spark.bpe.text import InputTally, decode_counted, decode_lines, utf8_view
from bpe_spark.spark.read import paragraphs

_COMPRESSED = {".gz": gzip.open, ".bz2": bz2.open}
_PLAIN_SUFFIXES_REFUSED = (".deflate", ".lz4", ".snappy", ".zst", ".zstd", ".xz", ".lzo", ".br")
_READ_BYTES = 8 << 20
MAX_SPLIT_BYTES = 128 << 20  # spark.sql.files.maxPartitionBytes' default
MIN_SPLIT_BYTES = 4 << 20  # spark.sql.files.openCostInBytes' default, as a floor


@dataclass(frozen=True)
class TextSource:
    """Local text files read one document per line: their paths, and the URIs Spark names them
    by (``input_file_name()``), in URI order, which is Spark's input order."""

    files: tuple[str, ...]
    uris: tuple[str, ...] = ()
    on_bad_input: str = "error"  # a corrupt compressed file: "error" or "skip" (bpe_spark.bpe.text)
    paragraphs: bool = False  # one document per paragraph (document="paragraph"), not per line


@dataclass(frozen=True)
class Split:
    path: str
    start: int
    end: int  # exclusive; -1: the whole (compressed) file
    uri: str = ""  # the file as Spark names it (input_file_name()): encoding's ordering key
    interface: str = field(default_factory=current_interface)  # planned on the driver: its messages' words
    paragraphs: bool = False  # its documents are paragraphs: it owns those that start inside it


_ATTRIBUTE = "_bpe_spark_text_source"


def tag(df, files: Sequence[str], on_bad_input: str = "error", paragraphs: bool = False):
    """Mark ``df`` (read by ``read_documents``) as holding the lines (or ``paragraphs``) of
    ``files``, if they are all local files this module can read; any transformation of ``df``
    drops the mark."""
    source = local_source(files, on_bad_input, paragraphs)
    if source is not None:
        setattr(df, _ATTRIBUTE, source)
    return df


def local_source(files: Sequence[str], on_bad_input: str = "error", paragraphs: bool = False) -> TextSource | None:
    """``files`` as a :class:`TextSource`, if they are all local files this module can read."""
    local = local_files(files, refused_suffixes=_PLAIN_SUFFIXES_REFUSED)
    if not local:
        return None
    return TextSource(tuple(p for p, _ in local), tuple(u for _, u in local), on_bad_input, paragraphs)


def local_files(files: Sequence[str], refused_suffixes: tuple[str, ...] = ()) -> list[tuple[str, str]]:
    """``(path, URI)`` of ``files`` in URI order (Spark's input order) when every one is a local
    file not ending with one of ``refused_suffixes``; else ``[]``."""
    local = []
    for uri in sorted(files):
        parsed = urlparse(uri)
        if parsed.scheme not in ("", "file"):
            return []
        path = unquote(parsed.path) if parsed.scheme else uri
        if path.endswith(refused_suffixes) or not os.path.isfile(path):
            return []
        local.append((path, uri))
    return local


def head_lines(files: Sequence[str], limit: int) -> list[str] | None:
    """The first ``limit`` lines of local ``files`` (URI order), read on the driver: each cut at
    ``\n`` and decoded as UTF-8 with replacement (for a look at JSON Lines' first records, which
    Spark's text reader would take a job to give; a line longer than ``LONG_DOCUMENT_BYTES`` as
    its skeleton, :mod:`bpe_spark.bpe.long_records`: its fields, never its text). None when a
    file is not local, is compressed by a codec other than gzip / bzip2, or cannot be read: the
    caller then asks Spark."""
    local = local_files(files, refused_suffixes=_PLAIN_SUFFIXES_REFUSED)
    if not local and files:
        return None
    lines: list[str] = []
    try:
        for path, _ in local:
            opener = _COMPRESSED.get(os.path.splitext(path)[1], open)
            with opener(path, "rb") as fh:
                while len(lines) < limit:
                    line = read_head_line(fh)
                    if isinstance(line, LongDocument):  # its fields, not its text (bpe_spark.bpe.long_records)
                        lines.append(skeleton_of(line))
                        continue
                    if not line:
                        break
                    lines.append(line.rstrip(b"\n").decode("utf-8", errors="replace"))
            if len(lines) >= limit:
                break
    except _CORRUPT:
        return None
    return lines


def record_fields(lines: Sequence[str]) -> list[str]:
    """The fields of the JSON objects among ``lines`` (:func:`head_lines`' look at JSON Lines), in
    first-seen order; a line that is not JSON or not an object has none.

    >>> record_fields(['{"text": "a", "id": 1}', 'not json', '[1]', '{"url": "u", "text": "b"}'])
    ['text', 'id', 'url']
    """
    fields: dict[str, None] = {}
    for line in lines:
        try:
            record = json.loads(line)
        except ValueError:
            continue
        if isinstance(record, dict):
            fields.update(dict.fromkeys(record))
    return list(fields)


def source_of(df) -> TextSource | None:
    return getattr(df, _ATTRIBUTE, None)


def split_target(total: int, parallelism: int) -> int:
    """The size of a split of ``total`` bytes read by ``parallelism`` tasks at once: ``total``
    cut into the fewest whole waves of ``parallelism`` splits of at most ``MAX_SPLIT_BYTES``
    (Spark's largest file split), so that no last, lone split leaves the other cores idle; at
    least ``MIN_SPLIT_BYTES``.

    >>> [split_target(total << 20, 2) >> 20 for total in (40, 300, 403, 1024)]
    [20, 75, 100, 128]
    """
    parallelism = max(1, parallelism)
    waves = max(1, -(-total // (MAX_SPLIT_BYTES * parallelism)))
    return max(MIN_SPLIT_BYTES, -(-total // (waves * parallelism)))


def plan_splits(source: TextSource, parallelism: int) -> list[Split]:
    """Byte ranges of about :func:`split_target` bytes, in file order; a compressed file is one
    split."""
    sizes = [os.path.getsize(path) for path in source.files]
    target = split_target(sum(sizes), parallelism)
    splits: list[Split] = []
    for path, uri, size in zip(source.files, source.uris or source.files, sizes):
        if path.endswith(tuple(_COMPRESSED)):
            splits.append(Split(path, 0, -1, uri, paragraphs=source.paragraphs))
            continue
        start = 0
        while start < size:
            end = min(size, start + target)
            splits.append(Split(path, start, end, uri, paragraphs=source.paragraphs))
            start = end
    return splits


_CORRUPT = (EOFError, OSError, zlib.error, ValueError)  # gzip/bz2 on damaged or truncated data


def _chunks(split: Split, tally: InputTally | None, on_bad_input: str) -> Iterator[tuple[int | None, bytes]]:
    """The split's bytes from its first owned line to the end of its last owned line, as
    ``(file offset, chunk)`` (offset None in a compressed file)."""
    suffix = os.path.splitext(split.path)[1]
    if split.end < 0:
        with _COMPRESSED[suffix](split.path, "rb") as fh:
            while True:
                try:
                    chunk = fh.read(_READ_BYTES)
                except _CORRUPT as exc:
                    if on_bad_input != "skip":
                        with interface(split.interface):  # built in a task, in the words of the driver's
                            raise BadInputError(
                                f"input file {split.uri or split.path} is corrupt or truncated ({suffix[1:]}: {exc}); "
                                f"repair or remove it, or pass {option('on_bad_input', 'skip')} to skip it"
                            ) from None
                    if tally is not None:
                        tally.skipped_files += 1
                    return
                if not chunk:
                    return
                yield None, chunk
    with open(split.path, "rb") as fh:
        position = split.start
        if position > 0:
            fh.seek(position - 1)
            position += sum(map(len, _rest_of_line(fh))) - 1  # the rest of a line begun before the split
        while position < split.end:
            chunk = fh.read(min(_READ_BYTES, split.end - position))
            if not chunk:
                return
            yield position, chunk
            position += len(chunk)
            if position >= split.end and not chunk.endswith(b"\n"):
                for rest in _rest_of_line(fh):  # finish the last line, past the split's end
                    yield position, rest
                    position += len(rest)


def _rest_of_line(fh) -> Iterator[bytes]:
    """The bytes up to the next ``\\n`` (kept) or the end of the file, in chunks: a line of
    100 MB is never one read."""
    while chunk := fh.readline(_READ_BYTES):
        yield chunk
        if chunk.endswith(b"\n"):
            return


def iter_blocks(split: Split, *, tally: InputTally | None = None, on_bad_input: str = "error") -> Iterator:
    """The split's documents in blocks (one per 8 MB read): ``bytes`` of whole lines, each
    ending with ``\\n`` (:func:`lines_array` cuts them), or a lone
    :class:`~bpe_spark.bpe.long_documents.LongDocument`; the bytes are not decoded. A split of
    paragraphs (:mod:`bpe_spark.spark.read.paragraphs`) gives its documents as Arrow binary arrays
    instead of bytes (:func:`documents_array` takes either)."""
    if split.paragraphs:
        chunks = _chunks(split, tally, on_bad_input) if split.end < 0 else paragraphs.owned_chunks(split.path, split.start,
                                                                                               split.end, _READ_BYTES)
        blocks = paragraphs.paragraph_blocks(chunks, LONG_DOCUMENT_BYTES)
    else:
        blocks = _blocks(_chunks(split, tally, on_bad_input), split.path)
    for block in blocks:
        if isinstance(block, LongDocument):
            block.tally = tally
        yield block


def documents_array(block) -> pa.BinaryArray:
    """The documents of a block of :func:`iter_blocks` (not a LongDocument) as an Arrow binary array."""
    return block if isinstance(block, pa.Array) else lines_array(block)


def lines_array(block: bytes) -> pa.BinaryArray:
    """The lines of ``block`` (whole lines, each ending with ``\\n``, kept) as an Arrow binary
    array over ``block`` itself: the offsets are computed, the bytes are not copied.

    >>> lines_array(b"a\\n\\nbc\\n").to_pylist()
    [b'a\\n', b'\\n', b'bc\\n']
    """
    ends = np.flatnonzero(np.frombuffer(block, dtype=np.uint8) == 10) + 1
    offsets = np.zeros(len(ends) + 1, dtype=np.int32)
    offsets[1:] = ends
    return pa.Array.from_buffers(pa.binary(), len(ends), [None, pa.py_buffer(offsets), pa.py_buffer(block)])


def iter_lines(split: Split, with_bytes: bool = False, *, tally: InputTally | None = None,
               on_bad_input: str = "error", arrow: bool = False) -> Iterator:
    """Batches (one per 8 MB read) of the split's documents: each line with its ``\\n`` (added
    when the file's last line lacks one), decoded by the text rule (counted in ``tally``).
    ``with_bytes``: yield ``(lines, the size of their bytes)`` instead. A line longer than
    ``LONG_DOCUMENT_BYTES`` comes alone, as a :class:`~bpe_spark.bpe.long_documents.LongDocument`
    (its bytes, read as text in pieces: never one ``str``). ``arrow``: a block of valid UTF-8
    comes as an Arrow string array over the bytes read (no ``str`` per line), any other as the
    decoded list."""
    for block in iter_blocks(split, tally=tally, on_bad_input=on_bad_input):
        if isinstance(block, LongDocument):
            lines = [block]
        elif arrow and (valid := utf8_view(documents_array(block))) is not None:
            lines = valid
        else:
            lines = _lines(block, tally)
        size = len(block) if not isinstance(block, pa.Array) else len(block.buffers()[2] or b"")
        yield (lines, size) if with_bytes else lines


def _blocks(chunks: Iterator[tuple[int | None, bytes]], path: str) -> Iterator[bytes | LongDocument]:
    """The chunks regrouped into whole lines (each block ends with ``\\n``, added to a last line
    that lacks one); a line longer than ``LONG_DOCUMENT_BYTES`` comes alone, as a LongDocument:
    in a plain file its byte range (read again, in pieces, when used: its bytes are not kept),
    in a compressed one its bytes (a bytearray grown in place: its size once)."""
    carry = bytearray()  # the start of a line whose end is not read yet
    start: int | None = None  # its offset in a plain file
    dropped = 0  # bytes of a long line of a plain file, read past and not kept
    offset = None
    for offset, chunk in chunks:
        if not carry and not dropped:
            start = offset
        cut = chunk.rfind(b"\n") + 1
        if not cut:
            carry += chunk
            if offset is not None and len(carry) > LONG_DOCUMENT_BYTES:
                dropped += len(carry)
                carry = bytearray()
            continue
        first = chunk.find(b"\n") + 1
        if dropped or len(carry) + first > LONG_DOCUMENT_BYTES:
            if offset is None:
                carry += chunk[:first]
                yield LongDocument(carry)
            else:
                yield LongDocument.in_file(path, start, offset + first)
            if first < cut:
                yield chunk[first:cut]
        else:
            yield bytes(carry) + chunk[:cut] if carry else chunk[:cut]
        carry, dropped = bytearray(chunk[cut:]), 0
        start = None if offset is None else offset + cut
    if dropped and offset is not None:
        yield LongDocument.in_file(path, start, start + dropped + len(carry), newline_added=True)
    elif len(carry) >= LONG_DOCUMENT_BYTES:
        carry += b"\n"
        yield LongDocument(carry)
    elif carry:
        yield bytes(carry) + b"\n"


def _lines(data, tally: InputTally | None) -> list:
    if isinstance(data, pa.Array):  # paragraphs
        lines = [tally.add_bytes(doc) if tally is not None else decode_counted(doc)[0] for doc in data.to_pylist()]
        return lines
    lines, replaced, affected = decode_lines(data)
    if replaced and tally is not None:
        tally.count(replaced, affected)
    return lines
