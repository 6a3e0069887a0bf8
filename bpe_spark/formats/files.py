"""Atomic outputs and JSON input for the format modules (a leaf: it imports only the errors).

Every file or directory a format writes is staged beside its target and renamed into place once
complete, so an output appears whole or not at all; an existing target is an error unless
``overwrite``, and is then replaced only after the new one is complete. ``read_json_file`` turns
every way a JSON file can be unreadable into a :class:`ModelFormatError` naming the file.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import uuid
from collections.abc import Iterator
from pathlib import Path

from bpe_spark.errors import ModelFormatError, OutputExistsError


def _sibling(target: Path, tag: str) -> Path:
    return target.with_name(f".{target.name}.{tag}-{os.getpid()}-{uuid.uuid4().hex[:8]}")


def _refuse_existing(target: Path, overwrite: bool) -> None:
    if not overwrite and (target.exists() or target.is_symlink()):
        raise OutputExistsError(
            f"{target} already exists; pass overwrite=True (--overwrite) to replace it"
        )


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


def _replace(staged: Path, target: Path, overwrite: bool) -> None:
    """Move the finished ``staged`` output to ``target``; the old one goes only after that."""
    _refuse_existing(target, overwrite)  # subtle: again, something may have appeared meanwhile
    if not (target.exists() or target.is_symlink()):
        staged.rename(target)
        return
    if staged.is_file() and not target.is_dir():
        os.replace(staged, target)
        return
    retired = _sibling(target, "old")
    target.rename(retired)
    try:
        staged.rename(target)
    except BaseException:
        retired.rename(target)
        raise
    if retired.is_dir() and not retired.is_symlink():
        shutil.rmtree(retired, ignore_errors=True)
    else:
        retired.unlink()


@contextlib.contextmanager
def atomic_directory(target, *, overwrite: bool = False) -> Iterator[Path]:
    """Yield an empty staging directory beside ``target``; on success it becomes ``target``.

    An existing ``target`` is an error unless ``overwrite``; then it is replaced only once the new
    one is complete. On failure the staging directory (and any parent this created) is removed.
    """
    target = Path(target)
    _refuse_existing(target, overwrite)
    created = _make_parents(target.parent)
    staged = _sibling(target, "tmp")
    try:
        staged.mkdir()
        yield staged
        _replace(staged, target, overwrite)
    except BaseException:
        shutil.rmtree(staged, ignore_errors=True)
        _remove_created(created)
        raise


@contextlib.contextmanager
def atomic_file(target, *, overwrite: bool = False) -> Iterator[Path]:
    """Yield a staging path beside ``target`` to write; on success it is renamed to ``target``."""
    target = Path(target)
    _refuse_existing(target, overwrite)
    if target.is_dir():
        raise OutputExistsError(f"{target} is a directory; give a file path")
    created = _make_parents(target.parent)
    staged = _sibling(target, "tmp")
    try:
        yield staged
        if not staged.is_file():
            raise RuntimeError(f"nothing was written to {staged}")  # internal invariant
        _replace(staged, target, overwrite)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            staged.unlink()
        _remove_created(created)
        raise


def read_json_file(path: Path, *, missing: str = "no such file"):
    """Parse a JSON file; any failure is a ModelFormatError naming the file (and line, column)."""
    try:
        with open(path, encoding="utf-8") as fh:
            return json.load(fh)
    except FileNotFoundError:
        raise ModelFormatError(f"{path}: {missing}") from None
    except json.JSONDecodeError as exc:
        raise ModelFormatError(
            f"{path}: line {exc.lineno}, column {exc.colno}: invalid JSON ({exc.msg})"
        ) from None
    except UnicodeDecodeError as exc:
        raise ModelFormatError(f"{path}: not UTF-8 ({exc})") from None
