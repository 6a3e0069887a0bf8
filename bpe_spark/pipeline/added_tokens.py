"""Added tokens as ``tokenizers`` 0.23 finds them in text (its ``AddedVocabulary``): special and
not, matched in the raw text (``normalized: false``) or in the normalized text (``normalized:
true``), with the ``lstrip``, ``rstrip`` and ``single_word`` flags.

What ``tokenizers`` does, reproduced here:

- ids: each entry of ``added_tokens``, in file order, takes the id of its content in the model's
  vocabulary, or else the next free id (the vocabulary's size, or one above the largest added id
  once that is at least the size). The ``id`` a file lists is only checked by ``tokenizers``; a
  file whose ids differ from those is refused here, since ``tokenizers`` would encode other ids;
- matching: leftmost, longest first where tokens overlap (Aho-Corasick, LeftmostLongest); a
  ``single_word`` match next to a word character (``\\w`` as Rust's regex has it) is skipped;
  ``lstrip`` / ``rstrip`` take the white space before / after the match into the token;
- a special token the caller does not allow is skipped as ``encode_special_tokens`` skips it:
  its text is ordinary text, and no other added token is looked for inside it.

>>> from bpe_spark.pipeline.model import BpeModel
>>> model = BpeModel({"vocab": {"a": 0}, "merges": []})
>>> added = AddedTokens([{"id": 1, "content": "<s>", "special": True, "normalized": False}], model)
>>> added.split("a<s>a", added.raw)
[(None, 0, 1), (1, 1, 4), (None, 4, 5)]
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass
from typing import Any

import regex

from bpe_spark.bpe.fields import MAX_TOKENS, is_id, show
from bpe_spark.pipeline.model import BpeModel, _default_error, check_token_size

_FLAGS = ("special", "normalized", "lstrip", "rstrip", "single_word")
_DEFAULTS = {"special": False, "normalized": True, "lstrip": False, "rstrip": False, "single_word": False}
# Rust regex classes, which tokenizers' ^\w, \w$, ^\s*, \s*$ use
_WORD_CHAR = regex.compile(r"[\p{Alphabetic}\p{M}\p{Nd}\p{Pc}\p{Join_Control}]")
_SPACES_AT_END = regex.compile(r"\p{White_Space}*\Z")
_SPACES_AT_START = regex.compile(r"\p{White_Space}*")


@dataclass(frozen=True)
class AddedToken:
    content: str
    id: int
    special: bool
    normalized: bool
    lstrip: bool
    rstrip: bool
    single_word: bool


def next_added_id(content: str, vocab: Mapping[str, int], added_ids: Collection[int]) -> int:
    """The id ``tokenizers`` gives an added token (``AddedVocabulary::add_tokens``), whatever the
    file lists: its id in the model's ``vocab``, else the vocabulary's size, or one above the
    largest id of the tokens added before it (``added_ids``) once that is at least the size.

    >>> next_added_id("<s>", {"a": 0, "<s>": 1}, []), next_added_id("<x>", {"a": 0}, [5])
    (1, 6)
    """
    token_id = vocab.get(content)
    if token_id is not None:
        return token_id
    largest = max(added_ids, default=None)
    return len(vocab) if largest is None or largest < len(vocab) else largest + 1


class Matcher:
    """Leftmost-longest search for a set of strings: a regex alternation, longest first (at the
    leftmost position where any string starts, the longest one that matches there wins)."""

    def __init__(self, tokens: dict[str, AddedToken]):
        self.tokens = tokens
        ordered = sorted(tokens, key=len, reverse=True)
        self._regex = regex.compile("|".join(map(regex.escape, ordered))) if ordered else None

    def finditer(self, text: str):
        return self._regex.finditer(text) if self._regex is not None else iter(())


class AddedTokens:
    """The ``added_tokens`` of a ``tokenizer.json`` over its BPE ``model`` and ``normalizer``
    (a callable str -> str, or None): ids, and the two matchers ``raw`` and ``normalized``."""

    def __init__(
        self,
        entries: Any,
        model: BpeModel,
        normalizer: Callable[[str], str] | None = None,
        field: str = "added_tokens",
        error: Callable[[str, str], Exception] = _default_error,
    ):
        if not isinstance(entries, list):
            raise error(field, f"{show(entries)} is not a list")
        if len(entries) > MAX_TOKENS:
            raise error(field, f"{len(entries):,} added tokens; at most {MAX_TOKENS:,} are allowed")
        self.tokens: list[AddedToken] = []
        self.by_content: dict[str, AddedToken] = {}
        self.by_id: dict[int, AddedToken] = {}
        for i, entry in enumerate(entries):
            where = f"{field}[{i}]"
            if not isinstance(entry, dict):
                raise error(where, f"{show(entry)} is not an object")
            content = entry.get("content")
            if not isinstance(content, str) or not content:
                raise error(f"{where}.content", f"{show(content)} is not a non-empty string")
            check_token_size(content, f"{where}.content", error)
            flags = {}
            for flag in _FLAGS:
                value = entry.get(flag, _DEFAULTS[flag])
                if not isinstance(value, bool):
                    raise error(f"{where}.{flag}", f"{show(value)} is not a boolean")
                flags[flag] = value
            if content in self.by_content:
                raise error(where, f"{content!r} is listed twice")
            token_id = next_added_id(content, model.vocab, self.by_id)
            listed = entry.get("id")
            if not is_id(listed) or listed != token_id:
                raise error(
                    f"{where}.id",
                    f"{show(listed)}, but tokenizers gives {content!r} the id {token_id} "
                    "(its id in model.vocab, or the next id after the vocabulary and the added tokens before it)",
                )
            token = AddedToken(content, token_id, **flags)
            self.tokens.append(token)
            self.by_content[content] = token
            self.by_id[token_id] = token
        self.raw = Matcher({t.content: t for t in self.tokens if not t.normalized})
        normalized: dict[str, AddedToken] = {}
        # the string of each id that decoding hands the decoder: a normalized token's normalized
        # form, as tokenizers' id_to_token gives it
        self.strings: dict[int, str] = {}
        for token in self.tokens:
            key = token.content
            if token.normalized and normalizer is not None:
                key = normalizer(token.content)
            self.strings[token.id] = key
            if token.normalized and key:
                normalized.setdefault(key, token)
        self.normalized = Matcher(normalized)

    @property
    def special(self) -> dict[str, int]:
        """``{content: id}`` of the special tokens."""
        return {t.content: t.id for t in self.tokens if t.special}

    def split(
        self, text: str, matcher: Matcher, allowed: Collection[str] | None = None
    ) -> list[tuple[int | None, int, int]]:
        """``text`` as ``(token id or None, start, stop)`` pieces that cover it (``find_matches``).
        ``allowed``: the special tokens that may match (None: all)."""
        if not text:
            return [(None, 0, 0)]
        pieces: list[tuple[int | None, int, int]] = []
        done = 0
        for match in matcher.finditer(text):
            start, stop = match.span()
            token = matcher.tokens[match.group()]
            if token.special and allowed is not None and token.content not in allowed:
                continue
            if token.single_word:
                before = start == 0 or not _WORD_CHAR.match(text, start - 1)
                after = stop == len(text) or not _WORD_CHAR.match(text, stop)
                if not (before and after):
                    continue
            if token.lstrip:
                start = max(_SPACES_AT_END.search(text, 0, start).start(), done)
            if token.rstrip:
                stop = _SPACES_AT_START.match(text, stop).end()
            if done < start:
                pieces.append((None, done, start))
            pieces.append((token.id, start, stop))
            done = stop
        if done != len(text):
            pieces.append((None, done, len(text)))
        return pieces
