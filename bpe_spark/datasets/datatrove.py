"""Datatrove's tokenized layout (``--output-format datatrove``): its writer and a reader.

An encoded dataset written with ``--output-format datatrove`` is a directory::

    _manifest.json          what was encoded, with what model, and the shard list (written last)
    shard-00000.ds          token ids, little-endian uint16 (vocab fits) or uint32, back to back
    shard-00000.ds.index    the end of each document, in tokens from the start: uint64, cumulative
    shard-00000.ds.metadata three lines: "<tokenizer>|<token size>", the token count, the same
                            count with an SI prefix ("1.50 kT"), no final newline
    shard-00001.ds ...

the files datatrove's ``DocumentTokenizer`` writes (``save_index``, ``save_final_metadata``; no
``.loss`` file), so its ``DocumentTokenizerMerger`` and ``DatatroveFolderDataset`` (nanotron's
loader) read the directory as they read their own. The token size is 2 bytes when every id
fits uint16, else 4, as datatrove picks it; shards are cut at document boundaries by
``shard_tokens``, in document order, as the bin shards are.

>>> import tempfile, numpy as np
>>> d = tempfile.mkdtemp()
>>> with DatatroveWriter(f"{d}/shard-00000", np.uint16, "models/en32k") as w:
...     w.add_documents(np.array([5, 6, 7], dtype=np.int32), np.array([0, 2, 3]))
>>> [doc.tolist() for doc in DatatroveReader(f"{d}/shard-00000.ds")]
[[5, 6], [7]]
>>> open(f"{d}/shard-00000.ds.metadata").read().splitlines()
['models/en32k|2', '3', '3.00 T']
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import BinaryIO

import numpy as np

from bpe_spark.errors import ConfigError, ModelFormatError
from bpe_spark.datasets.megatron import MANIFEST_NAME, DocumentShards, TokenStreamWriter, read_manifest

DS_SUFFIX = ".ds"
INDEX_SUFFIX = ".ds.index"
METADATA_SUFFIX = ".ds.metadata"
_TOKEN_SIZES = {np.dtype("uint16"): 2, np.dtype("uint32"): 4}
_SIZE_DTYPES = {2: np.dtype("<u2"), 4: np.dtype("<u4")}


def shard_files(name: str) -> list[str]:
    """The files of one datatrove shard.

    >>> shard_files("shard-00000")
    ['shard-00000.ds', 'shard-00000.ds.index', 'shard-00000.ds.metadata']
    """
    return [name + DS_SUFFIX, name + INDEX_SUFFIX, name + METADATA_SUFFIX]


def token_size(dtype) -> int:
    """Bytes per token of a datatrove file: 2 (uint16) or 4 (uint32)."""
    dtype = np.dtype(dtype)
    if dtype not in _TOKEN_SIZES:
        raise ConfigError(f"datatrove files hold uint16 or uint32 tokens, not {dtype.name}")
    return _TOKEN_SIZES[dtype]


def tokens_with_prefix(tokens: int) -> str:
    """A token count as datatrove's metadata shows it (``humanize.metric(count, unit="T")``):
    three significant digits and an SI prefix.

    >>> [tokens_with_prefix(n) for n in (0, 7, 1500, 123_000, 999_999, 2 * 10**9)]
    ['0.00 T', '7.00 T', '1.50 kT', '123 kT', '1.00 MT', '2.00 GT']
    """
    if tokens < 0:
        raise ValueError(f"internal: a negative token count {tokens}")
    exponent = math.floor(math.log10(tokens)) if tokens else 0
    scaled = tokens / 10 ** (exponent // 3 * 3)
    if round(scaled, max(0, 2 - exponent % 3)) >= 10 ** (exponent % 3 + 1):  # 999.9 k shows as 1.00 M
        exponent += 1
        if exponent % 3 == 0:
            scaled /= 1000
    prefix = "kMGTPEZYRQ"[exponent // 3 - 1] if exponent >= 3 else ""
    return f"{scaled:.{max(0, 2 - exponent % 3)}f} {prefix}T"


def tokenizer_label(name: str) -> str:
    """The tokenizer name of a ``.ds.metadata`` file: one line, no ``|`` (datatrove splits the
    line there).

    >>> tokenizer_label("models/a|b\\nc")
    'models/a_b_c'
    """
    label = "_".join(str(name).replace("|", "\n").splitlines()).strip()
    return label or "bpe-spark"


def metadata_text(tokenizer: str, size: int, tokens: int) -> str:
    """The ``.ds.metadata`` file of a datatrove shard."""
    return "\n".join([f"{tokenizer_label(tokenizer)}|{size}", str(tokens), tokens_with_prefix(tokens)])


class DatatroveWriter(TokenStreamWriter):
    """Streams documents into ``<prefix>.ds``; ``.ds.index`` (each document's end, in tokens) and
    ``.ds.metadata`` on close; see :class:`bpe_spark.datasets.megatron.TokenStreamWriter`."""

    data_suffix = DS_SUFFIX

    def __init__(self, prefix: str, dtype, tokenizer: str, *, opener: Callable[[str], BinaryIO] | None = None):
        super().__init__(str(prefix).removesuffix(DS_SUFFIX), dtype, opener=opener)
        self.size = token_size(self.dtype)
        self.tokenizer = tokenizer

    def _write_index(self, lengths: list[np.ndarray]) -> None:
        with self._open(self.prefix + INDEX_SUFFIX) as fh:
            total = 0
            for block in lengths:  # each batch's ends, carried on: the index is never built whole
                if len(block):
                    ends = np.cumsum(block, dtype="<u8") + np.uint64(total)
                    fh.write(memoryview(ends).cast("B"))
                    total = int(ends[-1])
        with self._open(self.prefix + METADATA_SUFFIX) as fh:
            fh.write(metadata_text(self.tokenizer, self.size, self.tokens).encode("utf-8"))


class DatatroveReader:
    """One ``.ds`` file: its tokens memory-mapped, documents by index (from ``.ds.index``).

    The token size comes from ``.ds.metadata`` (``dtype`` overrides it; without either, 2).
    """

    def __init__(self, path: str | os.PathLike, dtype=None):
        path = str(path)
        for suffix in (METADATA_SUFFIX, INDEX_SUFFIX):
            path = path.removesuffix(suffix)
        if not path.endswith(DS_SUFFIX):
            path += DS_SUFFIX
        self.path = path
        self.tokenizer, size = read_metadata(path)
        self.dtype = np.dtype(dtype) if dtype is not None else _SIZE_DTYPES[size]
        index = Path(path.removesuffix(DS_SUFFIX) + INDEX_SUFFIX)
        if not index.is_file():
            raise ModelFormatError(f"{index}: missing (the document ends of {path})")
        raw = index.read_bytes()
        if len(raw) % 8:
            raise ModelFormatError(f"{index}: {len(raw)} bytes, not a whole number of uint64 document ends")
        self.ends = np.frombuffer(raw, dtype="<u8").astype(np.int64)
        stream = Path(path)
        if not stream.is_file():
            raise ModelFormatError(f"{stream}: missing (the token stream of {index})")
        size_bytes = stream.stat().st_size
        expected = (int(self.ends[-1]) if len(self.ends) else 0) * self.dtype.itemsize
        if size_bytes != expected or (len(self.ends) and np.any(np.diff(self.ends) < 0)):
            raise ModelFormatError(f"{stream}: {size_bytes} bytes, but its index describes {expected} bytes of tokens")
        self.tokens = np.memmap(stream, dtype=self.dtype, mode="r") if size_bytes else np.zeros(0, self.dtype)

    def __len__(self) -> int:
        return len(self.ends)

    def __getitem__(self, i: int) -> np.ndarray:
        start = int(self.ends[i - 1]) if i > 0 else 0
        return self.tokens[start : int(self.ends[i])]

    def __iter__(self) -> Iterator[np.ndarray]:
        for i in range(len(self)):
            yield self[i]


def read_metadata(path: str | os.PathLike) -> tuple[str | None, int]:
    """``(tokenizer, token size)`` of a ``.ds`` file's ``.ds.metadata``; ``(None, 2)`` without one
    (datatrove's default)."""
    metadata = Path(str(path).removesuffix(METADATA_SUFFIX).removesuffix(DS_SUFFIX) + METADATA_SUFFIX)
    if not metadata.is_file():
        return None, 2
    first = (metadata.read_text(encoding="utf-8").splitlines() or [""])[0]
    tokenizer, _, size = first.rpartition("|")
    if size not in ("2", "4"):
        raise ModelFormatError(f"{metadata}: first line {first!r}, expected '<tokenizer>|2' or '<tokenizer>|4'")
    return tokenizer, int(size)


class DatatroveShards(DocumentShards):
    """An encoded dataset directory of datatrove files, read back through its manifest:
    ``len(ds)`` documents, ``ds[i]`` the ids of document i, iteration in document order."""

    def __init__(self, directory: str | os.PathLike):
        self.directory = Path(directory)
        self.manifest = read_manifest(self.directory)
        if self.manifest.get("output_format") != "datatrove":
            raise ModelFormatError(f"{self.directory}: the manifest says output_format "
                                   f"{self.manifest.get('output_format')!r}, not 'datatrove'")
        dtype = np.dtype(self.manifest["dtype"])
        self.shards = [DatatroveReader(self.directory / (entry["name"] + DS_SUFFIX), dtype)
                       for entry in self.manifest["shards"]]
        for entry, shard in zip(self.manifest["shards"], self.shards):
            if entry["documents"] != len(shard):
                raise ModelFormatError(f"{shard.path}.index: {len(shard)} documents, "
                                       f"the manifest says {entry['documents']}")
        self._number([len(shard) for shard in self.shards])


def read_datatrove(directory: str | os.PathLike) -> DatatroveShards:
    """Open the datatrove files an encode job wrote (see the module docstring for the layout)."""
    return DatatroveShards(directory)


def is_datatrove_output(path: str | os.PathLike) -> bool:
    """Whether ``path`` is a local encode output whose manifest says ``output_format`` datatrove."""
    manifest = Path(path) / MANIFEST_NAME
    if not manifest.is_file():
        return False
    return read_manifest(path).get("output_format") == "datatrove"


def iter_documents(path: str | os.PathLike, *, limit: int | None = None) -> Iterator[list[int]]:
    """The documents of a datatrove encode output, as lists of ids, in document order (what
    ``bpe-spark decode --input`` reads)."""
    if limit is not None and limit <= 0:
        return
    for count, ids in enumerate(read_datatrove(path), 1):
        yield ids.tolist()
        if limit is not None and count >= limit:
            return
