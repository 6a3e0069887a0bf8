"""Where training rounds keep their words table from one round to the next, so that an executor
lost or released (dynamic allocation) costs retried tasks or a recomputation, never the run.

- :class:`ReliableWords`, when there is a reliable directory (the run's ``--checkpoint-dir``, else
  Spark's checkpoint directory, ``SparkContext.setCheckpointDir``): each round's table is
  written there as Parquet and read back (cached, its lineage the files alone); the previous
  round's files go once the next are written, the whole directory when training ends.
- :class:`LineageWords`, without one: each round's table is persisted ``MEMORY_AND_DISK`` with
  its lineage back to the counts, so a lost block is recomputed. The lineage holds at most
  :data:`LINEAGE_ROUNDS` applied rounds: then the table is rebuilt from the counts with every
  merge so far (one pass, as a resumed run starts).

``localCheckpoint`` (what rounds used before) keeps blocks on the executors only, with no
lineage: a lost executor failed the run (``CHECKPOINT_RDD_BLOCK_ID_NOT_FOUND``), and its blocks
outlived ``unpersist`` of the DataFrame.

Either store gives each table's rows the same ids on every computation: the words are built
from the counts hash-partitioned by pretoken and sorted within each partition
(:func:`sized_counts`), so a recomputed partition holds the same rows in the same order.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable

from pyspark import StorageLevel
from pyspark.sql import DataFrame, SparkSession

from bpe_spark.spark.storage.hadoop import HadoopFiles

LINEAGE_ROUNDS = 8
ROUNDS_DIR = "rounds"  # under --checkpoint-dir


def sized_counts(counts: DataFrame, partitions: int | None) -> DataFrame:
    """The counts as the words are built from them: ``partitions`` hash partitions of pretokens
    (the counts' own when None), each sorted by pretoken."""
    spread = counts.repartition(partitions, "pretoken") if partitions else counts.repartition("pretoken")
    return spread.sortWithinPartitions("pretoken")


class ReliableWords:
    """Each round's words as Parquet files under ``directory`` (any Hadoop URI)."""

    def __init__(self, spark: SparkSession, directory: str, files: HadoopFiles | None = None):
        self.spark = spark
        self.directory = directory.rstrip("/")
        self.files = files or HadoopFiles(spark, self.directory)
        self.files.delete(self.directory)  # a killed run's tables
        self._path: str | None = None
        self._table: DataFrame | None = None
        self._written = 0

    @classmethod
    def under_spark_checkpoint_dir(cls, spark: SparkSession) -> ReliableWords | None:
        """A store in a new directory under Spark's checkpoint directory, when one is set."""
        base = spark.sparkContext.getCheckpointDir()
        return cls(spark, f"{base.rstrip('/')}/bpe-spark-rounds-{uuid.uuid4().hex}") if base else None

    def first(self, words: DataFrame) -> DataFrame:
        return self._keep(words)

    def next(self, applied: DataFrame, rebuild: Callable[[], DataFrame]) -> DataFrame:
        """The table after a round: ``applied`` (the last table with the round's merges applied)."""
        return self._keep(applied)

    def filled(self) -> None:
        """A job has read the whole table (nothing to do: it was written and read back)."""

    def _keep(self, words: DataFrame) -> DataFrame:
        self._written += 1
        path = f"{self.directory}/words-{self._written:05d}"
        words.write.mode("overwrite").parquet(path)
        previous, previous_path = self._table, self._path
        self._table = self.spark.read.parquet(path).persist(StorageLevel.MEMORY_AND_DISK)
        self._path = path
        if previous is not None:
            previous.unpersist()
            self.files.delete(previous_path)
        return self._table

    def close(self) -> None:
        """Free the cached table and remove the directory (at the end of training, however it ends)."""
        if self._table is not None:
            self._table.unpersist()
            self._table = None
        self.files.delete(self.directory)


class LineageWords:
    """Each round's words persisted with their lineage (no reliable directory)."""

    def __init__(self):
        self._table: DataFrame | None = None
        self._previous: DataFrame | None = None
        self._applied = 0

    def first(self, words: DataFrame) -> DataFrame:
        return self._keep(words)

    def next(self, applied: DataFrame, rebuild: Callable[[], DataFrame]) -> DataFrame:
        """The table after a round: ``applied``, or every :data:`LINEAGE_ROUNDS` rounds ``rebuild()``
        (the words from the counts, with every merge so far)."""
        self._applied += 1
        if self._applied >= LINEAGE_ROUNDS:
            self._applied = 0
            return self._keep(rebuild())
        return self._keep(applied)

    def _keep(self, words: DataFrame) -> DataFrame:
        words = words.persist(StorageLevel.MEMORY_AND_DISK)
        self.filled()
        self._previous, self._table = self._table, words
        return words

    def filled(self) -> None:
        """A job has read the whole table (the round's first): its blocks are filled, so the
        previous table can go. Subtle: not before, or the new table would be computed through
        the previous one's lineage instead of from its blocks."""
        if self._previous is not None:
            self._previous.unpersist()
            self._previous = None

    def close(self) -> None:
        self.filled()
        if self._table is not None:
            self._table.unpersist()
            self._table = None
