"""Our model directory (docs/design.md section 3): ``merges.parquet``, ``vocab.parquet``, ``bpe_spark.json``
and, where tokenizers can express the model (byte scheme; char scheme with ``</w>`` fused),
``tokenizer.json`` with transformers' ``tokenizer_config.json`` and ``special_tokens_map.json``.

Writing takes any tokenizer object; reading gives the keyword arguments of
:class:`~bpe_spark.encoding.tokenizer.Tokenizer` (``Tokenizer.load`` builds it). Reading uses pyarrow and
json only: no pickle, no code from the files. Every check that fails raises
:class:`ModelFormatError` naming the file and the row or field. ``MERGES_SCHEMA`` is the one
definition of the merges table, which the Spark checkpoint writes too.

>>> from bpe_spark import Tokenizer, TrainerConfig, train
>>> import tempfile, pathlib
>>> tok = train(["low lower lowest"], TrainerConfig(vocab_size=260, pattern="words"))
>>> out = pathlib.Path(tempfile.mkdtemp()) / "m"
>>> save_model(tok, out)
>>> sorted(p.name for p in out.iterdir())
['_BPE_SPARK', 'bpe_spark.json', 'merges.parquet', 'special_tokens_map.json', 'tokenizer.json', 'tokenizer_config.json', 'vocab.parquet']
>>> Tokenizer(**read_model(out)).to_dict() == tok.to_dict()
True
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq


from bpe_spark.storage import markers
from bpe_spark._version import __version__
from bpe_spark.bpe.config import TrainerConfig
from bpe_spark.errors import BpeSparkError, ConfigError, ModelFormatError
from bpe_spark.models.huggingface import transformers_config, tokenizer_json_write
from bpe_spark.bpe.fields import (
    ID_RANGE,
    Fields,
    check_count,
    check_file_size,
    check_pattern,
    check_token,
    is_id,
)
from bpe_spark.models.files import atomic_directory, read_json_file
from bpe_spark.models.registry import EXPORTS, MODEL_META_FILE, export_spec
from bpe_spark.bpe.patterns import PRESETS, pattern_source
from bpe_spark.bpe.symbols import utf8_bytes
from bpe_spark.models.token_kinds import merge_counts, token_kinds

FORMAT_VERSION = 1
MERGES_FILE = "merges.parquet"
VOCAB_FILE = "vocab.parquet"
HF_FILE = EXPORTS["tokenizer.json"].files[0]
KINDS = ("byte", "char", "merge", "special")

MERGES_SCHEMA = pa.schema(
    [
        ("rank", pa.int32()),
        ("left", pa.int32()),
        ("right", pa.int32()),
        ("id", pa.int32()),
        ("left_bytes", pa.binary()),
        ("right_bytes", pa.binary()),
        ("token_bytes", pa.binary()),
        ("count", pa.int64()),
    ]
)
VOCAB_SCHEMA = pa.schema([("id", pa.int32()), ("token_bytes", pa.binary()), ("kind", pa.string())])


# --- writing ----------------------------------------------------------------------------------
def merges_table(tok) -> pa.Table:
    vocab = tok.ordinary_vocab
    merge_ids = tok.merge_ids
    counts = merge_counts(tok)
    left_bytes = [utf8_bytes(vocab[left]) for left, _, _ in merge_ids]
    right_bytes = [utf8_bytes(vocab[right]) for _, right, _ in merge_ids]
    return pa.Table.from_pydict(
        {
            "rank": list(range(len(merge_ids))),
            "left": [left for left, _, _ in merge_ids],
            "right": [right for _, right, _ in merge_ids],
            "id": [new_id for _, _, new_id in merge_ids],
            "left_bytes": left_bytes,
            "right_bytes": right_bytes,
            "token_bytes": [a + b for a, b in zip(left_bytes, right_bytes)],
            "count": counts if counts is not None else [None] * len(merge_ids),
        },
        schema=MERGES_SCHEMA,
    )


def vocab_table(tok) -> pa.Table:
    kinds = token_kinds(tok)
    vocab = tok.ordinary_vocab
    by_id: dict[int, bytes] = {token_id: utf8_bytes(value) for token_id, value in vocab.items()}
    for token, token_id in tok.special_tokens.items():
        by_id[token_id] = token.encode("utf-8")
    ids = sorted(by_id)
    return pa.Table.from_pydict(
        {"id": ids, "token_bytes": [by_id[i] for i in ids], "kind": [kinds[i] for i in ids]},
        schema=VOCAB_SCHEMA,
    )


def _check_json_value(value: Any, where: str) -> None:
    """Refuse metadata that JSON would silently change (tuples, non-str keys, NaN, objects)."""
    if value is None or isinstance(value, (bool, int, str)):
        return
    if isinstance(value, float):
        if not math.isfinite(value):
            raise ConfigError(f"tok.metadata{where} is {value!r}, which JSON cannot hold")
        return
    if isinstance(value, list):
        for i, item in enumerate(value):
            _check_json_value(item, f"{where}[{i}]")
        return
    if isinstance(value, dict):
        for key, item in value.items():
            if not isinstance(key, str):
                raise ConfigError(
                    f"tok.metadata{where} has the non-string key {key!r}; use str keys"
                )
            _check_json_value(item, f"{where}[{key!r}]")
        return
    raise ConfigError(
        f"tok.metadata{where} is a {type(value).__name__}, which a model file cannot hold; "
        "use None, bool, int, float, str, list or dict"
    )


def model_metadata(tok, exports: Iterable[str] = ()) -> dict[str, Any]:
    """The content of ``bpe_spark.json``."""
    metadata = {key: value for key, value in tok.metadata.items()}
    counts_in_parquet = merge_counts(tok) is not None
    if counts_in_parquet:
        del metadata["merge_counts"]
    _check_json_value(metadata, "")
    config = tok.config.to_dict() if tok.config is not None else None
    return {
        "format_version": FORMAT_VERSION,
        "created_by": f"bpe-spark {__version__}",
        "scheme": tok.scheme,
        "merge_rule": tok.merge_rule,
        "tie_break": tok.config.tie_break if tok.config is not None else None,
        "pattern": {
            "name": tok.pattern if tok.pattern in PRESETS else None,
            "regex": pattern_source(tok.pattern),
        },
        "lowercase": tok.lowercase,
        "normalization": tok.normalization,
        "end_of_word": tok.end_of_word,
        "end_of_word_marker": tok.end_of_word_marker,
        "unk_token": tok.unk_token,
        "special_tokens": [
            {"token": token, "id": token_id} for token, token_id in tok.special_tokens.items()
        ],
        "vocab_size": tok.vocab_size,
        "num_merges": len(tok.merge_ids),
        "merge_counts_in_parquet": counts_in_parquet,
        "config": config,
        "stats": metadata.get("stats"),
        "timings": metadata.get("timings"),
        "metadata": metadata,
        "files": {
            "merges": MERGES_FILE,
            "vocab": VOCAB_FILE,
            "tokenizer_json": HF_FILE if tokenizer_json_write.refusal(tok) is None else None,
            "exports": {fmt: list(EXPORTS[fmt].files) for fmt in exports},
        },
    }


def save_model(tok, directory, *, overwrite: bool = False, exports: Iterable[str] = ()) -> None:
    """Write the model directory atomically (docs/design.md section 3).

    Everything is written to a temporary sibling directory that is renamed into place once
    complete, with the ``_BPE_SPARK`` marker of kind ``model``; an existing ``directory`` is an
    error unless ``overwrite``, and then must be an earlier model. ``exports`` adds other
    formats inside it: ``gpt2`` (vocab.json + merges.txt), ``tiktoken`` (model.tiktoken),
    ``subword-nmt`` (codes.bpe).
    """
    if getattr(tok, "pipeline", None) is not None:
        _save_pipeline_model(tok, directory, overwrite=overwrite, exports=exports)
        return
    exports = tuple(dict.fromkeys(exports))
    byte_only = [fmt for fmt in exports if export_spec(fmt).needs_byte]
    if tok.scheme != "byte" and byte_only:
        raise ConfigError(f"exports {byte_only} need a byte-scheme tokenizer")
    meta = model_metadata(tok, exports)  # validates metadata before anything is written
    # A model tokenizers can express always holds tokenizer.json (docs/design.md section 3), and the
    # files that make the directory a folder transformers loads.
    has_hf = tokenizer_json_write.refusal(tok) is None
    folder = transformers_config.folder_options(tok) if has_hf else None
    written = dict.fromkeys((("tokenizer.json",) if has_hf else ()) + exports)
    with atomic_directory(directory, kind="model", overwrite=overwrite) as staged:
        pq.write_table(merges_table(tok), staged / MERGES_FILE)
        pq.write_table(vocab_table(tok), staged / VOCAB_FILE)
        for fmt in written:
            EXPORTS[fmt].write_into(tok, staged)
        if folder is not None:
            transformers_config.write_folder_files(tok, staged, folder)
        with open(staged / MODEL_META_FILE, "w", encoding="utf-8") as fh:
            json.dump(meta, fh, ensure_ascii=False, indent=2)
            fh.write("\n")


def _save_pipeline_model(tok, directory, *, overwrite: bool, exports: Iterable[str]) -> None:
    """An imported tokenizers pipeline (``tok.pipeline``): ``bpe_spark.json`` carries its spec
    (field ``pipeline``, what loading rebuilds the model from) and ``tokenizer.json`` is that spec;
    ``vocab.parquet`` and ``merges.parquet`` are views of it for other tools (the merges made by
    concatenation, ``token_bytes`` as the vocabulary shows the token each one makes), and
    transformers' folder files sit beside them as for any model."""
    exports = tuple(exports)
    if exports:
        raise ConfigError(
            f"exports {list(exports)}: a model imported as a tokenizers pipeline is saved with its "
            "tokenizer.json only"
        )
    meta = model_metadata(tok)
    meta["pattern"] = {"name": None, "regex": None}
    meta["files"]["tokenizer_json"] = HF_FILE
    meta["pipeline"] = tok.pipeline.spec
    vocab = tok.vocab
    rows = [(rank, left, right, new_id) for rank, (left, right, new_id) in enumerate(tok.merge_ids)
            if left in vocab and right in vocab and new_id in vocab]
    merges = pa.Table.from_pydict(
        {
            "rank": [row[0] for row in rows],
            "left": [row[1] for row in rows],
            "right": [row[2] for row in rows],
            "id": [row[3] for row in rows],
            "left_bytes": [utf8_bytes(vocab[row[1]]) for row in rows],
            "right_bytes": [utf8_bytes(vocab[row[2]]) for row in rows],
            "token_bytes": [utf8_bytes(vocab[row[3]]) for row in rows],
            "count": [None] * len(rows),
        },
        schema=MERGES_SCHEMA,
    )
    folder = transformers_config.folder_options(tok)
    with atomic_directory(directory, kind="model", overwrite=overwrite) as staged:
        pq.write_table(merges, staged / MERGES_FILE)
        pq.write_table(vocab_table(tok), staged / VOCAB_FILE)
        EXPORTS["tokenizer.json"].write_into(tok, staged)  # the spec (tokenizer_json_write.to_hf_dict)
        transformers_config.write_folder_files(tok, staged, transformers_config.folder_options(tok))
        with open(staged / MODEL_META_FILE, "w", encoding="utf-8") as fh:
            json.dump(meta, fh, ensure_ascii=False, indent=2)
            fh.write("\n")
        transformers_config.write_folder_files(tok, staged, folder)


def _read_pipeline_model(meta: dict, meta_path: Path) -> dict[str, Any]:
    """The Tokenizer keyword arguments of a saved pipeline model: rebuilt from its spec."""
    from bpe_spark.pipeline import Pipeline

    fields = Fields(meta_path)
    spec = fields.get(meta, "pipeline", dict)
    metadata = fields.get(meta, "metadata", dict)
    return {"pipeline": Pipeline(spec, path=f"{meta_path} (field 'pipeline')"), "metadata": metadata}


# --- reading ----------------------------------------------------------------------------------
def _read_table(path: Path, schema: pa.Schema) -> pa.Table:
    if not path.is_file():
        raise ModelFormatError(
            f"{path}: missing; a model directory needs {MERGES_FILE}, {VOCAB_FILE} and {MODEL_META_FILE}"
        )
    check_file_size(path)
    try:
        table = pq.read_table(path)
    except (pa.ArrowException, OSError) as exc:
        raise ModelFormatError(f"{path}: not a readable Parquet file ({exc})") from None
    check_count(table.num_rows, str(path), "rows")
    for field in schema:
        if field.name not in table.column_names:
            raise ModelFormatError(
                f"{path}: column {field.name!r} is missing; expected columns {schema.names}"
            )
        actual = table.schema.field(field.name).type
        if actual != field.type and not (
            pa.types.is_large_binary(actual) and field.type == pa.binary()
        ):
            raise ModelFormatError(
                f"{path}: column {field.name!r} has type {actual}, expected {field.type}"
            )
    for name in schema.names:
        column = table.column(name)
        if column.null_count and name != "count":
            row = column.to_pylist().index(None)
            raise ModelFormatError(f"{path}: column {name!r} has null at row {row}")
    return table.select(schema.names)


def _load_meta(path: Path) -> dict[str, Any]:
    if not path.is_file():
        raise ModelFormatError(f"{path}: missing; this is not a bpe-spark model directory")
    meta = Fields(path).top(read_json_file(path))
    version = meta.get("format_version")
    if version != FORMAT_VERSION:
        raise ModelFormatError(
            f"{path}: field 'format_version' is {version!r}; this bpe-spark reads version {FORMAT_VERSION}"
        )
    return meta


def _read_pattern(fields: Fields, meta: dict) -> str:
    """The pattern a Tokenizer takes: the preset's name, or the regex of a custom pattern."""
    pattern = fields.get(meta, "pattern", dict)
    name = fields.choice(pattern, "name", sorted(PRESETS), within="pattern", optional=True)
    regex_source = pattern.get("regex")
    if name is not None and regex_source is not None and PRESETS[name] != regex_source:
        raise fields.error("pattern.regex", f"differs from the {name!r} preset it names")
    if name is None and not isinstance(regex_source, str):
        raise fields.error("pattern", "needs a 'name' or a 'regex'")
    if name is None:
        check_pattern(regex_source, fields.where("pattern.regex"))
    return name if name is not None else regex_source


def _read_specials(fields: Fields, meta: dict) -> dict[str, int]:
    special_tokens: dict[str, int] = {}
    entries = fields.get(meta, "special_tokens", list)
    check_count(len(entries), fields.where("special_tokens"), "special tokens")
    for i, entry in enumerate(entries):
        if not (
            isinstance(entry, dict)
            and isinstance(entry.get("token"), str)
            and is_id(entry.get("id"))
        ):
            raise fields.bad(f"special_tokens[{i}]", entry, f'{{"token": a string, "id": {ID_RANGE}}}')
        check_token(entry["token"], fields.where(f"special_tokens[{i}].token"))
        special_tokens[entry["token"]] = entry["id"]
    return special_tokens


def read_model(directory) -> dict[str, Any]:
    """The Tokenizer keyword arguments of a model directory: exactly the tokenizer that was saved.
    A directory whose ``_BPE_SPARK`` marker says a run is still writing it is refused
    (:func:`bpe_spark.storage.markers.check_complete`).

    What the Tokenizer itself refuses (say an ``unk_token`` it lacks) is for the caller to name:
    :func:`bpe_spark.models.load.load_any` reports it as this directory's error.
    """
    directory = Path(directory)
    if not directory.is_dir():
        raise ModelFormatError(f"{directory}: not a directory (a bpe-spark model is a directory)")
    # the marker goes in last: without its complete form the files may be half of a replaced model
    markers.check_complete(str(directory), "model")
    meta_path = directory / MODEL_META_FILE
    meta = _load_meta(meta_path)
    if meta.get("pipeline") is not None:
        return _read_pipeline_model(meta, meta_path)
    fields = Fields(meta_path)
    scheme = fields.choice(meta, "scheme", ("byte", "char"))
    pattern = _read_pattern(fields, meta)
    special_tokens = _read_specials(fields, meta)
    metadata = fields.get(meta, "metadata", dict)
    config_data = fields.get(meta, "config", dict, optional=True)
    try:
        config = TrainerConfig.from_dict(config_data) if config_data is not None else None
    except (BpeSparkError, TypeError) as exc:
        raise ModelFormatError(f"{meta_path}: field 'config' is invalid: {exc}") from None

    vocab_path = directory / VOCAB_FILE
    vocab, specials_in_vocab = _read_vocab(vocab_path, scheme)
    if specials_in_vocab != special_tokens:
        raise ModelFormatError(
            f"{vocab_path}: the rows of kind 'special' {specials_in_vocab} differ from field "
            f"'special_tokens' of {meta_path.name} {special_tokens}"
        )
    merges_path = directory / MERGES_FILE
    merges, counts = _read_merges(merges_path, vocab)
    num_merges = fields.get(meta, "num_merges", int)
    if num_merges != len(merges):
        raise ModelFormatError(
            f"{merges_path}: {len(merges)} rows, but {meta_path.name} field 'num_merges' says {num_merges}"
        )
    if fields.get(meta, "merge_counts_in_parquet", bool):
        if any(c is None for c in counts):
            row = counts.index(None)
            raise ModelFormatError(
                f"{merges_path}: row {row}: field 'count' is null, but {meta_path.name} says counts are stored"
            )
        metadata = dict(metadata)
        metadata["merge_counts"] = counts
    normalization = fields.choice(meta, "normalization", ("NFC", "NFKC"), optional=True)
    end_of_word = fields.choice(meta, "end_of_word", ("separate", "fused"), optional=True)
    return {
        "scheme": scheme,
        "vocab": vocab,
        "merges": merges,
        "special_tokens": special_tokens,
        "pattern": pattern,
        "lowercase": fields.get(meta, "lowercase", bool),
        "normalization": normalization,
        "end_of_word": end_of_word,
        "end_of_word_marker": fields.get(meta, "end_of_word_marker", str),
        "unk_token": fields.get(meta, "unk_token", str, optional=True),
        "merge_rule": fields.get(meta, "merge_rule", str),
        "config": config,
        "metadata": metadata,
    }


def _read_vocab(path: Path, scheme: str) -> tuple[dict[int, bytes | str], dict[str, int]]:
    table = _read_table(path, VOCAB_SCHEMA)
    vocab: dict[int, bytes | str] = {}
    specials: dict[str, int] = {}
    columns = table.to_pydict()
    for row, (token_id, token_bytes, kind) in enumerate(
        zip(columns["id"], columns["token_bytes"], columns["kind"])
    ):
        where = f"{path}: row {row} (id {token_id})"
        if token_id < 0:
            raise ModelFormatError(f"{where}: field 'id' is negative")
        if token_id in vocab or token_id in specials.values():
            raise ModelFormatError(f"{where}: field 'id' repeats an earlier row")
        if kind not in KINDS:
            raise ModelFormatError(f"{where}: field 'kind' is {kind!r}; expected one of {KINDS}")
        if not token_bytes:
            raise ModelFormatError(f"{where}: field 'token_bytes' is empty")
        check_token(token_bytes, f"{where}: field 'token_bytes'")
        if kind == "special" or scheme == "char":
            try:
                text = token_bytes.decode("utf-8")
            except UnicodeDecodeError:
                raise ModelFormatError(
                    f"{where}: field 'token_bytes' is not UTF-8, as a {kind} token must be"
                ) from None
            if kind == "special":
                specials[text] = token_id
            else:
                vocab[token_id] = text
            continue
        if kind == "char":
            raise ModelFormatError(f"{where}: field 'kind' is 'char' in a byte-scheme model")
        if kind == "byte" and len(token_bytes) != 1:
            raise ModelFormatError(
                f"{where}: field 'kind' is 'byte' but token_bytes has {len(token_bytes)} bytes"
            )
        vocab[token_id] = token_bytes
    return vocab, specials


def _read_merges(
    path: Path, vocab: dict[int, bytes | str]
) -> tuple[list[tuple[int, int]], list[int | None]]:
    table = _read_table(path, MERGES_SCHEMA)
    columns = table.to_pydict()
    first_id: dict[bytes | str, int] = {}
    for token_id in sorted(vocab):
        first_id.setdefault(vocab[token_id], token_id)
    merges = []
    for row in range(table.num_rows):
        rank, left, right, new_id = (columns[name][row] for name in ("rank", "left", "right", "id"))
        where = f"{path}: row {row}"
        if rank != row:
            raise ModelFormatError(
                f"{where}: field 'rank' is {rank}; ranks must run 0, 1, 2, ... in row order"
            )
        for name, token_id in (("left", left), ("right", right), ("id", new_id)):
            if token_id not in vocab:
                raise ModelFormatError(
                    f"{where}: field {name!r} is {token_id}, which is not a vocab.parquet id (or is a special token)"
                )
        for name, token_id in (("left_bytes", left), ("right_bytes", right)):
            if columns[name][row] != utf8_bytes(vocab[token_id]):
                raise ModelFormatError(
                    f"{where}: field {name!r} differs from the vocab.parquet bytes of id {token_id}"
                )
        token_bytes = columns["token_bytes"][row]
        if token_bytes != columns["left_bytes"][row] + columns["right_bytes"][row]:
            raise ModelFormatError(f"{where}: field 'token_bytes' is not left_bytes + right_bytes")
        merged = vocab[left] + vocab[right]
        if first_id.get(merged) != new_id:
            raise ModelFormatError(
                f"{where}: field 'id' is {new_id}, but the vocabulary gives left+right the id {first_id.get(merged)}"
            )
        merges.append((left, right))
    return merges, columns["count"]
