"""Hugging Face ``tokenizer.json`` (BPE models, byte level): export and import.

Export writes what ``tokenizers.Tokenizer.from_file`` and ``transformers.PreTrainedTokenizerFast``
load, with our ids: a BPE model whose vocab is in GPT-2's printable byte form, the merges in rank
order, a pre-tokenizer that reproduces our pretokens, a ByteLevel decoder, the special tokens as
``added_tokens``, and a normalizer when the tokenizer lowercases or normalizes.

Import accepts a byte-level BPE file (a ByteLevel pre-tokenizer, or Split + ByteLevel) and keeps
its ids; anything this library cannot reproduce exactly is a :class:`ModelFormatError` naming the
field.

>>> from bpe_spark import TrainerConfig, train
>>> data = to_hf_dict(train(["ab ab"], TrainerConfig(vocab_size=257)))
>>> data["model"]["merges"], data["model"]["vocab"]["ab"]
(['a b'], 256)
"""

from __future__ import annotations

import itertools
import json
from pathlib import Path
from typing import Any

import regex

from bpe_spark.errors import ConfigError, ModelFormatError
from bpe_spark.formats import read_json_file
from bpe_spark.patterns import PRESETS
from bpe_spark.symbols import bytes_to_display, bytes_to_unicode, display_to_bytes
from bpe_spark.tokenizer import Tokenizer

# Presets whose regex matches every character of any text: Split "Isolated" (which keeps the text
# between matches too) then gives exactly our pretokens. Other patterns drop unmatched text, which
# Split "Removed" with invert=True reproduces.
_COVERING_PRESETS = ("gpt2", "cl100k", "o200k")
_NORMALIZERS = {"NFC", "NFKC"}


# --- regex dialects ---------------------------------------------------------------------------
# subtle: tokenizers compiles Split patterns with Oniguruma (Ruby syntax), where ``X{1,3}+`` is not
# a possessive interval (as in Python's regex and tiktoken) but ``(?:X{1,3})+``. cl100k uses it.
# Export rewrites it as the atomic group ``(?>X{1,3})``; import reads Onig's meaning back.
_INTERVAL_PLUS = regex.compile(r"\{\d+(?:,\d*)?\}\+")


def _atom_start(source: str, end: int) -> int:
    """Start of the regex atom that ends just before ``end`` (a group, a class, an escape, a char)."""
    last = source[end - 1]
    if last == ")":
        depth = 0
        for i in range(end - 1, -1, -1):
            if source[i] in ")(" and not _escaped(source, i):
                depth += 1 if source[i] == ")" else -1
                if depth == 0:
                    return i
        return 0
    if last == "]" and not _escaped(source, end - 1):
        # scan forward for the class that closes here (classes may hold escaped brackets)
        i = 0
        while i < end:
            if source[i] == "\\":
                i += 2
                continue
            if source[i] == "[":
                j = _class_end(source, i)
                if j == end - 1:
                    return i
                i = j + 1
                continue
            i += 1
        return end - 1
    if last == "}":
        k = source.rfind("\\", 0, end)
        if k >= 0 and source[k + 1 : k + 2] in ("p", "P", "x", "N", "u"):
            return k
    if end >= 2 and _escaped(source, end - 1):
        return end - 2
    return end - 1


def _escaped(source: str, i: int) -> bool:
    slashes = 0
    while i - 1 - slashes >= 0 and source[i - 1 - slashes] == "\\":
        slashes += 1
    return slashes % 2 == 1


def _class_end(source: str, start: int) -> int:
    i = start + 1
    if i < len(source) and source[i] == "^":
        i += 1
    if i < len(source) and source[i] == "]":
        i += 1
    while i < len(source):
        if source[i] == "\\":
            i += 2
            continue
        if source[i] == "[":
            i = _class_end(source, i) + 1
            continue
        if source[i] == "]":
            return i
        i += 1
    return len(source) - 1


def _in_class(source: str, position: int) -> bool:
    i = 0
    while i < position:
        if source[i] == "\\":
            i += 2
            continue
        if source[i] == "[":
            end = _class_end(source, i)
            if end >= position:
                return True
            i = end + 1
            continue
        i += 1
    return False


def _rewrite_interval_plus(source: str, *, to: str) -> str:
    """``X{n,m}+`` as ``(?>X{n,m})`` (``to="atomic"``, Python's meaning for Onig) or
    ``(?:X{n,m})+`` (``to="repeat"``, Onig's meaning for Python)."""
    out = source
    offset = 0
    for match in list(_INTERVAL_PLUS.finditer(source)):
        start = match.start()
        if _escaped(source, start) or _in_class(source, start):
            continue
        atom = _atom_start(source, start)
        interval = match.group()[:-1]
        body = source[atom:start] + interval
        replacement = f"(?>{body})" if to == "atomic" else f"(?:{body})+"
        out = out[: atom + offset] + replacement + out[match.end() + offset :]
        offset += len(replacement) - (match.end() - atom)
    return out


def onig_pattern(source: str) -> str:
    r"""Our (Python ``regex``) pattern in the Oniguruma syntax ``tokenizers`` compiles.

    >>> onig_pattern(r"\p{N}{1,3}+|\s")
    '(?>\\p{N}{1,3})|\\s'
    """
    return _rewrite_interval_plus(source, to="atomic")


def python_pattern(source: str) -> str:
    """An Oniguruma pattern from a ``tokenizer.json`` in Python ``regex`` syntax."""
    return _rewrite_interval_plus(source, to="repeat")


# --- export -----------------------------------------------------------------------------------
def _normalizer(tok) -> dict | None:
    steps = []
    if tok.normalization:
        steps.append({"type": tok.normalization})
    if tok.lowercase:
        steps.append({"type": "Lowercase"})
    if not steps:
        return None
    return steps[0] if len(steps) == 1 else {"type": "Sequence", "normalizers": steps}


def _byte_level(*, use_regex: bool) -> dict:
    return {
        "type": "ByteLevel",
        "add_prefix_space": False,
        "trim_offsets": True,
        "use_regex": use_regex,
    }


def _pre_tokenizer(tok) -> dict:
    if tok.pattern == "gpt2":
        return _byte_level(use_regex=True)  # ByteLevel's own regex is the GPT-2 pattern
    source = onig_pattern(PRESETS.get(tok.pattern, tok.pattern))
    if tok.pattern in _COVERING_PRESETS:
        split = {
            "type": "Split",
            "pattern": {"Regex": source},
            "behavior": "Isolated",
            "invert": False,
        }
    else:
        split = {
            "type": "Split",
            "pattern": {"Regex": source},
            "behavior": "Removed",
            "invert": True,
        }
    return {"type": "Sequence", "pretokenizers": [split, _byte_level(use_regex=False)]}


def to_hf_dict(tok) -> dict[str, Any]:
    """The ``tokenizer.json`` content of a byte-scheme tokenizer."""
    if tok.scheme != "byte":
        raise ConfigError(
            "tokenizer.json export needs a byte-scheme tokenizer; this one is char scheme"
        )
    vocab = tok.to_dict()["vocab"]
    model_vocab: dict[str, int] = {}
    for token_id in sorted(vocab):
        model_vocab.setdefault(bytes_to_display(vocab[token_id]), token_id)
    added_tokens = []
    for token, token_id in sorted(tok.special_tokens.items(), key=lambda item: item[1]):
        # subtle: a special token also in the model vocab keeps its id when tokenizers loads it;
        # otherwise tokenizers numbers added tokens after the vocab, which breaks gaps in ids.
        model_vocab.setdefault(token, token_id)
        added_tokens.append(
            {
                "id": token_id,
                "content": token,
                "single_word": False,
                "lstrip": False,
                "rstrip": False,
                "normalized": False,
                "special": True,
            }
        )
    merges = [
        f"{bytes_to_display(vocab[left])} {bytes_to_display(vocab[right])}"
        for left, right, _ in tok.merge_ids
    ]
    return {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": added_tokens,
        "normalizer": _normalizer(tok),
        "pre_tokenizer": _pre_tokenizer(tok),
        "post_processor": None,
        "decoder": _byte_level(use_regex=True),
        "model": {
            "type": "BPE",
            "dropout": None,
            "unk_token": None,
            "continuing_subword_prefix": None,
            "end_of_word_suffix": None,
            "fuse_unk": False,
            "byte_fallback": False,
            # ranks rule (tiktoken): a pretoken that is a whole token is that token.
            "ignore_merges": tok.merge_rule == "ranks",
            "vocab": model_vocab,
            "merges": merges,
        },
    }


def write_tokenizer_json(tok, path) -> None:
    """Write ``tokenizer.json`` to ``path`` (not atomic; :func:`bpe_spark.formats.export_model` is)."""
    with open(path, "w", encoding="utf-8") as fh:
        json.dump(to_hf_dict(tok), fh, ensure_ascii=False, indent=2)
        fh.write("\n")


# --- import -----------------------------------------------------------------------------------
class _Reader:
    """Field access that names the file and the field path in every error."""

    def __init__(self, path: Path):
        self.path = path

    def fail(self, field: str, message: str) -> ModelFormatError:
        return ModelFormatError(f"{self.path}: field '{field}': {message}")

    def get(self, obj: dict, key: str, field: str, types, *, default=...):
        if key not in obj:
            if default is not ...:
                return default
            raise self.fail(f"{field}.{key}" if field else key, "missing")
        value = obj[key]
        if value is None and default is None:
            return None
        if not isinstance(value, types) or (
            isinstance(value, bool) and bool not in _as_tuple(types)
        ):
            raise self.fail(
                f"{field}.{key}" if field else key, f"{_short(value)} is not {_names(types)}"
            )
        return value


def _as_tuple(types) -> tuple:
    return types if isinstance(types, tuple) else (types,)


def _names(types) -> str:
    return " or ".join(
        {
            dict: "an object",
            list: "a list",
            str: "a string",
            int: "an integer",
            bool: "a boolean",
            float: "a number",
        }.get(t, t.__name__)
        for t in _as_tuple(types)
    )


def _short(value) -> str:
    text = json.dumps(value, ensure_ascii=False)
    return text if len(text) <= 80 else text[:77] + "..."


def read_tokenizer_json(path, *, special_tokens=None, **unused) -> Tokenizer:
    """Load a byte-level BPE ``tokenizer.json``, keeping its ids."""
    if unused:
        raise ConfigError(f"tokenizer.json loading takes no options {sorted(unused)}")
    path = Path(path)
    data = read_json_file(path)
    if special_tokens is not None:
        raise ConfigError(
            "tokenizer.json names its special tokens itself (added_tokens); drop special_tokens="
        )
    return from_hf_dict(data, path)


def from_hf_dict(data: Any, path="tokenizer.json") -> Tokenizer:
    r = _Reader(Path(path))
    if not isinstance(data, dict):
        raise ModelFormatError(f"{path}: expected a JSON object at the top level")
    for key in ("truncation", "padding"):
        if data.get(key) is not None:
            raise r.fail(key, "is set; bpe-spark encodes whole texts, remove it (or set null)")
    model = r.get(data, "model", "", dict)
    model_type = model.get("type", "BPE")
    if model_type != "BPE":
        raise r.fail(
            "model.type", f"{model_type!r} is not supported; bpe-spark reads BPE models only"
        )
    if model.get("dropout") not in (None, 0, 0.0):
        raise r.fail(
            "model.dropout", f"{model['dropout']!r}: BPE dropout is not supported (set null)"
        )
    for key in ("continuing_subword_prefix", "end_of_word_suffix"):
        if model.get(key):
            raise r.fail(
                f"model.{key}", f"{model[key]!r}: not supported for byte-level BPE (set null)"
            )
    if model.get("byte_fallback"):
        raise r.fail("model.byte_fallback", "byte fallback is not supported (set false)")
    pattern = _read_pre_tokenizer(r, data.get("pre_tokenizer"))
    normalization, lowercase = _read_normalizer(r, data.get("normalizer"))
    decoder = data.get("decoder")
    if decoder is not None and (
        not isinstance(decoder, dict) or decoder.get("type") != "ByteLevel"
    ):
        raise r.fail(
            "decoder.type", f"{_short(decoder)}: only the ByteLevel decoder (or null) is supported"
        )
    post = data.get("post_processor")
    if post is not None and (not isinstance(post, dict) or post.get("type") != "ByteLevel"):
        kind = post.get("type") if isinstance(post, dict) else post
        raise r.fail(
            "post_processor.type",
            f"{kind!r} adds or changes ids; only ByteLevel (or null) is supported",
        )

    raw_vocab = r.get(model, "vocab", "model", dict)
    specials = _read_added_tokens(
        r, data.get("added_tokens", []), normalizer=data.get("normalizer")
    )
    special_ids = set(specials.values())
    vocab: dict[int, bytes] = {}
    for key, token_id in raw_vocab.items():
        if not isinstance(token_id, int) or isinstance(token_id, bool) or token_id < 0:
            raise r.fail(f"model.vocab[{key!r}]", f"id {token_id!r} is not an integer >= 0")
        if token_id in special_ids:
            continue  # the special token itself (tokenizers lists specials in the vocab too)
        try:
            value = display_to_bytes(key)
        except KeyError:
            bad = next(ch for ch in key if ch not in set(bytes_to_unicode()))
            raise r.fail(
                f"model.vocab[{key!r}]",
                f"character {bad!r} is outside the byte-level alphabet; is this a byte-level BPE?",
            ) from None
        if not value:
            raise r.fail("model.vocab", "holds the empty string")
        if token_id in vocab:
            raise r.fail(f"model.vocab[{key!r}]", f"id {token_id} is used twice")
        vocab[token_id] = value
    token_to_id: dict[bytes, int] = {}
    for token_id in sorted(vocab):
        token_to_id.setdefault(vocab[token_id], token_id)
    merges = []
    for rank, entry in enumerate(r.get(model, "merges", "model", list)):
        field = f"model.merges[{rank}]"
        if isinstance(entry, str):
            parts = entry.split(" ")
        elif isinstance(entry, list):
            parts = entry
        else:
            raise r.fail(field, f'{_short(entry)} is neither "left right" nor [left, right]')
        if len(parts) != 2 or not all(isinstance(p, str) and p for p in parts):
            raise r.fail(field, f"{_short(entry)} is not a pair of two tokens")
        ids = []
        for part in parts:
            token_id = raw_vocab.get(part)
            if token_id is None or token_id in special_ids:
                raise r.fail(field, f"token {part!r} is not in model.vocab")
            ids.append(token_id)
        merged = vocab[ids[0]] + vocab[ids[1]]
        if merged not in token_to_id:
            raise r.fail(
                field, f"the merged token {bytes_to_display(merged)!r} is not in model.vocab"
            )
        merges.append((ids[0], ids[1]))
    missing = [b for b in range(256) if bytes([b]) not in token_to_id]
    if missing:
        raise r.fail(
            "model.vocab",
            f"lacks single bytes {[bytes_to_display(bytes([b])) for b in missing[:8]]}; "
            "a byte-level vocabulary needs all 256",
        )
    merge_rule = "pairs"
    if model.get("ignore_merges"):
        # tiktoken-derived files (Llama 3 style): merges in order of the token they make, and a
        # pretoken that is a whole token taken as is. That is tiktoken's rank rule.
        made = [token_to_id[vocab[left] + vocab[right]] for left, right in merges]
        if any(b <= a for a, b in itertools.pairwise(made)):
            raise r.fail(
                "model.ignore_merges",
                "true, but the merges are not in the order of the ids they "
                "make; bpe-spark can only reproduce ignore_merges for rank-ordered (tiktoken-style) files",
            )
        merge_rule = "ranks"
    unk = model.get("unk_token")
    metadata = {"source": {"format": "tokenizer.json", "path": str(path)}}
    if unk is not None:
        metadata["source"]["unk_token"] = unk  # never used: every byte is in the vocabulary
    return Tokenizer(
        scheme="byte",
        vocab=vocab,
        merges=merges,
        special_tokens=specials,
        pattern=pattern,
        lowercase=lowercase,
        normalization=normalization,
        merge_rule=merge_rule,
        metadata=metadata,
    )


def _read_added_tokens(r: _Reader, added: Any, *, normalizer: Any) -> dict[str, int]:
    if not isinstance(added, list):
        raise r.fail("added_tokens", f"{_short(added)} is not a list")
    specials: dict[str, int] = {}
    for i, entry in enumerate(added):
        field = f"added_tokens[{i}]"
        if not isinstance(entry, dict):
            raise r.fail(field, "is not an object")
        content = r.get(entry, "content", field, str)
        token_id = r.get(entry, "id", field, int)
        if not entry.get("special", False):
            raise r.fail(
                f"{field}.special",
                f"{content!r} is an added token that is not special; "
                "bpe-spark supports special added tokens only",
            )
        for flag in ("single_word", "lstrip", "rstrip"):
            if entry.get(flag):
                raise r.fail(f"{field}.{flag}", f"true for {content!r}: not supported")
        if entry.get("normalized") and normalizer is not None:
            raise r.fail(
                f"{field}.normalized",
                f"true for {content!r} with a normalizer: bpe-spark finds "
                "special tokens in the raw text",
            )
        if content in specials:
            raise r.fail(field, f"{content!r} is listed twice")
        specials[content] = token_id
    return specials


def _read_normalizer(r: _Reader, normalizer: Any) -> tuple[str | None, bool]:
    if normalizer is None:
        return None, False
    steps = [normalizer]
    field = "normalizer"
    if isinstance(normalizer, dict) and normalizer.get("type") == "Sequence":
        steps = r.get(normalizer, "normalizers", "normalizer", list)
        field = "normalizer.normalizers"
    types = []
    for i, step in enumerate(steps):
        kind = step.get("type") if isinstance(step, dict) else None
        where = f"{field}[{i}].type" if field.endswith("normalizers") else "normalizer.type"
        if kind not in _NORMALIZERS | {"Lowercase"}:
            raise r.fail(
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
        raise r.fail(field, f"{types}: bpe-spark applies at most one Unicode form, then Lowercase")
    return (forms[0] if forms else None), "Lowercase" in types


def _is_byte_level(step: Any) -> bool:
    return isinstance(step, dict) and step.get("type") == "ByteLevel"


def _check_byte_level(r: _Reader, step: dict, field: str) -> None:
    if step.get("add_prefix_space", True):
        raise r.fail(
            f"{field}.add_prefix_space",
            "true: a prefix space changes the text; only false is supported",
        )


def _read_pre_tokenizer(r: _Reader, pre: Any) -> str:
    if pre is None:
        raise r.fail(
            "pre_tokenizer", "null: bpe-spark reads byte-level BPE (a ByteLevel pre-tokenizer)"
        )
    if _is_byte_level(pre):
        _check_byte_level(r, pre, "pre_tokenizer")
        if pre.get("use_regex", True):
            return "gpt2"
        return r"[\s\S]+"  # no split: the whole text is one pretoken
    if not (isinstance(pre, dict) and pre.get("type") == "Sequence"):
        kind = pre.get("type") if isinstance(pre, dict) else pre
        raise r.fail(
            "pre_tokenizer.type",
            f"{kind!r} is not supported; expected ByteLevel or Sequence[Split, ByteLevel]",
        )
    steps = r.get(pre, "pretokenizers", "pre_tokenizer", list)
    field = "pre_tokenizer.pretokenizers"
    if len(steps) == 1 and _is_byte_level(steps[0]):
        return _read_pre_tokenizer(r, steps[0])
    if len(steps) != 2 or not _is_byte_level(steps[1]):
        raise r.fail(field, "expected [Split, ByteLevel(use_regex=false)]")
    _check_byte_level(r, steps[1], f"{field}[1]")
    if steps[1].get("use_regex", True):
        raise r.fail(
            f"{field}[1].use_regex", "true after a Split would split twice; expected false"
        )
    split = steps[0]
    if not (isinstance(split, dict) and split.get("type") == "Split"):
        kind = split.get("type") if isinstance(split, dict) else split
        raise r.fail(f"{field}[0].type", f"{kind!r} is not supported; expected Split")
    pattern = r.get(split, "pattern", f"{field}[0]", dict)
    if "Regex" in pattern:
        source = pattern["Regex"]
    elif "String" in pattern:
        source = regex.escape(pattern["String"]) if isinstance(pattern["String"], str) else None
    else:
        source = None
    if not isinstance(source, str) or not source:
        raise r.fail(
            f"{field}[0].pattern",
            f'{_short(pattern)}: expected {{"Regex": ...}} or {{"String": ...}}',
        )
    name = _preset_name(source)
    source = PRESETS[name] if name in PRESETS else python_pattern(source)
    try:
        regex.compile(source)
    except regex.error as exc:
        raise r.fail(
            f"{field}[0].pattern", f"the regex does not compile in Python's regex module: {exc}"
        ) from None
    behavior = split.get("behavior")
    invert = split.get("invert", False)
    if behavior == "Removed" and invert:
        return name if name in PRESETS else source  # keeps exactly the matches: our findall
    if behavior == "Isolated" and not invert:
        if name in _COVERING_PRESETS:
            return name
        # subtle: Isolated also keeps each run of text between matches as a piece; this
        # alternation yields the same pieces from findall.
        return rf"(?:{source})|(?:(?!(?:{source}))[\s\S])+"
    raise r.fail(
        f"{field}[0].behavior",
        f"{behavior!r} with invert={invert!r} is not supported; "
        "expected Isolated (invert false) or Removed (invert true)",
    )


def _preset_name(source: str) -> str:
    """The preset whose regex ``source`` is (as we write it, or in its Oniguruma form)."""
    for name, preset in PRESETS.items():
        if source in (preset, onig_pattern(preset)):
            return name
    return source
