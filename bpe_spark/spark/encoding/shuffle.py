"""Shuffled and split encoded datasets (``encode_dataset(shuffle=True, seed=N, splits=...)``):
the job that re-pieces the encoded documents in their output order.

After the encoding job, the driver knows each piece's first ``doc_id`` (its place in input order).
One Spark job then reads the pieces, gives each document its split and its order key
(:mod:`bpe_spark.datasets.doc_order`: seeded hashes of the doc id, or the doc id itself without
``shuffle``) and a bucket (a range of that order), routes the documents through a Spark shuffle
by (split, bucket), sorts each partition by (split, bucket, key, doc id) and writes one piece per
bucket, ``doc_id`` column included. The driver only sees per-bucket totals; the existing shard plan
and shard writer (:mod:`bpe_spark.spark.encoding.output`) then cut each split's buckets, in order, into
shards of about ``shard_tokens`` tokens. The order is a total order on doc ids, so the bytes do
not depend on the partitioning.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql import types as T

from bpe_spark.datasets import doc_order
from bpe_spark.datasets.formats import output_format as output_format_named
from bpe_spark.spark.encoding.output import PIECE_SCHEMA, PieceWriter, plan_shards, read_piece, write_shards

_BATCH_ROWS = 4096


@dataclass(frozen=True)
class DocOrder:
    """What ``encode_dataset`` was asked about order and splits."""

    shuffle: bool = False
    seed: int | None = None
    splits: tuple[tuple[str, float], ...] = ()

    @classmethod
    def of(cls, shuffle: bool, seed: int | None, splits) -> DocOrder:
        seed = doc_order.check_seed(seed)
        if isinstance(splits, str):
            splits = [splits]
        elif isinstance(splits, dict):
            splits = [f"{name}={share}" for name, share in splits.items()]
        pairs = doc_order.parse_splits(splits)
        return cls(bool(shuffle), seed, pairs)

    @property
    def active(self) -> bool:
        return self.shuffle or bool(self.splits)

    def record(self) -> dict:
        """The manifest's ``order``."""
        return {"shuffle": self.shuffle, "seed": self.seed if self.shuffle or self.splits else None,
                "key": "splitmix64(doc_id + blake2b(seed))" if self.shuffle else "doc_id"}


def write_ordered(spark, pieces: list[dict], order: DocOrder, *, fs, staging: str, dest: str, pieces_dir: str,
                  id_fields: Sequence[T.StructField], shard_tokens: int, output_format: str, dtype,
                  describe: Callable[[list, list, dict], dict], tokenizer: str = "") -> tuple[list[dict], dict[int, dict], list[dict]]:
    """Re-piece ``pieces`` in output order, then plan and write every split's shards.

    Returns the combined plan and written totals (shard names under their split directory when
    there are splits) and the split manifests (written here); ``describe(pieces, plan, written)``
    makes a manifest."""
    ordered_dir = f"{staging}/_ordered"
    fs.create_dir(ordered_dir, recursive=True)
    groups = _reorder(spark, pieces, order, fs=fs, pieces_dir=pieces_dir, out_dir=ordered_dir,
                      id_fields=id_fields, shard_tokens=shard_tokens)
    names = doc_order.split_names(order.splits) if order.splits else [None]
    prefix = output_format_named(output_format).file_label
    plan_all: list[dict] = []
    written_all: dict[int, dict] = {}
    split_manifests = []
    for index, name in enumerate(names):
        split_pieces = groups.get(index, [])
        where = f"{dest}/{name}" if name else dest
        if name:
            fs.create_dir(where, recursive=True)
        plan = plan_shards(split_pieces, shard_tokens, fs, ordered_dir, prefix)
        written = write_shards(spark, plan, fs=fs, staging=staging, dest=where, pieces_dir=ordered_dir,
                               output_format=output_format, dtype=dtype, id_cols=[f.name for f in id_fields],
                               tokenizer=tokenizer)
        for entry in plan:
            number = len(plan_all)
            plan_all.append({**entry, "index": number, "name": f"{name}/{entry['name']}" if name else entry["name"]})
            written_all[number] = written[entry["index"]]
        if name:
            manifest = describe(split_pieces, plan, written)
            manifest.update(split=name, bytes=None, bytes_per_token=None, order=order.record())
            split_manifests.append(manifest)
    fs.delete_dir(ordered_dir)
    return plan_all, written_all, split_manifests


def splits_record(order: DocOrder, split_manifests: list[dict]) -> list[dict]:
    """The top manifest's ``splits``."""
    shares = dict(order.splits)
    rest = 1 - sum(shares.values())
    return [{"name": m["split"], "directory": m["split"], "fraction": round(shares.get(m["split"], rest), 12),
             "documents": m["documents"], "tokens": m["tokens"], "shards": len(m["shards"])} for m in split_manifests]


def _reorder(spark, pieces, order: DocOrder, *, fs, pieces_dir, out_dir, id_fields, shard_tokens) -> dict[int, list]:
    """The Spark job: ``{split index: its bucket pieces in order}``."""
    from pyspark.sql.pandas.types import to_arrow_schema

    specs, first = [], 0
    for piece in pieces:
        if piece["documents"]:
            specs.append((piece["piece"], first))
        first += piece["documents"]
    if not specs:
        return {}
    total_docs, total_tokens = first, sum(piece["tokens"] for piece in pieces)
    shares = [share for _, share in order.splits] + [1 - sum(share for _, share in order.splits)]
    bits = [doc_order.bucket_bits(int(total_tokens * share) + 1, shard_tokens) for share in shares]
    id_names = [f.name for f in id_fields]
    schema = T.StructType([T.StructField("__split", T.LongType()), T.StructField("__bucket", T.LongType()),
                           T.StructField("__key", T.LongType()), T.StructField("doc_id", T.LongType()),
                           *id_fields, T.StructField("input_ids", T.ArrayType(T.IntegerType())),
                           T.StructField("n_tokens", T.IntegerType())])
    arrow_schema = to_arrow_schema(schema)

    def keyed(batches):
        for batch in batches:
            for index in batch.column(0).to_pylist():
                name, base = specs[index]
                table = read_piece(fs, f"{pieces_dir}/{name}")
                doc_ids = np.arange(base, base + table.num_rows, dtype=np.int64)
                split = doc_order.split_of(doc_ids, order.seed, order.splits)
                if order.shuffle:
                    keys = doc_order.order_keys(doc_ids, order.seed)
                    bucket = np.zeros(len(doc_ids), np.int64)
                    for s, b in enumerate(bits):
                        mask = split == s
                        bucket[mask] = doc_order.buckets(keys[mask], b)
                else:
                    keys = doc_ids
                    bucket = (doc_ids << np.asarray(bits, dtype=np.int64)[split]) // max(total_docs, 1)
                columns = [pa.array(split), pa.array(bucket), pa.array(keys), pa.array(doc_ids),
                           *[table.column(c) for c in id_names], table.column("input_ids"), table.column("n_tokens")]
                out = pa.table(columns, names=arrow_schema.names).cast(arrow_schema)
                yield from out.to_batches(max_chunksize=_BATCH_ROWS)

    def write(batches):
        from pyspark import TaskContext

        context = TaskContext.get()
        writer = PieceWriter(fs, out_dir, context.partitionId(), f"o{context.attemptNumber()}")
        for batch in batches:
            if batch.num_rows == 0:
                continue
            splits = batch.column(0).to_numpy()
            bucket = batch.column(1).to_numpy()
            change = np.ones(batch.num_rows, dtype=bool)
            change[1:] = (splits[1:] != splits[:-1]) | (bucket[1:] != bucket[:-1])
            starts = [*np.flatnonzero(change).tolist(), batch.num_rows]
            for lo, hi in itertools.pairwise(starts):
                key = ("", int(splits[lo]), int(bucket[lo]))
                if writer.key != key:
                    writer.start(key)
                part = batch.slice(lo, hi - lo)
                kept = pa.RecordBatch.from_arrays([part.column(i) for i in range(3, part.num_columns)],
                                                  part.schema.names[3:])
                writer.write(kept, tokens=int(pc.sum(kept.column("n_tokens")).as_py() or 0), text_bytes=0,
                             nulls=kept.column("input_ids").null_count)
        yield from writer.report()

    partitions = max(1, min(sum(1 << b for b in bits), 4 * spark.sparkContext.defaultParallelism))
    frame = (spark.range(0, len(specs), 1, numPartitions=len(specs)).mapInArrow(keyed, schema)
             .repartition(partitions, "__split", "__bucket")
             .sortWithinPartitions("__split", "__bucket", "__key", "doc_id")
             .mapInArrow(write, PIECE_SCHEMA))
    rows = [row.asDict() for row in frame.collect() if row["piece"]]
    groups: dict[int, list] = {}
    for row in sorted(rows, key=lambda r: (r["block"], r["part"])):
        groups.setdefault(row["block"], []).append(row)
    return groups
