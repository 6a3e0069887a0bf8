"""Hugging Face ``tokenizer.json`` import: the keyword arguments of
:class:`~bpe_spark.encoding.tokenizer.Tokenizer` for any BPE file ``tokenizers`` runs, keeping its ids.
The export is :mod:`bpe_spark.models.huggingface.tokenizer_json_write`.

Two routes, the same ids. A file of today's fast layout (byte-level BPE without model options: a
ByteLevel pre-tokenizer, or one Split + ByteLevel(use_regex=false) whose pattern Python's regex
reproduces; NFC/NFKC/Lowercase normalizers; special, unflagged added tokens; every merge pair
once) becomes a byte-scheme Tokenizer with a merge table (the compiled encoder). Everything else
becomes ``Tokenizer(pipeline=...)`` (:class:`bpe_spark.pipeline.Pipeline`), which runs the file's
normalizer, pre-tokenizers, BPE options, added tokens and decoder as ``tokenizers`` does. What
neither can reproduce exactly (BPE dropout, Unigram / WordPiece / WordLevel models, unknown
steps) is one :class:`ModelFormatError` line naming the file, the field and the value found.

>>> from bpe_spark import Tokenizer, TrainerConfig, train
>>> from bpe_spark.models.huggingface.tokenizer_json_write import to_hf_dict
>>> tok = train(["ab ab"], TrainerConfig(vocab_size=257))
>>> Tokenizer(**from_hf_dict(to_hf_dict(tok))).merge_ids == tok.merge_ids
True
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import regex

from bpe_spark.errors import ConfigError, ModelFormatError
from bpe_spark.bpe.fields import (
    ID_RANGE,
    Fields,
    check_count,
    check_pattern,
    check_token,
    is_id,
    require_all_bytes,
    show,
)
from bpe_spark.models.files import read_json_file
from bpe_spark.bpe.patterns import COVERING_PRESETS
from bpe_spark.bpe.oniguruma import (
    UnsupportedPattern,
    onig_pattern,
    python_pattern,
)
from bpe_spark.bpe.patterns import PRESETS, preset_name
from bpe_spark.pipeline.added_tokens import next_added_id
from bpe_spark.bpe.symbols import bytes_to_display, bytes_to_unicode, display_to_bytes

_NORMALIZERS = {"NFC", "NFKC"}


def read_tokenizer_json(path, *, special_tokens=None, **unused) -> dict[str, Any]:
    """The Tokenizer keyword arguments of a byte-level BPE ``tokenizer.json``, keeping its ids."""
    if unused:
        raise ConfigError(f"tokenizer.json loading takes no options {sorted(unused)}")
    path = Path(path)
    data = read_json_file(path)
    if special_tokens is not None:
        raise ConfigError(
            "tokenizer.json names its special tokens itself (added_tokens); drop special_tokens="
        )
    return from_hf_dict(data, path)


def from_hf_dict(data: Any, path="tokenizer.json") -> dict[str, Any]:
    """The Tokenizer keyword arguments of the parsed content of a ``tokenizer.json``.

    The one runtime of SentencePiece-style models too: a reader of another format (a
    SentencePiece ``.model``) builds the tokenizer.json it stands for and calls
    ``Tokenizer(**from_hf_dict(data, path))``, ``path`` the file it read (errors name it), e.g.
    ``{"model": {"type": "BPE", "vocab": {...}, "merges": [...], "byte_fallback": True,
    "unk_token": "<unk>", "fuse_unk": True}, "normalizer": {"type": "Sequence", "normalizers":
    [{"type": "Prepend", "prepend": "▁"}, {"type": "Replace", "pattern": {"String": " "},
    "content": "▁"}]}, "pre_tokenizer": None, "decoder": {"type": "Sequence", "decoders": [...]},
    "added_tokens": [{"id": 0, "content": "<unk>", "special": True, "normalized": False}, ...]}``
    (the ids of ``added_tokens`` must be the ones tokenizers gives them:
    :func:`bpe_spark.pipeline.added_tokens.next_added_id`).
    """
    fields = Fields(path)
    fields.top(data)
    model = data.get("model")
    if isinstance(model, dict) and model.get("type", "BPE") != "BPE":
        raise fields.error(
            "model.type", f"{model.get('type')!r} is not supported; bpe-spark reads BPE models only"
        )
    if _fits_fast_layout(data):
        try:
            return _fast_kwargs(data, fields, path)
        except _NotFast:
            pass  # not quite the fast layout: the pipeline runs it, or names what it cannot
    from bpe_spark.pipeline import Pipeline

    pipeline = Pipeline(data, path=path)
    return {
        "pipeline": pipeline,
        "metadata": {"source": {"format": "tokenizer.json", "path": str(path)}},
    }


class _NotFast(ModelFormatError):
    """What the fast layout cannot hold but the pipeline may run (never leaves this module)."""


class _LayoutFields(Fields):
    """The fields of a file tried as the fast layout: its refusals are :class:`_NotFast`."""

    def error(self, field: str, message: str) -> ModelFormatError:
        return _NotFast(f"{self.where(field)}: {message}")


def _fits_fast_layout(data: dict) -> bool:
    """The shape of today's fast layout (the details are :func:`_fast_kwargs`' to check)."""
    model = data.get("model")
    if not isinstance(model, dict) or any(
        model.get(key) for key in ("dropout", "continuing_subword_prefix", "end_of_word_suffix",
                                   "byte_fallback", "ignore_merges")
    ):
        return False
    added = data.get("added_tokens", [])
    if not isinstance(added, list) or not all(
        isinstance(entry, dict) and entry.get("special") is True
        and not any(entry.get(flag) for flag in ("single_word", "lstrip", "rstrip"))
        and not (entry.get("normalized") and data.get("normalizer") is not None)
        for entry in added
    ):
        return False
    for key in ("decoder", "post_processor"):
        step = data.get(key)
        if step is not None and not (isinstance(step, dict) and step.get("type") == "ByteLevel"):
            return False
    return True


def _fast_kwargs(data: dict, fields: Fields, path) -> dict[str, Any]:
    """The byte-scheme Tokenizer keyword arguments of a file of the fast layout."""
    for key in ("truncation", "padding"):
        if data.get(key) is not None:
            raise fields.error(
                key, f"{show(data[key])}: bpe-spark encodes whole texts; remove it (or set null)"
            )
    model = fields.get(data, "model", dict)
    model_type = model.get("type", "BPE")
    if model_type != "BPE":
        raise fields.error(
            "model.type", f"{model_type!r} is not supported; bpe-spark reads BPE models only"
        )
    if model.get("dropout") not in (None, 0, 0.0):
        raise fields.error(
            "model.dropout", f"{model['dropout']!r}: BPE dropout is not supported (set null)"
        )
    for key in ("continuing_subword_prefix", "end_of_word_suffix"):
        if model.get(key):
            raise fields.error(
                f"model.{key}", f"{model[key]!r}: not supported for byte-level BPE (set null)"
            )
    layout = _LayoutFields(path)
    pattern = _read_pre_tokenizer(layout, data.get("pre_tokenizer"))
    check_pattern(pattern, fields.where("pre_tokenizer") + " (as translated for Python's regex)")
    normalization, lowercase = _read_normalizer(layout, data.get("normalizer"))
    decoder = data.get("decoder")
    if decoder is not None and (
        not isinstance(decoder, dict) or decoder.get("type") != "ByteLevel"
    ):
        raise fields.error(
            "decoder.type", f"{show(decoder)}: only the ByteLevel decoder (or null) is supported"
        )
    post = data.get("post_processor")
    if post is not None and (not isinstance(post, dict) or post.get("type") != "ByteLevel"):
        kind = post.get("type") if isinstance(post, dict) else post
        raise fields.error(
            "post_processor.type",
            f"{kind!r} adds or changes ids; only ByteLevel (or null) is supported",
        )

    raw_vocab = fields.get(model, "vocab", dict, within="model")
    check_count(len(raw_vocab), fields.where("model.vocab"), "entries")
    specials = _read_added_tokens(
        fields, data.get("added_tokens", []), normalizer=data.get("normalizer"), data_vocab=raw_vocab
    )
    special_ids = set(specials.values())
    vocab: dict[int, bytes] = {}
    for key, token_id in raw_vocab.items():
        if not is_id(token_id):
            raise fields.error(f"model.vocab[{key!r}]", f"id {token_id!r} is not {ID_RANGE}")
        if token_id in special_ids:
            continue  # the special token itself (tokenizers lists specials in the vocab too)
        try:
            value = display_to_bytes(key)
        except KeyError:
            bad = next(ch for ch in key if ch not in set(bytes_to_unicode()))
            raise layout.error(
                f"model.vocab[{key!r}]",
                f"character {bad!r} is outside the byte-level alphabet; is this a byte-level BPE?",
            ) from None
        if not value:
            raise fields.error("model.vocab", "holds the empty string")
        check_token(value, fields.where(f"model.vocab[{key[:20]!r}]"))
        if token_id in vocab:
            raise fields.error(f"model.vocab[{key!r}]", f"id {token_id} is used twice")
        vocab[token_id] = value
    token_to_id: dict[bytes, int] = {}
    for token_id in sorted(vocab):
        token_to_id.setdefault(vocab[token_id], token_id)
    merges = []
    merge_entries = fields.get(model, "merges", list, within="model")
    seen_pairs: dict[tuple, int] = {}
    check_count(len(merge_entries), fields.where("model.merges"), "merges")
    for rank, entry in enumerate(merge_entries):
        field = f"model.merges[{rank}]"
        if isinstance(entry, str):
            parts = entry.split(" ")
        elif isinstance(entry, list):
            parts = entry
        else:
            raise fields.error(field, f'{show(entry)} is neither "left right" nor [left, right]')
        if len(parts) != 2 or not all(isinstance(p, str) and p for p in parts):
            raise fields.error(field, f"{show(entry)} is not a pair of two tokens")
        pair = tuple(parts)
        if pair in seen_pairs:  # tokenizers keeps the last rank of a repeated pair; we the first
            raise layout.error(field, f"{show(entry)} repeats the pair of merge {seen_pairs[pair]}")
        seen_pairs[pair] = rank
        ids = []
        for part in parts:
            token_id = raw_vocab.get(part)
            if token_id is None or token_id in special_ids:
                raise fields.error(field, f"token {part!r} is not in model.vocab")
            ids.append(token_id)
        merged = vocab[ids[0]] + vocab[ids[1]]
        if merged not in token_to_id:
            raise fields.error(
                field, f"the merged token {bytes_to_display(merged)!r} is not in model.vocab"
            )
        merges.append((ids[0], ids[1]))
    try:
        require_all_bytes(token_to_id, f"{path}: field 'model.vocab'", show_byte=bytes_to_display)
    except ModelFormatError as exc:
        raise _NotFast(str(exc)) from None
    merge_rule = "pairs"
    unk = model.get("unk_token")
    metadata = {"source": {"format": "tokenizer.json", "path": str(path)}}
    if unk is not None:
        metadata["source"]["unk_token"] = unk  # never used: every byte is in the vocabulary
    return {
        "scheme": "byte",
        "vocab": vocab,
        "merges": merges,
        "special_tokens": specials,
        "pattern": pattern,
        "lowercase": lowercase,
        "normalization": normalization,
        "merge_rule": merge_rule,
        "metadata": metadata,
    }


def _read_added_tokens(fields: Fields, added: Any, *, normalizer: Any, data_vocab: Any) -> dict[str, int]:
    if not isinstance(added, list):
        raise fields.error("added_tokens", f"{show(added)} is not a list")
    specials: dict[str, int] = {}
    check_count(len(added), fields.where("added_tokens"), "added tokens")
    raw_vocab = data_vocab if isinstance(data_vocab, dict) else {}
    for i, entry in enumerate(added):
        field = f"added_tokens[{i}]"
        if not isinstance(entry, dict):
            raise fields.error(field, "is not an object")
        content = fields.get(entry, "content", str, within=field)
        token_id = fields.get(entry, "id", int, within=field)
        if not is_id(token_id):
            raise fields.bad(f"{field}.id", token_id, ID_RANGE)
        check_token(content, fields.where(f"{field}.content"))
        if not entry.get("special", False):
            raise fields.error(
                f"{field}.special",
                f"{content!r} is an added token that is not special; "
                "bpe-spark supports special added tokens only",
            )
        for flag in ("single_word", "lstrip", "rstrip"):
            if entry.get(flag):
                raise fields.error(f"{field}.{flag}", f"true for {content!r}: not supported")
        if entry.get("normalized") and normalizer is not None:
            raise fields.error(
                f"{field}.normalized",
                f"true for {content!r} with a normalizer: bpe-spark finds "
                "special tokens in the raw text",
            )
        if content in specials:
            raise fields.error(field, f"{content!r} is listed twice")
        expected = next_added_id(content, raw_vocab, specials.values())
        if token_id != expected:
            raise fields.error(f"{field}.id", f"{token_id}, but tokenizers gives {content!r} the id {expected}")
        specials[content] = token_id
    return specials


def _read_normalizer(fields: Fields, normalizer: Any) -> tuple[str | None, bool]:
    if normalizer is None:
        return None, False
    steps = [normalizer]
    field = "normalizer"
    if isinstance(normalizer, dict) and normalizer.get("type") == "Sequence":
        steps = fields.get(normalizer, "normalizers", list, within="normalizer")
        field = "normalizer.normalizers"
    types = []
    for i, step in enumerate(steps):
        kind = step.get("type") if isinstance(step, dict) else None
        where = f"{field}[{i}].type" if field.endswith("normalizers") else "normalizer.type"
        if kind not in _NORMALIZERS | {"Lowercase"}:
            raise fields.error(
                where,
                f"{kind!r} is not supported; bpe-spark normalizes with NFC, NFKC and/or Lowercase",
            )
        types.append(kind)
    forms = [t for t in types if t in _NORMALIZERS]
    if (
        len(forms) > 1
        or types.count("Lowercase") > 1
        or (forms and types[0] == "Lowercase" and len(types) > 1)
    ):
        raise fields.error(
            field, f"{types}: bpe-spark applies at most one Unicode form, then Lowercase"
        )
    return (forms[0] if forms else None), "Lowercase" in types


def _translated(fields: Fields, source: str, field: str) -> str:
    """``python_pattern(source)``, its refusal as the field's error."""
    try:
        return python_pattern(source)
    except UnsupportedPattern as exc:
        raise fields.error(field, str(exc)) from None


def _preset_of(fields: Fields, source: str, field: str) -> str | None:
    """The preset an Oniguruma pattern means: its Python translation is the preset's text, or it
    is the preset as our export writes it (``onig_pattern``, which keeps the preset's meaning).
    Never the preset whose Python text it is: tiktoken's cl100k text means other pieces in
    Oniguruma ("1870" is 18|70 there)."""
    name = preset_name(_translated(fields, source, field))
    if name is not None:
        return name
    return next((name for name, preset in PRESETS.items() if source == onig_pattern(preset)), None)


def _is_byte_level(step: Any) -> bool:
    return isinstance(step, dict) and step.get("type") == "ByteLevel"


def _check_byte_level(fields: Fields, step: dict, field: str) -> None:
    if step.get("add_prefix_space", True):
        raise fields.error(
            f"{field}.add_prefix_space",
            "true: a prefix space changes the text; only false is supported",
        )


def _read_pre_tokenizer(fields: Fields, pre: Any) -> str:
    if pre is None:
        raise fields.error(
            "pre_tokenizer", "null: bpe-spark reads byte-level BPE (a ByteLevel pre-tokenizer)"
        )
    if _is_byte_level(pre):
        _check_byte_level(fields, pre, "pre_tokenizer")
        if pre.get("use_regex", True):
            return "gpt2"
        return r"[\s\S]+"  # no split: the whole text is one pretoken
    if not (isinstance(pre, dict) and pre.get("type") == "Sequence"):
        kind = pre.get("type") if isinstance(pre, dict) else pre
        raise fields.error(
            "pre_tokenizer.type",
            f"{kind!r} is not supported; expected ByteLevel or Sequence[Split, ByteLevel]",
        )
    steps = fields.get(pre, "pretokenizers", list, within="pre_tokenizer")
    field = "pre_tokenizer.pretokenizers"
    if len(steps) == 1 and _is_byte_level(steps[0]):
        return _read_pre_tokenizer(fields, steps[0])
    if len(steps) != 2 or not _is_byte_level(steps[1]):
        raise fields.error(field, "expected [Split, ByteLevel(use_regex=false)]")
    _check_byte_level(fields, steps[1], f"{field}[1]")
    if steps[1].get("use_regex", True):
        raise fields.error(
            f"{field}[1].use_regex", "true after a Split would split twice; expected false"
        )
    split = steps[0]
    if not (isinstance(split, dict) and split.get("type") == "Split"):
        kind = split.get("type") if isinstance(split, dict) else split
        raise fields.error(f"{field}[0].type", f"{kind!r} is not supported; expected Split")
    pattern = fields.get(split, "pattern", dict, within=f"{field}[0]")
    if "Regex" in pattern:
        source = pattern["Regex"]
    elif "String" in pattern:
        source = regex.escape(pattern["String"]) if isinstance(pattern["String"], str) else None
    else:
        source = None
    if not isinstance(source, str) or not source:
        raise fields.error(
            f"{field}[0].pattern",
            f'{show(pattern)}: expected {{"Regex": ...}} or {{"String": ...}}',
        )
    check_pattern(source, fields.where(f"{field}[0].pattern"))
    # subtle: a preset only where the translation is exactly its text, never by the file's text
    # (Oniguruma reads tiktoken's cl100k pattern otherwise than Python does)
    name = _preset_of(fields, source, f"{field}[0].pattern")
    source = PRESETS[name] if name is not None else _translated(fields, source, f"{field}[0].pattern")
    try:
        regex.compile(source)
    except regex.error as exc:
        raise fields.error(
            f"{field}[0].pattern", f"the regex does not compile in Python's regex module: {exc}"
        ) from None
    behavior = split.get("behavior")
    invert = split.get("invert", False)
    if behavior == "Removed" and invert:
        return name or source  # keeps exactly the matches: our findall
    if behavior == "Isolated" and not invert:
        if name in COVERING_PRESETS:
            return name
        # subtle: Isolated also keeps each run of text between matches as a piece; this
        # alternation yields the same pieces from findall.
        isolated = rf"(?:{source})|(?:(?!(?:{source}))[\s\S])+"
        return preset_name(isolated) or isolated  # SuperBPE's split: the superbpe preset
    raise fields.error(
        f"{field}[0].behavior",
        f"{behavior!r} with invert={invert!r} is not supported; "
        "expected Isolated (invert false) or Removed (invert true)",
    )
