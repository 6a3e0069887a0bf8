"""The merge engine's core, the contract written once as :class:`Core`, and its two
implementations: :class:`PythonCore` (the reference: pair counts, pair -> holder words, a lazily
updated heap) and :class:`CompiledCore` (the same in C, ``bpe_spark.native._fastbpe``), which
give the same merges (tests/training/test_engine_equivalence.py). Either takes an optional
:class:`~bpe_spark.training.length_limit.LengthLimit`: the pairs over it are never the best.
"""

from __future__ import annotations

import heapq
from itertools import pairwise
from typing import Protocol

import numpy as np

from bpe_spark.bpe.symbols import SymbolTable, utf8_bytes
from bpe_spark.native.compiled import _fastbpe  # the optional compiled core (None when not built)
from bpe_spark.training.length_limit import LengthLimit


class Core(Protocol):
    """What the merge engine asks of a core: the words (symbol-id lists) with their counts, every
    pair's count, and the best pair, kept up to date merge by merge. :class:`PythonCore` is the
    reference; :class:`CompiledCore` does the same in C. Ids are those of the core's
    :class:`~bpe_spark.bpe.symbols.SymbolTable`, whose keys break ties."""

    def best(self) -> tuple[int, int, int] | None:
        """``(left, right, count)`` of the pair the next merge takes (the highest count, ties by
        the table's keys), or None when no pair is left; a pair over the core's length limit is
        never the best (its count is kept all the same)."""

    def apply(self, left: int, right: int, new_id: int) -> None:
        """Merge every non-overlapping ``(left, right)``, left to right, into ``new_id`` (already in
        the table) in every word holding it, updating the counts of the pairs around each."""

    def apply_all(self, merges) -> None:
        """:meth:`apply` each ``(left, right, new_id)`` row of ``merges`` in order (merges chosen
        elsewhere: their tokens are in the table); the journal names each change's row."""

    def current_words(self) -> list[list[int]]:
        """Every word's current symbol ids, after the merges applied so far."""

    def pair_count(self, left: int, right: int) -> int:
        """The current count of the pair ``(left, right)`` (0 when absent)."""

    def adjust(self, left: int, right: int, delta: int) -> None:
        """Add ``delta`` to the pair's count without a word holding it: a count kept for words the
        core does not hold (the rounds' pretokens on the executors). It must stay >= 0."""

    def adjust_many(self, pairs, deltas) -> None:
        """:meth:`adjust` for each pair key (``left << 32 | right``) and delta (int64 arrays)."""

    def set_lenient(self, on: bool) -> None:
        """Let a count that :meth:`adjust` or a merge would take below one stop at one (a core of
        guesses, whose counts need not add up), instead of failing."""

    def set_journal(self, on: bool) -> None:
        """Record (``on``) or stop recording every change a merge makes to a pair count."""

    def take_journal(self) -> np.ndarray:
        """The changes recorded since the last call, ``(step, left, right, delta)`` rows (int64;
        ``step``: the merge's row in :meth:`apply_all`, 0 for a merge on its own), one per merge
        and pair it changed (summed, zeros left out); the journal is emptied. Rows for the merged
        pair itself (a run of one symbol, ``(a, a)``) are beside the point: a merge takes all of
        that pair's count."""

    def index_all(self) -> None:
        """List every pair's holders: a core that only replays merges (:meth:`apply`, never
        :meth:`best`) would otherwise scan every word for each pair it has not listed yet."""

    def packed(self) -> tuple[np.ndarray, np.ndarray]:
        """Every word's current symbols as packed words: int32 ids and int64 offsets."""


class PythonCore:
    """The reference :class:`Core`: pair counts, pair -> holder words, and a lazily updated heap.

    A merge visits only the words listed for its pair and, inside each, changes only the
    counts of the pairs around each merge position (delta updates), as ``tokenizers`` does.
    The holder lists may hold words that lost the pair since (checked on use).
    """

    def __init__(self, table: SymbolTable, words: list[list[int]], counts: list[int],
                 limit: LengthLimit | None = None):
        self.table = table
        self.limit = limit
        self.lengths: list[int] = []  # limit: each id's length, grown with the table (_visible)
        if not isinstance(words, list):
            words = list(words)
        if not isinstance(counts, list):
            counts = [int(c) for c in counts]  # numpy int64 would wrap around; Python ints do not
        for index, word in enumerate(words):
            if type(word) is not list:  # bytes (byte scheme), tuples...: merged in place as lists
                words[index] = list(word)
        self.words = words
        self.counts = counts
        pair_counts: dict[tuple[int, int], int] = {}
        holders_of: dict[tuple[int, int], list[int]] = {}
        get = pair_counts.get
        for index, word in enumerate(words):
            count = counts[index]
            if len(word) < 2 or not count:
                continue
            for pair in pairwise(word):
                pair_counts[pair] = get(pair, 0) + count
                holders = holders_of.get(pair)
                if holders is None:
                    holders_of[pair] = [index]
                elif holders[-1] != index:
                    holders.append(index)
        self.pair_counts = pair_counts
        self.holders_of = holders_of
        self.journal: list[tuple[int, int, int, int]] | None = None  # (step, left, right, delta) while on
        self.journal_step = 0
        self.lenient = False  # this core's merges never check counts; adjust() does unless lenient
        keys, first = table.keys, table.first_id
        self.heap = [
            (-count, keys[pair[0] - first], keys[pair[1] - first], pair)
            for pair, count in pair_counts.items()
            if count > 0 and self._visible(pair)
        ]
        heapq.heapify(self.heap)

    def _visible(self, pair: tuple[int, int]) -> bool:
        """Whether ``pair``'s merge stays within the length limit."""
        limit = self.limit
        if limit is None:
            return True
        lengths, table = self.lengths, self.table
        if len(lengths) < len(table):
            lengths += limit.lengths(table, len(lengths))
        first = table.first_id
        return lengths[pair[0] - first] + lengths[pair[1] - first] <= limit.max_length

    def best(self) -> tuple[int, int, int] | None:
        heap, pair_counts = self.heap, self.pair_counts
        limited = self.limit is not None
        while heap:
            neg_count, key_left, key_right, pair = heap[0]
            if limited and not self._visible(pair):
                heapq.heappop(heap)  # over the limit for good: an id's value never changes
                continue
            current = pair_counts.get(pair, 0)
            if current == -neg_count:
                return pair[0], pair[1], current
            heapq.heappop(heap)
            # subtle: a count that fell gets its entry back at the new count; a count that grew
            # (a merge reusing an existing token id) was pushed afresh when it grew.
            if 0 < current < -neg_count:
                heapq.heappush(heap, (-current, key_left, key_right, pair))
        return None

    def apply(self, left: int, right: int, new_id: int) -> None:
        words, counts = self.words, self.counts
        pair_counts, holders_of = self.pair_counts, self.holders_of
        get = pair_counts.get
        journal, step = self.journal, self.journal_step
        grown: dict[tuple[int, int], None] = {}
        for index in holders_of.pop((left, right), ()):
            word = words[index]
            remaining = word.count(left)  # the occurrences of left still to look at
            if not remaining:
                continue
            last = len(word) - 1
            count = counts[index]
            merged = None  # built on the first hit: word[:start] merged, word[start:] not yet copied
            start = 0
            formed = []
            i = -1
            while remaining:
                i = word.index(left, i + 1)
                remaining -= 1
                if i < last and word[i + 1] == right:
                    if merged is None:
                        merged = word[:i]
                    else:
                        merged += word[start:i]
                    if merged:
                        prev = merged[-1]  # subtle: already new_id when the previous hit was adjacent
                        pair_counts[(prev, left)] -= count
                        pair = (prev, new_id)
                        pair_counts[pair] = get(pair, 0) + count
                        formed.append(pair)
                        if journal is not None:
                            journal += ((step, prev, left, -count), (step, prev, new_id, count))
                    start = i + 2
                    if start <= last:
                        nxt = word[start]
                        pair_counts[(right, nxt)] -= count
                        pair = (new_id, nxt)
                        pair_counts[pair] = get(pair, 0) + count
                        formed.append(pair)
                        if journal is not None:
                            journal += ((step, right, nxt, -count), (step, new_id, nxt, count))
                    merged.append(new_id)
                    if left == right:
                        remaining -= 1  # the hit's right half was an occurrence of left too
                    i = start - 1
            if merged is None:
                continue  # a stale holder: the pair left this word earlier
            merged += word[start:]
            words[index] = merged
            for pair in formed:
                grown[pair] = None
                holders = holders_of.get(pair)
                if holders is None:
                    holders_of[pair] = [index]
                elif holders[-1] != index:
                    holders.append(index)
        pair_counts.pop((left, right), None)
        keys, first = self.table.keys, self.table.first_id
        heap = self.heap
        for pair in grown:
            count = pair_counts[pair]
            if count > 0:
                heapq.heappush(heap, (-count, keys[pair[0] - first], keys[pair[1] - first], pair))

    def current_words(self) -> list[list[int]]:
        return self.words

    def pair_count(self, left: int, right: int) -> int:
        return self.pair_counts.get((left, right), 0)

    def adjust(self, left: int, right: int, delta: int) -> None:
        pair = (left, right)
        count = self.pair_counts.get(pair, 0) + delta
        current = count - delta
        if count < (1 if self.lenient and current > 0 else 0):
            if not self.lenient:
                raise ValueError(f"adjust: the count of pair {pair} would fall below zero")
            count = 1 if current > 0 else 0
            delta = count - current
        if delta == 0:
            return
        self.pair_counts[pair] = count
        self.holders_of.setdefault(pair, [])
        if delta > 0:
            keys, first = self.table.keys, self.table.first_id
            heapq.heappush(self.heap, (-count, keys[left - first], keys[right - first], pair))

    def set_journal(self, on: bool) -> None:
        self.journal = [] if on else None

    def adjust_many(self, pairs, deltas) -> None:
        for key, delta in zip(np.asarray(pairs).tolist(), np.asarray(deltas).tolist()):
            self.adjust(key >> 32, key & 0xFFFFFFFF, delta)

    def set_lenient(self, on: bool) -> None:
        self.lenient = on

    def index_all(self) -> None:  # every pair's holders are listed already
        pass

    def take_journal(self) -> np.ndarray:
        sums: dict[tuple[int, int, int], int] = {}  # per merge and pair, in order of first change
        for step, left, right, delta in self.journal or ():
            sums[(step, left, right)] = sums.get((step, left, right), 0) + delta
        self.journal = None if self.journal is None else []
        return np.array([(*key, delta) for key, delta in sums.items() if delta], dtype=np.int64).reshape(-1, 4)

    def apply_all(self, merges) -> None:
        for step, (left, right, new_id) in enumerate(np.asarray(merges).reshape(-1, 3).tolist()):
            self.journal_step = step
            self.apply(left, right, new_id)
        self.journal_step = 0

    def packed(self) -> tuple[np.ndarray, np.ndarray]:
        lengths = np.array([len(word) for word in self.words], dtype=np.int64)
        offsets = np.concatenate(([0], np.cumsum(lengths))).astype(np.int64)
        data = np.fromiter((s for word in self.words for s in word), dtype=np.int32, count=int(offsets[-1]))
        return data, offsets


class CompiledCore:
    """The :class:`Core` in C (``bpe_spark.native._fastbpe``): flat arrays, in-place merges, int pair keys.
    ``words`` may also be packed, a ``(data, offsets)`` pair (:class:`~bpe_spark.training.engine.PackedWords`)."""

    def __init__(self, table: SymbolTable, words, counts: list[int], limit: LengthLimit | None = None):
        self.table = table
        self.limit = limit
        self.lexicographic = table.tie_break != "hf"
        keys = [self._key(value, key) for value, key in zip(table.values, table.keys)]
        self.engine = _fastbpe.Engine(words, counts, keys, table.first_id, self.lexicographic)
        self.known = len(keys)  # ids whose keys the C side holds
        if limit is not None:
            self.engine.limit(limit.max_length, limit.lengths(table))

    def _key(self, value, key):
        # hf: the integer position; lexicographic: the token's UTF-8 bytes (their order is
        # code-point order for str tokens), compared greatest first in C.
        if not self.lexicographic:
            return key
        return utf8_bytes(value)

    def best(self) -> tuple[int, int, int] | None:
        if self.limit is not None:
            self._extend_keys()  # the lengths of tokens another engine added to the table
        return self.engine.best()

    def _extend_keys(self) -> None:
        # the keys of tokens added to the table since (this merge's, or another engine's on the same table)
        table = self.table
        if len(table) > self.known:
            start = self.known
            self.engine.extend([self._key(v, k) for v, k in zip(table.values[start:], table.keys[start:])])
            if self.limit is not None:
                self.engine.limit(self.limit.max_length, self.limit.lengths(table, start))
            self.known = len(table)

    def plan(self, merges: int, lowest: int = 1) -> None:
        """About how many more merges the caller means to make, none of a pair counted below
        ``lowest``: the engine lists the holders of that many pairs at once when memory allows.
        A hint for speed only; the merges are the same whatever it says."""
        self.engine.plan(merges, lowest)

    def apply(self, left: int, right: int, new_id: int) -> None:
        self._extend_keys()
        self.engine.apply(left, right, new_id)

    def current_words(self) -> list[list[int]]:
        return self.engine.words()

    def pair_count(self, left: int, right: int) -> int:
        return self.engine.pair_count(left, right)

    def adjust(self, left: int, right: int, delta: int) -> None:
        self.engine.adjust(left, right, delta)

    def set_journal(self, on: bool) -> None:
        self.engine.journal(on)

    def adjust_many(self, pairs, deltas) -> None:
        self.engine.adjust_many(np.ascontiguousarray(pairs, dtype=np.int64), np.ascontiguousarray(deltas, dtype=np.int64))

    def set_lenient(self, on: bool) -> None:
        self.engine.lenient(on)

    def index_all(self) -> None:
        self.engine.index_all()

    def take_journal(self) -> np.ndarray:
        return np.frombuffer(self.engine.take_journal(), dtype=np.int64).reshape(-1, 4)

    def apply_all(self, merges) -> None:
        self._extend_keys()
        self.engine.apply_all(np.ascontiguousarray(np.asarray(merges, dtype=np.int32).reshape(-1, 3)))

    def packed(self) -> tuple[np.ndarray, np.ndarray]:
        data, offsets = self.engine.packed()
        return np.frombuffer(data, dtype=np.int32), np.frombuffer(offsets, dtype=np.int64)
