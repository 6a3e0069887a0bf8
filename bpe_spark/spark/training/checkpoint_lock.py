"""The lock of a checkpoint directory: one training run at a time.

A run creates ``_LOCK`` in its checkpoint directory exclusively (``O_EXCL`` on a local file
system; Hadoop's ``create(overwrite=false)`` elsewhere, atomic on HDFS, advisory on object
stores), holding JSON ``{"host", "pid", "start", "started"}`` (``start``: the process's start,
as :func:`bpe_spark.storage.owners.current_owner` records it), and removes it when the run ends,
whatever the outcome. A second run finds it and refuses, naming the owner. A lock whose owner
is a dead process on this host (:func:`bpe_spark.storage.owners.owner_is_dead`) is stale: the
next run takes it over with a warning. A lock of another host is never judged from here.
"""

from __future__ import annotations

import json
import logging
import time
import uuid
from urllib.parse import unquote, urlparse

from bpe_spark.errors import CheckpointLockedError
from bpe_spark.storage.owners import create_exclusive, held_by_gone_process, lock_record
from bpe_spark.spark.storage.hadoop import HadoopFiles

LOCK_FILE = "_LOCK"  # "_": Spark's readers skip it
log = logging.getLogger("bpe_spark")


class CheckpointLock:
    """The lock of the checkpoint directory ``directory`` (any Hadoop URI)."""

    def __init__(self, spark, directory: str):
        self.directory = str(directory).rstrip("/")
        self.files = HadoopFiles(spark, self.directory)
        jvm = spark.sparkContext._jvm
        self._Path = jvm.org.apache.hadoop.fs.Path
        self._fs = self._Path(self.directory).getFileSystem(spark.sparkContext._jsc.hadoopConfiguration())
        self.path = self.files.join(self.directory, LOCK_FILE)
        qualified = urlparse(self.files.qualified(self.path))
        self._local = unquote(qualified.path) if qualified.scheme == "file" else None
        self._record: dict | None = None

    def acquire(self) -> None:
        """Take the lock (creating the directory), or raise :class:`CheckpointLockedError`."""
        record = lock_record(started=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()))
        self._fs.mkdirs(self._Path(self.directory))
        if not self._create(record):
            held = self._read(self.path)
            if not _stale(held):
                raise self._locked(held)
            log.warning("bpe-spark: taking over the stale lock %s of pid %s on %s (that process is gone)",
                        self.path, held["pid"], held["host"])
            self._remove_stale(held)
            if not self._create(record):
                raise self._locked(self._read(self.path))
        self._record = record

    def release(self) -> None:
        """Remove the lock if this run holds it (never another run's)."""
        if self._record is not None and self._read(self.path) == self._record:
            self.files.delete(self.path)
        self._record = None

    def _create(self, record: dict) -> bool:
        """Create the lock file holding ``record``; False when it exists."""
        data = json.dumps(record, sort_keys=True).encode("utf-8")
        if self._local is not None:
            return create_exclusive(self._local, data)
        try:
            stream = self._fs.create(self._Path(self.path), False)
        except Exception:  # py4j's Java error: FileAlreadyExistsException
            if self.files.kind(self.path) is not None:
                return False
            raise
        try:
            stream.write(bytearray(data))
        finally:
            stream.close()
        return True

    def _read(self, path: str) -> dict | None:
        raw = self.files.read_bytes(path, 1 << 16)
        try:
            value = json.loads(raw.decode("utf-8")) if raw else None
        except ValueError:
            return None
        return value if isinstance(value, dict) else None

    def _remove_stale(self, held: dict) -> None:
        """Move the stale lock aside and delete it. subtle: another run may take it over between
        our reading it and the move; what was moved is checked, and put back if it is not the
        stale lock that was read."""
        aside = self.files.join(self.directory, f"{LOCK_FILE}.stale-{uuid.uuid4().hex[:8]}")
        try:
            self.files.move(self.path, aside)
        except OSError:
            raise self._locked(self._read(self.path)) from None
        moved = self._read(aside)
        if moved != held:
            self.files.move(aside, self.path)
            raise self._locked(moved)
        self.files.delete(aside)

    def _locked(self, held: dict | None) -> CheckpointLockedError:
        if not held:
            who = "another run (its lock is being written, or unreadable)"
        else:
            who = f"pid {held.get('pid')} on host {held.get('host')} since {held.get('started')}"
        return CheckpointLockedError(
            f"checkpoint directory {self.directory} is in use by {who} (its {LOCK_FILE} file); wait for "
            f"that run to end, or remove {self.path} if it is gone"
        )


def _stale(held: dict | None) -> bool:
    """True when ``held`` is the lock of a process of this host that no longer runs."""
    return bool(held) and bool(held_by_gone_process(held))
