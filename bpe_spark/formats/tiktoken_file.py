"""tiktoken ``.tiktoken`` files: one ``base64(token) rank`` per line; the rank is the token id.

A ``.tiktoken`` file holds ranks, not merges; reading it gives the keyword arguments of
:class:`~bpe_spark.tokenizer.Tokenizer`, with the ranks as ids. Encoding uses tiktoken's own rule
(``merge_rule="ranks"``: whole-pretoken lookup, then repeatedly merge the adjacent pair whose
concatenation has the lowest rank). ``tok.merges`` is derived for people and exports: for each
token of two or more bytes, the two parts that this rule, using only lower ranks, leaves of the
token's bytes.

OpenAI's published files are recognised by content (SHA-256), which gives their pattern and
special tokens; for any other file pass ``pattern=`` (and ``special_tokens=`` if it has some).

>>> import tempfile, pathlib
>>> from bpe_spark import Tokenizer, TrainerConfig, train
>>> tok = train(["ab ab abc"], TrainerConfig(vocab_size=258))
>>> path = pathlib.Path(tempfile.mkdtemp()) / "toy.tiktoken"
>>> write_tiktoken(tok, path)
>>> back = Tokenizer(**read_tiktoken(path, pattern="gpt2"))
>>> back.merges == tok.merges, back.encode("abc") == tok.encode("abc")
(True, True)
"""

from __future__ import annotations

import base64
import binascii
import hashlib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from bpe_spark.errors import ConfigError, ModelFormatError
from bpe_spark.formats.fields import (
    ID_RANGE,
    MAX_TOKEN_ID,
    check_count,
    check_file_size,
    check_token,
    require_all_bytes,
)
from bpe_spark.words import bpe_merge

_GPT2_SPECIALS = {"<|endoftext|>": 50256}
# OpenAI's published files by the SHA-256 of their content (the hashes tiktoken itself checks).
KNOWN_FILES: dict[str, tuple[str, str, dict[str, int]]] = {
    "223921b76ee99bde995b7ff738513eef100fb51d18c93597a113bcffe865b2a7": (
        "cl100k_base",
        "cl100k",
        {
            "<|endoftext|>": 100257,
            "<|fim_prefix|>": 100258,
            "<|fim_middle|>": 100259,
            "<|fim_suffix|>": 100260,
            "<|endofprompt|>": 100276,
        },
    ),
    "446a9538cb6c348e3516120d7c08b09f57c36495e2acfffe59a5bf8b0cfb1a2d": (
        "o200k_base",
        "o200k",
        {"<|endoftext|>": 199999, "<|endofprompt|>": 200018},
    ),
    "306cd27f03c1a714eca7108e03d66b7dc042abe8c258b44c199a7ed9838dd930": (
        "r50k_base",
        "gpt2",
        _GPT2_SPECIALS,
    ),
    "94b5ca7dff4d00767bc256fdd1b27e5b17361d7b8a5f968547f9f23eb70d2069": (
        "p50k_base",
        "gpt2",
        _GPT2_SPECIALS,
    ),
}


def write_tiktoken(tok, path) -> None:
    """Write the ``.tiktoken`` file of a byte-scheme tokenizer (rank = token id, specials left out,
    as in OpenAI's files)."""
    if tok.scheme != "byte":
        raise ConfigError(".tiktoken files hold byte tokens; this tokenizer is char scheme")
    vocab = tok.ordinary_vocab
    seen: dict[bytes, int] = {}
    lines = []
    for token_id in sorted(vocab):
        value = vocab[token_id]
        if value in seen:
            raise ConfigError(
                f"ids {seen[value]} and {token_id} hold the same bytes; a .tiktoken file cannot"
            )
        seen[value] = token_id
        lines.append(f"{base64.b64encode(value).decode('ascii')} {token_id}\n")
    with open(path, "w", encoding="ascii") as fh:
        fh.writelines(lines)


def parse_ranks(path) -> tuple[dict[int, bytes], str]:
    """``{rank: token bytes}`` of a ``.tiktoken`` file, and the SHA-256 of its content."""
    path = Path(path)
    check_file_size(path)
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        raise ModelFormatError(f"{path}: no such file") from None
    ranks: dict[int, bytes] = {}
    seen: dict[bytes, int] = {}
    lines = raw.split(b"\n")
    check_count(len(lines) - 1, str(path), "lines (tokens)")
    for line_no, line in enumerate(lines, start=1):
        line = line.rstrip(b"\r")
        if not line:
            continue
        parts = line.split()
        if len(parts) != 2:
            raise ModelFormatError(
                f"{path}: line {line_no}: expected 'base64-token rank', got {line[:60]!r}"
            )
        try:
            token = base64.b64decode(parts[0], validate=True)
        except (binascii.Error, ValueError):
            raise ModelFormatError(
                f"{path}: line {line_no}: {parts[0][:60]!r} is not base64"
            ) from None
        if not parts[1].isdigit() or len(parts[1]) > 10 or int(parts[1]) > MAX_TOKEN_ID:
            raise ModelFormatError(
                f"{path}: line {line_no}: rank {parts[1][:20]!r} is not {ID_RANGE}"
            )
        rank = int(parts[1])
        if not token:
            raise ModelFormatError(f"{path}: line {line_no}: the empty token")
        check_token(token, f"{path}: line {line_no}")
        if rank in ranks:
            raise ModelFormatError(f"{path}: line {line_no}: rank {rank} is given twice")
        if token in seen:
            raise ModelFormatError(
                f"{path}: line {line_no}: token {token!r} already has rank {seen[token]}"
            )
        ranks[rank] = token
        seen[token] = rank
    if not ranks:
        raise ModelFormatError(f"{path}: no tokens")
    return ranks, hashlib.sha256(raw).hexdigest()


def derive_merges(ranks: Mapping[int, bytes]) -> tuple[list[tuple[int, int]], list[int]]:
    """Merges (in rank order) that make the multi-byte tokens, and the ids no merge makes.

    The merge of token ``t`` is the pair of parts that tiktoken's rule leaves of ``t``'s bytes when
    only ranks below ``t``'s may merge: exactly how encoding builds ``t``.
    """
    token_to_id = {value: rank for rank, value in ranks.items()}
    byte_ids = [token_to_id.get(bytes([b])) for b in range(256)]
    limit = 0

    def priority(left: int, right: int) -> tuple[int, int] | None:
        token_id = token_to_id.get(ranks[left] + ranks[right])
        if token_id is None or token_id >= limit:
            return None
        return token_id, token_id

    merges: list[tuple[int, int]] = []
    orphans: list[int] = []
    for rank in sorted(ranks):
        value = ranks[rank]
        if len(value) < 2:
            continue
        start = [byte_ids[b] for b in value]
        if None in start:
            orphans.append(rank)
            continue
        limit = rank
        parts = bpe_merge(start, priority)
        if len(parts) == 2:
            merges.append((parts[0], parts[1]))
        else:
            orphans.append(rank)  # reachable only by whole-pretoken lookup
    return merges, orphans


def read_tiktoken(
    path,
    *,
    pattern: str | None = None,
    special_tokens: Mapping[str, int] | None = None,
    **unused,
) -> dict[str, Any]:
    """The Tokenizer keyword arguments of a ``.tiktoken`` file; ids are the file's ranks.

    OpenAI's files (cl100k_base, o200k_base, r50k_base, p50k_base) are recognised by content and
    get their pattern and special tokens; ``pattern=`` / ``special_tokens=`` override them, and
    are needed for any other file.
    """
    if unused:
        raise ConfigError(f".tiktoken loading takes no options {sorted(unused)}")
    path = Path(path)
    ranks, digest = parse_ranks(path)
    known = KNOWN_FILES.get(digest)
    name = known[0] if known else None
    if pattern is None:
        if known is None:
            raise ConfigError(
                f"{path} is not one of OpenAI's published .tiktoken files, so its pretokenization "
                "pattern is unknown; pass pattern= (a preset like 'cl100k' or a regex) and special_tokens="
            )
        pattern = known[1]
    if special_tokens is None:
        special_tokens = known[2] if known else {}
    special_tokens = dict(special_tokens)
    for token, token_id in special_tokens.items():
        if token_id in ranks:
            raise ConfigError(
                f"special token {token!r} has id {token_id}, which {path} gives to {ranks[token_id]!r}"
            )
    require_all_bytes(set(ranks.values()), str(path))
    merges, orphans = derive_merges(ranks)
    metadata = {"source": {"format": "tiktoken", "path": str(path), "sha256": digest}}
    if name:
        metadata["source"]["encoding"] = name
    if orphans:
        metadata["source"]["tokens_without_merge"] = len(orphans)
    return {
        "scheme": "byte",
        "vocab": ranks,
        "merges": merges,
        "special_tokens": special_tokens,
        "pattern": pattern,
        "merge_rule": "ranks",
        "metadata": metadata,
    }
