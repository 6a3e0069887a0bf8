"""The special-token policy of encoding, tiktoken's: which special tokens a text may hold as
special tokens (``allowed_special``), and which make it fail (``disallowed_special``), with an
error that names the token and the option that fixes it.

>>> special_policy({"<|eot|>": 257, "<|pad|>": 258}, {"<|eot|>"}, "all")
({'<|eot|>'}, {'<|pad|>'})
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from typing import Literal

from bpe_spark.bpe.pretokenize import SpecialTokenMatcher
from bpe_spark.errors import ConfigError, DisallowedSpecialTokenError


def special_policy(
    special_tokens: Mapping[str, int],
    allowed_special: Literal["all"] | Collection[str],
    disallowed_special: Literal["all"] | Collection[str],
) -> tuple[set[str], set[str]]:
    """The ``(allowed, disallowed)`` special tokens of a tiktoken-style policy: ``"all"`` or a
    collection of names each; ``disallowed_special="all"`` means every one not allowed."""
    specials = set(special_tokens)
    allowed = specials if allowed_special == "all" else set(allowed_special)
    unknown = allowed - specials
    if unknown:
        raise ConfigError(f"allowed_special names tokens that are not special tokens: {sorted(unknown)}")
    disallowed = specials - allowed if disallowed_special == "all" else set(disallowed_special)
    return allowed, disallowed


def check_disallowed(matcher: SpecialTokenMatcher, text: str, disallowed: Collection[str]) -> None:
    """Raise :class:`~bpe_spark.errors.DisallowedSpecialTokenError` if ``text`` holds a
    ``disallowed`` token (found by ``matcher``, longest first)."""
    if not disallowed:
        return
    for match in matcher.finditer(text):
        token = match.group()
        if token in disallowed:
            raise DisallowedSpecialTokenError(
                f"text contains the special token {token!r} at offset {match.start()}; pass "
                f"allowed_special={{{token!r}}} (or 'all') to encode it as a special token, or "
                "disallowed_special=() to encode it as ordinary text"
            )
