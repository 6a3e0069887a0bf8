"""Files at any URI pyarrow reaches, without Spark: which file system serves a URI
(:func:`open_store`), the S3 settings a Spark session maps onto pyarrow's (:func:`s3_options`), one
complete file copied up (:func:`put_file`), and errors that name the URI the user gave, never a
local copy (:func:`renamed`). Models, exports and encode outputs at such URIs build on it:
:mod:`bpe_spark.models.remote`, :mod:`bpe_spark.encoding.remote`, :mod:`bpe_spark.datasets.remote`.

- **Which file system** (:func:`open_store`): a local path or ``file:`` URI as local files;
  ``s3://``, ``s3a://`` and ``s3n://`` as pyarrow's S3 (credentials from pyarrow's default chain,
  an endpoint from ``$AWS_ENDPOINT_URL``; a Spark session's ``fs.s3a.*`` settings map onto it
  through :func:`s3_options`), ``gs``, ``abfs`` and ``hdfs`` as pyarrow knows them. Any other
  scheme is refused in one line before any work.

>>> s3_options({"fs.s3a.endpoint": "http://127.0.0.1:9000", "fs.s3a.access.key": "k",
...             "fs.s3a.bucket.b.secret.key": "s", "fs.s3a.path.style.access": "true"}, "b")
{'access_key': 'k', 'secret_key': 's', 'endpoint_override': '127.0.0.1:9000', 'scheme': 'http'}
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from urllib.parse import urlparse

from bpe_spark.storage import output_guard
from bpe_spark.errors import BpeSparkError, OutputRefusedError
from bpe_spark.storage.file_systems import LOCAL, ArrowFiles, Files, is_object_store, scheme_of

S3_SCHEMES = ("s3", "s3a", "s3n")
ARROW_SCHEMES = ("file", *S3_SCHEMES, "gs", "gcs", "abfs", "abfss", "hdfs", "viewfs")


@dataclass(frozen=True)
class Store:
    """Where a URI's files are reached: ``files`` (``layer``: ``local``, ``hadoop`` or
    ``pyarrow``), the URI's ``path`` in them, and whether an output there is committed file by
    file (``in_place``: an object store)."""

    uri: str
    files: Files
    path: str
    layer: str
    in_place: bool


def open_store(uri, *, option: str = "output", error: type[BpeSparkError] = OutputRefusedError) -> Store:
    """The file layer of ``uri`` without Spark (see the module docstring); a scheme pyarrow has
    no file system for is an ``error`` naming ``option``."""
    uri = str(uri)
    if output_guard.is_local(uri):
        return Store(uri, LOCAL, output_guard.local_path(uri), "local", False)
    scheme = scheme_of(uri)
    if scheme not in ARROW_SCHEMES:
        raise error(
            f"{option} {uri}: no file system for {scheme}:// here (without Spark bpe-spark reads and writes through "
            "pyarrow: s3://, s3a://, gs://, abfs://, hdfs:// or a local path)"
        )
    fs, path = arrow_file_system(uri, {}, option=option, error=error)
    return Store(uri, ArrowFiles(fs), path.rstrip("/"), "pyarrow", is_object_store(uri))


def arrow_file_system(uri: str, settings: Mapping[str, str], *, option: str = "output",
                      error: type[BpeSparkError] = OutputRefusedError):
    """``(pyarrow file system, path)`` of ``uri``: S3 URIs with the Hadoop ``settings`` mapped by
    :func:`s3_options` (none: pyarrow's own credential chain and ``$AWS_ENDPOINT_URL``), other
    schemes by ``pyarrow.fs.FileSystem.from_uri``."""
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
            raise error(
                f"{option} {uri}: pyarrow's {scheme}:// needs libhdfs and Hadoop's jars (ARROW_LIBHDFS_DIR, HADOOP_HOME, "
                f"CLASSPATH) on every node, and cannot load them here ({reason}); install them, or use s3a://, gs://, "
                "abfs:// or a local path every node shares"
            ) from None
        raise error(f"{option} {uri}: pyarrow cannot open it ({reason})") from None


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



def missing(store: Store) -> str:
    """Why nothing is at ``store``: on an object store reached by pyarrow, its bucket may be missing."""
    bucket = store.path.lstrip("/").partition("/")[0]
    if store.in_place and store.layer == "pyarrow" and bucket and store.files.kind(bucket) is None:
        return f"no such bucket {bucket!r} (or no access to it); check the URI and the credentials"
    return "no such file or directory"


def parent_uri(uri: str) -> str:
    return str(uri).rstrip("/").rpartition("/")[0]


@contextlib.contextmanager
def renamed(local: str, given: str) -> Iterator[None]:
    """Re-raise a bpe-spark error that names the local path ``local`` (a temporary copy's
    directory, or a ``file:`` URI's path) with the name the user gave instead."""
    try:
        yield
    except BpeSparkError as exc:
        raise type(exc)(str(exc).replace(local, given)) from None


def put_file(local: str, target: str, file_format: str, *, overwrite: bool, files: Files, in_place: bool) -> None:
    """Copy the complete local export file ``local`` to ``target``: on an object store in one
    upload (an object appears whole or not at all), elsewhere into a staging sibling that
    :func:`bpe_spark.storage.output_guard.publish` renames into place. An existing ``target`` is checked
    again first (something may have appeared meanwhile)."""
    if in_place:
        output_guard.check_replaceable(target, "export", overwrite=overwrite, files=files, file_format=file_format)
        files.upload(local, target)
        return
    parent, _, name = target.rpartition("/")
    staged = files.join(parent or "/", output_guard.staging_name(name, "tmp"))
    try:
        files.upload(local, staged)
        output_guard.publish(staged, target, "export", overwrite=overwrite, files=files, file_format=file_format)
    except BaseException:
        with contextlib.suppress(Exception):
            files.delete(staged)
        raise


def list_tree(files: Files, path: str) -> set[str]:
    """The files under the directory ``path``, as paths relative to it (``a/b.parquet``)."""
    if isinstance(files, ArrowFiles):  # one listing request, not one per directory
        import pyarrow.fs as pafs

        infos = files.fs.get_file_info(pafs.FileSelector(path, recursive=True))
        return {info.path[len(path):].lstrip("/") for info in infos if info.type == pafs.FileType.File}
    found = set()
    for name, _ in files.list_dir(path):
        child = files.join(path, name)
        if files.kind(child) == "dir":
            found.update(f"{name}/{below}" for below in list_tree(files, child))
        else:
            found.add(name)
    return found
