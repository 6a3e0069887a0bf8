"""JSON Lines documents, parsed by the Python tasks from the raw lines of Spark's text reader, so
that one text rule (:mod:`bpe_spark.bpe.text`) and one bad-record rule hold, each record named by
file and line; or, for encoding local files with nothing kept beside the text, by the encoding
tasks themselves from the bytes they read (:func:`tag`, :class:`SplitRecords`: the file splits
of :mod:`bpe_spark.spark.read.text_splits`, parsed and encoded in one task, no JVM string per line).

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
(:func:`bpe_spark.spark.read.documents.with_reader_stats`). Kept columns travel to the JVM as one JSON object per record and are
typed there by ``from_json`` with the schema inferred from a sample, as Spark's JSON reader types
them.

Line numbers: Spark cuts a file into blocks and a task knows only its block's start; the line
number of a record in a local file is found by counting the newlines before the block (only
when a record is bad), else the message names the block and the line within it.

Parsing: with the compiled encoder, the raw lines go to its JSON scanner (:func:`scan_lines`,
``_jsonl_scan.h``), which answers the lines it is sure of (a string or null text, a blank line)
and leaves every other line to :func:`parse_record`. Without it, a line that is exactly one JSON
object is scanned in place by the scanner ``json.loads`` runs (:func:`parse_spans`), without a
``str`` per line or ``json.loads``' checks around it; any other line takes
:func:`parse_record`. All three give ``json.loads``' answer.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from urllib.parse import unquote, urlparse

import numpy as np
import pyarrow as pa
from pyspark.sql import DataFrame, Observation
from pyspark.sql import functions as F
from pyspark.sql.types import LongType, StringType, StructField, StructType

from bpe_spark.native import compiled as _compiled
from bpe_spark.errors import BadInputError, option
from bpe_spark.bpe.long_documents import LongDocument
from bpe_spark.bpe.long_records import BadString, JsonText, scan_record
from bpe_spark.spark.read.segments import BLOCK, FILE, carry_segments, segment_runs
from bpe_spark.spark.read.text_splits import Split, TextSource, iter_blocks, local_source
from bpe_spark.bpe.text import InputTally, clean_counted, decode_counted

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

    def column(self) -> pa.Array:
        """The texts of the lines that hold a record, as an Arrow string array."""
        return self.texts if isinstance(self.texts, pa.Array) else pa.array(self.texts, pa.string())

    def arrays(self) -> list[pa.Array]:
        keep = self.keep()
        replaced = np.where(self.bad[keep] > 0, 0, self.replaced[keep])  # a bad record's are not counted
        kept = self.kept if len(self.kept) == len(self.texts) else [None] * len(self.texts)
        return [self.column(), pa.array(kept, pa.string()), pa.array(self.bad[keep]),
                pa.array(replaced), pa.array((replaced > 0).astype(np.int64))]


def parse_batch(raw: pa.Array, text_col: str, keep_columns: tuple[str, ...]) -> ParsedBatch:
    """Parse a batch of raw lines (binary, without their ``\\n``). Fast path: Arrow checks the
    whole batch is UTF-8 at once and the lines are parsed in place (:func:`parse_spans`); a batch
    that is not UTF-8 is decoded line by line by the text rule (counted)."""
    n = len(raw)
    offsets = np.frombuffer(raw.buffers()[1], dtype=np.int32)[raw.offset:raw.offset + n + 1].astype(np.int64)
    if not keep_columns and (scanned := scan_lines(raw.buffers()[2] or b"", offsets[:-1], offsets[1:],
                                                   text_col)) is not None:
        return scanned
    replaced = np.zeros(n, dtype=np.int64)
    try:
        raw.cast(pa.string()).validate(full=True)
        data = raw.buffers()[2]
        data = b"" if data is None else data.slice(int(offsets[0]), int(offsets[-1] - offsets[0])).to_pybytes()
        text, starts = data.decode("utf-8"), char_offsets(data, offsets - offsets[0])
    except pa.ArrowInvalid:
        lines = []
        for i, line in enumerate(raw.to_pylist()):
            line, replaced[i] = decode_counted(line)
            lines.append(line)
        text = "".join(lines)
        starts = np.zeros(n + 1, dtype=np.int64)
        np.cumsum([len(line) for line in lines], out=starts[1:])
    return parse_spans(text, starts[:-1], starts[1:], text_col, keep_columns, replaced)


def char_offsets(data: bytes, offsets: np.ndarray) -> np.ndarray:
    """The positions in ``data.decode("utf-8")`` of the byte ``offsets`` (non-decreasing, each
    at a character boundary): each offset less the continuation bytes before it, counted
    between consecutive offsets (no array the size of ``data`` but the bytes' flags).

    >>> char_offsets("aé€b".encode(), np.array([0, 1, 3, 3, 6, 7])).tolist()
    [0, 1, 2, 2, 3, 4]
    """
    if data.isascii() or not len(offsets):
        return offsets
    continuation = np.zeros(len(data) + 1, dtype=bool)  # one more: an offset may be len(data)
    continuation[:-1] = (np.frombuffer(data, dtype=np.uint8) & 0xC0) == 0x80
    between = np.add.reduceat(continuation, offsets, dtype=np.int64)[:-1]  # in [offsets[k], offsets[k + 1])
    between[offsets[:-1] == offsets[1:]] = 0  # subtle: reduceat gives the element itself for an empty range
    before = np.empty(len(offsets), dtype=np.int64)
    before[0] = np.count_nonzero(continuation[:offsets[0]])
    np.cumsum(between, out=before[1:])
    before[1:] += before[0]
    return offsets - before


def scan_lines(data, starts: np.ndarray | None, ends: np.ndarray | None, text_col: str) -> ParsedBatch | None:
    """Parse the raw lines ``data[starts[i]:ends[i]]`` (UTF-8 bytes, no ``\\n``; without
    ``starts`` and ``ends``: each line of ``data`` up to its ``\\n``) with the compiled scanner
    (``_jsonl_scan.h``), its texts one Arrow array over the bytes it unescaped (no ``str`` per
    line); None without the compiled encoder. The scanner answers a line only where
    ``json.loads`` gives the same answer (a string or null text, a blank line); every other line
    takes :func:`parse_record` here, decoded by the text rule, so the result is
    :func:`parse_spans`' own."""
    scanner = _compiled.jsonl_scanner()
    if scanner is None:
        return None
    try:
        key = text_col.encode("utf-8")
    except UnicodeEncodeError:  # a lone surrogate: no record's field can match it as bytes
        return None
    if starts is not None:
        starts, ends = np.ascontiguousarray(starts, dtype=np.int64), np.ascontiguousarray(ends, dtype=np.int64)
    answers, offsets, texts = scanner(data, starts, ends, key)
    answers = np.frombuffer(answers, dtype=np.uint8).copy()
    n = len(answers)
    parsed = ParsedBatch(n)
    column = pa.StringArray.from_buffers(n, pa.py_buffer(offsets), pa.py_buffer(texts))
    patch: list[str | None] = []  # the values of the lines answered here, then one null
    index = None
    unsure = np.flatnonzero(answers == _UNSURE)
    if len(unsure):
        if starts is None:
            starts, ends = _line_bounds(data)
        view, index = memoryview(data), np.arange(n)
        for i in unsure.tolist():
            line, replaced = decode_counted(view[starts[i]:ends[i]].tobytes())
            value, _, problem, surrogates = parse_record(line, text_col)
            if problem == "":
                answers[i] = _BLANK
                continue
            if problem is not None:
                parsed.bad[i] = 1
                parsed.problem = parsed.problem or (i, problem)
            parsed.replaced[i] = replaced + surrogates
            index[i] = n + len(patch)
            patch.append(value)
    nulls = answers == _NULL
    if nulls.any():
        index = np.arange(n) if index is None else index
        index[nulls] = n + len(patch)
        patch.append(None)
    if index is not None:
        column = pa.concat_arrays([column, pa.array(patch, pa.string())]).take(pa.array(index))
    keep = answers != _BLANK
    if not keep.all():
        parsed.blank = np.flatnonzero(~keep).tolist()
        column = column.filter(pa.array(keep))
    parsed.texts = column
    return parsed


def _line_bounds(block) -> tuple[np.ndarray, np.ndarray]:
    """Where each line of ``block`` (each ending with ``\\n``) starts and ends (its ``\\n``)."""
    ends = np.flatnonzero(np.frombuffer(block, dtype=np.uint8) == 10)
    starts = np.zeros(len(ends), dtype=np.int64)
    starts[1:] = ends[:-1] + 1
    return starts, ends


_NULL, _BLANK, _UNSURE = 1, 2, 3  # the scanner's answers other than a text (_jsonl_scan.h)
_SCAN = json.JSONDecoder().scan_once  # what json.loads runs, without its checks around it


def parse_spans(text: str, starts: np.ndarray, ends: np.ndarray, text_col: str, keep_columns: tuple[str, ...],
                replaced: np.ndarray | None = None) -> ParsedBatch:
    """Parse the lines ``text[starts[i]:ends[i]]``. Fast path: a line that is exactly one JSON
    object (no space around it) holding a string text is scanned in place, as ``json.loads``
    scans it (the object ends at its closing brace, whatever follows); every other line goes
    through :func:`parse_record`. ``replaced``: what decoding each line replaced."""
    parsed = ParsedBatch(len(starts))
    if replaced is not None:
        parsed.replaced += replaced
    scan, texts, kept, replaced = _SCAN, parsed.texts, parsed.kept, parsed.replaced
    for i, (lo, hi) in enumerate(zip(starts.tolist(), ends.tolist())):
        record = value = None
        if lo < hi and text[lo] == "{":
            try:
                record, end = scan(text, lo)
            except (ValueError, StopIteration):
                end = -1
            if end == hi:
                value = record.get(text_col)
        if type(value) is str:
            if not value.isascii():
                value, surrogates = clean_counted(value)
                replaced[i] += surrogates
            texts.append(value)
            if keep_columns:
                kept.append(_kept(record, keep_columns))
            continue
        value, kept_json, problem, surrogates = parse_record(text[lo:hi], text_col, keep_columns)
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
            # the block's first line starts after the first newline at or past its start
            return f"file {file}, line {_newlines_before(unquote(parsed.path), block) + 2 + index}"
        except OSError:
            pass
    return f"file {file}, line {index + 1} of the block at byte {block}"


def _newlines_before(path: str, offset: int) -> int:
    """The newlines in the first ``offset`` bytes of the local file at ``path``."""
    newlines = 0
    with open(path, "rb") as fh:
        remaining = offset
        while remaining > 0 and (chunk := fh.read(min(remaining, 8 << 20))):
            newlines += chunk.count(b"\n")
            remaining -= len(chunk)
    return newlines


# --- local files read by the encoding tasks -------------------------------------------------------
@dataclass(frozen=True)
class JsonlSource:
    """Local JSON Lines files (read as text splits, :mod:`bpe_spark.spark.read.text_splits`) whose
    records' ``text_col`` holds the documents, nothing kept beside it; ``fix``: the bad-record
    advice, in the words of the driver's interface."""

    text: TextSource
    text_col: str
    fix: str


_ATTRIBUTE = "_bpe_spark_jsonl_source"


def tag(df: DataFrame, files, text_col: str, on_bad_input: str) -> DataFrame:
    """Mark ``df`` (read by ``read_documents``, no kept columns) as holding the records of
    ``files``, if they are all local files the tasks can read; any transformation drops the mark."""
    text = local_source(files, on_bad_input)
    if text is not None:
        setattr(df, _ATTRIBUTE, JsonlSource(text, text_col, _fix()))
    return df


def source_of(df) -> JsonlSource | None:
    return getattr(df, _ATTRIBUTE, None)


def _fix() -> str:
    return (f"fix the input, choose the text field with {option('text_col')}, or pass "
            f"{option('on_bad_input', 'skip')} to skip such records")


class SplitRecords:
    """A task's reading of JSON Lines splits: the texts of each split's good records, the bad
    records skipped (``skipped``), the text rule's work counted in ``tally``."""

    def __init__(self, source: JsonlSource, tally: InputTally):
        self.source = source
        self.tally = tally
        self.skipped = 0

    def texts(self, split: Split, long_documents: bool = False) -> Iterator:
        """The texts (string, null for a JSON null) of the split's records, in line order, one
        array per block read; a bad record raises :class:`~bpe_spark.errors.BadInputError`
        naming its file and line, unless the source skips them. A record longer than
        ``LONG_DOCUMENT_BYTES`` is parsed in two passes over its bytes
        (:mod:`bpe_spark.bpe.long_records`): its text, when a long string, comes alone as a
        :class:`~bpe_spark.bpe.long_records.JsonText` with ``long_documents`` (read in pieces,
        never one ``str``), else as a one-text array."""
        lines = 0  # the split's lines in earlier blocks
        on_bad_input = self.source.text.on_bad_input
        for block in iter_blocks(split, tally=self.tally, on_bad_input=on_bad_input):
            if isinstance(block, LongDocument):
                value, problem, replaced = self._long_record(block)
                lines += 1
                if problem is not None and problem != "" and on_bad_input != "skip":
                    raise BadInputError(f"{_split_line(split, lines - 1)} is a bad JSON Lines record: {problem}; "
                                        f"{self.source.fix}")
                if problem is not None:
                    self.skipped += problem != ""
                    continue
                self.tally.count(replaced)
                if isinstance(value, JsonText):
                    yield value if long_documents else pa.array([value.text()], pa.string())
                else:
                    yield pa.array([value], pa.string())
                continue
            parsed = self._parse(block)
            if parsed.problem is not None and on_bad_input != "skip":
                row, problem = parsed.problem
                raise BadInputError(f"{_split_line(split, lines + row)} is a bad JSON Lines record: {problem}; "
                                    f"{self.source.fix}")
            lines += len(parsed.bad)
            keep = parsed.keep()
            good = parsed.bad[keep] == 0
            replaced = parsed.replaced[keep][good]  # a bad record's are not counted
            self.tally.count(int(replaced.sum()), int(np.count_nonzero(replaced)))
            self.skipped += len(good) - int(good.sum())
            texts = parsed.column()
            if not good.all():
                texts = texts.filter(pa.array(good))
            if len(texts):
                yield texts

    def _long_record(self, line: LongDocument) -> tuple:
        """``(text, problem, replaced)`` of one long line, as :func:`parse_record` gives them for
        the whole line: the text a ``str``, None (JSON null) or a :class:`JsonText`."""
        tally = line.tally = InputTally()  # its replacements count only if it is a good record
        try:
            scan = scan_record(line.pieces())
        except BadString as exc:
            return None, f"it is not JSON ({exc})", 0
        value, _, problem, surrogates = parse_record(scan.skeleton, self.source.text_col)
        if problem is not None:
            return None, problem, 0
        index = scan.long_index(value)
        if index is not None:
            start, end, surrogates = scan.longs[index]
            value = JsonText(line, start, end)
        return value, None, tally.replaced + surrogates

    def _parse(self, block) -> ParsedBatch:
        text_col = self.source.text_col
        if (scanned := scan_lines(block, None, None, text_col)) is not None:
            return scanned
        starts, ends = _line_bounds(block)
        try:
            text = block.decode("utf-8")
        except UnicodeDecodeError:
            lines, replaced = [], np.zeros(len(ends), dtype=np.int64)
            for i, (lo, hi) in enumerate(zip(starts.tolist(), ends.tolist())):
                line, replaced[i] = decode_counted(block[lo:hi])
                lines.append(line)
            text = "\n".join(lines)  # a "\n" between lines, as read: no line reads into the next
            lengths = np.fromiter(map(len, lines), dtype=np.int64, count=len(lines))
            starts = np.zeros(len(lines), dtype=np.int64)
            np.cumsum(lengths[:-1] + 1, out=starts[1:])
            return parse_spans(text, starts, starts + lengths, text_col, (), replaced)
        bounds = np.empty(2 * len(ends), dtype=np.int64)  # start, end, start, end...: non-decreasing
        bounds[0::2], bounds[1::2] = starts, ends
        positions = char_offsets(block, bounds)
        return parse_spans(text, positions[0::2], positions[1::2], text_col, ())


def _split_line(split: Split, index: int) -> str:
    """The place of the split's line ``index`` (counted from 0): the split owns the lines that
    start at or after its start (:mod:`bpe_spark.spark.read.text_splits`)."""
    if split.start <= 0:
        return f"file {split.uri or split.path}, line {index + 1}"
    # its first line starts after the first newline at or past the byte before its start
    return f"file {split.uri or split.path}, line {_newlines_before(split.path, split.start - 1) + 2 + index}"
