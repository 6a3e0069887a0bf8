"""The plan of the exact training rounds: which pretokens the driver keeps (the frequent ones)
and how many partitions the rounds' tables get.

Pure functions, no Spark: a histogram is a list of ``(value, n)`` levels, highest value first
(``n`` pretokens counted ``value`` times). How the rounds stay exact is written once, in
:mod:`bpe_spark.training.round_replay`.

>>> frequent_cut([(90, 1), (50, 2), (20, 40)], room=3)
50
"""

from __future__ import annotations

from collections.abc import Sequence

Levels = Sequence[tuple[int, int]]
# A partition of our own tables and aggregations holds at least MIN_PARTITION_BYTES before a
# second core gets one (a task costs some 10-50 ms whatever its size), and at most
# MAX_PARTITION_BYTES (Spark's file split size) however few the cores.
MIN_PARTITION_BYTES = 256 << 10
MAX_PARTITION_BYTES = 128 << 20
# words table bytes: wid and count (8 each) plus the list's offset per pretoken, 4 per symbol
WORD_ROW_BYTES = 20
SYMBOL_BYTES = 4


def frequent_cut(levels: Levels, room: int) -> int:
    """The lowest count whose pretokens (whole levels, counted at least it) are at most ``room``:
    the driver keeps those; one above the top count when even the top level is more (it keeps
    none).

    >>> frequent_cut([(9, 2), (7, 3), (4, 10)], room=5), frequent_cut([(9, 6)], room=5), frequent_cut([], room=5)
    (7, 10, 1)
    """
    kept, cut = 0, None
    for count, n in levels:
        if kept + n > room:
            break
        kept, cut = kept + n, count
    if cut is not None:
        return cut
    return levels[0][0] + 1 if levels else 1


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
