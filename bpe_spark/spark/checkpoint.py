"""A training run's checkpoint directory (any Hadoop URI): what a resumed run reads back.

It holds ``training.json`` (the config and the corpus statistics), ``counts.parquet`` (the
pretoken counts, when training from text) and ``merges.parquet``: the model directory's merges
columns (:data:`bpe_spark.formats.model_dir.MERGES_SCHEMA`) plus the ``round`` that learned each
merge, one file appended per round.
"""

from __future__ import annotations

import functools
import json

from pyspark.sql import SparkSession
from pyspark.sql.pandas.types import from_arrow_schema
from pyspark.sql.types import IntegerType, StructField, StructType

from bpe_spark.config import TrainerConfig
from bpe_spark.errors import ConfigError, OutputExistsError
from bpe_spark.symbols import SymbolTable, utf8_bytes
from bpe_spark.trainer import Merge

META_FILE = "training.json"
COUNTS_FILE = "counts.parquet"
MERGES_FILE = "merges.parquet"  # the model directory's name for the same columns


@functools.cache
def merges_schema() -> StructType:
    """The Spark schema of the checkpoint's merges: the model directory's merges columns, then
    the ``round`` of each merge."""
    # imported here: the model directory loads every file format and Parquet, which a run that
    # keeps no checkpoint never needs
    from bpe_spark.formats.model_dir import MERGES_SCHEMA

    return StructType(from_arrow_schema(MERGES_SCHEMA).fields + [StructField("round", IntegerType())])


class Checkpoint:
    """The checkpoint directory at ``path``, read and written through Hadoop's file system."""

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
        if not self.exists(META_FILE):
            if self.exists(MERGES_FILE):
                raise OutputExistsError(f"{self.path} holds merges but no training.json; use an empty directory")
            return None
        if not resume:
            raise OutputExistsError(
                f"checkpoint directory {self.path} holds an earlier training run; pass --resume "
                "(resume=True) to continue it, or choose an empty directory"
            )
        recorded = self.read_json(META_FILE)
        if recorded.get("config") != cfg.to_dict():
            raise ConfigError(
                f"checkpoint {self.path} was made with another config ({recorded.get('config')}); "
                "resume with the same settings or start in an empty directory"
            )
        return recorded.get("stats") or {}

    def load_counts(self):
        """The pretoken counts a resumed run saved, or None when the run trained from counts."""
        return self.spark.read.parquet(self.child(COUNTS_FILE)) if self.exists(COUNTS_FILE) else None

    def save_counts(self, counts):
        """Write the counts here and return them read back (later jobs read the files, not the
        counting job again)."""
        counts.write.mode("overwrite").parquet(self.child(COUNTS_FILE))
        return self.spark.read.parquet(self.child(COUNTS_FILE))

    def record(self, cfg: TrainerConfig, stats: dict) -> None:
        self.write_json(META_FILE, {"config": cfg.to_dict(), "stats": stats})

    def load_merges(self, table: SymbolTable) -> tuple[list[Merge], list[int]]:
        """Replay the recorded merges into ``table``; returns them and the merges of each round."""
        if not self.exists(MERGES_FILE):
            return [], []
        rows = (
            self.spark.read.parquet(self.child(MERGES_FILE))
            .select("rank", "left", "right", "id", "count", "round")
            .orderBy("rank")
            .collect()
        )
        merges, per_round = [], {}
        for expected, row in enumerate(rows):
            new_id, _ = table.add(table.value(row["left"]) + table.value(row["right"]))
            if row["rank"] != expected or new_id != row["id"]:
                raise ConfigError(
                    f"checkpoint {self.child(MERGES_FILE)} is inconsistent at rank {expected} "
                    f"(found rank {row['rank']}, id {row['id']}; expected id {new_id}); start afresh"
                )
            merges.append(Merge(row["left"], row["right"], new_id, row["count"]))
            per_round[row["round"]] = per_round.get(row["round"], 0) + 1
        return merges, [per_round[r] for r in sorted(per_round)]

    def append_merges(self, round_number: int, first_rank: int, merges: list[Merge], table: SymbolTable) -> None:
        """Add one round's merges (ranks from ``first_rank``) as one more file of merges.parquet."""
        rows = [
            (
                first_rank + i,
                m.left,
                m.right,
                m.new_id,
                utf8_bytes(table.value(m.left)),
                utf8_bytes(table.value(m.right)),
                utf8_bytes(table.value(m.new_id)),
                m.count,
                round_number,
            )
            for i, m in enumerate(merges)
        ]
        frame = self.spark.createDataFrame(rows, merges_schema()).coalesce(1)
        frame.write.mode("append").parquet(self.child(MERGES_FILE))
