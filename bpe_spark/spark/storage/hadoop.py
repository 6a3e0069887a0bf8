"""The output rules of :mod:`bpe_spark.storage.output_guard` on Spark: Hadoop's file system (any URI
Spark writes: local, ``hdfs://``, ``viewfs://``, ``s3a://``...) as their
:class:`~bpe_spark.storage.file_systems.Files` (:class:`HadoopFiles`); an output directory that Spark's own
writers fill (:class:`SparkOutput`: the pretoken counts), checked before any work, written to a
staging sibling, marked and moved into place (on an object store: file by file, the marker
last); and the paths a DataFrame reads, which no output may touch (:func:`input_paths`).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Mapping

from bpe_spark.storage import output_guard

from bpe_spark.storage import markers
from bpe_spark.errors import OutputRefusedError
from bpe_spark.storage.file_systems import Files, is_object_store, scheme_of
from bpe_spark.storage.output_guard import staging_name


def input_paths(df, source: Mapping | None = None) -> list[str]:
    """The files ``df`` reads (``DataFrame.inputFiles``) and the ``input`` paths of ``source``."""
    paths: list[str] = []
    with contextlib.suppress(Exception):  # a DataFrame not read from files has none
        paths.extend(df.inputFiles())
    given = (source or {}).get("input") or []
    paths.extend([given] if isinstance(given, str) else given)
    return paths


class HadoopFiles(Files):
    """:class:`~bpe_spark.storage.file_systems.Files` through the driver's Hadoop ``FileSystem`` of ``uri``
    (its Java errors raised as :class:`OSError`)."""

    def __init__(self, spark, uri: str, *, option: str = "output"):
        jvm, conf = spark.sparkContext._jvm, spark.sparkContext._jsc.hadoopConfiguration()
        self._Path = jvm.org.apache.hadoop.fs.Path
        self._File = jvm.java.io.File
        if scheme_of(uri) and not jvm_has_file_system(spark, scheme_of(uri)):
            raise OutputRefusedError(
                f"{option} {uri}: Spark's JVM has no Hadoop file system for {scheme_of(uri)}:// (for S3, put "
                "hadoop-aws on the classpath, e.g. --packages org.apache.hadoop:hadoop-aws, and use s3a://)"
            )
        with java_errors():
            self._fs = self._Path(str(uri)).getFileSystem(conf)

    def qualified(self, path: str) -> str:
        """``path`` as a full URI (``file:/abs/path``, ``hdfs://nn/user/x/path``)."""
        return self._fs.makeQualified(self._Path(path)).toString()

    def kind(self, path: str) -> str | None:
        hpath = self._Path(path)
        with java_errors():
            if not self._fs.exists(hpath):
                return None
            return "dir" if self._fs.getFileStatus(hpath).isDirectory() else "file"

    def read_bytes(self, path: str, limit: int) -> bytes | None:
        if self.kind(path) != "file":
            return None
        with java_errors():
            stream = self._fs.open(self._Path(path))
            try:
                return bytes(stream.readNBytes(min(limit, 2**31 - 9)))  # a Java byte[] comes back as bytes
            finally:
                stream.close()

    def write_bytes(self, path: str, data: bytes) -> None:
        with java_errors():
            stream = self._fs.create(self._Path(path), True)
            try:
                stream.write(bytearray(data))
            finally:
                stream.close()

    def list_dir(self, path: str) -> list[tuple[str, float]]:
        hpath = self._Path(path)
        with java_errors():
            if not self._fs.exists(hpath):
                return []
            return [(status.getPath().getName(), status.getModificationTime() / 1000)
                    for status in self._fs.listStatus(hpath)]

    def delete(self, path: str) -> None:
        with java_errors():
            self._fs.delete(self._Path(path), True)

    def join(self, parent: str, name: str) -> str:
        return f"{parent.rstrip('/')}/{name}"

    def move(self, source: str, target: str) -> None:
        with java_errors():
            moved = self._fs.rename(self._Path(source), self._Path(target))
        if not moved:
            raise OSError(f"cannot move {source} to {target}")

    def upload(self, local: str, path: str) -> None:
        # the driver's JVM reads the local file itself: no bytes through py4j
        with java_errors():
            self._fs.copyFromLocalFile(False, True, self._Path(self._File(local).toURI()), self._Path(path))

    def download(self, path: str, local: str) -> None:
        with java_errors():  # raw local file system: no .crc file beside the copy
            self._fs.copyToLocalFile(False, self._Path(path), self._Path(self._File(local).toURI()), True)


@contextlib.contextmanager
def java_errors():
    """A Java exception from the JVM (through py4j) as an :class:`OSError` with its message."""
    from py4j.protocol import Py4JJavaError

    try:
        yield
    except Py4JJavaError as exc:
        raise OSError(str(exc.java_exception.toString())) from None


def jvm_has_file_system(spark, scheme: str) -> bool:
    """Whether the driver's JVM has a Hadoop ``FileSystem`` for ``scheme`` (its class loads);
    False without a JVM (a Spark Connect session)."""
    from py4j.protocol import Py4JJavaError

    try:
        jvm, conf = spark.sparkContext._jvm, spark.sparkContext._jsc.hadoopConfiguration()
    except AttributeError:  # Spark Connect: no sparkContext
        return False
    try:
        jvm.org.apache.hadoop.fs.FileSystem.getFileSystemClass(scheme, conf)
    except Py4JJavaError:  # UnsupportedFileSystemException, or a configured class that is not there
        return False
    return True


class SparkOutput:
    """An output directory ``uri`` of ``kind`` that a Spark writer fills: :meth:`prepare` before
    any work, write to :attr:`staging`, then :meth:`publish` (a failed run: :meth:`discard`)."""

    def __init__(self, spark, uri: str, kind: str, *, option: str = "output"):
        self.files = HadoopFiles(spark, str(uri), option=option)
        self.uri = self.files.qualified(str(uri)).rstrip("/")
        self.kind = kind
        self.in_place = is_object_store(self.uri)
        parent, _, name = self.uri.rpartition("/")
        self.staging = self.files.join(parent, staging_name(name, "staging"))

    def prepare(self, overwrite: bool, protected: Mapping[str, Iterable] | None = None) -> None:
        output_guard.prepare(self.uri, self.kind, overwrite=overwrite, protected=protected, files=self.files)

    def publish(self, overwrite: bool) -> None:
        if self.in_place:
            output_guard.publish_in_place(self.staging, self.uri, self.kind, overwrite=overwrite, files=self.files)
            return
        markers.write_marker(self.staging, self.kind, self.files)
        output_guard.publish(self.staging, self.uri, self.kind, overwrite=overwrite, files=self.files)

    def discard(self) -> None:
        self.files.delete(self.staging)
