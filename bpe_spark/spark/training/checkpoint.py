"""A training run's checkpoint directory (any Hadoop URI): what a resumed run reads back.

It holds ``training.json`` (the config, the run's start: fresh, or the fingerprint of the model it
continues or takes its pipeline from, the input's fingerprint and the corpus statistics),
``counts.parquet`` (the pretoken counts, when training from text) and ``merges.parquet``: the
model directory's merges columns (:data:`bpe_spark.models.model_dir.MERGES_SCHEMA`) plus the
``round`` that learned each merge, one file appended per round; while a run trains in rounds,
``rounds/`` holds its words table (:mod:`bpe_spark.spark.training.round_words`: scratch, removed when
training ends, and by the next run if it was killed).

A resumed run must be the same run: the same config, the same start (the same base model) and the same input (:func:`input_fingerprint`:
the files read, their sizes and modification times, and the options that shape the documents);
anything else, or a directory holding no checkpoint, is a one-line :class:`CheckpointError` saying
what differs. A run holds the directory's lock (:mod:`bpe_spark.spark.training.checkpoint_lock`) from
:meth:`Checkpoint.start` to :meth:`Checkpoint.release`.
"""

from __future__ import annotations

import functools
import json
import os
from urllib.parse import unquote, urlparse

from pyspark.sql import SparkSession
from pyspark.sql.pandas.types import from_arrow_schema
from pyspark.sql.types import IntegerType, StructField, StructType

from bpe_spark.storage import output_guard

from bpe_spark.storage import markers
from bpe_spark.bpe.config import TrainerConfig
from bpe_spark.errors import CheckpointError, ConfigError, OutputExistsError, in_cli, option
from bpe_spark.spark.training.checkpoint_lock import CheckpointLock
from bpe_spark.spark.storage.hadoop import HadoopFiles, input_paths
from bpe_spark.bpe.symbols import SymbolTable, utf8_bytes
from bpe_spark.training.engine import Merge

META_FILE = "training.json"
COUNTS_FILE = "counts.parquet"
MERGES_FILE = "merges.parquet"  # the model directory's name for the same columns
FRESH = {"kind": "fresh"}  # training.json's "start" of a fresh run (and of a checkpoint that records none)


def input_fingerprint(df, **options) -> dict:
    """What decides a run's pretoken counts besides its config: the files ``df`` reads (URI,
    size, modification time in ms, through Hadoop's file system for any URI; none for a
    DataFrame not read from files) and the ``options`` that shape the documents (input format,
    text column, document unit, engine...).

    >>> input_fingerprint(spark.read.text("a.txt"), text_column="text")  # doctest: +SKIP
    {'files': [['file:///data/a.txt', 11989, 1764590400000]], 'options': {'text_column': 'text'}}
    """
    files = []
    conf = None
    for uri in sorted(set(input_paths(df))):
        parsed = urlparse(uri)
        if parsed.scheme in ("", "file"):
            stat = os.stat(unquote(parsed.path))
            files.append([uri, stat.st_size, stat.st_mtime_ns // 1_000_000])
            continue
        jvm = df.sparkSession.sparkContext._jvm
        conf = conf or df.sparkSession.sparkContext._jsc.hadoopConfiguration()
        path = jvm.org.apache.hadoop.fs.Path(uri)
        status = path.getFileSystem(conf).getFileStatus(path)
        files.append([uri, int(status.getLen()), int(status.getModificationTime())])
    return {"files": files, "options": {key: options[key] for key in sorted(options)}}


def _differences(then: dict, now: dict) -> str:
    """``key: old there, new now`` for each key whose value differs.

    >>> _differences({"vocab_size": 300, "scheme": "byte"}, {"vocab_size": 301, "scheme": "byte"})
    'vocab_size: 300 there, 301 now'
    """
    keys = sorted(set(then) | set(now))
    return ", ".join(f"{key}: {then.get(key)!r} there, {now.get(key)!r} now"
                     for key in keys if then.get(key) != now.get(key))


def _input_changes(then: dict, now: dict) -> str:
    """What differs between two :func:`input_fingerprint` values, in a few words ("" if nothing)."""
    before = {uri: (size, mtime) for uri, size, mtime in then.get("files") or []}
    after = {uri: (size, mtime) for uri, size, mtime in now.get("files") or []}
    parts = []
    for what, uris in (
        ("new", [uri for uri in after if uri not in before]),
        ("no longer read", [uri for uri in before if uri not in after]),
        ("changed since (size or modification time)", [uri for uri in after if before.get(uri, after[uri]) != after[uri]]),
    ):
        if uris:
            shown = ", ".join(uris[:3]) + (f" and {len(uris) - 3} more" if len(uris) > 3 else "")
            parts.append(f"{shown}: {what}")
    options = _differences(then.get("options") or {}, now.get("options") or {})
    return "; ".join(parts + ([options] if options else []))


def _origin_text(origin: dict) -> str:
    """A run's start in a few words.

    >>> _origin_text({"kind": "extend", "fingerprint": "sha256:ab12"})
    'extending the model sha256:ab12'
    """
    kind, fingerprint = origin.get("kind"), origin.get("fingerprint")
    if kind == "fresh":
        return "training afresh"
    if kind == "extend":
        return f"extending the model {fingerprint}"
    if kind == "like":
        return f"with the pipeline of the model {fingerprint}"
    return f"{kind} from the model {fingerprint}"


@functools.cache
def _new_run() -> str:
    """How a user starts afresh instead of resuming."""
    return f"drop {option('resume', True)}" if in_cli() else f"pass {option('resume', False)}"


def merges_schema() -> StructType:
    """The Spark schema of the checkpoint's merges: the model directory's merges columns, then
    the ``round`` of each merge."""
    # imported here: the model directory loads every file format and Parquet, which a run that
    # keeps no checkpoint never needs
    from bpe_spark.models.model_dir import MERGES_SCHEMA

    return StructType(from_arrow_schema(MERGES_SCHEMA).fields + [StructField("round", IntegerType())])


class Checkpoint:
    """The checkpoint directory at ``path``, read and written through Hadoop's file system."""

    def __init__(self, spark: SparkSession, path: str, *, protected=None):
        self.spark = spark
        self.path = str(path).rstrip("/")
        self._files = HadoopFiles(spark, self.path)
        self._marked = False
        # before any work: the directory is clear of the inputs (``protected``), writable, and
        # new, empty or a checkpoint (bpe_spark.storage.output_guard)
        output_guard.check_checkpoint(self.path, protected=protected or {}, files=self._files)

    def _mark(self) -> None:
        """The marker goes in before the first file the run writes here."""
        if not self._marked:
            markers.write_marker(self.path, "checkpoint", self._files)
            self._marked = True

    @property
    def files(self) -> HadoopFiles:
        """The directory's file system (for the rounds' words under it)."""
        return self._files

    def child(self, name: str) -> str:
        return f"{self.path}/{name}"

    def holds_run(self) -> bool:
        """Whether the directory holds a run that can be resumed (its counts were saved)."""
        return self._files.kind(self.path) == "dir" and self.exists(META_FILE)

    def exists(self, name: str) -> bool:
        return self._files.kind(self.child(name)) is not None

    def write_json(self, name: str, value: dict) -> None:
        self._mark()
        self._files.write_bytes(self.child(name), json.dumps(value, indent=1, sort_keys=True).encode("utf-8"))

    def read_json(self, name: str) -> dict:
        # read on the driver through the file system: no Spark job for one small file
        return json.loads(self._files.read_bytes(self.child(name), 1 << 30))

    def start(self, cfg: TrainerConfig, fingerprint: dict, *, resume: bool, origin: dict | None = None) -> dict | None:
        """Lock the directory (:mod:`checkpoint_lock`) and check it; returns the recorded
        statistics when resuming a run, None for a new one. A resumed run must have the
        checkpoint's config, start (``origin``: :func:`~bpe_spark.spark.training.starting.start_record`,
        default a fresh run) and input (``fingerprint``: :func:`input_fingerprint`)."""
        self.origin = dict(origin or FRESH)
        if resume and self._files.kind(self.path) != "dir":
            raise CheckpointError(
                f"checkpoint directory {self.path} does not exist; give the directory of the interrupted "
                f"run, or {_new_run()} to start a new run there"
            )
        if resume and not self.exists(META_FILE):
            raise CheckpointError(
                f"checkpoint directory {self.path} holds no checkpoint (no {META_FILE}: its run stopped "
                f"before its counts were saved, or none ran there); {_new_run()} to start afresh"
            )
        self._mark()  # subtle: before the lock, so that a directory holding a lock reads as a checkpoint
        self._lock = CheckpointLock(self.spark, self.path)
        self._lock.acquire()
        try:
            recorded = self._check(cfg, fingerprint, resume)
        except BaseException:
            self.release()
            raise
        self.fingerprint = fingerprint
        return recorded

    def release(self) -> None:
        """Give up the directory's lock (at the end of the run, whatever its outcome)."""
        lock, self._lock = getattr(self, "_lock", None), None
        if lock is not None:
            lock.release()

    def _check(self, cfg: TrainerConfig, fingerprint: dict, resume: bool) -> dict | None:
        if not self.exists(META_FILE):
            if self.exists(MERGES_FILE):
                raise OutputExistsError(f"{self.path} holds merges but no {META_FILE}; use an empty directory")
            return None
        if not resume:
            raise OutputExistsError(
                f"checkpoint directory {self.path} holds an earlier training run; pass {option('resume', True)} "
                "to continue it, or choose an empty directory"
            )
        recorded = self.read_json(META_FILE)
        config = _differences(recorded.get("config") or {}, cfg.to_dict())
        if config:
            raise CheckpointError(
                f"checkpoint {self.path} was made with another config ({config}); resume with the same "
                "settings, or start in an empty checkpoint directory"
            )
        then = recorded.get("start") or FRESH  # an earlier bpe-spark trained afresh only
        if then != self.origin:
            raise CheckpointError(
                f"checkpoint {self.path} was made {_origin_text(then)}, this run is {_origin_text(self.origin)}; "
                "resume with the same base model, or start in an empty checkpoint directory"
            )
        if "input" not in recorded:
            raise CheckpointError(
                f"checkpoint {self.path} has no input fingerprint (an earlier bpe-spark wrote it), so "
                "resuming it cannot be checked; start in an empty checkpoint directory"
            )
        changes = _input_changes(recorded["input"], fingerprint)
        if changes:
            raise CheckpointError(
                f"checkpoint {self.path} was made from another input ({changes}); resume with the same "
                "input and options, or start in an empty checkpoint directory"
            )
        return recorded.get("stats") or {}

    def load_counts(self):
        """The pretoken counts a resumed run saved, or None when the run trained from counts."""
        return self.spark.read.parquet(self.child(COUNTS_FILE)) if self.exists(COUNTS_FILE) else None

    def save_counts(self, counts):
        """Write the counts here and return them read back (later jobs read the files, not the
        counting job again)."""
        self._mark()
        counts.write.mode("overwrite").parquet(self.child(COUNTS_FILE))
        return self.spark.read.parquet(self.child(COUNTS_FILE))

    def record(self, cfg: TrainerConfig, stats: dict) -> None:
        self.write_json(META_FILE, {"config": cfg.to_dict(), "start": self.origin, "input": self.fingerprint,
                                    "stats": stats})

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
            new_id, _ = table.add(table.join(table.value(row["left"]), table.value(row["right"])))
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
        self._mark()
        frame.write.mode("append").parquet(self.child(MERGES_FILE))
