"""Pretokenize and count on the executors (DESIGN 2.1 step 2).

Two engines give the same ``(pretoken, count)`` table:

- ``jvm`` (the default presets without normalization): Spark SQL only. ``split`` cuts each
  document at the special tokens, ``regexp_extract_all`` applies the Java form of the pattern
  (:mod:`bpe_spark.spark.jregex`), ``explode`` + ``groupBy`` count. No Python runs per row, so
  counting goes at Spark's native speed and scales with the executors.
- ``python``: Arrow batches through ``mapInArrow`` with the core :class:`Pretokenizer`, counted
  within each partition before the shuffle. Used for custom patterns and for ``lowercase`` /
  ``NFC`` / ``NFKC``, where Java and Python differ (Java's ``toLowerCase`` and Python's
  ``str.lower`` disagree on some characters, e.g. the Greek final sigma context; Java has no
  Unicode-16 normalization tables).

>>> counts = count_pretokens(docs, TrainerConfig(pattern="gpt2"))   # doctest: +SKIP
>>> counts.orderBy(F.desc("count")).first()                         # doctest: +SKIP
Row(pretoken=' the', count=412345)
"""

from __future__ import annotations

from collections.abc import Iterator

import pyarrow as pa
from pyspark.sql import DataFrame, Observation
from pyspark.sql import functions as F
from pyspark.sql.types import LongType, StringType, StructField, StructType

from bpe_spark.config import TrainerConfig
from bpe_spark.errors import ConfigError
from bpe_spark.pretokenize import Pretokenizer
from bpe_spark.spark import textsplits
from bpe_spark.spark.columns import STRING, check_columns
from bpe_spark.spark.jregex import VERIFIED_PRESETS, java_pattern, special_tokens_regex
from bpe_spark.spark.options import ENGINES

# StructTypes, not DDL strings: a DDL string costs a JVM round trip to parse
COUNTS_SCHEMA = StructType([StructField("pretoken", StringType()), StructField("count", LongType())])
# what the Python tasks emit: counts, and (text files read by the tasks) a row of split totals
_PARTIAL_SCHEMA = StructType([*COUNTS_SCHEMA.fields, StructField("documents", LongType()), StructField("bytes", LongType())])
# A partition's tally is flushed downstream when it holds this many distinct pretokens.
_FLUSH_DISTINCT = 1_000_000


def choose_engine(cfg: TrainerConfig, engine: str = "auto") -> str:
    """``jvm`` when Spark SQL's regex gives exactly the core's pretokens, else ``python``.

    >>> choose_engine(TrainerConfig(pattern="cl100k"))
    'jvm'
    >>> choose_engine(TrainerConfig(pattern="words", lowercase=True))
    'python'
    """
    if engine not in ENGINES:
        raise ConfigError(f"engine must be one of {ENGINES}, got {engine!r}")
    if engine != "auto":
        if engine == "jvm" and (cfg.lowercase or cfg.normalization):
            raise ConfigError(
                "engine='jvm' cannot normalize exactly as the core does (lowercase / NFC / NFKC); "
                "use engine='python' or 'auto'"
            )
        return engine
    if cfg.pattern in VERIFIED_PRESETS and not cfg.lowercase and not cfg.normalization:
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
    pretoken, in no particular order. Lazy: nothing runs until the result is used.
    ``observation`` (a ``pyspark.sql.Observation``), when given, collects ``documents`` (non-empty
    texts) and ``bytes`` (their UTF-8 size) during the same job, at no extra pass.

    >>> count_pretokens(spark.createDataFrame([("a a",)], "text string"), cfg).collect()  # doctest: +SKIP
    [Row(pretoken='a', count=1), Row(pretoken=' a', count=1)]
    """
    check_columns(df, {text_col: STRING}, source="the DataFrame", hint="pass text_col=")
    source = textsplits.source_of(df)
    if source is not None and engine in ("auto", "python") and df.columns == [text_col]:
        return _count_text_files(df.sparkSession, source, cfg, observation)
    chosen = choose_engine(cfg, engine)
    text = F.col(text_col)
    docs = df.select(text.alias("text")).where(text.isNotNull() & (F.length(text) > 0))
    if observation is not None:
        docs = docs.observe(
            observation,
            F.count(F.lit(1)).alias("documents"),
            F.coalesce(F.sum(F.octet_length("text")), F.lit(0)).alias("bytes"),
        )
    if chosen == "jvm":
        return _count_jvm(docs, cfg)
    return _count_python(docs, cfg)


def _count_jvm(docs: DataFrame, cfg: TrainerConfig) -> DataFrame:
    pattern = F.lit(java_pattern(cfg.pattern))
    specials = special_tokens_regex(cfg.special_tokens)
    if specials is None:
        pretokens = F.regexp_extract_all("text", pattern, F.lit(0))
    else:
        segments = F.split("text", specials, -1)
        pretokens = F.flatten(F.transform(segments, lambda s: F.regexp_extract_all(s, pattern, F.lit(0))))
    return (
        docs.select(F.explode(pretokens).alias("pretoken"))
        .groupBy("pretoken")
        .agg(F.count(F.lit(1)).alias("count"))
    )


def _count_python(docs: DataFrame, cfg: TrainerConfig) -> DataFrame:
    settings = cfg.to_dict()

    def count_partition(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        tally = Pretokenizer.from_config(TrainerConfig.from_dict(settings)).tally()
        for batch in batches:
            tally.add(batch.column(0).to_pylist())
            if len(tally) >= _FLUSH_DISTINCT:
                yield _tally_batch(tally)
        yield _tally_batch(tally)

    return _sum_counts(docs.mapInArrow(count_partition, _PARTIAL_SCHEMA))


def _count_text_files(spark, source: textsplits.TextSource, cfg: TrainerConfig, observation) -> DataFrame:
    """Count local text files read by the Python tasks (see :mod:`textsplits`): no JVM string
    per line, no Arrow hand-off of the text. Each split also reports its documents and bytes in
    one extra row (null pretoken), which feeds ``observation`` and is dropped."""
    splits = textsplits.plan_splits(source, spark.sparkContext.defaultParallelism)
    settings = cfg.to_dict()

    def count_splits(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        tally = Pretokenizer.from_config(TrainerConfig.from_dict(settings)).tally()
        for batch in batches:
            for index in batch.column(0).to_pylist():
                documents = size = 0
                for lines, nbytes in textsplits.iter_lines(splits[index], with_bytes=True):
                    tally.add(lines)
                    documents += len(lines)
                    size += nbytes
                    if len(tally) >= _FLUSH_DISTINCT:
                        yield _tally_batch(tally)
                yield _tally_batch(tally, documents, size)

    partial = spark.range(0, len(splits), 1, numPartitions=max(1, len(splits))).mapInArrow(count_splits, _PARTIAL_SCHEMA)
    if observation is not None:
        partial = partial.observe(
            observation,
            F.coalesce(F.sum("documents"), F.lit(0)).alias("documents"),
            F.coalesce(F.sum("bytes"), F.lit(0)).alias("bytes"),
        )
    return _sum_counts(partial)


def _sum_counts(partial: DataFrame) -> DataFrame:
    """The partitions' partial counts summed per pretoken (rows of split totals dropped)."""
    return partial.where(F.col("pretoken").isNotNull()).groupBy("pretoken").agg(F.sum("count").alias("count"))


def _tally_batch(tally, documents: int | None = None, size: int | None = None) -> pa.RecordBatch:
    """The tally's counts (then cleared), plus a row of split totals when they are given."""
    pretokens, counts = tally.items()
    tally.clear()
    docs_column = [None] * len(pretokens)
    bytes_column = [None] * len(pretokens)
    if documents is not None:
        pretokens.append(None)
        counts.append(None)
        docs_column.append(documents)
        bytes_column.append(size)
    return pa.RecordBatch.from_arrays(
        [pa.array(pretokens, pa.string()), pa.array(counts, pa.int64()),
         pa.array(docs_column, pa.int64()), pa.array(bytes_column, pa.int64())],
        names=_PARTIAL_SCHEMA.names,
    )


def write_pretoken_counts(
    df: DataFrame,
    cfg: TrainerConfig,
    path: str,
    *,
    text_col: str = "text",
    engine: str = "auto",
    overwrite: bool = False,
) -> dict:
    """Count the pretokens of ``df[text_col]`` and write them as Parquet ``(pretoken, count)``.

    Returns the corpus statistics (``documents``, ``bytes``, ``pretokens``,
    ``distinct_pretokens``). An empty corpus raises before anything is written.
    """
    from pyspark import StorageLevel

    from bpe_spark.errors import EmptyCorpusError, OutputExistsError

    observation = Observation("bpe_spark_count")
    counts = count_pretokens(df, cfg, text_col=text_col, engine=engine, observation=observation)
    counts = counts.persist(StorageLevel.MEMORY_AND_DISK)
    try:
        summary = counts.agg(F.count(F.lit(1)).alias("distinct"), F.sum("count").alias("total")).first()
        if not summary["distinct"]:
            raise EmptyCorpusError("the corpus has no pretoken to count (empty input, or only special tokens)")
        try:
            counts.write.mode("overwrite" if overwrite else "errorifexists").parquet(path)
        except Exception as exc:  # Spark's AnalysisException for an existing path
            if "already exists" in str(exc).lower():
                raise OutputExistsError(f"output {path} already exists; pass --overwrite to replace it") from None
            raise
        stats = dict(observation.get)
        stats.update(pretokens=int(summary["total"]), distinct_pretokens=int(summary["distinct"]))
        return stats
    finally:
        counts.unpersist()
