"""Model files and exports at any URI pyarrow reaches, without Spark: a remote model's files
fetched into a local directory (:func:`fetch_model`), so the format readers never see a remote
path; and an export checked before any work (:func:`prepare_export`: placement, what an existing
target may be replaced by, a probe write), written locally, then copied up
(:meth:`ExportTarget.write`: a file once complete, on an object store one PUT, else staged and
renamed; a directory by :func:`bpe_spark.storage.output_guard.put_directory`, on an object store
its ``writing`` marker first and its complete marker last).
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import PurePosixPath

from bpe_spark.errors import BpeSparkError, ModelFormatError, OutputRefusedError
from bpe_spark.storage import output_guard
from bpe_spark.storage import markers
from bpe_spark.storage.file_systems import scheme_of
from bpe_spark.storage.remote import Store, missing, open_store, parent_uri, put_file, renamed
from bpe_spark.models.huggingface.transformers_config import FOLDER_FILES
from bpe_spark.models.load import MODEL_META_FILE, export_model, export_spec
from bpe_spark.models.tiktoken_file import sidecar_path


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
        raise ModelFormatError(f"{store.uri}: {missing(store)}")
    if found == "file":
        files.download(path, local)
        sibling = files.join(path.rstrip("/").rpartition("/")[0], "merges.txt")
        if name == "vocab.json" and files.kind(sibling) == "file":
            files.download(sibling, os.path.join(scratch, "merges.txt"))
        sidecar = str(sidecar_path(PurePosixPath(path)))  # a .tiktoken's pattern and specials
        if name.endswith(".tiktoken") and files.kind(sidecar) == "file":
            files.download(sidecar, str(sidecar_path(local)))
        return local
    entries = [entry for entry, _ in files.list_dir(path) if not entry.startswith(".")]
    if markers.MARKER_FILE in entries or MODEL_META_FILE in entries:
        marker = markers.read_marker(path, files) or {}
        kind = "export" if marker.get("kind") == "export" else "model"  # a GPT-2 export directory loads too
        markers.check_complete(path, kind, files, shown=store.uri)
    os.makedirs(local)
    for entry in entries:
        if files.kind(files.join(path, entry)) == "file":
            files.download(files.join(path, entry), os.path.join(local, entry))
    return local


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
        if not scheme_of(self.out):
            return [str(path) for path in export_model(tok, self.fmt, self.out, overwrite=self.overwrite)]
        if self.store.layer == "local":  # a file: URI
            with renamed(self.store.path, self.shown):
                written = export_model(tok, self.fmt, self.store.path, overwrite=self.overwrite)
            return [self.shown + str(path)[len(self.store.path):] for path in written]
        files, store = self.store.files, self.store
        with tempfile.TemporaryDirectory(prefix="bpe-spark-export-") as scratch:
            local = os.path.join(scratch, self.target.rpartition("/")[2])
            with renamed(scratch, parent_uri(self.shown)):
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
