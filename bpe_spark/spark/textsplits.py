"""Text files read by the Python tasks themselves, one document per line.

Counting pretokens needs nothing from the JVM but the files' bytes. Spark's text reader turns
each line into a JVM string, then into an Arrow batch for Python: on en_books that hand-off and
the JVM's cold start cost more than the counting. When ``read_documents`` reads local text
files line by line, it tags the DataFrame with their list (:func:`source_of`); counting then
plans byte-range splits of those files on the driver and lets each Python task read its split
(``plan_splits`` / ``iter_lines``), with the same documents as the Spark reader gives: lines cut
at ``\\n`` only, each keeping its ``\\n`` (one is added to a last line that lacks it).

A split owns the lines that start inside it: a task seeks to its start, skips the rest of a line
begun before it, and reads on past its end to finish its last line. Compressed files (``.gz``,
``.bz2``) are one split each. Other sources (HDFS, S3, other codecs, transformed DataFrames)
keep Spark's reader. Encoding reads them the same way (``encode_dataset``), in the same document
order as through Spark (files in URI order, then lines), so ``doc_id`` does not change.
"""

from __future__ import annotations

import bz2
import gzip
import os
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from urllib.parse import unquote, urlparse

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


@dataclass(frozen=True)
class Split:
    path: str
    start: int
    end: int  # exclusive; -1: the whole (compressed) file
    uri: str = ""  # the file as Spark names it (input_file_name()): encoding's ordering key


_ATTRIBUTE = "_bpe_spark_text_source"


def tag(df, files: Sequence[str]):
    """Mark ``df`` (read by ``read_documents``) as holding the lines of ``files``, if they are all
    local files this module can read; any transformation of ``df`` drops the mark."""
    local = []
    for uri in sorted(files):
        parsed = urlparse(uri)
        if parsed.scheme not in ("", "file"):
            return df
        path = unquote(parsed.path) if parsed.scheme else uri
        if path.endswith(_PLAIN_SUFFIXES_REFUSED) or not os.path.isfile(path):
            return df
        local.append((path, uri))
    if local:
        setattr(df, _ATTRIBUTE, TextSource(tuple(p for p, _ in local), tuple(u for _, u in local)))
    return df


def source_of(df) -> TextSource | None:
    return getattr(df, _ATTRIBUTE, None)


def plan_splits(source: TextSource, parallelism: int) -> list[Split]:
    """Byte ranges of about ``total / parallelism`` bytes (between ``MIN_SPLIT_BYTES`` and
    ``MAX_SPLIT_BYTES``, as Spark sizes file splits), in file order; a compressed file is one
    split."""
    sizes = [os.path.getsize(path) for path in source.files]
    target = max(MIN_SPLIT_BYTES, min(MAX_SPLIT_BYTES, -(-sum(sizes) // max(1, parallelism))))
    splits: list[Split] = []
    for path, uri, size in zip(source.files, source.uris or source.files, sizes):
        if path.endswith(tuple(_COMPRESSED)):
            splits.append(Split(path, 0, -1, uri))
            continue
        start = 0
        while start < size:
            end = min(size, start + target)
            splits.append(Split(path, start, end, uri))
            start = end
    return splits


def _chunks(split: Split) -> Iterator[bytes]:
    """The split's bytes from its first owned line to the end of its last owned line."""
    suffix = os.path.splitext(split.path)[1]
    if split.end < 0:
        with _COMPRESSED[suffix](split.path, "rb") as fh:
            while chunk := fh.read(_READ_BYTES):
                yield chunk
        return
    with open(split.path, "rb") as fh:
        position = split.start
        if position > 0:
            fh.seek(position - 1)
            position += len(fh.readline()) - 1  # the rest of a line begun before the split
        while position < split.end:
            chunk = fh.read(min(_READ_BYTES, split.end - position))
            if not chunk:
                return
            position += len(chunk)
            if position >= split.end and not chunk.endswith(b"\n"):
                chunk += fh.readline()  # finish the last line, past the split's end
            yield chunk


def iter_lines(split: Split, with_bytes: bool = False) -> Iterator:
    """Batches (one per 8 MB read) of the split's documents: each line with its ``\\n`` (added
    when the file's last line lacks one). Bytes that are not UTF-8 become U+FFFD.
    ``with_bytes``: yield ``(lines, their UTF-8 size)`` instead."""
    carry = b""
    for chunk in _chunks(split):
        data = carry + chunk
        cut = data.rfind(b"\n") + 1
        carry = data[cut:]
        if cut:
            yield (_lines(data[:cut]), cut) if with_bytes else _lines(data[:cut])
    if carry:
        yield (_lines(carry + b"\n"), len(carry) + 1) if with_bytes else _lines(carry + b"\n")


def _lines(data: bytes) -> list[str]:
    # split on "\n" only (str.splitlines would also cut at \r, \x0b, \x1c, U+2028...)
    text = data.decode("utf-8", "replace")
    parts = text.split("\n")
    parts.pop()  # data ends with "\n": the last part is empty
    return [part + "\n" for part in parts]
