"""Training configuration: one frozen, validated dataclass.

>>> TrainerConfig(vocab_size=1000).scheme
'byte'
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

from bpe_spark.errors import ConfigError
from bpe_spark.bpe.patterns import compile_pattern

SCHEMES = ("byte", "char")
END_OF_WORD = ("separate", "fused")
TIE_BREAKS = ("hf", "lexicographic")
NORMALIZATIONS = (None, "NFC", "NFKC")
END_OF_WORD_MARKER = "</w>"
SUPERWORD_PATTERN = "superbpe"
# fields written by to_dict only when set, so that a config that leaves them alone reads as before
_OMITTED_AT_DEFAULT = ("superword_transition", "superword_pattern", "max_token_length")


@dataclass(frozen=True)
class TrainerConfig:
    """Everything that decides the merges a training run learns.

    ``vocab_size`` counts special tokens + initial alphabet + merges. ``max_merges`` optionally
    caps the number of merges too (subword-nmt style); training stops at whichever comes first.
    ``max_token_length`` optionally caps the length of a token training creates: bytes (byte
    scheme) or characters (char scheme; the end-of-word marker does not count). A pair whose
    merge would be longer is never chosen (:mod:`bpe_spark.training.length_limit`).

    >>> TrainerConfig(vocab_size=300, special_tokens=("<|endoftext|>",)).special_tokens
    ('<|endoftext|>',)
    """

    vocab_size: int = 32000
    scheme: str = "byte"
    end_of_word: str = "separate"
    pattern: str = "gpt2"
    lowercase: bool = False
    normalization: str | None = None
    special_tokens: tuple[str, ...] = ()
    min_frequency: int = 0
    tie_break: str = "hf"
    unk_token: str | None = None
    max_merges: int | None = None
    end_of_word_marker: str = field(default=END_OF_WORD_MARKER)
    # SuperBPE (docs/design.md 1.7): stage 1 learns this many merges with ``pattern``, stage 2
    # the rest of the vocabulary over ``superword_pattern``'s multi-word pretokens
    superword_transition: int | None = None
    superword_pattern: str = SUPERWORD_PATTERN
    # training never makes a token longer than this (bytes; characters for the char scheme)
    max_token_length: int | None = None

    def __post_init__(self) -> None:
        if isinstance(self.special_tokens, (list, str)):
            tokens = (self.special_tokens,) if isinstance(self.special_tokens, str) else self.special_tokens
            object.__setattr__(self, "special_tokens", tuple(tokens))
        if isinstance(self.vocab_size, bool) or not isinstance(self.vocab_size, int):
            raise ConfigError(f"vocab_size must be an integer, got {self.vocab_size!r}")
        if self.scheme not in SCHEMES:
            raise ConfigError(f"scheme must be one of {SCHEMES}, got {self.scheme!r}")
        if self.end_of_word not in END_OF_WORD:
            raise ConfigError(f"end_of_word must be one of {END_OF_WORD}, got {self.end_of_word!r}")
        if self.tie_break not in TIE_BREAKS:
            raise ConfigError(f"tie_break must be one of {TIE_BREAKS}, got {self.tie_break!r}")
        if self.normalization not in NORMALIZATIONS:
            raise ConfigError(
                f"normalization must be one of {NORMALIZATIONS}, got {self.normalization!r}"
            )
        if not isinstance(self.min_frequency, int) or self.min_frequency < 0:
            raise ConfigError(f"min_frequency must be an integer >= 0, got {self.min_frequency!r}")
        if self.max_merges is not None and (not isinstance(self.max_merges, int) or self.max_merges < 0):
            raise ConfigError(f"max_merges must be None or an integer >= 0, got {self.max_merges!r}")
        if self.max_token_length is not None and (
            isinstance(self.max_token_length, bool) or not isinstance(self.max_token_length, int)
            or self.max_token_length < 1
        ):
            raise ConfigError(f"max_token_length must be None or an integer >= 1, got {self.max_token_length!r}")
        for token in self.special_tokens:
            if not isinstance(token, str) or not token:
                raise ConfigError(f"special tokens must be non-empty strings, got {token!r}")
        if len(set(self.special_tokens)) != len(self.special_tokens):
            raise ConfigError(f"special_tokens has duplicates: {self.special_tokens!r}")
        if self.unk_token is not None and self.scheme != "char":
            raise ConfigError("unk_token applies to the char scheme only (bytes never are unknown)")
        if self.unk_token is not None and self.unk_token not in self.special_tokens:
            # subtle: without this, training would run to the end and only then fail to build the
            # tokenizer, since a trained vocabulary holds no unk token of its own.
            raise ConfigError(
                f"unk_token {self.unk_token!r} must also be a special token; add it to special_tokens"
            )
        compile_pattern(self.pattern)  # raises ConfigError for an unknown preset or a bad regex
        self._check_superword()
        if self.scheme == "byte":
            floor = 256 + len(self.special_tokens)
            if self.vocab_size < floor:
                raise ConfigError(
                    f"vocab_size {self.vocab_size} is below the 256 byte symbols + "
                    f"{len(self.special_tokens)} special tokens = {floor}; set vocab_size >= {floor}"
                )
        elif self.vocab_size < 1 + len(self.special_tokens):
            raise ConfigError(
                f"vocab_size {self.vocab_size} leaves no room for an alphabet after "
                f"{len(self.special_tokens)} special tokens"
            )

    def _check_superword(self) -> None:
        transition = self.superword_transition
        if transition is None:
            return
        if isinstance(transition, bool) or not isinstance(transition, int) or transition < 1:
            raise ConfigError(f"superword_transition must be None or an integer >= 1 (merges), got {transition!r}")
        if self.scheme != "byte":
            raise ConfigError("superword training (superword_transition) runs on the byte scheme: "
                              "a char-scheme word's end-of-word marker cannot sit inside a superword")
        compile_pattern(self.superword_pattern)
        room = self.vocab_size - 256 - len(self.special_tokens)
        if transition >= room:
            raise ConfigError(
                f"superword_transition {transition:,} leaves stage 2 no room: vocab_size {self.vocab_size:,} "
                f"holds {room:,} merges after the 256 bytes and {len(self.special_tokens)} special tokens; "
                f"set superword_transition below {room:,} (SuperBPE's paper: 0.9 of the vocabulary, 0.4 for the most compression)"
            )

    def replace(self, **changes: Any) -> TrainerConfig:
        """A copy with ``changes`` applied (and validated)."""
        return dataclasses.replace(self, **changes)

    def to_dict(self) -> dict[str, Any]:
        data = dataclasses.asdict(self)
        data["special_tokens"] = list(self.special_tokens)
        for name in _OMITTED_AT_DEFAULT:
            if data[name] == _DEFAULTS[name]:
                del data[name]
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> TrainerConfig:
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise ConfigError(f"unknown TrainerConfig fields {unknown}; known: {sorted(known)}")
        data = dict(data)
        if "special_tokens" in data:
            data["special_tokens"] = tuple(data["special_tokens"])
        return cls(**data)


_DEFAULTS = {f.name: f.default for f in dataclasses.fields(TrainerConfig)}
