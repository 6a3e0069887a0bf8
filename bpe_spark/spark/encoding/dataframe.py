"""Encoding as a DataFrame (docs/design.md 2.2): ``encode(df, tok)`` gives ``input_ids`` and ``n_tokens``.

The result is a lazy DataFrame of the id columns (or ``doc_id``), ``input_ids`` (array<int32>)
and ``n_tokens``: one ``mapInArrow`` stage whose tasks encode each Arrow batch of texts whole
(:mod:`bpe_spark.spark.encoding.tasks`, :class:`~bpe_spark.encoding.batch_encoder.BatchEncoder`): by the
compiled encoder when the model has one, else by the Python regex and a per-process cache of
each distinct pretoken's ids; the list column is built from flat ids and offsets with numpy
gathers, no per-token Python. Writing shards and a manifest is :mod:`bpe_spark.spark.encoding.dataset`.

Document ids. Without ``id_cols`` the output carries ``doc_id`` (int64): the document's position
in input order, counted from 0. For DataFrames read straight from files (text, JSON Lines,
Parquet: also through filters and ``coalesce``) input order is file path order, then row order
within each file, so ``doc_id`` is the same whatever the partitioning. For other DataFrames it is
partition order, then row order in each partition; after a shuffle (``repartition``) that order
is not stable, so pass ``id_cols`` there. Since the result is lazy, the documents of each input
segment are counted first (a JVM-only pass) and each task numbers its rows from its segments'
first positions (:class:`_Positions`). When no row was read from a file, the segments are the
partitions, and the rows go to Python without a segment column.

Null and empty texts: empty text gives ``[]`` (plus BOS/EOS when asked); a null text gives a
null ``input_ids`` and ``n_tokens`` 0 (no BOS/EOS).

Why no Java-regex pretokenization here (docs/design.md 1.2 allows it): Spark SQL's
``regexp_extract_all`` with the ``(?U)`` gpt2 pattern splits text no faster than Python's
``regex``, and shipping the pretoken arrays to Python costs more than it saves; the two engines'
Unicode versions also differ on some code points, and encoding must give ``Tokenizer.encode``'s
ids exactly.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from typing import Literal

import numpy as np
import pyarrow as pa
from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.sql import types as T

from bpe_spark.encoding.options import EncodeOptions, encode_options
from bpe_spark.errors import ConfigError, current_interface, interface, option
from bpe_spark.spark.encoding.tasks import TEXT, ModelBroadcast, check_input, encoded_slices
from bpe_spark.spark.read.segments import segment_columns, segment_key, segment_runs, segmented
from bpe_spark.spark.runtime.columns import col
from bpe_spark.encoding.tokenizer import Tokenizer
from bpe_spark.spark.options import column_name

_PART = "__bpe_part"


def encode(
    df: DataFrame,
    tok: Tokenizer,
    text_col: str = "text",
    *,
    id_cols: Sequence[str] | None = None,
    output_col: str = "input_ids",
    n_tokens_col: str = "n_tokens",
    doc_id_col: str = "doc_id",
    eos: str | None = None,
    bos: str | None = None,
    eos_id: int | None = None,
    bos_id: int | None = None,
    allowed_special: Literal["all"] | Collection[str] = frozenset(),
    disallowed_special: Literal["all"] | Collection[str] = (),
    options: EncodeOptions | None = None,
) -> DataFrame:
    """Encode the documents of ``df[text_col]``: id columns, ``input_ids`` array<int32>, ``n_tokens``.

    Ids equal ``tok.encode(text, allowed_special=..., disallowed_special=...)`` row for row; the
    defaults encode special-token text as ordinary text (``tok.encode(text,
    disallowed_special=())``), ``allowed_special="all"`` as the special tokens. A text holding a
    ``disallowed_special`` token fails the task that meets it, with
    :class:`~bpe_spark.errors.DisallowedSpecialTokenError` (inside Spark's error, since the
    result is lazy). ``eos`` / ``bos`` (token text: a special token or one token of the
    vocabulary) or ``eos_id`` / ``bos_id`` (an id) are appended / prepended to every non-null
    document; numeric text is refused (see :func:`bpe_spark.bpe.token_options.resolve_token`).
    ``options``: these six at once, an :class:`~bpe_spark.encoding.options.EncodeOptions` (then
    none of them as a keyword argument).

    Without ``id_cols`` the output carries ``doc_id``, the position in input order (see the
    module docstring; computing it costs one extra JVM-only pass over the input). Null text gives
    a null ``input_ids`` and ``n_tokens`` 0; empty text gives ``[]``.

    >>> out = encode(spark.createDataFrame([("hello",)], ["text"]), tok)   # doctest: +SKIP
    >>> out.columns                                                       # doctest: +SKIP
    ['doc_id', 'input_ids', 'n_tokens']
    """
    text_col, id_cols = column_name(text_col), [column_name(c) for c in id_cols or ()]
    options = encode_options(options, allowed_special=allowed_special, disallowed_special=disallowed_special,
                             bos=bos, eos=eos, bos_id=bos_id, eos_id=eos_id).resolved(tok)
    id_cols = list(id_cols or [])
    position_col = None if id_cols else doc_id_col
    added = [c for c in (position_col, output_col, n_tokens_col) if c is not None]
    check_input(df, text_col, id_cols, added)

    # plain names for the Python stage (pyspark's mapInArrow resolves each column by its name)
    projection = [col(c).alias(f"{TEXT}_id{i}") for i, c in enumerate(id_cols)] + [col(text_col).alias(TEXT)]
    segments, by_partition = None, False
    if position_col is not None:
        df = segmented(df)
        segments = _segment_counts(df)
        # rows not read from files are numbered by partition alone: no segment columns per row
        # (Spark writes and sizes each column of each row it hands to Python)
        by_partition = not any(file for file, _, _ in segments)
        if not by_partition:
            projection += segment_columns(df)
    fields = [df.schema[c] for c in id_cols]
    if position_col is not None:
        fields.append(T.StructField(position_col, T.LongType(), False))
    fields += [
        T.StructField(output_col, T.ArrayType(T.IntegerType(), containsNull=False), True),
        T.StructField(n_tokens_col, T.IntegerType(), False),
    ]
    model = ModelBroadcast(df.sparkSession, tok, options)
    text_index = len(id_cols)

    speaking = current_interface()  # a task's messages in the words of the driver's interface

    def run(batches):
        with interface(speaking):
            yield from _encode_batches(batches, model=model, text_index=text_index, segments=segments,
                                       by_partition=by_partition)

    schema = T.StructType([T.StructField(str(i), f.dataType, f.nullable) for i, f in enumerate(fields)])
    return df.select(*projection).mapInArrow(run, schema).toDF(*[f.name for f in fields])


def _segment_counts(df: DataFrame) -> dict[tuple, tuple[int, int]]:
    """``{segment key: (first position, documents)}``: the documents of each input segment,
    counted in a JVM-only pass, positioned in segment-key order."""
    probe = df.select(*segment_columns(df), F.spark_partition_id().alias(_PART))
    counts: dict[tuple, int] = {}
    for file, block, part, count in probe.groupBy(*probe.columns).count().collect():
        key = segment_key(file, block, part)
        counts[key] = counts.get(key, 0) + count
    segments, position = {}, 0
    for key in sorted(counts):
        segments[key] = (position, counts[key])
        position += counts[key]
    return segments


def _encode_batches(batches, *, model: ModelBroadcast, text_index: int, segments: dict | None,
                    by_partition: bool = False):
    """mapInArrow body: encode each batch's texts, keep the id columns, add positions (by the
    segment columns ending each batch, or ``by_partition``: the task's partition is the segment)."""
    from pyspark import TaskContext

    encoder = model.encoder()
    partition = TaskContext.get().partitionId()
    positions = _Positions(segments, partition, by_partition) if segments is not None else None
    for batch in batches:
        if batch.num_rows == 0:
            continue
        pos = positions.of(batch) if positions is not None else None
        for start, part, input_ids, n_tokens, _ in encoded_slices(encoder, batch, text_index):
            columns = [part.column(i) for i in range(text_index)]
            if pos is not None:
                columns.append(pa.array(pos[start:start + part.num_rows], type=pa.int64()))
            columns += [input_ids, n_tokens]
            yield pa.RecordBatch.from_arrays(columns, [str(i) for i in range(len(columns))])
    if positions is not None:
        positions.check_complete()


class _Positions:
    """Document positions in a task: its segment's first position + the row's index within the
    segment, checked against the counting pass."""

    def __init__(self, segments: dict[tuple, tuple[int, int]], partition: int, by_partition: bool = False):
        self.segments = segments
        self.partition = partition
        self.by_partition = by_partition
        self.seen: dict[tuple, int] = {}

    def of(self, batch: pa.RecordBatch) -> np.ndarray:
        out = np.empty(batch.num_rows, dtype=np.int64)
        runs = [(0, batch.num_rows, segment_key("", -1, self.partition))] if self.by_partition \
            else segment_runs(batch, self.partition)
        for lo, hi, key in runs:
            entry = self.segments.get(key)
            if entry is None:
                raise ConfigError(
                    f"input segment {key} was not seen when counting documents: the input changed "
                    f"between the counting and the encoding pass; pass {option('id_cols')} instead"
                )
            done = self.seen.get(key, 0)
            out[lo:hi] = entry[0] + done + np.arange(hi - lo)
            self.seen[key] = done + hi - lo
        return out

    def check_complete(self) -> None:
        for key, count in self.seen.items():
            expected = self.segments[key][1]
            if count != expected:
                raise ConfigError(
                    f"input segment {key} held {expected} documents when counted and {count} when "
                    f"encoded: the input is not deterministic; pass {option('id_cols')} instead"
                )
