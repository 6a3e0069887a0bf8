"""Bulk encoding on Spark (DESIGN 2.2): the broadcast tokenizer encodes Arrow batches.

``encode(df, tok)`` returns a DataFrame of ``input_ids`` (array<int32>) and ``n_tokens``;
``encode_dataset(df, tok, out)`` writes them as Parquet or binary shards with a manifest.

The tokenizer is broadcast once, as plain data, and rebuilt once per executor process. Each
Arrow batch of texts is encoded whole: by the compiled encoder when the model has one
(``Tokenizer.encode_ordinary_flat``: gpt2/cl100k presets of a byte-scheme merge table), else by
the Python regex and a per-process cache of each distinct pretoken's ids (BPE runs only for
pretokens never seen; ``ranks`` models look whole pretokens up first, as tiktoken does). The
output list column is built from flat ids and offsets with numpy gathers: no per-token Python.

``encode_dataset`` runs one encoding job whose tasks write one Arrow piece per input segment
(file split), then a second, I/O-only job cuts the document stream into shards from slices of the
pieces. No shuffle, no cache, no second pass over the text.

Document ids. Without ``id_cols`` the output carries ``doc_id`` (int64): the document's position
in input order, counted from 0. For DataFrames read straight from files (text, JSON Lines,
Parquet: also through filters and ``coalesce``) input order is file path order, then row order
within each file, so ``doc_id`` is the same whatever the partitioning. For other DataFrames it is
partition order, then row order in each partition; after a shuffle (``repartition``) that order
is not stable, so pass ``id_cols`` there. (``encode`` counts the documents of each input segment
first, a JVM-only pass; ``encode_dataset`` needs no such pass.)

Null and empty texts: empty text gives ``[]`` (plus BOS/EOS when asked); a null text gives a
null ``input_ids`` and ``n_tokens`` 0 (no BOS/EOS), and a zero-length document in binary shards.

Why no Java-regex pretokenization here (DESIGN 1.2 allows it): measured on en_books in
local[2], Spark SQL's ``regexp_extract_all`` with the ``(?U)`` gpt2 pattern split text no faster
than Python's ``regex`` (about 3-4 MB/s per core), and shipping the pretoken arrays to Python
cost more than the saving; the two engines' Unicode versions also differ on some code points,
and encoding must give ``Tokenizer.encode``'s ids exactly.
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import itertools
import json
import time
import uuid
from collections.abc import Sequence
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.sql import types as T

from bpe_spark.errors import BpeSparkError, ConfigError, OutputExistsError
from bpe_spark.pretokenize import SpecialTokenMatcher
from bpe_spark.shards import (
    MANIFEST_FORMAT,
    MANIFEST_NAME,
    MANIFEST_VERSION,
    ShardWriter,
    model_fingerprint,
    shard_name,
    token_dtype,
)
from bpe_spark.spark import textsplits
from bpe_spark.spark.options import DEFAULT_SHARD_TOKENS, OUTPUT_FORMATS
from bpe_spark.tokenizer import Tokenizer

SPECIAL_POLICIES = ("ordinary", "allowed")
_FILE = "__bpe_file"
_BLOCK = "__bpe_block"
_PART = "__bpe_part"
_CACHE_SLOTS = 1_000_000  # distinct pretokens kept per process before the cache starts over


# --- executor side: one BatchEncoder per (model, options) per Python worker process -------------
class BatchEncoder:
    """Encodes batches of texts to flat ids + offsets, caching each distinct pretoken's ids.

    Two paths, the same ids. When the tokenizer encodes compiled (``bpe_spark._fastenc``: the
    gpt2/cl100k presets of a byte-scheme merge table), a batch goes to ``encode_ordinary_flat``
    whole (special tokens, when allowed, are cut out first). Otherwise pretokens come from the
    Python regex and a cache maps each to a slot whose ids live in one flat int32 buffer, so a
    batch becomes ``slots -> (start, length) -> gathered ids`` with numpy, whatever its size.

    >>> from bpe_spark import TrainerConfig, train
    >>> tok = train(["ab ab ab"], TrainerConfig(vocab_size=258))
    >>> values, offsets, nulls = BatchEncoder(tok).encode_texts(["ab ab", None, ""])
    >>> values.tolist(), offsets.tolist(), nulls.tolist()
    ([256, 257], [0, 2, 2, 2], [False, True, False])
    """

    def __init__(
        self,
        tok: Tokenizer,
        *,
        special_tokens: str = "ordinary",
        bos_id: int | None = None,
        eos_id: int | None = None,
    ):
        if special_tokens not in SPECIAL_POLICIES:
            raise ConfigError(f"special_tokens must be one of {SPECIAL_POLICIES}, got {special_tokens!r}")
        self.tok = tok
        self.allow_special = special_tokens == "allowed" and bool(tok.special_tokens)
        self.bos_id = bos_id
        self.eos_id = eos_id
        self._matcher = SpecialTokenMatcher(tok.special_tokens)
        self._normalize = tok.pretokenizer.normalize
        self._findall = tok.pretokenizer.regex.findall
        self._plain = not (tok.pretokenizer.lowercase or tok.pretokenizer.normalization)
        self.compiled = bool(getattr(tok, "compiled_encoding", False))
        self._special_ids = np.array(list(tok.special_tokens.values()), dtype=np.int32)
        self._special_index = {token: i for i, token in enumerate(tok.special_tokens)}
        self._reset_cache()

    def _reset_cache(self) -> None:
        self._slot: dict[Any, int] = {}
        self._starts = np.zeros(1024, dtype=np.int64)
        self._lengths = np.zeros(1024, dtype=np.int64)
        self._ids = np.zeros(4096, dtype=np.int32)
        self._used_ids = 0
        # subtle: special tokens get tuple keys, which no pretoken (a str) can equal.
        for token, token_id in self.tok.special_tokens.items():
            self._add_slot(("special", token), [token_id])

    def _add_slot(self, key: Any, ids: Sequence[int]) -> int:
        slot = len(self._slot)
        if slot >= len(self._starts):
            self._starts = np.resize(self._starts, 2 * len(self._starts))
            self._lengths = np.resize(self._lengths, 2 * len(self._lengths))
        need = self._used_ids + len(ids)
        if need > len(self._ids):
            self._ids = np.resize(self._ids, max(need, 2 * len(self._ids)))
        self._ids[self._used_ids : need] = ids
        self._starts[slot] = self._used_ids
        self._lengths[slot] = len(ids)
        self._used_ids = need
        self._slot[key] = slot
        return slot

    def slots_of(self, keys: Sequence[Any]) -> np.ndarray:
        """Cache slots of ``keys`` (pretokens), running BPE for those never seen."""
        lookup = self._slot.get
        slots = list(map(lookup, keys))
        if None in slots:
            missing = set(keys).difference(self._slot)
            if len(self._slot) + len(missing) > _CACHE_SLOTS:
                self._reset_cache()
                missing = set(keys).difference(self._slot)
            encode_pretoken = self.tok.encode_pretoken
            for pretoken in missing:
                self._add_slot(pretoken, encode_pretoken(pretoken))
            lookup = self._slot.get
            slots = list(map(lookup, keys))
        return np.fromiter(slots, dtype=np.int64, count=len(slots))

    def _pretokens(self, text: str | None) -> list:
        if text is None:
            return []
        if self.allow_special:
            out: list = []
            for segment, is_special in self._matcher.split(text):
                if is_special:
                    out.append(("special", segment))
                else:
                    out.extend(self._findall(self._normalize(segment)))
            return out
        return self._findall(self._normalize(text))

    def encode_texts(self, texts: Sequence[str | None]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``(values int32, offsets int64[n+1], nulls bool[n])`` for ``texts``."""
        if self.compiled:
            return self._encode_compiled(texts)
        if self._plain and not self.allow_special:
            findall = self._findall  # the common case, without a method call per document
            pieces = [findall(text) if text is not None else () for text in texts]
        else:
            pieces = [self._pretokens(text) for text in texts]
        counts = np.fromiter(map(len, pieces), dtype=np.int64, count=len(pieces))
        nulls = np.fromiter((text is None for text in texts), dtype=bool, count=len(texts))
        flat = list(itertools.chain.from_iterable(pieces))
        slots = self.slots_of(flat)
        return self.assemble(self._ids, self._starts[slots], self._lengths[slots], counts, nulls)

    def _encode_compiled(self, texts: Sequence[str | None]):
        nulls = np.fromiter((text is None for text in texts), dtype=bool, count=len(texts))
        if not self.allow_special:
            values, lengths = self.tok.encode_ordinary_flat(texts)
            return self.frame(values, lengths, nulls)
        # Cut the special tokens out; each document becomes units: ordinary segments (encoded
        # together below) and special tokens (one id each, after the segments' ids in `source`).
        segments: list[str] = []
        unit_kind: list[int] = []  # >= 0: segment index; < 0: -1 - special index
        counts = np.zeros(len(texts), dtype=np.int64)
        split, special_index = self._matcher.split, self._special_index
        for i, text in enumerate(texts):
            if not text:
                continue
            pieces = split(text)
            for piece, is_special in pieces:
                if is_special:
                    unit_kind.append(-1 - special_index[piece])
                else:
                    unit_kind.append(len(segments))
                    segments.append(piece)
            counts[i] = len(pieces)
        seg_values, seg_lengths = self.tok.encode_ordinary_flat(segments)
        # one padding entry, so that special units can index segment 0 harmlessly below
        seg_lengths = np.append(seg_lengths, 0)
        seg_starts = np.cumsum(seg_lengths) - seg_lengths
        kinds = np.array(unit_kind, dtype=np.int64)
        is_segment = kinds >= 0
        pick = np.where(is_segment, kinds, len(segments))
        starts = np.where(is_segment, seg_starts[pick], len(seg_values) - 1 - kinds)
        lengths = np.where(is_segment, seg_lengths[pick], 1)
        source = np.concatenate([seg_values, self._special_ids]).astype(np.int32, copy=False)
        return self.assemble(source, starts, lengths, counts, nulls)

    def assemble(self, source: np.ndarray, starts: np.ndarray, lengths: np.ndarray,
                 counts: np.ndarray, nulls: np.ndarray):
        """Gather units (``source[starts[j]:starts[j] + lengths[j]]``, ``counts[i]`` units per
        document) into documents."""
        total = int(lengths.sum())
        # position k of the output reads source[starts[j] + (k - first output of unit j)]
        first_out = np.cumsum(lengths) - lengths
        gather = np.arange(total, dtype=np.int64) + np.repeat(starts - first_out, lengths)
        values = source[gather]
        token_ends = np.concatenate([[0], np.cumsum(lengths)])
        doc_ends = np.concatenate([[0], np.cumsum(counts)])
        return self.frame(values, np.diff(token_ends[doc_ends]), nulls)

    def frame(self, values: np.ndarray, doc_tokens: np.ndarray, nulls: np.ndarray):
        """``(values, offsets, nulls)`` of documents of ``doc_tokens`` ids, BOS/EOS added."""
        extra = (self.bos_id is not None) + (self.eos_id is not None)
        if not extra:
            return values, np.concatenate([[0], np.cumsum(doc_tokens)]), nulls
        bos = 1 if self.bos_id is not None else 0
        with_extra = np.where(nulls, 0, doc_tokens + extra)
        offsets = np.concatenate([[0], np.cumsum(with_extra)])
        out = np.empty(int(offsets[-1]), dtype=np.int32)
        # token k of document d moves by d's shift: the ids added before it
        shift = offsets[:-1] - (np.cumsum(doc_tokens) - doc_tokens) + bos
        out[np.arange(len(values)) + np.repeat(shift, doc_tokens)] = values
        real = ~nulls
        if self.bos_id is not None:
            out[offsets[:-1][real]] = self.bos_id
        if self.eos_id is not None:
            out[offsets[1:][real] - 1] = self.eos_id
        return out, offsets, nulls


_ENCODERS: dict[tuple, BatchEncoder] = {}


def _batch_encoder(broadcast, key: tuple, options: dict) -> BatchEncoder:
    """The process's encoder for a model: built once from the broadcast plain data, then cached."""
    encoder = _ENCODERS.get(key)
    if encoder is None:
        if len(_ENCODERS) >= 4:
            _ENCODERS.clear()
        encoder = BatchEncoder(Tokenizer.from_dict(broadcast.value), **options)
        _ENCODERS[key] = encoder
    return encoder


_WRITTEN_SCHEMA = pa.schema([(name, pa.int64()) for name in ("index", "documents", "tokens", "bytes")])
_SLICE_BYTES = 64 << 20  # text per encoded slice: keeps int32 list offsets far from overflow


def _encode_batches(batches, *, broadcast, key, options, text_index, keep_indices, segments):
    """mapInArrow body: encode each batch's texts, keep the id columns, add positions."""
    from pyspark import TaskContext

    encoder = _batch_encoder(broadcast, key, options)
    positions = _Positions(segments, TaskContext.get().partitionId()) if segments is not None else None
    for batch in batches:
        if batch.num_rows == 0:
            continue
        byte_lengths = _text_bytes(batch.column(text_index))
        cuts = _slice_points(byte_lengths, _SLICE_BYTES)
        pos = positions.of(batch) if positions is not None else None
        for start, stop in itertools.pairwise(cuts):
            part = batch.slice(start, stop - start)
            input_ids, n_tokens = _encode_column(encoder, part.column(text_index))
            columns = [part.column(i) for i in keep_indices]
            if pos is not None:
                columns.append(pa.array(pos[start:stop], type=pa.int64()))
            columns += [input_ids, n_tokens]
            yield pa.RecordBatch.from_arrays(columns, [str(i) for i in range(len(columns))])
    if positions is not None:
        positions.check_complete()


def _encode_column(encoder: BatchEncoder, texts: pa.Array) -> tuple[pa.Array, pa.Array]:
    """``input_ids`` (list<int32>, null for null text) and ``n_tokens`` (int32) of a text column."""
    values, offsets, nulls = encoder.encode_texts(texts.to_pylist())
    input_ids = pa.ListArray.from_arrays(
        pa.array(offsets.astype(np.int32)), pa.array(values, type=pa.int32()), mask=pa.array(nulls)
    )
    return input_ids, pa.array(np.diff(offsets).astype(np.int32), type=pa.int32())


def _text_bytes(texts: pa.Array) -> np.ndarray:
    return pc.fill_null(pc.binary_length(texts), 0).to_numpy(zero_copy_only=False).astype(np.int64)


def _slice_points(byte_lengths: np.ndarray, limit: int) -> list[int]:
    """Row cut points so that each slice holds at most ``limit`` bytes of text (or one row)."""
    n = len(byte_lengths)
    if n == 0 or int(byte_lengths.sum()) <= limit:
        return [0, n]
    cuts, acc = [0], 0
    for i, size in enumerate(byte_lengths.tolist()):
        if acc and acc + size > limit:
            cuts.append(i)
            acc = 0
        acc += size
    cuts.append(n)
    return cuts


class _Positions:
    """Document positions on an executor: segment start + index within the segment.

    A segment is one file split (file, block start) or, for rows not read from files, one
    partition; its rows are contiguous and in order within a task.
    """

    def __init__(self, segments: dict, partition_id: int):
        self.segments = segments
        self.partition_id = partition_id
        self.seen: dict[tuple, int] = {}

    def key(self, file: str | None, block: int) -> tuple:
        return (file, block, -1) if file else ("", -1, self.partition_id)

    def of(self, batch: pa.RecordBatch) -> np.ndarray:
        files = batch.column(batch.num_columns - 2)
        blocks = batch.column(batch.num_columns - 1).to_numpy(zero_copy_only=False)
        encoded = pc.dictionary_encode(files)
        codes = encoded.indices.to_numpy(zero_copy_only=False)
        names = encoded.dictionary.to_pylist()
        n = batch.num_rows
        change = np.ones(n, dtype=bool)
        change[1:] = (codes[1:] != codes[:-1]) | (blocks[1:] != blocks[:-1])
        starts = np.flatnonzero(change).tolist() + [n]
        out = np.empty(n, dtype=np.int64)
        for start, stop in itertools.pairwise(starts):
            key = self.key(names[codes[start]], int(blocks[start]))
            entry = self.segments.get(key)
            if entry is None:
                raise ConfigError(
                    f"input segment {key} was not seen when counting documents: the input changed "
                    "between the counting and the encoding pass; pass id_cols (--id-column) instead"
                )
            done = self.seen.get(key, 0)
            out[start:stop] = entry[0] + done + np.arange(stop - start)
            self.seen[key] = done + stop - start
        return out

    def check_complete(self) -> None:
        for key, count in self.seen.items():
            expected = self.segments[key][1]
            if count != expected:
                raise ConfigError(
                    f"input segment {key} held {expected} documents when counted and {count} when "
                    "encoded: the input is not deterministic; pass id_cols (--id-column) instead"
                )


# --- driver side ----------------------------------------------------------------------------------
def _resolve_token(tok: Tokenizer, value: int | str | None, option: str) -> int | None:
    """The id of an EOS/BOS option: an id, a special token, or a token of the vocabulary."""
    if value is None:
        return None
    if isinstance(value, bool):
        raise ConfigError(f"{option} must be a token or a token id, got {value!r}")
    if isinstance(value, (int, np.integer)):
        try:
            tok.vocab_lookup(int(value))
        except KeyError:
            raise ConfigError(f"{option} id {value} is not in the vocabulary (ids 0..{tok.max_token_id})") from None
        return int(value)
    if value in tok.special_tokens:
        return tok.special_tokens[value]
    token_id = tok.token_to_id(value.encode("utf-8") if tok.scheme == "byte" else value)
    if token_id is None:
        specials = sorted(tok.special_tokens) or "none"
        raise ConfigError(
            f"{option} {value!r} is neither a special token of the model (it has: {specials}) nor a "
            "single token of its vocabulary; give one of those, or a token id"
        )
    return token_id


def _check_columns(df: DataFrame, text_col: str, id_cols: Sequence[str], new_cols: Sequence[str]) -> None:
    """Schema checks before any work (the Spark ML habit)."""
    fields = {field.name: field for field in df.schema.fields}
    if text_col not in fields:
        raise ConfigError(
            f"text column {text_col!r} is not in the input; its columns are {list(fields)} "
            "(choose one with text_col= / --text-column)"
        )
    if not isinstance(fields[text_col].dataType, T.StringType):
        raise ConfigError(
            f"text column {text_col!r} has type {fields[text_col].dataType.simpleString()}, not string"
        )
    for column in id_cols:
        if column not in fields:
            raise ConfigError(f"id column {column!r} is not in the input; its columns are {list(fields)}")
    if len(set(id_cols)) != len(id_cols):
        raise ConfigError(f"id columns repeat: {list(id_cols)}")
    for column in new_cols:
        if column in fields or column in id_cols:
            raise ConfigError(f"Output column {column} already exists.")
    if len(set(new_cols)) != len(new_cols):
        raise ConfigError(f"output column names repeat: {list(new_cols)}")


def _segment_counts(frame: DataFrame) -> dict[tuple, tuple[int, int]]:
    """Count documents per input segment (a JVM-only pass) and give each its first position.

    Segments of files are ordered by file path, then block start, so positions follow file order
    whatever the split size; rows not read from files follow partition order.
    """
    rows = (
        frame.groupBy(F.col(_FILE), F.col(_BLOCK), F.col(_PART)).count().collect()
    )
    keys = {}
    for row in rows:
        file, block, part, count = row[0], row[1], row[2], row[3]
        key = (file, block, -1) if file else ("", -1, part)
        keys[key] = keys.get(key, 0) + count
    segments, position = {}, 0
    for key in sorted(keys):
        segments[key] = (position, keys[key])
        position += keys[key]
    return segments


def _encoded_frame(
    df: DataFrame,
    tok: Tokenizer,
    *,
    text_col: str,
    id_cols: Sequence[str],
    position_col: str | None,
    output_col: str,
    n_tokens_col: str,
    special_tokens: str,
    bos_id: int | None,
    eos_id: int | None,
) -> DataFrame:
    spark = df.sparkSession
    keep = [F.col(f"`{c}`") for c in id_cols]
    projection = keep + [F.col(f"`{text_col}`").alias("__bpe_text")]
    segments = None
    if position_col is not None:
        # subtle: the file columns are projected before the Python stage, where the JVM still
        # knows which file split each row came from.
        projection += [F.input_file_name().alias(_FILE), F.input_file_block_start().alias(_BLOCK)]
        probe = df.select(
            F.input_file_name().alias(_FILE), F.input_file_block_start().alias(_BLOCK),
            F.spark_partition_id().alias(_PART),
        )
        segments = _segment_counts(probe)
    frame = df.select(*projection)
    schema_fields = [df.schema[c] for c in id_cols]
    if position_col is not None:
        schema_fields.append(T.StructField(position_col, T.LongType(), False))
    schema_fields += [
        T.StructField(output_col, T.ArrayType(T.IntegerType(), containsNull=False), True),
        T.StructField(n_tokens_col, T.IntegerType(), False),
    ]
    options = {"special_tokens": special_tokens, "bos_id": bos_id, "eos_id": eos_id}
    fingerprint = model_fingerprint(tok)
    broadcast = spark.sparkContext.broadcast(tok.to_dict())
    key = (fingerprint, special_tokens, bos_id, eos_id)
    text_index = len(id_cols)
    keep_indices = list(range(len(id_cols)))

    def run(batches):
        return _encode_batches(
            batches, broadcast=broadcast, key=key, options=options, text_index=text_index,
            keep_indices=keep_indices, segments=segments,
        )

    out_schema = T.StructType([T.StructField(str(i), f.dataType, f.nullable) for i, f in enumerate(schema_fields)])
    encoded = frame.mapInArrow(run, out_schema)
    return encoded.toDF(*[f.name for f in schema_fields])


def encode(
    df: DataFrame,
    tok: Tokenizer,
    text_col: str = "text",
    *,
    id_cols: Sequence[str] | None = None,
    output_col: str = "input_ids",
    n_tokens_col: str = "n_tokens",
    doc_id_col: str = "doc_id",
    eos: int | str | None = None,
    bos: int | str | None = None,
    special_tokens: str = "ordinary",
) -> DataFrame:
    """Encode the documents of ``df[text_col]``: id columns, ``input_ids`` array<int32>, ``n_tokens``.

    The tokenizer is broadcast once as plain data and rebuilt once per executor process. Ids
    equal ``tok.encode(text, disallowed_special=())`` row for row (``special_tokens="ordinary"``,
    special-token text encodes as ordinary text) or ``tok.encode(text, allowed_special="all")``
    (``"allowed"``). ``eos`` / ``bos`` (a special token, a vocabulary token or an id) are
    appended / prepended to every non-null document.

    Without ``id_cols`` the output carries ``doc_id``, the position in input order (see the
    module docstring; computing it costs one extra JVM-only pass over the input). Null text gives
    a null ``input_ids`` and ``n_tokens`` 0; empty text gives ``[]``.

    >>> out = encode(spark.createDataFrame([("hello",)], ["text"]), tok)   # doctest: +SKIP
    >>> out.columns                                                       # doctest: +SKIP
    ['doc_id', 'input_ids', 'n_tokens']
    """
    if special_tokens not in SPECIAL_POLICIES:
        raise ConfigError(f"special_tokens must be one of {SPECIAL_POLICIES}, got {special_tokens!r}")
    id_cols = list(id_cols or [])
    position_col = None if id_cols else doc_id_col
    new_cols = [c for c in (position_col, output_col, n_tokens_col) if c is not None]
    _check_columns(df, text_col, id_cols, new_cols)
    bos_id = _resolve_token(tok, bos, "bos")
    eos_id = _resolve_token(tok, eos, "eos")
    return _encoded_frame(
        df, tok, text_col=text_col, id_cols=id_cols, position_col=position_col,
        output_col=output_col, n_tokens_col=n_tokens_col,
        special_tokens=special_tokens, bos_id=bos_id, eos_id=eos_id,
    )


# --- writing an encoded dataset ------------------------------------------------------------------
class _Output:
    """An output directory on any filesystem pyarrow knows (local paths, file://, s3://, hdfs://)."""

    def __init__(self, uri: str):
        import os

        import pyarrow.fs as pafs

        uri = str(uri)
        if "://" not in uri:
            uri = os.path.abspath(uri)
        try:
            self.fs, path = pafs.FileSystem.from_uri(uri)
        except (pa.ArrowInvalid, ValueError) as exc:
            raise ConfigError(f"cannot write to {uri!r}: {exc}") from None
        self.path = path.rstrip("/") or "/"
        self.uri = uri
        parent, _, name = self.path.rpartition("/")
        if not name:
            raise ConfigError(f"output {uri!r} names no directory")
        self.parent = parent or "/"
        self.name = name

    def exists(self) -> bool:
        import pyarrow.fs as pafs

        return self.fs.get_file_info(self.path).type != pafs.FileType.NotFound

    def sibling(self, tag: str) -> str:
        return f"{self.parent}/.{self.name}.{tag}-{uuid.uuid4().hex[:12]}"

    def delete(self, path: str) -> None:
        import pyarrow.fs as pafs

        info = self.fs.get_file_info(path)
        if info.type == pafs.FileType.Directory:
            self.fs.delete_dir(path)
        elif info.type != pafs.FileType.NotFound:
            self.fs.delete_file(path)

    def publish(self, staging: str, overwrite: bool) -> None:
        """Move the finished ``staging`` directory to the output path (replacing it if asked)."""
        old = None
        if self.exists():
            if not overwrite:
                raise OutputExistsError(f"{self.uri} already exists; pass overwrite=True (--overwrite) to replace it")
            old = self.sibling("old")
            self.fs.move(self.path, old)
        self.fs.move(staging, self.path)
        if old is not None:
            self.delete(old)


_PIECE_FIELDS = ("file", "block", "part", "seq", "piece", "documents", "tokens", "text_bytes", "nulls")


def _segment_runs(batch: pa.RecordBatch, partition_id: int) -> list[tuple[int, int, tuple]]:
    """``(lo, hi, key)`` runs of rows from one input segment: a file split ``(file, block)``,
    or, for rows not read from files, the partition."""
    files = pc.dictionary_encode(batch.column(batch.num_columns - 2))
    codes = files.indices.to_numpy(zero_copy_only=False)
    names = files.dictionary.to_pylist()
    blocks = batch.column(batch.num_columns - 1).to_numpy(zero_copy_only=False)
    n = batch.num_rows
    change = np.ones(n, dtype=bool)
    change[1:] = (codes[1:] != codes[:-1]) | (blocks[1:] != blocks[:-1])
    starts = [*np.flatnonzero(change).tolist(), n]
    runs = []
    for lo, hi in itertools.pairwise(starts):
        name = names[codes[lo]]
        key = (name, int(blocks[lo]), -1) if name else ("", -1, partition_id)
        runs.append((lo, hi, key))
    return runs


def _encode_pieces(batches, *, broadcast, key, options, text_index, keep_names, fs, pieces_dir, attempt_tag):
    """mapInArrow body of encode_dataset: encode the task's rows into one Arrow file per input
    segment (its documents in input order), and report each piece's segment and totals."""
    from pyspark import TaskContext

    context = TaskContext.get()
    partition_id = context.partitionId()
    tag = f"{attempt_tag}-{context.attemptNumber()}"
    encoder = _batch_encoder(broadcast, key, options)
    keep_indices = list(range(len(keep_names)))
    schema = None
    stats: list[tuple] = []
    current: dict[str, Any] = {}

    def finish():
        if current:
            current["writer"].close()
            current["sink"].close()
            fs.move(current["tmp"], current["final"])
            stats.append((*current["key"], current["seq"], current["name"], current["documents"],
                          current["tokens"], current["text_bytes"], current["nulls"]))
            current.clear()

    seq = 0
    for batch in batches:
        if batch.num_rows == 0:
            continue
        for lo, hi, segment in _segment_runs(batch, partition_id):
            if not current or current["key"] != segment:
                finish()
                name = f"piece-{partition_id:05d}-{seq:05d}.arrow"
                final = f"{pieces_dir}/{name}"
                sink = fs.open_output_stream(f"{final}.tmp-{tag}")
                current.update(key=segment, seq=seq, name=name, final=final, tmp=f"{final}.tmp-{tag}",
                               sink=sink, writer=None, documents=0, tokens=0, text_bytes=0, nulls=0)
                seq += 1
            run = batch.slice(lo, hi - lo)
            byte_lengths = _text_bytes(run.column(text_index))
            for start, stop in itertools.pairwise(_slice_points(byte_lengths, _SLICE_BYTES)):
                part = run.slice(start, stop - start)
                input_ids, n_tokens = _encode_column(encoder, part.column(text_index))
                columns = [part.column(i) for i in keep_indices] + [input_ids, n_tokens]
                out = pa.RecordBatch.from_arrays(columns, [*keep_names, "input_ids", "n_tokens"])
                if current["writer"] is None:
                    schema = schema or out.schema
                    current["writer"] = pa.ipc.new_file(current["sink"], schema)
                current["writer"].write_batch(out)
                current["documents"] += part.num_rows
                current["tokens"] += int(pc.sum(n_tokens).as_py() or 0)
                current["text_bytes"] += int(byte_lengths[start:stop].sum())
                current["nulls"] += input_ids.null_count
    finish()
    if stats:
        columns = list(zip(*stats))
        types = [pa.string(), pa.int64(), pa.int64(), pa.int64(), pa.string()] + [pa.int64()] * 4
        yield pa.RecordBatch.from_arrays([pa.array(c, type=t) for c, t in zip(columns, types)], _PIECE_FIELDS)


def _read_piece(fs, path: str) -> pa.Table:
    import pyarrow.fs as pafs

    if isinstance(fs, pafs.LocalFileSystem):
        return pa.ipc.open_file(pa.memory_map(path)).read_all()
    return pa.ipc.open_file(fs.open_input_file(path)).read_all()


def _plan_shards(pieces: list[dict], shard_tokens: int, fs, pieces_dir: str) -> list[dict]:
    """Cut the documents, in order, into shards of about ``shard_tokens`` tokens.

    A document goes to the shard where its first token falls (token offset // shard_tokens), so
    the cut depends on the data only, never on the partitioning. Only the pieces in which a cut
    falls are opened, to find the document it falls on.
    """
    shards: list[dict] = []
    document = token = 0
    for piece in pieces:
        if piece["documents"] == 0:
            continue
        first_shard = token // shard_tokens
        if (token + piece["tokens"]) // shard_tokens == first_shard:
            doc_shards = np.full(piece["documents"], first_shard, dtype=np.int64)
        else:
            n_tokens = _read_piece(fs, f"{pieces_dir}/{piece['piece']}").column("n_tokens").to_numpy()
            doc_shards = (token + np.cumsum(n_tokens) - n_tokens) // shard_tokens
        starts = [0, *(np.flatnonzero(np.diff(doc_shards)) + 1).tolist()]
        ends = [*starts[1:], piece["documents"]]
        for lo, hi in zip(starts, ends):
            if not shards or shards[-1]["raw"] != int(doc_shards[lo]):
                shards.append({"raw": int(doc_shards[lo]), "first": document + lo, "documents": 0, "slices": []})
            shards[-1]["documents"] += hi - lo
            shards[-1]["slices"].append((piece["piece"], lo, hi, document + lo))
        document += piece["documents"]
        token += piece["tokens"]
    return shards


def _assemble_shards(specs, *, fs, staging, pieces_dir, output_format, dtype, id_cols, attempt_tag):
    """mapPartitions body: write each shard from its slices of the pieces; yield its totals."""
    import pyarrow.parquet as pq
    from pyspark import TaskContext

    tag = f"{attempt_tag}-{TaskContext.get().partitionId()}-{TaskContext.get().attemptNumber()}"
    for spec in specs:
        moves = []

        def opener(path: str, moves=moves):
            moves.append((f"{path}.tmp-{tag}", path))
            return fs.open_output_stream(moves[-1][0])

        prefix = f"{staging}/{spec['name']}"
        tokens = 0
        writer = ShardWriter(prefix, dtype, opener=opener) if output_format == "bin" else None
        parquet = sink = None
        for piece, lo, hi, first_doc in spec["slices"]:
            rows = _read_piece(fs, f"{pieces_dir}/{piece}").slice(lo, hi - lo)
            ids = rows.column("input_ids").combine_chunks()
            tokens += int(pc.sum(rows.column("n_tokens")).as_py() or 0)
            if writer is not None:
                writer.add_documents(ids.values.to_numpy(zero_copy_only=False), ids.offsets.to_numpy())
                continue
            if id_cols:
                table = rows.select([*id_cols, "input_ids", "n_tokens"])
            else:
                doc_ids = pa.array(np.arange(first_doc, first_doc + rows.num_rows), type=pa.int64())
                table = pa.table({"doc_id": doc_ids, "input_ids": rows.column("input_ids"),
                                  "n_tokens": rows.column("n_tokens")})
            if parquet is None:
                sink = opener(prefix + ".parquet")
                parquet = _RowGroupWriter(pq.ParquetWriter(sink, table.schema, compression="zstd"))
            parquet.add(table)
        if writer is not None:
            writer.close()
        elif parquet is not None:
            parquet.close()
            sink.close()
        size = 0
        for tmp, final in moves:
            fs.move(tmp, final)
            size += fs.get_file_info(final).size
        yield {"index": spec["index"], "documents": spec["documents"], "tokens": tokens, "bytes": size}


def _split_batches(batches, splits: list[textsplits.Split]):
    """The documents of the splits named by the task's rows, as Arrow batches shaped like the
    Spark reader's (text, file URI, block start): see :mod:`bpe_spark.spark.textsplits`."""
    for batch in batches:
        for index in batch.column(0).to_pylist():
            split = splits[index]
            for lines in textsplits.iter_lines(split):
                n = len(lines)
                yield pa.RecordBatch.from_arrays(
                    [pa.array(lines, pa.string()), pa.array([split.uri] * n, pa.string()),
                     pa.array([split.start] * n, pa.int64())],
                    ["__bpe_text", _FILE, _BLOCK],
                )


class _RowGroupWriter:
    """Parquet row groups cut by the document stream alone (a group ends at the first document
    that brings it to ``max_tokens`` tokens or ``max_rows`` rows), never by how the input was
    split into pieces: the same bytes whatever the partitioning."""

    def __init__(self, writer, max_tokens: int = 1 << 22, max_rows: int = 1 << 16):
        self.writer = writer
        self.max_tokens = max_tokens
        self.max_rows = max_rows
        self.pending: list[pa.Table] = []

    def add(self, table: pa.Table) -> None:
        self.pending.append(table)
        self._flush(final=False)

    def _flush(self, final: bool) -> None:
        if not self.pending:
            return
        table = pa.concat_tables(self.pending)
        self.pending = []
        tokens = np.cumsum(table.column("n_tokens").to_numpy(zero_copy_only=False))
        start = 0  # the group being cut begins at row `start`, after `done` tokens
        while start < table.num_rows:
            done = tokens[start - 1] if start else 0
            full = start + int(np.searchsorted(tokens[start:], done + self.max_tokens))  # first row reaching it
            end = min(full + 1, start + self.max_rows)
            if end > table.num_rows:
                if final:
                    self.writer.write_table(table.slice(start), row_group_size=table.num_rows - start)
                else:
                    self.pending = [table.slice(start)]
                return
            self.writer.write_table(table.slice(start, end - start), row_group_size=end - start)
            start = end

    def close(self) -> None:
        self._flush(final=True)
        self.writer.close()


def _encode_to_pieces(df, tok, *, text_col, id_cols, fs, pieces_dir, special_tokens, bos_id, eos_id) -> list[dict]:
    """Run the encoding job: one Arrow piece per input segment; the pieces in document order.

    Local text files tagged by ``read_documents`` are read by the tasks themselves, one split per
    task (no JVM string per line); anything else goes through the DataFrame."""
    source = textsplits.source_of(df)
    splits = None
    if source is not None and not id_cols and df.columns == [text_col]:
        spark = df.sparkSession
        splits = textsplits.plan_splits(source, spark.sparkContext.defaultParallelism)
        frame = spark.range(0, len(splits), 1, numPartitions=max(1, len(splits)))
    else:
        frame = df.select(
            *[F.col(f"`{c}`") for c in id_cols], F.col(f"`{text_col}`").alias("__bpe_text"),
            F.input_file_name().alias(_FILE), F.input_file_block_start().alias(_BLOCK),
        )
    broadcast = df.sparkSession.sparkContext.broadcast(tok.to_dict())
    key = (model_fingerprint(tok), special_tokens, bos_id, eos_id)
    options = {"special_tokens": special_tokens, "bos_id": bos_id, "eos_id": eos_id}
    tag = uuid.uuid4().hex[:8]

    def run(batches):
        if splits is not None:
            batches = _split_batches(batches, splits)
        return _encode_pieces(batches, broadcast=broadcast, key=key, options=options, text_index=len(id_cols),
                              keep_names=list(id_cols), fs=fs, pieces_dir=pieces_dir, attempt_tag=tag)

    schema = T.StructType([
        T.StructField(name, T.StringType() if name in ("file", "piece") else T.LongType())
        for name in _PIECE_FIELDS
    ])
    try:
        rows = frame.mapInArrow(run, schema).collect()
    finally:
        broadcast.unpersist()
    pieces = sorted((row.asDict() for row in rows), key=lambda p: (p["file"], p["block"], p["part"], p["seq"]))
    return pieces


def encode_dataset(
    df: DataFrame,
    tok: Tokenizer,
    out: str,
    *,
    output_format: str = "parquet",
    text_col: str = "text",
    id_cols: Sequence[str] | None = None,
    eos: int | str | None = None,
    bos: int | str | None = None,
    special_tokens: str = "ordinary",
    dtype: str = "auto",
    shard_tokens: int = DEFAULT_SHARD_TOKENS,
    overwrite: bool = False,
    source: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Encode ``df[text_col]`` and write it to ``out``: Parquet parts or binary shards + manifest.

    Documents are written in ``doc_id`` order (input order, see :func:`encode`), cut into shards
    of about ``shard_tokens`` tokens at document boundaries: ``part-00000.parquet``... (columns:
    the id columns or ``doc_id``, ``input_ids``, ``n_tokens``) or ``shard-00000.bin`` + ``.idx``
    (see :mod:`bpe_spark.shards`). The same input and model give the same files, byte for byte,
    whatever the partitioning. Everything is written to a hidden sibling directory first and
    moved into place, with ``_manifest.json``, only when the job succeeds; a failed job leaves no
    output. Returns the manifest.

    ``out`` is a local (or shared) path or a URI pyarrow can write (``s3://``, ``hdfs://``):
    executors write the files directly, so on a cluster it must be a filesystem they all reach.
    """
    started = time.time()
    if output_format not in OUTPUT_FORMATS:
        raise ConfigError(f"output_format must be one of {OUTPUT_FORMATS}, got {output_format!r}")
    if special_tokens not in SPECIAL_POLICIES:
        raise ConfigError(f"special_tokens must be one of {SPECIAL_POLICIES}, got {special_tokens!r}")
    if isinstance(shard_tokens, bool) or not isinstance(shard_tokens, int) or shard_tokens < 1:
        raise ConfigError(f"shard_tokens must be a positive integer, got {shard_tokens!r}")
    id_cols = list(id_cols or [])
    bos_id = _resolve_token(tok, bos, "bos")
    eos_id = _resolve_token(tok, eos, "eos")
    if output_format == "bin":
        numpy_dtype = token_dtype(tok.max_token_id, dtype)
    else:
        if dtype not in ("auto", "int32"):
            raise ConfigError(f"Parquet output stores input_ids as int32; dtype {dtype!r} applies to bin output only")
        token_dtype(tok.max_token_id, "auto")
        numpy_dtype = np.dtype("int32")
    _check_columns(df, text_col, id_cols, ["doc_id", "input_ids", "n_tokens"] if not id_cols else ["input_ids", "n_tokens"])
    output = _Output(out)
    if output.exists() and not overwrite:
        raise OutputExistsError(f"{output.uri} already exists; pass overwrite=True (--overwrite) to replace it")

    staging = output.sibling("staging")
    pieces_dir = f"{staging}/_pieces"
    fs = output.fs
    try:
        fs.create_dir(pieces_dir, recursive=True)
        pieces = _encode_to_pieces(df, tok, text_col=text_col, id_cols=id_cols, fs=fs, pieces_dir=pieces_dir,
                                   special_tokens=special_tokens, bos_id=bos_id, eos_id=eos_id)
        plan = _plan_shards(pieces, shard_tokens, fs, pieces_dir)
        prefix = "shard" if output_format == "bin" else "part"
        for index, entry in enumerate(plan):
            entry.update(index=index, name=shard_name(index, len(plan), prefix))
        written = {}
        if plan:
            tag = uuid.uuid4().hex[:8]

            def assemble(specs):
                return _assemble_shards(specs, fs=fs, staging=staging, pieces_dir=pieces_dir,
                                        output_format=output_format, dtype=numpy_dtype, id_cols=id_cols,
                                        attempt_tag=tag)

            specs = [{key: entry[key] for key in ("index", "name", "documents", "slices")} for entry in plan]

            def assemble_batches(batches):
                # one shard per row of spark.range: the same (SQL) Python workers as the encoding
                # job, so no second worker pool starts
                wanted = [specs[i] for batch in batches for i in batch.column(0).to_pylist()]
                for row in assemble(wanted):
                    yield pa.RecordBatch.from_pylist([row], schema=_WRITTEN_SCHEMA)

            shard_ids = df.sparkSession.range(0, len(specs), 1, numPartitions=len(specs))
            written_type = T.StructType([T.StructField(name, T.LongType()) for name in _WRITTEN_SCHEMA.names])
            for row in shard_ids.mapInArrow(assemble_batches, written_type).collect():
                written[row["index"]] = row.asDict()
        fs.delete_dir(pieces_dir)
        shards = []
        for entry in plan:
            got = written.get(entry["index"])
            if got is None or got["documents"] != entry["documents"]:
                raise RuntimeError(f"internal: shard {entry['name']} was written as {got}, planned as {entry}")
            name = entry["name"]
            files = [name + ".bin", name + ".idx"] if output_format == "bin" else [name + ".parquet"]
            shards.append({
                "name": name, "files": files, "first_document": entry["first"],
                "documents": entry["documents"], "tokens": got["tokens"], "bytes": got["bytes"],
            })
        documents = sum(piece["documents"] for piece in pieces)
        tokens = sum(piece["tokens"] for piece in pieces)
        text_bytes = sum(piece["text_bytes"] for piece in pieces)
        if sum(shard["tokens"] for shard in shards) != tokens:
            raise RuntimeError("internal: the shards do not hold every token encoded")
        manifest = {
            "format": MANIFEST_FORMAT,
            "format_version": MANIFEST_VERSION,
            "output_format": output_format,
            "documents": documents,
            "null_documents": sum(piece["nulls"] for piece in pieces),
            "tokens": tokens,
            "bytes": text_bytes,
            "bytes_per_token": round(text_bytes / tokens, 6) if tokens else None,
            "dtype": numpy_dtype.name,
            "columns": (id_cols or ["doc_id"]) + ["input_ids", "n_tokens"],
            "id_columns": id_cols,
            "text_column": text_col,
            "special_tokens": special_tokens,
            "bos_id": bos_id,
            "eos_id": eos_id,
            "shard_tokens": shard_tokens,
            "model": {
                "fingerprint": model_fingerprint(tok),
                "vocab_size": tok.vocab_size,
                "max_token_id": tok.max_token_id,
                "scheme": tok.scheme,
                "pattern": tok.pattern,
            },
            "source": dict(source or {}),
            "shards": shards,
            "output_bytes": sum(shard["bytes"] for shard in shards),
            "seconds": round(time.time() - started, 3),
            "created": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        }
        with output.fs.open_output_stream(f"{staging}/{MANIFEST_NAME}") as fh:
            fh.write((json.dumps(manifest, indent=2, sort_keys=False) + "\n").encode("utf-8"))
        output.publish(staging, overwrite)
        return manifest
    except Exception as exc:
        translated = _executor_error(exc)
        if translated is exc:
            raise
        raise translated from exc
    finally:
        with contextlib.suppress(Exception):
            output.delete(staging)


_CORE_ERRORS = ("UnknownCharacterError", "ConfigError", "DisallowedSpecialTokenError")


def _executor_error(exc: Exception) -> Exception:
    """Re-raise a bpe-spark error that happened on an executor as itself, not as a Java trace."""
    if isinstance(exc, BpeSparkError):
        return exc
    text = str(exc)
    from bpe_spark import errors

    for name in _CORE_ERRORS:
        marker = f"bpe_spark.errors.{name}: "
        if marker in text:
            message = text.split(marker, 1)[1].splitlines()[0]
            return getattr(errors, name)(message)
    return exc
