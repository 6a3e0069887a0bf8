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
  S3 file system with the Hadoop settings mapped (:func:`s3_options`), ``gs``, ``abfs`` and
  ``hdfs`` (libhdfs) as pyarrow knows them. A scheme the tasks cannot write is refused before
  any work, in one line saying why and what to use instead.

Object stores (:func:`~bpe_spark.file_systems.is_object_store`) cannot rename a directory: their
outputs are committed file by file, the marker last (:mod:`bpe_spark.output_guard`).

>>> s3_options({"fs.s3a.endpoint": "http://127.0.0.1:9000", "fs.s3a.access.key": "k",
...             "fs.s3a.bucket.b.secret.key": "s", "fs.s3a.path.style.access": "true"}, "b")
{'access_key': 'k', 'secret_key': 's', 'endpoint_override': '127.0.0.1:9000', 'scheme': 'http'}
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from urllib.parse import urlparse

from bpe_spark import output_guard
from bpe_spark.errors import BpeSparkError, ModelFormatError, OutputRefusedError
from bpe_spark.file_systems import LOCAL, ArrowFiles, Files, is_object_store, scheme_of
from bpe_spark.spark.guard import HadoopFiles, jvm_has_file_system

S3_SCHEMES = ("s3", "s3a", "s3n")
S3A_KEYS = ("access.key", "secret.key", "session.token", "endpoint", "endpoint.region", "path.style.access",
            "connection.ssl.enabled", "aws.credentials.provider")
_ARROW_SCHEMES = ("file", *S3_SCHEMES, "gs", "gcs", "abfs", "abfss", "hdfs", "viewfs")
_WHAT_TO_USE = "s3a://, gs://, abfs:// or a local path every node shares"


@dataclass(frozen=True)
class Store:
    """Where a URI's files are reached on the driver: ``files`` (``layer``: ``local``,
    ``hadoop`` or ``pyarrow``), the URI's ``path`` in them, and whether an output there is
    committed file by file (``in_place``: an object store)."""

    uri: str
    files: Files
    path: str
    layer: str
    in_place: bool


def driver_store(spark, uri, *, option: str = "output") -> Store:
    """The file layer of ``uri`` on the driver (see the module docstring)."""
    uri = str(uri)
    if output_guard.is_local(uri):
        return Store(uri, LOCAL, output_guard.local_path(uri), "local", False)
    scheme = scheme_of(uri)
    if jvm_has_file_system(spark, scheme):
        files = HadoopFiles(spark, uri, option=option)
        return Store(uri, files, files.qualified(uri).rstrip("/"), "hadoop", is_object_store(uri))
    if scheme not in _ARROW_SCHEMES:
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
    if scheme not in _ARROW_SCHEMES:
        raise OutputRefusedError(
            f"{option} {uri}: the encoding tasks write through pyarrow, which has no file system for {scheme}://; "
            f"use {_WHAT_TO_USE}"
        )
    return arrow_file_system(uri, hadoop_settings(spark, uri), option=option)


def arrow_file_system(uri: str, settings: Mapping[str, str], *, option: str = "output"):
    """``(pyarrow file system, path)`` of ``uri``: S3 URIs with the Hadoop ``settings`` mapped by
    :func:`s3_options`, other schemes by ``pyarrow.fs.FileSystem.from_uri``."""
    import pyarrow as pa
    import pyarrow.fs as pafs

    scheme = scheme_of(uri)
    parsed = urlparse(uri)
    try:
        if scheme in S3_SCHEMES:
            options = s3_options(settings, parsed.netloc)
            if not options:  # pyarrow's own credentials chain, the bucket's region found
                return pafs.FileSystem.from_uri("s3" + uri[len(scheme):])
            if "region" not in options and "endpoint_override" not in options:
                options["region"] = pafs.resolve_s3_region(parsed.netloc)
            return pafs.S3FileSystem(**options), f"{parsed.netloc}{parsed.path}"
        return pafs.FileSystem.from_uri(uri)
    except (OSError, pa.ArrowException, ValueError) as exc:
        reason = output_guard.reason_line(exc)
        if scheme in ("hdfs", "viewfs"):
            raise OutputRefusedError(
                f"{option} {uri}: pyarrow's {scheme}:// needs libhdfs and Hadoop's jars (ARROW_LIBHDFS_DIR, HADOOP_HOME, "
                f"CLASSPATH) on every node, and cannot load them here ({reason}); install them, or use {_WHAT_TO_USE}"
            ) from None
        raise OutputRefusedError(f"{option} {uri}: pyarrow cannot open it ({reason})") from None


def hadoop_settings(spark, uri: str) -> dict[str, str]:
    """The Hadoop settings of the session that :func:`s3_options` maps (``fs.s3a.*``, and their
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


def s3_options(settings: Mapping[str, str], bucket: str) -> dict:
    """The ``pyarrow.fs.S3FileSystem`` options of S3A's Hadoop settings for ``bucket``
    (a per-bucket ``fs.s3a.bucket.<bucket>.<key>`` wins over ``fs.s3a.<key>``): keys, session
    token, endpoint (``http://`` in it, or ``connection.ssl.enabled=false``: plain HTTP),
    ``endpoint.region``, ``path.style.access=false`` with an endpoint (virtual-host addressing),
    an anonymous credentials provider."""

    def get(key: str) -> str | None:
        value = settings.get(f"fs.s3a.bucket.{bucket}.{key}", settings.get(f"fs.s3a.{key}"))
        return value.strip() if isinstance(value, str) and value.strip() else None

    options: dict = {}
    for key, name in (("access.key", "access_key"), ("secret.key", "secret_key"), ("session.token", "session_token")):
        if get(key):
            options[name] = get(key)
    endpoint, ssl = get("endpoint"), get("connection.ssl.enabled")
    if endpoint:
        scheme, sep, rest = endpoint.partition("://")
        options["endpoint_override"] = (rest if sep else endpoint).rstrip("/")
        options["scheme"] = scheme.lower() if sep else ("http" if (ssl or "").lower() == "false" else "https")
        if (get("path.style.access") or "").lower() == "false":
            options["force_virtual_addressing"] = True
    elif (ssl or "").lower() == "false":
        options["scheme"] = "http"
    if get("endpoint.region"):
        options["region"] = get("endpoint.region")
    if "Anonymous" in (get("aws.credentials.provider") or ""):
        options["anonymous"] = True
    return options


# --- outputs and the model ------------------------------------------------------------------------
def prepare_output(spark, uri, kind: str, *, overwrite: bool, protected: Mapping[str, Iterable] | None = None,
                   option: str = "output") -> Store:
    """Before any work on the driver-side output ``uri``: its file layer, and the checks of
    :func:`bpe_spark.output_guard.prepare` (placement, a probe write, what may be replaced)."""
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
    (:func:`fetch_model`). Errors name ``uri``, never the temporary copy."""
    from bpe_spark.tokenizer import Tokenizer

    if output_guard.is_local(uri):
        return Tokenizer.load(uri, **options)
    store = driver_store(spark, uri, option="model")
    with tempfile.TemporaryDirectory(prefix="bpe-spark-model-") as scratch:
        local = fetch_model(store, scratch)
        try:
            return Tokenizer.load(local, **options)
        except BpeSparkError as exc:
            raise type(exc)(str(exc).replace(local, str(uri).rstrip("/"))) from None


def fetch_model(store: Store, scratch: str) -> str:
    """Copy the model at ``store`` into the local directory ``scratch``; the local path to load.

    A directory: its files (not its hidden ones); a bpe-spark model directory must hold its
    complete marker. A file: that file (a GPT-2 ``vocab.json`` brings the ``merges.txt`` beside it).
    """
    files, path = store.files, store.path
    name = path.rstrip("/").rpartition("/")[2] or "model"
    local = os.path.join(scratch, name)
    found = files.kind(path)
    if found is None:
        raise ModelFormatError(f"{store.uri}: no such file or directory")
    if found == "file":
        files.download(path, local)
        sibling = files.join(path.rstrip("/").rpartition("/")[0], "merges.txt")
        if name == "vocab.json" and files.kind(sibling) == "file":
            files.download(sibling, os.path.join(scratch, "merges.txt"))
        return local
    from bpe_spark.formats import MODEL_META_FILE

    entries = [entry for entry, _ in files.list_dir(path) if not entry.startswith(".")]
    if output_guard.MARKER_FILE in entries or MODEL_META_FILE in entries:
        output_guard.check_complete(path, "model", files, shown=store.uri)
    os.makedirs(local)
    for entry in entries:
        if files.kind(files.join(path, entry)) == "file":
            files.download(files.join(path, entry), os.path.join(local, entry))
    return local
