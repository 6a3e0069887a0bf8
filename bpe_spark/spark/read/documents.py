"""Readers: documents (docs/design.md 1.1) and pretoken counts into DataFrames.

Sources: text files (one document per line, the ``\\n`` kept; one per paragraph; or one per
file), JSON Lines and Parquet (one document per row, from a named column); ``input_format="auto"``
(the default) tells them apart by the files' names (:mod:`bpe_spark.storage.input_format`).
Paths are anything Spark reads: local paths, globs, directories (read recursively), ``hdfs://``,
``s3a://``; ``.gz`` / ``.bz2`` text is decompressed by Spark's codecs.

Local inputs are walked once, by :mod:`bpe_spark.storage.input_walk` (the command line's checks
make the same walk): a name that exists is never a glob, links are followed once (a loop is
skipped and counted), FIFOs and devices are skipped. Spark is handed that list of files, whatever
reader runs (no ``recursiveFileLookup``; each file by a name that globs to itself alone:
:func:`spark_file_name`), and the Python tasks read the files Spark lists, so every reader reads
exactly the planned files. Remote URIs keep Spark's recursive listing.

Line documents: Spark's line reader is told that only ``\\n`` ends a line (``lineSep``), so a
``\\r`` stays inside its line, and each line gets its ``\\n`` back: ``"a\\r\\nb\\n"`` gives the
documents ``"a\\r\\n"`` and ``"b\\n"``, as ``tokenizers`` trains on a file. Known difference: a
file whose last line has no final newline still gets one on that line (Spark's reader cannot
tell the two apart without reading each file twice); the shared corpora and files written by
most tools end with a newline.

Paragraph documents (``document="paragraph"``): a document is a maximal run of non-empty lines;
one or more empty lines (``\\n`` alone: a line holding spaces or a ``\\r`` is not empty, so it
belongs to its paragraph) separate documents and are not part of any. A document keeps its lines
with their ``\\n`` (one is added to a file's last line that lacks it): ``"a\\nb\\n\\n\\nc"`` gives
``"a\\nb\\n"`` and ``"c\\n"``. Paragraphs never span files. Local files (where the tasks
see them, as for lines) are read by the Python tasks in byte-range splits, each owning the
paragraphs that start inside it (:mod:`bpe_spark.spark.read.paragraphs`): any file size, the
same documents. Spark's reader
(other file systems) reads each file whole (as ``document="file"``: one file at a time in a
task's memory, under 2 GB) and cuts it there, so the documents do not depend on the split size
(Spark's ``lineSep="\\n\\n"`` reader is not used: it repeats a record when a split edge falls
between the two ``\\n``, and no Hadoop record delimiter can say "a run of two or more").

Text and bad input. The text column holds the bytes as read (Spark's reader does not decode
them); every consumer (counting, encoding) turns them into text by the rule of
:mod:`bpe_spark.bpe.text`. A corrupt or truncated compressed file stops the job with a
:class:`~bpe_spark.errors.BadInputError` naming it (``on_bad_input="error"``, the default), or
is skipped (``"skip"``, or ``spark.sql.files.ignoreCorruptFiles=true``): the documents read
before the damage are kept, as Spark's ``ignoreCorruptFiles`` does; files the Python tasks read
count in the statistics' ``skipped_files`` (Spark's reader skips without telling: ``None``).
JSON Lines are parsed by the Python tasks from the raw lines (:mod:`bpe_spark.spark.read.jsonl`):
bad records are named by file and line, or skipped and counted. What a reader counted reaches
the consumers' statistics through :func:`with_reader_stats`.
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
from collections.abc import Sequence
from urllib.parse import unquote, urlparse

from pyspark.errors import AnalysisException
from pyspark.sql import DataFrame, Observation, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import StringType, StructField

from bpe_spark.errors import ConfigError, InputError, option
from bpe_spark.storage.input_format import resolve_input_format
from bpe_spark.storage.input_walk import InputNotFoundError, InputPlan, plan_inputs
from bpe_spark.spark.read import jsonl, parquet_splits, text_splits
from bpe_spark.spark.runtime import resources
from bpe_spark.spark.runtime.columns import STRING, check_columns, col
from bpe_spark.spark.options import DOCUMENT_UNITS, INPUT_FORMATS, JSON_SAMPLE_LINES
from bpe_spark.bpe.text import check_bad_input_policy
from bpe_spark.spark.options import column_name


log = logging.getLogger("bpe_spark")
# Spark reads local files by name through Hadoop's raw local file system: its checksummed one
# cannot open a name holding ':' (it builds the name of a ".NAME.crc" beside it as a relative URI)
LOCAL_READ_OPTIONS = {"fs.file.impl": "org.apache.hadoop.fs.RawLocalFileSystem",
                      "fs.file.impl.disable.cache": "true"}
_HADOOP_GLOB = re.compile(r"([\\*?\[\]{}])")  # Hadoop's glob characters, escaped by a backslash
_LISTING_THRESHOLD = "spark.sql.sources.parallelPartitionDiscovery.threshold"


def _as_list(paths: str | Sequence[str]) -> list[str]:
    paths = [paths] if isinstance(paths, str) else [str(p) for p in paths]
    if not paths:
        raise InputError("no input path given; pass at least one path, glob or directory")
    return paths


def input_plan(paths: list[str]) -> InputPlan | None:
    """The one walk's plan of local ``paths`` (None: one is remote), its notices logged."""
    try:
        plan = plan_inputs(paths, "")  # its messages read " PATH: what is wrong"
    except InputNotFoundError as exc:
        raise InputNotFoundError(f"input path not found:{exc}") from None
    except InputError as exc:
        raise InputError(f"input path{exc}") from None
    for line in plan.notices if plan is not None else ():
        log.warning("bpe-spark: %s", line)
    return plan


def _reader(spark: SparkSession, plan: InputPlan | None, paths: list[str]):
    """Spark's reader and the paths to give it: the planned local files, by name (see
    :data:`LOCAL_READ_OPTIONS`), or the remote ``paths`` listed by Spark, recursively."""
    if plan is None:
        return spark.read.option("recursiveFileLookup", "true"), paths
    return spark.read.options(**LOCAL_READ_OPTIONS), [spark_file_name(path) for path in plan.files]


def spark_file_name(path: str) -> str:
    """The name Spark's reader reads the local file ``path`` by, and only it: a ``file:`` URI,
    its glob characters escaped (Spark's ``__globPaths__=false`` reads some files twice when given
    several).

    >>> spark_file_name("/data/a?b[1].txt"), spark_file_name("/data/2024-01-01T10:00:00.txt")
    ('file:/data/a\\\\?b\\\\[1\\\\].txt', 'file:/data/2024-01-01T10:00:00.txt')
    """
    return "file:" + _HADOOP_GLOB.sub(r"\\\1", path)


def _listed_on_driver(spark: SparkSession, paths: list[str]) -> contextlib.AbstractContextManager:
    """Spark lists the files it is given on the driver, however many (above 32 it would start a
    job of one task a file: 10 s for 2,000 files on two cores); the setting is restored after."""
    if not paths or not paths[0].startswith("file:"):
        return contextlib.nullcontext()
    return resources.session_setting(spark, _LISTING_THRESHOLD, str(max(len(paths) + 1, 32)))


def _load(what, paths: list[str], spark: SparkSession | None = None) -> DataFrame:
    """Run a reader, turning Spark's missing-path errors into :class:`InputNotFoundError`
    (``spark``: the session, whose listing of local files stays on the driver)."""
    try:
        with _listed_on_driver(spark, paths) if spark is not None else contextlib.nullcontext():
            return what(paths)
    except AnalysisException as exc:
        message = str(exc)
        if "PATH_NOT_FOUND" in message or "does not exist" in message.lower():
            raise InputNotFoundError(
                f"input path not found: {', '.join(paths)} ({message.splitlines()[0].strip()}); "
                "check the path, glob or file-system URI"
            ) from None
        raise


def reads_local_text(paths: str | Sequence[str], input_format: str = "text", document: str = "line",
                     tasks_read_jsonl: bool = False) -> bool:
    """True when ``read_documents`` with these arguments reads local text files by lines or
    paragraphs, which the Python tasks then read themselves (``text_splits``) on a local master
    (or with ``shared_input``): the JVM only coordinates. ``tasks_read_jsonl``: the caller's
    tasks read local JSON Lines themselves too (counting, and encoding with no kept columns:
    ``jsonl.tag``).

    >>> reads_local_text(["corpus/*.txt"]), reads_local_text("s3a://b/x.txt"), reads_local_text("x", "jsonl")
    (True, False, False)
    >>> reads_local_text("x.jsonl", "jsonl", "line", True), reads_local_text("s3a://b/x.jsonl", "jsonl", "line", True)
    (True, False)
    >>> reads_local_text("x.txt", "text", "paragraph"), reads_local_text("x.txt", "text", "file")
    (True, False)
    """
    if document not in ("line", "paragraph") or input_format not in (("text", "jsonl") if tasks_read_jsonl
                                                                      else ("text",)):
        return False
    return all(urlparse(str(p)).scheme in ("", "file") for p in _as_list(paths))


def read_documents(
    spark: SparkSession,
    paths: str | Sequence[str],
    *,
    input_format: str = "auto",
    text_col: str = "text",
    document: str = "line",
    keep_columns: Sequence[str] = (),
    on_bad_input: str = "error",
    shared_input: bool = False,
) -> DataFrame:
    """Documents as a DataFrame whose column ``text_col`` holds each document's text.

    ``input_format``: ``text`` (``document="line"``, ``"paragraph"`` or ``"file"``), ``jsonl`` or ``parquet``,
    or ``auto`` (the default): the format the files' names say (``.parquet``, ``.jsonl`` / ``.json`` /
    ``.ndjson``, also compressed; else text), one for all, and never text for a Parquet file;
    for the last two ``text_col`` names the input's column (default ``text``) and
    ``keep_columns`` names other columns to keep beside it (ids, say). ``on_bad_input``:
    ``"error"`` (a corrupt file stops the job, named) or ``"skip"`` (see the module docstring).
    Local text files are read by the Python tasks themselves (:mod:`~bpe_spark.spark.read.text_splits`)
    only where every executor sees them: a local master, or ``shared_input=True`` (the path is
    on a file system every node mounts alike); otherwise Spark's reader reads them (the same
    documents).

    >>> docs = read_documents(spark, "data/sample/tiny_shakespeare.txt.gz")  # doctest: +SKIP
    >>> docs.first().text                                                     # doctest: +SKIP
    'First Citizen:\\n'
    """
    text_col, keep_columns = column_name(text_col), [column_name(c) for c in keep_columns]
    paths = _as_list(paths)
    if input_format not in INPUT_FORMATS:
        raise ConfigError(f"input_format must be one of {INPUT_FORMATS}, got {input_format!r}")
    if document not in DOCUMENT_UNITS:
        raise ConfigError(f"document must be one of {DOCUMENT_UNITS}, got {document!r}")
    plan = input_plan(paths)
    input_format = resolve_input_format(input_format, plan.files if plan is not None else None, paths)
    if document != "line" and input_format != "text":
        raise ConfigError(f"document={document!r} applies to text input only (jsonl/parquet hold one per row)")
    on_bad_input = file_policy(spark, on_bad_input)
    reader, sources = _reader(spark, plan, paths)
    if on_bad_input == "skip":
        reader = reader.option("ignoreCorruptFiles", "true")
    if input_format == "text":
        if keep_columns:
            raise ConfigError("text input has no columns to keep; keep_columns is for jsonl/parquet")
        if document == "file":
            frame = _load(lambda p: reader.text(p, wholetext=True), sources, spark)
            return _tag_reader(frame.select(F.col("value").alias(text_col)), {"skipped_records": 0})
        if document == "paragraph":
            frame = _load(lambda p: reader.text(p, wholetext=True), sources, spark)
            docs = paragraphs(frame, text_col)
            if shared_input or _local_master(spark):  # the tasks read the files in splits (spark.read.paragraphs)
                docs = text_splits.tag(docs, frame.inputFiles(), on_bad_input, paragraphs=True)
            return _tag_reader(docs, {"skipped_records": 0})
        frame = _load(lambda p: reader.text(p, lineSep="\n"), sources, spark)
        # subtle: the reader drops the "\n"; tokenizers trains on lines that keep it.
        docs = frame.select(F.concat(F.col("value"), F.lit("\n")).alias(text_col))
        if shared_input or _local_master(spark):  # every task sees the driver's files: they may read them directly
            docs = text_splits.tag(docs, frame.inputFiles(), on_bad_input)
        return _tag_reader(docs, {"skipped_records": 0})
    if input_format == "parquet":
        frame = _load(lambda p: reader.parquet(*p), sources, spark)
        check_columns(frame, {text_col: STRING, **dict.fromkeys(keep_columns)}, source=", ".join(paths),
                      hint=_text_hint())
        docs = frame.select(col(text_col), *map(col, keep_columns))
        if not keep_columns and on_bad_input == "error" and (shared_input or _local_master(spark)):
            docs = parquet_splits.tag(docs, frame.inputFiles(), text_col)  # the tasks may read them directly
        return _tag_reader(docs, {"skipped_records": 0})
    # JSON Lines: look at the first lines for the columns, then parse every line in the Python
    # tasks (bpe_spark.spark.read.jsonl), so that Spark does not scan the whole input to infer a schema.
    # Local files' first lines are read on the driver (Spark's limit() is a job of its own).
    lines = _load(lambda p: reader.text(p, lineSep="\n"), sources, spark)
    tasks_see_files = shared_input or _local_master(spark)  # every task (and the driver) sees them
    files = lines.inputFiles() if tasks_see_files else []
    sample = text_splits.head_lines(files, JSON_SAMPLE_LINES) if tasks_see_files else None
    if sample is None:
        head = _load(lambda p: reader.text(p), sources, spark).limit(JSON_SAMPLE_LINES)
        sample = [row.value for row in head.collect()]
    if sample:
        check_columns(text_splits.record_fields(sample), dict.fromkeys([text_col, *keep_columns]), hint=_text_hint(),
                      source=f"the first {JSON_SAMPLE_LINES} records of {', '.join(paths)}")
    keep_fields = [StructField(c, StringType()) for c in keep_columns]
    if keep_columns:
        inferred = spark.read.json(spark.sparkContext.parallelize(sample)).schema
        keep_fields = [inferred[c] if c in inferred.fieldNames() else StructField(c, StringType())
                       for c in keep_columns]
    docs, observation = jsonl.read_jsonl(lines, text_col, keep_fields, on_bad_input)
    if not keep_columns and tasks_see_files:  # encoding tasks may read the files
        docs = jsonl.tag(docs, files, text_col, on_bad_input)
    return _tag_reader(docs, observation)


def paragraphs(files: DataFrame, text_col: str) -> DataFrame:
    """Paragraph documents (see the module docstring) of whole files (one row each): each file
    cut at its runs of two or more ``\\n``, the ``\\n`` at a piece's ends trimmed (the file's
    first and last lines), empty pieces dropped, and each document given its last line's ``\\n``
    back. A file is never split, so no paragraph is cut by a split edge."""
    pieces = files.select(F.explode(F.split(F.col("value"), "\n\n+")).alias("value"))
    trimmed = pieces.select(F.expr("trim(BOTH '\n' FROM value)").alias("value")).where(F.length("value") > 0)
    return trimmed.select(F.concat(F.col("value"), F.lit("\n")).alias(text_col))


def _local_master(spark: SparkSession) -> bool:
    """Whether the session's tasks run in the driver's machine (``local``, ``local[N]``...)."""
    return spark.conf.get("spark.master", "").strip().lower().startswith("local")


def _text_hint() -> str:
    return f"name the text column with {option('text_col')}"


_READER = "_bpe_spark_reader_stats"


def _tag_reader(df: DataFrame, counts: dict | Observation) -> DataFrame:
    """Mark ``df`` with what its reader counts (a dict, or the observation that will hold it);
    any transformation of ``df`` drops the mark."""
    setattr(df, _READER, counts)
    return df


def with_reader_stats(df: DataFrame | None, stats: dict) -> dict:
    """``stats`` (a consumer's corpus statistics, after its job ran) with what ``df``'s reader
    counted: ``skipped_records`` (None when ``df`` was not made by ``read_documents``), and the
    JSON Lines reader's text-rule replacements added to the consumer's; ``stats`` as they are
    when they hold ``skipped_records`` (the consumer's tasks read the records themselves)."""
    if stats.get("skipped_records") is not None:  # the consumer's tasks read the records: the reader never ran
        return dict(stats)
    found = getattr(df, _READER, None) if df is not None else None
    reader = dict(found.get) if isinstance(found, Observation) else dict(found or {})
    stats = dict(stats)
    stats["skipped_records"] = reader.get("skipped_records")
    for key in ("replaced_sequences", "affected_documents"):
        if key in reader:
            stats[key] = (stats.get(key) or 0) + int(reader[key])
    return stats


def file_policy(spark: SparkSession, on_bad_input: str) -> str:
    """What to do with a corrupt file: ``on_bad_input``, or ``"skip"`` when the session sets
    ``spark.sql.files.ignoreCorruptFiles=true``."""
    check_bad_input_policy(on_bad_input)
    if spark.conf.get("spark.sql.files.ignoreCorruptFiles", "false").strip().lower() == "true":
        return "skip"
    return on_bad_input


def read_counts(
    spark: SparkSession,
    paths: str | Sequence[str],
    *,
    pretoken_col: str = "pretoken",
    count_col: str = "count",
) -> DataFrame:
    """Pretoken counts (Parquet with a string and an integer column) as ``(pretoken, count)``."""
    paths = _as_list(paths)
    reader, sources = _reader(spark, input_plan(paths), paths)  # the one walk, as for documents
    frame = _load(lambda p: reader.parquet(*p), sources, spark)
    check_columns(frame.columns, dict.fromkeys([pretoken_col, count_col]), source=", ".join(paths),
                  hint="name the columns with pretoken_col= and count_col=")
    return frame.select(
        F.col(pretoken_col).cast("string").alias("pretoken"), F.col(count_col).cast("long").alias("count")
    )


def local_input_bytes(df) -> int | None:
    """The bytes on disk of the files ``df`` reads, when they are all local; else None.

    Local text read by the Python tasks (:mod:`~bpe_spark.spark.read.text_splits`) knows its
    files; any other DataFrame read from files names them (``DataFrame.inputFiles``)."""
    source = text_splits.source_of(df)
    if source is not None:
        files = list(source.files)
    else:
        try:
            files = list(df.inputFiles())
        except Exception:  # noqa: BLE001 - a DataFrame not read from files: nothing is known
            return None
    if not files:
        return None
    total = 0
    for name in files:
        parsed = urlparse(name)
        if parsed.scheme not in ("", "file"):
            return None
        path = unquote(parsed.path) if parsed.scheme == "file" else name
        try:
            total += os.path.getsize(path)
        except OSError:
            return None
    return total
