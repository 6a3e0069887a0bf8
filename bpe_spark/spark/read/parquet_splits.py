"""Local Parquet files read by the Python tasks themselves, for encoding.

Spark's Parquet reader turns each text into a JVM string, then into an Arrow batch for Python:
on en_books that hand-off costs about as much CPU as the encoding. When ``read_documents``
reads local Parquet files where every task sees them (a local master, or ``shared_input=True``)
and keeps only the text column, it tags the DataFrame with their list (:func:`tag`);
``encode_dataset`` then plans splits of whole row groups on the driver (:func:`plan_splits`)
and each task reads its split with pyarrow (:func:`iter_texts`): the text column as stored,
its bytes not copied, not checked (the text rule of :mod:`bpe_spark.bpe.text` applies after, as on
Spark's path). The documents are the same, in the same order (files in URI order, then rows),
so ``doc_id`` does not change; a split's segment key is ``(file URI, first row group)``.

Anything else keeps Spark's reader: other file systems, other columns, ``on_bad_input="skip"``
(Spark's ``ignoreCorruptFiles``), a file whose footer pyarrow cannot read or whose text column
is missing or not a string (Spark's reader then gives its own answer: the error, or nulls).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field

import pyarrow as pa

from bpe_spark.errors import BadInputError, current_interface, interface, option
from bpe_spark.spark.read.text_splits import local_files, split_target

BATCH_ROWS = 1 << 16  # rows per batch read: Arrow batches of a few MB of text


@dataclass(frozen=True)
class ParquetSource:
    """Local Parquet files whose column ``text_col`` holds the documents, in URI order."""

    files: tuple[str, ...]
    uris: tuple[str, ...]
    text_col: str


@dataclass(frozen=True)
class Split:
    path: str
    uri: str  # the file as Spark names it (input_file_name()): the ordering key
    row_groups: tuple[int, ...]
    text_col: str
    interface: str = field(default_factory=current_interface)  # planned on the driver: its messages' words


_ATTRIBUTE = "_bpe_spark_parquet_source"


def tag(df, files: Sequence[str], text_col: str):
    """Mark ``df`` (read by ``read_documents``) as holding column ``text_col`` of ``files``, if
    they are all local files; any transformation of ``df`` drops the mark."""
    local = local_files(files)
    if local:
        setattr(df, _ATTRIBUTE, ParquetSource(tuple(p for p, _ in local), tuple(u for _, u in local), text_col))
    return df


def source_of(df) -> ParquetSource | None:
    return getattr(df, _ATTRIBUTE, None)


def holds_text(kind: pa.DataType) -> bool:
    """Whether a Parquet column of Arrow type ``kind`` holds text: a string or large string,
    dictionary-encoded or not (:func:`iter_texts` decodes a dictionary).

    >>> [holds_text(t) for t in (pa.string(), pa.large_string(), pa.dictionary(pa.int32(), pa.string()), pa.int64())]
    [True, True, True, False]
    """
    if pa.types.is_dictionary(kind):
        kind = kind.value_type
    return pa.types.is_string(kind) or pa.types.is_large_string(kind)


def plan_splits(source: ParquetSource, parallelism: int) -> list[Split] | None:
    """Runs of whole row groups of about ``split_target`` bytes, in file order; None when a file's footer
    cannot be read or its text column is not a string (Spark's reader decides then)."""
    import pyarrow.parquet as pq

    files = []
    for path, uri in zip(source.files, source.uris):
        try:
            meta = pq.ParquetFile(path)
            schema = meta.schema_arrow
        except (OSError, pa.ArrowException):
            return None
        if source.text_col not in schema.names:
            return None
        if not holds_text(schema.field(source.text_col).type):
            return None
        sizes = [meta.metadata.row_group(i).total_byte_size for i in range(meta.metadata.num_row_groups)]
        files.append((path, uri, sizes))
    total = sum(sum(sizes) for _, _, sizes in files)
    target = split_target(total, parallelism)
    splits = []
    for path, uri, sizes in files:
        group: list[int] = []
        size = 0
        for index, group_size in enumerate(sizes):
            group.append(index)
            size += group_size
            if size >= target:
                splits.append(Split(path, uri, tuple(group), source.text_col))
                group, size = [], 0
        if group:
            splits.append(Split(path, uri, tuple(group), source.text_col))
    return splits


def iter_texts(split: Split) -> Iterator[pa.Array]:
    """The split's texts in row order, as Arrow arrays of the column as stored (string or
    large string, a dictionary-encoded one decoded; not checked as UTF-8); a file that cannot be read raises
    :class:`~bpe_spark.errors.BadInputError` naming it."""
    import pyarrow.parquet as pq

    try:
        reader = pq.ParquetFile(split.path)
        for batch in reader.iter_batches(batch_size=BATCH_ROWS, row_groups=list(split.row_groups),
                                         columns=[split.text_col], use_threads=False):
            column = batch.column(0)
            yield column.dictionary_decode() if pa.types.is_dictionary(column.type) else column
    except (OSError, pa.ArrowException) as exc:
        with interface(split.interface):  # built in a task, in the words of the driver's
            raise BadInputError(
                f"input file {split.uri} could not be read: corrupt or truncated ({exc}); repair or remove it, "
                f"or pass {option('on_bad_input', 'skip')} to skip it"
            ) from None
