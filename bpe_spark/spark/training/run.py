"""Training on Spark (docs/design.md 2.1 steps 3-4): the entry points ``train`` and ``train_from_counts``,
the driver budget (given, or from the driver's memory: :mod:`bpe_spark.training.driver_budget`), and the run
on the driver.

The executors count the pretokens. When the distinct pretokens fit the driver budget, their
counts are collected and the core :class:`~bpe_spark.training.engine.MergeEngine` runs on the driver: one
round. Otherwise training runs in exact rounds (:mod:`bpe_spark.spark.training.rounds`); either way the
merges equal the core's. The run's checkpoint directory is :mod:`bpe_spark.spark.training.checkpoint`.

Every kind of run goes the same way, through its :class:`~bpe_spark.training.starts.Start`
(:mod:`bpe_spark.spark.training.starting`): fresh training, ``base=`` (continue a loaded model,
as the core's ``train(..., base=)``), ``like=`` (a new vocabulary with a model's pipeline). The
start counts (its pretokenizer), builds the table and each pretoken's words, sets the budget of
new tokens and assembles the tokenizer.

>>> tok = train(read_documents(spark, "corpus.txt"), TrainerConfig(vocab_size=32000))  # doctest: +SKIP
>>> tok.metadata["stats"]["rounds"]                                                     # doctest: +SKIP
1
"""

from __future__ import annotations

import contextlib
import logging
import sys
import time
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np
import pyarrow as pa
from pyspark import StorageLevel
from pyspark.sql import DataFrame, Observation
from pyspark.sql import functions as F

from bpe_spark.bpe.config import TrainerConfig
from bpe_spark.training.driver_budget import (
    JVM_BYTES_PER_PRETOKEN,
    absolute_budget,
    is_auto,
    memory_budget,
    resolve_budget,
)
from bpe_spark.errors import ConfigError, EmptyCorpusError
from bpe_spark.spark.runtime.progress import OFF, Progress
from bpe_spark.training.round_plan import words_bytes
from bpe_spark.spark.runtime import resources
from bpe_spark.spark.training.checkpoint import Checkpoint, input_fingerprint
from bpe_spark.spark.runtime.columns import INTEGER, STRING, check_columns, require_classic
from bpe_spark.spark.training import count_shuffle
from bpe_spark.spark.training.count import CORPUS_STATS, count_start
from bpe_spark.spark.runtime.failures import executor_errors
from bpe_spark.spark.storage.hadoop import input_paths
from bpe_spark.spark.read.documents import local_input_bytes, with_reader_stats
from bpe_spark.spark.options import DEFAULT_DRIVER_BUDGET
from bpe_spark.spark.runtime.stage_progress import spark_phase
from bpe_spark.spark.training.round_words import ROUNDS_DIR, LineageWords, ReliableWords
from bpe_spark.spark.training.rounds import Handoff, RoundTrainer, WordsStore, int64_counts
from bpe_spark.encoding.tokenizer import Tokenizer
from bpe_spark.training.engine import PackedWords
from bpe_spark.training.checks import note_early_stop
from bpe_spark.training.starts import FreshStart, Start
from bpe_spark.spark.training.starting import memory_vocab, start_record, training_start
from bpe_spark.spark.training.superword import train_superword, train_superword_from_counts
from bpe_spark.training.superword import is_superword_run
from bpe_spark.bpe.words import apply_merges, pair_rank_index, word_symbols
from bpe_spark.spark.options import column_name

__all__ = ["absolute_budget", "resolve_budget", "train", "train_from_counts"]  # the budget's parsers: driver_budget
log = logging.getLogger("bpe_spark")

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
    read_options: Mapping[str, Any] | None = None,
    progress: Progress | None = None,
    base: Tokenizer | None = None,
    like: Tokenizer | None = None,
    pattern: str | None = None,
) -> Tokenizer:
    """Train on the documents of ``df[text_col]``; the result equals the core's ``train``.

    ``base``: a loaded tokenizer to extend (continued training, as the core's
    ``train(..., base=)``: its ids, merges and special tokens kept, the documents counted with its
    own pretokenization, ``cfg`` setting only ``vocab_size``, the new total, ``max_merges``,
    ``min_frequency`` and ``tie_break``). ``like``: a loaded tokenizer whose pipeline a new
    vocabulary is trained with (``bpe_spark.training.like``). ``pattern``: with ``base``, count
    and encode with this pattern instead of the base's. ``cfg.superword_transition``: SuperBPE's
    two stages (:mod:`bpe_spark.spark.training.superword`), each run as here, each checkpointed
    in its own subdirectory of ``checkpoint_dir``.

    ``driver_budget``: distinct pretokens the driver may hold (an int, a fraction such as ``0.3`` /
    ``"30%"`` of the distinct pretokens, or ``"auto"``: from the driver's memory,
    :mod:`bpe_spark.training.driver_budget`); above it training runs in rounds, and says why in one
    logged line. ``checkpoint_dir``: where the counts and each round's merges (and, while
    training in rounds, each round's words) are kept; ``resume=True`` continues a run interrupted there, to the same
    result: the same config and input (its files, their sizes and times, ``text_col``, ``engine``
    and ``read_options``, how ``df`` was read: ``input_format``, ``document``...), else a
    :class:`~bpe_spark.errors.CheckpointError`; a run holds the directory's lock. ``on_round`` is
    called with each round's record (``round``, ``merges``, ``threshold``, ``floor``,
    ``collected``, ``seconds``). The statistics, rounds and phase timings are in
    ``tok.metadata`` (``"stats"``, ``"rounds"``, ``"timings"``). ``progress``: a
    :class:`~bpe_spark.spark.runtime.progress.Progress` reporter for counting, merging and the rounds (default:
    silent); the result does not depend on it.
    """
    text_col = column_name(text_col)
    require_classic(df)
    options = dict(text_col=text_col, driver_budget=driver_budget, checkpoint_dir=checkpoint_dir, resume=resume,
                   engine=engine, on_round=on_round, read_options=read_options, progress=progress)
    if is_superword_run(cfg, base=base, like=like, pattern=pattern):
        return train_superword(df, cfg, train_start, **options)
    return train_start(df, cfg, training_start(cfg, base=base, like=like, pattern=pattern), **options)


def train_start(
    df: DataFrame,
    cfg: TrainerConfig,
    start: Start,
    *,
    text_col: str,
    driver_budget: float | str,
    checkpoint_dir: str | None,
    resume: bool,
    engine: str,
    on_round: Callable[[dict], None] | None,
    read_options: Mapping[str, Any] | None,
    progress: Progress | None,
) -> Tokenizer:
    """:func:`train` of a given :class:`~bpe_spark.training.starts.Start`."""
    progress = progress or OFF
    spark = df.sparkSession
    started = time.perf_counter()
    timings = {"count_seconds": 0.0}
    checkpoint = Checkpoint(spark, checkpoint_dir, protected={"input": input_paths(df)}) if checkpoint_dir else None
    recorded = counts = release = None
    if checkpoint is not None:
        options = {"text_column": text_col, "engine": engine, **dict(read_options or {})}
        recorded = checkpoint.start(cfg, input_fingerprint(df, **options), resume=resume, origin=start_record(start))
    counting = contextlib.ExitStack()  # the counting phase's progress: closed once the counts are summed
    try:
        counts = checkpoint.load_counts() if recorded is not None else None
        if counts is not None:
            corpus = {k: recorded.get(k) for k in CORPUS_STATS}
        else:
            counting.enter_context(spark_phase(spark, progress, "counting", input_size=lambda: local_input_bytes(df)))
            phase = time.perf_counter()
            observation = Observation("bpe_spark_corpus")
            counts = count_start(df, start, text_col=text_col, engine=engine, observation=observation)
            if checkpoint is not None:
                with executor_errors():  # the counting job runs here: a bad input is named
                    counts = checkpoint.save_counts(counts)
            else:
                counts, release = count_shuffle.persist(counts)
            corpus = None  # read from the observation once the first job has run
            timings["count_seconds"] = time.perf_counter() - phase
        with executor_errors(), counting:
            return _train_counts(
                counts,
                cfg,
                start,
                driver_budget=driver_budget,
                checkpoint=checkpoint,
                resume=resume,
                on_round=on_round,
                corpus=corpus if corpus is not None else observation,
                timings=timings,
                started=started,
                reader=df,
                progress=progress,
                counting=counting,
            )
    except BaseException:
        counting.__exit__(*sys.exc_info())  # a failed count: no last figures from the session
        raise
    finally:
        if checkpoint is not None:
            checkpoint.release()
        elif release is not None:
            release()


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
    progress: Progress | None = None,
    base: Tokenizer | None = None,
    like: Tokenizer | None = None,
    pattern: str | None = None,
    superword_counts: DataFrame | None = None,
) -> Tokenizer:
    """Train on a pretoken-counts DataFrame (a string and an integer column; 64-bit counts).

    The pretokens are taken as they are (no pretokenization); duplicates are summed.
    ``progress``, ``base``, ``like``, ``pattern``: as :func:`train`'s (counts made with the base's
    pretokenization, as the core's ``train_from_counts(..., base=)`` takes them).
    ``superword_counts``: with ``cfg.superword_transition``, stage 2's counts (the corpus under
    ``cfg.superword_pattern``), in the same columns.
    """
    options = dict(pretoken_col=pretoken_col, count_col=count_col, driver_budget=driver_budget,
                   checkpoint_dir=checkpoint_dir, resume=resume, on_round=on_round, progress=progress)
    if is_superword_run(cfg, base=base, like=like, pattern=pattern):
        return train_superword_from_counts(counts, superword_counts, cfg, counts_start, **options)
    if superword_counts is not None:
        raise ConfigError("superword_counts= goes with TrainerConfig(superword_transition=...)")
    return counts_start(counts, cfg, training_start(cfg, base=base, like=like, pattern=pattern), **options)


def counts_start(
    counts: DataFrame,
    cfg: TrainerConfig,
    start: Start,
    *,
    pretoken_col: str,
    count_col: str,
    driver_budget: float | str,
    checkpoint_dir: str | None,
    resume: bool,
    on_round: Callable[[dict], None] | None,
    progress: Progress | None,
) -> Tokenizer:
    """:func:`train_from_counts` of a given :class:`~bpe_spark.training.starts.Start`."""
    check_columns(counts, {pretoken_col: STRING, count_col: INTEGER}, source="the counts DataFrame",
                  hint="name the columns with pretoken_col= and count_col=")
    started = time.perf_counter()
    spark = counts.sparkSession
    checkpoint = Checkpoint(spark, checkpoint_dir, protected={"input": input_paths(counts)}) if checkpoint_dir else None
    if checkpoint is not None:
        options = {"pretoken_column": pretoken_col, "count_column": count_col}
        checkpoint.start(cfg, input_fingerprint(counts, **options), resume=resume, origin=start_record(start))
    summed = (
        counts.select(F.col(pretoken_col).alias("pretoken"), F.col(count_col).cast("long").alias("count"))
        .where(F.col("pretoken").isNotNull() & (F.length("pretoken") > 0))
        .groupBy("pretoken")
        .agg(F.sum("count").alias("count"))
    )
    frame = None
    try:
        most = resources.partitions(spark, resources.estimated_bytes(counts))
        frame = resources.capped(summed, most).persist(StorageLevel.MEMORY_AND_DISK)
        return _train_counts(
            frame,
            cfg,
            start,
            driver_budget=driver_budget,
            checkpoint=checkpoint,
            resume=resume,
            on_round=on_round,
            corpus={"documents": None, "bytes": None},
            timings={},
            started=started,
            progress=progress or OFF,
        )
    finally:
        if frame is not None:
            frame.unpersist()
        if checkpoint is not None:
            checkpoint.release()


def _train_counts(
    counts: DataFrame,
    cfg: TrainerConfig,
    start: Start,
    *,
    driver_budget,
    checkpoint: Checkpoint | None,
    resume: bool,
    on_round,
    corpus,
    timings: dict,
    started: float,
    reader: DataFrame | None = None,
    progress: Progress = OFF,
    counting: contextlib.ExitStack | None = None,
) -> Tokenizer:
    phase = time.perf_counter()
    # subtle: summarized first, collected only once known to fit. A collect under limit() would
    # save this job but gather every row into one task's result, which the heap holds twice.
    summary = count_shuffle.summary(counts)
    if summary["lowest"] is not None and summary["lowest"] < 0:
        raise ConfigError(f"pretoken counts must be >= 0; the input has a count of {summary['lowest']}")
    if not summary["distinct"] or not summary["total"]:
        # before reading the observation: a query over no rows may never have filled it
        raise EmptyCorpusError(
            "the corpus has no pretoken to train on (empty input, empty text column, or only special tokens)"
        )
    if counting is not None:
        counting.close()  # the counts are summed: the counting phase's last line
    if isinstance(corpus, Observation):
        corpus = with_reader_stats(reader, dict(corpus.get))
    if "count_seconds" in timings:
        timings["count_seconds"] += time.perf_counter() - phase
    stats: dict[str, Any] = {
        **{key: corpus.get(key) for key in CORPUS_STATS},
        "pretokens": int(summary["total"]),
        "distinct_pretokens": int(summary["distinct"]),
        "pretoken_bytes": int(summary["bytes"]),
    }
    distinct = stats["distinct_pretokens"]
    budget, source = _budget(counts.sparkSession, driver_budget, cfg, start, distinct, int(summary["bytes"]))
    stats["driver_budget"] = budget
    stats["driver_budget_from"] = source
    if checkpoint is not None:
        checkpoint.record(cfg, stats)
    partitions = resources.partitions(counts.sparkSession, words_bytes(distinct, int(summary["bytes"])))
    trainer = RoundTrainer(counts, cfg, budget, checkpoint, on_round, timings, partitions, progress=progress,
                           start=start)
    driver_mode = distinct <= budget
    if driver_mode:
        # the collected Arrow: 12 bytes a row plus the pretoken's
        _run_on_driver(trainer, resume, counts, distinct * JVM_BYTES_PER_PRETOKEN + int(summary["bytes"]))
    else:
        log.warning("bpe-spark: %s distinct pretokens > driver budget %s from %s; training in rounds",
                    f"{distinct:,}", f"{budget:,}", source)
        with resources.shuffle_partitions(counts.sparkSession, partitions):
            trainer.run_rounds(resume, _words_store(counts.sparkSession, checkpoint))
    stats["rounds"] = len(trainer.rounds)
    stats["merges"] = len(trainer.merges)
    stats["mode"] = "driver" if driver_mode else "rounds"
    timings["total_seconds"] = round(time.perf_counter() - started, 3)
    tok = start.tokenizer(trainer.table, trainer.merges, stats=stats)
    tok.metadata["stats"] = stats
    note_early_stop(cfg, tok, inherited=len(tok.merge_ids) - len(trainer.merges))
    tok.metadata["rounds"] = trainer.rounds
    tok.metadata["timings"] = {k: round(v, 3) for k, v in timings.items()}
    return tok


def _budget(spark, driver_budget, cfg: TrainerConfig, start: Start, distinct: int,
            pretoken_bytes: int) -> tuple[int, str]:
    """The driver budget and where it comes from: the one given, or the driver's memory
    (``"auto"``: :func:`~bpe_spark.training.driver_budget.memory_budget`, for this corpus's mean pretoken
    and the vocabulary it can reach: :func:`~bpe_spark.spark.training.starting.memory_vocab`):
    all the counts collected as text when they fit, else the pretokens rounds keep as symbols."""
    if not is_auto(driver_budget):
        return resolve_budget(driver_budget, distinct), f"driver_budget={driver_budget!r}"
    memory = resources.driver_memory(spark)
    mean = pretoken_bytes / max(1, distinct)
    vocab_size = memory_vocab(start, cfg, distinct=distinct, pretoken_bytes=pretoken_bytes)
    whole = memory_budget(memory, mean_pretoken_bytes=mean, vocab_size=vocab_size, as_text=True)
    if distinct <= whole[0]:
        return whole
    return memory_budget(memory, mean_pretoken_bytes=mean, vocab_size=vocab_size)


def _words_store(spark, checkpoint: Checkpoint | None) -> WordsStore:
    """Where the rounds keep their words (:mod:`~bpe_spark.spark.training.round_words`): under the run's
    checkpoint directory, else under Spark's checkpoint directory, else in persisted blocks
    with their lineage."""
    if checkpoint is not None:
        return ReliableWords(spark, checkpoint.child(ROUNDS_DIR), checkpoint.files)
    return ReliableWords.under_spark_checkpoint_dir(spark) or LineageWords()


# --- the run on the driver --------------------------------------------------------------------
def _run_on_driver(trainer: RoundTrainer, resume: bool, counts: DataFrame, result_bytes: int) -> None:
    """All the pretokens (``counts``: the trainer's, ``result_bytes`` collected) on the driver,
    one engine round."""
    since = phase = time.perf_counter()
    collected = Handoff.table(count_shuffle.collect(counts, result_bytes))
    phase = trainer.clock("collect_seconds", phase)
    words = _driver_words(trainer, collected, resume)
    trainer.clock("merge_seconds", phase)
    if not trainer.budget_left():
        return
    merges, _ = trainer.engine_round(words)
    trainer.finish_round(merges, {"kind": "driver", "collected": words.rows}, since)


def _driver_words(trainer: RoundTrainer, collected: Handoff, resume: bool) -> Handoff:
    """Start ``trainer`` on its start's initial table and turn the collected counts into the
    engine's words (after the merges of a resumed run). The intermediate values are local here,
    so once this returns the hand-off holds the only copy of the words."""
    start = trainer.run_start
    if isinstance(start, FreshStart) and start.cfg.scheme == "byte":  # the words are the pretokens' bytes
        trainer.start(start.table(()), resume=resume)
        words, counts = _byte_words(collected.take())
    else:
        # the collected table goes as soon as its two columns are Python lists
        pretokens, counts = _pretokens_and_counts(collected.take())
        trainer.start(start.table(pretokens), resume=resume)
        words, counts = _start_words(start, trainer.table, pretokens, counts)
    if trainer.merges:
        prior = trainer.prior_merges()
        ranks = pair_rank_index(prior)
        words = [apply_merges(list(word), prior, ranks) for word in words]
    return Handoff.words(words, counts)


def _byte_words(arrow: pa.Table) -> tuple[PackedWords, np.ndarray]:
    """The UTF-8 bytes of the pretokens as byte-scheme words, read straight from the Arrow
    buffers (no Python object per pretoken on the driver), and their counts."""
    # large_binary: int64 offsets, whatever the size (a copy of the offsets, not of the bytes)
    column = arrow.column("pretoken").cast(pa.large_binary()).combine_chunks()
    offsets = np.frombuffer(column.buffers()[1], dtype=np.int64, count=len(column) + 1, offset=8 * column.offset)
    return PackedWords(column.buffers()[2], offsets), int64_counts(arrow.column("count"))


def _pretokens_and_counts(arrow: pa.Table) -> tuple[list[str], list[int]]:
    return arrow.column("pretoken").to_pylist(), arrow.column("count").to_pylist()


def _start_words(start: Start, table, pretokens: list[str], counts: list[int]) -> tuple[list, list[int]]:
    """The start's words of the pretokens and their counts: one word a pretoken for a fresh run;
    a base model's words are its encoding's pieces (none, or several), each with the count."""
    if isinstance(start, FreshStart):
        cfg = start.cfg
        return [word_symbols(pretoken, table, cfg) for pretoken in pretokens], counts
    packed = getattr(start, "packed_words", None)  # every word in one call, when the start can
    words = packed(pretokens) if packed is not None else None
    if words is not None:
        return words, counts
    words, word_counts = [], []
    for pretoken, count in zip(pretokens, counts):
        for word in start.words(pretoken, table):
            words.append(word)
            word_counts.append(count)
    return words, word_counts
