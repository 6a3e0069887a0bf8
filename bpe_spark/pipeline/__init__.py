"""The steps and runtime of an imported ``tokenizers`` pipeline: :class:`Pipeline` runs a
``tokenizer.json`` (its normalizer, pre-tokenizer, BPE model, added tokens and decoder) as
``tokenizers`` 0.23 does, in pure Python (core: no pyspark, tokenizers or transformers).

==================== ==============================================================================
module               owns
==================== ==============================================================================
normalizers          ``build_normalizer``: tokenizers' normalizers as ``str -> str``
pre_tokenizers       ``build_pre_tokenizer``: tokenizers' pre-tokenizers as ``split(text)``
decoders             ``build_decoder``: tokenizers' decoders as ``tokens -> str``
model                ``BpeModel``: the BPE model with its options, on string tokens
added_tokens         ``AddedTokens``: added tokens (special or not) and how text matches them
(this file)          ``Pipeline``: the spec (a checked tokenizer.json) end to end; views of it
==================== ==============================================================================

Encoding is ``tokenizers``' ``encode(text, add_special_tokens=False)``: added tokens that are not
normalized are cut out of the raw text; each other piece is normalized, then the normalized added
tokens are cut out of it; each remaining piece is pre-tokenized and each pretoken goes to the
model. Decoding maps ids to token strings (added tokens first) and runs the decoder (without one,
``tokenizers`` joins the tokens with spaces). The post-processor adds nothing without
``add_special_tokens``: null, ByteLevel, TemplateProcessing, RobertaProcessing, BertProcessing and
Sequences of them are accepted and kept in the spec (an export writes it back), others refused.

The spec is the parsed ``tokenizer.json`` itself, reduced to :data:`SPEC_KEYS`: plain JSON that
``Tokenizer.to_dict()`` carries, ``bpe_spark.json`` stores and every load rebuilds from.

>>> spec = {"model": {"type": "BPE", "vocab": {"a": 0, "b": 1, "ab": 2}, "merges": ["a b"]},
...         "added_tokens": [{"id": 3, "content": "<s>", "special": True, "normalized": False}]}
>>> pipe = Pipeline(spec)
>>> pipe.encode("ab<s>ba"), pipe.decode([2, 3])
([2, 3, 1, 0], 'ab <s>')
"""

from __future__ import annotations

from collections.abc import Collection, Iterable
from typing import Any

from bpe_spark.bpe.fields import Fields, show
from bpe_spark.pipeline.added_tokens import AddedTokens
from bpe_spark.pipeline.model import BpeModel
from bpe_spark.bpe.symbols import display_to_bytes

SPEC_KEYS = ("version", "truncation", "padding", "added_tokens", "normalizer", "pre_tokenizer",
             "post_processor", "decoder", "model")
# post-processors that add no id to encode(text, add_special_tokens=False)
_QUIET_POST_PROCESSORS = ("ByteLevel", "TemplateProcessing", "RobertaProcessing", "BertProcessing")

__all__ = ["SPEC_KEYS", "Pipeline"]


def _check_post_processor(post: Any, field: str, error) -> None:
    if post is None:
        return
    kind = post.get("type") if isinstance(post, dict) else None
    if kind == "Sequence" and isinstance(post.get("processors"), list):
        for i, step in enumerate(post["processors"]):
            _check_post_processor(step, f"{field}.processors[{i}]", error)
        return
    if kind not in _QUIET_POST_PROCESSORS:
        raise error(
            f"{field}.type",
            f"{show(kind if kind is not None else post)}: bpe-spark accepts only post-processors that "
            f"add nothing to encode(add_special_tokens=False): {', '.join(_QUIET_POST_PROCESSORS)}, Sequence",
        )


def byte_level_bytes(token: str) -> bytes:
    """The bytes tokenizers' ByteLevel decoder gives a token: each character's byte, or the
    token's UTF-8 when a character is outside the byte alphabet."""
    try:
        return display_to_bytes(token)
    except KeyError:
        return token.encode("utf-8")


class Pipeline:
    """A ``tokenizer.json`` (parsed, ``spec``) that runs as ``tokenizers`` runs it.

    Everything that cannot be reproduced exactly raises, at construction, the error of
    :class:`~bpe_spark.bpe.fields.Fields` for ``path``: one line naming the file, the field
    and what was found.
    """

    def __init__(self, spec: Any, *, path="tokenizer.json"):
        from bpe_spark.pipeline.decoders import build_decoder
        from bpe_spark.pipeline.normalizers import build_normalizer
        from bpe_spark.pipeline.pre_tokenizers import build_pre_tokenizer

        fields = Fields(path)
        error = fields.error
        spec = fields.top(spec)
        for key in ("truncation", "padding"):
            if spec.get(key) is not None:
                raise error(key, f"{show(spec[key])}: bpe-spark encodes whole texts; remove it (or set null)")
        self.spec: dict[str, Any] = {key: spec[key] for key in SPEC_KEYS if key in spec}
        self.normalizer = build_normalizer(spec.get("normalizer"), "normalizer", error)
        self.pre_tokenizer = build_pre_tokenizer(spec.get("pre_tokenizer"), "pre_tokenizer", error)
        self.decoder = build_decoder(spec.get("decoder"), "decoder", error)
        _check_post_processor(spec.get("post_processor"), "post_processor", error)
        if "model" not in spec:
            raise error("model", "is missing")
        self.model = BpeModel(spec["model"], "model", error)
        self.added = AddedTokens(spec.get("added_tokens", []), self.model, self.normalizer, "added_tokens", error)
        self.byte_level = bool(getattr(self.pre_tokenizer, "byte_level", False))

    # --- encoding ---------------------------------------------------------------------------------
    def pretokens(self, text: str, allowed: Collection[str] | None = None) -> list[str | int]:
        """The pretokens (str) and added-token ids (int) of ``text``, in order; ``allowed``: the
        special tokens to match (None: all; any other special-token text is ordinary text)."""
        added, normalizer, pre = self.added, self.normalizer, self.pre_tokenizer
        out: list[str | int] = []
        for token_id, start, stop in added.split(text, added.raw, allowed):
            if token_id is not None:
                out.append(token_id)
                continue
            if start == stop:
                continue
            piece = text[start:stop]
            at_origin = start == 0
            if normalizer is not None:
                if at_origin:  # does the normalized piece still start at the text's offset 0?
                    piece, at_origin = normalizer.normalize_at_start(piece)
                else:
                    piece = normalizer(piece)
            for sub_id, sub_start, sub_stop in added.split(piece, added.normalized, allowed):
                if sub_id is not None:
                    out.append(sub_id)
                elif sub_start < sub_stop:
                    sub = piece[sub_start:sub_stop]
                    # subtle: Metaspace's prepend_scheme "first" asks whether the piece starts at
                    # offset 0 of the original text (tokenizers' offsets_original().0 == 0)
                    first = at_origin and sub_start == 0
                    out.extend(pre.split(sub, first=first) if pre is not None else (sub,))
        return out

    def encode(self, text: str, allowed: Collection[str] | None = None) -> list[int]:
        """``tokenizers``' ``encode(text, add_special_tokens=False).ids``; ``allowed`` as in
        :meth:`pretokens` (``frozenset()``: ``encode_special_tokens=True``)."""
        return self.model.encode_units(self.pretokens(text, allowed))

    # --- decoding ---------------------------------------------------------------------------------
    def token_of(self, token_id: int) -> str:
        """The token string of an id, as tokenizers' ``id_to_token`` gives it: an added token's
        first (a normalized one's in its normalized form), then the model's."""
        added = self.added.strings.get(token_id)
        if added is not None:
            return added
        token = self.model.id_to_token.get(token_id)
        if token is None:
            raise KeyError(f"token id {token_id} is not in the vocabulary")
        return token

    def decode(self, ids: Iterable[int]) -> str:
        """``tokenizers``' ``decode(ids, skip_special_tokens=False)``."""
        tokens = [self.token_of(int(token_id)) for token_id in ids]
        if self.decoder is None:
            return " ".join(tokens)
        return self.decoder(tokens)

    # --- views for the Tokenizer ------------------------------------------------------------------
    def views(self) -> tuple[str, dict[int, bytes | str], dict[str, int]]:
        """``(scheme, vocab, special_tokens)`` as a Tokenizer shows them: scheme "byte" when a
        ByteLevel pre-tokenizer ran (tokens as the bytes the ByteLevel decoder gives them), else
        "char" (tokens as the file spells them); the special added tokens apart, the others in
        the vocabulary."""
        special = self.added.special
        special_ids = set(special.values())
        strings = {i: t for i, t in self.model.id_to_token.items() if i not in special_ids}
        for token in self.added.tokens:
            if not token.special:
                strings[token.id] = self.added.strings[token.id]
        if self.byte_level:
            return "byte", {i: byte_level_bytes(t) for i, t in strings.items()}, special
        return "char", strings, special
