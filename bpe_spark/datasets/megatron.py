"""Binary token shards: flat token streams with a Megatron-style document index, and a reader.

An encoded dataset written with ``--output-format bin`` is a directory::

    _manifest.json         what was encoded, with what model, and the shard list (written last)
    shard-00000.bin        token ids, little-endian uint16 (vocab fits) or uint32, back to back
    shard-00000.idx        the document index of shard-00000.bin (Megatron ``MMIDIDX`` layout)
    shard-00001.bin ...

``data_paths.txt`` (bin output) lists one shard a line as ``<tokens> <prefix>``, the prefix
relative to the output directory: split on whitespace it is Megatron's weighted ``--data-path``
form ``weight prefix weight prefix ...`` (weights are relative), what ``--data-args-path`` reads.

Documents are stored in document-id order: shard 0 holds documents 0..n0-1, shard 1 the next,
and so on (the manifest gives each shard's ``first_document`` and ``documents``). A ``.bin`` file
has no header, so ``np.memmap(path, dtype=np.uint16, mode="r")`` reads it as nanoGPT does; the
``.idx`` file is the index format of Megatron-LM's ``IndexedDataset`` (one sequence per
document), so Megatron-style loaders open ``shard-00000`` as a dataset prefix.

``.idx`` layout (all little-endian)::

    9 bytes   magic b"MMIDIDX\\x00\\x00"
    uint64    version, 1
    uint8     dtype code: 8 = uint16, 4 = int32 (used for uint32 shards: ids < 2**31, same bytes)
    uint64    n, the number of documents (Megatron: sequences)
    uint64    n + 1 (Megatron: the length of the document-index array)
    int32[n]  tokens per document
    int64[n]  byte offset of each document in the .bin file
    int64[n+1] 0, 1, ..., n (Megatron: the sequence index where each document starts)

>>> import tempfile, numpy as np
>>> d = tempfile.mkdtemp()
>>> with ShardWriter(f"{d}/shard-00000", np.uint16) as w:
...     w.add_documents(np.array([5, 6, 7], dtype=np.int32), np.array([0, 2, 3]))
>>> [doc.tolist() for doc in ShardReader(f"{d}/shard-00000")]
[[5, 6], [7]]
"""

from __future__ import annotations

import io
import itertools
import json
import os
import struct
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np

from bpe_spark.errors import ConfigError, InputError, ModelFormatError, option
from bpe_spark.storage.markers import MANIFEST_FORMAT, MANIFEST_NAME, check_complete

MANIFEST_VERSION = 1
INDEX_MAGIC = b"MMIDIDX\x00\x00"
INDEX_VERSION = 1
# Megatron's dtype codes; it has no uint32, and int32 holds the same bytes for ids < 2**31.
_INDEX_CODES = {np.dtype("uint16"): 8, np.dtype("uint32"): 4, np.dtype("int32"): 4}
_CODE_DTYPES = {8: np.dtype("<u2"), 4: np.dtype("<i4"), 1: np.dtype("u1"), 5: np.dtype("<i8")}
TOKEN_DTYPES = ("auto", "uint16", "uint32")
_WRITE_BLOCK = 1 << 20  # ids converted and written at a time


def shard_name(index: int, count: int, prefix: str = "shard") -> str:
    """Deterministic shard names, zero-padded to at least 5 digits.

    >>> shard_name(3, 10)
    'shard-00003'
    """
    width = max(5, len(str(max(count - 1, 0))))
    return f"{prefix}-{index:0{width}d}"


def token_dtype(max_token_id: int, requested: str = "auto") -> np.dtype:
    """The token dtype for a vocabulary whose largest id is ``max_token_id``.

    ``auto`` picks uint16 when every id fits (< 65536), else uint32. Asking for a dtype the
    vocabulary does not fit is an error, raised before any work.

    >>> token_dtype(50256).name, token_dtype(100276).name
    ('uint16', 'uint32')
    """
    if requested not in TOKEN_DTYPES:
        raise ConfigError(f"token dtype must be one of {TOKEN_DTYPES}, got {requested!r}")
    if max_token_id < 0:
        raise ConfigError(f"max_token_id must be >= 0, got {max_token_id}")
    if requested == "auto":
        requested = "uint16" if max_token_id < 2**16 else "uint32"
    if requested == "uint16" and max_token_id >= 2**16:
        raise ConfigError(
            f"the vocabulary's largest token id is {max_token_id}, which does not fit uint16 "
            f"(max 65535); use {option('dtype', 'uint32')} or {option('dtype', 'auto')}"
        )
    if max_token_id >= 2**31:
        raise ConfigError(f"token id {max_token_id} does not fit int32 (the Parquet input_ids type)")
    return np.dtype(requested)


# --- the .idx file ----------------------------------------------------------------------------
def write_index(sink: BinaryIO, lengths: np.ndarray | Sequence[np.ndarray], dtype: np.dtype) -> int:
    """Write the ``.idx`` file for documents of ``lengths`` tokens (one array, or the arrays of
    consecutive batches) stored as ``dtype``, a block at a time: an index of millions of documents
    is hundreds of MB, never built whole. Returns the bytes written."""
    dtype = np.dtype(dtype)
    blocks = [np.asarray(lengths)] if isinstance(lengths, np.ndarray) else [np.asarray(b) for b in lengths]
    blocks = [block[at : at + _WRITE_BLOCK] for block in blocks for at in range(0, len(block), _WRITE_BLOCK)]
    for block in blocks:
        if block.min() < 0 or block.max() >= 2**31:
            raise ConfigError("a document's token count must be in 0..2**31-1 for the .idx index")
    n = sum(len(block) for block in blocks)
    parts: Iterator[np.ndarray] = itertools.chain(
        (block.astype("<i4") for block in blocks),  # the sequence lengths
        _pointers(blocks, dtype.itemsize),  # each sequence's byte offset in the .bin
        (np.arange(at, min(at + _WRITE_BLOCK, n + 1), dtype="<i8") for at in range(0, n + 1, _WRITE_BLOCK)),
    )  # the document indices: one sequence each
    header = b"".join((INDEX_MAGIC, struct.pack("<Q", INDEX_VERSION), struct.pack("<B", _INDEX_CODES[dtype]),
                       struct.pack("<Q", n), struct.pack("<Q", n + 1)))
    sink.write(header)
    written = len(header)
    for part in parts:
        sink.write(memoryview(part).cast("B"))
        written += part.nbytes
    return written


def _pointers(blocks: list[np.ndarray], itemsize: int) -> Iterator[np.ndarray]:
    total = 0
    for block in blocks:
        ends = np.cumsum(block, dtype="<i8")
        yield (ends - block + total) * itemsize
        total += int(ends[-1])


def index_bytes(lengths: np.ndarray, dtype: np.dtype) -> bytes:
    """The ``.idx`` file for documents of ``lengths`` tokens stored as ``dtype``, as one bytes."""
    sink = io.BytesIO()
    write_index(sink, np.asarray(lengths, dtype=np.int64), dtype)
    return sink.getvalue()


def read_index(path: str | os.PathLike) -> tuple[np.dtype, np.ndarray, np.ndarray]:
    """``(dtype, lengths, pointers)`` of a ``.idx`` file; pointers are byte offsets."""
    path = Path(path)
    raw = np.memmap(path, dtype=np.uint8, mode="r") if path.stat().st_size else np.zeros(0, np.uint8)
    header_size = len(INDEX_MAGIC) + 8 + 1 + 8 + 8
    if len(raw) < header_size or bytes(raw[: len(INDEX_MAGIC)]) != INDEX_MAGIC:
        raise ModelFormatError(f"{path}: not a token index (expected the MMIDIDX header)")
    offset = len(INDEX_MAGIC)
    (version,) = struct.unpack_from("<Q", raw, offset)
    if version != INDEX_VERSION:
        raise ModelFormatError(f"{path}: index version {version}, this reader knows {INDEX_VERSION}")
    (code,) = struct.unpack_from("<B", raw, offset + 8)
    if code not in _CODE_DTYPES:
        raise ModelFormatError(f"{path}: unknown token dtype code {code} in the index header")
    n, _doc_count = struct.unpack_from("<QQ", raw, offset + 9)
    start = header_size
    if len(raw) < start + n * 12:
        raise ModelFormatError(f"{path}: truncated index ({len(raw)} bytes for {n} documents)")
    lengths = np.frombuffer(raw, dtype="<i4", count=n, offset=start)
    pointers = np.frombuffer(raw, dtype="<i8", count=n, offset=start + 4 * n)
    return _CODE_DTYPES[code], lengths, pointers


# --- writing ------------------------------------------------------------------------------------
def write_token_stream(sink: BinaryIO, ids: np.ndarray, dtype: np.dtype) -> int:
    """Write ``ids`` to ``sink`` as ``dtype`` (little-endian), a block at a time (a long document
    is never copied whole); the bytes written. An id that does not fit is a ``ConfigError``."""
    info = np.iinfo(dtype)
    if len(ids) and ids.dtype != dtype and (ids.min() < info.min or ids.max() > info.max):
        raise ConfigError(f"token id {int(ids.max())} does not fit {dtype.name}")
    written = 0
    for block in range(0, len(ids), _WRITE_BLOCK):
        data = ids[block : block + _WRITE_BLOCK].astype(dtype, copy=False)
        sink.write(memoryview(np.ascontiguousarray(data)).cast("B"))
        written += data.nbytes
    return written


class TokenStreamWriter:
    """Streams documents' ids into one flat token file and, on close, writes the index the
    format keeps beside it (:meth:`_write_index`, given every document's length). The base of
    :class:`ShardWriter` (``.bin``/``.idx``) and the datatrove writer (``.ds``/``.ds.index``).

    ``add_documents(values, offsets)`` takes a batch as flat ids and offsets (``offsets[i]`` ..
    ``offsets[i+1]`` is document i), the layout of an Arrow list column. ``opener`` lets the
    caller supply its own file opener (e.g. a ``pyarrow.fs`` output stream).
    """

    data_suffix = ".bin"

    def __init__(self, prefix: str, dtype, *, opener: Callable[[str], BinaryIO] | None = None):
        self.prefix = str(prefix)
        self.dtype = np.dtype(dtype).newbyteorder("<")
        self._open = opener or (lambda path: open(path, "wb"))  # noqa: SIM115 - closed in close()
        self._data: BinaryIO | None = self._open(self.prefix + self.data_suffix)
        self._lengths: list[np.ndarray] = []
        self.documents = 0
        self.tokens = 0
        self.bin_bytes = 0

    def add_documents(self, values: np.ndarray, offsets: np.ndarray) -> None:
        offsets = np.asarray(offsets, dtype=np.int64)
        start, stop = int(offsets[0]), int(offsets[-1])
        self.bin_bytes += write_token_stream(self._data, np.asarray(values)[start:stop], self.dtype)
        self._lengths.append(np.diff(offsets))
        self.documents += len(offsets) - 1
        self.tokens += stop - start

    def close(self) -> None:
        if self._data is None:
            return
        self._data.close()
        self._data = None
        self._write_index(self._lengths)

    def _write_index(self, lengths: list[np.ndarray]) -> None:
        """Write the format's index for the documents of ``lengths`` (one array per batch)."""
        raise NotImplementedError

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.close()


class ShardWriter(TokenStreamWriter):
    """Streams documents into ``<prefix>.bin`` and writes ``<prefix>.idx`` (the MMIDIDX index) on
    close; see :class:`TokenStreamWriter`."""

    idx_bytes = 0

    def _write_index(self, lengths: list[np.ndarray]) -> None:
        with self._open(self.prefix + ".idx") as fh:
            self.idx_bytes = write_index(fh, lengths, self.dtype)


# --- reading ------------------------------------------------------------------------------------
class ShardReader:
    """One shard: its tokens memory-mapped, documents by index.

    ``tokens`` is the whole flat stream (a read-only ``np.memmap``), what nanoGPT samples from.
    """

    def __init__(self, prefix: str | os.PathLike, dtype=None):
        prefix = str(prefix)
        for suffix in (".bin", ".idx"):
            prefix = prefix.removesuffix(suffix)
        self.prefix = prefix
        index_dtype, self.lengths, self.pointers = read_index(prefix + ".idx")
        self.dtype = np.dtype(dtype) if dtype is not None else index_dtype
        bin_path = Path(prefix + ".bin")
        if not bin_path.is_file():
            raise ModelFormatError(f"{bin_path}: missing (the token stream of {prefix}.idx)")
        size = bin_path.stat().st_size
        expected = int(self.lengths.sum(dtype=np.int64)) * self.dtype.itemsize
        if size != expected:
            raise ModelFormatError(
                f"{bin_path}: {size} bytes, but its index describes {expected} bytes of tokens"
            )
        self.tokens = np.memmap(bin_path, dtype=self.dtype, mode="r") if size else np.zeros(0, self.dtype)

    def __len__(self) -> int:
        return len(self.lengths)

    def __getitem__(self, i: int) -> np.ndarray:
        start = int(self.pointers[i]) // self.dtype.itemsize
        return self.tokens[start : start + int(self.lengths[i])]

    def __iter__(self) -> Iterator[np.ndarray]:
        for i in range(len(self)):
            yield self[i]


class DocumentShards:
    """Documents numbered across a list of per-shard readers (each with ``len`` and ``[i]``):
    ``len(ds)``, ``ds[i]``, iteration in document order. The base of the dataset readers."""

    shards: list

    def _number(self, counts: Sequence[int]) -> None:
        self._starts = np.concatenate([[0], np.cumsum(counts, dtype=np.int64)])

    def __len__(self) -> int:
        return int(self._starts[-1])

    def __getitem__(self, doc: int) -> np.ndarray:
        if doc < 0:
            doc += len(self)
        if not 0 <= doc < len(self):
            raise IndexError(f"document {doc} out of range (0..{len(self) - 1})")
        shard = int(np.searchsorted(self._starts, doc, side="right")) - 1
        return self.shards[shard][doc - int(self._starts[shard])]

    def __iter__(self) -> Iterator[np.ndarray]:
        for shard in self.shards:
            yield from shard


class EncodedShards(DocumentShards):
    """An encoded dataset directory of binary shards, read back through its manifest.

    ``len(ds)`` documents; ``ds[i]`` the ids of document i (the ``doc_id`` of the Parquet
    output); iterating yields every document in order; ``ds.shards`` the per-shard readers.
    """

    def __init__(self, directory: str | os.PathLike):
        self.directory = Path(directory)
        self.manifest = read_manifest(self.directory)
        if self.manifest.get("output_format") != "bin":
            raise ModelFormatError(
                f"{self.directory}: the manifest says output_format "
                f"{self.manifest.get('output_format')!r}, not 'bin'; read Parquet output with "
                "pyarrow or Spark"
            )
        self.dtype = np.dtype(self.manifest["dtype"])
        self.shards = [ShardReader(self.directory / entry["name"], self.dtype) for entry in self.manifest["shards"]]
        counts = [len(shard) for shard in self.shards]
        for entry, count in zip(self.manifest["shards"], counts):
            if entry["documents"] != count:
                raise ModelFormatError(
                    f"{self.directory / entry['name']}.idx: {count} documents, the manifest says {entry['documents']}"
                )
        self._number(counts)

    @property
    def num_tokens(self) -> int:
        return int(sum(len(shard.tokens) for shard in self.shards))


def read_shards(directory: str | os.PathLike) -> EncodedShards:
    """Open the binary shards an encode job wrote (see the module docstring for the layout)."""
    return EncodedShards(directory)


def read_manifest(directory: str | os.PathLike) -> dict[str, Any]:
    path = Path(directory) / MANIFEST_NAME
    if not path.is_file():
        raise ModelFormatError(
            f"{path} not found: {directory} is not a finished encode output (the manifest is "
            "written last, only when the job succeeds)"
        )
    check_complete(str(directory), "encoded")  # the marker goes in last (on an object store, after the manifest)
    try:
        manifest = json.loads(path.read_text(encoding="utf-8"))
    except ValueError as exc:
        raise ModelFormatError(f"{path}: invalid JSON ({exc})") from None
    if manifest.get("format") != MANIFEST_FORMAT:
        raise ModelFormatError(f"{path}: field 'format' is {manifest.get('format')!r}, expected {MANIFEST_FORMAT!r}")
    return manifest


def check_model(manifest: Mapping[str, Any] | None, model: Any, shown: str, model_shown: str) -> None:
    """Refuse to read an encode output with another model than the one it was encoded with: the
    manifest's ``model.decoding_fingerprint`` (what decides the text of ids; an older manifest's
    ``fingerprint``) against the same fingerprint of ``model`` (the model given, shown as
    ``model_shown``; any form :func:`bpe_spark.models.fingerprint.model_fingerprint` takes, or a
    Tokenizer). Nothing to compare (no manifest, or ``model`` None: the check was waived) passes.

    >>> from bpe_spark import TrainerConfig, train
    >>> tok = train(["ab ab"], TrainerConfig(vocab_size=257))
    >>> check_model({"model": {"decoding_fingerprint": "sha256:aa", "vocab_size": 300, "scheme": "byte"}}, tok,
    ...             "out/ids", "other-model")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    bpe_spark.errors.InputError: out/ids was encoded with another model (sha256:aa, 300 tokens, byte) than other-model (sha256:...); its ids would decode to wrong text: give the model it was encoded with, or pass ignore_model_mismatch=True to decode anyway
    """
    from bpe_spark.models.fingerprint import decoding_fingerprint, model_fingerprint

    recorded = (manifest or {}).get("model") or {}
    if model is None or not (recorded.get("decoding_fingerprint") or recorded.get("fingerprint")):
        return
    if recorded.get("decoding_fingerprint"):
        kind, given = "decoding_fingerprint", decoding_fingerprint(model)
    else:  # written before the decoding fingerprint: the model must encode alike too
        kind, given = "fingerprint", model_fingerprint(model)
    if recorded[kind] == given:
        return
    short = recorded[kind][:19] + ("..." if len(recorded[kind]) > 19 else "")
    raise InputError(
        f"{shown} was encoded with another model ({short}, {recorded.get('vocab_size')} tokens, "
        f"{recorded.get('scheme')}) than {model_shown} ({given[:19]}...); its ids would decode to wrong text: "
        f"give the model it was encoded with, or pass {option('ignore_model_mismatch', True)} to decode anyway"
    )


def iter_encoded_documents(path: str | os.PathLike, *, limit: int | None = None, column: str = "input_ids") -> Iterator[list[int]]:
    """The documents of any encode output, as lists of ids, in document order.

    ``path``: a binary shard directory, a Parquet output directory (part files in name order) or
    one Parquet file. A null ``input_ids`` (null text) reads as an empty document.
    """
    path = Path(path)
    if not path.exists():
        raise ModelFormatError(f"{path}: no such file or directory")
    if limit is not None and limit <= 0:
        return
    manifest = read_manifest(path) if (path / MANIFEST_NAME).is_file() else None
    count = 0
    if (manifest and manifest.get("output_format") == "bin") or (path.is_dir() and any(path.glob("*.idx"))):
        documents = iter(read_shards(path)) if manifest else _iter_loose_shards(path)
        for ids in documents:
            yield ids.tolist()
            count += 1
            if limit is not None and count >= limit:
                return
        return
    import pyarrow.parquet as pq

    files = [path] if path.is_file() else sorted(
        p for p in path.rglob("*.parquet") if not any(part.startswith(("_", ".")) for part in p.relative_to(path).parts)
    )
    if not files:
        raise ModelFormatError(f"{path}: holds neither binary shards (.bin/.idx) nor Parquet files")
    for file in files:
        parquet = pq.ParquetFile(file)
        if column not in parquet.schema_arrow.names:
            raise ModelFormatError(f"{file}: no column {column!r}; its columns are {parquet.schema_arrow.names}")
        for batch in parquet.iter_batches(columns=[column], batch_size=1024):
            for ids in batch.column(0).to_pylist():
                yield ids or []
                count += 1
                if limit is not None and count >= limit:
                    return


def _iter_loose_shards(directory: Path) -> Iterator[np.ndarray]:
    for idx in sorted(directory.glob("*.idx")):
        yield from ShardReader(idx)


# --- data_paths.txt ---------------------------------------------------------------------------
DATA_PATHS_NAME = "data_paths.txt"
def data_paths_text(shards: Sequence[Mapping[str, Any]]) -> str:
    """``data_paths.txt`` of bin shards (manifest entries: ``name``, ``tokens``): one
    ``<tokens> <prefix>`` line per shard holding tokens (Megatron cannot sample an empty one).

    >>> print(data_paths_text([{"name": "shard-00000", "tokens": 120}, {"name": "shard-00001", "tokens": 0},
    ...                        {"name": "shard-00002", "tokens": 7}]), end="")
    120 shard-00000
    7 shard-00002
    """
    return "".join(f"{int(entry['tokens'])} {entry['name']}\n" for entry in shards if entry["tokens"] > 0)


def megatron_data_path(text: str, root: str | os.PathLike | None = None) -> list[str]:
    """The ``--data-path`` values of a ``data_paths.txt`` (``weight prefix ...``), the prefixes
    joined to ``root`` (the output directory) when given.

    >>> megatron_data_path("120 shard-00000\\n7 shard-00002\\n", "/data/out")
    ['120', '/data/out/shard-00000', '7', '/data/out/shard-00002']
    """
    words = text.split()
    if len(words) % 2:
        raise ModelFormatError(f"data_paths.txt: {len(words)} words, expected 'tokens prefix' pairs")
    values = []
    for weight, prefix in zip(words[::2], words[1::2]):
        values += [weight, prefix if root is None else f"{str(root).rstrip('/')}/{prefix}"]
    return values
