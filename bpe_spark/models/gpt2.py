"""GPT-2 files: ``vocab.json`` (printable token -> id) and ``merges.txt`` (one merge per line).

Tokens are in GPT-2's byte-to-unicode printable form (as in ``tokenizer.json``, whose export takes
its vocab and merges from here). Imports give the keyword arguments of
:class:`~bpe_spark.encoding.tokenizer.Tokenizer` and keep the file's ids; a token of the vocabulary that is
neither a single byte nor made by any merge (GPT-2's ``<|endoftext|>``) is a special token unless
``special_tokens`` says otherwise.

>>> import tempfile, pathlib
>>> from bpe_spark import TrainerConfig, train
>>> out = pathlib.Path(tempfile.mkdtemp())
>>> tok = train(["ab ab"], TrainerConfig(vocab_size=258, special_tokens=("<|endoftext|>",)))
>>> write_gpt2(tok, out)
>>> (out / "merges.txt").read_text().splitlines()
['#version: 0.2', 'a b']
>>> from bpe_spark import Tokenizer
>>> Tokenizer(**read_gpt2(out / "vocab.json")).encode("ab<|endoftext|>", allowed_special="all")
[256, 257]
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from bpe_spark.errors import ConfigError, ModelFormatError
from bpe_spark.bpe.fields import (
    ID_RANGE,
    Fields,
    check_count,
    check_file_size,
    check_token,
    is_id,
    require_all_bytes,
)
from bpe_spark.models.huggingface.clip import is_clip_vocab, read_clip_files
from bpe_spark.models.files import read_json_file
from bpe_spark.bpe.symbols import bytes_to_display, display_to_bytes

MERGES_HEADER = "#version: 0.2"


def display_vocab(tok) -> dict[str, int]:
    """Printable token -> id of a byte-scheme tokenizer's vocabulary (specials left out); of ids
    with equal bytes, the lowest."""
    vocab = tok.ordinary_vocab
    entries: dict[str, int] = {}
    for token_id in sorted(vocab):
        entries.setdefault(bytes_to_display(vocab[token_id]), token_id)
    return entries


def display_merges(tok) -> list[str]:
    """The merges of a byte-scheme tokenizer as ``"left right"`` in printable form, in rank order."""
    return [f"{bytes_to_display(left)} {bytes_to_display(right)}" for left, right in tok.merges]


def gpt2_class_differs(tok) -> str | None:
    """What transformers' ``GPT2Tokenizer`` (GPT-2's ByteLevel pre-tokenizer without prefix space,
    the merges by pair, no normalizer) would do otherwise than ``tok``, or None when it gives our
    ids; a GPT-2 export folder of such a model holds tokenizer.json too, for transformers to use."""
    if tok.pattern != "gpt2":
        return f"the pattern is {tok.pattern if tok.pattern.isidentifier() else 'a custom regex'}, not gpt2"
    if tok.lowercase or tok.normalization:
        return "the model lowercases or normalizes the text"
    if tok.merge_rule != "pairs" or getattr(tok, "pipeline", None) is not None:
        return "the model does not merge as GPT-2 does (merge rule, or an imported pipeline)"
    return None


def write_gpt2(tok, directory) -> None:
    """Write ``vocab.json`` and ``merges.txt`` of a byte-scheme tokenizer into ``directory``."""
    if tok.scheme != "byte":
        raise ConfigError("GPT-2 files hold byte-level tokens; this tokenizer is char scheme")
    directory = Path(directory)
    entries = display_vocab(tok)
    for token, token_id in tok.special_tokens.items():
        key = bytes_to_display(token.encode("utf-8"))
        if key in entries:
            raise ConfigError(
                f"special token {token!r} has the same text as token {entries[key]}; "
                "GPT-2 files cannot hold both"
            )
        entries[key] = token_id
    with open(directory / "vocab.json", "w", encoding="utf-8") as fh:
        json.dump(dict(sorted(entries.items(), key=lambda item: item[1])), fh, ensure_ascii=False)
        fh.write("\n")
    with open(directory / "merges.txt", "w", encoding="utf-8") as fh:
        fh.write(MERGES_HEADER + "\n")
        fh.writelines(line + "\n" for line in display_merges(tok))


def _read_vocab(path: Path) -> dict[str, int]:
    data = read_json_file(path, missing="no such file (GPT-2 needs vocab.json and merges.txt)")
    if not isinstance(data, dict):
        raise ModelFormatError(f"{path}: expected a JSON object mapping tokens to ids")
    fields = Fields(path)
    check_count(len(data), str(path), "vocabulary entries")
    seen: dict[int, str] = {}
    for key, token_id in data.items():
        if not is_id(token_id):
            raise fields.error(key, f"id {token_id!r} is not {ID_RANGE}")
        if token_id in seen:
            raise fields.error(key, f"id {token_id} is also the id of {seen[token_id]!r}")
        if not key:
            raise fields.error("", "the empty token")
        seen[token_id] = key
    return data


def read_merges_lines(merges_path: Path) -> list[str]:
    """The lines of a ``merges.txt`` (UTF-8, at most ``MAX_FILE_BYTES``, ``MAX_TOKENS`` lines)."""
    check_file_size(merges_path)
    try:
        lines = merges_path.read_text(encoding="utf-8").split("\n")
    except FileNotFoundError:
        raise ModelFormatError(
            f"{merges_path}: no such file (GPT-2 needs vocab.json and merges.txt)"
        ) from None
    except UnicodeDecodeError as exc:
        raise ModelFormatError(f"{merges_path}: not UTF-8 ({exc})") from None
    check_count(len(lines) - 1, str(merges_path), "lines (merges)")
    return lines


def _special_text(key: str) -> str:
    """The text of a special token stored in printable form (``<|endoftext|>`` is its own form)."""
    try:
        return display_to_bytes(key).decode("utf-8")
    except (KeyError, UnicodeDecodeError):
        return key


def read_gpt2(
    vocab_path,
    merges_path=None,
    *,
    special_tokens: Iterable[str] | None = None,
    pattern: str = "gpt2",
    **unused,
) -> dict[str, Any]:
    """The Tokenizer keyword arguments of GPT-2 files (``merges_path`` defaults to ``merges.txt`` beside ``vocab.json``, or
    ``X_merges.txt`` beside ``X_vocab.json``).

    ``special_tokens``: the vocabulary entries to treat as special (in text form); by default the
    multi-byte tokens that no merge makes (GPT-2: ``<|endoftext|>``).
    """
    if unused:
        raise ConfigError(f"{vocab_path}: GPT-2 loading takes no options {sorted(unused)}")
    vocab_path = Path(vocab_path)
    if merges_path is None:
        # vocab.json -> merges.txt, gpt2_vocab.json -> gpt2_merges.txt
        stem = (
            vocab_path.name[: -len("vocab.json")] if vocab_path.name.endswith("vocab.json") else ""
        )
        merges_path = vocab_path.with_name(stem + "merges.txt")
    merges_path = Path(merges_path)
    raw_vocab = _read_vocab(vocab_path)
    lines = read_merges_lines(merges_path)
    if is_clip_vocab(raw_vocab):  # CLIP's files: words end with </w> (bpe_spark.models.huggingface.clip)
        if pattern != "gpt2":
            raise ConfigError(f"{vocab_path}: CLIP's files split text with CLIP's pattern; drop pattern=")
        return read_clip_files(vocab_path, merges_path, raw_vocab, lines, special_tokens=special_tokens)
    values: dict[int, bytes] = {}
    unprintable: dict[int, str] = {}
    fields = Fields(vocab_path)
    for key, token_id in raw_vocab.items():
        try:
            values[token_id] = display_to_bytes(key)
        except KeyError:
            unprintable[token_id] = key  # only a special token may hold such characters
        check_token(values.get(token_id, key), fields.where(key[:20]))
    merges: list[tuple[int, int]] = []
    made: set[int] = set()
    used: dict[int, int] = {}  # id -> the first merges.txt line that merges it
    token_to_id = {value: token_id for token_id, value in sorted(values.items(), reverse=True)}
    for line_no, line in enumerate(lines, start=1):
        line = line.rstrip("\r")
        if not line or (line_no == 1 and line.startswith("#version")):
            continue
        parts = line.split(" ")
        if len(parts) != 2 or not parts[0] or not parts[1]:
            raise ModelFormatError(
                f"{merges_path}: line {line_no}: expected two tokens separated by one space, got {line!r}"
            )
        ids = []
        for part in parts:
            token_id = raw_vocab.get(part)
            if token_id is None or token_id not in values:
                raise ModelFormatError(
                    f"{merges_path}: line {line_no}: merge {line!r}: token {part!r} is not in {vocab_path.name}"
                )
            ids.append(token_id)
            used.setdefault(token_id, line_no)
        merged = values[ids[0]] + values[ids[1]]
        new_id = token_to_id.get(merged)
        if new_id is None:
            raise ModelFormatError(
                f"{merges_path}: line {line_no}: merge {line!r} makes {bytes_to_display(merged)!r}, "
                f"which {vocab_path.name} lacks"
            )
        made.add(new_id)
        merges.append((ids[0], ids[1]))
    if special_tokens is None:
        chosen = {
            token_id
            for token_id, value in values.items()
            if len(value) > 1 and token_id not in made and token_id not in used
        } | set(unprintable)
    else:
        by_text = {_special_text(key): token_id for key, token_id in raw_vocab.items()}
        chosen = set()
        for token in special_tokens:
            if token not in by_text:
                raise ConfigError(f"{vocab_path}: special token {token!r} is not in it")
            chosen.add(by_text[token])
        if unprintable.keys() - chosen:
            token_id = min(unprintable.keys() - chosen)
            raise fields.error(
                unprintable[token_id],
                "not in GPT-2's printable byte form; only a special token may be (list it in "
                "special_tokens)",
            )
    specials = {}
    for token_id in sorted(chosen):
        if token_id in made or token_id in used:
            token = unprintable.get(token_id) or bytes_to_display(values[token_id])
            raise ConfigError(
                f"{vocab_path}: token {token!r} (id {token_id}) is merged by {merges_path.name} "
                f"line {used[token_id]}, so it cannot be a special token" if token_id in used else
                f"{vocab_path}: token {token!r} (id {token_id}) is made by a merge of {merges_path.name}, "
                "so it cannot be a special token"
            )
        key = unprintable.get(token_id) or bytes_to_display(values[token_id])
        specials[_special_text(key)] = token_id
        values.pop(token_id, None)
    require_all_bytes(token_to_id, str(vocab_path), show_byte=bytes_to_display)
    return {
        "scheme": "byte",
        "vocab": values,
        "merges": merges,
        "special_tokens": specials,
        "pattern": pattern,
        "metadata": {
            "source": {"format": "gpt2", "vocab": str(vocab_path), "merges": str(merges_path)}
        },
    }
