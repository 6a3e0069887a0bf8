"""A deliberately naive BPE trainer, the reference the engine is tested against.

It does what the seed articles do: at every step recount every adjacent pair of every word,
take the best one, and rewrite every word. Slow and obviously right; used only by tests.
It shares no code with ``bpe_spark.training.trainer`` or ``bpe_spark.bpe.symbols`` (the GPT-2 byte order is
rebuilt here from its definition).

>>> naive_train({"low": 5, "lower": 2}, scheme="char", end_of_word="separate",
...             tie_break="lexicographic", vocab_size=100, max_merges=2).merges
[('o', 'w'), ('l', 'ow')]
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field

MARKER = "</w>"


def gpt2_byte_order() -> list[int]:
    """Bytes sorted by the code point of their GPT-2 printable character: the hf byte order.

    Printable bytes keep their own code point; the other 68 bytes map to 256, 257, ... in
    byte order, so they sort after every printable byte.
    """
    printable = (
        set(range(ord("!"), ord("~") + 1)) | set(range(0xA1, 0xAD)) | set(range(0xAE, 0x100))
    )
    return sorted(printable) + [b for b in range(256) if b not in printable]


def token_length(value) -> int:
    """A token's length under ``max_token_length``: its bytes, or its characters without ``</w>``."""
    if isinstance(value, str) and value.endswith(MARKER):
        return len(value) - len(MARKER)
    return len(value)


@dataclass
class NaiveResult:
    merges: list = field(default_factory=list)  # (left value, right value) in rank order
    counts: list[int] = field(default_factory=list)  # the pair count of each merge
    vocab: dict = field(default_factory=dict)  # id -> value, special tokens included


def naive_train(
    counts: dict[str, int],
    *,
    scheme: str = "byte",
    end_of_word: str = "separate",
    tie_break: str = "hf",
    vocab_size: int,
    special_tokens: tuple[str, ...] = (),
    min_frequency: int = 0,
    max_merges: int | None = None,
    max_token_length: int | None = None,
) -> NaiveResult:
    """Train on ``{pretoken: count}``; the semantics of docs/design.md 1.3 / 1.4 spelled out plainly.

    ``max_token_length``: at each step, the pairs whose merged value would be longer (bytes, or
    characters less a trailing ``</w>``) are dropped from the recount before the best is taken."""
    words = {word: count for word, count in counts.items() if word and count > 0}
    # Initial symbols and their ids.
    if scheme == "byte":
        values = [bytes([b]) for b in range(256)]
        first_id = 0
        order = gpt2_byte_order()
        hf_key = {bytes([b]): position for position, b in enumerate(order)}
        sequences = {word: [bytes([b]) for b in word.encode("utf-8")] for word in words}
    else:
        first_id = len(special_tokens)
        alphabet = sorted({ch for word in words for ch in word})
        values = list(alphabet)
        if end_of_word == "separate":
            values.append(MARKER)
            sequences = {word: list(word) + [MARKER] for word in words}
        else:
            values += [ch + MARKER for ch in sorted({word[-1] for word in words})]
            sequences = {word: list(word[:-1]) + [word[-1] + MARKER] for word in words}
        hf_key = {}
    ids = {value: first_id + i for i, value in enumerate(values)}
    budget = vocab_size - len(special_tokens) - len(values)
    if budget < 0:
        raise ValueError("vocab_size below alphabet + specials")

    def key(value):  # hf: tokenizers' id order; merged tokens come after the alphabet
        return hf_key.get(value, ids[value])

    result = NaiveResult()
    created = 0
    while created < budget and (max_merges is None or len(result.merges) < max_merges):
        pair_counts: dict[tuple, int] = {}
        for word, symbols in sequences.items():
            for pair in itertools.pairwise(symbols):
                pair_counts[pair] = pair_counts.get(pair, 0) + words[word]
        if max_token_length is not None:
            pair_counts = {
                pair: count for pair, count in pair_counts.items()
                if token_length(pair[0] + pair[1]) <= max_token_length
            }
        if not pair_counts:
            break
        best_count = max(pair_counts.values())
        if best_count < max(min_frequency, 1):
            break
        tied = [pair for pair, count in pair_counts.items() if count == best_count]
        if tie_break == "hf":
            best = min(tied, key=lambda pair: (key(pair[0]), key(pair[1])))
        else:
            best = max(tied)
        new_value = best[0] + best[1]
        if new_value not in ids:  # a merge whose result exists reuses that token's id
            ids[new_value] = first_id + len(values)
            values.append(new_value)
            created += 1
        for word, symbols in sequences.items():
            out, i = [], 0
            while i < len(symbols):
                if i + 1 < len(symbols) and (symbols[i], symbols[i + 1]) == best:
                    out.append(new_value)
                    i += 2
                else:
                    out.append(symbols[i])
                    i += 1
            sequences[word] = out
        result.merges.append(best)
        result.counts.append(best_count)
    vocab = {first_id + i: value for i, value in enumerate(values)}
    if scheme == "byte":
        specials_first = len(values)
        vocab.update({specials_first + i: t.encode("utf-8") for i, t in enumerate(special_tokens)})
    else:
        vocab.update({i: t for i, t in enumerate(special_tokens)})
    result.vocab = dict(sorted(vocab.items()))
    return result
