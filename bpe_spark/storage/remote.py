"""Models, exports and encode outputs at any URI pyarrow reaches, without Spark: what ``bpe-spark
export``, ``decode`` and ``inspect`` use for ``--model``, ``--out`` and ``--input``, and the
pyarrow part of :mod:`bpe_spark.spark.storage.uris` (which adds Hadoop's file systems on the driver).

- **Which file system** (:func:`open_store`): a local path or ``file:`` URI as local files;
  ``s3://``, ``s3a://`` and ``s3n://`` as pyarrow's S3 (credentials from pyarrow's default chain,
  an endpoint from ``$AWS_ENDPOINT_URL``; a Spark session's ``fs.s3a.*`` settings map onto it
  through :func:`s3_options`), ``gs``, ``abfs`` and ``hdfs`` as pyarrow knows them. Any other
  scheme is refused in one line before any work.
- **Reading a model** (:func:`load_model`): the core formats never see a remote path: a remote
  model's files are fetched into a local temporary directory (:func:`fetch_model`), loaded there,
  and errors name the URI, never the copy.
- **Writing an export** (:func:`prepare_export`, then :meth:`ExportTarget.write`): checked before any
  work (placement, what an existing target may be replaced by, a probe write), written locally,
  then copied up: a file once complete (on an object store one PUT, else staged and renamed), a
  directory by :func:`bpe_spark.storage.output_guard.put_directory` (on an object store its ``writing``
  marker first and its complete marker last).
- **Reading an encode output** (:func:`encoded_documents`): part files and shards fetched one at
  a time, so ``decode --limit`` reads only what it prints.

>>> s3_options({"fs.s3a.endpoint": "http://127.0.0.1:9000", "fs.s3a.access.key": "k",
...             "fs.s3a.bucket.b.secret.key": "s", "fs.s3a.path.style.access": "true"}, "b")
{'access_key': 'k', 'secret_key': 's', 'endpoint_override': '127.0.0.1:9000', 'scheme': 'http'}
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import PurePosixPath
from urllib.parse import urlparse

from bpe_spark.storage import output_guard
from bpe_spark.errors import BpeSparkError, InputError, ModelFormatError, OutputRefusedError
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


# --- models ---------------------------------------------------------------------------------------
def load_model(uri, *, option: str = "--model", **options):
    """The tokenizer at ``uri`` (any format ``Tokenizer.load`` reads; ``options`` go to it): a
    local path directly; elsewhere through :func:`open_store` and :func:`load_from_store`."""
    from bpe_spark.encoding.tokenizer import Tokenizer

    if not scheme_of(uri):
        return Tokenizer.load(uri, **options)
    if output_guard.is_local(uri):  # a file: URI
        with _renamed(output_guard.local_path(uri), str(uri).rstrip("/")):
            return Tokenizer.load(output_guard.local_path(uri), **options)
    return load_from_store(open_store(uri, option=option, error=InputError), **options)


def load_from_store(store: Store, **options):
    """The tokenizer at the remote ``store``: its files fetched into a local temporary directory
    (:func:`fetch_model`) and loaded there; errors, and the paths of an imported file in
    ``metadata["source"]``, name the URI, never the temporary copy."""
    from bpe_spark.encoding.tokenizer import Tokenizer

    with tempfile.TemporaryDirectory(prefix="bpe-spark-model-") as scratch:
        try:
            local = fetch_model(store, scratch)
        except BpeSparkError:  # OutputExistsError is an OSError too
            raise
        except OSError as exc:  # pyarrow's, or Hadoop's through HadoopFiles
            raise InputError(f"{store.uri}: cannot read it ({output_guard.reason_line(exc)})") from None
        with _renamed(scratch, _parent(store.uri)):
            tok = Tokenizer.load(local, **options)
    source = tok.metadata.get("source")
    if isinstance(source, dict):  # an imported file's paths, as the remote names
        parent = _parent(store.uri)
        tok.metadata["source"] = {key: value.replace(scratch, parent) if isinstance(value, str) else value
                                  for key, value in source.items()}
    return tok


def fetch_model(store: Store, scratch: str) -> str:
    """Copy the model at ``store`` into the local directory ``scratch``; the local path to load.

    A directory: its files (not its hidden ones); a bpe-spark model or export directory with a
    marker must hold its complete marker. A file: that file (a GPT-2 ``vocab.json`` brings the
    ``merges.txt`` beside it).
    """
    files, path = store.files, store.path
    name = path.rstrip("/").rpartition("/")[2] or "model"
    local = os.path.join(scratch, name)
    found = files.kind(path)
    if found is None:
        raise ModelFormatError(f"{store.uri}: {_missing(store)}")
    if found == "file":
        files.download(path, local)
        sibling = files.join(path.rstrip("/").rpartition("/")[0], "merges.txt")
        if name == "vocab.json" and files.kind(sibling) == "file":
            files.download(sibling, os.path.join(scratch, "merges.txt"))
        from bpe_spark.models.tiktoken_file import sidecar_path

        sidecar = str(sidecar_path(PurePosixPath(path)))  # a .tiktoken's pattern and specials
        if name.endswith(".tiktoken") and files.kind(sidecar) == "file":
            files.download(sidecar, str(sidecar_path(local)))
        return local
    from bpe_spark.models.load import MODEL_META_FILE

    entries = [entry for entry, _ in files.list_dir(path) if not entry.startswith(".")]
    if output_guard.MARKER_FILE in entries or MODEL_META_FILE in entries:
        marker = output_guard.read_marker(path, files) or {}
        kind = "export" if marker.get("kind") == "export" else "model"  # a GPT-2 export directory loads too
        output_guard.check_complete(path, kind, files, shown=store.uri)
    os.makedirs(local)
    for entry in entries:
        if files.kind(files.join(path, entry)) == "file":
            files.download(files.join(path, entry), os.path.join(local, entry))
    return local


def _missing(store: Store) -> str:
    """Why nothing is at ``store``: on an object store reached by pyarrow, its bucket may be missing."""
    bucket = store.path.lstrip("/").partition("/")[0]
    if store.in_place and store.layer == "pyarrow" and bucket and store.files.kind(bucket) is None:
        return f"no such bucket {bucket!r} (or no access to it); check the URI and the credentials"
    return "no such file or directory"


def _parent(uri: str) -> str:
    return str(uri).rstrip("/").rpartition("/")[0]


@contextlib.contextmanager
def _renamed(local: str, given: str) -> Iterator[None]:
    """Re-raise a bpe-spark error that names the local path ``local`` (a temporary copy's
    directory, or a ``file:`` URI's path) with the name the user gave instead."""
    try:
        yield
    except BpeSparkError as exc:
        raise type(exc)(str(exc).replace(local, given)) from None


# --- exports --------------------------------------------------------------------------------------
@dataclass(frozen=True)
class ExportTarget:
    """An export destination checked by :func:`prepare_export`: ``fmt`` to ``out`` (as given),
    reached through ``store``; ``target``: the path in ``store.files`` the export becomes (a
    directory export: the directory; a file export: the file, ``files[0]`` inside ``out`` where
    ``out`` is a directory) and ``shown``, its URI."""

    out: str
    fmt: str
    store: Store
    target: str
    shown: str
    overwrite: bool

    def write(self, tok) -> list[str]:
        """Write the export of ``tok``; the paths (URIs) of the files written."""
        from bpe_spark.models.load import export_model, export_spec
        from bpe_spark.models.huggingface.transformers_config import FOLDER_FILES

        if not scheme_of(self.out):
            return [str(path) for path in export_model(tok, self.fmt, self.out, overwrite=self.overwrite)]
        if self.store.layer == "local":  # a file: URI
            with _renamed(self.store.path, self.shown):
                written = export_model(tok, self.fmt, self.store.path, overwrite=self.overwrite)
            return [self.shown + str(path)[len(self.store.path):] for path in written]
        files, store = self.store.files, self.store
        with tempfile.TemporaryDirectory(prefix="bpe-spark-export-") as scratch:
            local = os.path.join(scratch, self.target.rpartition("/")[2])
            with _renamed(scratch, _parent(self.shown)):
                written = export_model(tok, self.fmt, local)
            try:
                if export_spec(self.fmt).directory:
                    output_guard.put_directory(local, self.target, "export", overwrite=self.overwrite, files=files,
                                               in_place=store.in_place)
                else:
                    for path in written[1:]:  # transformers' config files beside a tokenizer.json, first
                        if path.name in FOLDER_FILES:
                            put_file(str(path), f"{self.target.rpartition('/')[0]}/{path.name}", "transformers.json",
                                     overwrite=self.overwrite, files=files, in_place=store.in_place)
                    put_file(local, self.target, self.fmt, overwrite=self.overwrite, files=files,
                             in_place=store.in_place)
                    sidecar = export_spec(self.fmt).sidecar  # a .tiktoken's pattern and specials
                    if sidecar is not None:
                        put_file(str(sidecar(PurePosixPath(local))), str(sidecar(PurePosixPath(self.target))),
                                 f"{self.fmt}.json", overwrite=self.overwrite, files=files, in_place=store.in_place)
            except BpeSparkError:  # OutputExistsError is an OSError too
                raise
            except OSError as exc:  # the store failed midway: what was written is gone (put_directory, put_file)
                raise OutputRefusedError(f"{self.shown}: cannot write it ({output_guard.reason_line(exc)})") from None
            return [self.shown + str(path)[len(local):] if str(path).startswith(local)
                    else f"{self.shown.rpartition('/')[0]}/{path.name}" for path in written]


def prepare_export(out, fmt: str, *, overwrite: bool, protected: Mapping[str, Iterable] | None = None,
                   option: str = "--out") -> ExportTarget:
    """Everything about the export destination ``out`` that can be known before any work: its
    file system, placement (not the model), that it can be written (a probe file on a remote
    store), and what an existing output there may be replaced by (``overwrite``)."""
    from bpe_spark.models.load import export_spec

    export_spec(fmt)  # an unknown format: before anything else
    out = str(out)
    store = open_store(out, option=option)
    if store.layer == "local":
        output_guard.check_placement(out, protected or {}, option=option)  # the rest: export_model's atomic write
        output_guard.check_writable(out, option=option)
        return ExportTarget(out, fmt, store, store.path, out.rstrip("/") if scheme_of(out) else out, overwrite)
    try:
        return _prepare_remote_export(store, fmt, overwrite=overwrite, protected=protected or {}, option=option)
    except BpeSparkError:  # OutputExistsError is an OSError too
        raise
    except OSError as exc:  # listing or reading what is there failed (permissions, the network)
        raise OutputRefusedError(f"{option} {out}: cannot reach it ({output_guard.reason_line(exc)})") from None


def _prepare_remote_export(store: Store, fmt: str, *, overwrite: bool, protected: Mapping[str, Iterable],
                           option: str) -> ExportTarget:
    from bpe_spark.models.load import export_spec

    out, files, path = store.uri, store.files, store.path
    if export_spec(fmt).directory:
        output_guard.prepare(out, "export", overwrite=overwrite, protected=protected, files=files, path=path,
                             option=option)
        return ExportTarget(out, fmt, store, path, out.rstrip("/"), overwrite)
    output_guard.check_placement(out, protected, option=option)
    target = str(export_spec(fmt).file_at(PurePosixPath(path), is_dir=files.kind(path) == "dir"))
    shown = out.rstrip("/") + target[len(path):]
    parent, _, name = target.rpartition("/")
    output_guard.check_replaceable(target, "export", overwrite=overwrite, files=files, file_format=fmt,
                                   option=option, shown=shown)
    output_guard.check_writable_in(parent or "/", files, option=option, shown=shown)
    output_guard.remove_stale(parent or "/", name, files)
    return ExportTarget(out, fmt, store, target, shown, overwrite)


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


# --- encode outputs -------------------------------------------------------------------------------
def encoded_documents(uri, *, limit: int | None = None, option: str = "--input") -> Iterator[list[int]]:
    """The documents of the encode output at ``uri`` (what
    :func:`bpe_spark.datasets.megatron.iter_encoded_documents` reads locally), in document order. A remote
    ``uri`` is checked here, before any work (its scheme, that something is there); its manifest
    and marker are read first, then its Parquet part files or binary shards fetched one at a time
    into a temporary directory (only as many as ``limit`` documents need)."""
    from bpe_spark.datasets import megatron as shards

    if not scheme_of(uri):
        from bpe_spark.datasets import datatrove as datatrove_shards

        if datatrove_shards.is_datatrove_output(uri):  # local only: a remote one is not fetched
            return datatrove_shards.iter_documents(uri, limit=limit)
        return shards.iter_encoded_documents(uri, limit=limit)
    if output_guard.is_local(uri):  # a file: URI
        return _local_documents(output_guard.local_path(uri), str(uri).rstrip("/"), limit)
    store = open_store(uri, option=option, error=InputError)
    try:
        found = store.files.kind(store.path)
    except OSError as exc:
        raise InputError(f"{option} {uri}: cannot read it ({output_guard.reason_line(exc)})") from None
    if found is None:
        raise InputError(f"{option} {uri}: {_missing(store)}")
    return _fetched_documents(store, found, limit)


def _local_documents(path: str, given: str, limit: int | None) -> Iterator[list[int]]:
    from bpe_spark.datasets import megatron as shards

    with _renamed(path, given):
        yield from shards.iter_encoded_documents(path, limit=limit)


def _fetched_documents(store: Store, found: str, limit: int | None) -> Iterator[list[int]]:
    if limit is not None and limit <= 0:
        return
    with tempfile.TemporaryDirectory(prefix="bpe-spark-encoded-") as scratch:
        mirror = os.path.join(scratch, store.path.rpartition("/")[2] or "encoded")
        try:
            with _renamed(scratch, _parent(store.uri)):
                yield from _remote_documents(store, found, mirror, limit)
        except BpeSparkError:  # OutputExistsError is an OSError too
            raise
        except OSError as exc:
            raise InputError(f"{store.uri}: cannot read it ({output_guard.reason_line(exc)})") from None


def _remote_documents(store: Store, found: str, mirror: str, limit: int | None) -> Iterator[list[int]]:
    """:func:`encoded_documents` of a remote ``store`` (``found``: a ``file`` or a ``dir``), its
    files copied under ``mirror``."""
    import numpy as np

    from bpe_spark.datasets import megatron as shards

    files, path = store.files, store.path
    if found == "file":
        files.download(path, mirror)
        yield from shards.iter_encoded_documents(mirror, limit=limit)
        return
    os.makedirs(mirror)
    output_guard.check_complete(path, "encoded", files, shown=store.uri)
    listed = _list_tree(files, path)
    manifest = None
    if output_guard.MANIFEST_NAME in listed:
        for name in (output_guard.MANIFEST_NAME, output_guard.MARKER_FILE):
            if name in listed:
                files.download(files.join(path, name), os.path.join(mirror, name))
        manifest = shards.read_manifest(mirror)
    remaining = limit

    def taken(documents: Iterable) -> Iterator[list[int]]:
        nonlocal remaining
        for ids in documents:
            if remaining is not None and remaining <= 0:
                return
            yield ids.tolist() if isinstance(ids, np.ndarray) else ids
            remaining = None if remaining is None else remaining - 1

    if (manifest and manifest.get("output_format") == "bin") or any(
            name.endswith(".idx") and "/" not in name for name in listed):
        entries = manifest["shards"] if manifest else [
            {"name": name.removesuffix(".idx")} for name in sorted(listed) if name.endswith(".idx") and "/" not in name]
        for entry in entries:
            prefix = os.path.join(mirror, entry["name"])
            for suffix in (".idx", ".bin"):
                if entry["name"] + suffix in listed:
                    files.download(files.join(path, entry["name"] + suffix), prefix + suffix)
            reader = shards.ShardReader(prefix, np.dtype(manifest["dtype"]) if manifest else None)
            if manifest and len(reader) != entry["documents"]:
                raise ModelFormatError(f"{prefix}.idx: {len(reader)} documents, the manifest says {entry['documents']}")
            yield from taken(reader)
            del reader
            for suffix in (".idx", ".bin"):
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(prefix + suffix)
            if remaining is not None and remaining <= 0:
                return
        return
    parts = sorted((name for name in listed if name.endswith(".parquet")
                    and not any(part.startswith(("_", ".")) for part in name.split("/"))),
                   key=lambda name: tuple(name.split("/")))
    if not parts:
        raise ModelFormatError(f"{store.uri}: holds neither binary shards (.bin/.idx) nor Parquet files")
    for name in parts:
        local = os.path.join(mirror, *name.split("/"))
        os.makedirs(os.path.dirname(local), exist_ok=True)
        files.download(files.join(path, name), local)
        yield from taken(shards.iter_encoded_documents(local, limit=remaining))
        os.unlink(local)
        if remaining is not None and remaining <= 0:
            return


def _list_tree(files: Files, path: str) -> set[str]:
    """The files under the directory ``path``, as paths relative to it (``a/b.parquet``)."""
    if isinstance(files, ArrowFiles):  # one listing request, not one per directory
        import pyarrow.fs as pafs

        infos = files.fs.get_file_info(pafs.FileSelector(path, recursive=True))
        return {info.path[len(path):].lstrip("/") for info in infos if info.type == pafs.FileType.File}
    found = set()
    for name, _ in files.list_dir(path):
        child = files.join(path, name)
        if files.kind(child) == "dir":
            found.update(f"{name}/{below}" for below in _list_tree(files, child))
        else:
            found.add(name)
    return found
