"""The merges one exact training round proves, past the pairs that live only in the collected
pretokens: the driver's loop over the engine, with the bounds that say how far each merge of a
pair also counted outside can have moved the counts there.

Pure Python over a :class:`~bpe_spark.trainer.MergeEngine` holding the collected pretokens and,
as two-symbol words, what each broadcast pair counts outside them; no Spark. Why each merge it
takes is the one the core engine would take on all the pretokens is written once, in
:mod:`bpe_spark.spark.rounds` (steps 4 and 5); a pair is ``left << 32 | right`` in the arrays.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Iterator, Mapping

import numpy as np

from bpe_spark.trainer import Merge, MergeEngine

# a pair as one int64 key, left << PAIR_SHIFT | right (ids are < 2**31: exact and positive); the
# rounds' Spark side keys its pairs the same way
PAIR_SHIFT = 32
_LOW = (1 << PAIR_SHIFT) - 1


class StartCounts:
    """The broadcast pairs' global counts at the round's start, looked up by left or by right
    token, highest count first.

    >>> start = StartCounts(np.array([1 << 32 | 2, 1 << 32 | 3, 4 << 32 | 2]), np.array([5, 9, 7]))
    >>> list(start.after(1, 6)), list(start.before(2, 0))
    ([(3, 9)], [(4, 7), (1, 5)])
    """

    def __init__(self, pairs: np.ndarray, totals: np.ndarray):
        self._pairs = np.asarray(pairs, dtype=np.int64)
        self._totals = np.asarray(totals, dtype=np.int64)
        self._index: dict[str, tuple[np.ndarray, np.ndarray, np.ndarray]] = {}

    def _side(self, side: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        if side not in self._index:  # built on first use: most rounds never need it
            lefts, rights = self._pairs >> PAIR_SHIFT, self._pairs & _LOW
            key, other = (lefts, rights) if side == "left" else (rights, lefts)
            order = np.lexsort((-self._totals, key))
            self._index[side] = (key[order], other[order], self._totals[order])
        return self._index[side]

    def _lookup(self, side: str, token: int, at_least: int) -> Iterator[tuple[int, int]]:
        keys, others, totals = self._side(side)
        lo, hi = np.searchsorted(keys, token, "left"), np.searchsorted(keys, token, "right")
        for i in range(lo, hi):
            if totals[i] < at_least:
                return
            yield int(others[i]), int(totals[i])

    def after(self, left: int, at_least: int) -> Iterator[tuple[int, int]]:
        """``(right, count)`` of the pairs ``(left, right)`` counted >= ``at_least``."""
        return self._lookup("left", left, at_least)

    def before(self, right: int, at_least: int) -> Iterator[tuple[int, int]]:
        """``(left, count)`` of the pairs ``(left, right)`` counted >= ``at_least``."""
        return self._lookup("right", right, at_least)


class _Moved:
    """What the round's merges of shared pairs (pairs also counted outside) may have changed
    outside: the tokens whose pairs there may have lost counts (each such merge's left and
    right), the tokens they made with the most each adds to a pair there (``gain``), and, for
    every token the round made, its first and last token at the round's start."""

    def __init__(self):
        self.lefts: set[int] = set()
        self.rights: set[int] = set()
        self.gain: dict[int, int] = {}
        self.first: dict[int, int] = {}
        self.last: dict[int, int] = {}
        self.starting: dict[int, list[int]] = defaultdict(list)  # start token -> made tokens starting with it
        self.ending: dict[int, list[int]] = defaultdict(list)

    def made(self, merge: Merge) -> None:
        new_id = merge.new_id
        self.first[new_id] = self.first.get(merge.left, merge.left)
        self.last[new_id] = self.last.get(merge.right, merge.right)
        self.starting[self.first[new_id]].append(new_id)
        self.ending[self.last[new_id]].append(new_id)

    def shared(self, merge: Merge, outside_count: int) -> None:
        self.lefts.add(merge.left)
        self.rights.add(merge.right)
        self.gain[merge.new_id] = outside_count

    def exact(self, left: int, right: int) -> bool:
        """Whether the pair's count outside is still its count at the start."""
        return not (right in self.lefts or left in self.rights or left in self.gain or right in self.gain)

    def may_reach(self, engine: MergeEngine, start: StartCounts, count: int) -> bool:
        """Whether a pair holding a token made by a shared merge may count >= ``count``: each
        is bounded by its count in the engine plus its tokens' gains, and by the start count
        of the pair its tokens' last and first start tokens formed."""
        gain = self.gain
        for token, own in gain.items():
            for first, bound in start.after(self.last[token], count):
                for right in (first, *self.starting.get(first, ())):
                    if min(bound, engine.pair_count(token, right) + own + gain.get(right, 0)) >= count:
                        return True
            for last, bound in start.before(self.first[token], count):
                for left in (last, *self.ending.get(last, ())):
                    if min(bound, engine.pair_count(left, token) + own + gain.get(left, 0)) >= count:
                        return True
        return False


def prove_round(
    engine: MergeEngine,
    *,
    start: StartCounts,
    outside_counts: Mapping[tuple[int, int], int],
    outside: int,
    max_new_tokens: int,
    max_merges: int | None = None,
    min_frequency: int = 0,
    progress: Callable[[int, Merge], None] | None = None,
) -> tuple[list[Merge], bool]:
    """The merges the round proves, and whether it stopped at the exact global best (so a best
    below ``min_frequency`` ends training). ``outside_counts``: each broadcast pair's count
    outside the collected words (those above 0, which the engine holds as two-symbol words);
    ``outside``: the best count of a pair not broadcast (0: every pair was)."""
    moved = _Moved()
    merges: list[Merge] = []
    created = 0
    lowest = max(min_frequency, 1)
    reused = False
    while created < max_new_tokens and (max_merges is None or len(merges) < max_merges):
        top = engine.best()
        if top is None:
            return merges, not moved.gain
        (left, right), count = top
        if count < lowest or count <= outside:
            return merges, not moved.gain
        if moved.gain and (not moved.exact(left, right) or moved.may_reach(engine, start, count)):
            return merges, False
        merge, is_new = engine.merge(left, right, count)
        merges.append(merge)
        created += is_new
        if progress is not None:
            progress(len(merges), merge)
        shared = outside_counts.get((left, right), 0)
        if not is_new:
            # a reused id: its pairs outside may grow, and its start tokens are not one pair
            if outside or moved.gain or shared:
                return merges, False
            reused = True
            continue
        moved.made(merge)
        if shared:
            if reused:
                return merges, False
            moved.shared(merge, shared)
    return merges, not moved.gain
