"""Input segments and document order, for the readers and both encoding entry points.

A segment is one file split, keyed ``(file URI, block start,
-1)``, or, for rows not read from files, one partition, keyed ``("", -1, partition)``
(:func:`segment_key`). Within a task a segment's rows are contiguous and in input order
(:func:`segment_runs`); documents are numbered in segment-key order, then row order. Both entry
points number documents this way, with two schemes: ``encode`` returns a lazy DataFrame, so it
counts each segment's documents first (a JVM-only pass) and tasks number rows as they go;
``encode_dataset`` writes each segment's documents to a piece and numbers them on the driver
once every piece is in (no counting pass over the text).
"""

from __future__ import annotations

import itertools

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

FILE = "__bpe_file"  # input_file_name(): "" for rows not read from files
BLOCK = "__bpe_block"  # input_file_block_start(): -1 for rows not read from files


def segment_columns(df: DataFrame) -> list[Column]:
    """The columns that name each row's input segment. Projected before the Python stage, where
    the JVM still knows which file split each row came from; a frame that carries them already
    (:func:`segmented`) keeps its own."""
    if FILE in df.columns and BLOCK in df.columns:
        return [F.col(FILE), F.col(BLOCK)]
    return [F.input_file_name().alias(FILE), F.input_file_block_start().alias(BLOCK)]


_SEGMENTED = "_bpe_spark_segmented"


def carry_segments(documents: DataFrame, full: DataFrame) -> DataFrame:
    """Mark ``documents`` (a projection of ``full``) as read from ``full``, which carries each
    row's input segment in the columns ``FILE`` and ``BLOCK``: for documents made in a Python
    stage (JSON Lines, :mod:`bpe_spark.spark.read.jsonl`), after which the JVM no longer knows them.
    Any transformation of ``documents`` drops the mark (rows then number in partition order)."""
    setattr(documents, _SEGMENTED, full)
    return documents


def segmented(df: DataFrame) -> DataFrame:
    """The frame to encode ``df`` from: the one :func:`carry_segments` marked it with, or itself."""
    return getattr(df, _SEGMENTED, df)


def segment_key(file: str | None, block: int, partition: int) -> tuple[str, int, int]:
    """The sort key of an input segment: ``(file, block start, -1)`` for a file split,
    ``("", -1, partition)`` for rows not read from files."""
    return (file, block, -1) if file else ("", -1, partition)


def segment_runs(batch: pa.RecordBatch, partition: int) -> list[tuple[int, int, tuple]]:
    """``(lo, hi, key)`` runs of rows from one input segment; the batch's last two columns are
    :func:`segment_columns`."""
    files = pc.dictionary_encode(batch.column(batch.num_columns - 2))
    codes = files.indices.to_numpy(zero_copy_only=False)
    names = files.dictionary.to_pylist()
    blocks = batch.column(batch.num_columns - 1).to_numpy(zero_copy_only=False)
    n = batch.num_rows
    change = np.ones(n, dtype=bool)
    change[1:] = (codes[1:] != codes[:-1]) | (blocks[1:] != blocks[:-1])
    starts = [*np.flatnonzero(change).tolist(), n]
    return [(lo, hi, segment_key(names[codes[lo]], int(blocks[lo]), partition))
            for lo, hi in itertools.pairwise(starts)]
