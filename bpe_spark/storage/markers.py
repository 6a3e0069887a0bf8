"""What a bpe-spark output is: the marker every output directory holds, the kinds of output, an
encoded dataset's manifest name, and how a reader tells a complete output (or a single-file
export) from anything else. Pure path rules: no pyspark, any file system through
:class:`~bpe_spark.storage.file_systems.Files`; where outputs may go and how they are moved into
place is :mod:`bpe_spark.storage.output_guard`.

Every output directory bpe-spark writes (model, encoded dataset, checkpoint,
counts, a directory export, an evaluation) holds ``_BPE_SPARK``: JSON ``{"kind", "version", "bpe_spark"}``,
written into the staging directory last, so it appears at the final path only with the rest.
(``_``: Spark and pyarrow skip it when they read the data files.) Directories written before
the marker existed are recognised by their own files (:func:`kind_of`). A single-file export
cannot hold a marker: it may be replaced only by the same format, and only when the file
there already reads as that format (:func:`looks_like`).
"""

from __future__ import annotations

import json

from bpe_spark.errors import ModelFormatError
from bpe_spark.errors import option as spell_option
from bpe_spark.storage.file_systems import LOCAL, Files

MARKER_FILE = "_BPE_SPARK"
MANIFEST_NAME = "_manifest.json"  # an encoded dataset's manifest ("_": Spark and pyarrow skip it)
MANIFEST_FORMAT = "bpe-spark-encoded"  # its "format" field, which marked encoded datasets before the marker
MARKER_VERSION = 1
REPORT_MARKER = b"<!-- bpe-spark report -->"  # the second line of a training report (bpe_spark.inspect.report)
KINDS = ("model", "encoded", "checkpoint", "counts", "export", "evaluation")


WRITING = "writing"  # the marker's state while an output is written in place (object stores)


def marker_bytes(kind: str, *, complete: bool = True, **extra) -> bytes:
    """The ``_BPE_SPARK`` file of an output of ``kind`` (``extra``: e.g. an export's format);
    not ``complete``: the marker of one being written in place (``"state": "writing"``).

    >>> json.loads(marker_bytes("encoded"))["kind"], json.loads(marker_bytes("model", complete=False))["state"]
    ('encoded', 'writing')
    """
    from bpe_spark._version import __version__

    if kind not in KINDS:
        raise ValueError(f"internal: unknown output kind {kind!r}")  # an invariant, not user input
    record = {"kind": kind, "version": MARKER_VERSION, "bpe_spark": __version__, **extra}
    if not complete:
        record["state"] = WRITING
    return (json.dumps(record, sort_keys=True) + "\n").encode("utf-8")


def write_marker(directory, kind: str, files: Files = LOCAL, *, complete: bool = True, **extra) -> None:
    """Write the marker into the (staging) ``directory``."""
    files.write_bytes(files.join(str(directory), MARKER_FILE), marker_bytes(kind, complete=complete, **extra))


def read_marker(path: str, files: Files = LOCAL) -> dict | None:
    """The marker of the directory ``path`` (``{}``: there, but damaged), or None when it has none."""
    raw = files.read_bytes(files.join(path, MARKER_FILE), 1 << 16)
    if raw is None:
        return None
    try:
        record = json.loads(raw.decode("utf-8"))
    except ValueError:
        return {}
    return record if isinstance(record, dict) else {}


def check_complete(path: str, kind: str, files: Files = LOCAL, *, shown=None) -> None:
    """What a reader asks of an output directory: no marker of another kind, and none saying a run
    is still writing it in place (a one-line :class:`~bpe_spark.errors.ModelFormatError`). A
    directory without a marker reads as before (an earlier version's output, or files put there
    by hand): an in-place write puts its ``writing`` marker before any file, and a rename
    publishes a directory whole, so a missing marker never means a half-written output."""
    shown = path if shown is None else shown
    record = read_marker(path, files)
    if record is None:
        return
    if record.get("kind") != kind:
        raise ModelFormatError(f"{shown}: its {MARKER_FILE} marker says {record.get('kind')!r}, not a {kind}")
    if record.get("state") == WRITING:
        raise ModelFormatError(
            f"{shown}: an incomplete bpe-spark {kind} output (its {MARKER_FILE} says a run is writing it: that run "
            f"stopped, or is still running); write it again ({spell_option('overwrite', True)}), or wait for that run"
        )


def kind_of(path: str, files: Files = LOCAL) -> str | None:
    """The kind of bpe-spark output directory at ``path``, complete or being written in place,
    or None when it is none of ours.

    The marker says it; a directory without one is ours when it holds the files an earlier
    version wrote: a model (``bpe_spark.json``, ``merges.parquet``, ``vocab.parquet``), an
    encoded dataset (a ``_manifest.json`` of format ``bpe-spark-encoded``), a checkpoint
    (``training.json``). Counts and exports written before the marker are not recognised.
    """
    if files.kind(path) != "dir":
        return None
    record = read_marker(path, files)
    if record is not None:
        kind = record.get("kind")  # a damaged marker ({}): nothing we can vouch for
        return kind if kind in KINDS else None

    def holds(*names: str) -> bool:
        return all(files.kind(files.join(path, name)) == "file" for name in names)

    if holds("bpe_spark.json", "merges.parquet", "vocab.parquet"):
        return "model"
    if holds("training.json"):
        return "checkpoint"
    manifest = files.read_bytes(files.join(path, MANIFEST_NAME), 1 << 24)
    if manifest is not None:
        try:
            if json.loads(manifest.decode("utf-8")).get("format") == MANIFEST_FORMAT:
                return "encoded"
        except (ValueError, AttributeError):
            return None
    return None


def looks_like(path: str, file_format: str, files: Files = LOCAL) -> bool:
    """Whether the file at ``path`` reads as the single-file export ``file_format``
    (``tokenizer.json``, ``tiktoken``, ``subword-nmt``; ``report.html``: a training report): what an
    overwrite may replace.

    >>> import tempfile, pathlib
    >>> f = pathlib.Path(tempfile.mkdtemp()) / "x.tiktoken"
    >>> _ = f.write_text("IQ== 0\\nIg== 1\\n")
    >>> looks_like(str(f), "tiktoken"), looks_like(str(f), "tokenizer.json")
    (True, False)
    """
    limit = 1 << 28 if file_format == "tokenizer.json" else 1 << 16
    head = files.read_bytes(path, limit)
    if head is None:
        return False
    if file_format in ("tokenizer.json", "tiktoken.json", "transformers.json"):
        # tiktoken.json: a .tiktoken's sidecar; transformers.json: tokenizer_config.json or
        # special_tokens_map.json beside a tokenizer.json (a JSON object)
        try:
            top = json.loads(head.decode("utf-8"))
        except ValueError:
            return False
        if file_format == "transformers.json":
            return isinstance(top, dict)
        key, kind = ("model", dict) if file_format == "tokenizer.json" else ("pat_str", str)
        return isinstance(top, dict) and isinstance(top.get(key), kind)
    lines = head.split(b"\n")
    lines = (lines[:-1] if len(head) == limit else lines)[:100]  # a cut last line is not judged
    if file_format == "tiktoken":
        return bool(lines) and all(len(f := line.split()) == 2 and f[1].isdigit() for line in lines if line)
    if file_format == "report.html":
        return REPORT_MARKER in head[:256]
    if file_format == "subword-nmt":
        body = lines[1:] if lines and lines[0].startswith(b"#version:") else lines
        return all(len(line.split(b" ")) == 2 for line in body if line)
    return False
