"""The plan of the exact training rounds: which pairs to broadcast, which pretokens to collect,
what the broadcast pairs count outside them, and how many partitions the rounds' tables get.

Pure functions, no Spark: a histogram is a list of ``(value, n)`` levels, highest value first
(``n`` pairs counted ``value`` times, or ``n`` pretokens whose highest pair count is ``value``);
a pair is one int64, ``left << 32 | right``. Why these choices keep a round exact is written
once, in :mod:`bpe_spark.spark.rounds`.

>>> pair_levels = [(90, 1), (50, 2), (20, 40)]
>>> cut, outside = broadcast_cut(pair_levels, 3)
>>> cut, outside
(50, 20)
>>> choose_threshold([(90, 4), (50, 6)], budget=8, outside=outside)
Threshold(value=90, floor=50, pretokens=4)
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

import numpy as np

Levels = Sequence[tuple[int, int]]
# A partition of our own tables and aggregations holds at least MIN_PARTITION_BYTES before a
# second core gets one (a task costs some 10-50 ms whatever its size), and at most
# MAX_PARTITION_BYTES (Spark's file split size) however few the cores.
MIN_PARTITION_BYTES = 256 << 10
MAX_PARTITION_BYTES = 128 << 20
# words table bytes: wid and count (8 each) plus the list's offset per pretoken, 4 per symbol
WORD_ROW_BYTES = 20
SYMBOL_BYTES = 4


class Threshold(NamedTuple):
    """A round's collect: the pretokens whose highest pair count is >= ``value`` (``pretokens``
    of them), merged while the best count is > ``floor`` (the bound U)."""

    value: int
    floor: int
    pretokens: int


def broadcast_cut(levels: Levels, most: int) -> tuple[int | None, int]:
    """``(cut, outside)`` over the pair-count histogram ``levels``: ``cut`` is the lowest count
    such that the pairs counted >= it are at most ``most`` (whole levels; None when the top level
    alone is more), ``outside`` the highest count below the kept levels (0 when every level is
    kept).

    >>> broadcast_cut([(9, 1), (5, 2), (2, 4)], 3), broadcast_cut([(9, 1), (5, 2)], 10)
    ((5, 2), (5, 0))
    >>> broadcast_cut([(9, 4)], 3), broadcast_cut([], 3)
    ((None, 9), (None, 0))
    """
    cut, kept = None, 0
    for level, n in levels:
        if kept + n > most:
            return cut, level
        kept += n
        cut = level
    return cut, 0


def top_cut(counts: Sequence[int], most: int) -> tuple[int | None, int, int]:
    """:func:`broadcast_cut` from the ``most + 1`` highest pair counts, highest first (all of
    them when there are fewer): ``(cut, outside, kept)``, ``kept`` the number of them kept (the
    first ones). One query (the top rows) instead of a histogram and then the kept rows.

    >>> top_cut([9, 5, 5, 2], 3), top_cut([9, 5, 5], 3), top_cut([9, 9], 1)
    ((5, 2, 3), (5, 0, 3), (None, 9, 0))
    """
    if len(counts) <= most:
        return (counts[-1] if counts else None), 0, len(counts)
    outside = counts[most]
    kept = most
    while kept and counts[kept - 1] == outside:  # the level the (most + 1)-th count is in does not fit
        kept -= 1
    return (counts[kept - 1] if kept else None), outside, kept


def choose_threshold(levels: Levels, budget: int, outside: int) -> Threshold | None:
    """The lowest threshold whose pretokens fit ``budget``, over the histogram ``levels`` of the
    pretokens' highest pair counts; its floor is the larger of the next level below it (0 when
    none) and ``outside`` (the best pair count left out of the broadcast). None when even the
    top level's pretokens do not fit (or there is no level): the round then takes the top pair.

    >>> choose_threshold([(9, 2), (7, 3), (4, 10)], budget=5, outside=0)
    Threshold(value=7, floor=4, pretokens=5)
    >>> choose_threshold([(9, 2), (7, 3)], budget=5, outside=6)
    Threshold(value=7, floor=6, pretokens=5)
    >>> choose_threshold([(9, 6)], budget=5, outside=0) is None
    True
    """
    chosen = None
    collected = 0
    for i, (level, n) in enumerate(levels):
        if collected + n > budget:
            break
        collected += n
        below = levels[i + 1][0] if i + 1 < len(levels) else 0
        chosen = Threshold(level, max(below, outside), collected)
    return chosen


def outside_counts(values, offsets, counts, pairs, totals) -> tuple[np.ndarray, np.ndarray]:
    """What each of ``pairs`` counts outside the collected words: its global count (``totals``)
    less its count in the words ``values[offsets[i]:offsets[i + 1]]`` (symbol ids, each word
    ``counts[i]`` times); the pairs left above zero and those counts, in the order of ``pairs``.

    >>> pair = lambda left, right: left << 32 | right
    >>> words, offsets = [1, 2, 1, 2, 3], [0, 4, 5]  # [1, 2, 1, 2] twice, [3] once
    >>> left, rest = outside_counts(words, offsets, [2, 1], [pair(1, 2), pair(2, 1), pair(2, 3)], [7, 2, 5])
    >>> [divmod(int(p), 1 << 32) for p in left], rest.tolist()
    ([(1, 2), (2, 3)], [3, 5])
    """
    values = np.asarray(values, dtype=np.int64)
    offsets = np.asarray(offsets, dtype=np.int64)
    pairs = np.asarray(pairs, dtype=np.int64)
    totals = np.asarray(totals, dtype=np.int64)
    inside = np.zeros(len(pairs), dtype=np.int64)
    lengths = np.diff(offsets)
    if len(pairs) and lengths.sum() > 1:
        symbols = values[offsets[0]:offsets[-1]]
        word = np.repeat(np.arange(len(lengths)), lengths)
        same = word[:-1] == word[1:]  # position i pairs symbols i and i + 1 of one word
        keys = ((symbols[:-1] << 32) | symbols[1:])[same]
        weights = np.asarray(counts, dtype=np.int64)[word[:-1][same]]
        order = np.argsort(pairs, kind="stable")
        at = np.searchsorted(pairs[order], keys)
        hit = at < len(pairs)
        hit[hit] = pairs[order][at[hit]] == keys[hit]
        np.add.at(inside, order[at[hit]], weights[hit])
    rest = totals - inside
    if (rest < 0).any():
        raise AssertionError("a pair counts more in the collected words than in all of them")
    kept = rest > 0
    return pairs[kept], rest[kept]


def partitions_for(size_bytes: int | None, cores: int) -> int:
    """Partitions for ``size_bytes`` of data on ``cores`` cores: every core busy once each gets
    :data:`MIN_PARTITION_BYTES`, none over :data:`MAX_PARTITION_BYTES`; of unknown size, two per
    core (as many tasks as keep the cores busy, whatever the size).

    >>> partitions_for(1_100_000, 2), partitions_for(100_000, 64), partitions_for(10**12, 64)
    (2, 1, 7451)
    >>> partitions_for(None, 8)
    16
    """
    cores = max(1, cores)
    if size_bytes is None:
        return 2 * cores
    by_cores = min(cores, -(-size_bytes // MIN_PARTITION_BYTES))
    return max(1, by_cores, -(-size_bytes // MAX_PARTITION_BYTES))


def words_bytes(distinct: int, pretoken_bytes: int) -> int:
    """The size of the rounds' words table at the start (one symbol per byte at most).

    >>> words_bytes(100, 800)
    5200
    """
    return distinct * WORD_ROW_BYTES + pretoken_bytes * SYMBOL_BYTES
