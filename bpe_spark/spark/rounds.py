"""Exact training rounds on Spark (DESIGN 2.1 step 4): the round trainer and its executor side.

When the distinct pretokens do not fit the driver budget, training runs in rounds. The
executors hold every pretoken of two or more symbols as ``(wid, count, symbols)`` (symbol ids of
one :class:`SymbolTable` that lives on the driver across rounds; for the char scheme its alphabet
comes from the whole corpus). A round takes exactly the merges, in the same order, that the core
engine would take on all the pretokens at once. Why:

1. *Pair counts.* The executors reduce every pair's global count and the histogram of those
   counts. Training ends when the best count is below ``min_frequency``.
2. *The broadcast cut* (:func:`~bpe_spark.round_plan.broadcast_cut`). Each pretoken's highest
   pair count ``m`` is found by a join with the top pairs only: those counted >= ``cut`` (whole
   levels, at most the budget and ``_MAX_BROADCAST_PAIRS``). ``outside`` is the best count of a
   pair left out. A pretoken holding a kept pair has ``m`` exact (a kept pair's count is above
   every pair left out); a pretoken holding none has every pair counted <= ``outside``.
3. *The collect* (:func:`~bpe_spark.round_plan.choose_threshold`). The driver takes the lowest
   threshold ``T`` whose pretokens (``m >= T``) fit its budget and collects them (the words
   ``C``; the others are ``N``). It also keeps the broadcast pairs' global counts ``G``, and
   gives the engine, beside ``C``, one two-symbol word per broadcast pair counted in ``N``,
   counted ``G - C(p)`` (:func:`~bpe_spark.round_plan.outside_counts`; at most the budget of
   them, as the broadcast). So the engine's count ``E(p)`` of a broadcast pair is its global
   count, of a pair made by the round's merges its count in ``C`` plus what it counts in ``N``
   as long as ``N`` has not changed, and every other pair counts <= ``outside`` in all words.
4. *The merges* (:func:`~bpe_spark.round_proof.prove_round`). The engine's best pair, counted
   > ``outside``, is the global best while no merge has changed ``N`` (ties read the shared
   table). A merge of a pair not counted in ``N`` changes nothing there; a merge of a pair
   counted ``r`` times in ``N`` (a *shared* merge, ``(a, b) -> n``) changes there only the pairs
   ``(x, a)`` and ``(b, y)``, which can only lose counts (``E`` stays an upper bound), and the
   pairs holding ``n``, which gain at most ``r`` each (the occurrences of ``n`` there). After
   shared merges the best pair ``p`` is still proven when (i) it holds neither a token they made
   nor, as its right token, their left one, nor, as its left token, their right one: its ``E``
   is exact; and (ii) no pair holding a token they made can reach ``E(p)``: each is bounded by
   its ``E`` plus its tokens' gains, and by the start count ``G`` of the pair that its left
   token's last and its right token's first symbol at the round's start formed (each of its
   occurrences grew from one of that pair's). A merge whose id already existed (reused) could
   grow pairs outside ``C``: when any pair was left out of the broadcast (``outside`` > 0) or
   ``N`` has changed, it ends the round, as a best count <= ``outside`` does.
5. The round's merges are appended to the checkpoint and broadcast; the executors apply them
   (:func:`apply_round_batch`), and pretokens left with one symbol drop out. The words table is
   kept from round to round where a lost executor cannot take it (:mod:`round_words`); what a
   round caches is freed when it ends, and the rounds' tables and aggregations have partitions
   sized for the data (:mod:`resources`), not ``spark.sql.shuffle.partitions``.

When even the pretokens holding the top pair do not fit, the round takes that one pair, which
the global pair counts prove. Rounds pay a few Spark jobs each, never one per merge.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa
from pyspark import StorageLevel
from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from bpe_spark.config import TrainerConfig
from bpe_spark.progress import OFF, Progress, merge_callback
from bpe_spark.round_plan import choose_threshold, outside_counts, top_cut
from bpe_spark.round_proof import PAIR_SHIFT, StartCounts, prove_round
from bpe_spark.spark.faults import fail_once
from bpe_spark.spark.progress import spark_phase
from bpe_spark.spark.resources import capped
from bpe_spark.spark.round_words import LineageWords, ReliableWords, sized_counts
from bpe_spark.symbols import SymbolTable
from bpe_spark.trainer import (
    Merge,
    MergeEngine,
    PackedWords,
    check_vocab_floor,
    initial_table,
    new_token_budget,
)
from bpe_spark.words import apply_merges, pair_rank_index, word_symbols

if TYPE_CHECKING:  # pragma: no cover - typing only
    from bpe_spark.spark.checkpoint import Checkpoint

WordsStore = ReliableWords | LineageWords
WORDS_SCHEMA = "wid long, count long, symbols array<int>"
# the most pairs a round broadcasts to find each pretoken's highest pair count (a long pair and a
# long count each, held by every executor)
_MAX_BROADCAST_PAIRS = 1_000_000
# the most pretoken ids a round broadcasts to select the pretokens it collects; more are joined by
# a shuffle: the driver's JVM builds a broadcast table whole, and one of ~9 M ids does not fit a
# 1 GiB heap (the collect itself streams its batches)
_MAX_BROADCAST_WIDS = 1_000_000
# the top pairs come from one ordered limit: each task's ``most + 1`` best reach the driver's JVM,
# which merges them, so tasks x most stays below this many rows (T8's 37 tasks x 1 M ran a 1 GiB
# heap out of memory); fewer broadcast pairs only make a round prove fewer merges
_MAX_TOP_ROWS = 4_000_000
# subtle: a pair is one long, left << 32 | right; ids are < 2**31, so it is exact and positive.
_PAIRS_SQL = (
    "transform(sequence(0, size(symbols) - 2), "
    "i -> shiftleft(cast(symbols[i] as bigint), 32) + symbols[i + 1])"
)


class Handoff:
    """The driver's one reference to a large collected value: an Arrow table, or the words and
    counts the engine reads. ``take()`` hands it over once and keeps nothing, so the value lives
    only as long as its taker holds it; ``engine()`` builds the merge engine from the words and
    counts in the order that keeps one copy on the driver, never two."""

    __slots__ = ("_value", "rows")

    def __init__(self, value, rows: int):
        self._value = value
        self.rows = rows  # pretokens held (kept after the hand-over)

    @classmethod
    def table(cls, arrow: pa.Table) -> Handoff:
        return cls(arrow, arrow.num_rows)

    @classmethod
    def words(cls, words, counts) -> Handoff:
        return cls((words, counts), len(counts))

    def take(self):
        if self._value is None:
            raise RuntimeError("this collected value was already handed over; collect it again")
        value, self._value = self._value, None
        return value

    def engine(self, table: SymbolTable) -> MergeEngine:
        """The engine over the words and counts. The compiled engine copies them, so the driver's
        copy is dropped before the engine runs and grows; the collected Arrow buffers live in
        Arrow's allocator, which keeps freed memory, so it is handed back to the system first."""
        engine = MergeEngine(table, *self.take())
        if engine.backend == "compiled":
            engine.counts = None
        pa.default_memory_pool().release_unused()
        return engine


# --- executor side ----------------------------------------------------------------------------
def _levels(table: pa.Table, value: str) -> list[tuple[int, int]]:
    """A collected histogram ``(value, n)`` as ``[(value, n), ...]``, highest value first."""
    return sorted(zip(table.column(value).to_pylist(), table.column("n").to_pylist()), reverse=True)


def int64_counts(column: pa.ChunkedArray) -> np.ndarray:
    return column.combine_chunks().to_numpy(zero_copy_only=False).astype(np.int64, copy=False)


def _packed_words(arrow: pa.Table, pairs: np.ndarray, totals: np.ndarray) -> tuple[Handoff, dict[tuple[int, int], int]]:
    """Collected ``(count, symbols)`` rows as packed words: the values and offsets buffers of the
    ``list<int32>`` column, no Python list per word (the compiled engine reads them), followed by
    one two-symbol word per broadcast pair (``pairs``, counted ``totals`` in all the words) that
    also occurs outside them, counted what it counts there; and those counts. Pass the table
    straight from ``Handoff.take()``: once this returns, only the words keep its buffers."""
    symbols = arrow.column("symbols").combine_chunks()
    values = symbols.values.to_numpy(zero_copy_only=False).astype(np.int32, copy=False)
    offsets = symbols.offsets.to_numpy(zero_copy_only=False).astype(np.int64)
    counts = int64_counts(arrow.column("count"))
    pairs, rest = outside_counts(values, offsets, counts, pairs, totals)
    extra = np.empty(2 * len(pairs), dtype=np.int32)
    extra[0::2], extra[1::2] = pairs >> PAIR_SHIFT, pairs & ((1 << PAIR_SHIFT) - 1)
    values = np.concatenate((values[offsets[0]:offsets[-1]], extra))
    offsets = np.concatenate((offsets - offsets[0], offsets[-1] - offsets[0] + 2 * np.arange(1, len(pairs) + 1)))
    words = PackedWords(values, offsets)
    shared = {divmod(int(pair), 1 << PAIR_SHIFT): int(n) for pair, n in zip(pairs, rest)}
    handoff = Handoff.words(words, np.concatenate((counts, rest)))
    handoff.rows = len(counts)  # pretokens held
    return handoff, shared


def _words_batch(wids, counts, words) -> pa.RecordBatch:
    return pa.RecordBatch.from_arrays(
        [pa.array(wids, pa.int64()), pa.array(counts, pa.int64()), pa.array(words, pa.list_(pa.int32()))],
        names=["wid", "count", "symbols"],
    )


def initial_words(counts: DataFrame, cfg: TrainerConfig, table: SymbolTable, prior: list[tuple[int, int, int]]) -> DataFrame:
    """``(wid, count, symbols)`` of every pretoken with >= 2 symbols after the ``prior`` merges.

    Pretokens of one symbol hold no pair and never change, so rounds leave them out."""
    cfg_data = cfg.to_dict()
    alphabet = table  # the initial table: pickled once into the closure, before any merge

    def to_words(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        config = TrainerConfig.from_dict(cfg_data)
        ranks = pair_rank_index(prior)
        for batch in batches:
            out_counts, out_words = [], []
            for pretoken, count in zip(batch.column(0).to_pylist(), batch.column(1).to_pylist()):
                word = word_symbols(pretoken, alphabet, config)
                if prior:
                    word = apply_merges(word, prior, ranks)
                if len(word) > 1:
                    out_counts.append(count)
                    out_words.append(word)
            yield _words_batch([0] * len(out_counts), out_counts, out_words)

    words = counts.select("pretoken", "count").mapInArrow(to_words, WORDS_SCHEMA)
    return words.withColumn("wid", F.monotonically_increasing_id())


def apply_round(words: DataFrame, merges: list[tuple[int, int, int]]) -> DataFrame:
    """The executors apply one round's merges; words left with one symbol drop out."""

    def apply(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        fail_once("round")  # the test hook (faults.py): off unless a test asks
        ranks = pair_rank_index(merges)
        keys = np.unique(np.array([(left << PAIR_SHIFT) | right for left, right, _ in merges], dtype=np.int64))
        for batch in batches:
            yield from apply_round_batch(batch, merges, ranks, keys)

    return words.mapInArrow(apply, WORDS_SCHEMA)


def apply_round_batch(batch: pa.RecordBatch, merges, ranks, keys: np.ndarray) -> Iterator[pa.RecordBatch]:
    """A batch of ``(wid, count, symbols)`` after a round's merges. Most words hold none of the
    round's pairs (only the collected ones can): they are found with array operations on the
    batch's buffers and pass through untouched; only the others become Python lists."""
    symbols = batch.column(2)
    offsets = symbols.offsets.to_numpy(zero_copy_only=False).astype(np.int64)
    values = symbols.values.to_numpy(zero_copy_only=False).astype(np.int64)
    if len(values) < 2:
        yield batch
        return
    hit = np.isin((values[:-1] << PAIR_SHIFT) | values[1:], keys)  # pair at i: (i, i + 1)
    seen = np.concatenate(([0], np.cumsum(hit)))
    starts = offsets[:-1]
    ends = np.maximum(offsets[1:] - 1, starts)  # a word's pairs start at [start, end - 1]
    changed = seen[ends] - seen[starts] > 0
    if not changed.any():
        yield batch
        return
    yield batch.filter(pa.array(~changed))
    rows = batch.take(pa.array(np.flatnonzero(changed)))
    out: tuple[list, list, list] = ([], [], [])
    for wid, count, word in zip(*(rows.column(i).to_pylist() for i in range(3))):
        word = apply_merges(word, merges, ranks)
        if len(word) > 1:
            out[0].append(wid)
            out[1].append(count)
            out[2].append(word)
    # the input's own schema (Spark names the list's item field its own way)
    yield pa.RecordBatch.from_arrays(
        [pa.array(column, type=field.type) for column, field in zip(out, batch.schema)], schema=batch.schema
    )


# --- the driver -------------------------------------------------------------------------------
def _triples(merges: list[Merge]) -> list[tuple[int, int, int]]:
    """Merges as the ``(left, right, new_id)`` triples the executors and ``apply_merges`` take."""
    return [(m.left, m.right, m.new_id) for m in merges]


class RoundTrainer:
    """The state of a Spark training run: one symbol table, the merges so far, the rounds (a run
    on the driver is one round of them)."""

    def __init__(
        self,
        counts: DataFrame,
        cfg: TrainerConfig,
        budget: int,
        checkpoint: Checkpoint | None,
        on_round: Callable[[dict], None] | None,
        timings: dict,
        partitions: int | None = None,
        *,
        progress: Progress = OFF,
    ):
        self.counts = counts
        self.progress = progress
        self.merge_target: int | None = None  # merges training may reach (the budgets), set by start
        self.partitions = partitions  # of the words table and the rounds' aggregations (resources)
        self.cfg = cfg
        self.budget = budget
        self.checkpoint = checkpoint
        self.on_round = on_round
        self.timings = timings
        for key in ("collect_seconds", "merge_seconds", "rounds_spark_seconds", "checkpoint_seconds"):
            timings.setdefault(key, 0.0)
        self.table: SymbolTable | None = None
        self.merges: list[Merge] = []
        self.rounds: list[dict] = []

    def clock(self, key: str, since: float) -> float:
        """Add the time since ``since`` to the timing ``key``; returns now."""
        now = time.perf_counter()
        self.timings[key] += now - since
        return now

    def _remaining(self) -> tuple[int, int | None]:
        new_tokens = new_token_budget(self.cfg, self.table)
        merges = None if self.cfg.max_merges is None else self.cfg.max_merges - len(self.merges)
        return new_tokens, merges

    def budget_left(self) -> bool:
        new_tokens, merges = self._remaining()
        return new_tokens > 0 and (merges is None or merges > 0)

    def prior_merges(self) -> list[tuple[int, int, int]]:
        return _triples(self.merges)

    def start(self, table: SymbolTable, *, resume: bool) -> None:
        """Take the initial ``table`` (checked against ``vocab_size``) and, when resuming, replay
        the checkpoint's merges into it."""
        self.table = table
        check_vocab_floor(self.cfg, table)
        new_tokens = new_token_budget(self.cfg, table)
        self.merge_target = new_tokens if self.cfg.max_merges is None else min(new_tokens, self.cfg.max_merges)
        if self.checkpoint is not None and resume:
            merges, per_round = self.checkpoint.load_merges(table)
            self.merges = merges
            self.rounds = [{"round": i + 1, "merges": n, "resumed": True} for i, n in enumerate(per_round)]

    def finish_round(self, merges: list[Merge], record: dict, since: float) -> None:
        phase = time.perf_counter()
        if self.checkpoint is not None and merges:
            self.checkpoint.append_merges(len(self.rounds) + 1, len(self.merges), merges, self.table)
        self.clock("checkpoint_seconds", phase)
        self.merges.extend(merges)
        record.update(round=len(self.rounds) + 1, merges=len(merges), seconds=round(time.perf_counter() - since, 3))
        self.rounds.append(record)
        if record.get("kind") != "driver":
            threshold = record.get("threshold")
            self.progress.note(f"round {record['round']}: {len(self.merges):,} merges so far"
                               + (f", threshold {threshold:,}" if threshold is not None else ""))
        if self.on_round is not None:
            self.on_round(dict(record))

    def engine_round(self, words: Handoff, floor: int | None = None,
                     proof: tuple[StartCounts, dict[tuple[int, int], int]] | None = None) -> tuple[list[Merge], bool]:
        """Run the engine on the collected words (taken from ``words``); returns the merges and
        whether training is over. On the driver (``floor`` None) the words are all of them; in a
        round, ``floor`` is the best count of a pair not broadcast and ``proof`` the broadcast
        pairs' start counts and their counts outside the words (:mod:`bpe_spark.round_proof`)."""
        phase = time.perf_counter()
        engine = words.engine(self.table)
        new_tokens, max_merges = self._remaining()
        name = "merging" if floor is None else f"round {len(self.rounds) + 1}: merging"
        before = len(self.merges)
        lowest = max(self.cfg.min_frequency, 1)
        with self.progress.phase(name, total=self.merge_target, unit="merges", start=before) as shown:
            callback = merge_callback(shown, already=before) if self.progress.enabled else None
            if proof is None:
                merges = engine.run(max_new_tokens=new_tokens, max_merges=max_merges,
                                    min_frequency=self.cfg.min_frequency, progress=callback)
                settled = True
            else:
                merges, settled = prove_round(engine, start=proof[0], outside_counts=proof[1], outside=floor or 0,
                                              max_new_tokens=new_tokens, max_merges=max_merges,
                                              min_frequency=self.cfg.min_frequency, progress=callback)
            shown.update(before + len(merges))
        done = not self.budget_left()
        if not done and settled:
            top = engine.best()
            if floor is None:
                done = top is None or top[1] < lowest or not merges
            elif top is not None and floor < top[1] < lowest:
                done = True  # the exact global best is below min_frequency
        self.clock("merge_seconds", phase)
        return merges, done

    # -- rounds --------------------------------------------------------------------------------
    def _alphabet_table(self) -> SymbolTable:
        if self.cfg.scheme == "byte":
            return initial_table(self.cfg, ())
        chars = self.counts.select(F.explode(F.regexp_extract_all("pretoken", F.lit("(?s)."), F.lit(0))).alias("c"))
        finals = self.counts.select(F.substring("pretoken", -1, 1).alias("c"))
        rows = (
            capped(chars.distinct(), self.partitions).select("c", F.lit(False).alias("final"))
            .union(capped(finals.distinct(), self.partitions).select("c", F.lit(True).alias("final")))
            .collect()
        )
        alphabet = {row.c for row in rows if not row.final}
        final_chars = {row.c for row in rows if row.final}
        # subtle: initial_table reads an alphabet from pretokens; these stand-ins carry the
        # whole corpus's alphabet (each non-final char before a final one) and its final chars.
        anchor = min(final_chars)
        return initial_table(self.cfg, [c + anchor for c in alphabet] + sorted(final_chars))

    def run_rounds(self, resume: bool, store: WordsStore) -> None:
        """Train in exact rounds (the module docstring says why each is exact), the words kept
        in ``store`` (:mod:`round_words`) from one round to the next."""
        phase = time.perf_counter()
        self.start(self._alphabet_table(), resume=resume)
        try:
            words = store.first(self._initial_words())
            self.clock("rounds_spark_seconds", phase)
            while self.budget_left():
                since = time.perf_counter()
                taken = self._round(words, store.filled)
                if taken is None:
                    break
                merges, record, done = taken
                self.finish_round(merges, record, since)
                if done or not merges:
                    break
                phase = time.perf_counter()
                words = store.next(apply_round(words, _triples(merges)), rebuild=self._initial_words)
                self.clock("rounds_spark_seconds", phase)
        finally:
            store.close()

    def _initial_words(self) -> DataFrame:
        """The words from the counts, after the merges so far (the first table, and a rebuild)."""
        return initial_words(sized_counts(self.counts, self.partitions), self.cfg, self.table, self.prior_merges())

    def _round(self, words: DataFrame, store_filled: Callable[[], None] = lambda: None
               ) -> tuple[list[Merge], dict, bool] | None:
        """One round on ``words``: its merges, its record and whether training is over; None when
        no pair reaches ``min_frequency``. What it caches is freed when it returns, however.
        ``store_filled`` is called once its first job has read every word."""
        cached: list[DataFrame] = []

        def keep(frame: DataFrame) -> DataFrame:
            cached.append(frame.persist(StorageLevel.MEMORY_AND_DISK))
            return cached[-1]

        def histogram(frame: DataFrame, value: str) -> list[tuple[int, int]]:
            return _levels(capped(frame.groupBy(value).agg(F.count(F.lit(1)).alias("n")), 1).toArrow(), value)

        try:
            with spark_phase(words.sparkSession, self.progress, f"round {len(self.rounds) + 1}: counting pairs"):
                phase = time.perf_counter()
                occurrences = words.select("wid", "count", F.explode(F.expr(_PAIRS_SQL)).alias("pair"))
                pair_counts = keep(capped(occurrences.groupBy("pair").agg(F.sum("count").alias("pc")), self.partitions))
                tasks = self.partitions or int(words.sparkSession.conf.get("spark.sql.shuffle.partitions", "200"))
                most = max(1, min(self.budget, _MAX_BROADCAST_PAIRS, _MAX_TOP_ROWS // max(1, tasks)))
                top = pair_counts.orderBy(F.desc("pc")).limit(most + 1).toArrow()  # one job: the top pairs
                store_filled()  # this job read every word: the previous table can go
                top_counts = top.column("pc").to_pylist()
                if not top_counts or top_counts[0] < max(self.cfg.min_frequency, 1):
                    return None
                cut, outside, kept_pairs = top_cut(top_counts, most)
                levels, highest, shipped = [], None, top.slice(0, kept_pairs)  # the driver keeps them
                if cut is not None:
                    kept = F.broadcast(words.sparkSession.createDataFrame(shipped))
                    highest = keep(capped(
                        occurrences.select("wid", "pair").join(kept, "pair").groupBy("wid").agg(F.max("pc").alias("m")),
                        self.partitions,
                    ))
                    levels = histogram(highest, "m")
                chosen = choose_threshold(levels, self.budget, outside)
                if chosen is None:
                    merges = self._top_pair_merge(pair_counts, top_counts[0])
                    self.clock("rounds_spark_seconds", phase)
                    return merges, {"kind": "top-pair", "threshold": top_counts[0], "floor": None, "collected": 0}, False
                wids = highest.where(F.col("m") >= chosen.value).select("wid")
                if chosen.pretokens <= _MAX_BROADCAST_WIDS:
                    wids = F.broadcast(wids)
                arrow = Handoff.table(words.join(wids, "wid").select("count", "symbols").toArrow())
                phase = self.clock("rounds_spark_seconds", phase)
                pairs, totals = int64_counts(shipped.column("pair")), int64_counts(shipped.column("pc"))
                collected, shared = _packed_words(arrow.take(), pairs, totals)
                self.clock("collect_seconds", phase)
            record = {"kind": "engine", "threshold": chosen.value, "floor": outside, "collected": collected.rows,
                      "outside_pairs": len(shared)}
            merges, done = self.engine_round(collected, floor=outside, proof=(StartCounts(pairs, totals), shared))
            if not merges and not done:
                raise AssertionError(f"round at threshold {chosen.value} made no progress")
            return merges, record, done
        finally:
            for frame in cached:
                frame.unpersist()

    def _top_pair_merge(self, pair_counts: DataFrame, top_count: int) -> list[Merge]:
        """The one merge a round can prove when the pretokens holding the top pair overflow the
        budget: the best pair of the global counts (ties broken by the table's keys)."""
        rows = pair_counts.where(F.col("pc") == top_count).select("pair").collect()
        keys, first = self.table.keys, self.table.first_id
        candidates = [divmod(row.pair, 1 << PAIR_SHIFT) for row in rows]
        left, right = min(candidates, key=lambda p: (keys[p[0] - first], keys[p[1] - first]))
        new_id, _ = self.table.add(self.table.value(left) + self.table.value(right))
        return [Merge(left, right, new_id, top_count)]
