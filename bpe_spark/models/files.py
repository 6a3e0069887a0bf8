"""Atomic outputs and JSON input for the format modules (they import only the errors and the
output rules of :mod:`bpe_spark.storage.output_guard`).

Every file or directory a format writes is staged beside its target (a hidden sibling named for
its owner; dead runs' siblings are removed first) and renamed into place once complete, so an
output appears whole or not at all; a directory gets its ``_BPE_SPARK`` marker last. An existing
target is an error unless ``overwrite``, and is then replaced, only after the new one is
complete, when it is an earlier output of the same kind (``output_guard.check_replaceable``).
``read_file_bytes`` reads a model file within the size limit; ``read_json_file`` turns every way
a JSON file can be unreadable into a :class:`ModelFormatError` naming the file.
"""

from __future__ import annotations

import contextlib
import json
import shutil
from collections.abc import Iterator
from pathlib import Path

from bpe_spark.storage import output_guard

from bpe_spark.storage import markers
from bpe_spark.errors import ModelFormatError, OutputExistsError
from bpe_spark.bpe.fields import check_file_size


def _sibling(target: Path, tag: str) -> Path:
    return target.with_name(output_guard.staging_name(target.name, tag))


def _start(target: Path, kind: str, overwrite: bool, file_format: str | None) -> None:
    """Before writing: the location can be written, an existing target may be replaced, and the
    staging siblings of dead runs on this target are gone."""
    output_guard.check_writable(target)
    output_guard.check_replaceable(str(target), kind, overwrite=overwrite, file_format=file_format)
    if target.parent.is_dir():
        output_guard.remove_stale(str(target.parent), target.name)


def _make_parents(directory: Path) -> list[Path]:
    """Create the missing parents of ``directory``; return those created, deepest first."""
    created = []
    for parent in [directory, *directory.parents]:
        if parent.exists():
            break
        created.append(parent)
    for parent in reversed(created):
        parent.mkdir(exist_ok=True)
    return created


def _remove_created(created: list[Path]) -> None:
    for parent in created:
        with contextlib.suppress(OSError):
            parent.rmdir()


@contextlib.contextmanager
def atomic_directory(target, *, kind: str, overwrite: bool = False, **marker) -> Iterator[Path]:
    """Yield an empty staging directory beside ``target``; on success it gets the marker of
    ``kind`` (``marker``: more fields of it) and becomes ``target``.

    An existing ``target`` is an error unless ``overwrite``; then it must be an earlier output of
    ``kind``, and is replaced only once the new one is complete. On failure the staging directory
    (and any parent this created) is removed.
    """
    target = Path(target)
    _start(target, kind, overwrite, None)
    created = _make_parents(target.parent)
    staged = _sibling(target, "tmp")
    try:
        staged.mkdir()
        yield staged
        markers.write_marker(staged, kind, **marker)
        output_guard.publish(str(staged), str(target), kind, overwrite=overwrite)
    except BaseException:
        shutil.rmtree(staged, ignore_errors=True)
        _remove_created(created)
        raise


@contextlib.contextmanager
def atomic_file(target, *, file_format: str, overwrite: bool = False) -> Iterator[Path]:
    """Yield a staging path beside ``target`` to write; on success it is renamed to ``target``.

    With ``overwrite``, an existing ``target`` is replaced only when it reads as ``file_format``
    (a single file holds no marker: ``markers.looks_like``)."""
    target = Path(target)
    if target.is_dir():
        raise OutputExistsError(f"{target} is a directory; give a file path")
    _start(target, "export", overwrite, file_format)
    created = _make_parents(target.parent)
    staged = _sibling(target, "tmp")
    try:
        yield staged
        if not staged.is_file():
            raise RuntimeError(f"nothing was written to {staged}")  # internal invariant
        output_guard.publish(str(staged), str(target), "export", overwrite=overwrite, file_format=file_format)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            staged.unlink()
        _remove_created(created)
        raise


def read_file_bytes(path) -> bytes:
    """The bytes of a model file of at most ``fields.MAX_FILE_BYTES``; a missing file is a
    ModelFormatError naming it."""
    check_file_size(path)
    try:
        return Path(path).read_bytes()
    except FileNotFoundError:
        raise ModelFormatError(f"{path}: no such file") from None


def read_json_file(path: Path, *, missing: str = "no such file"):
    """Parse a JSON file of at most ``fields.MAX_FILE_BYTES``; any failure is a ModelFormatError
    naming the file (and line, column)."""
    check_file_size(path)
    try:
        with open(path, encoding="utf-8") as fh:
            return json.load(fh)
    except RecursionError:  # json's parser recurses once per nested list or object
        raise ModelFormatError(f"{path}: JSON nested too deeply to be a model file") from None
    except FileNotFoundError:
        raise ModelFormatError(f"{path}: {missing}") from None
    except json.JSONDecodeError as exc:
        raise ModelFormatError(
            f"{path}: line {exc.lineno}, column {exc.colno}: invalid JSON ({exc.msg})"
        ) from None
    except UnicodeDecodeError as exc:
        raise ModelFormatError(f"{path}: not UTF-8 ({exc})") from None
