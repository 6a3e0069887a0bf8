"""What the Spark side knows of its resources: the cores and the data's size, from which our own
tables and aggregations get their partition counts (whatever ``spark.sql.shuffle.partitions``
says: :func:`capped`), and the driver's memory limits, from which the default driver budget
comes (:mod:`bpe_spark.training.driver_budget`).

Why not ``spark.sql.shuffle.partitions``: its default of 200 made a 1 MB corpus run thousands of
tasks in rounds, and AQE does not coalesce the shuffles of persisted tables
(``spark.sql.optimizer.canChangeCachedPlanOutputPartitioning`` is off). A shuffle keeps its
partitions (its map side still combines per partition, and each reduce partition is aggregated
on its own); ``coalesce`` then runs them in fewer tasks, without another shuffle. Each shuffle
partition still costs its own fetches and hash map, which dozens of aggregations a run pay in
full; so the rounds also plan their jobs under :func:`shuffle_partitions`, which sets the
session's ``spark.sql.shuffle.partitions`` for their time and restores the user's value after.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from pyspark.sql import DataFrame, SparkSession

from bpe_spark.training.driver_budget import DriverMemory, available_memory, parse_bytes
from bpe_spark.training.round_plan import partitions_for

_UNKNOWN_SIZE = 1 << 62  # Catalyst's size of a plan it cannot estimate is Long.MaxValue
COLLECT_TASK_BYTES = 32 << 20  # the most of a collected result one task returns


def cores(spark: SparkSession) -> int:
    """The cores the application has now (``defaultParallelism``: at least 2 on a cluster)."""
    return max(1, int(spark.sparkContext.defaultParallelism))


def estimated_bytes(df: DataFrame) -> int | None:
    """Catalyst's estimate of ``df``'s size (files: their sizes); None when it has none."""
    try:
        size = int(df._jdf.queryExecution().optimizedPlan().stats().sizeInBytes())
    except Exception:  # noqa: BLE001 - an estimate only: without one Spark's setting stands
        return None
    return size if 0 <= size < _UNKNOWN_SIZE else None


def partitions(spark: SparkSession, size_bytes: int | None) -> int:
    """Partitions for ``size_bytes`` of data on this application's cores (None: size unknown)."""
    return partitions_for(size_bytes, cores(spark))


def capped(df: DataFrame, most: int | None) -> DataFrame:
    """``df`` (an aggregation) in at most ``most`` tasks: its shuffle partitions coalesced, no
    new shuffle. Unchanged when ``most`` is None."""
    return df if most is None else df.coalesce(most)


def collectable(df: DataFrame, result_bytes: int) -> DataFrame:
    """``df`` in partitions of at most :data:`COLLECT_TASK_BYTES` each of the ``result_bytes`` a
    collect returns: a task's result is held two or three times in the heap while it is
    serialized, two tasks at once on two cores (larger ones ran a 1 GiB local driver out of
    heap). Repartitioned, round robin, only when the partitions are too few."""
    pieces = -(-result_bytes // COLLECT_TASK_BYTES)
    if pieces <= 1 or df.rdd.getNumPartitions() >= pieces:
        return df
    return df.repartition(pieces)


@contextlib.contextmanager
def session_setting(spark: SparkSession, key: str, value: str) -> Iterator[None]:
    """The session's setting ``key`` is ``value`` inside the block, then as it was (unset again
    if it was unset). Queries planned meanwhile in other threads of the same session get it too:
    a run's own jobs are what it is for."""
    before = spark.conf.get(key, None)
    spark.conf.set(key, value)
    try:
        yield
    finally:
        if before is None:
            spark.conf.unset(key)
        else:
            spark.conf.set(key, before)


def shuffle_partitions(spark: SparkSession, partitions: int) -> contextlib.AbstractContextManager[None]:
    """The session's ``spark.sql.shuffle.partitions`` is ``partitions`` inside the block
    (:func:`session_setting`)."""
    return session_setting(spark, "spark.sql.shuffle.partitions", str(partitions))


def driver_memory(spark: SparkSession) -> DriverMemory:
    """The driver's limits: the JVM's max heap, ``spark.driver.maxResultSize`` and the memory the
    Python process may take (in cluster deploy mode, within the container's memory overhead)."""
    conf = spark.sparkContext.getConf()
    heap = int(spark.sparkContext._jvm.java.lang.Runtime.getRuntime().maxMemory())
    result = parse_bytes(conf.get("spark.driver.maxResultSize", "1g"))
    python, limit = available_memory()
    if conf.get("spark.submit.deployMode", "client") == "cluster":
        # the driver runs in a container of driver memory + overhead; Python lives in the overhead
        driver = parse_bytes(conf.get("spark.driver.memory", "1g"), "m")
        factor = float(conf.get("spark.driver.memoryOverheadFactor", "0.1"))
        overhead = conf.get("spark.driver.memoryOverhead")
        room = parse_bytes(overhead, "m") if overhead else max(384 << 20, int(factor * driver))
        if python is None or room < python:
            python, limit = room, "the driver container's spark.driver.memoryOverhead"
    return DriverMemory(jvm_heap=heap, max_result_size=result, python_available=python, python_limit=limit)
