"""Training on Spark: count on the executors, merge exactly (DESIGN 2.1 steps 3-4).

When the distinct pretokens fit the driver budget, their counts are collected and the core
:class:`~bpe_spark.trainer.MergeEngine` runs on the driver: one round. Otherwise training runs in
exact **rounds**:

1. the executors hold every pretoken as symbol ids (``wid, count, symbols``); they apply the
   merges of the previous round and reduce the global pair counts, and each pretoken's highest
   pair count ``m`` (a join of its pairs with the pair counts);
2. the driver reads the distribution of ``m`` and picks the lowest threshold ``T`` whose
   pretokens (``m >= T``) fit its budget, collects them, and takes ``U``, the next ``m`` value
   below ``T``. Every pair held by a pretoken left behind has a count <= ``U``; every pair whose
   count is > ``U`` lives only in collected pretokens, so its collected count is exact;
3. the engine runs on the collected pretokens while the best count is > ``U``
   (``MergeEngine.run(floor=U, stop_after_reuse=True)``: a merge that reuses an existing token
   could raise counts outside the collected set, so it ends the round);
4. the round's merges are appended to the checkpoint Parquet and broadcast.

When even the pretokens holding the top pair do not fit, the round takes that one pair, which
the global pair counts prove. One :class:`SymbolTable` lives across rounds; for the char scheme
its alphabet comes from the whole corpus, computed on the executors. Rounds pay a few Spark jobs
each, never one per merge.

>>> tok = train(read_documents(spark, "corpus.txt"), TrainerConfig(vocab_size=32000))  # doctest: +SKIP
>>> tok.metadata["stats"]["rounds"]                                                     # doctest: +SKIP
1
"""

from __future__ import annotations

import itertools
import json
import math
import time
from bisect import bisect_right
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pyspark import StorageLevel
from pyspark.sql import DataFrame, Observation, SparkSession
from pyspark.sql import functions as F

from bpe_spark.config import TrainerConfig
from bpe_spark.errors import ConfigError, EmptyCorpusError, OutputExistsError
from bpe_spark.spark.count import count_pretokens
from bpe_spark.spark.columns import INTEGER, STRING, check_columns
from bpe_spark.spark.options import DEFAULT_DRIVER_BUDGET
from bpe_spark.symbols import SymbolTable
from bpe_spark.tokenizer import Tokenizer
from bpe_spark.trainer import (
    Merge,
    MergeEngine,
    PackedWords,
    check_vocab_floor,
    initial_table,
    new_token_budget,
)
from bpe_spark.words import apply_merges, pair_rank_index, word_symbols

WORDS_SCHEMA = "wid long, count long, symbols array<int>"
_PAIR_SHIFT = 32
# the most pairs a round broadcasts to find each pretoken's highest pair count (16 bytes each)
_MAX_BROADCAST_PAIRS = 1_000_000
# subtle: a pair is one long, left << 32 | right; ids are < 2**31, so it is exact and positive.
_PAIRS_SQL = (
    "transform(sequence(0, size(symbols) - 2), "
    "i -> shiftleft(cast(symbols[i] as bigint), 32) + symbols[i + 1])"
)


def _levels(table: pa.Table, value: str) -> list[tuple[int, int]]:
    """A collected histogram ``(value, n)`` as ``[(value, n), ...]``, highest value first."""
    return sorted(zip(table.column(value).to_pylist(), table.column("n").to_pylist()), reverse=True)


def _cut(levels: list[tuple[int, int]], most: int) -> tuple[int | None, int]:
    """``(cut, outside)`` over the pair-count histogram ``levels`` (highest first): the lowest
    count such that the pairs counted >= it are at most ``most`` (whole levels; None when the top
    level alone is more), and the highest count below it (0 when none).

    >>> _cut([(9, 1), (5, 2), (2, 4)], 3), _cut([(9, 1), (5, 2)], 10), _cut([(9, 4)], 3)
    ((5, 2), (5, 0), (None, 9))
    """
    cut, kept = None, 0
    for level, n in levels:
        if kept + n > most:
            return cut, level
        kept += n
        cut = level
    return cut, 0


def _packed_symbols(column: pa.ChunkedArray) -> PackedWords:
    """A collected ``list<int32>`` column as packed words: its values and offsets buffers, no
    Python list per word (the compiled engine reads them; it copies, so they can go after)."""
    column = column.combine_chunks()
    values = column.values.to_numpy(zero_copy_only=False).astype(np.int32, copy=False)
    return PackedWords(values, column.offsets.to_numpy(zero_copy_only=False))


def _int64_counts(column: pa.ChunkedArray) -> np.ndarray:
    return column.combine_chunks().to_numpy(zero_copy_only=False).astype(np.int64, copy=False)


def _words_batch(wids, counts, words) -> pa.RecordBatch:
    return pa.RecordBatch.from_arrays(
        [pa.array(wids, pa.int64()), pa.array(counts, pa.int64()), pa.array(words, pa.list_(pa.int32()))],
        names=["wid", "count", "symbols"],
    )


def _initial_words(counts: DataFrame, cfg: TrainerConfig, table: SymbolTable, prior: list[tuple[int, int, int]]) -> DataFrame:
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


def _apply_round(words: DataFrame, merges: list[tuple[int, int, int]]) -> DataFrame:
    """The executors apply one round's merges; words left with one symbol drop out."""

    def apply(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        ranks = pair_rank_index(merges)
        keys = np.unique(np.array([(left << _PAIR_SHIFT) | right for left, right, _ in merges], dtype=np.int64))
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
    hit = np.isin((values[:-1] << _PAIR_SHIFT) | values[1:], keys)  # pair at i: (i, i + 1)
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


# --- checkpoint -------------------------------------------------------------------------------
class Checkpoint:
    """A directory (any Hadoop URI) holding ``training.json`` (config and corpus statistics),
    ``counts.parquet`` (when training from text) and ``merges.parquet``, one file per round."""

    def __init__(self, spark: SparkSession, path: str):
        self.spark = spark
        self.path = str(path).rstrip("/")
        jvm = spark.sparkContext._jvm
        self._Path = jvm.org.apache.hadoop.fs.Path
        self._fs = self._Path(self.path).getFileSystem(spark.sparkContext._jsc.hadoopConfiguration())

    def child(self, name: str) -> str:
        return f"{self.path}/{name}"

    def exists(self, name: str) -> bool:
        return bool(self._fs.exists(self._Path(self.child(name))))

    def write_json(self, name: str, value: dict) -> None:
        stream = self._fs.create(self._Path(self.child(name)), True)
        try:
            stream.write(bytearray(json.dumps(value, indent=1, sort_keys=True).encode("utf-8")))
        finally:
            stream.close()

    def read_json(self, name: str) -> dict:
        rows = self.spark.read.text(self.child(name), wholetext=True).collect()
        return json.loads(rows[0].value)

    def start(self, cfg: TrainerConfig, *, resume: bool) -> dict | None:
        """Check the directory; returns the recorded statistics when resuming a run."""
        if not self.exists("training.json"):
            if self.exists("merges.parquet"):
                raise OutputExistsError(f"{self.path} holds merges but no training.json; use an empty directory")
            return None
        if not resume:
            raise OutputExistsError(
                f"checkpoint directory {self.path} holds an earlier training run; pass --resume "
                "(resume=True) to continue it, or choose an empty directory"
            )
        recorded = self.read_json("training.json")
        if recorded.get("config") != cfg.to_dict():
            raise ConfigError(
                f"checkpoint {self.path} was made with another config ({recorded.get('config')}); "
                "resume with the same settings or start in an empty directory"
            )
        return recorded.get("stats") or {}

    def record(self, cfg: TrainerConfig, stats: dict) -> None:
        self.write_json("training.json", {"config": cfg.to_dict(), "stats": stats})

    def load_merges(self, table: SymbolTable) -> tuple[list[Merge], list[int]]:
        """Replay the recorded merges into ``table``; returns them and the merges of each round."""
        if not self.exists("merges.parquet"):
            return [], []
        rows = (
            self.spark.read.parquet(self.child("merges.parquet"))
            .select("rank", "left", "right", "id", "count", "round")
            .orderBy("rank")
            .collect()
        )
        merges, per_round = [], {}
        for expected, row in enumerate(rows):
            new_id, _ = table.add(table.value(row["left"]) + table.value(row["right"]))
            if row["rank"] != expected or new_id != row["id"]:
                raise ConfigError(
                    f"checkpoint {self.child('merges.parquet')} is inconsistent at rank {expected} "
                    f"(found rank {row['rank']}, id {row['id']}; expected id {new_id}); start afresh"
                )
            merges.append(Merge(row["left"], row["right"], new_id, row["count"]))
            per_round[row["round"]] = per_round.get(row["round"], 0) + 1
        return merges, [per_round[r] for r in sorted(per_round)]

    def append_merges(self, round_number: int, first_rank: int, merges: list[Merge], table: SymbolTable) -> None:
        def as_bytes(value) -> bytes:
            return value if isinstance(value, bytes) else value.encode("utf-8")

        rows = [
            (
                first_rank + i,
                m.left,
                m.right,
                m.new_id,
                as_bytes(table.value(m.left)),
                as_bytes(table.value(m.right)),
                as_bytes(table.value(m.new_id)),
                m.count,
                round_number,
            )
            for i, m in enumerate(merges)
        ]
        schema = (
            "rank int, left int, right int, id int, left_bytes binary, right_bytes binary, "
            "token_bytes binary, count long, round int"
        )
        frame = self.spark.createDataFrame(rows, schema).coalesce(1)
        frame.write.mode("append").parquet(self.child("merges.parquet"))


# --- budget -----------------------------------------------------------------------------------
def resolve_budget(driver_budget: float | str, distinct: int) -> int:
    """Distinct pretokens the driver may hold: an int, or a fraction of ``distinct`` (0.3, "30%").

    >>> resolve_budget("10%", 5000), resolve_budget(0.5, 11), resolve_budget(1000, 10**9)
    (500, 5, 1000)
    """
    value = _parse_budget(driver_budget)
    if isinstance(value, int):
        return value
    return max(1, math.floor(value * distinct))


def absolute_budget(driver_budget: float | str) -> int | None:
    """The budget as a count when it is one (not a fraction of the distinct pretokens).

    >>> absolute_budget("2000000"), absolute_budget("30%"), absolute_budget(1.0)
    (2000000, None, None)
    """
    value = _parse_budget(driver_budget)
    return value if isinstance(value, int) else None


def _parse_budget(driver_budget: float | str) -> int | float:
    """A count (int) or a fraction in (0, 1] (float); anything else is a ConfigError."""
    value: Any = driver_budget
    if isinstance(value, str):
        text = value.strip()
        try:
            if text.endswith("%"):
                value = float(text[:-1]) / 100
            else:
                value = int(text) if text.isdigit() else float(text)
        except ValueError:
            raise ConfigError(
                f"driver budget {driver_budget!r} is neither a count (2000000) nor a fraction (0.3, 30%)"
            ) from None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
        raise ConfigError(f"driver budget must be a positive count or a fraction in (0, 1], got {driver_budget!r}")
    if isinstance(value, int) or value <= 1:
        return value
    if value.is_integer():
        return int(value)
    raise ConfigError(f"a fractional driver budget must be in (0, 1], got {driver_budget!r}")


# --- entry points -----------------------------------------------------------------------------
def train(
    df: DataFrame,
    cfg: TrainerConfig,
    *,
    text_col: str = "text",
    driver_budget: float | str = DEFAULT_DRIVER_BUDGET,
    checkpoint_dir: str | None = None,
    resume: bool = False,
    engine: str = "auto",
    on_round: Callable[[dict], None] | None = None,
) -> Tokenizer:
    """Train on the documents of ``df[text_col]``; the result equals the core's ``train``.

    ``driver_budget``: distinct pretokens the driver may hold (an int, or a fraction such as
    ``0.3`` / ``"30%"`` of the distinct pretokens). ``checkpoint_dir``: where the counts and each
    round's merges are kept; ``resume=True`` continues a run interrupted there, to the same
    result. ``on_round`` is called with each round's record (``round``, ``merges``,
    ``threshold``, ``floor``, ``collected``, ``seconds``). The statistics, rounds and phase
    timings are in ``tok.metadata`` (``"stats"``, ``"rounds"``, ``"timings"``).
    """
    spark = df.sparkSession
    started = time.perf_counter()
    timings = {"count_seconds": 0.0}
    checkpoint = Checkpoint(spark, checkpoint_dir) if checkpoint_dir else None
    recorded = checkpoint.start(cfg, resume=resume) if checkpoint else None
    if checkpoint is not None and recorded is not None and checkpoint.exists("counts.parquet"):
        counts = spark.read.parquet(checkpoint.child("counts.parquet"))
        corpus = {k: recorded.get(k) for k in ("documents", "bytes")}
    else:
        phase = time.perf_counter()
        observation = Observation("bpe_spark_corpus")
        counts = count_pretokens(df, cfg, text_col=text_col, engine=engine, observation=observation)
        if checkpoint is not None:
            counts.write.mode("overwrite").parquet(checkpoint.child("counts.parquet"))
            counts = spark.read.parquet(checkpoint.child("counts.parquet"))
        else:
            counts = counts.persist(StorageLevel.MEMORY_AND_DISK)
        corpus = None  # read from the observation once the first job has run
        timings["count_seconds"] = time.perf_counter() - phase
    try:
        return _train_counts(
            counts,
            cfg,
            driver_budget=driver_budget,
            checkpoint=checkpoint,
            resume=resume,
            on_round=on_round,
            corpus=corpus if corpus is not None else observation,
            timings=timings,
            started=started,
        )
    finally:
        if checkpoint is None:
            counts.unpersist()


def train_from_counts(
    counts: DataFrame,
    cfg: TrainerConfig,
    *,
    pretoken_col: str = "pretoken",
    count_col: str = "count",
    driver_budget: float | str = DEFAULT_DRIVER_BUDGET,
    checkpoint_dir: str | None = None,
    resume: bool = False,
    on_round: Callable[[dict], None] | None = None,
) -> Tokenizer:
    """Train on a pretoken-counts DataFrame (a string and an integer column; 64-bit counts).

    The pretokens are taken as they are (no pretokenization); duplicates are summed.
    """
    check_columns(counts, {pretoken_col: STRING, count_col: INTEGER}, source="the counts DataFrame",
                  hint="name the columns with pretoken_col= and count_col=")
    started = time.perf_counter()
    spark = counts.sparkSession
    checkpoint = Checkpoint(spark, checkpoint_dir) if checkpoint_dir else None
    if checkpoint is not None:
        checkpoint.start(cfg, resume=resume)
    frame = (
        counts.select(F.col(pretoken_col).alias("pretoken"), F.col(count_col).cast("long").alias("count"))
        .where(F.col("pretoken").isNotNull() & (F.length("pretoken") > 0))
        .groupBy("pretoken")
        .agg(F.sum("count").alias("count"))
        .persist(StorageLevel.MEMORY_AND_DISK)
    )
    try:
        return _train_counts(
            frame,
            cfg,
            driver_budget=driver_budget,
            checkpoint=checkpoint,
            resume=resume,
            on_round=on_round,
            corpus={"documents": None, "bytes": None},
            timings={},
            started=started,
        )
    finally:
        frame.unpersist()


def _train_counts(
    counts: DataFrame,
    cfg: TrainerConfig,
    *,
    driver_budget,
    checkpoint: Checkpoint | None,
    resume: bool,
    on_round,
    corpus,
    timings: dict,
    started: float,
) -> Tokenizer:
    phase = time.perf_counter()
    collected = None
    fixed = absolute_budget(driver_budget)
    if fixed is not None:
        # One job when the counts fit the budget: collect at most budget + 1 rows (what the driver
        # may hold anyway) and read the summary off them; more rows mean rounds, summarized below.
        arrow = counts.select("pretoken", "count").limit(fixed + 1).toArrow()
        if arrow.num_rows <= fixed:
            collected = arrow
        del arrow  # the trainer frees the collected table once read: hold no other reference
    if collected is not None:
        column = collected.column("count")
        summary = {"distinct": collected.num_rows, "total": pc.sum(column).as_py() or 0,
                   "lowest": pc.min(column).as_py()}
        del column  # subtle: a column keeps the whole collected batch alive (one socket read)
    else:
        summary = counts.agg(
            F.count(F.lit(1)).alias("distinct"),
            F.coalesce(F.sum("count"), F.lit(0)).alias("total"),
            F.min("count").alias("lowest"),
        ).first()
    if summary["lowest"] is not None and summary["lowest"] < 0:
        raise ConfigError(f"pretoken counts must be >= 0; the input has a count of {summary['lowest']}")
    if not summary["distinct"] or not summary["total"]:
        # before reading the observation: a query over no rows may never have filled it
        raise EmptyCorpusError(
            "the corpus has no pretoken to train on (empty input, empty text column, or only special tokens)"
        )
    if isinstance(corpus, Observation):
        corpus = dict(corpus.get)
    if "count_seconds" in timings:
        timings["count_seconds"] += time.perf_counter() - phase
    stats: dict[str, Any] = {
        "documents": corpus.get("documents"),
        "bytes": corpus.get("bytes"),
        "pretokens": int(summary["total"]),
        "distinct_pretokens": int(summary["distinct"]),
    }
    budget = resolve_budget(driver_budget, stats["distinct_pretokens"])
    stats["driver_budget"] = budget
    if checkpoint is not None:
        checkpoint.record(cfg, stats)
    trainer = _RoundTrainer(counts, cfg, budget, checkpoint, on_round, timings)
    trainer.collected, collected = collected, None  # the trainer frees it once read
    trainer.run(driver_mode=stats["distinct_pretokens"] <= budget, resume=resume)
    stats["rounds"] = len(trainer.rounds)
    stats["merges"] = len(trainer.merges)
    stats["mode"] = trainer.mode
    timings["total_seconds"] = round(time.perf_counter() - started, 3)
    tok = Tokenizer.from_training(cfg, trainer.table, trainer.merges, stats=stats)
    tok.metadata["stats"] = stats
    tok.metadata["rounds"] = trainer.rounds
    tok.metadata["timings"] = {k: round(v, 3) for k, v in timings.items()}
    return tok


class _RoundTrainer:
    """The state of a Spark training run: one symbol table, the merges so far, the rounds."""

    def __init__(self, counts: DataFrame, cfg: TrainerConfig, budget: int, checkpoint, on_round, timings: dict):
        self.counts = counts
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
        self.mode = "driver"
        self.collected: pa.Table | None = None  # the counts, when already collected

    # -- shared --------------------------------------------------------------------------------
    def _clock(self, key: str, since: float) -> float:
        now = time.perf_counter()
        self.timings[key] += now - since
        return now

    def _remaining(self) -> tuple[int, int | None]:
        new_tokens = new_token_budget(self.cfg, self.table)
        merges = None if self.cfg.max_merges is None else self.cfg.max_merges - len(self.merges)
        return new_tokens, merges

    def _budget_left(self) -> bool:
        new_tokens, merges = self._remaining()
        return new_tokens > 0 and (merges is None or merges > 0)

    def _check_vocab(self) -> None:
        check_vocab_floor(self.cfg, self.table)

    def _resume(self, resume: bool) -> None:
        if self.checkpoint is not None and resume:
            merges, per_round = self.checkpoint.load_merges(self.table)
            self.merges = merges
            self.rounds = [{"round": i + 1, "merges": n, "resumed": True} for i, n in enumerate(per_round)]

    def _finish_round(self, merges: list[Merge], record: dict, since: float) -> None:
        phase = time.perf_counter()
        if self.checkpoint is not None and merges:
            self.checkpoint.append_merges(len(self.rounds) + 1, len(self.merges), merges, self.table)
        self._clock("checkpoint_seconds", phase)
        self.merges.extend(merges)
        record.update(round=len(self.rounds) + 1, merges=len(merges), seconds=round(time.perf_counter() - since, 3))
        self.rounds.append(record)
        if self.on_round is not None:
            self.on_round(dict(record))

    def _engine_round(self, batch: list, floor: int | None) -> tuple[list[Merge], bool]:
        """Run the engine on collected ``[words, counts]``; returns the merges and whether training
        is over. ``batch`` is emptied: the compiled engine copies the words, so the driver's lists
        are freed before it runs (the peak holds one copy, not two)."""
        phase = time.perf_counter()
        words, counts = batch
        batch.clear()
        engine = MergeEngine(self.table, words, counts)
        if engine.backend == "compiled":
            engine.counts = None
        del words, counts
        # the collected Arrow buffers live in Arrow's allocator, which keeps freed memory: hand it
        # back before the engine grows
        pa.default_memory_pool().release_unused()
        new_tokens, max_merges = self._remaining()
        merges = engine.run(
            max_new_tokens=new_tokens,
            max_merges=max_merges,
            min_frequency=self.cfg.min_frequency,
            floor=floor,
            stop_after_reuse=floor is not None,
        )
        done = not self._budget_left()
        if not done:
            top = engine.best()
            if floor is None:
                done = top is None or top[1] < max(self.cfg.min_frequency, 1) or not merges
            elif top is not None and floor < top[1] < max(self.cfg.min_frequency, 1):
                done = True  # the exact global best is below min_frequency
        self._clock("merge_seconds", phase)
        return merges, done

    # -- the run -------------------------------------------------------------------------------
    def run(self, *, driver_mode: bool, resume: bool) -> None:
        if driver_mode:
            self._run_on_driver(resume)
        else:
            self.mode = "rounds"
            self._run_rounds(resume)

    def _run_on_driver(self, resume: bool) -> None:
        since = phase = time.perf_counter()
        arrow = self.collected if self.collected is not None else self.counts.select("pretoken", "count").toArrow()
        self.collected = None
        phase = self._clock("collect_seconds", phase)
        if self.cfg.scheme == "byte":
            self.table = initial_table(self.cfg, ())
            self._check_vocab()
            self._resume(resume)
            # The engine reads the UTF-8 bytes as byte-scheme words straight from the Arrow buffers:
            # no Python object per pretoken on the driver.
            # large_binary: int64 offsets, whatever the size (a copy of the offsets, not of the bytes)
            column = arrow.column("pretoken").cast(pa.large_binary()).combine_chunks()
            offsets = np.frombuffer(column.buffers()[1], dtype=np.int64, count=len(column) + 1, offset=8 * column.offset)
            words = PackedWords(column.buffers()[2], offsets)
            counts = _int64_counts(arrow.column("count"))
            del arrow, column, offsets
            if self.merges:
                prior = [(m.left, m.right, m.new_id) for m in self.merges]
                ranks = pair_rank_index(prior)
                words = [apply_merges(list(word), prior, ranks) for word in words]
        else:
            counts = arrow.column("count").to_pylist()
            pretokens = arrow.column("pretoken").to_pylist()
            del arrow
            self.table = initial_table(self.cfg, pretokens)
            self._check_vocab()
            self._resume(resume)
            prior = [(m.left, m.right, m.new_id) for m in self.merges]
            ranks = pair_rank_index(prior)
            words = []
            for pretoken in pretokens:
                word = word_symbols(pretoken, self.table, self.cfg)
                words.append(apply_merges(word, prior, ranks) if prior else word)
            del pretokens
        self._clock("merge_seconds", phase)
        if not self._budget_left():
            return
        collected = len(words)
        batch = [words, counts]
        del words, counts
        merges, _ = self._engine_round(batch, floor=None)
        self._finish_round(merges, {"kind": "driver", "collected": collected}, since)

    def _alphabet_table(self) -> SymbolTable:
        if self.cfg.scheme == "byte":
            return initial_table(self.cfg, ())
        chars = self.counts.select(F.explode(F.regexp_extract_all("pretoken", F.lit("(?s)."), F.lit(0))).alias("c"))
        finals = self.counts.select(F.substring("pretoken", -1, 1).alias("c"))
        rows = (
            chars.distinct().select("c", F.lit(False).alias("final"))
            .union(finals.distinct().select("c", F.lit(True).alias("final")))
            .collect()
        )
        alphabet = {row.c for row in rows if not row.final}
        final_chars = {row.c for row in rows if row.final}
        # subtle: initial_table reads an alphabet from pretokens; these stand-ins carry the
        # whole corpus's alphabet (each non-final char before a final one) and its final chars.
        anchor = min(final_chars)
        return initial_table(self.cfg, [c + anchor for c in alphabet] + sorted(final_chars))

    def _run_rounds(self, resume: bool) -> None:
        phase = time.perf_counter()
        self.table = self._alphabet_table()
        self._check_vocab()
        self._resume(resume)
        prior = [(m.left, m.right, m.new_id) for m in self.merges]
        words = _initial_words(self.counts, self.cfg, self.table, prior).localCheckpoint(eager=True)
        self._clock("rounds_spark_seconds", phase)
        pairs = F.explode(F.expr(_PAIRS_SQL)).alias("pair")
        try:
            while self._budget_left():
                since = phase = time.perf_counter()
                occurrences = words.select("wid", "count", pairs)
                pair_counts = occurrences.groupBy("pair").agg(F.sum("count").alias("pc")).persist(
                    StorageLevel.MEMORY_AND_DISK
                )
                pair_levels = _levels(pair_counts.groupBy("pc").agg(F.count(F.lit(1)).alias("n")).toArrow(), "pc")
                if not pair_levels or pair_levels[0][0] < max(self.cfg.min_frequency, 1):
                    pair_counts.unpersist()
                    break
                # Only the top pairs can set the highest count of a pretoken the round collects:
                # keep the pairs counted >= cut (at most budget of them, whole levels), broadcast
                # them, and let `outside` be the best count left out. A pretoken whose highest
                # count is > outside has it from a kept pair, so for any threshold above outside
                # the pretokens at or over it are exactly those found through the kept pairs, and
                # max(next level, outside) bounds every pretoken left out: the round stays exact.
                cut, outside = _cut(pair_levels, min(self.budget, _MAX_BROADCAST_PAIRS))
                levels = []
                highest = None
                if cut is not None:
                    kept = F.broadcast(pair_counts.where(F.col("pc") >= cut))
                    highest = (
                        occurrences.select("wid", "pair")
                        .join(kept, "pair")
                        .groupBy("wid")
                        .agg(F.max("pc").alias("m"))
                        .persist(StorageLevel.MEMORY_AND_DISK)
                    )
                    levels = _levels(highest.groupBy("m").agg(F.count(F.lit(1)).alias("n")).toArrow(), "m")
                threshold, floor, collected = None, 0, 0
                for i, (level, n) in enumerate(levels):
                    if collected + n > self.budget:
                        break
                    collected += n
                    threshold = level
                    floor = max(levels[i + 1][0] if i + 1 < len(levels) else 0, outside)
                if threshold is None:
                    merges = self._top_pair_merge(pair_counts, pair_levels[0][0])
                    phase = self._clock("rounds_spark_seconds", phase)
                    record = {"kind": "top-pair", "threshold": pair_levels[0][0], "floor": None, "collected": 0}
                    done = False
                else:
                    chosen = F.broadcast(highest.where(F.col("m") >= threshold).select("wid"))
                    selected = words.join(chosen, "wid").select("count", "symbols")
                    arrow = selected.toArrow()
                    phase = self._clock("rounds_spark_seconds", phase)
                    batch = [_packed_symbols(arrow.column("symbols")), _int64_counts(arrow.column("count"))]
                    del arrow
                    collected = len(batch[0])
                    phase = self._clock("collect_seconds", phase)
                    merges, done = self._engine_round(batch, floor=floor)
                    record = {"kind": "engine", "threshold": threshold, "floor": floor, "collected": collected}
                    if not merges and not done:
                        raise AssertionError(f"round at threshold {threshold} made no progress")
                if highest is not None:
                    highest.unpersist()
                pair_counts.unpersist()
                self._finish_round(merges, record, since)
                if done or not merges:
                    break
                phase = time.perf_counter()
                applied = _apply_round(words, [(m.left, m.right, m.new_id) for m in merges])
                previous, words = words, applied.localCheckpoint(eager=True)
                previous.unpersist()
                self._clock("rounds_spark_seconds", phase)
        finally:
            words.unpersist()

    def _top_pair_merge(self, pair_counts: DataFrame, top_count: int) -> list[Merge]:
        """The one merge a round can prove when the pretokens holding the top pair overflow the
        budget: the best pair of the global counts (ties broken by the table's keys)."""
        rows = pair_counts.where(F.col("pc") == top_count).select("pair").collect()
        keys, first = self.table.keys, self.table.first_id
        candidates = [divmod(row.pair, 1 << _PAIR_SHIFT) for row in rows]
        left, right = min(candidates, key=lambda p: (keys[p[0] - first], keys[p[1] - first]))
        new_id, _ = self.table.add(self.table.value(left) + self.table.value(right))
        return [Merge(left, right, new_id, top_count)]
