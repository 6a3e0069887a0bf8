"""The one walk of the local input paths: which files a run reads, for the command line's checks
before Spark starts and for ``read_documents``, which hands Spark (and the Python tasks) exactly
this list, so that planning and reading never disagree.

What a local ``--input`` names (a path, a ``file:`` URI, a glob):

- a path that exists is that path, never a glob: ``dir/a?b.txt.gz`` or ``n[1].txt`` name one file
  even though ``?`` and ``[`` are glob characters; a path that does not exist is a glob when it
  holds ``*``, ``?`` or ``[`` (its matches in name order), else missing;
- a file is itself (a FIFO, a socket or a device is refused in one line: bpe-spark reads regular
  files); a directory is its files at any depth, without the names Spark hides (``.`` and ``_``
  names, see :func:`hidden`), in name order;
- symbolic links are followed once: a link to a directory already walked (a loop such as
  ``ln -s . loop``, or a second way into a walked directory) and a link to a file already listed
  are skipped and counted, and so are broken links and FIFOs, sockets and devices inside a
  directory: :attr:`InputPlan.notices` says so in one line each.

Other URIs (``hdfs://``, ``s3a://``) and Hadoop brace globs (``{a,b}``) are not walked here
(:func:`plan_inputs` gives None): Spark's reader lists them as before.
"""

from __future__ import annotations

import glob
import os
import stat
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass
from urllib.parse import unquote, urlparse

from bpe_spark.errors import InputError

GLOB_CHARS = "*?["


class InputNotFoundError(InputError, FileNotFoundError):
    """An input path (or glob) matches no file."""


@dataclass(frozen=True)
class InputPlan:
    """The files a run reads (absolute local paths, each given path's files in name order, no
    file twice) and what the walk skipped."""

    files: tuple[str, ...]
    links: tuple[str, ...] = ()  # links into a directory already walked (loops) or to a file already listed
    broken: tuple[str, ...] = ()  # links to nothing
    special: tuple[str, ...] = ()  # FIFOs, sockets, devices inside a directory

    @property
    def notices(self) -> list[str]:
        """One line for each kind of entry skipped (empty: nothing was)."""
        lines = []
        for found, what in ((self.links, "symbolic links to a directory already walked (a loop) or to a file "
                                         "already listed, skipped (each file is read once)"),
                            (self.broken, "broken symbolic links skipped"),
                            (self.special, "FIFOs, sockets or devices skipped (only regular files are read)")):
            if found:
                lines.append(f"input: {len(found):,} {what}: {_shown(found)}")
        return lines


def hidden(name: str) -> bool:
    """Whether Spark's file listing hides ``name``: a ``.`` name, a ``_`` name that is no
    partition (``_x=1``), a file being copied (``._COPYING_``).

    >>> [hidden(n) for n in (".git", "_SUCCESS", "_x=1", "a.txt", "a.txt._COPYING_")]
    [True, True, False, False, True]
    """
    return name.startswith(".") or (name.startswith("_") and "=" not in name) or name.endswith("._COPYING_")


def is_local_input(given: str) -> bool:
    """Whether ``given`` is a local path or a ``file:`` URI, and no Hadoop brace glob."""
    scheme = urlparse(given).scheme
    return (scheme in ("", "file") or len(scheme) == 1) and "{" not in given


def local_input_path(given: str) -> str:
    """The absolute path of a local input (``file:`` URIs decoded, ``~`` expanded; links kept:
    they are the walk's to follow)."""
    parsed = urlparse(given)
    path = unquote(parsed.path) if parsed.scheme == "file" else given
    return os.path.abspath(os.path.expanduser(path))


def plan_inputs(paths: Sequence[str], option: str = "--input") -> InputPlan | None:
    """The files the local ``paths`` name (see the module docstring), or None when one is not
    local (or a brace glob): Spark's reader then lists them. Raises a one-line
    :class:`~bpe_spark.errors.InputError` naming ``option`` for a path that names no file."""
    if not all(is_local_input(str(given)) for given in paths):
        return None
    walk = _Walk()
    for given in map(str, paths):
        path = local_input_path(given)
        if os.path.lexists(path):
            _check_given(path, given, option)
            before = len(walk.files)
            walk.root(path)
            if len(walk.files) == before and os.path.isdir(path):
                raise InputNotFoundError(f"{option} {given}: the directory holds no input file "
                                 "(hidden . and _ files are not read)")
        elif any(ch in path for ch in GLOB_CHARS):
            before = len(walk.files)
            for match in sorted(glob.glob(path)):
                walk.root(match, quiet=True)
            if len(walk.files) == before:
                raise InputNotFoundError(f"{option} {given}: the glob matches no input file; check the path")
        else:
            raise InputNotFoundError(f"{option} {given}: no such file or directory; check the path")
    return InputPlan(tuple(walk.files), tuple(walk.links), tuple(walk.broken), tuple(walk.special))


def _check_given(path: str, given: str, option: str) -> None:
    """A path given by name must be a directory or a regular file that Spark does not hide."""
    try:
        mode = os.stat(path).st_mode
    except OSError as exc:
        raise InputError(f"{option} {given}: {exc.strerror or exc} (a broken link?); check the path") from None
    if not (stat.S_ISDIR(mode) or stat.S_ISREG(mode)):
        raise InputError(f"{option} {given}: {_kind(mode)}, not a regular file; bpe-spark reads files and "
                         "directories (write the stream to a file first)")
    if stat.S_ISREG(mode) and hidden(os.path.basename(path)):
        raise InputError(f"{option} {given}: Spark's reader hides files whose names start with . or _; "
                         "rename the file")


def _kind(mode: int) -> str:
    if stat.S_ISFIFO(mode):
        return "a FIFO (named pipe)"
    if stat.S_ISSOCK(mode):
        return "a socket"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    return "not a file"


def _shown(found: Sequence[str], most: int = 3) -> str:
    return ", ".join(found[:most]) + (", ..." if len(found) > most else "")


class _Walk:
    """The walk's state across the given paths: the files listed, the directories walked and the
    real files listed (by device and inode), what was skipped."""

    def __init__(self) -> None:
        self.files: list[str] = []
        self.links: list[str] = []
        self.broken: list[str] = []
        self.special: list[str] = []
        self._listed: set[str] = set()
        self._files_seen: set[tuple[int, int]] = set()
        self._dirs_seen: set[tuple[int, int]] = set()

    def root(self, path: str, quiet: bool = False) -> None:
        """Walk one given path (or glob match); ``quiet``: a glob's match that is hidden or no
        regular file is passed over, as a glob's reader would."""
        try:
            st = os.stat(path)
        except OSError:
            if not quiet:
                raise
            self.broken.append(path)
            return
        if stat.S_ISDIR(st.st_mode):
            found: list[str] = []
            pending: deque[tuple[str, os.stat_result]] = deque()
            self._directory(path, st, found, pending)
            while pending:  # the links, once every real directory and file of the path is known
                link, target = pending.popleft()
                key = (target.st_dev, target.st_ino)
                if stat.S_ISDIR(target.st_mode):
                    if key in self._dirs_seen:
                        self.links.append(link)
                    else:
                        self._directory(link, target, found, pending)
                elif stat.S_ISREG(target.st_mode):
                    if key in self._files_seen:
                        self.links.append(link)
                    else:
                        self._files_seen.add(key)
                        found.append(link)
                else:
                    self.special.append(link)
            self._add_files(sorted(found))
        elif stat.S_ISREG(st.st_mode):
            if quiet and hidden(os.path.basename(path)):
                return
            self._files_seen.add((st.st_dev, st.st_ino))
            self._add_files([path])
        elif quiet:
            self.special.append(path)

    def _add_files(self, paths: list[str]) -> None:
        for path in paths:
            if path not in self._listed:
                self._listed.add(path)
                self.files.append(path)

    def _directory(self, path: str, st: os.stat_result, found: list[str],
                   pending: deque[tuple[str, os.stat_result]]) -> None:
        """Walk the directory ``path`` (``st``: its stat) and its real subdirectories, adding its
        regular files to ``found`` and its links (with their targets' stat) to ``pending``: links are
        followed after the real walk, so that a link never takes the place of what it points to."""
        self._dirs_seen.add((st.st_dev, st.st_ino))
        try:
            entries = sorted(os.scandir(path), key=lambda e: e.name)
        except OSError as exc:
            raise InputError(f"{path}: {exc.strerror or exc}; check its permissions") from None
        for entry in entries:
            if hidden(entry.name):
                continue
            if entry.is_symlink():
                try:
                    pending.append((entry.path, os.stat(entry.path)))
                except OSError:
                    self.broken.append(entry.path)
                continue
            mode = entry.stat(follow_symlinks=False)
            if stat.S_ISDIR(mode.st_mode):
                if (mode.st_dev, mode.st_ino) not in self._dirs_seen:
                    self._directory(entry.path, mode, found, pending)
            elif stat.S_ISREG(mode.st_mode):
                self._files_seen.add((mode.st_dev, mode.st_ino))
                found.append(entry.path)
            else:
                self.special.append(entry.path)
