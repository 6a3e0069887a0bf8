"""The encoding job of ``encode_dataset`` (docs/design.md 2.2, step 1): each task encodes its rows into one
Arrow piece per input segment (:class:`~bpe_spark.spark.encoding.output.PieceWriter`) and reports the
pieces' totals. Local text, Parquet and JSON Lines files tagged by ``read_documents`` are read
by the tasks themselves, one split per task (:mod:`bpe_spark.spark.read.text_splits`,
:mod:`bpe_spark.spark.read.parquet_splits`, :mod:`bpe_spark.spark.read.jsonl`); anything else goes through
the DataFrame, numbered by segment (:func:`~bpe_spark.spark.read.segments.segmented`)."""

from __future__ import annotations

import uuid
from collections.abc import Collection
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc

from bpe_spark.bpe.long_documents import LongDocument
from bpe_spark.bpe.long_records import JsonText
from bpe_spark.spark.encoding import resume
from bpe_spark.spark.read import jsonl, parquet_splits, text_splits
from bpe_spark.spark.encoding.tasks import IDS, TEXT, ModelBroadcast, encoded_slices, id_columns
from bpe_spark.spark.read.segments import segment_columns, segment_key, segment_runs, segmented
from bpe_spark.spark.runtime.columns import col
from bpe_spark.spark.encoding.output import PIECE_SCHEMA, PieceWriter
from bpe_spark.spark.encoding.sidecar import keep_long_enough
from bpe_spark.bpe.text import InputTally


def encode_to_pieces(df, model: ModelBroadcast, *, text_col, id_cols, fs, pieces_dir, short=(0, 0),
                      resumed=None, id_type: pa.DataType = IDS) -> tuple[list[dict], int | None]:
    """Run the encoding job (then unpersist ``model``): one Arrow piece per input segment, its
    ids as ``id_type`` (the shards' token type: for ``bin`` shards of uint16 the pieces hold half
    the bytes, and the shards take them as they are); the pieces in document order, and what
    reading counted: ``skipped_files``, the corrupt files skipped (None when Spark's reader read
    the files: it skips without telling), and, when the tasks parsed JSON Lines themselves,
    ``skipped_records``."""
    spark = df.sparkSession
    source, parquet, records = text_splits.source_of(df), parquet_splits.source_of(df), jsonl.source_of(df)
    splits = tables = None
    if records is not None and resumed is not None:
        records = None  # resumed: Spark's reader, whose count of bad records covers the kept pieces too
    if not id_cols and df.columns == [text_col]:
        if source is not None:
            splits = text_splits.plan_splits(source, spark.sparkContext.defaultParallelism)
        elif parquet is not None:
            tables = parquet_splits.plan_splits(parquet, spark.sparkContext.defaultParallelism)
        elif records is not None:
            splits = text_splits.plan_splits(records.text, spark.sparkContext.defaultParallelism)
            source = records.text
    else:
        records = None
    skip = resumed.skip_keys() if resumed else set()
    by_tasks = splits is not None or bool(tables)
    if skip and splits is not None:  # resumed: the finished splits are not read at all
        splits = [split for split in splits if (split.uri, split.start, -1) not in skip]
    elif skip and tables:
        tables = [split for split in tables if (split.uri, split.row_groups[0], -1) not in skip]
    if by_tasks:
        count = len(splits if splits is not None else tables)
        frame = spark.range(0, count, 1, numPartitions=max(1, count))
    else:
        frame = segmented(df)
        # plain names for the Python stage (pyspark's mapInArrow resolves each column by its name)
        frame = frame.select(*[col(c).alias(f"{TEXT}_id{i}") for i, c in enumerate(id_cols)],
                             col(text_col).alias(TEXT), *segment_columns(frame))
    tag = uuid.uuid4().hex[:8]

    on_bad_input = source.on_bad_input if source is not None else "error"
    recorder = resume.piece_recorder(fs, resume.fault_from(spark)) if resumed else None
    name_tag = f"{resumed.run}-" if resumed else ""

    def run(batches):
        read = InputTally()
        reader = None
        if records is not None:
            reader = jsonl.SplitRecords(records, read)
            batches = _record_batches(batches, splits, reader)
        elif splits is not None:
            batches = _split_batches(batches, splits, read, on_bad_input)
        elif by_tasks:
            batches = _table_batches(batches, tables)
        yield from _encode_pieces(batches, model=model, keep_names=list(id_cols), fs=fs, pieces_dir=pieces_dir,
                                  attempt_tag=tag, read=read, skip=skip, recorder=recorder, name_tag=name_tag,
                                  short=short, skipped_records=lambda: reader.skipped if reader else 0,
                                  id_type=id_type)

    try:
        rows = [row.asDict() for row in frame.mapInArrow(run, PIECE_SCHEMA).collect()]
    finally:
        model.unpersist()
    rows += resumed.kept_rows() if resumed else []
    pieces = sorted((row for row in rows if row["piece"]), key=lambda p: (p["file"], p["block"], p["part"], p["seq"]))
    skipped = sum(row["skipped_files"] for row in rows) if splits is not None else None
    if resumed:
        resumed.record_all(pieces)
    reading = {"skipped_files": skipped}
    if records is not None:  # the tasks parsed the records: Spark's reader, and its count, never ran
        reading["skipped_records"] = sum(row["skipped_records"] for row in rows)
    return pieces, reading


def _encode_pieces(batches, *, model: ModelBroadcast, keep_names: list[str], fs, pieces_dir, attempt_tag,
                   read: InputTally, skip: Collection[tuple] = (), recorder=None, name_tag: str = "", short=(0, 0),
                   skipped_records=lambda: 0, id_type: pa.DataType = IDS):
    """Task body: encode the task's rows into one piece per input segment (its documents in
    input order); yield the pieces' keys and totals (and the files ``read`` skipped, and
    ``skipped_records()``: the bad records the task's reader skipped, asked once all is read).
    Segments in ``skip`` (kept by a resumed run) are passed over."""
    from pyspark import TaskContext

    context = TaskContext.get()
    partition = context.partitionId()
    encoder = model.encoder()
    text_index = len(keep_names)
    pieces = PieceWriter(fs, pieces_dir, partition, f"{attempt_tag}-{context.attemptNumber()}", name_tag=name_tag,
                         on_piece=recorder)
    for batch in batches:
        if isinstance(batch, _LongRow):
            segment = segment_key(batch.file, batch.block, partition)
            if segment in skip:
                continue
            if pieces.key != segment:
                pieces.start(segment)
            input_ids, n_tokens = id_columns(*encoder.encode_long(batch.document), id_type)
            long_row = pa.RecordBatch.from_arrays([input_ids, n_tokens], ["input_ids", "n_tokens"])
            keep, dropped = keep_long_enough(input_ids, n_tokens, *short)
            pieces.write(long_row if keep is None else long_row.filter(pa.array(keep)),
                         tokens=0 if dropped else len(input_ids.values), nulls=0,
                         text_bytes=_text_bytes(batch.document),
                         replaced=read.replaced, affected=read.affected, dropped=dropped)
            read.replaced = read.affected = 0
            continue
        if isinstance(batch, _SplitRows):
            if not len(batch.text):
                continue
            runs = [(0, len(batch.text), segment_key(batch.file, batch.block, partition))]
            batch = pa.RecordBatch.from_arrays([batch.text], [TEXT])
        elif batch.num_rows == 0:
            continue
        else:
            runs = segment_runs(batch, partition)
        for lo, hi, segment in runs:
            if segment in skip:
                continue
            if pieces.key != segment:
                pieces.start(segment)
            run = batch.slice(lo, hi - lo)
            for _, part, input_ids, n_tokens, byte_lengths in encoded_slices(encoder, run, text_index, read,
                                                                              id_type):
                columns = [part.column(i) for i in range(text_index)] + [input_ids, n_tokens]
                encoded = pa.RecordBatch.from_arrays(columns, [*keep_names, "input_ids", "n_tokens"])
                keep, dropped = keep_long_enough(input_ids, n_tokens, *short)  # --min-tokens
                if keep is not None:
                    encoded = encoded.filter(pa.array(keep))
                pieces.write(encoded, tokens=int(pc.sum(encoded.column("n_tokens")).as_py() or 0),
                             text_bytes=int(byte_lengths.sum()), nulls=input_ids.null_count,
                             replaced=read.replaced, affected=read.affected, dropped=dropped)
                read.replaced = read.affected = 0  # counted in this piece
    yield from pieces.report(read.skipped_files, skipped_records())


def _text_bytes(document: LongDocument) -> int:
    """The UTF-8 size of a long document's text, once it is encoded (a JSON text's differs from
    its bytes in the file)."""
    return document.text_bytes if isinstance(document, JsonText) else len(document)


def _split_batches(batches, splits: list[text_splits.Split], read: InputTally, on_bad_input: str):
    """The documents of the splits named by the task's rows (see
    :mod:`bpe_spark.spark.read.text_splits`), as :class:`_SplitRows`: Arrow text over the bytes read,
    no object per line; a long document as a :class:`_LongRow`."""
    for batch in batches:
        for index in batch.column(0).to_pylist():
            split = splits[index]
            for block in text_splits.iter_blocks(split, tally=read, on_bad_input=on_bad_input):
                if isinstance(block, LongDocument):  # it comes alone: never one str, nor Arrow
                    yield _LongRow(block, split.uri, split.start)
                else:
                    yield _SplitRows(text_splits.documents_array(block), split.uri, split.start)


def _record_batches(batches, splits: list[text_splits.Split], reader: jsonl.SplitRecords):
    """The texts of the JSON Lines records of the splits named by the task's rows, parsed here
    (:class:`~bpe_spark.spark.read.jsonl.SplitRecords`), as :class:`_SplitRows`; a long record's
    text as a :class:`_LongRow`."""
    for batch in batches:
        for index in batch.column(0).to_pylist():
            split = splits[index]
            for texts in reader.texts(split, long_documents=True):
                if isinstance(texts, JsonText):  # a long record's text: encoded in pieces, never one str
                    yield _LongRow(texts, split.uri, split.start)
                else:
                    yield _SplitRows(texts, split.uri, split.start)


def _table_batches(batches, splits: list[parquet_splits.Split]):
    """The texts of the Parquet splits named by the task's rows (see
    :mod:`bpe_spark.spark.read.parquet_splits`), as :class:`_SplitRows` keyed by first row group."""
    for batch in batches:
        for index in batch.column(0).to_pylist():
            split = splits[index]
            for texts in parquet_splits.iter_texts(split):
                yield _SplitRows(texts, split.uri, split.row_groups[0])


@dataclass(frozen=True)
class _SplitRows:
    """Documents of one split (one input segment): their bytes as read, with its file URI and
    block start."""

    text: pa.Array
    file: str
    block: int


@dataclass(frozen=True)
class _LongRow:
    """One document of a split too long for an Arrow batch of text (see
    :mod:`bpe_spark.bpe.long_documents`), with its segment's file URI and block start."""

    document: LongDocument
    file: str
    block: int
