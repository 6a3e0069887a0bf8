"""JSON Lines documents, parsed by the Python tasks from the raw lines of Spark's text reader, so
that one text rule (:mod:`bpe_spark.text`) and one bad-record rule hold, each record named by
file and line.

A record is one line holding a JSON object. Its text field:

- a JSON string: the document, by the text rule (invalid UTF-8 in the line and lone surrogates
  such as ``"\\ud800"`` become U+FFFD, counted);
- JSON ``null``: a *null document* (kept as a null text, counted as ``null_documents``);
- missing, or a number, boolean, array or object: a *bad record*, never its JSON text.

A line that is not JSON or not an object is a bad record too. Whitespace-only lines hold no
record (as for Spark's JSON reader); a BOM opening a line is ignored (RFC 8259 allows it). With
``on_bad_input="error"`` the first bad record stops the job with a
:class:`~bpe_spark.errors.BadInputError` naming its file and line; with ``"skip"`` it is dropped
and counted (``skipped_records``). The reader's counts are observed during the job that reads
(:func:`bpe_spark.spark.io.with_reader_stats`). Kept columns travel to the JVM as one JSON object per record and are
typed there by ``from_json`` with the schema inferred from a sample, as Spark's JSON reader types
them.

Line numbers: Spark cuts a file into blocks and a task knows only its block's start; the line
number of a record in a local file is found by counting the newlines before the block (only
when a record is bad), else the message names the block and the line within it.
"""

from __future__ import annotations

import json
from urllib.parse import unquote, urlparse

import numpy as np
import pyarrow as pa
from pyspark.sql import DataFrame, Observation
from pyspark.sql import functions as F
from pyspark.sql.types import LongType, StringType, StructField, StructType

from bpe_spark.errors import BadInputError, option
from bpe_spark.spark.encode_tasks import BLOCK, FILE, carry_segments, segment_runs
from bpe_spark.text import clean_counted, decode_counted

_KEPT = "__bpe_kept"
_BAD = "__bpe_bad"
_REPLACED = "__bpe_replaced"
_AFFECTED = "__bpe_affected"
READER_STATS = ("skipped_records", "replaced_sequences", "affected_documents")


def parse_record(line: str, text_col: str, keep_columns: tuple[str, ...] = ()):
    """``(text, kept JSON or None, problem, lone surrogates replaced)`` of one line (decoded by
    the text rule); ``problem`` names what makes it a bad record (``None``: none, ``""``: a
    blank line, no record); ``text`` is ``None`` for a JSON null.

    >>> parse_record('{"text": "a\\ud800"}', "text")
    ('a\ufffd', None, None, 1)
    >>> parse_record('{"text": 5}', "text")[2]
    'its "text" field is a number, not a string'
    """
    line = line.removeprefix("\ufeff")
    if not line.strip():
        return None, None, "", 0
    try:
        record = json.loads(line)
    except ValueError as exc:
        return None, None, f"it is not JSON ({exc})", 0
    if not isinstance(record, dict):
        return None, None, f"it holds a JSON {_kind(record)}, not an object", 0
    if text_col not in record:
        return None, None, f"it has no {json.dumps(text_col)} field", 0
    value, surrogates = record[text_col], 0
    if value is not None and not isinstance(value, str):
        return None, None, f"its {json.dumps(text_col)} field is a {_kind(value)}, not a string", 0
    if isinstance(value, str):
        value, surrogates = clean_counted(value)
    return value, _kept(record, keep_columns), None, surrogates


def _kept(record: dict, keep_columns: tuple[str, ...]) -> str | None:
    return json.dumps({c: record[c] for c in keep_columns if c in record}) if keep_columns else None


class ParsedBatch:
    """The columns of one parsed batch (text, kept, bad, replaced, affected) and its first bad
    record, ``(row, problem)``."""

    def __init__(self, n: int):
        self.texts: list[str | None] = []
        self.kept: list[str | None] = []
        self.bad = np.zeros(n, dtype=np.int64)
        self.replaced = np.zeros(n, dtype=np.int64)
        self.blank: list[int] = []
        self.problem: tuple[int, str] | None = None

    def keep(self) -> np.ndarray:
        """Which input lines hold a record (blank lines hold none)."""
        keep = np.ones(len(self.bad), dtype=bool)
        keep[self.blank] = False
        return keep

    def arrays(self) -> list[pa.Array]:
        keep = self.keep()
        replaced = np.where(self.bad[keep] > 0, 0, self.replaced[keep])  # a bad record's are not counted
        kept = self.kept if len(self.kept) == len(self.texts) else [None] * len(self.texts)
        return [pa.array(self.texts, pa.string()), pa.array(kept, pa.string()), pa.array(self.bad[keep]),
                pa.array(replaced), pa.array((replaced > 0).astype(np.int64))]


def parse_batch(raw: pa.Array, text_col: str, keep_columns: tuple[str, ...]) -> ParsedBatch:
    """Parse a batch of raw lines. Fast path: Arrow checks the whole batch is UTF-8 at once, and
    a line holding an object with a string text takes no other step; anything else goes
    through :func:`parse_record`."""
    parsed = ParsedBatch(len(raw))
    try:
        lines = raw.cast(pa.string()).to_pylist()
    except pa.ArrowInvalid:
        lines = []
        for i, data in enumerate(raw.to_pylist()):
            line, parsed.replaced[i] = decode_counted(data)
            lines.append(line)
    loads, texts, kept, replaced = json.loads, parsed.texts, parsed.kept, parsed.replaced
    for i, line in enumerate(lines):
        try:
            record = loads(line)
        except ValueError:
            record = None
        value = record.get(text_col) if type(record) is dict else None
        if type(value) is str:
            if not value.isascii():
                value, surrogates = clean_counted(value)
                replaced[i] += surrogates
            texts.append(value)
            if keep_columns:
                kept.append(_kept(record, keep_columns))
            continue
        value, kept_json, problem, surrogates = parse_record(line, text_col, keep_columns)
        if problem == "":
            parsed.blank.append(i)
            continue
        if problem is not None:
            parsed.bad[i] = 1
            if parsed.problem is None:
                parsed.problem = (i, problem)
        replaced[i] += surrogates
        texts.append(value)
        if keep_columns:
            kept.append(kept_json)
    return parsed


def _kind(value) -> str:
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, (int, float)):
        return "number"
    return {dict: "object", list: "array", str: "string"}.get(type(value), "null")


def read_jsonl(lines: DataFrame, text_col: str, keep_fields: list[StructField],
               on_bad_input: str) -> tuple[DataFrame, Observation]:
    """Documents from ``lines`` (Spark's text reader with ``lineSep="\\n"``: column ``value``),
    and the observation of the reader's counts (:data:`READER_STATS`)."""
    keep_columns = tuple(field.name for field in keep_fields)
    schema = StructType([StructField(text_col, StringType()), StructField(_KEPT, StringType()),
                         StructField(_BAD, LongType()), StructField(_REPLACED, LongType()),
                         StructField(_AFFECTED, LongType()), StructField(FILE, StringType()),
                         StructField(BLOCK, LongType())])

    fix = (f"fix the input, choose the text field with {option('text_col')}, or pass "  # the driver's words
           f"{option('on_bad_input', 'skip')} to skip such records")

    def parse(batches):
        seen: dict[tuple, int] = {}  # lines of each input segment (file, block) in earlier batches
        for batch in batches:
            if batch.num_rows == 0:
                continue
            columns = parse_batch(batch.column(0), text_col, keep_columns)
            runs = segment_runs(batch, -1)
            if columns.problem is not None and on_bad_input != "skip":
                row, problem = columns.problem
                lo, _, key = next(run for run in runs if run[0] <= row < run[1])
                raise BadInputError(
                    f"{_where(key[0], key[1], seen.get(key, 0) + row - lo)} is a bad JSON Lines record: "
                    f"{problem}; {fix}"
                )
            for lo, hi, key in runs:
                seen[key] = seen.get(key, 0) + hi - lo
            # the input segment of each record travels with it: after this Python stage the JVM no
            # longer knows it, and encoding numbers documents by it (input order)
            segment = [batch.column(i).filter(pa.array(columns.keep())) for i in (1, 2)]
            yield pa.RecordBatch.from_arrays(columns.arrays() + segment, names=schema.names)

    raw = lines.select(F.col("value").cast("binary"), F.input_file_name(), F.input_file_block_start())
    parsed = raw.mapInArrow(parse, schema)
    observation = Observation("bpe_spark_jsonl")
    parsed = parsed.observe(
        observation,
        F.coalesce(F.sum(_BAD), F.lit(0)).alias("skipped_records"),
        F.coalesce(F.sum(_REPLACED), F.lit(0)).alias("replaced_sequences"),
        F.coalesce(F.sum(_AFFECTED), F.lit(0)).alias("affected_documents"),
    )
    columns = [F.col(text_col)]
    if keep_fields:
        kept = F.from_json(_KEPT, StructType(keep_fields))
        columns += [kept.getField(name).alias(name) for name in keep_columns]
    full = parsed.where(F.col(_BAD) == 0).select(*columns, FILE, BLOCK)
    return carry_segments(full.select(text_col, *keep_columns), full), observation


def _where(file: str, block: int, index: int) -> str:
    """The record's place: ``file F, line N`` (counted from the file's start when it is local)."""
    if block <= 0:
        return f"file {file}, line {index + 1}"
    parsed = urlparse(file)
    if parsed.scheme in ("", "file"):
        try:
            newlines = 0
            with open(unquote(parsed.path), "rb") as fh:
                remaining = block
                while remaining > 0 and (chunk := fh.read(min(remaining, 8 << 20))):
                    newlines += chunk.count(b"\n")
                    remaining -= len(chunk)
            # the block's first line starts after the first newline at or past its start
            return f"file {file}, line {newlines + 2 + index}"
        except OSError:
            pass
    return f"file {file}, line {index + 1} of the block at byte {block}"
