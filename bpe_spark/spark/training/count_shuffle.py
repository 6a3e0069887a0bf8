"""The shuffle of partial pretoken counts (docs/design.md 2.1 step 2): packed by bucket, summed in
Python.

A counting task's partial counts (each task's distinct pretokens, millions on web text) would
cost the JVM a row each: converted from Arrow, hashed into a partial aggregation, written to the
shuffle, read back and aggregated again, on the cores that count. Here a task splits its counts
into buckets by the pretoken's hash (the compiled counter's ``bucket_buffers``: the same bucket in
every process) and hands Spark one row per bucket, the bucket's pretokens and counts packed as
Arrow buffers in three binary values; Spark shuffles these few large rows by bucket, and each
reduce task adds the buckets it receives into one compiled counter (``add_counts``) and emits the
sums packed again, in pieces, ordered by the pretokens' hash (an order of the keys alone: the
same bytes whatever order the shuffle delivers them in). A bucket holds each pretoken it names
whole, so the reduce tasks' sums are disjoint and their union is the count table. The table's
rows unpack those pieces; the driver summarizes and collects the pieces themselves
(:func:`summary`, :func:`collect`), and a persisted table keeps them (:func:`persist`).

Used where the compiled counter exists (:func:`packing_available`); without it the partial
counts go through Spark's aggregation as rows (``count._Partials``).

>>> counts = count_pretokens(read_documents(spark, "corpus.txt"), cfg)  # doctest: +SKIP
>>> summary(counts)                                                      # doctest: +SKIP
{'distinct': 3700740, 'total': 192633453, 'lowest': 1, 'bytes': 36541210}
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable, Iterator
from itertools import pairwise

import numpy as np
import pyarrow as pa
from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.sql.types import BinaryType, IntegerType, LongType, StringType, StructField, StructType

from bpe_spark.native import compiled as _compiled
from bpe_spark.spark.runtime import resources

# one row per bucket of a task's partial counts: the bucket, then the Arrow buffers of its
# pretokens (int32 offsets, UTF-8 data) and counts (int64), as PretokenCounter.buffers() gives them
PACKED_FIELDS = (StructField("bucket", IntegerType()), StructField("offsets", BinaryType()),
                 StructField("data", BinaryType()), StructField("counts", BinaryType()))
COUNTS_SCHEMA = StructType([StructField("pretoken", StringType()), StructField("count", LongType())])
# a piece of a reduce task's sums: its buffers as in PACKED_FIELDS, and its figures
SUMS_SCHEMA = StructType([*PACKED_FIELDS[1:], *(StructField(name, LongType())
                                                for name in ("distinct", "total", "lowest", "bytes"))])
_SUMS_ARROW = pa.schema([("offsets", pa.binary()), ("data", pa.binary()), ("counts", pa.binary()),
                         ("distinct", pa.int64()), ("total", pa.int64()), ("lowest", pa.int64()), ("bytes", pa.int64())])
PIECE_BYTES = 16 << 20  # a piece is collected as one value: below resources.COLLECT_TASK_BYTES
_PACKED = "_bpe_spark_packed_sums"  # the attribute of an unpacked table naming its packed sums
BUCKETS_PER_PARTITION = 8  # buckets reach partitions by Spark's hash: several each evens them out
MAX_PARTITIONS = 1024  # a task's partial counts go out in this many rows at most, times the above
_ANY_PRESET = "gpt2"  # a counter that only adds counts never pretokenizes: any preset will do


def packing_available() -> bool:
    """Whether the compiled counter (which packs and sums partial counts) is built."""
    return _compiled.encoder_available()


def reduce_partitions(partitions: int) -> int:
    """The tasks that sum a count table planned for ``partitions`` (at most :data:`MAX_PARTITIONS`:
    every counting task sends a row to each bucket).

    >>> reduce_partitions(8), reduce_partitions(7451)
    (8, 1024)
    """
    return max(1, min(partitions, MAX_PARTITIONS))


def buckets_for(partitions: int) -> int:
    """The buckets of a count table summed in ``partitions`` reduce tasks."""
    return max(1, partitions) * BUCKETS_PER_PARTITION


def new_counter():
    """A compiled counter used only to add counts (``add_counts``)."""
    counter = _compiled.new_counter(_ANY_PRESET)
    if counter is None:  # the driver has the extension (it chose this path), this executor not
        raise RuntimeError("bpe-spark's compiled extension is built on the driver but not importable on this "
                           "executor; install the same bpe-spark wheel on the executors (docs/guides/cluster.md)")
    return counter


def packed_columns(counter, buckets: int) -> list[pa.Array]:
    """The ``PACKED_FIELDS`` columns of ``counter``'s counts split into ``buckets`` (the empty
    buckets left out); the counter is left as it was."""
    parts = [(bucket, part) for bucket, part in enumerate(counter.bucket_buffers(buckets)) if len(part[2])]
    ids = np.array([bucket for bucket, _ in parts], dtype=np.int32)
    return [pa.Array.from_buffers(pa.int32(), len(parts), [None, pa.py_buffer(ids.tobytes())]),
            *(_binary_array([part[k] for _, part in parts]) for k in range(3))]


def int64_array(values: list[int]) -> pa.Array:
    """An int64 array of ``values`` from its buffer (no ``pa.array``: see :func:`_binary_array`)."""
    return pa.Array.from_buffers(pa.int64(), len(values), [None, pa.py_buffer(np.array(values, dtype=np.int64).tobytes())])


def _binary_array(values: list[bytes]) -> pa.Array:
    """A binary array of ``values`` from its buffers: ``pa.array`` would import pandas (seconds in
    a fresh Python worker) to check what it was given."""
    offsets = np.zeros(len(values) + 1, dtype=np.int32)
    np.cumsum([len(value) for value in values], out=offsets[1:])
    return pa.Array.from_buffers(pa.binary(), len(values), [None, pa.py_buffer(offsets.tobytes()),
                                                            pa.py_buffer(b"".join(values))])


def counter_of(pretokens: pa.Array, counts: pa.Array):
    """A compiled counter holding ``pretokens`` (an Arrow string array without nulls) with their
    ``counts`` (int64): the packing of a tally that was not counted by a compiled counter."""
    counter = new_counter()
    pretokens = pretokens.cast(pa.string())
    _, offsets, data = pretokens.buffers()
    start = pretokens.offset
    offsets = memoryview(offsets)[4 * start:4 * (start + len(pretokens) + 1)]
    if start:  # offsets relative to the data's start: rebase them
        rebased = np.frombuffer(offsets, dtype=np.int32)
        offsets = (rebased - rebased[0]).tobytes()
        data = memoryview(data)[int(rebased[0]):]
    values = counts.cast(pa.int64())
    count_bytes = memoryview(values.buffers()[1])[8 * values.offset:8 * (values.offset + len(values))]
    counter.add_counts(offsets, data if data is not None else b"", count_bytes)
    return counter


def sum_packed(partial: DataFrame, partitions: int) -> DataFrame:
    """The ``(pretoken, count)`` table of packed partial counts (rows of ``PACKED_FIELDS``; a row
    of null bucket carries no counts and is dropped), summed in ``partitions`` tasks. The table
    unpacks the packed sums (:func:`packed_of`: one row per piece of a reduce task's sums), which
    the driver can collect or summarize without a JVM row per pretoken."""
    merge = functools.partial(_merge_packed, piece_bytes=PIECE_BYTES)  # read now: tests make pieces small
    packed = (partial.where(F.col("bucket").isNotNull()).select("bucket", "offsets", "data", "counts")
              .repartition(max(1, partitions), "bucket").mapInArrow(merge, SUMS_SCHEMA))
    return _unpacked(packed)


def packed_of(counts: DataFrame) -> DataFrame | None:
    """The packed sums a count table (from :func:`sum_packed` or :func:`persist`) unpacks, or None."""
    return getattr(counts, _PACKED, None)


def persist(counts: DataFrame) -> tuple[DataFrame, Callable[[], None]]:
    """``counts`` persisted (memory and disk), and what releases it: for a table of packed sums,
    the packed rows are what is kept (a few large binary values, not a row per pretoken)."""
    from pyspark import StorageLevel

    packed = packed_of(counts)
    if packed is None:
        counts = counts.persist(StorageLevel.MEMORY_AND_DISK)
        return counts, counts.unpersist
    packed = packed.persist(StorageLevel.MEMORY_AND_DISK)
    return _unpacked(packed), packed.unpersist


def summary(counts: DataFrame) -> dict:
    """The count table's ``distinct`` pretokens, their ``total`` count, the ``lowest`` count (None
    when empty) and their UTF-8 ``bytes``, in one job: over the packed sums' figures when it has
    them (a row per piece), else over its rows."""
    packed = packed_of(counts)
    if packed is not None:
        row = packed.agg(F.coalesce(F.sum("distinct"), F.lit(0)).alias("distinct"),
                         F.coalesce(F.sum("total"), F.lit(0)).alias("total"),
                         F.min("lowest").alias("lowest"), F.coalesce(F.sum("bytes"), F.lit(0)).alias("bytes")).first()
    else:
        row = counts.agg(F.count(F.lit(1)).alias("distinct"), F.coalesce(F.sum("count"), F.lit(0)).alias("total"),
                         F.min("count").alias("lowest"),
                         F.coalesce(F.sum(F.octet_length("pretoken")), F.lit(0)).alias("bytes")).first()
    return {name: (int(row[name]) if row[name] is not None else None) for name in ("distinct", "total", "lowest", "bytes")}


def collect(counts: DataFrame, result_bytes: int) -> pa.Table:
    """The count table on the driver as an Arrow table ``(pretoken, count)``, in tasks of at most
    ``resources.COLLECT_TASK_BYTES`` of the ``result_bytes`` collected: the packed sums' buffers
    as they came (a chunk per piece, no row per pretoken in the JVM) when it has them."""
    packed = packed_of(counts)
    if packed is None:
        return resources.collectable(counts, result_bytes).select("pretoken", "count").toArrow()
    table = resources.collectable(packed, result_bytes).select("offsets", "data", "counts", "distinct").toArrow()
    pretokens, counts = [], []
    for offsets, data, values, n in zip(*(table.column(name).to_pylist() for name in ("offsets", "data", "counts",
                                                                                         "distinct"))):
        pretokens.append(_strings(offsets, data, n))
        counts.append(pa.Array.from_buffers(pa.int64(), n, [None, pa.py_buffer(values)]))
    del table
    return pa.table({"pretoken": pa.chunked_array(pretokens, pa.string()), "count": pa.chunked_array(counts, pa.int64())})


# --- the tasks ----------------------------------------------------------------------------------
def _unpacked(packed: DataFrame) -> DataFrame:
    rows = packed.mapInArrow(_unpack, COUNTS_SCHEMA)
    setattr(rows, _PACKED, packed)
    return rows


def _merge_packed(batches: Iterable[pa.RecordBatch], piece_bytes: int) -> Iterator[pa.RecordBatch]:
    """A reduce task: every packed bucket it receives added into one counter; the sums, in the
    order of their hash, emitted in pieces of at most ``piece_bytes`` with their figures."""
    counter = new_counter()
    for batch in batches:
        offsets, data, counts = (batch.column(name) for name in ("offsets", "data", "counts"))
        for o, d, c in zip(offsets, data, counts):
            counter.add_counts(o.as_buffer(), d.as_buffer() or b"", c.as_buffer())
    if not len(counter):
        return
    offsets, data, counts = counter.buffers(sort=True)
    counter.clear()
    at = np.frombuffer(offsets, dtype=np.int32)
    values = np.frombuffer(counts, dtype=np.int64)
    n = len(values)
    # a piece ends where the bytes it holds (text, an offset and a count each) pass PIECE_BYTES
    size = at[1:].astype(np.int64) + 12 * np.arange(1, n + 1, dtype=np.int64)
    cuts = [0]
    while cuts[-1] < n:
        base = size[cuts[-1] - 1] if cuts[-1] else 0
        cuts.append(max(cuts[-1] + 1, int(np.searchsorted(size, base + piece_bytes, side="right"))))
    rows = {name: [] for name in SUMS_SCHEMA.names}
    for lo, hi in pairwise(cuts):
        rows["offsets"].append((at[lo:hi + 1] - at[lo]).tobytes())
        rows["data"].append(data[at[lo]:at[hi]])
        piece = values[lo:hi]
        rows["counts"].append(piece.tobytes())
        rows["distinct"].append(hi - lo)
        rows["total"].append(int(piece.sum()))
        rows["lowest"].append(int(piece.min()))
        rows["bytes"].append(int(at[hi] - at[lo]))
    columns = [_binary_array(rows[name]) for name in ("offsets", "data", "counts")]
    columns += [int64_array(rows[name]) for name in ("distinct", "total", "lowest", "bytes")]
    yield pa.RecordBatch.from_arrays(columns, schema=_SUMS_ARROW)


def _unpack(batches: Iterable[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """Packed sums as ``(pretoken, count)`` rows, a batch per piece."""
    for batch in batches:
        columns = [batch.column(name).to_pylist() for name in ("offsets", "data", "counts", "distinct")]
        for offsets, data, values, n in zip(*columns):
            yield pa.RecordBatch.from_arrays([_strings(offsets, data, n),
                                              pa.Array.from_buffers(pa.int64(), n, [None, pa.py_buffer(values)])],
                                             names=COUNTS_SCHEMA.names)


def _strings(offsets: bytes, data: bytes, n: int) -> pa.Array:
    """The string array of a piece's buffers; a lone surrogate's bytes (not UTF-8) as Python
    decodes them (surrogatepass), as the counter's ``items()`` gives them."""
    strings = pa.Array.from_buffers(pa.string(), n, [None, pa.py_buffer(offsets), pa.py_buffer(data)])
    try:
        strings.validate(full=True)
        return strings
    except pa.ArrowInvalid:
        at = np.frombuffer(offsets, dtype=np.int32)
        return pa.array([data[at[i]:at[i + 1]].decode("utf-8", "surrogatepass") for i in range(n)], pa.string())
