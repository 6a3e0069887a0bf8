"""CLIP's tokenizer files: GPT-2-style ``vocab.json`` + ``merges.txt`` of CLIP's ``</w>`` layout, and
the merges file OpenAI's CLIP and open_clip ship (``bpe_simple_vocab_16e6.txt.gz``). Both load as
the ``tokenizer.json`` transformers' ``CLIPTokenizer`` (5.x; ``CLIPConverter`` in 4.x) builds from
them, run by :class:`bpe_spark.pipeline.Pipeline`, so they give transformers' ids and an export
writes a ``tokenizer.json`` that ``tokenizers`` loads. (A CLIP ``tokenizer.json`` needs nothing
here: its reader runs it as it is, ``continuing_subword_prefix: ""`` included.)

The layout: ids 0..255 are GPT-2's 256 printable byte characters (in ``bytes_to_unicode``'s
order: ``!``..``~``, ``¡``..``¬``, ``®``..``ÿ``, then ``Ā``...), 256..511 the same with ``</w>``
(the end of a word, fused onto its last character), then each merge's joined token, then
``<|startoftext|>`` and ``<|endoftext|>``. A merge line ``i n</w>`` makes ``in</w>``.

The pipeline (CLIPTokenizer's): normalizer NFC, ``\\s+`` -> ``" "``, Lowercase; pre-tokenizer
Split(CLIP's regex, Removed, invert) then ByteLevel (GPT-2's regex again, no prefix space); BPE
with ``end_of_word_suffix`` ``</w>``; the two specials as added tokens. The decoder is ByteLevel,
then ``</w>`` -> ``" "`` and Python's ``str.strip()``: CLIPTokenizer's ``decode`` (transformers
does the last two steps in Python, around the ByteLevel decoder of the file).

SimpleTokenizer (OpenAI CLIP, open_clip) on the same merges gives the same ids except where its
text cleanup differs: ``ftfy.fix_text`` (not reproduced: ftfy is not a dependency),
``html.unescape`` twice (``&amp;`` is ``&`` there, four characters here), Python's ``lower()``
(a final capital sigma is "ς" there, "σ" here) and special-token text matched after lowercasing
(here: the added tokens, by bpe-spark's ``allowed_special`` policy). Its ``decode`` keeps a trailing
space that CLIPTokenizer strips.

>>> spec = clip_spec({"a": 0, "b": 1, "a</w>": 2, "b</w>": 3, "ab</w>": 4}, [("a", "b</w>")])
>>> from bpe_spark.pipeline import Pipeline
>>> pipe = Pipeline(spec)
>>> pipe.encode("AB  ba"), pipe.decode(pipe.encode("AB  ba"))
([4, 1, 2], 'ab ba')
"""

from __future__ import annotations

import gzip
import sys
import zlib
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from bpe_spark.bpe.fields import MAX_FILE_BYTES, check_count, check_file_size, check_token
from bpe_spark.bpe.symbols import bytes_to_unicode
from bpe_spark.errors import ConfigError, ModelFormatError

END_OF_WORD = "</w>"
SPECIALS = ("<|startoftext|>", "<|endoftext|>")
# CLIPTokenizer's Split pattern (Oniguruma), SimpleTokenizer's with IGNORECASE
SPLIT_PATTERN = r"""<\|startoftext\|>|<\|endoftext\|>|'s|'t|'re|'ve|'m|'ll|'d|[\p{L}]+|[\p{N}]|[^\s\p{L}\p{N}]+"""
# SimpleTokenizer reads the merge lines [1 : 49152 - 256 - 2 + 1] of its file
SIMPLE_MERGES = 49152 - 256 - 2
SIMPLE_NAME = "bpe_simple_vocab"  # bpe_simple_vocab_16e6.txt.gz
# Python's str.strip() whitespace, as one Oniguruma class of the characters themselves
_PY_SPACE = "".join(chr(c) for c in range(sys.maxunicode + 1) if chr(c).isspace())
_STRIP = rf"\A[{_PY_SPACE}]+|[{_PY_SPACE}]+\z"


def clip_spec(vocab: dict[str, int], merges: Iterable[tuple[str, str]]) -> dict[str, Any]:
    """The ``tokenizer.json`` (parsed) of CLIP's vocabulary and merges, as transformers'
    CLIPTokenizer builds it, with CLIPTokenizer's ``decode`` as the decoder."""
    present = [token for token in SPECIALS if token in vocab]
    added = [{"id": vocab[token], "content": token, "single_word": False, "lstrip": False, "rstrip": False,
              "normalized": False, "special": True} for token in present]
    spec: dict[str, Any] = {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": sorted(added, key=lambda entry: entry["id"]),
        "normalizer": {"type": "Sequence", "normalizers": [
            {"type": "NFC"}, {"type": "Replace", "pattern": {"Regex": r"\s+"}, "content": " "}, {"type": "Lowercase"},
        ]},
        "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
            {"type": "Split", "pattern": {"Regex": SPLIT_PATTERN}, "behavior": "Removed", "invert": True},
            {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True},
        ]},
        "post_processor": None,
        "decoder": {"type": "Sequence", "decoders": [
            {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True, "use_regex": True},
            {"type": "Replace", "pattern": {"String": END_OF_WORD}, "content": " "},
            {"type": "Replace", "pattern": {"Regex": _STRIP}, "content": ""},
        ]},
        "model": {
            "type": "BPE", "dropout": None,
            "unk_token": SPECIALS[1] if SPECIALS[1] in vocab else None,
            "continuing_subword_prefix": "", "end_of_word_suffix": END_OF_WORD,
            "fuse_unk": False, "byte_fallback": False, "ignore_merges": False,
            "vocab": vocab, "merges": [list(pair) for pair in merges],
        },
    }
    if len(present) == 2:  # CLIPTokenizer's: <|startoftext|> ... <|endoftext|> with add_special_tokens
        spec["post_processor"] = {
            "type": "RobertaProcessing", "sep": [SPECIALS[1], vocab[SPECIALS[1]]],
            "cls": [SPECIALS[0], vocab[SPECIALS[0]]], "trim_offsets": False, "add_prefix_space": False,
        }
    return spec


def is_clip_vocab(vocab: Iterable[str]) -> bool:
    """Whether a GPT-2-style ``vocab.json`` has CLIP's layout: it holds the ``</w>`` form of at
    least a quarter of the 256 byte characters (CLIP: all of them; a GPT-2 vocabulary none,
    its words ending in no marker)."""
    keys = set(vocab)
    return sum(char + END_OF_WORD in keys for char in bytes_to_unicode()) >= 64


def _pipeline_kwargs(spec: dict, path: Path, source: dict[str, Any]) -> dict[str, Any]:
    """The Tokenizer keyword arguments of a CLIP spec, with CLIPTokenizer's bos / eos / pad / unk
    tokens for transformers' folder files (:mod:`bpe_spark.models.huggingface.transformers_config`)."""
    from bpe_spark.pipeline import Pipeline

    vocab = spec["model"]["vocab"]
    roles = {"bos_token": SPECIALS[0], "eos_token": SPECIALS[1], "pad_token": SPECIALS[1], "unk_token": SPECIALS[1]}
    return {
        "pipeline": Pipeline(spec, path=path),
        "metadata": {"source": source, "transformers": {k: v for k, v in roles.items() if v in vocab}},
    }


def read_clip_files(vocab_path: Path, merges_path: Path, raw_vocab: dict[str, int], lines: list[str],
                    *, special_tokens=None) -> dict[str, Any]:
    """The Tokenizer keyword arguments of CLIP's ``vocab.json`` (read: ``raw_vocab``) and
    ``merges.txt`` (its lines): the pipeline of :func:`clip_spec`. Every merge is checked here, so
    an error names the line and the tokens."""
    if special_tokens is not None and set(special_tokens) != {t for t in SPECIALS if t in raw_vocab}:
        raise ConfigError(f"{vocab_path}: CLIP's special tokens are {', '.join(SPECIALS)}; drop special_tokens=")
    merges = []
    for line_no, line in enumerate(lines, start=1):
        line = line.rstrip("\r")
        if not line or (line_no == 1 and line.startswith("#version")):
            continue
        parts = line.split(" ")
        if len(parts) != 2 or not all(parts):
            raise ModelFormatError(f"{merges_path}: line {line_no}: expected two tokens separated by one space, got {line!r}")
        _check_merge(merges_path, line_no, parts, raw_vocab, vocab_path.name)
        merges.append((parts[0], parts[1]))
    source = {"format": "clip", "vocab": str(vocab_path), "merges": str(merges_path)}
    return _pipeline_kwargs(clip_spec(dict(raw_vocab), merges), vocab_path, source)


def _check_merge(path: Path, line_no: int, parts: list[str], vocab, vocab_name: str) -> None:
    merge = " ".join(parts)
    for part in parts:
        if part not in vocab:
            raise ModelFormatError(f"{path}: line {line_no}: merge {merge!r}: token {part!r} is not in {vocab_name}")
    if "".join(parts) not in vocab:
        raise ModelFormatError(f"{path}: line {line_no}: merge {merge!r} makes {''.join(parts)!r}, which {vocab_name} lacks")


# --- bpe_simple_vocab_16e6.txt.gz -------------------------------------------------------------
def looks_like_clip_merges(path: Path, head: bytes) -> bool:
    """A CLIP merges file: named ``bpe_simple_vocab*``, or gzip text whose first line is a
    ``#version`` header (CLIP's: ``"bpe_simple_vocab_16e6.txt#version: 0.2``)."""
    if path.name.startswith(SIMPLE_NAME):
        return True
    if not head.startswith(b"\x1f\x8b"):
        return False
    try:
        with gzip.open(path, "rb") as fh:
            first = fh.read(200)
    except (OSError, EOFError, zlib.error):
        return False
    return b"#version" in first.split(b"\n", 1)[0]


def _read_text(path: Path) -> str:
    """The text of a merges file, gzip-compressed or not, of at most ``MAX_FILE_BYTES``."""
    check_file_size(path)
    try:
        with open(path, "rb") as fh:
            gzipped = fh.read(2) == b"\x1f\x8b"
        with (gzip.open(path, "rb") if gzipped else open(path, "rb")) as fh:
            data = fh.read(MAX_FILE_BYTES + 1)
    except FileNotFoundError:
        raise ModelFormatError(f"{path}: no such file") from None
    except (OSError, EOFError, zlib.error) as exc:
        raise ModelFormatError(f"{path}: not a readable gzip file ({exc})") from None
    if len(data) > MAX_FILE_BYTES:
        raise ModelFormatError(f"{path}: over {MAX_FILE_BYTES:,} bytes uncompressed; bpe-spark reads at most that")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ModelFormatError(f"{path}: not UTF-8 ({exc})") from None


def read_clip_merges(path, *, special_tokens=None, **unused) -> dict[str, Any]:
    """The Tokenizer keyword arguments of CLIP's merges file (``bpe_simple_vocab_16e6.txt.gz``,
    gzip or plain): the vocabulary SimpleTokenizer builds from it (the 256 byte characters, the
    same with ``</w>``, each merge of lines 1..48894 joined, ``<|startoftext|>``,
    ``<|endoftext|>``; a token listed twice keeps its later id, as ``dict(zip(vocab, ids))`` does;
    an empty line takes an id and makes no token), run as :func:`clip_spec`."""
    if unused:
        raise ConfigError(f"CLIP merges loading takes no options {sorted(unused)}")
    path = Path(path)
    if special_tokens is not None and tuple(special_tokens) != SPECIALS:
        raise ConfigError(f"{path}: CLIP's special tokens are {', '.join(SPECIALS)}; drop special_tokens=")
    lines = _read_text(path).split("\n")
    chars = sorted(bytes_to_unicode())  # the printable bytes as themselves first: CLIP's order
    tokens: list[str | None] = chars + [char + END_OF_WORD for char in chars]
    merges: list[tuple[str, str]] = []
    line_of: list[int] = []
    check_count(len(lines) - 1, str(path), "lines (merges)")
    for line_no, line in enumerate(lines[1:SIMPLE_MERGES + 1], start=2):
        parts = line.split()
        if not parts:
            tokens.append(None)  # SimpleTokenizer's vocabulary gets "" here: an id no text gives
            continue
        if len(parts) != 2:
            raise ModelFormatError(f"{path}: line {line_no}: expected two tokens separated by a space, got {line!r}")
        check_token("".join(parts), f"{path}: line {line_no}")
        tokens.append("".join(parts))
        merges.append((parts[0], parts[1]))
        line_of.append(line_no)
    tokens.extend(SPECIALS)
    vocab = {token: token_id for token_id, token in enumerate(tokens) if token is not None}
    for line_no, pair in zip(line_of, merges):
        _check_merge(path, line_no, list(pair), vocab, "its vocabulary")
    source = {"format": "clip", "merges": str(path), "merge_lines": len(merges)}
    return _pipeline_kwargs(clip_spec(vocab, merges), path, source)
