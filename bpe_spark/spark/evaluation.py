"""Comparing tokenizers on a corpus in one Spark pass: ``evaluate(df, tokenizers)``.

The corpus is read once: one ``mapInArrow`` stage whose tasks hold every model (each broadcast
once, rebuilt once per Python worker: :class:`~bpe_spark.spark.encoding.tasks.ModelBroadcast`)
and encode each Arrow batch of texts with all of them, adding the batch's statistics into one
:class:`~bpe_spark.inspect.evaluate_stats.Tally` per task; each task ends by yielding its tally as
rows ``(kind, model, group, key, value, example)``, which one ``groupBy`` sums exactly (long
integers; the smallest example) before the driver collects the sums and computes the figures
(:mod:`bpe_spark.inspect.evaluate_figures`). Only sums and histograms leave the tasks, so the
figures are the same whatever the partitioning.

``group_by``: None (one group, ``all``), ``"script"`` (the script of each document's text:
:func:`~bpe_spark.inspect.evaluate_stats.document_script`), or a column of ``df`` (its value as
a string; null: ``(null)``); ``"column:NAME"`` names a column even when it is called ``script``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.sql import types as T

from bpe_spark.encoding.options import EncodeOptions
from bpe_spark.encoding.tokenizer import Tokenizer
from bpe_spark.errors import ConfigError, current_interface, interface, option
from bpe_spark.inspect.evaluate_figures import RESIDUE_MIN, RESIDUE_RATIO, TOP, check_counts, evaluation_figures
from bpe_spark.inspect.evaluate_stats import NULL_GROUP, Tally, document_script, tally_texts, tally_utf8
from bpe_spark.bpe.text import utf8_buffers, utf8_view
from bpe_spark.spark.encoding.tasks import TEXT, ModelBroadcast, arrow_text
from bpe_spark.spark.options import column_name
from bpe_spark.spark.read.documents import local_input_bytes
from bpe_spark.spark.runtime.columns import STRING, check_columns, col
from bpe_spark.spark.runtime.failures import executor_errors
from bpe_spark.spark.runtime.progress import OFF, Progress
from bpe_spark.spark.runtime.stage_progress import spark_phase

SCRIPT = "script"
COLUMN_PREFIX = "column:"
_GROUP = "__bpe_group"
_ROWS = T.StructType([
    T.StructField("kind", T.StringType(), False), T.StructField("model", T.IntegerType(), False),
    T.StructField("group", T.StringType(), False), T.StructField("key", T.LongType(), False),
    T.StructField("value", T.LongType(), False), T.StructField("example", T.StringType(), True),
])


def group_column(group_by: str | None) -> str | None:
    """The column ``group_by`` names, or None (no grouping, or the script).

    >>> group_column("lang"), group_column("script"), group_column("column:script"), group_column(None)
    ('lang', None, 'script', None)
    """
    if group_by is None or group_by == SCRIPT:
        return None
    return column_name(group_by[len(COLUMN_PREFIX):] if group_by.startswith(COLUMN_PREFIX) else group_by)


def model_names(tokenizers, names: Sequence[str] | None = None) -> tuple[list[Tokenizer], list[str]]:
    """The tokenizers and their names: a mapping's keys, ``names``, or ``model 1``, ``model 2``..."""
    if isinstance(tokenizers, Mapping):
        names, tokenizers = list(tokenizers), list(tokenizers.values())
    tokenizers = list(tokenizers)
    if not tokenizers:
        raise ConfigError("evaluate needs at least one tokenizer")
    names = list(names) if names is not None else [f"model {i + 1}" for i in range(len(tokenizers))]
    if len(names) != len(tokenizers) or len(set(names)) != len(names):
        raise ConfigError(f"give each of the {len(tokenizers)} tokenizers its own name, got {names}")
    return tokenizers, names


def evaluate(
    df: DataFrame,
    tokenizers: Sequence[Tokenizer] | Mapping[str, Tokenizer],
    *,
    names: Sequence[str] | None = None,
    text_col: str = "text",
    group_by: str | None = None,
    residue_ratio: int = RESIDUE_RATIO,
    residue_min: int = RESIDUE_MIN,
    top: int = TOP,
    progress: Progress | None = None,
    sources: Sequence[str] | None = None,
) -> dict:
    """Compare ``tokenizers`` on the documents of ``df[text_col]`` in one pass over ``df``: the
    figures of :func:`bpe_spark.inspect.evaluate_figures.evaluation_figures` (a JSON-ready dict:
    bytes, characters and tokens per document, bytes per token, per group and parity across
    groups, vocabulary use and residue, the most frequent and longest tokens, round-trip
    failures). ``tokenizers``: a list (named by ``names``) or a ``{name: tokenizer}`` mapping.
    Texts are encoded as ``tok.encode(text, disallowed_special=())`` (special-token text as
    ordinary text). ``group_by``: see the module docstring. ``progress``: a
    :class:`~bpe_spark.spark.runtime.progress.Progress` reporter (default: silent).

    >>> figures = evaluate(spark.createDataFrame([("hello",)], ["text"]), {"mine": tok})  # doctest: +SKIP
    >>> figures["models"][0]["bytes_per_token"]                                           # doctest: +SKIP
    """
    tokenizers, names = model_names(tokenizers, names)
    text_col = column_name(text_col)
    column = group_column(group_by)
    check_columns(df, {text_col: STRING}, hint=f"choose the text column with {option('text_col')}")
    if column is not None:
        check_columns(df, {column: None}, hint="choose the group column with --group-by")
    check_counts(residue_ratio=residue_ratio, residue_min=residue_min, top=top)
    progress = progress or OFF
    spark = df.sparkSession
    projection = [col(text_col).alias(TEXT)]
    if column is not None:
        projection.append(col(column).cast("string").alias(_GROUP))
    by_script = group_by == SCRIPT
    speaking = current_interface()
    with spark_phase(spark, progress, "evaluating", input_size=lambda: local_input_bytes(df)):
        models = [ModelBroadcast(spark, tok, EncodeOptions()) for tok in tokenizers]

        def run(batches):
            with interface(speaking):
                yield from _tally_batches(batches, models, grouped=column is not None, by_script=by_script)

        sums = (df.select(*projection).mapInArrow(run, _ROWS)
                .groupBy("kind", "model", "group", "key")
                .agg(F.sum("value").alias("value"), F.min("example").alias("example")))
        try:
            with executor_errors():
                rows = sums.collect()
        finally:
            for model in models:
                model.unpersist()
    tally = Tally.from_rows(len(tokenizers), sorted(tuple(row) for row in rows))
    return evaluation_figures(tally, tokenizers, names, group_by=group_by, residue_ratio=residue_ratio,
                              residue_min=residue_min, top=top, sources=sources)


def _tally_batches(batches, models: Sequence[ModelBroadcast], *, grouped: bool, by_script: bool):
    """mapInArrow body: one tally over the task's batches, yielded as rows at the end."""
    encoders = [model.encoder() for model in models]
    tally = Tally(len(encoders))
    for batch in batches:
        if batch.num_rows == 0:
            continue
        column = batch.column(0)
        buffers = utf8_buffers(column)
        texts = None if buffers is not None else arrow_text(column)
        if grouped:
            groups = [NULL_GROUP if g is None else g for g in batch.column(1).to_pylist()]
        elif by_script:  # the strings name the scripts; the encoders still take the buffers
            strings = texts if texts is not None else utf8_view(column).to_pylist()
            groups = [NULL_GROUP if t is None else document_script(t) for t in strings]
        else:
            groups = None
        if texts is None:
            nulls = column.is_null().to_numpy(zero_copy_only=False)
            chars = pc.fill_null(pc.utf8_length(utf8_view(column)), 0).to_numpy(zero_copy_only=False).astype(np.int64)
            tally.add(tally_utf8(encoders, buffers[0], buffers[1], nulls, chars, groups))
        else:
            tally.add(tally_texts(encoders, texts, groups))
    if not tally.documents and not tally.null_documents:
        return
    columns = zip(*tally.rows())
    types = (pa.string(), pa.int32(), pa.string(), pa.int64(), pa.int64(), pa.string())
    yield pa.RecordBatch.from_arrays([pa.array(values, type=kind) for values, kind in zip(columns, types)],
                                     [field.name for field in _ROWS.fields])
