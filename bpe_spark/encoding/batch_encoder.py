"""Batch encoding with numpy: many texts to flat ids and offsets, and the options that shape them.

:class:`BatchEncoder` turns a batch of texts into ``(values, offsets, nulls)``, the layout of an
Arrow list column, with no Python object per token: what Spark's encoding tasks run on each
Arrow batch (:mod:`bpe_spark.spark.encoding.tasks`), usable without Spark, shaped by one
:class:`~bpe_spark.encoding.options.EncodeOptions` (special-token policy, BOS/EOS), resolved once.

Ids equal ``Tokenizer.encode(text, allowed_special=..., disallowed_special=...)`` text for text;
the defaults encode special-token text as ordinary text (``disallowed_special=()``), as bulk
encoding of raw data should. Null and empty texts: empty text gives ``[]`` (plus BOS/EOS when
asked); a null text gives no ids, no BOS/EOS, and ``nulls[i]`` True.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from typing import Any

import numpy as np

from bpe_spark.bpe.long_documents import LongDocument, encode_pieces
from bpe_spark.bpe.pretokenize import SpecialTokenMatcher
from bpe_spark.bpe.text import clean
from bpe_spark.encoding.options import EncodeOptions
from bpe_spark.encoding.tokenizer import Tokenizer

_CACHE_SLOTS = 1_000_000  # distinct pretokens kept per encoder before the cache starts over


class BatchEncoder:
    """Encodes batches of texts to flat ids + offsets, caching each distinct pretoken's ids.

    Two paths, the same ids. When the tokenizer encodes compiled (``bpe_spark.native._fastenc``: a
    byte-scheme model, either merge rule; the pretokenizer too for the compiled presets), a batch
    goes to ``encode_ordinary_flat`` whole (allowed special tokens are cut out first). Otherwise pretokens come from the Python
    regex and a cache maps each to a slot whose ids live in one flat int32 buffer, so a batch
    becomes ``slots -> (start, length) -> gathered ids`` with numpy, whatever its size.

    >>> from bpe_spark import TrainerConfig, train
    >>> tok = train(["ab ab ab"], TrainerConfig(vocab_size=258))
    >>> values, offsets, nulls = BatchEncoder(tok).encode_texts(["ab ab", None, ""])
    >>> values.tolist(), offsets.tolist(), nulls.tolist()
    ([256, 257], [0, 2, 2, 2], [False, True, False])
    """

    def __init__(self, tok: Tokenizer, options: EncodeOptions | None = None):
        self.tok = tok
        self.options = options = (options or EncodeOptions()).resolved(tok)
        allowed, self.disallowed = set(options.allowed_special), set(options.disallowed_special)
        self.allow_special = bool(allowed)
        self.bos_id = options.bos_id
        self.eos_id = options.eos_id
        self._matcher = SpecialTokenMatcher(allowed)
        self._allowed = frozenset(allowed)
        self.pipeline = tok.pipeline  # an imported tokenizers pipeline encodes text by text
        if self.pipeline is None:
            self._normalize = tok.pretokenizer.normalize
            self._findall = tok.pretokenizer.findall
            self._plain = not (tok.pretokenizer.lowercase or tok.pretokenizer.normalization)
        self.compiled = bool(getattr(tok, "compiled_encoding", False))
        # texts straight from one UTF-8 buffer (encode_utf8): nothing to cut out, check or normalize
        self.takes_utf8 = self.compiled and self._plain and not self.allow_special and not self.disallowed
        # a custom pattern: split by the regex, BPE and cache compiled (encode_ordinary_flat)
        self.flat = self.compiled or bool(getattr(tok, "_fast_pretokens", False))
        self._special_ids = np.array(list(tok.special_tokens.values()), dtype=np.int32)
        self._special_index = {token: i for i, token in enumerate(tok.special_tokens)}
        self._reset_cache()

    def _reset_cache(self) -> None:
        self._slot: dict[Any, int] = {}
        self._starts = np.zeros(1024, dtype=np.int64)
        self._lengths = np.zeros(1024, dtype=np.int64)
        self._ids = np.zeros(4096, dtype=np.int32)
        self._used_ids = 0
        # subtle: special tokens get tuple keys, which no pretoken (a str) can equal.
        for token, token_id in self.tok.special_tokens.items():
            self._add_slot(("special", token), [token_id])

    def _add_slot(self, key: Any, ids: Sequence[int]) -> int:
        slot = len(self._slot)
        if slot >= len(self._starts):
            self._starts = np.resize(self._starts, 2 * len(self._starts))
            self._lengths = np.resize(self._lengths, 2 * len(self._lengths))
        need = self._used_ids + len(ids)
        if need > len(self._ids):
            self._ids = np.resize(self._ids, max(need, 2 * len(self._ids)))
        self._ids[self._used_ids : need] = ids
        self._starts[slot] = self._used_ids
        self._lengths[slot] = len(ids)
        self._used_ids = need
        self._slot[key] = slot
        return slot

    def slots_of(self, keys: Sequence[Any]) -> np.ndarray:
        """Cache slots of ``keys`` (pretokens), running BPE for those never seen."""
        lookup = self._slot.get
        slots = list(map(lookup, keys))
        if None in slots:
            missing = set(keys).difference(self._slot)
            if len(self._slot) + len(missing) > _CACHE_SLOTS:
                self._reset_cache()
                missing = set(keys).difference(self._slot)
            encode_pretoken = self.tok.encode_pretoken
            for pretoken in missing:
                self._add_slot(pretoken, encode_pretoken(pretoken))
            lookup = self._slot.get
            slots = list(map(lookup, keys))
        return np.fromiter(slots, dtype=np.int64, count=len(slots))

    def _pretokens(self, text: str | None) -> list:
        if text is None:
            return []
        if self.allow_special:
            out: list = []
            for segment, is_special in self._matcher.split(text):
                if is_special:
                    out.append(("special", segment))
                else:
                    out.extend(self._findall(self._normalize(segment)))
            return out
        return self._findall(self._normalize(text))

    def encode_texts(self, texts: Sequence[str | None], nulls: np.ndarray | None = None
                     ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``(values int32, offsets int64[n+1], nulls bool[n])`` for ``texts``. ``nulls``: which
        texts are None, when the caller knows it already (an Arrow column's validity bitmap).

        Raises :class:`~bpe_spark.errors.DisallowedSpecialTokenError` if a text holds a
        disallowed special token."""
        if self.disallowed:
            check, disallowed = self.tok.check_disallowed, self.disallowed
            for text in texts:
                if text:
                    check(text, disallowed)
        if nulls is None:
            nulls = np.fromiter((text is None for text in texts), dtype=bool, count=len(texts))
        if self.flat:
            return self._encode_compiled(texts, nulls)
        if self.pipeline is not None:
            return self._encode_pipeline(texts, nulls)
        if self._plain and not self.allow_special:
            findall = self._findall  # the common case, without a method call per document
            pieces = [findall(text) if text is not None else () for text in texts]
        else:
            pieces = [self._pretokens(text) for text in texts]
        counts = np.fromiter(map(len, pieces), dtype=np.int64, count=len(pieces))
        flat = list(itertools.chain.from_iterable(pieces))
        slots = self.slots_of(flat)
        return self.assemble(self._ids, self._starts[slots], self._lengths[slots], counts, nulls)

    def encode_utf8(self, data, offsets: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """:meth:`encode_texts` of texts of valid UTF-8 laid out in one buffer, text ``i`` at
        ``data[offsets[i]:offsets[i + 1]]`` (int64 ``offsets``; no null text): an Arrow string
        column's buffers, with no ``str`` made for a text. Only when :attr:`takes_utf8`: a compiled
        model with no special token to cut out or check and no normalization.

        >>> from bpe_spark import TrainerConfig, train
        >>> encoder = BatchEncoder(train(["ab ab ab"], TrainerConfig(vocab_size=258)))
        >>> values, offsets, nulls = encoder.encode_utf8(b"ab abab", np.array([0, 5, 7]))
        >>> values.tolist(), offsets.tolist(), nulls.tolist()
        ([256, 257, 256], [0, 2, 3], [False, False])
        """
        if not self.takes_utf8:
            raise ValueError("this encoder cannot encode from UTF-8 buffers (see takes_utf8)")
        ids, lengths = self.tok._fast_encoder().encode_utf8(data, np.ascontiguousarray(offsets, dtype=np.int64))
        lengths = np.frombuffer(lengths, dtype=np.int64)
        return self.frame(np.frombuffer(ids, dtype=np.int32), lengths, np.zeros(len(lengths), dtype=bool))

    def encode_long(self, document: LongDocument) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """:meth:`encode_texts` of one :class:`~bpe_spark.bpe.long_documents.LongDocument`: by the
        compiled encoder piece by piece when it can (no special-token policy to apply, no
        normalization), so the text is never one ``str``; else as its whole text."""
        if self.compiled and self._plain and not self.allow_special and not self.disallowed:
            values = encode_pieces(self.tok._fast_encoder(), document.pieces())
            return self.frame(values, np.array([len(values)]), np.zeros(1, dtype=bool))
        return self.encode_texts([document.text()])

    def _encode_pipeline(self, texts: Sequence[str | None], nulls: np.ndarray):
        encode, allowed = self.pipeline.encode, self._allowed
        rows = [() if text is None else encode(clean(text), allowed) for text in texts]
        lengths = np.fromiter(map(len, rows), dtype=np.int64, count=len(rows))
        values = np.fromiter(itertools.chain.from_iterable(rows), dtype=np.int32, count=int(lengths.sum()))
        return self.frame(values, lengths, nulls)

    def _encode_compiled(self, texts: Sequence[str | None], nulls: np.ndarray):
        if not self.allow_special:
            values, lengths = self.tok.encode_ordinary_flat(texts)
            return self.frame(values, lengths, nulls)
        # Cut the special tokens out; each document becomes units: ordinary segments (encoded
        # together below) and special tokens (one id each, after the segments' ids in `source`).
        segments: list[str] = []
        unit_kind: list[int] = []  # >= 0: segment index; < 0: -1 - special index
        counts = np.zeros(len(texts), dtype=np.int64)
        split, special_index = self._matcher.split, self._special_index
        for i, text in enumerate(texts):
            if not text:
                continue
            pieces = split(text)
            for piece, is_special in pieces:
                if is_special:
                    unit_kind.append(-1 - special_index[piece])
                else:
                    unit_kind.append(len(segments))
                    segments.append(piece)
            counts[i] = len(pieces)
        seg_values, seg_lengths = self.tok.encode_ordinary_flat(segments)
        # one padding entry, so that special units can index segment 0 harmlessly below
        seg_lengths = np.append(seg_lengths, 0)
        seg_starts = np.cumsum(seg_lengths) - seg_lengths
        kinds = np.array(unit_kind, dtype=np.int64)
        is_segment = kinds >= 0
        pick = np.where(is_segment, kinds, len(segments))
        starts = np.where(is_segment, seg_starts[pick], len(seg_values) - 1 - kinds)
        lengths = np.where(is_segment, seg_lengths[pick], 1)
        source = np.concatenate([seg_values, self._special_ids]).astype(np.int32, copy=False)
        return self.assemble(source, starts, lengths, counts, nulls)

    def assemble(self, source: np.ndarray, starts: np.ndarray, lengths: np.ndarray,
                 counts: np.ndarray, nulls: np.ndarray):
        """Gather units (``source[starts[j]:starts[j] + lengths[j]]``, ``counts[i]`` units per
        document) into documents."""
        total = int(lengths.sum())
        # position k of the output reads source[starts[j] + (k - first output of unit j)]
        first_out = np.cumsum(lengths) - lengths
        gather = np.arange(total, dtype=np.int64) + np.repeat(starts - first_out, lengths)
        values = source[gather]
        token_ends = np.concatenate([[0], np.cumsum(lengths)])
        doc_ends = np.concatenate([[0], np.cumsum(counts)])
        return self.frame(values, np.diff(token_ends[doc_ends]), nulls)

    def frame(self, values: np.ndarray, doc_tokens: np.ndarray, nulls: np.ndarray):
        """``(values, offsets, nulls)`` of documents of ``doc_tokens`` ids, BOS/EOS added."""
        extra = self.options.added_ids
        if not extra:
            return values, np.concatenate([[0], np.cumsum(doc_tokens)]), nulls
        bos = 1 if self.bos_id is not None else 0
        with_extra = np.where(nulls, 0, doc_tokens + extra)
        offsets = np.concatenate([[0], np.cumsum(with_extra)])
        out = np.empty(int(offsets[-1]), dtype=np.int32)
        # token k of document d moves by d's shift: the ids added before it
        shift = offsets[:-1] - (np.cumsum(doc_tokens) - doc_tokens) + bos
        out[np.arange(len(values)) + np.repeat(shift, doc_tokens)] = values
        real = ~nulls
        if self.bos_id is not None:
            out[offsets[:-1][real]] = self.bos_id
        if self.eos_id is not None:
            out[offsets[1:][real] - 1] = self.eos_id
        return out, offsets, nulls
