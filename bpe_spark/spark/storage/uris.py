"""Which file layer reaches a URI: the one place that picks it, for the driver and for the tasks.

- **Driver** (:func:`driver_store`: the model directory, the counts, the checkpoint, reading
  ``--model``): Hadoop's ``FileSystem`` for any scheme the driver's JVM has one for (``hdfs``,
  ``viewfs``, ``s3a`` with hadoop-aws, ``abfs``, ``gs`` with their connectors); pyarrow where
  the JVM has none but pyarrow has (``s3``/``s3a`` without hadoop-aws, ``gs``, ``abfs``);
  local paths as local files. The core formats never see a remote path: a model is written into
  a local temporary directory and copied up file by file (:func:`save_model`), and a remote
  model is fetched into one before it is read (:func:`load_model`).
- **Tasks** (:func:`task_file_system`: the encoding's pieces and shards): Python tasks cannot
  call Hadoop, so they write through pyarrow: ``s3a://`` and ``s3n://`` become pyarrow's
  S3 file system with the Hadoop settings mapped (:func:`~bpe_spark.storage.remote.s3_options`), ``gs``, ``abfs`` and
  ``hdfs`` (libhdfs) as pyarrow knows them. A scheme the tasks cannot write is refused before
  any work, in one line saying why and what to use instead.

Object stores (:func:`~bpe_spark.storage.file_systems.is_object_store`) cannot rename a directory: their
outputs are committed file by file, the marker last (:mod:`bpe_spark.storage.output_guard`). The pyarrow
part (:class:`Store`, :func:`arrow_file_system`, :func:`s3_options`, fetching a model) is the
core's :mod:`bpe_spark.storage.remote`, which the commands that run without Spark use too.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterable, Mapping
from urllib.parse import urlparse

from bpe_spark.storage import output_guard
from bpe_spark.errors import OutputRefusedError
from bpe_spark.storage.file_systems import LOCAL, ArrowFiles, is_object_store, scheme_of
from bpe_spark.encoding.remote import load_from_store
from bpe_spark.storage.remote import ARROW_SCHEMES, S3_SCHEMES, Store, arrow_file_system
from bpe_spark.spark.storage.hadoop import HadoopFiles, jvm_has_file_system

S3A_KEYS = ("access.key", "secret.key", "session.token", "endpoint", "endpoint.region", "path.style.access",
            "connection.ssl.enabled", "aws.credentials.provider")
_WHAT_TO_USE = "s3a://, gs://, abfs:// or a local path every node shares"


def driver_store(spark, uri, *, option: str = "output") -> Store:
    """The file layer of ``uri`` on the driver (see the module docstring)."""
    uri = str(uri)
    if output_guard.is_local(uri):
        return Store(uri, LOCAL, output_guard.local_path(uri), "local", False)
    scheme = scheme_of(uri)
    if jvm_has_file_system(spark, scheme):
        files = HadoopFiles(spark, uri, option=option)
        return Store(uri, files, files.qualified(uri).rstrip("/"), "hadoop", is_object_store(uri))
    if scheme not in ARROW_SCHEMES:
        raise OutputRefusedError(
            f"{option} {uri}: neither Spark's JVM nor pyarrow has a file system for {scheme}:// here; add the "
            f"Hadoop connector for it to Spark's classpath, or use hdfs://, {_WHAT_TO_USE}"
        )
    fs, path = arrow_file_system(uri, hadoop_settings(spark, uri), option=option)
    return Store(uri, ArrowFiles(fs), path.rstrip("/"), "pyarrow", is_object_store(uri))


def task_file_system(spark, uri, *, option: str = "output"):
    """``(pyarrow file system, path)`` through which the Python tasks write ``uri``; a scheme they
    cannot write is refused here, before any work."""
    uri = str(uri)
    if output_guard.is_local(uri):
        import pyarrow.fs as pafs

        return pafs.LocalFileSystem(), output_guard.local_path(uri)
    scheme = scheme_of(uri)
    if scheme not in ARROW_SCHEMES:
        raise OutputRefusedError(
            f"{option} {uri}: the encoding tasks write through pyarrow, which has no file system for {scheme}://; "
            f"use {_WHAT_TO_USE}"
        )
    return arrow_file_system(uri, hadoop_settings(spark, uri), option=option)


def hadoop_settings(spark, uri: str) -> dict[str, str]:
    """The Hadoop settings of the session that :func:`bpe_spark.storage.remote.s3_options` maps (``fs.s3a.*``, and their
    per-bucket forms ``fs.s3a.bucket.<bucket>.*``): from the driver's Hadoop configuration, or
    the session's ``spark.hadoop.*`` properties without a JVM (Spark Connect)."""
    if scheme_of(uri) not in S3_SCHEMES:
        return {}
    bucket = urlparse(str(uri)).netloc
    keys = [f"fs.s3a.{key}" for key in S3A_KEYS] + [f"fs.s3a.bucket.{bucket}.{key}" for key in S3A_KEYS]
    try:
        conf = spark.sparkContext._jsc.hadoopConfiguration()
        values = {key: conf.get(key) for key in keys}
    except AttributeError:  # Spark Connect: no sparkContext
        values = {key: spark.conf.get(f"spark.hadoop.{key}", None) for key in keys}
    return {key: str(value) for key, value in values.items() if value is not None}


# --- outputs and the model ------------------------------------------------------------------------
def prepare_output(spark, uri, kind: str, *, overwrite: bool, protected: Mapping[str, Iterable] | None = None,
                   option: str = "output") -> Store:
    """Before any work on the driver-side output ``uri``: its file layer, and the checks of
    :func:`bpe_spark.storage.output_guard.prepare` (placement, a probe write, what may be replaced)."""
    store = driver_store(spark, uri, option=option)
    output_guard.prepare(str(uri), kind, overwrite=overwrite, protected=protected, files=store.files,
                         path=store.path, option=option)
    return store


def save_model(spark, tok, uri, *, overwrite: bool = False, exports: Iterable[str] = (),
               option: str = "output") -> None:
    """Write ``tok``'s model directory to ``uri`` (any URI :func:`driver_store` reaches): a local
    path as ``tok.save`` does; elsewhere written into a local temporary directory first, then
    copied up file by file (an object store: in place, the marker last; else staged and renamed)."""
    store = driver_store(spark, uri, option=option)
    if store.layer == "local":
        tok.save(store.path, overwrite=overwrite, exports=exports)
        return
    with tempfile.TemporaryDirectory(prefix="bpe-spark-model-") as scratch:
        local = os.path.join(scratch, "model")
        tok.save(local, exports=exports)
        output_guard.put_directory(local, store.path, "model", overwrite=overwrite, files=store.files,
                                   in_place=store.in_place)


def load_model(spark, uri, **options):
    """The tokenizer at ``uri`` (any format ``Tokenizer.load`` reads; ``options`` go to it): a
    local path directly; elsewhere its files fetched into a local temporary directory first
    (:func:`bpe_spark.encoding.remote.load_from_store`). Errors name ``uri``, never the temporary copy."""
    from bpe_spark.encoding.tokenizer import Tokenizer

    if output_guard.is_local(uri):
        return Tokenizer.load(uri, **options)
    return load_from_store(driver_store(spark, uri, option="model"), **options)
