"""SentencePiece BPE ``.model`` files (Llama 1/2, Mistral v1-v3): the protobuf read with the
``sentencepiece`` package's ``sentencepiece_model_pb2`` (imported only here, when such a file is
read), turned into the ``tokenizer.json`` it stands for and run by the one runtime of
SentencePiece-style models, :func:`bpe_spark.models.huggingface.tokenizer_json_read.from_hf_dict`. The ids are
``SentencePieceProcessor.encode(text)``'s: that is the reference the tests compare with.

What ``SentencePieceProcessor`` does, and the tokenizer.json step that does the same:

- normalizer ``identity`` only (no ``precompiled_charsmap``: ``nmt_nfkc`` and the other
  charsmaps are tables of SentencePiece's own, refused in one line), then
  ``remove_extra_whitespaces`` (spaces only: leading ones dropped, runs made one, trailing
  space symbols dropped, and all of it before the dummy prefix), ``escape_whitespaces`` (space
  -> ``▁``) and ``add_dummy_prefix`` (a ``▁`` before non-empty text): Replace and Prepend
  normalizers, in SentencePiece's order;
- the whole normalized text is one BPE sequence (no pre-tokenizer); USER_DEFINED pieces are found
  first, leftmost-longest, and never merged: a Split isolating them, taken whole by the model's
  ``ignore_merges`` (checked at load: every other text ``ignore_merges`` would take whole is
  one SentencePiece also encodes as that piece, or a second Split cuts it where SentencePiece's
  encoding allows);
- BPE merges any two adjacent symbols whose concatenation is a NORMAL piece, the highest score
  first: every split of every NORMAL piece into two NORMAL pieces is a merge, ranked by the
  piece's score;
- a symbol that is no piece becomes its UTF-8 bytes' BYTE pieces (``byte_fallback``) or the
  UNKNOWN piece (one for a run of such characters); CONTROL pieces (``<s>``, ``</s>``) are never found in text: special added
  tokens, which ``encode_ordinary`` leaves alone as ``SentencePieceProcessor.encode`` does;
- decoding: ``▁`` -> space, BYTE pieces joined into UTF-8, UNKNOWN as `` ⁇ ``, the first
  piece's ``▁`` removed. (SentencePiece with ``remove_extra_whitespaces`` removes the ``▁`` of
  every leading piece while the text decoded is empty: a text that starts with a ``▁``
  character of its own decodes with one space more here. CONTROL ids decode as their text here,
  as empty text there.)

Refused, each in one line naming the file, the field and the value: a model type other than
BPE (``trainer_spec.model_type``: UNIGRAM, WORD, CHAR), a ``precompiled_charsmap``,
``treat_whitespace_as_suffix``, UNUSED pieces, and pieces that cannot be reproduced.

>>> sentencepiece_bpe("\u2581hello", {"\u2581h": -1.0, "el": -2.0, "lo": -3.0, "\u2581hel": -4.0})
['▁hel', 'lo']
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from bpe_spark.errors import ConfigError, ModelFormatError
from bpe_spark.bpe.fields import Fields, check_count, check_token, show
from bpe_spark.models.files import read_file_bytes

SPACE = "\u2581"  # SentencePiece's whitespace symbol
_MODEL_TYPES = {1: "UNIGRAM", 2: "BPE", 3: "WORD", 4: "CHAR"}
_PIECE_TYPES = {1: "NORMAL", 2: "UNKNOWN", 3: "CONTROL", 4: "USER_DEFINED", 5: "UNUSED", 6: "BYTE"}


def looks_like_sentencepiece(head: bytes) -> bool:
    """The first bytes of a SentencePiece ``ModelProto``: field 1 (``pieces``), a message that
    starts with its ``piece`` string, followed by its ``score`` or ``type`` (bytes 0x15 / 0x18,
    which no text format holds there).

    >>> looks_like_sentencepiece(b"\\n\\x0b\\n\\x05<unk>\\x15\\x00\\x00\\x00\\x00"), looks_like_sentencepiece(b"\\n{\\n  ")
    (True, False)
    """

    def varint(position: int) -> tuple[int, int]:
        value = shift = 0
        while position < len(head) and shift < 35:
            byte = head[position]
            value |= (byte & 0x7F) << shift
            position += 1
            if not byte & 0x80:
                return value, position
            shift += 7
        return -1, position

    if head[:1] != b"\n":
        return False
    outer, start = varint(1)
    if outer < 3 or head[start : start + 1] != b"\n":
        return False
    inner, position = varint(start + 1)
    after = position + inner
    if not 0 < inner < outer or after >= len(head):
        return False
    if after == start + outer:  # the piece alone (score and type left at their defaults)
        return head[after] in (0x0A, 0x12)  # the next piece, or the trainer_spec
    return head[after] in (0x15, 0x18)


def parse_model(path) -> Any:
    """The ``ModelProto`` of a ``.model`` file (the ``sentencepiece`` package parses it)."""
    try:
        from google.protobuf.message import DecodeError
        from sentencepiece import sentencepiece_model_pb2
    except ImportError:
        raise ConfigError(
            f"{path}: reading a SentencePiece .model needs the sentencepiece package "
            "(pip install sentencepiece)"
        ) from None
    path = Path(path)
    raw = read_file_bytes(path)
    proto = sentencepiece_model_pb2.ModelProto()
    try:
        proto.ParseFromString(raw)
    except DecodeError as exc:
        raise ModelFormatError(f"{path}: not a SentencePiece model ({exc})") from None
    if not proto.pieces:
        raise ModelFormatError(f"{path}: not a SentencePiece model (field 'pieces' is empty)")
    return proto


def read_sentencepiece(path, **unused) -> dict[str, Any]:
    """The Tokenizer keyword arguments of a SentencePiece BPE ``.model`` file."""
    if unused:
        raise ConfigError(f"SentencePiece .model loading takes no options {sorted(unused)}")
    from bpe_spark.models.huggingface.tokenizer_json_read import from_hf_dict

    path = Path(path)
    data = tokenizer_json_of(parse_model(path), path)
    kwargs = from_hf_dict(data, path)
    kwargs["metadata"] = {"source": {"format": "sentencepiece", "path": str(path)}}
    return kwargs


def tokenizer_json_of(proto: Any, path="tokenizer.model") -> dict[str, Any]:
    """The tokenizer.json (as a dict) that encodes as ``SentencePieceProcessor`` does with the
    parsed model ``proto``; what cannot be reproduced raises naming the field."""
    fields = Fields(path)
    trainer, spec = proto.trainer_spec, proto.normalizer_spec
    model_type = _MODEL_TYPES.get(trainer.model_type, str(trainer.model_type))
    if model_type != "BPE":
        raise fields.error(
            "trainer_spec.model_type",
            f"is {model_type}; bpe-spark reads SentencePiece BPE models only",
        )
    if spec.precompiled_charsmap:
        raise fields.error(
            "normalizer_spec.precompiled_charsmap",
            f"holds the {show(spec.name or 'custom')} normalization table "
            f"({len(spec.precompiled_charsmap):,} bytes), which bpe-spark cannot reproduce exactly; "
            "only the 'identity' normalizer is supported",
        )
    if trainer.treat_whitespace_as_suffix:
        raise fields.error(
            "trainer_spec.treat_whitespace_as_suffix", "is true; only the prefix form is supported"
        )
    check_count(len(proto.pieces), fields.where("pieces"), "pieces")
    vocab: dict[str, int] = {}
    scores: dict[str, float] = {}
    added: list[dict[str, Any]] = []
    user_defined: list[str] = []
    unk = None
    for token_id, entry in enumerate(proto.pieces):
        field = f"pieces[{token_id}]"
        kind = _PIECE_TYPES.get(entry.type, str(entry.type))
        piece = entry.piece
        if not piece:
            raise fields.error(f"{field}.piece", "is the empty string")
        check_token(piece, fields.where(f"{field}.piece"))
        if piece in vocab:
            raise fields.error(f"{field}.piece", f"{show(piece)} is also pieces[{vocab[piece]}]")
        if kind == "UNUSED":
            raise fields.error(f"{field}.type", f"is UNUSED ({show(piece)}); not supported")
        if kind == "BYTE" and not trainer.byte_fallback:
            raise fields.error(f"{field}.type", "is BYTE but trainer_spec.byte_fallback is false")
        vocab[piece] = token_id
        if kind == "NORMAL":
            scores[piece] = entry.score
        elif kind == "UNKNOWN":
            unk = piece
        elif kind == "USER_DEFINED":
            if " " in piece:
                raise fields.error(f"{field}.piece", f"{show(piece)}: a USER_DEFINED piece with a space is not supported")
            user_defined.append(piece)
        if kind in ("UNKNOWN", "CONTROL"):
            added.append({"id": token_id, "content": piece, "single_word": False, "lstrip": False,
                          "rstrip": False, "normalized": False, "special": True})
    if unk is None:
        raise fields.error("pieces", "hold no UNKNOWN piece (SentencePiece requires one)")
    for piece in scores:
        missing = next((char for char in piece if char not in scores), None) if len(piece) > 1 else None
        if missing is not None:
            # subtle: SentencePiece may merge a character that is no piece; tokenizers' BPE
            # turns it into bytes or unk before any merge
            raise fields.error(f"pieces[{vocab[piece]}].piece",
                               f"{show(piece)} holds {show(missing)}, which is no NORMAL piece; not supported")
    return {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": added,
        "normalizer": _normalizer(spec),
        "pre_tokenizer": _pre_tokenizer(fields, user_defined, vocab, scores),
        "post_processor": None,
        "decoder": _decoder(spec, trainer, unk),
        "model": {
            "type": "BPE",
            "dropout": None,
            "unk_token": unk,
            "continuing_subword_prefix": None,
            "end_of_word_suffix": None,
            "fuse_unk": True,  # SentencePiece gives a run of unknown characters one UNKNOWN id
            "byte_fallback": bool(trainer.byte_fallback),
            "ignore_merges": bool(user_defined),
            "vocab": vocab,
            "merges": _merges(scores, vocab),
        },
    }


def sentencepiece_bpe(text: str, scores: dict[str, float]) -> list[str]:
    """SentencePiece's BPE (bpe_model.cc ``Encode``) on a text without user-defined pieces: from
    its characters, merge the adjacent pair whose concatenation is the piece of highest score
    (ties: the leftmost) until none is left. The reference the load-time checks use.

    >>> sentencepiece_bpe("abc", {"ab": -1.0, "bc": 0.0, "a": -3.0})
    ['a', 'bc']
    """
    symbols = list(text)
    while len(symbols) > 1:
        best, at = None, -1
        for position in range(len(symbols) - 1):
            score = scores.get(symbols[position] + symbols[position + 1])
            if score is not None and (best is None or score > best):
                best, at = score, position
        if best is None:
            break
        symbols[at : at + 2] = [symbols[at] + symbols[at + 1]]
    return symbols


def _pre_tokenizer(fields: Fields, user_defined: list[str], vocab: dict[str, int],
                   scores: dict[str, float]) -> dict[str, Any] | None:
    """None without user-defined pieces. With them: a Split isolating them (leftmost, longest
    first, as SentencePiece's prefix matcher finds them), which the model's ``ignore_merges``
    takes whole. ``ignore_merges`` takes any other text between them whole too when it is a
    piece, so a second Split cuts each such text that SentencePiece does not encode as that
    one piece (a CONTROL, BYTE or UNKNOWN piece's text, a piece BPE cannot reach) in two
    halves that encode as SentencePiece encodes the whole."""
    if not user_defined:
        return None
    by_length = sorted(user_defined, key=lambda piece: (-len(piece), piece))
    steps = [_split("|".join(re.escape(piece) for piece in by_length))]
    cuts = []
    for piece, token_id in vocab.items():
        if len(piece) < 2 or piece in user_defined:
            continue
        reference = sentencepiece_bpe(piece, scores)
        if reference == [piece]:
            continue  # a NORMAL piece BPE reaches: taking it whole is what SentencePiece does
        cut = _cut(piece, reference, scores, vocab)
        if cut is None:
            raise fields.error(f"pieces[{token_id}].piece",
                               f"{show(piece)}: with USER_DEFINED pieces, this text cannot be encoded as SentencePiece does")
        cuts.append(f"{re.escape(piece[:cut])}(?={re.escape(piece[cut:])}\\z)")
    if cuts:
        steps.append(_split("\\A(?:" + "|".join(cuts) + ")"))
    return {"type": "Sequence", "pretokenizers": steps}


def _cut(piece: str, reference: list[str], scores: dict[str, float], vocab: dict[str, int]) -> int | None:
    """A position in ``piece`` where its two halves, each encoded alone (taken whole when it is
    a piece), give ``reference``, SentencePiece's encoding of the whole."""
    position = 0
    for symbol in reference[:-1]:
        position += len(symbol)
        halves = [piece[:position], piece[position:]]
        encoded = []
        for half in halves:
            alone = sentencepiece_bpe(half, scores)
            if half in vocab and alone != [half]:
                break  # ignore_merges would take this half whole, SentencePiece would not
            encoded += alone
        else:
            if encoded == reference:
                return position
    return None


def _split(pattern: str) -> dict[str, Any]:
    return {"type": "Split", "pattern": {"Regex": pattern}, "behavior": "Isolated", "invert": False}


def _merges(scores: dict[str, float], vocab: dict[str, int]) -> list[list[str]]:
    """Every split of a NORMAL piece into two NORMAL pieces, the highest-scoring piece first
    (ties: the lower id), its splits left to right."""
    ranked = []
    for piece, score in scores.items():
        for cut in range(1, len(piece)):
            left, right = piece[:cut], piece[cut:]
            if left in scores and right in scores:
                ranked.append((-score, vocab[piece], cut, left, right))
    ranked.sort()
    return [[left, right] for _, _, _, left, right in ranked]


def _replace(pattern: str, content: str, *, regex: bool = False) -> dict[str, Any]:
    return {"type": "Replace", "pattern": {"Regex" if regex else "String": pattern}, "content": content}


def _normalizer(spec: Any) -> dict[str, Any] | None:
    """SentencePiece's identity normalization (normalizer.cc ``Normalize``) as Replace/Prepend
    steps."""
    space = SPACE if spec.escape_whitespaces else " "
    steps = []
    if spec.remove_extra_whitespaces:
        steps += [_replace(r"\A +", "", regex=True), _replace(" {2,}", " ", regex=True)]
    if spec.escape_whitespaces:
        steps.append(_replace(" ", SPACE))
    if spec.add_dummy_prefix:
        steps.append({"type": "Prepend", "prepend": SPACE})
    if spec.remove_extra_whitespaces:
        # subtle: SentencePiece drops trailing space symbols after adding the dummy prefix, so a
        # text of spaces and ▁ only ends empty, and a ▁ the text itself ends with goes too
        steps.append(_replace(space + "+\\z", "", regex=True))
    return {"type": "Sequence", "normalizers": steps} if steps else None


def _decoder(spec: Any, trainer: Any, unk: str) -> dict[str, Any]:
    """SentencePiece's ``Decode``: UNKNOWN as its surface (`` ⁇ ``), ``▁`` as a space, BYTE
    pieces as UTF-8, and the first piece's leading ``▁`` dropped (with ``add_dummy_prefix`` or
    ``remove_extra_whitespaces``)."""
    steps: list[dict[str, Any]] = [_replace(unk, trainer.unk_surface), _replace(SPACE, " ")]
    if trainer.byte_fallback:
        steps.append({"type": "ByteFallback"})
    steps.append({"type": "Fuse"})
    if spec.add_dummy_prefix or spec.remove_extra_whitespaces:
        steps.append({"type": "Strip", "content": " ", "start": 1, "stop": 0})
    return {"type": "Sequence", "decoders": steps}
