"""The length rule of ``TrainerConfig.max_token_length``: how long a token is, and which pairs a
run may merge under the limit.

A token's length is its bytes (byte scheme) or its characters (char scheme), the end-of-word
marker (``</w>``, separate or fused onto the last character) not counted. A pair is *visible*
when the token its merge makes is at most ``max_length`` long; an over-long pair is never
chosen, and since a token id's value never changes, a pair over the limit stays over it. Every
other pair's count and the tie-break order are untouched, so a limited run takes exactly the
merges of exact BPE on which the over-long pairs are invisible. The cores
(:mod:`bpe_spark.training.core`) keep each id's length and skip invisible pairs where they take
the best one; the exact rounds also leave them out of their shippings
(:mod:`bpe_spark.spark.training.rounds`).

>>> limit = LengthLimit(2, "</w>")
>>> limit.length("ab</w>"), limit.length(b"ab"), limit.length("</w>")
(2, 2, 0)
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:  # pragma: no cover - typing only
    from bpe_spark.bpe.config import TrainerConfig
    from bpe_spark.bpe.symbols import SymbolTable


class LengthLimit:
    """``max_length`` and the marker a char token's length leaves out. Plain data (pickles)."""

    __slots__ = ("max_length", "marker")

    def __init__(self, max_length: int, marker: str | None = None):
        self.max_length = int(max_length)
        self.marker = marker or None

    def __repr__(self) -> str:
        return f"LengthLimit({self.max_length}, {self.marker!r})"

    @classmethod
    def of(cls, cfg: TrainerConfig | None) -> LengthLimit | None:
        """The limit of ``cfg``, or None when it sets none.

        >>> from bpe_spark.bpe.config import TrainerConfig
        >>> LengthLimit.of(TrainerConfig(vocab_size=300)), LengthLimit.of(TrainerConfig(vocab_size=300, max_token_length=3))
        (None, LengthLimit(3, None))
        """
        if cfg is None or cfg.max_token_length is None:
            return None
        return cls(cfg.max_token_length, cfg.end_of_word_marker if cfg.scheme == "char" else None)

    def length(self, value: bytes | str) -> int:
        """A token's length: its bytes, or its characters less a trailing end-of-word marker."""
        if isinstance(value, str) and self.marker and value.endswith(self.marker):
            return len(value) - len(self.marker)
        return len(value)

    def lengths(self, table: SymbolTable, start: int = 0) -> list[int]:
        """The lengths of ``table``'s tokens from index ``start`` (id ``first_id + start``) on."""
        return [self.length(value) for value in table.values[start:]]

    def visible(self, table: SymbolTable, left: int, right: int) -> bool:
        """Whether the merge of ``left`` and ``right`` makes a token within the limit."""
        return self.length(table.value(left)) + self.length(table.value(right)) <= self.max_length

    def visible_keys(self, table: SymbolTable, keys: np.ndarray, shift: int = 32) -> np.ndarray:
        """A mask of the visible pairs among int64 keys ``left << shift | right``."""
        lengths = np.asarray(self.lengths(table), dtype=np.int64)
        keys = np.asarray(keys, dtype=np.int64)
        lefts = (keys >> shift) - table.first_id
        rights = (keys & ((1 << shift) - 1)) - table.first_id
        return lengths[lefts] + lengths[rights] <= self.max_length
