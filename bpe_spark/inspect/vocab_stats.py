"""What a trained vocabulary holds, as plain data: tokens by kind, by length and by script, the
longest tokens, the training count of each merge, and bytes per token on a text with the first
``k`` merges only. ``bpe-spark inspect`` prints these and ``bpe-spark report`` plots them.

No printing, no Spark; any tokenizer object of this package (a trained model, an imported
GPT-2 / tiktoken / tokenizer.json file). Special tokens are left out of every figure but
:func:`kind_counts`; in the char scheme a token's length and script are those of its text
without the end-of-word marker, and the bare marker (``end_of_word="separate"``) is left out
too, as it stands for no text.

>>> from bpe_spark import TrainerConfig, train
>>> tok = train(["low lower lowest"], TrainerConfig(vocab_size=260, pattern="words"))
>>> kind_counts(tok)
{'byte': 256, 'merge': 4}
>>> longest_tokens(tok, 2)
[(258, b'lowe'), (257, b'low')]
"""

from __future__ import annotations

import unicodedata
from collections import Counter
from functools import cache

from bpe_spark.errors import ConfigError, UnknownCharacterError
from bpe_spark.bpe.symbols import utf8_bytes
from bpe_spark.models.token_kinds import KIND_ORDER, token_kinds

# The scripts a token is named by (the first word of its letters' Unicode names); letters of
# any other script count as "other".
SCRIPTS = {
    name: name.title()
    for name in (
        "LATIN", "CYRILLIC", "GREEK", "ARABIC", "HEBREW", "ARMENIAN", "GEORGIAN", "DEVANAGARI",
        "BENGALI", "GURMUKHI", "GUJARATI", "TAMIL", "TELUGU", "KANNADA", "MALAYALAM", "SINHALA",
        "THAI", "LAO", "TIBETAN", "MYANMAR", "KHMER", "HANGUL", "HIRAGANA", "KATAKANA", "ETHIOPIC",
        "MONGOLIAN", "BOPOMOFO",
    )
}
SCRIPTS["CJK"] = "Han"
_WIDTH_PREFIXES = ("FULLWIDTH", "HALFWIDTH")


def kind_counts(tok) -> dict[str, int]:
    """How many tokens of each kind (:func:`token_kinds`), in the order byte, char, merge, special;
    kinds the model has none of are left out."""
    counts = Counter(token_kinds(tok).values())
    return {kind: counts[kind] for kind in KIND_ORDER if counts[kind]}


def _token_texts(tok) -> dict[int, bytes]:
    """The bytes of every ordinary token that stands for text (char scheme: without the
    end-of-word marker; the bare marker left out)."""
    marker = tok.end_of_word_marker.encode("utf-8") if tok.scheme == "char" and tok.end_of_word else None
    texts = {}
    for token_id, value in tok.ordinary_vocab.items():
        token = utf8_bytes(value)
        if marker is not None and token.endswith(marker):
            token = token[: -len(marker)]
            if not token:
                continue
        texts[token_id] = token
    return texts


def length_histogram(tok) -> dict[int, int]:
    """Token length in bytes -> number of tokens, shortest first.

    >>> from bpe_spark import TrainerConfig, train
    >>> length_histogram(train(["low lower lowest"], TrainerConfig(vocab_size=260, pattern="words")))
    {1: 256, 2: 2, 3: 1, 4: 1}
    """
    counts = Counter(len(token) for token in _token_texts(tok).values())
    return dict(sorted(counts.items()))


def longest_tokens(tok, n: int = 10) -> list[tuple[int, bytes]]:
    """The ``n`` longest tokens as ``(id, token bytes)``, longest first, ties by id (char scheme:
    the bytes include the end-of-word marker; the length does not)."""
    texts = _token_texts(tok)
    vocab = tok.ordinary_vocab
    ids = sorted(texts, key=lambda token_id: (-len(texts[token_id]), token_id))[:n]
    return [(token_id, utf8_bytes(vocab[token_id])) for token_id in ids]


@cache
def char_class(ch: str) -> str | None:
    """A character's script (letters) or class; None for a combining mark (its letter decides)."""
    if ch.isspace():
        return "whitespace"
    category = unicodedata.category(ch)
    if category[0] == "M":
        return None
    if category[0] == "N":
        return "digits"
    if category[0] in "PS":
        return "punctuation"
    if category[0] != "L":
        return "other"
    words = unicodedata.name(ch, "").split()
    while words and words[0] in _WIDTH_PREFIXES:
        words.pop(0)
    return "script:" + SCRIPTS.get(words[0] if words else "", "other")


def token_script(token: bytes) -> str:
    """The script or byte class of a token's bytes: its letters' script when they share one
    (leading spaces, digits and punctuation beside them do not change it), else ``mixed``;
    without letters ``whitespace``, ``digits``, ``punctuation``, ``other`` or ``mixed``; bytes
    that are not whole UTF-8 characters ``partial UTF-8``.

    >>> [token_script(t) for t in (b" the", "мир".encode(), "中文".encode(), b"42", b"\\xe4\\xb8", b"a\\xce\\xb1")]
    ['Latin', 'Cyrillic', 'Han', 'digits', 'partial UTF-8', 'mixed']
    """
    try:
        text = token.decode("utf-8")
    except UnicodeDecodeError:
        return "partial UTF-8"
    classes = {char_class(ch) for ch in text} - {None}
    scripts = {c for c in classes if c.startswith("script:")}
    if scripts:
        return scripts.pop()[len("script:"):] if len(scripts) == 1 else "mixed"
    if len(classes) > 1:
        classes.discard("whitespace")
    if len(classes) == 1:
        return classes.pop()
    return "mixed" if classes else "other"


def script_shares(tok) -> dict[str, int]:
    """Tokens by script or byte class (:func:`token_script`), most first, ties by name."""
    counts = Counter(token_script(token) for token in _token_texts(tok).values())
    return dict(sorted(counts.items(), key=lambda item: (-item[1], item[0])))


def with_merges(tok, merges: int):
    """The tokenizer of ``tok``'s first ``merges`` merges: its alphabet (every token no merge
    makes), those merges and the tokens they make, and its special tokens and pattern."""
    if getattr(tok, "pipeline", None) is not None:
        raise ConfigError("the first merges of an imported tokenizers pipeline are not a tokenizer; "
                          "pass merges=None")
    _check_merges(tok, merges)
    merge_ids = tok.merge_ids
    made = {new_id for _, _, new_id in merge_ids}
    keep = {new_id for _, _, new_id in merge_ids[:merges]}
    data = tok.to_dict()
    data["vocab"] = {i: v for i, v in data["vocab"].items() if i not in made or i in keep}
    data["merges"] = data["merges"][:merges]
    return type(tok).from_dict(data)


def bytes_per_token(tok, text: str, merges: int | None = None) -> float:
    """UTF-8 bytes of ``text`` per token, encoded as ordinary text with the first ``merges``
    merges only (None: all). A char-scheme model without ``unk_token`` skips the lines that hold
    a character it never saw (the bytes of the lines it encodes count).

    >>> from bpe_spark import TrainerConfig, train
    >>> tok = train(["low lower lowest"], TrainerConfig(vocab_size=260, pattern="words"))
    >>> bytes_per_token(tok, "lower"), bytes_per_token(tok, "lower", merges=0)
    (2.5, 1.0)
    """
    size, ids = _encodable(tok if merges is None else with_merges(tok, merges), text)
    return size / max(1, len(ids))


def bytes_per_token_at(tok, text: str, steps: list[int]) -> list[float]:
    """:func:`bytes_per_token` of ``text`` with the first ``k`` merges, for each ``k`` of ``steps``.

    Under the merge table's rule (``merge_rule="pairs"``), where each merge joins tokens that
    earlier merges made (as training makes them), a word's tokens under the first ``k`` merges
    are its tokens under all of them with each token that merge ``k`` or a later one made split
    back into its two parts, recursively: so the text is encoded once, and the merges are undone
    from the last to the first, counting the tokens. Other models encode it once per ``k``.

    >>> from bpe_spark import TrainerConfig, train
    >>> tok = train(["low lower lowest " * 3], TrainerConfig(vocab_size=262, pattern="words"))
    >>> bytes_per_token_at(tok, "lowest lower", [0, 3, 6]) == [bytes_per_token(tok, "lowest lower", merges=k)
    ...                                                         for k in (0, 3, 6)]
    True
    """
    merge_ids = tok.merge_ids
    if not _nested(tok, merge_ids):
        return [bytes_per_token(tok, text, merges=k) for k in steps]
    for k in steps:
        _check_merges(tok, k)
    size, ids = _encodable(tok, text)
    held = Counter(ids)
    tokens = [0] * len(merge_ids) + [len(ids)]  # tokens[k]: the text's tokens under the first k merges
    for k in range(len(merge_ids), 0, -1):
        left, right, new_id = merge_ids[k - 1]
        split = held.pop(new_id, 0)
        held[left] += split
        held[right] += split
        tokens[k - 1] = tokens[k] + split
    return [size / max(1, tokens[k]) for k in steps]


def _check_merges(tok, merges: int) -> None:
    if not 0 <= merges <= len(tok.merge_ids):
        raise ConfigError(f"merges must be from 0 to {len(tok.merge_ids)}, got {merges}")


def _nested(tok, merge_ids: list[tuple[int, int, int]]) -> bool:
    """Whether each merge of ``tok`` makes a token of its own from tokens made before it (or
    none), under the merge table's rule: the condition of :func:`bytes_per_token_at`."""
    if tok.merge_rule != "pairs" or getattr(tok, "pipeline", None) is not None:
        return False
    rank = {new_id: i for i, (_, _, new_id) in enumerate(merge_ids)}
    return len(rank) == len(merge_ids) and all(
        rank.get(left, -1) < i and rank.get(right, -1) < i for i, (left, right, _) in enumerate(merge_ids))


def _encodable(model, text: str) -> tuple[int, list[int]]:
    """The UTF-8 bytes of ``text`` and its ids as ordinary text; for a char-scheme model without
    ``unk_token``, of the lines that hold no character it never saw only."""
    if not text:
        raise ConfigError("bytes per token needs some text; got an empty one")
    try:
        return len(text.encode("utf-8", errors="replace")), model.encode_ordinary(text)
    except UnknownCharacterError:
        pass
    size, ids = 0, []
    for line in text.splitlines(keepends=True):
        try:
            ids += model.encode_ordinary(line)
        except UnknownCharacterError:
            continue
        size += len(line.encode("utf-8", errors="replace"))
    if not ids:
        raise ConfigError("no line of the text encodes: each holds a character the model never saw")
    return size, ids
