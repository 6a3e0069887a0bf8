"""What ``encode`` and ``encode_dataset`` share: the model broadcast, the encoding of Arrow
batches on the executors, and the input checks. Input segments (how documents are numbered)
are :mod:`bpe_spark.spark.read.segments`; executor errors :mod:`bpe_spark.spark.runtime.failures`.

The tokenizer is broadcast once, as plain data, and rebuilt once per executor process
(:class:`ModelBroadcast`); each Arrow batch is cut into slices of at most ``SLICE_BYTES`` of text
and encoded whole by :class:`~bpe_spark.encoding.batch_encoder.BatchEncoder` (:func:`encoded_slices`).
The text column holds the input's bytes (a string column from Spark's readers carries them
unchecked, or binary): :func:`arrow_text` makes them text by the rule of :mod:`bpe_spark.bpe.text`,
counting its replacements.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql import DataFrame

from bpe_spark.encoding.batch_encoder import BatchEncoder
from bpe_spark.encoding.options import EncodeOptions
from bpe_spark.errors import (
    ConfigError,
    option,
)
from bpe_spark.spark.runtime.columns import STRING, check_columns
from bpe_spark.spark.runtime.faults import fail_once
from bpe_spark.bpe.text import InputTally, utf8_buffers, utf8_view
from bpe_spark.encoding.tokenizer import Tokenizer

TEXT = "__bpe_text"
SLICE_BYTES = 64 << 20  # text per encoded slice: keeps int32 list offsets far from overflow


# --- driver side ----------------------------------------------------------------------------------
def check_input(df: DataFrame, text_col: str, id_cols: Sequence[str], added: Sequence[str]) -> None:
    """Schema checks before any work: the text column is a string, the id columns exist, the
    ``added`` output columns do not (:class:`~bpe_spark.errors.ColumnError`)."""
    check_columns(df, {text_col: STRING}, hint=f"choose the text column with {option('text_col')}")
    check_columns(df, dict.fromkeys(id_cols), hint=f"choose id columns with {option('id_cols')}", added=added)
    if len(set(id_cols)) != len(id_cols):
        raise ConfigError(f"id columns repeat: {list(id_cols)}; name each once")
    if len(set(added)) != len(added):
        raise ConfigError(f"output column names repeat: {list(added)}; give each output column its own name")


IDS = pa.int32()  # the ids' type unless the shards take another (encode_dataset's pieces)


class ModelBroadcast:
    """The model, broadcast once as plain data with its encode options, resolved
    (:meth:`~bpe_spark.encoding.options.EncodeOptions.resolved`: plain and hashable); on an
    executor, the process's encoder."""

    def __init__(self, spark, tok: Tokenizer, options: EncodeOptions):
        self.options = options
        data = tok.to_dict()  # one copy of the model, broadcast
        self.fingerprint = tok.fingerprint  # the manifest's too
        self.key = (self.fingerprint, self.options)
        self.broadcast = spark.sparkContext.broadcast(data)

    def encoder(self) -> BatchEncoder:
        """The process's encoder for this model and options: built once, then cached."""
        encoder = _ENCODERS.get(self.key)
        if encoder is None:
            if len(_ENCODERS) >= 4:
                _ENCODERS.clear()
            encoder = BatchEncoder(Tokenizer.from_dict(self.broadcast.value), self.options)
            _ENCODERS[self.key] = encoder
        return encoder

    def unpersist(self) -> None:
        self.broadcast.unpersist()


_ENCODERS: dict[tuple, BatchEncoder] = {}  # one per (model, options) per Python worker process


# --- executor side --------------------------------------------------------------------------------
def encoded_slices(encoder: BatchEncoder, rows: pa.RecordBatch, text_index: int,
                   tally: InputTally | None = None, id_type: pa.DataType = IDS) -> Iterator[tuple]:
    """``(start, slice, input_ids, n_tokens, text_bytes)`` for each slice of ``rows`` holding at
    most ``SLICE_BYTES`` of text: ``input_ids`` list<``id_type``> (null for null text), ``n_tokens``
    int32, ``text_bytes`` each row's size as read. The text rule's work on a slice is counted
    in ``tally`` before the slice is yielded."""
    byte_lengths = text_bytes(rows.column(text_index))
    for start, stop in itertools.pairwise(slice_points(byte_lengths, SLICE_BYTES)):
        part = rows.slice(start, stop - start)
        input_ids, n_tokens = id_columns(*encode_column(encoder, part.column(text_index), tally), id_type)
        yield start, part, input_ids, n_tokens, byte_lengths[start:stop]
    fail_once("encode")  # the test hook (faults.py), after a batch went out: off unless a test asks


def encode_column(encoder: BatchEncoder, column: pa.Array, tally: InputTally | None = None):
    """:meth:`~bpe_spark.encoding.batch_encoder.BatchEncoder.encode_texts` of a text column (by
    :func:`arrow_text`), the nulls from the column's validity bitmap, not from a pass over the
    texts. A column of valid UTF-8 without nulls goes to the encoder as its buffers when the
    encoder takes them (no ``str`` per text: :meth:`~bpe_spark.encoding.batch_encoder.BatchEncoder.encode_utf8`)."""
    if encoder.takes_utf8 and column.null_count == 0 and (buffers := utf8_buffers(column)) is not None:
        return encoder.encode_utf8(*buffers)
    return encoder.encode_texts(arrow_text(column, tally), nulls=column.is_null().to_numpy(zero_copy_only=False))


def id_columns(values: np.ndarray, offsets: np.ndarray, nulls: np.ndarray,
               id_type: pa.DataType = IDS) -> tuple[pa.ListArray, pa.Array]:
    """``input_ids`` (list<``id_type``>, null where ``nulls``) and ``n_tokens`` (int32) of
    :meth:`~bpe_spark.encoding.batch_encoder.BatchEncoder.encode_texts`' output; int32 ids are not copied,
    others are :func:`narrowed`."""
    input_ids = pa.ListArray.from_arrays(
        pa.array(offsets.astype(np.int32)), pa.array(narrowed(values, id_type), type=id_type), mask=pa.array(nulls)
    )
    return input_ids, pa.array(np.diff(offsets).astype(np.int32), type=pa.int32())


_NARROW_BLOCK = 1 << 20


def narrowed(values: np.ndarray, id_type: pa.DataType) -> np.ndarray:
    """The ids ``values`` as ``id_type``, over their own buffer when they may be written (a
    long document's ids: never a second copy of them), else copied. Every id fits the type
    the model's largest id chose.

    >>> narrowed(np.array([5, 300, 65535, 7], dtype=np.int32), pa.uint16()).tolist()
    [5, 300, 65535, 7]
    """
    dtype = np.dtype(id_type.to_pandas_dtype())
    if values.dtype == dtype:
        return values
    if values.dtype.itemsize == dtype.itemsize:
        return values.view(dtype)  # int32 to uint32: the same bits (ids are not negative)
    if not (values.flags.writeable and values.flags.c_contiguous) or values.dtype.itemsize != 2 * dtype.itemsize:
        return values.astype(dtype)
    out, n = values.view(dtype), len(values)
    # Element i goes to bytes [2i, 2i+2), inside the ids before i/2 + 1: a block [at, end) with
    # end <= 2 * at overwrites only ids already moved, and never the ones it reads.
    if n:
        out[0] = values[0]
    at = 1
    while at < n:
        end = min(n, 2 * at, at + _NARROW_BLOCK)
        out[at:end] = values[at:end]
        at = end
    return out[:n]


def arrow_text(column: pa.Array, tally: InputTally | None = None) -> list[str | None]:
    """The texts of a (large) string or binary column by the rule of :mod:`bpe_spark.bpe.text`. Fast path:
    Arrow checks the whole column is UTF-8 at once; only a column that is not is decoded row by
    row (counted in ``tally``).

    >>> arrow_text(pa.array([b"ok", b"\\xff", None], pa.binary()))
    ['ok', '\\ufffd', None]
    """
    valid = utf8_view(column)
    if valid is not None:
        return valid.to_pylist()
    tally = tally if tally is not None else InputTally()
    large = pa.types.is_large_string(column.type) or pa.types.is_large_binary(column.type)
    raws = column.view(pa.large_binary() if large else pa.binary()).to_pylist()
    return [None if raw is None else tally.add_bytes(raw) for raw in raws]


def text_bytes(texts: pa.Array) -> np.ndarray:
    """The size of each text as read, in bytes (0 for null)."""
    return pc.fill_null(pc.binary_length(texts), 0).to_numpy(zero_copy_only=False).astype(np.int64)


def slice_points(byte_lengths: np.ndarray, limit: int) -> list[int]:
    """Row cut points so that each slice holds at most ``limit`` bytes of text (or one row).

    >>> slice_points(np.array([3, 3, 3, 9, 1]), 6)
    [0, 2, 3, 4, 5]
    """
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
