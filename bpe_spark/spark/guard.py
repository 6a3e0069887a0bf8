"""The output rules of :mod:`bpe_spark.output_guard` on Spark: Hadoop's file system (any URI
Spark writes: local, ``hdfs://``, ``s3a://``...) as their :class:`~bpe_spark.output_guard.Files`
(:class:`HadoopFiles`); an output directory that Spark's own writers fill (:class:`SparkOutput`:
the pretoken counts), checked before any work, written to a staging sibling, marked and moved
into place; and the paths a DataFrame reads, which no output may touch (:func:`input_paths`).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Mapping

from bpe_spark import output_guard
from bpe_spark.output_guard import Files, staging_name


def input_paths(df, source: Mapping | None = None) -> list[str]:
    """The files ``df`` reads (``DataFrame.inputFiles``) and the ``input`` paths of ``source``."""
    paths: list[str] = []
    with contextlib.suppress(Exception):  # a DataFrame not read from files has none
        paths.extend(df.inputFiles())
    given = (source or {}).get("input") or []
    paths.extend([given] if isinstance(given, str) else given)
    return paths


class HadoopFiles(Files):
    """:class:`~bpe_spark.output_guard.Files` through the driver's Hadoop ``FileSystem`` of ``uri``."""

    def __init__(self, spark, uri: str):
        jvm = spark.sparkContext._jvm
        self._Path = jvm.org.apache.hadoop.fs.Path
        self._fs = self._Path(str(uri)).getFileSystem(spark.sparkContext._jsc.hadoopConfiguration())

    def qualified(self, path: str) -> str:
        """``path`` as a full URI (``file:/abs/path``, ``hdfs://nn/user/x/path``)."""
        return self._fs.makeQualified(self._Path(path)).toString()

    def kind(self, path: str) -> str | None:
        hpath = self._Path(path)
        if not self._fs.exists(hpath):
            return None
        return "dir" if self._fs.getFileStatus(hpath).isDirectory() else "file"

    def read_bytes(self, path: str, limit: int) -> bytes | None:
        if self.kind(path) != "file":
            return None
        stream = self._fs.open(self._Path(path))
        try:
            return bytes(stream.readNBytes(min(limit, 2**31 - 9)))  # a Java byte[] comes back as bytes
        finally:
            stream.close()

    def write_bytes(self, path: str, data: bytes) -> None:
        stream = self._fs.create(self._Path(path), True)
        try:
            stream.write(bytearray(data))
        finally:
            stream.close()

    def list_dir(self, path: str) -> list[tuple[str, float]]:
        hpath = self._Path(path)
        if not self._fs.exists(hpath):
            return []
        return [(status.getPath().getName(), status.getModificationTime() / 1000)
                for status in self._fs.listStatus(hpath)]

    def delete(self, path: str) -> None:
        self._fs.delete(self._Path(path), True)

    def join(self, parent: str, name: str) -> str:
        return f"{parent.rstrip('/')}/{name}"

    def move(self, source: str, target: str) -> None:
        if not self._fs.rename(self._Path(source), self._Path(target)):
            raise OSError(f"cannot move {source} to {target}")


class SparkOutput:
    """An output directory ``uri`` of ``kind`` that a Spark writer fills: :meth:`prepare` before
    any work, write to :attr:`staging`, then :meth:`publish` (a failed run: :meth:`discard`)."""

    def __init__(self, spark, uri: str, kind: str):
        self.files = HadoopFiles(spark, str(uri))
        self.uri = self.files.qualified(str(uri)).rstrip("/")
        self.kind = kind
        parent, _, name = self.uri.rpartition("/")
        self.staging = self.files.join(parent, staging_name(name, "staging"))

    def prepare(self, overwrite: bool, protected: Mapping[str, Iterable] | None = None) -> None:
        output_guard.prepare(self.uri, self.kind, overwrite=overwrite, protected=protected, files=self.files)

    def publish(self, overwrite: bool) -> None:
        output_guard.write_marker(self.staging, self.kind, self.files)
        output_guard.publish(self.staging, self.uri, self.kind, overwrite=overwrite, files=self.files)

    def discard(self) -> None:
        self.files.delete(self.staging)
