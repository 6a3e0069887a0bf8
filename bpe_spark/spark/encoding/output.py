"""Where an encoded dataset's bytes go: the output directory, the pieces, the shards.

- :class:`Output`: the output directory on any file system the tasks write through pyarrow, the
  checks before any work (:meth:`Output.prepare`: the rules of :mod:`bpe_spark.storage.output_guard`),
  its hidden staging siblings (those of dead runs removed), and the commit with the ``_BPE_SPARK``
  marker: a rename into place, or on an object store file by file (:meth:`Output.publish`).
- :class:`PieceWriter`: the encoding tasks' intermediate files, one Arrow IPC piece per input
  segment, each moved into place only once complete (a retried task never leaves half a piece).
- :func:`plan_shards`: the cut of the document stream into shards of about ``shard_tokens``
  tokens, from the pieces' totals (the data decides it, never the partitioning).
- :func:`write_shards`: an I/O-only Spark job that writes each shard (Parquet row groups by
  :class:`RowGroupWriter`, or binary shards by :class:`~bpe_spark.datasets.megatron.ShardWriter`) from its
  slices of the pieces.
"""

from __future__ import annotations

import contextlib
import os
import uuid
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.fs as pafs
from pyspark.sql import types as T

from bpe_spark.storage import output_guard

from bpe_spark.storage import markers
from bpe_spark.datasets.formats import output_format as output_format_named
from bpe_spark.errors import ConfigError
from bpe_spark.storage.file_systems import ArrowFiles, is_object_store
from bpe_spark.datasets.megatron import shard_name
from bpe_spark.spark.runtime.faults import fail_once
from bpe_spark.spark.encoding.sidecar import SidecarWriter

KIND = "encoded"  # the marker's kind of an encoded dataset


class Output:
    """An encoded dataset's output directory, written by the tasks through pyarrow
    (:func:`~bpe_spark.spark.storage.uris.task_file_system`: local paths, ``s3://``, ``s3a://``,
    ``gs://``, ``abfs://``, ``hdfs://`` with libhdfs; any other scheme is refused here).

    Everything is written under a hidden staging sibling (:attr:`staging`: the pieces, and the
    shards' files while they are written). A local or HDFS output is then renamed into place
    (:meth:`publish`); on an object store, which cannot rename a directory, the shards are
    committed one by one into the output itself (:meth:`begin`), and :meth:`publish` writes
    the complete marker last.
    """

    def __init__(self, spark, uri: str):
        from bpe_spark.spark.storage.uris import task_file_system

        uri = str(uri)
        if output_guard.is_local(uri) and "://" not in uri:
            uri = os.path.abspath(uri)
        self.fs, path = task_file_system(spark, uri, option="encode output")
        self.path = path.rstrip("/") or "/"
        self.uri = uri
        parent, _, name = self.path.rpartition("/")
        if not name:
            raise ConfigError(f"output {uri!r} names no directory")
        self.parent = parent or "/"
        self.name = name
        self.files = ArrowFiles(self.fs)
        self.in_place = is_object_store(uri)
        self.staging = self.sibling("staging")
        self._begun = False

    def prepare(self, overwrite: bool, protected: Mapping[str, Iterable] | None = None) -> None:
        """Before any work: the output is clear of the ``protected`` paths, can be written, and
        may replace what is there; the staging siblings of dead runs are removed."""
        output_guard.prepare(self.uri, KIND, overwrite=overwrite, protected=protected, files=self.files,
                             path=self.path)

    def sibling(self, tag: str) -> str:
        return f"{self.parent}/{output_guard.staging_name(self.name, tag)}"

    def begin(self, overwrite: bool) -> str:
        """Where the finished files go: the staging directory, or (object stores) the output
        itself, claimed now with a ``writing`` marker (the earlier output's files deleted)."""
        if not self.in_place:
            return self.staging
        output_guard.begin_in_place(self.path, KIND, overwrite=overwrite, files=self.files)
        self._begun = True
        return self.path

    def publish(self, overwrite: bool) -> None:
        """Mark the finished output: rename the staging directory into place (replacing an earlier
        encoded dataset if asked), or, in place, write the complete marker."""
        if self.in_place:
            markers.write_marker(self.path, KIND, self.files)
            self._begun = False
            return
        markers.write_marker(self.staging, KIND, self.files)
        output_guard.publish(self.staging, self.path, KIND, overwrite=overwrite, files=self.files)

    def clean_up(self) -> None:
        """After success or failure: the staging directory goes; after a failure in place, what
        was written into the output too."""
        with contextlib.suppress(Exception):
            self.files.delete(self.staging)
        if self._begun:
            output_guard.discard_in_place(self.path, self.files)


# --- pieces -------------------------------------------------------------------------------------
PIECE_FIELDS = ("file", "block", "part", "seq", "piece", "documents", "tokens", "text_bytes", "nulls",
                "replaced", "affected", "skipped_files", "dropped_short",  # from replaced: what reading did (bpe_spark.bpe.text)
                "skipped_records")  # bad JSON Lines records skipped by the tasks that read them
_PIECE_TYPES = [pa.string(), pa.int64(), pa.int64(), pa.int64(), pa.string()] + [pa.int64()] * 9
PIECE_SCHEMA = T.StructType([
    T.StructField(name, T.StringType() if name in ("file", "piece") else T.LongType()) for name in PIECE_FIELDS
])


class PieceWriter:
    """One task's pieces: an Arrow IPC file per input segment, its documents in input order.

    ``start(key)`` opens the piece of a segment (``key``: its ``(file, block, part)``), ``write``
    adds a batch to it; :meth:`report` closes the last and gives every piece's key, sequence
    number in the task, file name and totals (``PIECE_FIELDS``) as one batch.
    """

    def __init__(self, fs, pieces_dir: str, partition: int, attempt_tag: str, *, name_tag: str = "",
                 on_piece=None):
        self.fs = fs
        self.name_tag = name_tag  # resumable runs: the run's tag, so new pieces never take a kept one's name
        self.on_piece = on_piece  # resumable runs: called with (path, row) once a piece is in place
        self.pieces_dir = pieces_dir
        self.partition = partition
        self.tag = attempt_tag
        self.key: tuple | None = None
        self.schema = None
        self.stats: list[tuple] = []
        self._piece: dict[str, Any] = {}

    def start(self, key: tuple) -> None:
        self._finish()
        seq = len(self.stats)
        name = f"piece-{self.name_tag}{self.partition:05d}-{seq:05d}.arrow"
        final = f"{self.pieces_dir}/{name}"
        tmp = f"{final}.tmp-{self.tag}"
        self.key = key
        self._piece = {"seq": seq, "name": name, "final": final, "tmp": tmp, "writer": None,
                       "sink": self.fs.open_output_stream(tmp), "documents": 0, "tokens": 0,
                       "text_bytes": 0, "nulls": 0, "replaced": 0, "affected": 0, "dropped": 0}

    def write(self, batch: pa.RecordBatch, *, tokens: int, text_bytes: int, nulls: int, replaced: int = 0,
              affected: int = 0, dropped: int = 0) -> None:
        piece = self._piece
        if piece["writer"] is None:
            self.schema = self.schema or batch.schema  # every piece of the task has one schema
            piece["writer"] = pa.ipc.new_file(piece["sink"], self.schema)
        piece["writer"].write_batch(batch)
        piece["documents"] += batch.num_rows
        piece["tokens"] += tokens
        piece["text_bytes"] += text_bytes
        piece["nulls"] += nulls
        piece["replaced"] += replaced
        piece["affected"] += affected
        piece["dropped"] += dropped  # documents --min-tokens left out (bpe_spark.spark.encoding.sidecar)

    def _finish(self) -> None:
        piece = self._piece
        if not piece:
            return
        piece["writer"].close()
        piece["sink"].close()
        if self.on_piece is not None and self.fs.get_file_info(f"{piece['final']}.json").type != pafs.FileType.NotFound:
            # a retried task of a resumable run: an earlier attempt finished and recorded this
            # piece (the same bytes), and a resumed run may be reading it; it stays as it is
            self.fs.delete_file(piece["tmp"])
        else:
            self.fs.move(piece["tmp"], piece["final"])
        self.stats.append((*self.key, piece["seq"], piece["name"], piece["documents"], piece["tokens"],
                           piece["text_bytes"], piece["nulls"], piece["replaced"], piece["affected"], 0,
                           piece["dropped"], 0))
        self._piece = {}
        if self.on_piece is not None:
            self.on_piece(piece["final"], dict(zip(PIECE_FIELDS, self.stats[-1])))

    def report(self, skipped_files: int = 0, skipped_records: int = 0) -> Iterator[pa.RecordBatch]:
        """The pieces' keys and totals; ``skipped_files`` or ``skipped_records`` add a row of task
        totals (no piece: its name is ``""``)."""
        self._finish()
        if skipped_files or skipped_records:
            self.stats.append(("", -1, self.partition, -1, "", 0, 0, 0, 0, 0, 0, skipped_files, 0, skipped_records))
        if self.stats:
            columns = list(zip(*self.stats))
            yield pa.RecordBatch.from_arrays([pa.array(c, type=t) for c, t in zip(columns, _PIECE_TYPES)],
                                             PIECE_FIELDS)


def read_piece(fs, path: str) -> pa.Table:
    if isinstance(fs, pafs.LocalFileSystem):
        return pa.ipc.open_file(pa.memory_map(path)).read_all()
    return pa.ipc.open_file(fs.open_input_file(path)).read_all()


# --- shards -------------------------------------------------------------------------------------
def plan_shards(pieces: list[dict], shard_tokens: int, fs, pieces_dir: str, prefix: str) -> list[dict]:
    """Cut the documents, in order, into shards of about ``shard_tokens`` tokens.

    A document goes to the shard where its first token falls (token offset // shard_tokens), so
    the cut depends on the data only, never on the partitioning. Only the pieces in which a cut
    falls are opened, to find the document it falls on. Each shard: ``index``, ``name``,
    ``first`` document, ``documents`` and ``slices`` ``(piece, lo, hi, first document)``.
    """
    shards: list[dict] = []
    document = token = 0
    for piece in pieces:
        if piece["documents"] == 0:
            continue
        first_shard = token // shard_tokens
        if (token + piece["tokens"]) // shard_tokens == first_shard:
            doc_shards = np.full(piece["documents"], first_shard, dtype=np.int64)
        else:
            n_tokens = read_piece(fs, f"{pieces_dir}/{piece['piece']}").column("n_tokens").to_numpy()
            doc_shards = (token + np.cumsum(n_tokens) - n_tokens) // shard_tokens
        starts = [0, *(np.flatnonzero(np.diff(doc_shards)) + 1).tolist()]
        ends = [*starts[1:], piece["documents"]]
        for lo, hi in zip(starts, ends):
            if not shards or shards[-1]["raw"] != int(doc_shards[lo]):
                shards.append({"raw": int(doc_shards[lo]), "first": document + lo, "documents": 0, "slices": []})
            shards[-1]["documents"] += hi - lo
            shards[-1]["slices"].append((piece["piece"], lo, hi, document + lo))
        document += piece["documents"]
        token += piece["tokens"]
    for index, entry in enumerate(shards):
        entry.update(index=index, name=shard_name(index, len(shards), prefix))
    return shards


_WRITTEN_SCHEMA = pa.schema([(name, pa.int64()) for name in ("index", "documents", "tokens", "bytes")])


def write_shards(spark, plan: list[dict], **options) -> dict[int, dict]:
    """Run the job that writes the planned shards (one task each); ``{index: its totals}``.

    ``options``: ``fs``, ``staging``, ``dest``, ``pieces_dir``, ``output_format``, ``dtype``,
    ``id_cols`` (and ``tokenizer``: the name in datatrove metadata) of :func:`_assemble_shards`."""
    if not plan:
        return {}
    specs = [{key: entry[key] for key in ("index", "name", "documents", "slices")} for entry in plan]
    tag = uuid.uuid4().hex[:8]

    def assemble_batches(batches):
        # one shard per row of spark.range: the same (SQL) Python workers as the encoding job,
        # so no second worker pool starts
        wanted = [specs[i] for batch in batches for i in batch.column(0).to_pylist()]
        for row in _assemble_shards(wanted, attempt_tag=tag, **options):
            yield pa.RecordBatch.from_pylist([row], schema=_WRITTEN_SCHEMA)

    shard_ids = spark.range(0, len(specs), 1, numPartitions=len(specs))
    written_type = T.StructType([T.StructField(name, T.LongType()) for name in _WRITTEN_SCHEMA.names])
    return {row["index"]: row.asDict() for row in shard_ids.mapInArrow(assemble_batches, written_type).collect()}


def _assemble_shards(specs, *, fs, staging, dest, pieces_dir, output_format, dtype, id_cols: Sequence[str],
                     attempt_tag, tokenizer: str = ""):
    """Task body: write each shard from its slices of the pieces; yield its totals. Each file is
    written under ``staging`` and moved to ``dest`` once complete (on an object store, a copy:
    a failed attempt's partial file never reaches ``dest``)."""
    import pyarrow.parquet as pq
    from pyspark import TaskContext

    tag = f"{attempt_tag}-{TaskContext.get().partitionId()}-{TaskContext.get().attemptNumber()}"
    make_writer = output_format_named(output_format).writer  # None: rows in Parquet
    for spec in specs:
        moves = []

        def opener(path: str, moves=moves):
            moves.append((f"{staging}/{path.rpartition('/')[2]}.tmp-{tag}", path))
            return fs.open_output_stream(moves[-1][0])

        prefix = f"{dest}/{spec['name']}"
        tokens = 0
        writer = make_writer(prefix, dtype, tokenizer, opener) if make_writer is not None else None
        sidecar = SidecarWriter(prefix, id_cols, opener) if writer is not None and id_cols else None
        parquet = sink = None
        for piece, lo, hi, first_doc in spec["slices"]:
            rows = read_piece(fs, f"{pieces_dir}/{piece}").slice(lo, hi - lo)
            tokens += int(pc.sum(rows.column("n_tokens")).as_py() or 0)
            if writer is not None:
                for ids in rows.column("input_ids").chunks:  # each chunk's ids as they are: no combined copy
                    writer.add_documents(ids.values.to_numpy(zero_copy_only=False), ids.offsets.to_numpy())
                if sidecar is not None:  # the id columns: beside the shard (bpe_spark.spark.encoding.sidecar)
                    sidecar.add(rows, first_doc)
                continue
            if id_cols:
                table = rows.select([*id_cols, "input_ids", "n_tokens"])
            else:
                doc_ids = rows.column("doc_id") if "doc_id" in rows.column_names else \
                    pa.array(np.arange(first_doc, first_doc + rows.num_rows), type=pa.int64())  # shuffled: its own
                table = pa.table({"doc_id": doc_ids, "input_ids": rows.column("input_ids"),
                                  "n_tokens": rows.column("n_tokens")})
            if parquet is None:
                sink = opener(prefix + ".parquet")
                longest = _longest_document(fs, pieces_dir, spec["slices"])
                options = parquet_options(longest, table.schema.names)
                parquet = RowGroupWriter(pq.ParquetWriter(sink, table.schema, **options))
            parquet.add(table)
        if writer is not None:
            writer.close()
            if sidecar is not None:
                sidecar.close()
        elif parquet is not None:
            parquet.close()
            sink.close()
        size = 0
        for tmp, final in moves:
            fs.move(tmp, final)
            size += fs.get_file_info(final).size
        fail_once("shards")  # the test hook (faults.py): off unless a test asks
        yield {"index": spec["index"], "documents": spec["documents"], "tokens": tokens, "bytes": size}


LONG_ROW_TOKENS = 1 << 20  # a shard holding a document of this many tokens is written as below


def parquet_options(longest: int, columns: Sequence[str]) -> dict:
    """The Parquet writer's options for a shard of ``columns`` whose longest document has
    ``longest`` tokens.

    Arrow writes one document's ids as one data page, built whole in memory; for a long
    document a dictionary (a hash table of every id) and a version 1 page (levels and values
    copied into one buffer before compression) each cost about the ids' size again. So a shard
    holding a document of ``LONG_ROW_TOKENS`` or more is written with plain ids in version 2
    pages (files about 2% larger on long text, read alike by pyarrow and Spark); other shards
    keep dictionary ids in version 1 pages. The data decides, never the partitioning.

    >>> parquet_options(10, ["doc_id", "input_ids", "n_tokens"])
    {'compression': 'zstd'}
    >>> parquet_options(LONG_ROW_TOKENS, ["doc_id", "input_ids", "n_tokens"])
    {'compression': 'zstd', 'use_dictionary': ['doc_id', 'n_tokens'], 'data_page_version': '2.0'}
    """
    if longest < LONG_ROW_TOKENS:
        return {"compression": "zstd"}
    others = [name for name in columns if name != "input_ids"]
    return {"compression": "zstd", "use_dictionary": others, "data_page_version": "2.0"}


def _longest_document(fs, pieces_dir: str, slices) -> int:
    """The most tokens of one document in a shard's ``slices`` (only their ``n_tokens`` is read)."""
    longest = 0
    for piece, lo, hi, _ in slices:
        n_tokens = read_piece(fs, f"{pieces_dir}/{piece}").column("n_tokens").slice(lo, hi - lo)
        longest = max(longest, int(pc.max(n_tokens).as_py() or 0))
    return longest


class RowGroupWriter:
    """Parquet row groups cut by the document stream alone (a group ends at the first document
    that brings it to ``max_tokens`` tokens or ``max_rows`` rows), never by how the input was
    split into pieces: the same bytes whatever the partitioning."""

    def __init__(self, writer, max_tokens: int = 1 << 22, max_rows: int = 1 << 16):
        self.writer = writer
        self.max_tokens = max_tokens
        self.max_rows = max_rows
        self.pending: list[pa.Table] = []

    def add(self, table: pa.Table) -> None:
        self.pending.append(table)
        self._flush(final=False)

    def _flush(self, final: bool) -> None:
        if not self.pending:
            return
        table = pa.concat_tables(self.pending)
        self.pending = []
        tokens = np.cumsum(table.column("n_tokens").to_numpy(zero_copy_only=False))
        start = 0  # the group being cut begins at row `start`, after `done` tokens
        while start < table.num_rows:
            done = tokens[start - 1] if start else 0
            full = start + int(np.searchsorted(tokens[start:], done + self.max_tokens))  # first row reaching it
            end = min(full + 1, start + self.max_rows)
            if end > table.num_rows:
                if final:
                    self.writer.write_table(table.slice(start), row_group_size=table.num_rows - start)
                else:
                    self.pending = [table.slice(start)]
                return
            self.writer.write_table(table.slice(start, end - start), row_group_size=end - start)
            start = end

    def close(self) -> None:
        self._flush(final=True)
        self.writer.close()
