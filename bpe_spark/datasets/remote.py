"""Encode outputs at any URI pyarrow reaches, without Spark (``bpe-spark decode --input``): the
documents in document order; a remote output's manifest and marker read first, then its Parquet
part files or binary shards fetched one at a time, so ``decode --limit`` reads only what it prints.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Callable, Iterable, Iterator
from typing import Any

import numpy as np

from bpe_spark.datasets import datatrove
from bpe_spark.datasets import megatron
from bpe_spark.errors import BpeSparkError, InputError, ModelFormatError
from bpe_spark.storage import output_guard
from bpe_spark.storage import markers
from bpe_spark.storage.file_systems import scheme_of
from bpe_spark.storage.remote import Store, list_tree, missing, open_store, parent_uri, renamed


def encoded_documents(uri, *, limit: int | None = None, option: str = "--input",
                      model: Callable[[], Any] | None = None, model_shown: str = "the model") -> Iterator[list[int]]:
    """The documents of the encode output at ``uri`` (what
    :func:`bpe_spark.datasets.megatron.iter_encoded_documents` reads locally), in document order. A remote
    ``uri`` is checked here, before any work (its scheme, that something is there); its manifest
    and marker are read first, then its Parquet part files or binary shards fetched one at a time
    into a temporary directory (only as many as ``limit`` documents need).

    ``model``: gives the model the ids are for (``model_shown`` names it), called once the first
    document is asked for (so the caller may load the model after this checked ``uri``): an output
    whose manifest records another model is refused
    (:func:`bpe_spark.datasets.megatron.check_model`) before any document is read; a local part
    file is checked by its directory's manifest."""
    if not scheme_of(uri) or output_guard.is_local(uri):
        return _local_documents(output_guard.local_path(uri) if scheme_of(uri) else str(uri),
                                str(uri).rstrip("/"), limit, (model, model_shown))
    store = open_store(uri, option=option, error=InputError)
    try:
        found = store.files.kind(store.path)
    except OSError as exc:
        raise InputError(f"{option} {uri}: cannot read it ({output_guard.reason_line(exc)})") from None
    if found is None:
        raise InputError(f"{option} {uri}: {missing(store)}")
    return _fetched_documents(store, found, limit, (model, model_shown))


def _local_manifest(path: str) -> dict | None:
    """The manifest of the local encode output at ``path``, or of the output a part file at
    ``path`` belongs to (its directory's); None when there is none."""
    for directory in (path, os.path.dirname(os.path.abspath(path))):
        if os.path.isfile(os.path.join(directory, markers.MANIFEST_NAME)):
            return megatron.read_manifest(directory)
    return None


def _local_documents(path: str, given: str, limit: int | None, model: tuple[Callable | None, str]) -> Iterator[list[int]]:
    if model[0] is not None:
        megatron.check_model(_local_manifest(path), model[0](), given, model[1])
    if datatrove.is_datatrove_output(path):  # local only: a remote one is not fetched
        yield from datatrove.iter_documents(path, limit=limit)
        return
    with renamed(path, given):
        yield from megatron.iter_encoded_documents(path, limit=limit)


def _fetched_documents(store: Store, found: str, limit: int | None, model: tuple[Callable | None, str]) -> Iterator[list[int]]:
    if limit is not None and limit <= 0:
        return
    with tempfile.TemporaryDirectory(prefix="bpe-spark-encoded-") as scratch:
        mirror = os.path.join(scratch, store.path.rpartition("/")[2] or "encoded")
        try:
            with renamed(scratch, parent_uri(store.uri)):
                yield from _remote_documents(store, found, mirror, limit, model)
        except BpeSparkError:  # OutputExistsError is an OSError too
            raise
        except OSError as exc:
            raise InputError(f"{store.uri}: cannot read it ({output_guard.reason_line(exc)})") from None


def _remote_documents(store: Store, found: str, mirror: str, limit: int | None,
                      model: tuple[Callable | None, str]) -> Iterator[list[int]]:
    """:func:`encoded_documents` of a remote ``store`` (``found``: a ``file`` or a ``dir``), its
    files copied under ``mirror``; ``model``: the model to check and its name."""
    files, path = store.files, store.path
    if found == "file":
        files.download(path, mirror)
        yield from megatron.iter_encoded_documents(mirror, limit=limit)
        return
    os.makedirs(mirror)
    markers.check_complete(path, "encoded", files, shown=store.uri)
    listed = list_tree(files, path)
    manifest = None
    if markers.MANIFEST_NAME in listed:
        for name in (markers.MANIFEST_NAME, markers.MARKER_FILE):
            if name in listed:
                files.download(files.join(path, name), os.path.join(mirror, name))
        manifest = megatron.read_manifest(mirror)
        if model[0] is not None:
            megatron.check_model(manifest, model[0](), store.uri, model[1])
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
            reader = megatron.ShardReader(prefix, np.dtype(manifest["dtype"]) if manifest else None)
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
        yield from taken(megatron.iter_encoded_documents(local, limit=remaining))
        os.unlink(local)
        if remaining is not None and remaining <= 0:
            return
