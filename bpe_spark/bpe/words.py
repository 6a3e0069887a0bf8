"""A word: one pretoken as a list of symbols, and the merges that act on it.

One copy of each rule that training and encoding must share: the initial symbols of a pretoken
(bytes, or characters with the ``</w>`` marker separate or fused onto the last one), the merge
of a pair inside a word, a merge list replayed on a word in rank order (what training did), and
BPE by priority (what encoding does), over one cache of each pretoken's ids (:class:`PretokenCache`,
for the Tokenizer and the imported pipelines' BPE model alike). The trainer, the tokenizer, the subword-nmt format and the
Spark rounds all use these; the compiled engine (``_fastbpe.c``) has its own, proven equal by
``tests/training/test_engine_equivalence.py``.

>>> initial_symbols("low", "separate", "</w>"), initial_symbols("low", "fused", "</w>")
(['l', 'o', 'w', '</w>'], ['l', 'o', 'w</w>'])
>>> merge_symbols([1, 1, 1, 2], 1, 1, 9)
[9, 1, 2]
"""

from __future__ import annotations

import heapq
from bisect import bisect_right
from collections.abc import Callable, Iterable, Mapping, Sequence
from itertools import pairwise
from typing import TYPE_CHECKING

from bpe_spark.errors import ConfigError

if TYPE_CHECKING:  # pragma: no cover - typing only
    from bpe_spark.bpe.config import TrainerConfig
    from bpe_spark.bpe.symbols import SymbolTable

PRETOKEN_CACHE_LIMIT = 500_000  # distinct pretokens an encoder keeps ids for before it starts over


class PretokenCache:
    """Each distinct pretoken's ids, computed once (:func:`bpe_ids`): encoding repeats pretokens,
    so a cache hit skips the BPE. At ``limit`` distinct pretokens it starts over, so memory stays
    bounded on any corpus.

    >>> cache = PretokenCache(limit=2)
    >>> cache.put("ab", [256]), cache.get("ab"), cache.get("cd")
    ([256], [256], None)
    >>> _ = cache.put("cd", [99]), cache.put("ef", [7])  # the third distinct pretoken starts over
    >>> cache.get("ab"), cache.get("ef")
    (None, [7])
    """

    def __init__(self, limit: int = PRETOKEN_CACHE_LIMIT):
        self.limit = limit
        self._ids: dict[str, list[int]] = {}

    def get(self, pretoken: str) -> list[int] | None:
        return self._ids.get(pretoken)

    def put(self, pretoken: str, ids: list[int]) -> list[int]:
        """Keep ``ids`` as ``pretoken``'s; returns them."""
        if len(self._ids) >= self.limit:
            self._ids.clear()
        self._ids[pretoken] = ids
        return ids

    def __len__(self) -> int:
        return len(self._ids)


def bpe_ids(initial: list[int], priority: Callable[[int, int], tuple[int, int] | None], compiled=None) -> list[int]:
    """BPE of one pretoken's initial ids: by the compiled encoder's ``bpe`` when one is given (the
    same merges, :mod:`bpe_spark.native`), else :func:`bpe_merge` by ``priority``."""
    return compiled.bpe(initial) if compiled is not None else bpe_merge(initial, priority)


def initial_symbols(pretoken: str, end_of_word: str | None, marker: str) -> list[str]:
    """The character symbols of a pretoken before any merge: ``end_of_word`` "separate" appends
    ``marker`` as a symbol of its own, "fused" joins it to the last character, None adds none."""
    symbols = list(pretoken)
    if end_of_word == "separate":
        symbols.append(marker)
    elif end_of_word == "fused" and symbols:
        symbols[-1] += marker
    return symbols


def word_symbols(pretoken: str, table: SymbolTable, cfg: TrainerConfig) -> list[int]:
    """The initial symbol ids of one pretoken in training's table (UTF-8 bytes for the byte scheme).

    >>> from bpe_spark.bpe.config import TrainerConfig
    >>> from bpe_spark.bpe.symbols import SymbolTable
    >>> word_symbols("hé", SymbolTable.for_bytes("hf"), TrainerConfig(vocab_size=300))
    [104, 195, 169]
    """
    if cfg.scheme == "byte":
        return list(pretoken.encode("utf-8"))
    index = table.index
    return [index[symbol] for symbol in initial_symbols(pretoken, cfg.end_of_word, cfg.end_of_word_marker)]


def merge_symbols(symbols: list[int], left: int, right: int, new_id: int) -> list[int]:
    """Replace the non-overlapping ``(left, right)`` occurrences, left to right, by ``new_id``."""
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


def merge_table(
    merges: Iterable[tuple[int, int]], vocab: Mapping[int, bytes | str], token_to_id: Mapping[bytes | str, int]
) -> tuple[list[tuple[int, int, int]], dict[tuple[int, int], tuple[int, int]]]:
    """The ``(left, right, new_id)`` of each merge in rank order, and each pair's ``(rank, new_id)``
    (its first merge: what encoding by priority asks); every merge's parts and result must be
    tokens of ``vocab`` (a :class:`~bpe_spark.errors.ConfigError` names the merge otherwise).

    >>> merge_table([(0, 1)], {0: b"a", 1: b"b", 2: b"ab"}, {b"a": 0, b"b": 1, b"ab": 2})
    ([(0, 1, 2)], {(0, 1): (0, 2)})
    """
    merge_ids: list[tuple[int, int, int]] = []
    pair_rank: dict[tuple[int, int], tuple[int, int]] = {}
    for rank, (left, right) in enumerate(merges):
        for side in (left, right):
            if side not in vocab:
                raise ConfigError(f"merge {rank} refers to id {side}, which is not in the vocabulary")
        merged = vocab[left] + vocab[right]
        new_id = token_to_id.get(merged)
        if new_id is None:
            raise ConfigError(f"merge {rank} makes {merged!r}, which is not in the vocabulary")
        merge_ids.append((left, right, new_id))
        pair_rank.setdefault((left, right), (rank, new_id))
    return merge_ids, pair_rank


def pair_rank_index(merges: Sequence[tuple[int, int, int]]) -> dict[tuple[int, int], list[int]]:
    """``{(left, right): [ranks...]}``: a pair can be merged again after an id was reused.

    >>> pair_rank_index([(1, 2, 5), (5, 2, 6), (1, 2, 7)])
    {(1, 2): [0, 2], (5, 2): [1]}
    """
    index: dict[tuple[int, int], list[int]] = {}
    for rank, (left, right, _) in enumerate(merges):
        index.setdefault((left, right), []).append(rank)
    return index


def apply_merges(word: list[int], merges: Sequence[tuple[int, int, int]], pair_ranks=None) -> list[int]:
    """``word`` after ``merges`` in rank order, each applied to every occurrence left to right,
    exactly as training applied them (also when a merge reuses an existing id).

    Only merges whose pair occurs are visited: the next one is the lowest rank, above the last
    applied, among the pairs the word holds now. ``pair_ranks`` is ``pair_rank_index(merges)``,
    passed in when one list of merges is replayed on many words.

    >>> apply_merges([1, 1, 1, 2], [(1, 1, 9), (9, 1, 10), (10, 2, 11)])
    [11]
    """
    if pair_ranks is None:
        pair_ranks = pair_rank_index(merges)
    last = -1
    while len(word) > 1:
        following = None
        for pair in pairwise(word):
            ranks = pair_ranks.get(pair)
            if ranks is not None:
                i = bisect_right(ranks, last)
                if i < len(ranks) and (following is None or ranks[i] < following):
                    following = ranks[i]
        if following is None:
            break
        left, right, new_id = merges[following]
        word = merge_symbols(word, left, right, new_id)
        last = following
    return word


def bpe_merge(ids: list[int], priority: Callable[[int, int], tuple[int, int] | None]) -> list[int]:
    """Apply BPE to one pretoken's symbol ids: repeatedly merge the adjacent pair of lowest
    priority, leftmost first. ``priority(left, right)`` gives ``(rank, new_id)`` or None.

    Runs in O(n log n) with a heap over a linked list, so a pretoken of many thousand symbols
    (a long run of CJK text) costs no more than it must.

    >>> bpe_merge([1, 1, 1], lambda a, b: (0, 9) if (a, b) == (1, 1) else None)
    [9, 1]
    """
    n = len(ids)
    if n < 2:
        return list(ids)
    values = list(ids)
    nxt = list(range(1, n + 1))
    prv = list(range(-1, n - 1))
    heap = []
    for i in range(n - 1):
        hit = priority(values[i], values[i + 1])
        if hit is not None:
            heap.append((hit[0], i, values[i], values[i + 1], hit[1]))
    if not heap:
        return values
    heapq.heapify(heap)
    alive = [True] * n
    while heap:
        _, i, left, right, new_id = heapq.heappop(heap)
        j = nxt[i]
        if not alive[i] or j >= n or values[i] != left or values[j] != right:
            continue  # stale: one side was merged away since this entry was pushed
        values[i] = new_id
        alive[j] = False
        k = nxt[j]
        nxt[i] = k
        if k < n:
            prv[k] = i
        p = prv[i]
        if p >= 0:
            hit = priority(values[p], new_id)
            if hit is not None:
                heapq.heappush(heap, (hit[0], p, values[p], new_id, hit[1]))
        if k < n:
            hit = priority(new_id, values[k])
            if hit is not None:
                heapq.heappush(heap, (hit[0], i, new_id, values[k], hit[1]))
    return [values[i] for i in range(n) if alive[i]]
