"""Schema checks before any work (the Spark ML habit): one check, one error type.

Every DataFrame the jobs take (documents, pretoken counts, texts to encode) is checked here, on
the driver and before a Spark job runs: the columns named must exist and hold the type the work
needs, and the columns a job adds must not exist yet. Failures raise
:class:`~bpe_spark.errors.ColumnError`, naming the column, the input and what to pass instead.
The session must be a classic one (:func:`require_classic`): Spark Connect is refused up front.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql import types as T

from bpe_spark.errors import ColumnError, ConfigError

STRING = (T.StringType,)
INTEGER = (T.IntegralType,)
_KIND_NAMES = {STRING: "string", INTEGER: "an integer type"}


def check_columns(
    columns: DataFrame | Sequence[str],
    required: Mapping[str, tuple[type, ...] | None],
    *,
    source: str = "the input",
    hint: str = "",
    added: Iterable[str] = (),
) -> None:
    """Raise :class:`ColumnError` unless every ``required`` column exists (of its kind, when one
    is given: ``STRING`` or ``INTEGER``) and none of the ``added`` output columns does.

    ``columns`` is a DataFrame, or column names alone (types then go unchecked). ``hint`` tells
    the user which option names the column.
    """
    if isinstance(columns, DataFrame):
        require_classic(columns)
        types = {field.name: field.dataType for field in columns.schema.fields}
    else:
        types = dict.fromkeys(columns)
    for name, kind in required.items():
        if name not in types:
            raise ColumnError.missing(name, source, types, hint)
        found = types[name]
        if kind is not None and found is not None and not isinstance(found, kind):
            raise ColumnError.wrong_type(name, source, found.simpleString(), _KIND_NAMES.get(kind, kind))
    for name in added:
        if name in types:
            raise ColumnError(f"Output column {name} already exists in {source}; rename or drop it first")


def col(name: str) -> Column:
    """The top-level column ``name`` (:func:`bpe_spark.spark.options.column_name`'s), quoted so that
    Spark reads no dots or backticks in it as a path into a struct.

    >>> col("meta.text")  # doctest: +SKIP
    Column<'`meta.text`'>
    """
    return F.col("`" + name.replace("`", "``") + "`")


def require_classic(frame_or_session) -> None:
    """Raise :class:`ConfigError` for a Spark Connect DataFrame or session (``spark.remote``,
    Databricks shared and serverless compute), before any work: bpe-spark drives its executors
    through the SparkContext (broadcast model tables, the JVM's file systems, job status), which
    Spark Connect does not expose."""
    session = getattr(frame_or_session, "sparkSession", frame_or_session)
    if type(session).__module__.startswith("pyspark.sql.connect"):
        raise ConfigError(
            "bpe-spark needs a classic Spark session, and this is a Spark Connect one (spark.remote; Databricks "
            "shared or serverless compute): run it with spark-submit, or on a single-user (dedicated) cluster"
        )
