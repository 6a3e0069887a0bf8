"""Mistral's tekken JSON (``tekken.json``, ``mistral-common``'s ``Tekkenizer.from_file``): read as
the keyword arguments of :class:`~bpe_spark.encoding.tokenizer.Tokenizer`, with mistral-common's ids.

A tekken file is tiktoken ranks in JSON: ``config`` {``pattern`` (tiktoken's ``pat_str``, a
Python ``regex`` pattern), ``default_vocab_size``, ``default_num_special_tokens``, ``version``},
``vocab`` [{``rank``, ``token_bytes`` (base64), ``token_str``}] and, from version v7 on,
``special_tokens`` [{``rank``, ``token_str``, ``is_control``}]. ``Tekkenizer`` numbers them so:

- ids ``0 .. n-1`` are the ``n = default_num_special_tokens`` special tokens: the file's list
  (rank = its position), then fillers ``<SPECIAL_i>`` up to ``n``; a file of version v7 or
  older without the list gets mistral-common's 20 deprecated specials (``<unk>``, ``<s>``, ...);
- vocabulary rank ``r`` is id ``n + r``, and the vocabulary is cut to its first
  ``default_vocab_size - n`` entries (ranks 0..255 are the single bytes in byte order);
- encoding is tiktoken's rank rule with no special tokens in text (``Tekkenizer.encode`` reads
  ``<s>`` in text as ordinary text: our ``encode_ordinary``; ``allowed_special`` makes it id 1).

The ``image`` / ``audio`` / ``multimodal`` / ``model_settings_builder`` sections do not change
how text encodes and are not read.

>>> import base64, json, tempfile, pathlib
>>> from bpe_spark import Tokenizer
>>> vocab = [bytes([b]) for b in range(256)] + [b"ab"]
>>> data = {"config": {"pattern": r"\\S+|\\s+", "default_vocab_size": 260,
...                    "default_num_special_tokens": 3, "version": "v7"},
...         "vocab": [{"rank": r, "token_bytes": base64.b64encode(t).decode(), "token_str": None}
...                   for r, t in enumerate(vocab)],
...         "special_tokens": [{"rank": 0, "token_str": "<unk>", "is_control": True}]}
>>> path = pathlib.Path(tempfile.mkdtemp()) / "tekken.json"
>>> _ = path.write_text(json.dumps(data))
>>> tok = Tokenizer.load(path)
>>> tok.special_tokens, tok.encode("ab a")
({'<unk>': 0, '<SPECIAL_1>': 1, '<SPECIAL_2>': 2}, [259, 35, 100])
"""

from __future__ import annotations

import base64
import binascii
from pathlib import Path
from typing import Any

import regex

from bpe_spark.errors import ConfigError
from bpe_spark.bpe.fields import (
    Fields,
    check_count,
    check_pattern,
    check_token,
    is_integer,
    show,
)
from bpe_spark.models.files import read_json_file
from bpe_spark.models.tiktoken_file import rank_model_kwargs
from bpe_spark.bpe.patterns import preset_name

# mistral-common's SpecialTokens, in the order of Tekkenizer.DEPRECATED_SPECIAL_TOKENS: the
# specials of a file of version v7 or older that lists none.
DEPRECATED_SPECIAL_TOKENS = (
    "<unk>", "<s>", "</s>", "[INST]", "[/INST]", "[AVAILABLE_TOOLS]", "[/AVAILABLE_TOOLS]",
    "[TOOL_RESULTS]", "[/TOOL_RESULTS]", "[TOOL_CALLS]", "[IMG]", "<pad>", "[IMG_BREAK]",
    "[IMG_END]", "[PREFIX]", "[MIDDLE]", "[SUFFIX]", "[SYSTEM_PROMPT]", "[/SYSTEM_PROMPT]",
    "[TOOL_CONTENT]",
)  # fmt: skip
FILLER_TEMPLATE = "<SPECIAL_{id}>"
_VERSION = regex.compile(r"v([0-9]{1,4})")


def looks_like_tekken(top: Any) -> bool:
    """A parsed JSON file is a tekken file: an object with a ``config`` object and a ``vocab``
    list (a GPT-2 vocab.json maps tokens to ids; a tokenizer.json has a ``model`` object)."""
    return (
        isinstance(top, dict)
        and isinstance(top.get("config"), dict)
        and isinstance(top.get("vocab"), list)
        and "model" not in top
    )


def read_tekken(path, **unused) -> dict[str, Any]:
    """The Tokenizer keyword arguments of a tekken JSON file, with ``Tekkenizer``'s ids."""
    if unused:
        raise ConfigError(f"tekken loading takes no options {sorted(unused)}")
    path = Path(path)
    return from_tekken_dict(read_json_file(path), path)


def from_tekken_dict(data: Any, path="tekken.json") -> dict[str, Any]:
    """The Tokenizer keyword arguments of the parsed content of a tekken file."""
    fields = Fields(path)
    fields.top(data)
    config = fields.get(data, "config", dict)
    pattern = fields.get(config, "pattern", str, within="config")
    check_pattern(pattern, fields.where("config.pattern"))
    try:
        regex.compile(pattern)
    except regex.error as exc:
        raise fields.error("config.pattern", f"{show(pattern)} is no valid regex ({exc})") from None
    vocab_size = _count(fields, config, "default_vocab_size")
    num_special = _count(fields, config, "default_num_special_tokens")
    version = fields.get(config, "version", str, within="config")
    version_match = _VERSION.fullmatch(version)
    if version_match is None:
        raise fields.bad("config.version", version, "a version like \"v7\"")
    specials = _special_tokens(fields, data, int(version_match.group(1)), num_special)
    inner_size = vocab_size - num_special
    entries = fields.get(data, "vocab", list)
    check_count(len(entries), fields.where("vocab"), "entries")
    if inner_size < 256 or len(entries) < inner_size:
        raise fields.error(
            "config.default_vocab_size",
            f"is {vocab_size} with {num_special} special tokens, so {inner_size} vocabulary "
            f"entries; the vocab list has {len(entries)} and at least 256 (the bytes) are needed",
        )
    vocab = _vocab(fields, entries[:inner_size], offset=num_special)
    source: dict[str, Any] = {"format": "tekken", "path": str(path), "version": version}
    if len(entries) > inner_size:
        source["vocab_cut"] = {"file": len(entries), "kept": inner_size}
    return rank_model_kwargs(vocab, specials, preset_name(pattern) or pattern, source)


def _count(fields: Fields, config: dict, key: str) -> int:
    value = fields.get(config, key, int, within="config")
    if value < 0:
        raise fields.bad(f"config.{key}", value, "a count (0 or more)")
    return value


def _special_tokens(fields: Fields, data: dict, version: int, num_special: int) -> dict[str, int]:
    """``{token: id}``: the file's list (or the deprecated one), then the fillers up to
    ``num_special`` (mistral-common's ``Tekkenizer.__init__``)."""
    listed = fields.get(data, "special_tokens", list, optional=True)
    if listed is None:
        if version > 7:
            raise fields.error(
                "special_tokens",
                f"is missing; mistral-common requires it in files of version v{version} (after v7)",
            )
        names = list(DEPRECATED_SPECIAL_TOKENS)
    else:
        names = []
        for position, entry in enumerate(listed):
            field = f"special_tokens[{position}]"
            if not isinstance(entry, dict):
                raise fields.bad(field, entry, "an object")
            rank = fields.get(entry, "rank", int, within=field)
            if rank != position:
                # subtle: Tekkenizer decodes special id i as the list's i-th entry
                raise fields.bad(f"{field}.rank", rank, f"{position} (its position in the list)")
            token = fields.get(entry, "token_str", str, within=field)
            check_token(token, fields.where(f"{field}.token_str"))
            if not token:
                raise fields.error(f"{field}.token_str", "is the empty string")
            names.append(token)
    if len(names) > num_special:
        raise fields.error(
            "config.default_num_special_tokens",
            f"is {num_special}, fewer than the {len(names)} special tokens the file defines",
        )
    specials: dict[str, int] = {}
    for token_id, token in enumerate(names):
        if token in specials:
            raise fields.error(
                f"special_tokens[{token_id}].token_str", f"{show(token)} is listed twice"
            )
        specials[token] = token_id
    for token_id in range(len(names), num_special):
        token = FILLER_TEMPLATE.format(id=token_id)
        if token in specials:
            raise fields.error(
                "special_tokens", f"names {show(token)}, the filler mistral-common gives id {token_id}"
            )
        specials[token] = token_id
    return specials


def _vocab(fields: Fields, entries: list, *, offset: int) -> dict[int, bytes]:
    """``{id: token bytes}`` of the kept vocab entries (id = ``offset`` + rank)."""
    vocab: dict[int, bytes] = {}
    seen: dict[bytes, int] = {}
    for position, entry in enumerate(entries):
        field = f"vocab[{position}]"
        if not isinstance(entry, dict):
            raise fields.bad(field, entry, "an object")
        rank = entry.get("rank")
        if not is_integer(rank) or rank != position:
            raise fields.bad(f"{field}.rank", rank, f"{position} (ranks run 0, 1, 2, ...)")
        encoded = fields.get(entry, "token_bytes", str, within=field)
        try:
            token = base64.b64decode(encoded, validate=True)
        except (binascii.Error, ValueError):
            raise fields.bad(f"{field}.token_bytes", encoded, "base64") from None
        if position < 256 and token != bytes([position]):
            raise fields.error(
                f"{field}.token_bytes",
                f"is {token!r}; ranks 0..255 must be the single bytes in byte order",
            )
        if not token:
            raise fields.error(f"{field}.token_bytes", "is the empty token")
        check_token(token, fields.where(f"{field}.token_bytes"))
        if token in seen:
            raise fields.error(
                f"{field}.token_bytes", f"{token!r} already has rank {seen[token]}"
            )
        seen[token] = rank
        vocab[offset + rank] = token
    return vocab
