"""The exact BPE merge engine and the in-process training entry points.

The engine follows ``tokenizers``' BpeTrainer: pair counts, an index from each pair to the
pretokens (words) holding it, and a lazily updated heap, so each merge touches only the words
that contain its pair. Ties are broken by the :class:`~bpe_spark.symbols.SymbolTable` keys.

>>> from bpe_spark.config import TrainerConfig
>>> tok = train_from_counts({"low": 5, "lower": 2}, TrainerConfig(vocab_size=258, pattern="whitespace"))
>>> tok.merges
[(b'l', b'o'), (b'lo', b'w')]
"""

from __future__ import annotations

import heapq
import time
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from typing import NamedTuple

from bpe_spark.config import TrainerConfig
from bpe_spark.errors import ConfigError, EmptyCorpusError
from bpe_spark.pretokenize import Pretokenizer
from bpe_spark.symbols import SymbolTable


class Merge(NamedTuple):
    """One learned merge: ``left`` + ``right`` -> ``new_id``, taken when the pair occurred ``count`` times."""

    left: int
    right: int
    new_id: int
    count: int


def merge_symbols(symbols: list[int], left: int, right: int, new_id: int) -> list[int]:
    """Replace non-overlapping ``(left, right)`` occurrences, left to right.

    >>> merge_symbols([1, 1, 1, 2], 1, 1, 9)
    [9, 1, 2]
    """
    out: list[int] = []
    i = 0
    last = len(symbols) - 1
    while i <= last:
        if i < last and symbols[i] == left and symbols[i + 1] == right:
            out.append(new_id)
            i += 2
        else:
            out.append(symbols[i])
            i += 1
    return out


class MergeEngine:
    """Incremental exact BPE over words (symbol-id lists) with their counts.

    ``run`` may be called repeatedly; the state carries over, so a caller can advance in steps
    (the distributed rounds stop at a floor count and go on later with fresh words).
    """

    def __init__(self, table: SymbolTable, words: list[list[int]], counts: list[int]):
        if len(words) != len(counts):
            raise ValueError("words and counts differ in length")
        self.table = table
        self.words = words
        self.counts = counts
        pair_counts: dict[tuple[int, int], int] = {}
        where: dict[tuple[int, int], set[int]] = {}
        for index, (word, count) in enumerate(zip(words, counts)):
            for pair in zip(word, word[1:]):
                pair_counts[pair] = pair_counts.get(pair, 0) + count
                holders = where.get(pair)
                if holders is None:
                    where[pair] = {index}
                else:
                    holders.add(index)
        self.pair_counts = pair_counts
        self.where = where
        self.heap: list = [self._entry(pair, count) for pair, count in pair_counts.items() if count > 0]
        heapq.heapify(self.heap)

    def _entry(self, pair: tuple[int, int], count: int) -> tuple:
        keys, first = self.table.keys, self.table.first_id
        return (-count, keys[pair[0] - first], keys[pair[1] - first], pair)

    def best(self) -> tuple[tuple[int, int], int] | None:
        """The pair the next merge would take and its count, or None when no pair is left."""
        heap, pair_counts = self.heap, self.pair_counts
        while heap:
            neg_count, key_left, key_right, pair = heap[0]
            current = pair_counts.get(pair, 0)
            if current == -neg_count:
                return pair, current
            heapq.heappop(heap)
            # subtle: a count that fell gets its entry back at the new count; a count that grew
            # (a merge reusing an existing token id) was pushed afresh when it grew.
            if 0 < current < -neg_count:
                heapq.heappush(heap, (-current, key_left, key_right, pair))
        return None

    def run(
        self,
        *,
        max_new_tokens: int,
        max_merges: int | None = None,
        min_frequency: int = 0,
        floor: int | None = None,
        stop_after_reuse: bool = False,
        progress: Callable[[int, Merge], None] | None = None,
    ) -> list[Merge]:
        """Merge while the vocabulary and merge budgets allow and the best count is high enough.

        ``floor``: stop before a pair whose count is <= floor (the distributed rounds' bound U).
        ``stop_after_reuse``: stop after a merge whose token already existed (its id is reused,
        so counts of pairs outside this engine's words could grow; a round cannot prove more).
        """
        merges: list[Merge] = []
        created = 0
        table = self.table
        words, counts = self.words, self.counts
        pair_counts, where = self.pair_counts, self.where
        while created < max_new_tokens and (max_merges is None or len(merges) < max_merges):
            top = self.best()
            if top is None:
                break
            pair, count = top
            if count < max(min_frequency, 1) or (floor is not None and count <= floor):
                break
            left, right = pair
            new_id, is_new = table.add(table.value(left) + table.value(right))
            created += is_new
            grown: set[tuple[int, int]] = set()
            for index in where.pop(pair, ()):
                word = words[index]
                merged = merge_symbols(word, left, right, new_id)
                if len(merged) == len(word):
                    continue  # stale index entry: the pair left this word earlier
                word_count = counts[index]
                for old_pair in zip(word, word[1:]):
                    pair_counts[old_pair] -= word_count
                for new_pair in zip(merged, merged[1:]):
                    pair_counts[new_pair] = pair_counts.get(new_pair, 0) + word_count
                    if new_pair[0] == new_id or new_pair[1] == new_id:
                        grown.add(new_pair)
                        holders = where.get(new_pair)
                        if holders is None:
                            where[new_pair] = {index}
                        else:
                            holders.add(index)
                words[index] = merged
            pair_counts.pop(pair, None)
            for new_pair in grown:
                count_now = pair_counts.get(new_pair, 0)
                if count_now > 0:
                    heapq.heappush(self.heap, self._entry(new_pair, count_now))
            merge = Merge(left, right, new_id, count)
            merges.append(merge)
            if progress is not None:
                progress(len(merges), merge)
            if stop_after_reuse and not is_new:
                break
        return merges


# --- words from pretokens ---------------------------------------------------------------------


def initial_table(cfg: TrainerConfig, pretokens: Iterable[str]) -> SymbolTable:
    """The symbol table before any merge: 256 bytes, or the alphabet of ``pretokens`` (char)."""
    if cfg.scheme == "byte":
        return SymbolTable.for_bytes(cfg.tie_break)
    alphabet: set[str] = set()
    final_chars: set[str] = set()
    for pretoken in pretokens:
        alphabet.update(pretoken)
        if pretoken:
            final_chars.add(pretoken[-1])
    return SymbolTable.for_chars(
        alphabet,
        cfg.tie_break,
        final_chars=final_chars,
        end_of_word=cfg.end_of_word,
        marker=cfg.end_of_word_marker,
        first_id=len(cfg.special_tokens),
    )


def word_symbols(pretoken: str, table: SymbolTable, cfg: TrainerConfig) -> list[int]:
    """The initial symbol ids of one pretoken (before merges)."""
    if cfg.scheme == "byte":
        return list(pretoken.encode("utf-8"))
    index = table.index
    marker = cfg.end_of_word_marker
    if cfg.end_of_word == "separate":
        return [index[ch] for ch in pretoken] + [index[marker]]
    return [index[ch] for ch in pretoken[:-1]] + [index[pretoken[-1] + marker]]


def _checked_counts(counts: Mapping[str, int]) -> list[tuple[str, int]]:
    items = []
    for pretoken, count in counts.items():
        if not isinstance(pretoken, str):
            raise ConfigError(f"pretoken counts must be keyed by str, got {type(pretoken).__name__}: {pretoken!r}")
        count = int(count)
        if count < 0:
            raise ConfigError(f"pretoken {pretoken!r} has a negative count {count}")
        if count and pretoken:
            items.append((pretoken, count))
    if not items:
        raise EmptyCorpusError("the corpus has no pretoken to train on (empty input, or only special tokens)")
    return items


def build_engine(counts: Mapping[str, int], cfg: TrainerConfig) -> MergeEngine:
    """An engine over ``{pretoken: count}`` with the initial symbol table of ``cfg``."""
    items = _checked_counts(counts)
    table = initial_table(cfg, (pretoken for pretoken, _ in items))
    floor = len(cfg.special_tokens) + len(table)
    if cfg.vocab_size < floor:
        raise ConfigError(
            f"vocab_size {cfg.vocab_size} is below the initial alphabet ({len(table)} symbols) + "
            f"{len(cfg.special_tokens)} special tokens = {floor}; set vocab_size >= {floor}"
        )
    words = [word_symbols(pretoken, table, cfg) for pretoken, _ in items]
    return MergeEngine(table, words, [count for _, count in items])


def new_token_budget(cfg: TrainerConfig, table: SymbolTable) -> int:
    return cfg.vocab_size - len(cfg.special_tokens) - len(table)


def train_from_counts(
    counts: Mapping[str, int],
    cfg: TrainerConfig,
    *,
    progress: Callable[[int, Merge], None] | None = None,
):
    """Train on pretoken counts computed elsewhere (``{pretoken: count}``, already pretokenized).

    >>> tok = train_from_counts({"aaabdaaabac": 1}, TrainerConfig(vocab_size=259, pattern="whitespace"))
    >>> [tok.decode([i]) for i in tok.encode("aaabdaaabac")]
    ['aaab', 'd', 'aaab', 'a', 'c']
    """
    from bpe_spark.tokenizer import Tokenizer

    started = time.perf_counter()
    engine = build_engine(counts, cfg)
    merges = engine.run(
        max_new_tokens=new_token_budget(cfg, engine.table),
        max_merges=cfg.max_merges,
        min_frequency=cfg.min_frequency,
        progress=progress,
    )
    stats = {
        "distinct_pretokens": len(engine.words),
        "pretokens": sum(engine.counts),
        "merge_seconds": round(time.perf_counter() - started, 6),
    }
    return Tokenizer.from_training(cfg, engine.table, merges, stats=stats)


def count_pretokens(texts: Iterable[str], cfg: TrainerConfig) -> Counter:
    """``{pretoken: count}`` of documents, in process (the Spark jobs do the same at scale)."""
    return Pretokenizer.from_config(cfg).count(texts)


def train(texts: Iterable[str] | str, cfg: TrainerConfig, **kwargs):
    """Train in process on an iterable of documents (a single ``str`` is one document).

    >>> tok = train(["low low lower newest"], TrainerConfig(vocab_size=260, pattern="words"))
    >>> len(tok.merges)
    4
    """
    if isinstance(texts, str):
        texts = [texts]
    started = time.perf_counter()
    counts = count_pretokens(texts, cfg)
    count_seconds = time.perf_counter() - started
    tok = train_from_counts(counts, cfg, **kwargs)
    tok.metadata.setdefault("stats", {})["count_seconds"] = round(count_seconds, 6)
    return tok
