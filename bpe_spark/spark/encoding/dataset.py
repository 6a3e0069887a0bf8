"""Encoded datasets (docs/design.md 2.2): ``encode_dataset(df, tok, out)`` writes Parquet parts or binary
shards, and the manifest that describes them.

Two Spark jobs, no shuffle, no cache, no second pass over the text:

1. the encoding job (:mod:`bpe_spark.spark.encoding.pieces`): each task encodes its rows
   (:mod:`bpe_spark.spark.encoding.tasks`) into one Arrow piece per input segment
   (:class:`~bpe_spark.spark.encoding.output.PieceWriter`) and reports the pieces' totals. Local text, Parquet and JSON Lines files tagged by ``read_documents`` are
   read by the tasks themselves, one split per task (:mod:`bpe_spark.spark.read.text_splits`,
   :mod:`bpe_spark.spark.read.parquet_splits`, :mod:`bpe_spark.spark.read.jsonl`: no JVM string per
   document, the text handed to the encoder as Arrow over the bytes read, JSON parsed in the
   same task); anything else goes through the DataFrame.
2. the driver sorts the pieces by segment key, which numbers the documents (``doc_id``: input
   order, as :func:`bpe_spark.spark.encode` numbers them, without its counting pass), plans the
   shards (:func:`~bpe_spark.spark.encoding.output.plan_shards`), and an I/O-only job writes each shard
   from slices of the pieces (:func:`~bpe_spark.spark.encoding.output.write_shards`).

Everything goes to a hidden staging sibling of the output (named for its owner, so the next run
removes those of dead runs), and is moved into place with ``_manifest.json`` and the
``_BPE_SPARK`` marker only when both jobs succeed; on an object store, where a directory cannot
be renamed, the shards are committed one by one into the output, the marker last
(:class:`~bpe_spark.spark.encoding.output.Output`).
"""

from __future__ import annotations

import datetime as _dt
import json
import time
from collections.abc import Collection, Sequence
from typing import Any, Literal

import numpy as np
import pyarrow as pa
from pyspark.sql import DataFrame

from bpe_spark.datasets import megatron
from bpe_spark.datasets.formats import OutputFormat
from bpe_spark.datasets.formats import output_format as output_format_named
from bpe_spark.encoding.options import EncodeOptions, encode_options
from bpe_spark.errors import ConfigError
from bpe_spark.spark.runtime.progress import OFF, Progress
from bpe_spark.datasets.megatron import MANIFEST_FORMAT, MANIFEST_NAME, MANIFEST_VERSION, token_dtype
from bpe_spark.spark.encoding import pieces as encode_pieces, resume as encode_resume
from bpe_spark.spark.encoding.tasks import ModelBroadcast, check_input
from bpe_spark.spark.runtime.failures import executor_error
from bpe_spark.spark.storage.hadoop import input_paths
from bpe_spark.spark.read.documents import local_input_bytes, with_reader_stats
from bpe_spark.spark.options import DEFAULT_SHARD_TOKENS
from bpe_spark.spark.encoding.output import Output, plan_shards, write_shards
from bpe_spark.spark.runtime.stage_progress import spark_phase
from bpe_spark.spark.encoding.shuffle import DocOrder, splits_record, write_ordered
from bpe_spark.spark.encoding.sidecar import (
    SIDECAR_SUFFIX,
    check_min_tokens,
    short_documents,
    sidecar_columns,
)
from bpe_spark.encoding.tokenizer import Tokenizer
from bpe_spark.models.fingerprint import decoding_fingerprint
from bpe_spark.spark.options import column_name


def encode_dataset(
    df: DataFrame,
    tok: Tokenizer,
    out: str,
    *,
    output_format: str = "parquet",
    text_col: str = "text",
    id_cols: Sequence[str] | None = None,
    eos: str | None = None,
    bos: str | None = None,
    eos_id: int | None = None,
    bos_id: int | None = None,
    allowed_special: Literal["all"] | Collection[str] = frozenset(),
    disallowed_special: Literal["all"] | Collection[str] = (),
    options: EncodeOptions | None = None,
    dtype: str = "auto",
    shard_tokens: int = DEFAULT_SHARD_TOKENS,
    overwrite: bool = False,
    min_tokens: int = 0,
    source: dict[str, Any] | None = None,
    progress: Progress | None = None,
    shuffle: bool = False,
    seed: int | None = None,
    splits: Sequence[str] | dict[str, float] | None = None,
    resume: bool = False,
) -> dict[str, Any]:
    """Encode ``df[text_col]`` and write it to ``out``: Parquet parts or binary shards + manifest.

    Text is taken by the rule of :mod:`bpe_spark.bpe.text` (invalid UTF-8 becomes U+FFFD); the
    manifest counts its ``replaced_sequences`` and ``affected_documents``, and the corrupt
    files skipped (``read_documents(on_bad_input="skip")``) among local text files.

    Ids and options as :func:`bpe_spark.spark.encode` (special-token text is ordinary text
    unless ``allowed_special`` names it). Documents are written in ``doc_id`` order (input
    order), cut into shards of about ``shard_tokens`` tokens at document boundaries:
    ``part-00000.parquet``... (columns: the id columns or ``doc_id``, ``input_ids``,
    ``n_tokens``) or ``shard-00000.bin`` + ``.idx`` (see :mod:`bpe_spark.datasets.megatron`; with
    ``data_paths.txt``, the prefixes for Megatron's ``--data-path``) or, ``output_format="datatrove"``,
    ``shard-00000.ds`` + ``.ds.index`` + ``.ds.metadata`` (:mod:`bpe_spark.datasets.datatrove`).
    With id columns, bin and datatrove shards also have ``shard-00000.ids.parquet`` (``doc_id``,
    the id columns, ``offset`` and ``length`` in tokens: :mod:`bpe_spark.spark.encoding.sidecar`).
    ``min_tokens``: leave out documents whose text has fewer tokens (BOS/EOS not counted; counted
    in ``dropped_short_documents``; the kept ones numbered contiguously). The same input and
    model give the same files, byte for byte, whatever the partitioning. Everything is
    written to a hidden sibling directory first and moved into place, with ``_manifest.json``,
    only when the job succeeds; a failed job leaves no output. Returns the manifest.

    ``shuffle=True``: documents in a pseudo-random order decided by ``seed`` (same seed, same
    bytes, whatever the partitioning; ``doc_id`` stays the input-order number). ``splits``:
    ``["validation=0.01"]`` (or ``{"validation": 0.01}``): each document goes by a seeded hash of
    its doc id to a named split or, the rest, to ``train``, each written to its own subdirectory
    with its own manifest (:mod:`bpe_spark.spark.encoding.shuffle`, :mod:`bpe_spark.datasets.doc_order`).

    ``out`` is a local (or shared) path or a URI the tasks write through pyarrow (``s3://``,
    ``s3a://`` with the session's ``fs.s3a.*`` settings, ``gs://``, ``abfs://``, ``hdfs://`` with
    libhdfs; another scheme is refused before any work): executors write the files directly, so
    on a cluster it must be a file system they all reach. ``progress``: a
    :class:`~bpe_spark.spark.runtime.progress.Progress` reporter for the encoding and writing jobs (default:
    silent); the files do not depend on it. ``resume``: keep the pieces a killed run with
    ``resume=True`` finished and encode only the rest (:mod:`bpe_spark.spark.encoding.resume`: the
    same input, model and options, else a ConfigError naming what differs; nothing to resume
    starts afresh); the manifest then adds ``resumed``.
    Before any work, ``out`` is refused (:class:`~bpe_spark.errors.OutputRefusedError`) when it
    is, holds or lies inside a file ``df`` reads or ``source``'s ``input`` or ``model``, cannot
    be written, or exists and is not an earlier encoded dataset (``overwrite`` replaces only
    those: :mod:`bpe_spark.storage.output_guard`).
    """
    text_col, id_cols = column_name(text_col), [column_name(c) for c in id_cols or ()]
    started = time.time()
    progress = progress or OFF
    fmt = output_format_named(output_format)
    if isinstance(shard_tokens, bool) or not isinstance(shard_tokens, int) or shard_tokens < 1:
        raise ConfigError(f"shard_tokens must be a positive integer, got {shard_tokens!r}")
    min_tokens = check_min_tokens(min_tokens)
    options = encode_options(options, allowed_special=allowed_special, disallowed_special=disallowed_special,
                             bos=bos, eos=eos, bos_id=bos_id, eos_id=eos_id).resolved(tok)
    id_cols = list(id_cols or [])
    if fmt.token_stream:
        numpy_dtype = token_dtype(tok.max_token_id, dtype)
    else:
        if dtype not in ("auto", "int32"):
            raise ConfigError(f"Parquet output stores input_ids as int32; dtype {dtype!r} applies to bin and "
                              "datatrove output only")
        token_dtype(tok.max_token_id, "auto")
        numpy_dtype = np.dtype("int32")
    order = DocOrder.of(shuffle, seed, splits)
    check_input(df, text_col, id_cols, ["input_ids", "n_tokens"] if id_cols else ["doc_id", "input_ids", "n_tokens"])
    output = Output(df.sparkSession, out)
    output.prepare(overwrite, {"input": input_paths(df, source), "model": [(source or {}).get("model")]})

    staging = output.staging
    resumed = None
    if resume:
        resumed = encode_resume.Resume(output, encode_resume.run_fingerprint(df, tok, options, {
            "output_format": output_format, "text_col": text_col, "id_cols": id_cols, "dtype": numpy_dtype.name,
            "shard_tokens": shard_tokens, "source": source or {}, "min_tokens": min_tokens,
            "order": order.record(), "splits": [list(pair) for pair in order.splits]}))
        resumed.acquire()
    else:
        encode_resume.remove_unused(output)
    pieces_dir = resumed.pieces_dir if resumed else f"{staging}/_pieces"
    fs = output.fs
    try:
        fs.create_dir(pieces_dir, recursive=True)
        if resumed:
            fs.create_dir(staging, recursive=True)
            resumed.load()
        with spark_phase(df.sparkSession, progress, "encoding", input_size=lambda: local_input_bytes(df)):
            model = ModelBroadcast(df.sparkSession, tok, options)
            short = (min_tokens, options.added_ids)
            pieces, reading = encode_pieces.encode_to_pieces(df, model, text_col=text_col, id_cols=id_cols, fs=fs,
                                                pieces_dir=pieces_dir, short=short, resumed=resumed,
                                                id_type=pa.from_numpy_dtype(numpy_dtype))
        _check_pieces_seen(fs, pieces_dir, pieces, output.uri)
        read_stats = with_reader_stats(None if "skipped_records" in reading else df, {
            "replaced_sequences": sum(piece["replaced"] for piece in pieces),
            "affected_documents": sum(piece["affected"] for piece in pieces),
            "skipped_files": reading["skipped_files"],
        })
        if "skipped_records" in reading:  # JSON Lines read by the tasks: they counted their bad records
            read_stats["skipped_records"] = reading["skipped_records"]

        def describe(pieces, plan, written):
            return _manifest(
                pieces, plan, written, tok, model.fingerprint, options, output_format=output_format,
                dtype=numpy_dtype, text_col=text_col, id_cols=id_cols, shard_tokens=shard_tokens, source=source,
                started=started, read_stats=read_stats)

        tokenizer_name = (source or {}).get("model") or model.fingerprint  # datatrove's metadata
        dest = output.begin(overwrite) if order.active else None  # in place: the earlier output goes from here
        split_manifests = []
        if order.active:
            with spark_phase(df.sparkSession, progress, "writing"):
                plan, written, split_manifests = write_ordered(
                    df.sparkSession, pieces, order, fs=fs, staging=staging, dest=dest, pieces_dir=pieces_dir,
                    id_fields=[df.schema[c] for c in id_cols], shard_tokens=shard_tokens,
                    output_format=output_format, dtype=numpy_dtype, describe=describe, tokenizer=tokenizer_name)
        else:
            plan = plan_shards(pieces, shard_tokens, fs, pieces_dir, fmt.file_label)
            dest = output.begin(overwrite)  # in place (object stores): the earlier output goes from here
            with spark_phase(df.sparkSession, progress, "writing"):
                written = write_shards(df.sparkSession, plan, fs=fs, staging=staging, dest=dest,
                                       pieces_dir=pieces_dir, output_format=output_format, dtype=numpy_dtype,
                                       id_cols=id_cols, tokenizer=tokenizer_name)
        fs.delete_dir(pieces_dir)
        manifest = describe(pieces, plan, written)
        if order.active:
            manifest["order"] = order.record()
            if split_manifests:
                manifest["splits"] = splits_record(order, split_manifests)
            for split in split_manifests:
                _write_data_paths(fs, f"{dest}/{split['split']}", split, fmt)
                with fs.open_output_stream(f"{dest}/{split['split']}/{MANIFEST_NAME}") as fh:
                    fh.write((json.dumps(split, indent=2, sort_keys=False) + "\n").encode("utf-8"))
        manifest.update(short_documents(pieces, min_tokens))
        if fmt.token_stream and id_cols:
            manifest["sidecar_columns"] = sidecar_columns(id_cols)
        _write_data_paths(fs, dest, manifest, fmt)
        if resumed:
            manifest["resumed"] = {"kept_pieces": len(resumed.kept), "encoded_pieces": len(pieces) - len(resumed.kept),
                                   "fresh": resumed.fresh}
        with fs.open_output_stream(f"{dest}/{MANIFEST_NAME}") as fh:
            fh.write((json.dumps(manifest, indent=2, sort_keys=False) + "\n").encode("utf-8"))
        output.publish(overwrite)  # the marker: last
        if resumed:
            resumed.remove()
        return manifest
    except Exception as exc:
        translated = executor_error(exc)
        if translated is exc:
            raise
        raise translated from exc
    finally:
        output.clean_up()
        if resumed:
            resumed.release()


def _write_data_paths(fs, where: str, manifest: dict, fmt: OutputFormat) -> None:
    """Beside the shards of a format that keeps one (bin): the Megatron prefixes with their token
    counts, for ``--data-path``."""
    if not fmt.data_paths:
        return
    manifest["data_paths"] = megatron.DATA_PATHS_NAME
    with fs.open_output_stream(f"{where}/{megatron.DATA_PATHS_NAME}") as fh:
        fh.write(megatron.data_paths_text(manifest["shards"]).encode("utf-8"))


def _check_pieces_seen(fs, pieces_dir: str, pieces: list[dict], shown: str) -> None:
    """The driver sees the files the tasks wrote: a local output on a cluster whose nodes do not
    share that path is an error here, not a silent loss."""
    import pyarrow.fs as pafs

    if not pieces:
        return
    seen = {info.base_name for info in fs.get_file_info(pafs.FileSelector(pieces_dir, allow_not_found=True))}
    missing = [piece["piece"] for piece in pieces if piece["piece"] not in seen]
    if missing:
        raise ConfigError(
            f"encode output {shown}: {len(missing)} of the {len(pieces)} files the tasks wrote are not visible "
            f"from the driver (e.g. {missing[0]}): a local path works on a cluster only when every node shares it; "
            "use s3a://, gs://, abfs:// or a shared file system"
        )


def _manifest(pieces, plan, written, tok, fingerprint: str, options, *, output_format, dtype, text_col, id_cols, shard_tokens,
              source, started, read_stats: dict[str, Any]) -> dict[str, Any]:
    """The manifest (:mod:`bpe_spark.datasets.megatron`' ``_manifest.json``), checking that the shards
    written are the shards planned and hold every token encoded."""
    fmt = output_format_named(output_format)
    shards = []
    for entry in plan:
        got = written.get(entry["index"])
        if got is None or got["documents"] != entry["documents"]:
            raise RuntimeError(f"internal: shard {entry['name']} was written as {got}, planned as {entry}")
        name = entry["name"]
        files = fmt.shard_files(name)
        if fmt.token_stream and id_cols:
            files.append(name + SIDECAR_SUFFIX)
        shards.append({
            "name": name, "files": files, "first_document": entry["first"],
            "documents": entry["documents"], "tokens": got["tokens"], "bytes": got["bytes"],
        })
    documents = sum(piece["documents"] for piece in pieces)
    tokens = sum(piece["tokens"] for piece in pieces)
    text_bytes = sum(piece["text_bytes"] for piece in pieces)
    if sum(shard["tokens"] for shard in shards) != tokens:
        raise RuntimeError("internal: the shards do not hold every token encoded")
    return {
        "format": MANIFEST_FORMAT,
        "format_version": MANIFEST_VERSION,
        "output_format": output_format,
        "documents": documents,
        "null_documents": sum(piece["nulls"] for piece in pieces),
        **read_stats,
        "tokens": tokens,
        "bytes": text_bytes,
        "bytes_per_token": round(text_bytes / tokens, 6) if tokens else None,
        "dtype": dtype.name,
        "columns": (id_cols or ["doc_id"]) + ["input_ids", "n_tokens"],
        "id_columns": id_cols,
        "text_column": text_col,
        **options.record(),
        "shard_tokens": shard_tokens,
        "model": {
            "fingerprint": fingerprint,
            "decoding_fingerprint": decoding_fingerprint(tok),
            "vocab_size": tok.vocab_size,
            "max_token_id": tok.max_token_id,
            "scheme": tok.scheme,
            "pattern": tok.pattern,
        },
        "source": dict(source or {}),
        "shards": shards,
        "output_bytes": sum(shard["bytes"] for shard in shards),
        "seconds": round(time.time() - started, 3),
        "created": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
    }
