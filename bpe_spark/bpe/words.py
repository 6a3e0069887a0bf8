"""A word: one pretoken as a list of symbols, and the merges that act on it.

One copy of each rule that training and encoding must share: the initial symbols of a pretoken
(bytes, or characters with the ``</w>`` marker separate or fused onto the last one), the merge
of a pair inside a word, a merge list replayed on a word in rank order (what training did), and
BPE by priority (what encoding does). The trainer, the tokenizer, the subword-nmt format and the
Spark rounds all use these; the compiled engine (``_fastbpe.c``) has its own, proven equal by
``tests/test_engine_equivalence.py``.

>>> initial_symbols("low", "separate", "</w>"), initial_symbols("low", "fused", "</w>")
(['l', 'o', 'w', '</w>'], ['l', 'o', 'w</w>'])
>>> merge_symbols([1, 1, 1, 2], 1, 1, 9)
[9, 1, 2]
"""

from __future__ import annotations

import heapq
from bisect import bisect_right
from collections.abc import Callable, Sequence
from itertools import pairwise
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # pragma: no cover - typing only
    from bpe_spark.bpe.config import TrainerConfig
    from bpe_spark.bpe.symbols import SymbolTable

PRETOKEN_CACHE_LIMIT = 500_000  # distinct pretokens an encoder keeps ids for before it starts over


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
