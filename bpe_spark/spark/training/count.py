"""Pretokenize and count on the executors (docs/design.md 2.1 step 2).

Two engines give the same ``(pretoken, count)`` table:

- ``jvm`` (the default presets without normalization): Spark SQL only. ``split`` cuts each
  document at the special tokens, ``regexp_extract_all`` applies the Java form of the pattern
  (:mod:`bpe_spark.spark.training.java_regex`), ``explode`` + ``groupBy`` count. No Python runs per row, so
  counting goes at Spark's native speed and scales with the executors.
- ``python``: Arrow batches through ``mapInArrow`` with the core :class:`Pretokenizer`, counted
  within each partition, then summed packed by bucket (:mod:`~bpe_spark.spark.training.count_shuffle`:
  no JVM row per partial count). Used for custom patterns and for ``lowercase`` /
  ``NFC`` / ``NFKC``, where Java and Python differ (Java's ``toLowerCase`` and Python's
  ``str.lower`` disagree on some characters, e.g. the Greek final sigma context; Java has no
  Unicode-16 normalization tables), and for any other run's pretokenizer (an imported
  pipeline's steps).

A run counts with its :class:`~bpe_spark.training.starts.Start`'s ``pretokenizer()``
(:func:`count_start`): the ``jvm`` engine only for a plain pattern pretokenizer (a fresh config,
or a loaded model's preset pattern, special tokens and no normalization: the same pretokenizer
as the config of those settings, whose counts the JVM gives exactly).

>>> counts = count_pretokens(docs, TrainerConfig(pattern="gpt2"))   # doctest: +SKIP
>>> counts.orderBy(F.desc("count")).first()                         # doctest: +SKIP
Row(pretoken=' the', count=412345)
"""

from __future__ import annotations

import functools
import os
from collections.abc import Callable, Iterator

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql import Column, DataFrame, Observation
from pyspark.sql import functions as F
from pyspark.sql.types import LongType, StructField, StructType

from bpe_spark.bpe.config import TrainerConfig
from bpe_spark.errors import ConfigError
from bpe_spark.bpe.patterns import JAVA_PRESETS
from bpe_spark.bpe.pretokenize import Pretokenizer
from bpe_spark.training.starts import FreshStart, Start
from bpe_spark.spark.runtime.progress import OFF, Progress
from bpe_spark.spark.runtime import resources
from bpe_spark.spark.read import jsonl, text_splits
from bpe_spark.spark.runtime.columns import STRING, check_columns, col
from bpe_spark.spark.runtime.failures import executor_errors
from bpe_spark.spark.runtime.faults import fail_once
from bpe_spark.spark.storage.hadoop import SparkOutput, input_paths
from bpe_spark.spark.read.documents import local_input_bytes, with_reader_stats
from bpe_spark.spark.training import count_shuffle
from bpe_spark.spark.training.count_shuffle import COUNTS_SCHEMA, PACKED_FIELDS
from bpe_spark.spark.training.java_regex import java_pattern, special_tokens_regex
from bpe_spark.spark.options import ENGINES
from bpe_spark.spark.runtime.stage_progress import spark_phase
from bpe_spark.bpe.long_records import JsonText
from bpe_spark.bpe.text import InputTally
from bpe_spark.spark.options import column_name

# what the Python tasks emit: counts (packed by bucket, count_shuffle, or as rows), and (text
# files read by the tasks) a row of split totals. StructTypes, not DDL strings: a DDL string
# costs a JVM round trip to parse
_TOTALS = ("documents", "bytes", "replaced_sequences", "affected_documents", "skipped_files", "null_documents",
           "skipped_records")
_TOTAL_FIELDS = tuple(StructField(name, LongType()) for name in _TOTALS)
_PARTIAL_SCHEMA = StructType([*COUNTS_SCHEMA.fields, *_TOTAL_FIELDS])
_PACKED_SCHEMA = StructType([*PACKED_FIELDS, *_TOTAL_FIELDS])
_REPLACEMENT = "\ufffd"
# the corpus statistics every count reports (count_pretokens' observation)
CORPUS_STATS = ("documents", "bytes", "null_documents", "replaced_sequences", "affected_documents", "skipped_files",
                "skipped_records")  # the last: the reader's (io.with_reader_stats)
# A partition's tally is flushed downstream when it holds this many distinct pretokens.
_FLUSH_DISTINCT = 1_000_000


def choose_engine(cfg: TrainerConfig | Pretokenizer, engine: str = "auto") -> str:
    """``jvm`` when Spark SQL's regex gives exactly the core's pretokens, else ``python``.
    ``cfg``: a config, or the :class:`Pretokenizer` a run counts with (another kind than the
    plain pattern one, an imported pipeline's, counts in Python).

    >>> choose_engine(TrainerConfig(pattern="cl100k"))
    'jvm'
    >>> choose_engine(TrainerConfig(pattern="words", lowercase=True))
    'python'
    """
    if engine not in ENGINES:
        raise ConfigError(f"engine must be one of {ENGINES}, got {engine!r}")
    plain = not isinstance(cfg, Pretokenizer) or type(cfg) is Pretokenizer
    if engine != "auto":
        if engine == "jvm" and not plain:
            raise ConfigError(
                "engine='jvm' counts with a regex pattern; the pretokenizer of an imported model's pipeline "
                "runs on engine='python' (or 'auto')"
            )
        if engine == "jvm" and cfg.pattern not in JAVA_PRESETS:
            # subtle: Java's regex has no time limit, and a custom pattern is untrusted (see
            # bpe_spark.bpe.patterns): only the Python engine matches it under one
            raise ConfigError(
                "engine='jvm' matches with Java's regex, which has no time limit; a custom "
                "pattern runs on engine='python' (or 'auto')"
            )
        if engine == "jvm" and (cfg.lowercase or cfg.normalization):
            raise ConfigError(
                "engine='jvm' cannot normalize exactly as the core does (lowercase / NFC / NFKC); "
                "use engine='python' or 'auto'"
            )
        return engine
    if plain and cfg.pattern in JAVA_PRESETS and not cfg.lowercase and not cfg.normalization:
        return "jvm"
    return "python"


def count_pretokens(
    df: DataFrame,
    cfg: TrainerConfig,
    *,
    text_col: str = "text",
    engine: str = "auto",
    observation: Observation | None = None,
) -> DataFrame:
    """The ``(pretoken string, count long)`` table of the documents in ``df[text_col]``.

    Special tokens split documents and are never counted; the table has one row per distinct
    pretoken, in no particular order, in partitions sized for the input and the cores (not
    ``spark.sql.shuffle.partitions``: :mod:`resources`). Lazy: nothing runs until the result is
    used. Text is taken by the rule of :mod:`bpe_spark.bpe.text` (invalid UTF-8 becomes U+FFFD).
    ``observation`` (a ``pyspark.sql.Observation``), when given, collects ``documents`` (non-empty
    texts), ``bytes`` (their size as read), ``null_documents`` (null texts),
    ``replaced_sequences`` and ``affected_documents`` (the text rule's work) and
    ``skipped_files`` (corrupt files skipped by ``read_documents(on_bad_input="skip")``, when
    the tasks read them) during the same job, at no extra pass.

    >>> count_pretokens(spark.createDataFrame([("a a",)], "text string"), cfg).collect()  # doctest: +SKIP
    [Row(pretoken='a', count=1), Row(pretoken=' a', count=1)]
    """
    return count_start(df, FreshStart(cfg), text_col=text_col, engine=engine, observation=observation)


def count_start(
    df: DataFrame,
    start: Start,
    *,
    text_col: str = "text",
    engine: str = "auto",
    observation: Observation | None = None,
) -> DataFrame:
    """:func:`count_pretokens` with the pretokenizer of a training run's ``start``
    (:mod:`bpe_spark.training.starts`: a fresh config, a base model's pretokenization...)."""
    text_col = column_name(text_col)
    check_columns(df, {text_col: STRING}, source="the DataFrame", hint="pass text_col=")
    pretokenizer = start.pretokenizer()
    make = pretokenizer_maker(start, pretokenizer)
    source, records = text_splits.source_of(df), jsonl.source_of(df)
    if (source or records) is not None and engine in ("auto", "python") and df.columns == [text_col]:
        return _count_text_files(df.sparkSession, source or records.text, make, observation, records)
    chosen = choose_engine(pretokenizer, engine)
    most = resources.partitions(df.sparkSession, resources.estimated_bytes(df))
    raw = col(text_col)
    docs = df.select(raw.alias("raw"))
    if observation is not None:
        docs = docs.observe(observation, *text_metrics("raw"))
    docs = docs.where(F.length("raw") > 0).select(valid_text("raw").alias("text"))
    if chosen == "jvm":
        return _count_jvm(docs, pretokenizer, most)
    return _count_python(docs, make, most)


def pretokenizer_maker(start: Start, pretokenizer: Pretokenizer) -> Callable[[], Pretokenizer]:
    """What a counting task builds its pretokenizer with (pickled into the task): a plain
    pattern :class:`Pretokenizer` from its settings, as the driver built it; any other from
    ``start`` on the executor (an imported pipeline's steps do not pickle; the start does)."""
    if type(pretokenizer) is Pretokenizer:
        return functools.partial(Pretokenizer, pretokenizer.pattern, lowercase=pretokenizer.lowercase,
                                 normalization=pretokenizer.normalization,
                                 special_tokens=pretokenizer.specials.tokens)
    return start.pretokenizer


def valid_text(raw: str) -> Column:
    """Spark's reader text (raw bytes in a string) by the rule of :mod:`bpe_spark.bpe.text`:
    ``make_valid_utf8`` replaces exactly as ``bytes.decode("utf-8", "replace")`` does (tests
    check it on crafted and random bytes)."""
    return F.make_valid_utf8(raw)


def text_metrics(raw: str) -> list[Column]:
    """The observed totals of the documents in column ``raw`` (see :func:`count_pretokens`)."""
    text = F.col(raw)
    present = text.isNotNull() & (F.length(text) > 0)

    def replacements(column: Column) -> Column:  # U+FFFD is 3 bytes in UTF-8
        return (F.octet_length(column) - F.octet_length(F.replace(column, F.lit(_REPLACEMENT), F.lit("")))) / 3

    invalid = present & ~F.is_valid_utf8(text)
    return [
        F.count(F.when(present, 1)).alias("documents"),
        F.coalesce(F.sum(F.when(present, F.octet_length(text))), F.lit(0)).alias("bytes"),
        F.count(F.when(text.isNull(), 1)).alias("null_documents"),
        F.coalesce(F.sum(F.when(invalid, replacements(valid_text(raw)) - replacements(text))), F.lit(0))
        .cast("long").alias("replaced_sequences"),
        F.count(F.when(invalid, 1)).alias("affected_documents"),
        F.lit(None).cast("long").alias("skipped_files"),  # Spark's reader skips files without telling
    ]


def _count_jvm(docs: DataFrame, pretokenizer: Pretokenizer, most: int | None) -> DataFrame:
    pattern = F.lit(java_pattern(pretokenizer.pattern))
    specials = special_tokens_regex(pretokenizer.specials.tokens)
    if specials is None:
        pretokens = F.regexp_extract_all("text", pattern, F.lit(0))
    else:
        segments = F.split("text", specials, -1)
        pretokens = F.flatten(F.transform(segments, lambda s: F.regexp_extract_all(s, pattern, F.lit(0))))
    counts = docs.select(F.explode(pretokens).alias("pretoken")).groupBy("pretoken").agg(F.count(F.lit(1)).alias("count"))
    return resources.capped(counts, most)


def _count_python(docs: DataFrame, make: Callable[[], Pretokenizer], most: int | None) -> DataFrame:
    partitions = most if most is not None else resources.partitions(docs.sparkSession, None)
    emit = _Partials(partitions)

    def count_partition(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        tally = make().tally()
        for batch in batches:
            tally.add(batch.column(0).to_pylist())
            if len(tally) >= _FLUSH_DISTINCT:
                yield emit(tally)
        yield emit(tally)

    return emit.summed(docs.mapInArrow(count_partition, emit.schema))


def _count_text_files(spark, source: text_splits.TextSource, make: Callable[[], Pretokenizer], observation,
                      records: jsonl.JsonlSource | None = None) -> DataFrame:
    """Count local text files, or the records of local JSON Lines files (``records``), read by
    the Python tasks (see :mod:`text_splits`, :class:`~bpe_spark.spark.read.jsonl.SplitRecords`):
    no JVM string per line, no Arrow hand-off of the text, and a record longer than
    ``LONG_DOCUMENT_BYTES`` counted in pieces, as a long line of text is. Each split also reports
    its totals in one extra row (null pretoken), which feeds ``observation`` and is dropped;
    they include the bad records skipped, so the reader's own count (which never runs) is not
    asked (:func:`~bpe_spark.spark.read.documents.with_reader_stats`)."""
    splits = text_splits.plan_splits(source, spark.sparkContext.defaultParallelism)
    on_bad_input = source.on_bad_input
    emit = _Partials(resources.partitions(spark, sum(os.path.getsize(path) for path in source.files)))

    def count_splits(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        tally = make().tally()
        for batch in batches:
            for index in batch.column(0).to_pylist():
                read = InputTally()
                reader = jsonl.SplitRecords(records, read) if records is not None else None
                if reader is None:
                    blocks = text_splits.iter_lines(splits[index], with_bytes=True, tally=read,
                                                    on_bad_input=on_bad_input, arrow=True)
                else:
                    blocks = (_record_texts(texts) for texts in reader.texts(splits[index], long_documents=True))
                documents = size = nulls = 0
                for lines, nbytes, *null in blocks:
                    nulls += null[0] if null else 0
                    if not len(lines):
                        continue
                    tally.add(lines)
                    if isinstance(lines[0], JsonText):  # its size is known once counted; an empty text is none
                        nbytes = lines[0].text_bytes
                        documents += nbytes > 0
                    else:
                        documents += len(lines)
                    size += nbytes
                    if len(tally) >= _FLUSH_DISTINCT:
                        yield emit(tally)
                yield emit(tally, (documents, size, read.replaced, read.affected, read.skipped_files, nulls,
                                   reader.skipped if reader is not None else 0))

    partial = spark.range(0, len(splits), 1, numPartitions=max(1, len(splits))).mapInArrow(count_splits, emit.schema)
    if observation is not None:
        partial = partial.observe(observation, *(F.coalesce(F.sum(name), F.lit(0)).alias(name) for name in _TOTALS))
    return emit.summed(partial)


def _record_texts(texts) -> tuple:
    """``(texts, their bytes, null texts)`` of a block of JSON Lines texts: an Arrow array
    without its nulls (JSON nulls, counted) and empty texts (no document, as in
    :func:`text_metrics`), or a long text alone (its size known once it is counted)."""
    if isinstance(texts, JsonText):
        return [texts], 0, 0
    nulls = texts.null_count
    if nulls:
        texts = pc.drop_null(texts)
    lengths = pc.binary_length(texts)
    present = pc.greater(lengths, 0)
    if len(texts) and not pc.all(present).as_py():
        texts = texts.filter(present)
    return texts, int(pc.sum(lengths).as_py() or 0), nulls


class _Partials:
    """How the counting tasks hand their partial counts on, and how they are summed into the
    count table in ``partitions`` tasks: packed by bucket and summed in Python
    (:mod:`~bpe_spark.spark.training.count_shuffle`) when the compiled counter is built, else as
    rows through Spark's aggregation. Called with a tally (and a split's totals), it gives the
    tally's batch (the tally then cleared)."""

    def __init__(self, partitions: int):
        self.partitions = count_shuffle.reduce_partitions(partitions)
        self.packed = count_shuffle.packing_available()
        self.buckets = count_shuffle.buckets_for(self.partitions)
        self.schema = _PACKED_SCHEMA if self.packed else _PARTIAL_SCHEMA

    def __call__(self, tally, totals: tuple[int, ...] | None = None) -> pa.RecordBatch:
        fail_once("count")  # the test hook (faults.py): off unless a test asks
        if self.packed:
            counter = tally.compiled
            if counter is None:
                counter = count_shuffle.counter_of(*tally.arrow_items())
            columns = count_shuffle.packed_columns(counter, self.buckets)
        else:
            columns = list(tally.arrow_items())  # Arrow buffers: no Python object per pretoken
        tally.clear()
        n = len(columns[0])
        totals_columns = [pa.nulls(n, pa.int64()) for _ in _TOTALS]
        if totals is not None:
            columns = [pa.concat_arrays([column, pa.nulls(1, column.type)]) for column in columns]
            totals_columns = [pa.concat_arrays([column, count_shuffle.int64_array([value])])
                              for column, value in zip(totals_columns, totals)]
        return pa.RecordBatch.from_arrays([*columns, *totals_columns], names=self.schema.names)

    def summed(self, partial: DataFrame) -> DataFrame:
        """The count table of the tasks' batches (rows of split totals dropped)."""
        if self.packed:
            return count_shuffle.sum_packed(partial, self.partitions)
        summed = partial.where(F.col("pretoken").isNotNull()).groupBy("pretoken").agg(F.sum("count").alias("count"))
        return resources.capped(summed, self.partitions)


def write_pretoken_counts(
    df: DataFrame,
    cfg: TrainerConfig,
    path: str,
    *,
    text_col: str = "text",
    engine: str = "auto",
    overwrite: bool = False,
    progress: Progress | None = None,
) -> dict:
    """Count the pretokens of ``df[text_col]`` and write them as Parquet ``(pretoken, count)``.

    Returns the corpus statistics (:data:`CORPUS_STATS`, ``pretokens``, ``distinct_pretokens``).
    An empty corpus raises before anything is written. ``path`` is checked before any work and
    written atomically, with the ``_BPE_SPARK`` marker of kind ``counts`` (``overwrite``
    replaces only earlier counts: :mod:`bpe_spark.storage.output_guard`). ``progress``: a
    :class:`~bpe_spark.spark.runtime.progress.Progress` reporter for the counting (default: silent).
    """
    output = SparkOutput(df.sparkSession, path, "counts")
    output.prepare(overwrite, {"input": input_paths(df)})  # before any work (bpe_spark.storage.output_guard)
    observation = Observation("bpe_spark_count")
    counts = count_pretokens(df, cfg, text_col=text_col, engine=engine, observation=observation)
    counts, release = count_shuffle.persist(counts)
    try:
        with executor_errors(), spark_phase(df.sparkSession, progress or OFF, "counting",
                                                  input_size=lambda: local_input_bytes(df)):
            return _write_counts(df, counts, observation, output, overwrite)
    finally:
        release()
        output.discard()


def _write_counts(df: DataFrame, counts: DataFrame, observation: Observation, output: SparkOutput,
                  overwrite: bool) -> dict:
    from bpe_spark.errors import EmptyCorpusError

    summary = count_shuffle.summary(counts)
    if not summary["distinct"]:
        raise EmptyCorpusError("the corpus has no pretoken to count (empty input, or only special tokens)")
    counts.write.parquet(output.staging)  # a staging sibling, marked and moved into place when whole
    output.publish(overwrite)
    stats = with_reader_stats(df, dict(observation.get))
    stats.update(pretokens=int(summary["total"]), distinct_pretokens=int(summary["distinct"]))
    return stats
