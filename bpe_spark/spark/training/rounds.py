"""Exact training rounds on Spark (docs/design.md 2.1 step 4): the round trainer and its executor side.

When the distinct pretokens do not fit the driver budget, training runs in rounds. The
executors hold every pretoken of two or more symbols as ``(wid, count, symbols)`` (symbol ids of
one :class:`SymbolTable` that lives on the driver across rounds; for the char scheme its alphabet
comes from the whole corpus). The frequent ones (counted at least ``cut``: whole count levels, at
most half the budget) are also collected once into the driver's engine, where they stay; the
others are the rare ones. A round takes exactly the merges, in the same order, that the core
engine would take on all the pretokens at once (:mod:`bpe_spark.training.round_replay` says why):

1. *Shipping*, when the driver asks for it (at the start, and when its best count is no longer
   above ``outside``): the executors count every pair, in all words and in the rare ones, and
   send the untracked pairs counted in the rare ones, highest global count first (at most the
   budget, :data:`_MAX_BROADCAST_PAIRS`, and :data:`_MAX_TOP_ROWS` over the tasks); the best
   global count left out is the new ``outside``.
2. The driver speculates up to ``limit`` merges; the executors apply them in order to the rare
   words and send the exact change of each pair count at each step, summed over the partitions
   (one Spark job, which also fills the round's words table), at most :data:`_MAX_DELTA_ROWS`
   rows: the steps past that are left to the next round.
3. The driver replays them and keeps those its exact counts prove; the round's merges are
   appended to the checkpoint and applied to the words table (:func:`~bpe_spark.spark.training.round_tasks.apply_round_batches`), and
   pretokens left with one symbol drop out. The words table is kept from round to round where a
   lost executor cannot take it (:mod:`round_words`); the rounds' tables and aggregations have
   partitions sized for the data (:mod:`resources`), not ``spark.sql.shuffle.partitions``.

A round costs one Spark job, two when it ships, never one per merge; ``limit`` grows with the
merges the last round kept (:func:`next_limit`).

``max_token_length``: the driver's engines never take a pair over the limit, and a shipping
leaves such pairs out (:meth:`RoundTrainer._visible_pairs`), so ``outside`` bounds the visible
pairs only; :mod:`bpe_spark.training.round_replay` says why the rounds stay exact.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa
from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from bpe_spark.bpe.config import TrainerConfig
from bpe_spark.spark.runtime.progress import OFF, Progress, merge_callback
from bpe_spark.training.round_plan import frequent_cut
from bpe_spark.training.round_replay import RoundDriver, gathered
from bpe_spark.spark.runtime.stage_progress import spark_phase
from bpe_spark.spark.runtime.resources import capped
from bpe_spark.spark.training.round_tasks import (apply_round, gathered_alphabet, initial_words, packed_batches,
                                                  rare_deltas)
from bpe_spark.spark.training.round_words import LineageWords, ReliableWords, sized_counts
from bpe_spark.bpe.symbols import SymbolTable
from bpe_spark.training.engine import Merge, MergeEngine, PackedWords
from bpe_spark.training.length_limit import LengthLimit
from bpe_spark.training.starts import FreshStart, Start
from bpe_spark.spark.training.starting import gathers_alphabet

if TYPE_CHECKING:  # pragma: no cover - typing only
    from bpe_spark.spark.training.checkpoint import Checkpoint

WordsStore = ReliableWords | LineageWords
# the most pairs a shipping brings to the driver (a long pair and two long counts each)
_MAX_BROADCAST_PAIRS = 1_000_000
# tracked pairs beyond this many are left out of a shipping by a shuffled join, not a broadcast
_MAX_BROADCAST_TRACKED = 2_000_000
# a shipping's top pairs come from one ordered limit: each task's ``most + 1`` best reach the
# driver's JVM, which merges them, so tasks x most stays below this many rows (T8's 37 tasks x
# 1 M ran a 1 GiB heap out of memory); fewer shipped pairs only mean more shippings
_MAX_TOP_ROWS = 4_000_000
# the most (step, pair, delta) rows a round's executors send: a speculation's later steps are
# left to the next round past it (each partition sends its share, its first step whole)
_MAX_DELTA_ROWS = 4_000_000
# the merges a round speculates: the first round's, and the most of any
FIRST_LIMIT = 16_384
MAX_LIMIT = 16_384
_LOW = (1 << 32) - 1  # a pair key's right id
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

    def engine(self, table: SymbolTable, limit: LengthLimit | None = None) -> MergeEngine:
        """The engine over the words and counts (``limit``: the run's length limit). The compiled
        engine copies them, so the driver's copy is dropped before the engine runs and grows; the
        collected Arrow buffers live in Arrow's allocator, which keeps freed memory, so it is
        handed back to the system first."""
        engine = MergeEngine(table, *self.take(), limit=limit)
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


def next_limit(limit: int, kept: int, status: str) -> int:
    """The next round's speculation: four times the last when all of it held, else eight times
    what the last round kept (at least :data:`FIRST_LIMIT`, at most :data:`MAX_LIMIT`). The
    guesses of a round come from the last one's speculation, so it reaches well past the merges
    kept; early rounds, whose guesses are poor, keep few merges and speculate less.

    >>> next_limit(16384, 16384, "held"), next_limit(16384, 100, "diverged")
    (16384, 16384)
    """
    grown = 4 * limit if status == "held" else 8 * kept
    return max(FIRST_LIMIT, min(MAX_LIMIT, grown))


# --- the driver -------------------------------------------------------------------------------
def _triples(merges: list[Merge]) -> list[tuple[int, int, int]]:
    """Merges as the ``(left, right, new_id)`` triples the executors and ``apply_merges`` take."""
    return [(m.left, m.right, m.new_id) for m in merges]


class RoundTrainer:
    """The state of a Spark training run of any :class:`~bpe_spark.training.starts.Start`
    (``start``, default a fresh run of ``cfg``): one symbol table, the merges so far, the rounds
    (a run on the driver is one round of them)."""

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
        start: Start | None = None,
    ):
        self.counts = counts
        self.run_start = start if start is not None else FreshStart(cfg)
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
        self.new_token_budget = 0  # the start's budget of new tokens, and the table's size then
        self.initial_size = 0
        self.merges: list[Merge] = []
        self.rounds: list[dict] = []
        self.frequent = 0  # pretokens in the rounds' driver engine

    def clock(self, key: str, since: float) -> float:
        """Add the time since ``since`` to the timing ``key``; returns now."""
        now = time.perf_counter()
        self.timings[key] += now - since
        return now

    def _remaining(self) -> tuple[int, int | None]:
        new_tokens = self.new_token_budget - (len(self.table) - self.initial_size)
        merges = None if self.cfg.max_merges is None else self.cfg.max_merges - len(self.merges)
        return new_tokens, merges

    def budget_left(self) -> bool:
        new_tokens, merges = self._remaining()
        return new_tokens > 0 and (merges is None or merges > 0)

    def prior_merges(self) -> list[tuple[int, int, int]]:
        return _triples(self.merges)

    def start(self, table: SymbolTable, *, resume: bool) -> None:
        """Take the initial ``table`` (the start's, checked by it against ``vocab_size``) and,
        when resuming, replay the checkpoint's merges into it."""
        self.table = table
        new_tokens = self.new_token_budget = self.run_start.budget(self.cfg, table)
        self.initial_size = len(table)
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
            self.progress.note(f"round {record['round']}: {len(self.merges):,} merges so far")
        if self.on_round is not None:
            self.on_round(dict(record))

    def engine_round(self, words: Handoff) -> tuple[list[Merge], bool]:
        """Run the engine on all the pretokens (taken from ``words``), on the driver; returns
        the merges and whether training is over."""
        phase = time.perf_counter()
        engine = words.engine(self.table, LengthLimit.of(self.cfg))
        new_tokens, max_merges = self._remaining()
        before = len(self.merges)
        lowest = max(self.cfg.min_frequency, 1)
        with self.progress.phase("merging", total=self.merge_target, unit="merges", start=before) as shown:
            callback = merge_callback(shown, already=before) if self.progress.enabled else None
            merges = engine.run(max_new_tokens=new_tokens, max_merges=max_merges,
                                min_frequency=self.cfg.min_frequency, progress=callback)
            shown.update(before + len(merges))
        top = engine.best()
        done = not self.budget_left() or top is None or top[1] < lowest or not merges
        self.clock("merge_seconds", phase)
        return merges, done

    # -- rounds --------------------------------------------------------------------------------
    def _alphabet_table(self) -> SymbolTable:
        """The start's table, of the corpus's alphabet when it takes one (:func:`gathers_alphabet`),
        gathered by one Spark job: Spark SQL's for a fresh char-scheme run, else the start's
        ``alphabet`` of each partition's pretokens, their union on the driver."""
        start = self.run_start
        if not gathers_alphabet(start):
            return start.table_of(set())
        if not isinstance(start, FreshStart):
            return start.table_of(gathered_alphabet(self.counts, start, self.partitions))
        chars = self.counts.select(F.explode(F.regexp_extract_all("pretoken", F.lit("(?s)."), F.lit(0))).alias("c"))
        finals = self.counts.select(F.substring("pretoken", -1, 1).alias("c"))
        rows = (
            capped(chars.distinct(), self.partitions).select("c", F.lit(False).alias("final"))
            .union(capped(finals.distinct(), self.partitions).select("c", F.lit(True).alias("final")))
            .collect()
        )
        alphabet = {row.c for row in rows if not row.final}
        final_chars = {row.c for row in rows if row.final}
        # subtle: the start's table reads an alphabet from pretokens; these stand-ins carry the
        # whole corpus's alphabet (each non-final char before a final one) and its final chars.
        anchor = min(final_chars)
        return self.run_start.table([c + anchor for c in alphabet] + sorted(final_chars))

    def run_rounds(self, resume: bool, store: WordsStore) -> None:
        """Train in exact rounds (the module docstring says how), the words kept in ``store``
        (:mod:`round_words`) from one round to the next."""
        phase = time.perf_counter()
        self.start(self._alphabet_table(), resume=resume)
        try:
            words = store.first(self._initial_words())
            driver, cut = self._frequent(words)
            phase = self.clock("rounds_spark_seconds", phase)
            limit = FIRST_LIMIT
            while self.budget_left():
                since = time.perf_counter()
                taken = self._round(words, driver, cut, limit, store.filled)
                if taken is None:
                    break
                merges, record, status = taken
                self.finish_round(merges, record, since)
                if status == "done":
                    break
                limit = next_limit(limit, len(merges), status)
                if merges:
                    phase = time.perf_counter()
                    words = store.next(apply_round(words, _triples(merges), self.table), rebuild=self._initial_words)
                    self.clock("rounds_spark_seconds", phase)
        finally:
            store.close()

    def _initial_words(self) -> DataFrame:
        """The words from the counts, after the merges so far (the first table, and a rebuild)."""
        return initial_words(sized_counts(self.counts, self.partitions), self.run_start, self.table, self.prior_merges())

    def _frequent(self, words: DataFrame) -> tuple[RoundDriver, int]:
        """The driver's engine over the frequent words, counted at least ``cut``: the lowest count
        whose words (whole levels) fit half the budget; the rest of it holds the tracked pairs."""
        spark = words.sparkSession
        with spark_phase(spark, self.progress, "rounds: collecting the frequent pretokens"):
            levels = _levels(capped(words.groupBy("count").agg(F.count(F.lit(1)).alias("n")), 1).toArrow(), "count")
            cut = frequent_cut(levels, max(1, self.budget // 2))
            frequent = words.where(F.col("count") >= cut).select("count", "symbols").toArrow()
        values, offsets, counts = packed_batches(frequent.to_batches())
        del frequent
        new_tokens, max_merges = self._remaining()
        driver = RoundDriver(self.table, PackedWords(values, offsets), counts, max_new_tokens=new_tokens,
                             max_merges=max_merges, min_frequency=self.cfg.min_frequency,
                             limit=LengthLimit.of(self.cfg))
        self.frequent = len(counts)
        return driver, cut

    def _ship(self, words: DataFrame, driver: RoundDriver, cut: int) -> int:
        """One shipping (module docstring, step 1); returns the pairs it brought."""
        spark = words.sparkSession
        tasks = self.partitions or int(spark.conf.get("spark.sql.shuffle.partitions", "200"))
        most = max(1, min(self.budget, _MAX_BROADCAST_PAIRS, _MAX_TOP_ROWS // max(1, tasks)))
        occurrences = words.select("count", F.explode(F.expr(_PAIRS_SQL)).alias("pair"))
        rare = F.when(F.col("count") < cut, F.col("count")).otherwise(F.lit(0))
        pairs = capped(occurrences.groupBy("pair").agg(F.sum("count").alias("total"), F.sum(rare).alias("rare")),
                       self.partitions).where(F.col("rare") > 0)
        pairs = self._visible_pairs(pairs)
        tracked = driver.tracked_keys()
        if len(tracked):
            known = spark.createDataFrame(pa.table({"pair": tracked}))
            if len(tracked) <= _MAX_BROADCAST_TRACKED:
                known = F.broadcast(known)
            pairs = pairs.join(known, "pair", "left_anti")
        top = pairs.orderBy(F.desc("total"), "pair").limit(most + 1).toArrow()
        shipped = top.slice(0, most)
        outside = top.column("total")[most].as_py() if top.num_rows > most else 0
        driver.ship(int64_counts(shipped.column("pair")), int64_counts(shipped.column("total")),
                    int64_counts(shipped.column("rare")), outside)
        return shipped.num_rows

    def _visible_pairs(self, pairs: DataFrame) -> DataFrame:
        """``pairs`` without those over the length limit (none is left out without one): a
        broadcast table of every token's length, joined to each side of the pair key."""
        limit = LengthLimit.of(self.cfg)
        if limit is None:
            return pairs
        table = self.table
        ids = np.arange(table.first_id, table.first_id + len(table), dtype=np.int64)
        lengths = np.asarray(limit.lengths(table), dtype=np.int64)
        spark = pairs.sparkSession
        left = F.broadcast(spark.createDataFrame(pa.table({"_left": ids, "_left_n": lengths})))
        right = F.broadcast(spark.createDataFrame(pa.table({"_right": ids, "_right_n": lengths})))
        keyed = pairs.withColumn("_left", F.shiftright("pair", 32)).withColumn("_right", F.col("pair").bitwiseAND(_LOW))
        return (keyed.join(left, "_left").join(right, "_right")
                .where(F.col("_left_n") + F.col("_right_n") <= F.lit(limit.max_length))
                .select(*pairs.columns))

    def _round(self, words: DataFrame, driver: RoundDriver, cut: int, limit: int,
               store_filled: Callable[[], None] = lambda: None) -> tuple[list[Merge], dict, str] | None:
        """One round: its merges, its record and how its replay ended; None when no pair
        reaches ``min_frequency``. ``store_filled`` is called once a job has read every word."""
        spark = words.sparkSession
        name = f"round {len(self.rounds) + 1}"
        record: dict = {"kind": "speculative", "frequent": self.frequent, "shipped": 0}
        phase = time.perf_counter()
        with spark_phase(spark, self.progress, f"{name}: counting pairs"):
            while True:  # each shipping tracks new pairs or leaves none out (outside 0): it ends
                if driver.needs_ship:
                    record["shipped"] += self._ship(words, driver, cut)
                    store_filled()
                started = time.perf_counter()
                spec, table, stop = driver.speculate(limit)
                record["speculate_seconds"] = round(time.perf_counter() - started, 3)
                if spec or stop != "ship":
                    break
                driver.needs_ship = True
            record.update(outside=driver.outside, tracked=len(driver.tracked), speculated=len(spec))
            if not spec:
                self.clock("rounds_spark_seconds", phase)
                return None  # no pair reaches min_frequency, or the budgets are spent
            started = time.perf_counter()
            arrow = rare_deltas(words, cut, table, spec, self.partitions, _MAX_DELTA_ROWS).toArrow()
            record["deltas_seconds"] = round(time.perf_counter() - started, 3)
            store_filled()
            phase = self.clock("rounds_spark_seconds", phase)
        completed, deltas = gathered(int64_counts(arrow.column("step")), int64_counts(arrow.column("pair")),
                                     int64_counts(arrow.column("delta")), len(spec))
        del arrow
        if completed < len(spec):  # the changes of the later steps passed the rows' budget
            record["speculated"], spec = completed, spec[:completed]
        record["deltas"] = len(deltas)
        before = len(self.merges)
        with self.progress.phase(f"{name}: merging", total=self.merge_target, unit="merges", start=before) as shown:
            callback = merge_callback(shown, already=before) if self.progress.enabled else None
            replay = driver.replay(spec, deltas, progress=callback)
            shown.update(before + len(replay.merges))
        driver.learn(spec, table, deltas)
        self.clock("merge_seconds", phase)
        record["stop"] = replay.status
        return replay.merges, record, replay.status
