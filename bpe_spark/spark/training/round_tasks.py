"""The executor side of the exact training rounds (:mod:`bpe_spark.spark.training.rounds` drives them):
the words table built from the counts, a round's merges applied to it, and the exact changes of
the rare pretokens' pair counts at each step of a speculation."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pyarrow as pa
from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from bpe_spark.training.round_replay import PAIR_SHIFT, spec_deltas
from bpe_spark.spark.runtime.faults import fail_once
from bpe_spark.spark.runtime.resources import capped
from bpe_spark.bpe.symbols import SymbolTable
from bpe_spark.training.engine import MergeEngine, PackedWords
from bpe_spark.bpe.words import apply_merges, pair_rank_index
from bpe_spark.training.starts import Start

WORDS_SCHEMA = "wid long, count long, symbols array<int>"
DELTAS_SCHEMA = "step long, pair long, delta long"
# a round's changes from at most this many partitions are summed by the driver, not a shuffle
DRIVER_SUMS = 16


def _words_batch(wids, counts, words) -> pa.RecordBatch:
    return pa.RecordBatch.from_arrays(
        [pa.array(wids, pa.int64()), pa.array(counts, pa.int64()), pa.array(words, pa.list_(pa.int32()))],
        names=["wid", "count", "symbols"],
    )


def initial_words(counts: DataFrame, start: Start, table: SymbolTable, prior: list[tuple[int, int, int]]) -> DataFrame:
    """``(wid, count, symbols)`` of every word with >= 2 symbols after the ``prior`` merges: the
    ``start``'s words of each pretoken (:mod:`bpe_spark.training.starts`; one for a fresh run,
    a base model's encoding cut at its unmergeable tokens, each with the pretoken's count).

    Words of one symbol hold no pair and never change, so rounds leave them out."""
    alphabet = table  # the initial table: pickled once into the closure, before any merge

    def to_words(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        ranks = pair_rank_index(prior)
        words_of = start.words
        for batch in batches:
            out_counts, out_words = [], []
            for pretoken, count in zip(batch.column(0).to_pylist(), batch.column(1).to_pylist()):
                for word in words_of(pretoken, alphabet):
                    if prior:
                        word = apply_merges(word, prior, ranks)
                    if len(word) > 1:
                        out_counts.append(count)
                        out_words.append(word)
            yield _words_batch([0] * len(out_counts), out_counts, out_words)

    words = counts.select("pretoken", "count").mapInArrow(to_words, WORDS_SCHEMA)
    return words.withColumn("wid", F.monotonically_increasing_id())


def gathered_alphabet(counts: DataFrame, start: Start, partitions: int | None) -> set[str]:
    """The union of ``start.alphabet`` over the pretokens of ``counts``, each partition's taken by
    its task (:class:`~bpe_spark.training.starts.Start`: the union over any split is the alphabet
    of them all)."""

    def alphabet(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        items: set[str] = set()
        for batch in batches:
            items |= start.alphabet(batch.column(0).to_pylist())
        yield pa.RecordBatch.from_arrays([pa.array(sorted(items), pa.string())], names=["item"])

    items = capped(counts.select("pretoken").mapInArrow(alphabet, "item string").distinct(), partitions)
    return set(items.toArrow().column("item").to_pylist())


def apply_round(words: DataFrame, merges: list[tuple[int, int, int]], table: SymbolTable | None = None) -> DataFrame:
    """The executors apply one round's merges (in one engine per partition when ``table``, the
    table holding their tokens, is given); words left with one symbol drop out."""

    def apply(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        fail_once("round")  # the test hook (faults.py): off unless a test asks
        yield from apply_round_batches(batches, merges, table)

    return words.mapInArrow(apply, WORDS_SCHEMA)


def _changed_rows(batch: pa.RecordBatch, keys: np.ndarray) -> np.ndarray:
    """Which words of a ``(wid, count, symbols)`` batch hold one of the pairs ``keys``, found
    with array operations on the batch's buffers."""
    symbols = batch.column(2)
    offsets = symbols.offsets.to_numpy(zero_copy_only=False).astype(np.int64)
    values = symbols.values.to_numpy(zero_copy_only=False).astype(np.int64)
    if len(values) < 2:
        return np.zeros(batch.num_rows, dtype=bool)
    hit = np.isin((values[:-1] << PAIR_SHIFT) | values[1:], keys)  # pair at i: (i, i + 1)
    seen = np.concatenate(([0], np.cumsum(hit)))
    starts = offsets[:-1]
    ends = np.maximum(offsets[1:] - 1, starts)  # a word's pairs start at [start, end - 1]
    return seen[ends] - seen[starts] > 0


def apply_round_batches(batches, merges, table: SymbolTable | None = None) -> Iterator[pa.RecordBatch]:
    """A partition's ``(wid, count, symbols)`` batches after a round's merges. Most words hold
    none of the round's pairs: they pass through untouched. The others, gathered over the
    partition, are merged in one engine (``table`` given: it holds the merges' tokens) or word
    by word with :func:`~bpe_spark.bpe.words.apply_merges` (the specification; the same words)."""
    keys = np.unique(np.array([(left << PAIR_SHIFT) | right for left, right, _ in merges], dtype=np.int64))
    changed: list[pa.RecordBatch] = []
    schema = None
    for batch in batches:
        schema = batch.schema
        hit = _changed_rows(batch, keys)
        if not hit.any():
            yield batch
            continue
        if not hit.all():
            yield batch.filter(pa.array(~hit))
        changed.append(batch.take(pa.array(np.flatnonzero(hit))))
    if not changed:
        return
    rows = pa.Table.from_batches(changed).combine_chunks()
    wids, counts = rows.column(0).to_numpy(), rows.column(1).to_numpy()
    if table is not None:
        symbols = rows.column(2).chunk(0)
        starts = symbols.offsets.to_numpy(zero_copy_only=False).astype(np.int64)
        values = symbols.flatten().to_numpy(zero_copy_only=False).astype(np.int32, copy=False)
        engine = MergeEngine(table, PackedWords(values, starts - starts[0]), counts)
        engine.core.index_all()
        engine.core.apply_all(merges)
        values, offsets = engine.core.packed()
        lengths = np.diff(offsets)
        kept = lengths > 1
        words = pa.ListArray.from_arrays(pa.array(np.concatenate(([0], np.cumsum(lengths[kept]))), pa.int32()),
                                         pa.array(values[np.repeat(kept, lengths)], pa.int32()))
    else:
        ranks = pair_rank_index(merges)
        merged = [apply_merges(word, merges, ranks) for word in rows.column(2).to_pylist()]
        kept = np.array([len(word) > 1 for word in merged], dtype=bool)
        words = pa.array([word for word, keep in zip(merged, kept) if keep], pa.list_(pa.int32()))
    # the input's own schema (Spark names the list's item field its own way)
    yield pa.RecordBatch.from_arrays(
        [pa.array(wids[kept], pa.int64()), pa.array(counts[kept], pa.int64()), words.cast(schema.field(2).type)],
        schema=schema,
    )


def packed_batches(batches: Iterator[pa.RecordBatch]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """A partition's ``(count, symbols)`` batches as one set of packed words: int32 ids, int64
    offsets and int64 counts."""
    values, offsets, counts, base = [], [np.zeros(1, dtype=np.int64)], [], 0
    for batch in batches:
        if not batch.num_rows:
            continue
        symbols = batch.column(1)
        starts = symbols.offsets.to_numpy(zero_copy_only=False).astype(np.int64)
        values.append(symbols.flatten().to_numpy(zero_copy_only=False).astype(np.int32, copy=False))
        offsets.append(starts[1:] - starts[0] + base)
        base += int(starts[-1] - starts[0])
        counts.append(batch.column(0).to_numpy(zero_copy_only=False).astype(np.int64, copy=False))
    if not counts:
        return np.zeros(0, dtype=np.int32), offsets[0], np.zeros(0, dtype=np.int64)
    return np.concatenate(values), np.concatenate(offsets), np.concatenate(counts)


def rare_deltas(words: DataFrame, cut: int, table: SymbolTable, spec: list[tuple[int, int, int]],
                partitions: int | None, max_rows: int) -> DataFrame:
    """``(step, pair, delta)``: the exact change of each pair count in the rare words (counted
    below ``cut``) at each step of ``spec``, summed in each partition; over the partitions too
    (by a shuffle) unless there are at most :data:`DRIVER_SUMS` of them, whose rows the driver
    sums (:class:`~bpe_spark.training.round_replay.StepDeltas`): a shuffle stage costs more than that.
    Each partition sends at most its share of ``max_rows`` (and its first step whole), and says
    how many steps it sent (:func:`~bpe_spark.training.round_replay.spec_deltas`)."""
    spec_table = table  # pickled once into the closure: it holds every token of the speculation
    share = max(1, max_rows // max(1, partitions or words.rdd.getNumPartitions()))

    def deltas(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        step, pair, delta = spec_deltas(spec_table, *packed_batches(batches), spec, share)
        yield pa.RecordBatch.from_arrays([pa.array(step), pa.array(pair), pa.array(delta)],
                                         names=["step", "pair", "delta"])

    rare = words.where(F.col("count") < cut).select("count", "symbols").mapInArrow(deltas, DELTAS_SCHEMA)
    if partitions is not None and partitions <= DRIVER_SUMS:
        return rare
    summed = capped(rare.groupBy("step", "pair").agg(F.sum("delta").alias("delta")), partitions)
    return summed.where(F.col("delta") != 0)
