"""The input format of documents when none is given: from the planned files' names, checked
against their first bytes, for the command line (before Spark starts) and ``read_documents``.

``auto`` (the default) reads ``.parquet`` files as Parquet, ``.jsonl`` / ``.json`` / ``.ndjson``
files (also compressed: ``.jsonl.gz``...) as JSON Lines, and every other name as text; inputs
that mix formats are refused in one line naming the option to give. A format given is kept (a
``.jsonl`` file read with ``text`` is read as lines of text: the user asked), except that a file
starting with Parquet's magic bytes (``PAR1``) is never read as text, whatever its name.
Remote inputs (not walked: :func:`~bpe_spark.storage.input_walk.plan_inputs` gives None) are
judged by the names given (a directory: text, as before).
"""

from __future__ import annotations

import os
from collections.abc import Sequence

from bpe_spark.errors import ConfigError, InputError, option

AUTO = "auto"
FORMATS = ("text", "jsonl", "parquet")
COMPRESSION_SUFFIXES = (".gz", ".bz2", ".zst", ".zstd", ".xz", ".lz4", ".snappy", ".deflate", ".br", ".lzo")
_SUFFIX_FORMATS = {".parquet": "parquet", ".parq": "parquet", ".jsonl": "jsonl", ".json": "jsonl",
                   ".ndjson": "jsonl"}
PARQUET_MAGIC = b"PAR1"


def format_of_name(name: str) -> str:
    """The format a file's name says (its suffix, after a compression suffix).

    >>> [format_of_name(n) for n in ("a.parquet", "b.jsonl.gz", "c.ndjson", "d.JSON", "e.txt.gz", "f")]
    ['parquet', 'jsonl', 'jsonl', 'jsonl', 'text', 'text']
    """
    base = os.path.basename(str(name).rstrip("/")).lower()
    for suffix in COMPRESSION_SUFFIXES:
        if base.endswith(suffix):
            base = base[: -len(suffix)]
            break
    return _SUFFIX_FORMATS.get(os.path.splitext(base)[1], "text")


def is_parquet_file(path: str) -> bool:
    """Whether the local file ``path`` starts with Parquet's magic bytes."""
    try:
        with open(path, "rb") as fh:
            return fh.read(len(PARQUET_MAGIC)) == PARQUET_MAGIC
    except OSError:
        return False


def resolve_input_format(given: str | None, files: Sequence[str] | None, paths: Sequence[str] = ()) -> str:
    """The format to read: ``given`` unless it is None or ``"auto"``, else the one format of
    ``files`` (the planned local files; None: not local, then the names of ``paths``). A file
    holding Parquet is never read as text (a one-line :class:`~bpe_spark.errors.InputError`
    naming it and the option)."""
    if given not in (None, AUTO, *FORMATS):
        raise ConfigError(f"input_format must be one of {(AUTO, *FORMATS)}, got {given!r}")
    auto = given in (None, AUTO)
    if auto:
        names = list(files) if files is not None else [str(p) for p in paths]
        found: dict[str, str] = {}
        for name in names:
            found.setdefault(format_of_name(name), name)
        if len(found) > 1:
            shown = ", ".join(f"{name} ({kind})" for kind, name in found.items())
            raise InputError(f"the inputs mix formats: {shown}; read one format per run, or give "
                             f"{option('input_format')} to read them all as one")
        resolved = next(iter(found), "text")
    else:
        resolved = given
    if resolved == "text" and files:
        for path in files:
            if is_parquet_file(path):
                raise InputError(f"{path} is a Parquet file (it starts with PAR1), not text; give "
                                 f"{option('input_format', 'parquet')}" + ("" if auto else " instead"))
    return resolved
