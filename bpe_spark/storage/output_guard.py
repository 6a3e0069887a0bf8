"""Safe outputs (docs/design.md 5 "Outputs"): where a bpe-spark output may be written, and how it is moved
into place (what an output is, its marker: :mod:`bpe_spark.storage.markers`). Pure path rules: no pyspark, any file system through
:class:`~bpe_spark.storage.file_systems.Files`.

- **Where.** :func:`check_output` is the one check before any work: the output is not, does
  not hold and does not lie inside an input, the model or the checkpoint (resolved absolute
  paths or normalised URIs; a glob counts from its fixed prefix); its location can be written
  (local paths: a probe directory is made in the nearest existing parent); an existing output
  is replaced only with ``overwrite`` and only when it is an earlier output of the same kind.
- **Staging.** Outputs are staged beside their target under a hidden name that records the
  owner: ``.<name>.<tag>-<host>-<pid>-<start time>-<random>``. :func:`remove_stale` (run by
  :func:`prepare`) removes the staging siblings of a target whose owner is a dead process on this
  host, or, for another host, older than :data:`~bpe_spark.storage.owners.STALE_AFTER_SECONDS`; :func:`publish` moves a
  finished output into place.
- **In place.** An object store cannot rename a directory, so an output there is committed file
  by file (:func:`begin_in_place`, :func:`publish_in_place`, :func:`put_directory`): an earlier
  output's marker is first replaced by one whose ``state`` is ``writing``, each file is written
  once complete (a PUT is atomic per object), and the complete marker goes in last. Readers ask
  for the complete marker (:func:`check_complete`), so a half-replaced directory never reads as
  an output; ``overwrite`` may replace it.

>>> relation("/data/corpus", "/data")
'lies inside'
>>> relation("/data", "/data/corpus/*.txt"), relation("/data/ids", "/data/x*/a.txt")
('holds', 'lies inside')
>>> relation("s3a://bucket/out", "s3://bucket/out/part-0.txt"), relation("/a/b", "/a/bc")
('holds', None)
"""

from __future__ import annotations

import contextlib
import os
import posixpath
import re
import tempfile
import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import unquote, urlparse

from bpe_spark.errors import OutputExistsError, OutputRefusedError
from bpe_spark.errors import option as spell_option  # "option" names the output option here
from bpe_spark.storage.file_systems import LOCAL, Files
from bpe_spark.storage.markers import MARKER_FILE, kind_of, looks_like, write_marker
from bpe_spark.storage.owners import Owner, current_owner, owner_is_dead

STAGING_TAGS = ("tmp", "old", "staging")

_GLOB_CHARS = re.compile(r"[*?\[{]")
_SCHEME_ALIASES = {"s3a": "s3", "s3n": "s3"}


# --- where an output may go -----------------------------------------------------------------------
@dataclass(frozen=True)
class Location:
    """A path as compared: local (``scheme`` "") resolved and absolute, or a normalised URI."""

    scheme: str
    netloc: str
    parts: tuple[str, ...]


def location(path) -> Location:
    text = str(path)
    parsed = urlparse(text) if re.match(r"^[A-Za-z][A-Za-z0-9+.-]*:", text) else None
    if parsed is None or parsed.scheme in ("", "file") or len(parsed.scheme) == 1:  # 1: a Windows drive
        local = unquote(parsed.path) if parsed is not None and parsed.scheme == "file" else text
        resolved = os.path.realpath(os.path.expanduser(local))
        return Location("", "", tuple(p for p in resolved.split(os.sep) if p))
    normal = posixpath.normpath(unquote(parsed.path) or "/")  # a URI's %20 is the path's space
    return Location(_SCHEME_ALIASES.get(parsed.scheme, parsed.scheme), parsed.netloc,
                    tuple(p for p in normal.split("/") if p))


def fixed_prefix(path: str) -> str:
    """A glob's leading components without glob characters (a plain path: itself).

    >>> fixed_prefix("data/2024-*/part-?.txt"), fixed_prefix("s3a://b/x/{a,b}/*.gz"), fixed_prefix("a/b.txt")
    ('data', 's3a://b/x', 'a/b.txt')
    """
    text = str(path)
    match = _GLOB_CHARS.search(text)
    if match is None:
        return text
    cut = text.rfind("/", 0, match.start())
    return text[:cut] if cut > 0 else ("/" if cut == 0 else ".")


def relation(out, other) -> str | None:
    """How the output ``out`` stands to the path ``other`` (an input, the model...): ``"is"``,
    ``"holds"`` (``other`` lies inside ``out``), ``"lies inside"``, or None (unrelated)."""
    other = str(other)  # a local name that exists is that file, never a glob (bpe_spark.storage.input_walk)
    literal = is_local(other) and os.path.lexists(local_path(other))
    a, b = location(out), location(other if literal else fixed_prefix(other))
    if (a.scheme, a.netloc) != (b.scheme, b.netloc):
        return None
    if a.parts == b.parts:
        return "is"
    if a.parts == b.parts[: len(a.parts)]:
        return "holds"
    if b.parts == a.parts[: len(b.parts)]:
        return "lies inside"
    return None


def is_local(path) -> bool:
    return location(path).scheme == ""


def local_path(path) -> str:
    """The absolute local path of a local ``path`` or ``file:`` URI (symbolic links resolved)."""
    return os.sep + os.sep.join(location(path).parts)


def check_placement(out, protected: Mapping[str, Iterable], *, option: str = "output") -> None:
    """Refuse an ``out`` that is, holds or lies inside a ``protected`` path (``{role: paths}``,
    e.g. ``{"input": [...], "model": [...]}``): a one-line :class:`OutputRefusedError`."""
    for role, paths in protected.items():
        for other in paths or ():
            if other is None:
                continue
            found = relation(out, other)
            if found is not None:
                raise OutputRefusedError(
                    f"{option} {out} {found} the {role} ({other}); bpe-spark never writes over, around or "
                    f"inside its {role}: choose another {option}"
                )


def check_writable(out, *, option: str = "output") -> None:
    """A local ``out`` can be created: its nearest existing parent is a directory in which a probe
    directory can be made (``/proc/x``, ``file.txt/x`` and read-only places fail here)."""
    if not is_local(out):
        return  # remote stores are checked by the writer when it starts, before the Spark work
    target = Path(local_path(out))
    parent = target.parent
    while not os.path.lexists(parent) and parent != parent.parent:
        parent = parent.parent
    if not parent.is_dir():
        raise OutputRefusedError(f"{option} {out}: {parent} is a file, so nothing can be written under it")
    try:
        os.rmdir(tempfile.mkdtemp(prefix=".bpe-spark-probe-", dir=parent))
    except OSError as exc:
        raise OutputRefusedError(f"{option} {out}: cannot write in {parent} ({exc.strerror or exc})") from None


def check_replaceable(out: str, kind: str, *, overwrite: bool, files: Files = LOCAL,
                      file_format: str | None = None, option: str = "output", shown=None) -> None:
    """An existing ``out`` is an error unless ``overwrite``, and then it must be an earlier
    output of ``kind`` (a directory with its marker), an empty directory, or, for a single-file
    export (``file_format``), a file that reads as that format."""
    found = files.kind(str(out))
    shown = out if shown is None else shown
    if found is None:
        return
    if not overwrite:
        raise OutputExistsError(
            f"{option} {shown} already exists; pass {spell_option('overwrite', True)} to replace it, or choose another {option}"
        )
    if file_format is not None:
        if found == "file" and looks_like(str(out), file_format, files):
            return
        raise OutputRefusedError(
            f"{option} {shown} exists and is not a {file_format} file; {spell_option('overwrite', True)} replaces only an "
            "earlier export of the same format: remove it yourself or choose another path"
        )
    if kind_of(str(out), files) != kind and not (found == "dir" and not files.list_dir(str(out))):
        raise OutputRefusedError(
            f"{option} {shown} exists and is not an earlier bpe-spark {kind} output (no {MARKER_FILE} "
            f"marker of kind {kind!r}); {spell_option('overwrite', True)} replaces only those: remove it yourself or choose another path"
        )


def check_output(out, kind: str, *, overwrite: bool = False, protected: Mapping[str, Iterable] | None = None,
                 file_format: str | None = None, option: str = "output") -> None:
    """Everything about a local or remote ``out`` that can be known before any work: placement
    (:func:`check_placement`), writability (:func:`check_writable`) and, for a local path, what
    an existing output may be replaced by (:func:`check_replaceable`)."""
    check_placement(out, protected or {}, option=option)
    check_writable(out, option=option)
    if is_local(out):
        check_replaceable(local_path(out), kind, overwrite=overwrite, file_format=file_format, option=option,
                          shown=out)


def check_claim(path: str, kind: str, *, files: Files = LOCAL, option: str = "output", shown=None) -> None:
    """A directory that a run fills in place (the checkpoint) must be new, empty, or already an
    output of ``kind``: never a file, never a directory of other files. (``shown``: the path as
    the user gave it, for the message.)"""
    found = files.kind(path)
    shown = path if shown is None else shown
    if found == "file":
        raise OutputRefusedError(f"{option} {shown} is a file; give a directory")
    if found == "dir" and files.list_dir(path) and kind_of(path, files) != kind:
        raise OutputRefusedError(
            f"{option} {shown} holds files that are not a bpe-spark {kind}; choose a new or empty directory"
        )


def check_checkpoint(path, *, protected: Mapping[str, Iterable] | None = None, files: Files | None = None,
                     option: str = "checkpoint directory") -> None:
    """A checkpoint directory: clear of the ``protected`` paths, writable, and new, empty or a
    checkpoint (:func:`check_claim`; judged through ``files``, or locally for a local path)."""
    check_placement(path, protected or {}, option=option)
    check_writable(path, option=option)
    if files is not None:
        check_claim(str(path), "checkpoint", files=files, option=option)
    elif is_local(path):
        check_claim(local_path(path), "checkpoint", option=option, shown=path)


def prepare(uri: str, kind: str, *, overwrite: bool, protected: Mapping[str, Iterable] | None = None,
            files: Files = LOCAL, path: str | None = None, option: str = "output") -> None:
    """Before any work on the output ``uri`` (``path``: its name in ``files``, when that differs):
    :func:`check_placement`, :func:`check_writable`, :func:`check_replaceable`, and the removal
    of the staging siblings of dead runs (:func:`remove_stale`)."""
    path = (path or str(uri)).rstrip("/")
    check_placement(uri, protected or {}, option=option)
    check_writable(uri, option=option)
    check_replaceable(path, kind, overwrite=overwrite, files=files, option=option, shown=uri)
    parent, _, name = path.rpartition("/")
    if not is_local(uri):
        check_writable_in(parent or "/", files, option=option, shown=uri)
    remove_stale(parent or "/", name, files)


def check_writable_in(directory: str, files: Files, *, option: str = "output", shown=None) -> None:
    """A remote output's location can be written: a hidden probe file is written in ``directory``
    (through ``files``: the credentials, the bucket, the permissions) and deleted."""
    probe = files.join(directory, f".bpe-spark-probe-{uuid.uuid4().hex[:8]}")
    try:
        files.write_bytes(probe, b"")
    except OSError as exc:  # pyarrow's, or a Java exception (HadoopFiles raises those as OSError)
        raise OutputRefusedError(f"{option} {shown or directory}: cannot write in {directory} ({reason_line(exc)})") from None
    with contextlib.suppress(Exception):
        files.delete(probe)


def reason_line(exc: BaseException) -> str:
    """The informative line of an exception's message (the first naming an exception or error)."""
    lines = [line.strip(" :") for line in str(exc).splitlines() if line.strip(" :")]
    for line in lines:
        if "Exception" in line or "Error" in line:
            return line[:300]
    return (lines[0] if lines else type(exc).__name__)[:300]


def publish(staged: str, target: str, kind: str, *, overwrite: bool, files: Files = LOCAL,
            file_format: str | None = None) -> None:
    """Move the finished ``staged`` output to ``target``. An existing ``target`` is checked again
    (something may have appeared meanwhile) and goes only once the new one is in place: it is
    first moved to an ``old`` staging sibling, and moved back if the new one cannot take its place."""
    check_replaceable(target, kind, overwrite=overwrite, files=files, file_format=file_format)
    present = files.kind(target)
    if present is None or (present == "file" and files.kind(staged) == "file"):
        files.move(staged, target)
        return
    parent, _, name = target.rstrip("/").rpartition("/")
    retired = files.join(parent or "/", staging_name(name, "old"))
    files.move(target, retired)
    try:
        files.move(staged, target)
    except BaseException:
        files.move(retired, target)
        raise
    files.delete(retired)


# --- committing in place (object stores: no directory rename) ------------------------------------
def begin_in_place(target: str, kind: str, *, overwrite: bool, files: Files) -> None:
    """Before the first file of a new output goes into ``target``: ``target`` is checked again,
    the earlier output's marker is replaced by a ``writing`` marker of ``kind`` (one PUT: from
    here on the directory never reads as a complete output, and ``overwrite`` may still replace
    it), and the earlier output's other files are deleted."""
    check_replaceable(target, kind, overwrite=overwrite, files=files)
    write_marker(target, kind, files, complete=False)
    for name, _ in files.list_dir(target):
        if name != MARKER_FILE:
            files.delete(files.join(target, name))


def publish_in_place(staged: str, target: str, kind: str, *, overwrite: bool, files: Files, **extra) -> None:
    """Publish the finished ``staged`` directory to ``target`` file by file (each a copy on an object
    store): :func:`begin_in_place`, every file, then the complete marker (``extra``: its fields)."""
    begin_in_place(target, kind, overwrite=overwrite, files=files)
    try:
        for name, _ in sorted(files.list_dir(staged)):
            if name != MARKER_FILE:
                files.move(files.join(staged, name), files.join(target, name))
        write_marker(target, kind, files, **extra)
    except BaseException:
        discard_in_place(target, files)
        raise
    files.delete(staged)


def discard_in_place(target: str, files: Files) -> None:
    """After a failure while writing ``target`` in place: remove what is there (the earlier output
    is gone already; a run killed here leaves the ``writing`` marker, which no reader accepts)."""
    with contextlib.suppress(Exception):
        files.delete(target)


def put_directory(local_dir, target: str, kind: str, *, overwrite: bool, files: Files, in_place: bool) -> None:
    """Copy the finished local output directory ``local_dir`` (its marker in it) to ``target``:
    in place (:func:`begin_in_place`, each file uploaded once complete, the marker last), or into
    a staging sibling that :func:`publish` then renames into place."""
    local_dir = str(local_dir)
    names = sorted(os.path.relpath(os.path.join(root, name), local_dir)
                   for root, _, found in os.walk(local_dir) for name in found if name != MARKER_FILE or root != local_dir)
    names.append(MARKER_FILE)  # last
    if in_place:
        begin_in_place(target, kind, overwrite=overwrite, files=files)
        destination = target
    else:
        parent, _, base = target.rstrip("/").rpartition("/")
        destination = files.join(parent or "/", staging_name(base, "tmp"))
    try:
        for name in names:
            files.upload(os.path.join(local_dir, name), files.join(destination, name.replace(os.sep, "/")))
        if not in_place:
            publish(destination, target, kind, overwrite=overwrite, files=files)
    except BaseException:
        discard_in_place(destination, files)
        raise


# --- staging siblings -----------------------------------------------------------------------------
def staging_name(target_name: str, tag: str) -> str:
    """The hidden name of a staging sibling of ``target_name``, recording this process as owner."""
    owner = current_owner()
    return f".{target_name}.{tag}-{owner.host}-{owner.pid}-{owner.start}-{uuid.uuid4().hex[:8]}"


_STAGING_TAIL = re.compile(rf"^({'|'.join(STAGING_TAGS)})-(.+)-(\d+)-(\d+)-[0-9a-f]{{8}}$")


def staging_owner(target_name: str, entry_name: str) -> Owner | None:
    """The owner recorded in ``entry_name`` when it is a staging sibling of ``target_name``.

    >>> staging_owner("out", ".out.tmp-node_1-42-1700000000-0123abcd")
    Owner(host='node_1', pid=42, start=1700000000)
    >>> staging_owner("out", ".output.tmp-node_1-42-1700000000-0123abcd") is None
    True
    """
    prefix = f".{target_name}."
    if not entry_name.startswith(prefix):
        return None
    match = _STAGING_TAIL.match(entry_name[len(prefix):])
    return Owner(match[2], int(match[3]), int(match[4])) if match else None


def remove_stale(parent: str, target_name: str, files: Files = LOCAL) -> list[str]:
    """Remove the staging siblings of ``parent/target_name`` whose owner is dead; their names."""
    removed = []
    for name, modified in files.list_dir(parent):
        owner = staging_owner(target_name, name)
        if owner is not None and owner_is_dead(owner, modified):
            files.delete(files.join(parent, name))
            removed.append(name)
    return removed
