"""The document filter and the ids sidecar of binary shards (``encode_dataset``): who is kept,
and what a ``.bin`` shard cannot hold.

- :func:`keep_long_enough`: ``min_tokens`` (``--min-tokens N``) leaves out a document whose
  text encodes to fewer than ``N`` tokens. The count is of the text's own tokens, before the
  BOS/EOS ids are added (``--eos`` never rescues an empty document); a null document (no text)
  is not text and is kept (it counts in ``null_documents``). The documents left out are counted
  in the manifest's ``dropped_short_documents``; they take no ``doc_id``: the kept documents are
  numbered ``0, 1, 2...`` in input order, contiguous, as Megatron's ``.idx`` numbers them.
- :class:`SidecarWriter`: with id columns and ``output_format="bin"``, each shard
  ``shard-NNNNN`` gets ``shard-NNNNN.ids.parquet`` beside its ``.bin`` / ``.idx``: one row per
  document of the shard, in shard order, columns ``doc_id`` (int64, the dataset-wide number),
  the id columns as read, ``offset`` and ``length`` (int64, in tokens: the document is
  ``tokens[offset:offset + length]`` of the shard's ``.bin``, EOS/BOS included, as the ``.idx``
  says). Row groups of ``SIDECAR_ROWS`` rows, zstd: the same bytes whatever the partitioning.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pyarrow as pa

from bpe_spark.errors import ConfigError

SIDECAR_SUFFIX = ".ids.parquet"
SIDECAR_ROWS = 1 << 16  # rows per row group of a sidecar


def sidecar_columns(id_cols: Sequence[str]) -> list[str]:
    """The columns of a sidecar.

    >>> sidecar_columns(["url"])
    ['doc_id', 'url', 'offset', 'length']
    """
    return ["doc_id", *id_cols, "offset", "length"]


def check_min_tokens(min_tokens) -> int:
    if isinstance(min_tokens, bool) or not isinstance(min_tokens, int) or min_tokens < 0:
        raise ConfigError(f"min_tokens must be a non-negative integer, got {min_tokens!r}")
    return min_tokens


def keep_long_enough(input_ids: pa.ListArray, n_tokens: pa.Array, min_tokens: int, added: int):
    """The rows to keep (a boolean mask, or None: keep all) and how many are left out, for
    documents whose text has fewer than ``min_tokens`` tokens (``added``: the BOS/EOS ids in
    each non-null document's ``n_tokens``); nulls are kept.

    >>> ids = pa.array([[5, 9], [9], None, [1, 2, 9]], pa.list_(pa.int32()))
    >>> keep, dropped = keep_long_enough(ids, pa.array([2, 1, 0, 3], pa.int32()), 2, added=1)
    >>> keep.tolist(), dropped
    ([False, False, True, True], 2)
    """
    if min_tokens <= 0:
        return None, 0
    counts = n_tokens.to_numpy(zero_copy_only=False).astype(np.int64) - added
    keep = (counts >= min_tokens) | input_ids.is_null().to_numpy(zero_copy_only=False)
    dropped = int(len(keep) - keep.sum())
    return (None, 0) if not dropped else (keep, dropped)


class SidecarWriter:
    """One shard's sidecar: :meth:`add` a slice's rows (its id columns and ``n_tokens``) with the
    ``doc_id`` of its first row, :meth:`close` writes the file through ``opener(path)``."""

    def __init__(self, prefix: str, id_cols: Sequence[str], opener):
        self.path = prefix + SIDECAR_SUFFIX
        self.id_cols = list(id_cols)
        self.opener = opener
        self.tables: list[pa.Table] = []
        self.offset = 0

    def add(self, rows: pa.Table, first_doc: int) -> None:
        lengths = rows.column("n_tokens").to_numpy().astype(np.int64)
        offsets = self.offset + np.cumsum(lengths) - lengths
        self.offset += int(lengths.sum())
        columns = {"doc_id": pa.array(np.arange(first_doc, first_doc + rows.num_rows), type=pa.int64())}
        columns.update({name: rows.column(name) for name in self.id_cols})
        columns.update(offset=pa.array(offsets, type=pa.int64()), length=pa.array(lengths, type=pa.int64()))
        self.tables.append(pa.table(columns))

    def close(self) -> None:
        import pyarrow.parquet as pq

        if not self.tables:
            return
        table = pa.concat_tables(self.tables).combine_chunks()
        with self.opener(self.path) as sink:
            pq.write_table(table, sink, row_group_size=SIDECAR_ROWS, compression="zstd")


def short_documents(pieces: Sequence[dict], min_tokens: int) -> dict:
    """The manifest's ``min_tokens`` and ``dropped_short_documents`` from the pieces' totals."""
    return {"min_tokens": min_tokens, "dropped_short_documents": sum(piece.get("dropped_short", 0) for piece in pieces)}
