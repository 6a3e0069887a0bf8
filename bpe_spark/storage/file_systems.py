"""The few file-system operations bpe-spark's outputs need, behind one protocol (:class:`Files`):
on local paths (:class:`Files` itself, :data:`LOCAL`) and on a pyarrow file system
(:class:`ArrowFiles`: S3, GCS, Azure, HDFS...); Spark code adds Hadoop's
(:class:`bpe_spark.spark.storage.hadoop.HadoopFiles`). Paths are strings in the file system's own form.

Besides reading, listing, writing, deleting and renaming, a :class:`Files` copies whole local
files in and out (:meth:`Files.upload`, :meth:`Files.download`): a file goes up only once it is
complete on the local disk, so on an object store (where a finished PUT is atomic per object)
it appears whole or not at all. Which store a URI is in, and whether a directory can be renamed
there, is :func:`is_object_store`'s answer.

>>> is_object_store("s3a://bucket/out"), is_object_store("hdfs://nn/out"), is_object_store("/tmp/out")
(True, False, False)
"""

from __future__ import annotations

import os
import re
import shutil
from pathlib import Path

# object stores: no directory rename (an output is committed file by file, its marker last)
OBJECT_STORE_SCHEMES = frozenset({"s3", "s3a", "s3n", "gs", "gcs", "abfs", "abfss", "wasb", "wasbs", "adl",
                                  "oss", "cos", "cosn", "obs", "r2"})
_COPY_BYTES = 8 << 20


def scheme_of(uri) -> str:
    """The URI scheme of ``uri`` in lower case ("" for a local path; a Windows drive is local).

    >>> scheme_of("S3A://b/x"), scheme_of("/data/x"), scheme_of("file:/data/x"), scheme_of("C:/x")
    ('s3a', '', 'file', '')
    """
    match = re.match(r"^([A-Za-z][A-Za-z0-9+.-]*):", str(uri))
    return match[1].lower() if match and len(match[1]) > 1 else ""


def is_object_store(uri) -> bool:
    return scheme_of(uri) in OBJECT_STORE_SCHEMES


class Files:
    """The operations on local paths (this class) or on another file system (subclasses)."""

    def kind(self, path: str) -> str | None:
        """``"file"``, ``"dir"`` or None (nothing there)."""
        try:
            return "dir" if Path(path).is_dir() and not Path(path).is_symlink() else (
                "file" if os.path.lexists(path) else None)
        except OSError:
            return None

    def read_bytes(self, path: str, limit: int) -> bytes | None:
        try:
            with open(path, "rb") as fh:
                return fh.read(limit)
        except OSError:
            return None

    def list_dir(self, path: str) -> list[tuple[str, float]]:
        """The names in directory ``path`` with their modification times."""
        try:
            return [(entry.name, entry.stat(follow_symlinks=False).st_mtime) for entry in os.scandir(path)]
        except OSError:
            return []

    def write_bytes(self, path: str, data: bytes) -> None:
        Path(path).write_bytes(data)

    def delete(self, path: str) -> None:
        if self.kind(path) == "dir":
            shutil.rmtree(path, ignore_errors=True)
        else:
            try:
                os.unlink(path)
            except FileNotFoundError:
                pass

    def join(self, parent: str, name: str) -> str:
        return os.path.join(parent, name)

    def move(self, source: str, target: str) -> None:
        """Rename ``source`` to ``target`` (a file may replace a file, atomically)."""
        if self.kind(source) == "file" and self.kind(target) != "dir":
            os.replace(source, target)
        else:
            os.rename(source, target)

    def upload(self, local: str, path: str) -> None:
        """Copy the complete local file ``local`` to ``path`` (its parents made as needed)."""
        os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
        shutil.copyfile(local, path)

    def download(self, path: str, local: str) -> None:
        """Copy the file ``path`` to the local file ``local``."""
        shutil.copyfile(path, local)


class ArrowFiles(Files):
    """:class:`Files` on a ``pyarrow.fs.FileSystem`` (local, S3, GCS, Azure, HDFS...)."""

    def __init__(self, fs):
        import pyarrow.fs as pafs  # here: the core loads pyarrow only for the outputs that need it

        self.fs = fs
        self._types = pafs.FileType
        self._selector = pafs.FileSelector
        # object stores hold no directories: a file's parents need not (and should not) be made
        self._makes_dirs = fs.type_name not in ("s3", "gcs", "abfs")

    def kind(self, path: str) -> str | None:
        info = self.fs.get_file_info(path)
        if info.type == self._types.NotFound:
            return None
        return "dir" if info.type == self._types.Directory else "file"

    def read_bytes(self, path: str, limit: int) -> bytes | None:
        try:
            with self.fs.open_input_stream(path) as fh:
                return fh.read(limit)
        except OSError:
            return None

    def list_dir(self, path: str) -> list[tuple[str, float]]:
        try:
            infos = self.fs.get_file_info(self._selector(path, allow_not_found=True))
        except OSError:
            return []
        return [(info.base_name, info.mtime.timestamp() if info.mtime else 0.0) for info in infos]

    def write_bytes(self, path: str, data: bytes) -> None:
        self._parent(path)
        with self.fs.open_output_stream(path) as fh:
            fh.write(data)

    def delete(self, path: str) -> None:
        kind = self.kind(path)
        if kind == "dir":
            self.fs.delete_dir(path)
        elif kind == "file":
            self.fs.delete_file(path)

    def join(self, parent: str, name: str) -> str:
        return f"{parent.rstrip('/')}/{name}"

    def move(self, source: str, target: str) -> None:
        self.fs.move(source, target)

    def upload(self, local: str, path: str) -> None:
        self._parent(path)
        with open(local, "rb") as source, self.fs.open_output_stream(path) as sink:
            while chunk := source.read(_COPY_BYTES):
                sink.write(chunk)

    def download(self, path: str, local: str) -> None:
        with self.fs.open_input_stream(path) as source, open(local, "wb") as sink:
            while chunk := source.read(_COPY_BYTES):
                sink.write(chunk)

    def _parent(self, path: str) -> None:
        parent = path.rstrip("/").rpartition("/")[0]
        if self._makes_dirs and parent:
            self.fs.create_dir(parent, recursive=True)


LOCAL = Files()
