"""The output formats of an encoded dataset, in one table: what each writes per shard, with which
writer, and what else goes beside the shards. ``encode_dataset``, ``bpe-spark encode`` and its
help read them from here; adding a format is its writer's module and one row of
:data:`OUTPUT_FORMATS`.

- ``parquet``: one Parquet file a shard (``doc_id`` or the id columns, ``input_ids``, ``n_tokens``),
  written by the shard tasks' Parquet writer;
- ``bin``: Megatron's ``.bin`` token stream and ``.idx`` index (:mod:`bpe_spark.datasets.megatron`),
  with ``data_paths.txt`` beside the shards;
- ``datatrove``: datatrove's ``.ds``/``.ds.index``/``.ds.metadata`` (:mod:`bpe_spark.datasets.datatrove`).

Token-stream formats (a writer) store the ids in the token type ``--dtype`` chooses and keep id
columns in a sidecar beside each shard; Parquet stores int32 ids and the id columns themselves.

>>> output_format("bin").shard_files("shard-00000")
['shard-00000.bin', 'shard-00000.idx']
>>> [name for name, fmt in OUTPUT_FORMATS.items() if fmt.token_stream]
['bin', 'datatrove']
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import BinaryIO

from bpe_spark.datasets import datatrove, megatron
from bpe_spark.errors import ConfigError, option_name

Opener = Callable[[str], BinaryIO]


@dataclass(frozen=True)
class OutputFormat:
    """One output format: ``help`` (what it writes, for ``--output-format``), ``shard_files`` (a
    shard's file names from its name), ``writer`` (``(prefix, dtype, tokenizer, opener)`` -> a
    :class:`~bpe_spark.datasets.megatron.TokenStreamWriter`; None: rows in Parquet) and
    ``data_paths`` (``data_paths.txt`` beside the shards, for Megatron's ``--data-args-path``)."""

    name: str
    help: str
    shard_files: Callable[[str], list[str]]
    writer: Callable[[str, object, str, Opener], megatron.TokenStreamWriter] | None = None
    data_paths: bool = False

    @property
    def token_stream(self) -> bool:
        """Whether shards are flat token streams (a token type, a sidecar for id columns)."""
        return self.writer is not None

    @property
    def file_label(self) -> str:
        """What its output files are called in names and messages: shards or Parquet parts."""
        return "shard" if self.token_stream else "part"


OUTPUT_FORMATS: dict[str, OutputFormat] = {
    fmt.name: fmt
    for fmt in (
        OutputFormat("parquet", "Parquet parts", lambda name: [name + ".parquet"]),
        OutputFormat(
            "bin", "binary token shards (Megatron .bin/.idx + data_paths.txt)",
            lambda name: [name + ".bin", name + ".idx"],
            writer=lambda prefix, dtype, tokenizer, opener: megatron.ShardWriter(prefix, dtype, opener=opener),
            data_paths=True,
        ),
        OutputFormat(
            "datatrove", "datatrove's .ds/.ds.index/.ds.metadata files", datatrove.shard_files,
            writer=lambda prefix, dtype, tokenizer, opener: datatrove.DatatroveWriter(prefix, dtype, tokenizer,
                                                                                     opener=opener),
        ),
    )
}
DEFAULT_OUTPUT_FORMAT = "parquet"
TOKEN_STREAM_FORMATS = tuple(name for name, fmt in OUTPUT_FORMATS.items() if fmt.token_stream)


def output_format(name: str) -> OutputFormat:
    """The format called ``name``; an unknown one is a :class:`~bpe_spark.errors.ConfigError`."""
    fmt = OUTPUT_FORMATS.get(name)
    if fmt is None:
        raise ConfigError(f"{option_name('output_format')} must be one of {tuple(OUTPUT_FORMATS)}, got {name!r}")
    return fmt
