"""The driver's side of exact training rounds: the frequent pretokens' engine kept from round to
round, the speculated merges it sends out, and the replay that keeps only the merges the
executors' exact counts prove. Pure Python and numpy over :class:`~bpe_spark.training.engine.MergeEngine`;
no Spark (the jobs are :mod:`bpe_spark.spark.training.rounds`).

The pretokens are split by count once: the frequent ones (``F``, at most half the driver
budget) live in the driver's engine ``X`` for the whole training; every other one (``R``, the
rare) lives on the executors. ``X`` also holds, as counts without words (``adjust``), what the
*tracked* pairs count in ``R``. A round:

1. *Speculation* (:meth:`RoundDriver.speculate`): a copy of ``X`` runs ahead, greedily, and
   guesses what each merge does to the counts in ``R`` from what the same merge (by its tokens'
   values) did in the last round's speculation. The guess only decides which merges are tried.
2. The executors apply the speculated merges, in order, to the ``R`` words and send back the
   exact change of every pair count at every step (:func:`spec_deltas`, summed over all
   partitions).
3. *Replay* (:meth:`RoundDriver.replay`): ``X`` takes the speculated merges one by one while
   each is its own best pair, adding each step's exact changes to the tracked pairs. At the
   first step where another pair is best, that pair is the next merge (the counts are exact
   there), and it opens the next round's speculation.

Why ``X``'s best pair is the exact global best while it counts more than ``outside``:

- every pair's count in ``F`` is exact in ``X``, and so is every tracked pair's count in ``R``
  (shipped exact, then changed by exact deltas);
- a pair holding a token made since the last shipping started at zero, so its count in ``R``
  is the sum of its deltas: it is tracked from its first (a new pair's first change is a gain);
- every other pair counted in ``R`` counted at most ``outside`` in all when it was shipped
  (:meth:`RoundDriver.ship`: the shipping takes the untracked pairs counted in ``R`` by their
  global count, highest first), and a pair of two older tokens can only lose counts, unless a
  merge reuses an existing token's id: a gain of such a pair ends the round and asks for a
  shipping.

So while ``X``'s best count is above ``outside``, the best is exact, ties broken by ``X``'s
table as the driver would. When it is not, the next shipping lowers ``outside``; a shipping
also checks ``X``'s count of every pair it sends against Spark's (:class:`RoundMismatch`).

A length limit (``max_token_length``, :class:`~bpe_spark.training.length_limit.LengthLimit`)
hides the over-long pairs from ``X`` and its speculations alike (their engines never take one),
and the shippings leave them out, so ``outside`` bounds the untracked *visible* pairs. The proof
above holds over the visible pairs: a pair's visibility never changes (its ids' values do not),
so no pair becomes a candidate that was not bounded, and the best visible pair is the exact
best of "BPE where over-long pairs are invisible". An invisible pair of older tokens that gains
(a reused id) is no reason to ship: it can never be taken.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from bpe_spark.bpe.symbols import SymbolTable
from bpe_spark.training.engine import Merge, MergeEngine, PackedWords
from bpe_spark.training.length_limit import LengthLimit

# a pair as one int64 key, left << PAIR_SHIFT | right (ids are < 2**31: exact and positive); the
# rounds' Spark side keys its pairs the same way
PAIR_SHIFT = 32
# merges of a speculation applied between two takes of an executor's journal (spec_deltas)
SPEC_CHUNK = 1024
# the step of spec_deltas' last row, (MARK, completed, 1): how many steps its rows hold
MARK = -1
_LOW = (1 << PAIR_SHIFT) - 1
Triple = tuple[int, int, int]  # (left, right, new_id), as the executors apply merges


class RoundMismatch(AssertionError):
    """A shipped pair's count differs from the driver's: the rounds' bookkeeping is wrong."""


@dataclass
class StepDeltas:
    """The exact change of pair counts in ``R`` at each step of a speculation: rows sorted by
    step, ``pairs`` int64 keys; :meth:`at` gives one step's rows."""

    steps: np.ndarray
    pairs: np.ndarray
    deltas: np.ndarray
    _bounds: np.ndarray = field(init=False, repr=False)

    def __post_init__(self):
        order = np.lexsort((self.pairs, self.steps))
        self.steps, self.pairs, self.deltas = self.steps[order], self.pairs[order], self.deltas[order]
        if len(self.steps) > 1:  # rows of one step and pair from several partitions: summed
            first = np.concatenate(([True], (self.steps[1:] != self.steps[:-1]) | (self.pairs[1:] != self.pairs[:-1])))
            if not first.all():
                starts = np.flatnonzero(first)
                sums = np.add.reduceat(self.deltas, starts)
                kept = sums != 0
                self.steps, self.pairs, self.deltas = self.steps[starts][kept], self.pairs[starts][kept], sums[kept]
        self._bounds = np.searchsorted(self.steps, np.arange(int(self.steps[-1]) + 2 if len(self.steps) else 1))

    def at(self, step: int) -> tuple[np.ndarray, np.ndarray]:
        if step + 1 >= len(self._bounds):
            return self.pairs[:0], self.deltas[:0]
        lo, hi = self._bounds[step], self._bounds[step + 1]
        return self.pairs[lo:hi], self.deltas[lo:hi]

    def __len__(self) -> int:
        return len(self.pairs)


def spec_deltas(table: SymbolTable, values: np.ndarray, offsets: np.ndarray, counts: np.ndarray,
                spec: list[Triple], max_rows: int | None = None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The executors' side: packed words (``values``/``offsets``, counted ``counts``) after each
    merge of ``spec`` in order, as ``(step, pair, delta)`` rows, one per step and pair it
    changed (the engine's journal sums them; zeros left out), steps in order, then the row
    ``(MARK, completed, 1)``: the rows hold every change of the first ``completed`` steps. That
    is all of ``spec``, or with ``max_rows`` the steps before the one that would pass it (the
    first step is always whole). ``table`` holds every token of ``spec`` (only the engine's keys
    need it). The merges are applied :data:`SPEC_CHUNK` at a time, each chunk's journal taken then."""
    parts: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []
    completed, held = len(spec), 0
    if len(counts) and spec:
        engine = MergeEngine(table, PackedWords(values, offsets), counts)
        engine.core.index_all()
        engine.core.set_journal(True)
        for first in range(0, len(spec), SPEC_CHUNK):
            chunk = spec[first:first + SPEC_CHUNK]
            engine.core.apply_all(chunk)
            rows = engine.core.take_journal()
            # the merged pair takes all its count (in a run of one symbol it also loses a neighbour)
            merged = np.array([(left << PAIR_SHIFT) | right for left, right, _ in chunk], dtype=np.int64)
            pair = (rows[:, 1] << PAIR_SHIFT) | rows[:, 2]
            other = pair != merged[rows[:, 0]]
            step, pair, delta = rows[other, 0] + first, pair[other], rows[other, 3]
            if max_rows is not None and held + len(step) > max_rows:
                completed = max(1, int(step[max(0, max_rows - held)]))
                kept = step < completed
                parts.append((step[kept], pair[kept], delta[kept]))
                break
            parts.append((step, pair, delta))
            held += len(step)
    parts.append((np.array([MARK]), np.array([completed]), np.array([1])))
    return tuple(np.concatenate([part[i] for part in parts]).astype(np.int64, copy=False) for i in range(3))


def gathered(steps: np.ndarray, pairs: np.ndarray, deltas: np.ndarray, speculated: int) -> tuple[int, StepDeltas]:
    """The rows of every partition's :func:`spec_deltas` (their ``MARK`` rows among them, summed
    or not): the first steps of a speculation of ``speculated`` that every partition completed,
    and their changes."""
    marks = steps == MARK
    completed = min(speculated, int(pairs[marks].min())) if marks.any() else speculated
    kept = ~marks & (steps < completed)
    return completed, StepDeltas(steps[kept], pairs[kept], deltas[kept])


@dataclass
class Replay:
    """What a replay accepted and why it stopped: ``"diverged"`` (another pair was best: it
    opens the next speculation), ``"held"`` (every speculated merge held), ``"ship"`` (the
    best count is not above ``outside``, or a reused id made a pair's count unsure), ``"done"``
    (no pair reaches ``min_frequency``, or the budgets are spent)."""

    merges: list[Merge]
    status: str


class Estimate:
    """A round's speculated merges and their exact changes in ``R``, as guesses for the next
    round's speculation: a merge of the same two tokens (by value) is guessed to change the
    same pairs (by value) by the same amounts. Ids are the last speculation's; :meth:`start`
    maps them into a new speculation's table as its tokens are made."""

    def __init__(self, spec: list[Triple], table: SymbolTable, first_new: int, deltas: StepDeltas):
        value = table.value
        self.steps = {(value(left), value(right)): step for step, (left, right, _) in enumerate(spec)}
        self.deltas = deltas
        self.size = table.first_id + len(table)
        # the tokens the last speculation made (its ids from first_new on), by value
        self.new_values = {value(i): i for i in range(max(first_new, table.first_id), self.size)}
        self._table: SymbolTable | None = None
        self._ids = np.zeros(0, dtype=np.int64)

    def start(self, table: SymbolTable) -> Estimate:
        """Map the ids into ``table`` (a new speculation's, at its start)."""
        self._table = table
        self._ids = np.arange(self.size, dtype=np.int64)
        index = table.index
        for token_value, old in self.new_values.items():
            self._ids[old] = index.get(token_value, -1)
        return self

    def made(self, merge: Merge) -> None:
        """The speculation made ``merge``'s token: its id maps the last speculation's."""
        old = self.new_values.get(self._table.value(merge.new_id))
        if old is not None:
            self._ids[old] = merge.new_id

    def of(self, merge: Merge) -> tuple[np.ndarray, np.ndarray]:
        """The guessed changes of ``merge``, as pair keys in the new ids and deltas."""
        value = self._table.value
        step = self.steps.get((value(merge.left), value(merge.right)))
        if step is None:
            return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
        pairs, changes = self.deltas.at(step)
        lefts, rights = self._ids[pairs >> PAIR_SHIFT], self._ids[pairs & _LOW]
        keys = (lefts << PAIR_SHIFT) | rights
        kept = (lefts >= 0) & (rights >= 0) & (keys != ((merge.left << PAIR_SHIFT) | merge.right))
        return keys[kept], changes[kept]


class RoundDriver:
    """``X``: the frequent pretokens' engine and the tracked pairs' counts in ``R``, across rounds."""

    def __init__(self, table: SymbolTable, words, counts, *, max_new_tokens: int,
                 max_merges: int | None, min_frequency: int, limit: LengthLimit | None = None):
        self.table = table
        self.limit = limit  # max_token_length: the pairs over it are never taken (module docstring)
        self.counts = np.asarray(counts, dtype=np.int64)
        self.engine = MergeEngine(table, words, self.counts, limit=limit)
        self.tracked: dict[int, int] = {}  # pair key -> its count in R
        self.outside: int | None = None  # None: nothing shipped yet
        self.born = table.first_id + len(table)  # ids from here were made since the last shipping
        self.forced: tuple[int, int] | None = None  # the best pair found by the last replay
        self.estimate: Estimate | None = None  # the last round's exact changes, for the guesses
        self.spec_start = self.born
        self.created = 0
        self.taken = 0
        self.max_new_tokens = max_new_tokens
        self.max_merges = max_merges
        self.lowest = max(min_frequency, 1)
        self.needs_ship = True

    # -- budgets ---------------------------------------------------------------------------------
    def _room(self, created: int, taken: int) -> bool:
        return created < self.max_new_tokens and (self.max_merges is None or taken < self.max_merges)

    # -- shipping --------------------------------------------------------------------------------
    def ship(self, pairs: np.ndarray, totals: np.ndarray, rare: np.ndarray, outside: int) -> int:
        """Take the shipped pairs (untracked, counted in ``R``; ``totals`` their global counts,
        ``rare`` their counts in ``R``) and ``outside`` (the best global count of an untracked
        pair counted in ``R`` left out, 0 when none was). Returns the pairs now tracked."""
        engine = self.engine
        for key, total, count in zip(pairs.tolist(), totals.tolist(), rare.tolist()):
            left, right = key >> PAIR_SHIFT, key & _LOW
            if key in self.tracked:
                raise RoundMismatch(f"pair ({left}, {right}) was shipped while tracked")
            engine.core.adjust(left, right, count)
            self.tracked[key] = count
            if engine.core.pair_count(left, right) != total:
                raise RoundMismatch(f"pair ({left}, {right}): the driver counts {engine.core.pair_count(left, right)}, "
                                    f"the executors {total}")
        self.outside = int(outside)
        self.born = self.table.first_id + len(self.table)
        self.needs_ship = False
        return len(self.tracked)

    def tracked_keys(self) -> np.ndarray:
        return np.fromiter(self.tracked, dtype=np.int64, count=len(self.tracked))

    # -- speculation -----------------------------------------------------------------------------
    def _best(self, engine: MergeEngine):
        """The engine's best pair and count, or the reason to stop (``"ship"`` or ``"done"``)."""
        top = engine.best()
        outside = self.outside or 0
        if top is None:
            return "ship" if outside else "done"
        count = top[1]
        if count <= outside:
            return "done" if outside < self.lowest else "ship"
        if count < self.lowest:
            return "done"
        return top

    def speculate(self, limit: int) -> tuple[list[Triple], SymbolTable, str]:
        """Up to ``limit`` merges a copy of ``X`` takes greedily, starting with the pair the last
        replay found best; the table they were made in (the executors need its new tokens), and
        why it stopped: ``"limit"``, ``"budget"``, or as :meth:`replay` says ``"ship"``/``"done"``.
        The copy is lenient (a guess may take more than a pair counts): its counts are guesses."""
        table = self.table.copy()
        self.spec_start = table.first_id + len(table)  # the speculation's own ids start here
        data, offsets = self.engine.core.packed()
        spec_engine = MergeEngine(table, PackedWords(data, offsets), self.counts, limit=self.limit)
        del data, offsets
        spec_engine.core.set_lenient(True)
        spec_engine.core.adjust_many(self.tracked_keys(), np.fromiter(self.tracked.values(), np.int64, len(self.tracked)))
        guesses = self.estimate.start(table) if self.estimate is not None else None
        spec: list[Triple] = []
        created, taken = self.created, self.taken
        stop = "limit"
        while len(spec) < limit:
            if not self._room(created, taken):
                stop = "budget"
                break
            if self.forced is not None and not spec:
                pair = self.forced
                count = spec_engine.core.pair_count(*pair)
            else:
                top = self._best(spec_engine)
                if isinstance(top, str):
                    stop = top
                    break
                pair, count = top
            merge, is_new = spec_engine.merge(pair[0], pair[1], count)
            spec.append((merge.left, merge.right, merge.new_id))
            created += is_new
            taken += 1
            if guesses is not None:
                guesses.made(merge)
                pairs, changes = guesses.of(merge)
                if len(pairs):
                    spec_engine.core.adjust_many(pairs, changes)
        return spec, table, stop

    def learn(self, spec: list[Triple], table: SymbolTable, deltas: StepDeltas) -> None:
        """Keep the speculated merges' exact changes in ``R`` for the next round's guesses."""
        self.estimate = Estimate(spec, table, self.spec_start, deltas)

    # -- replay ----------------------------------------------------------------------------------
    def replay(self, spec: list[Triple], deltas: StepDeltas,
               progress: Callable[[int, Merge], None] | None = None) -> Replay:
        """``X`` takes the speculated merges while each is its best pair (module docstring)."""
        engine, tracked = self.engine, self.tracked
        merges: list[Merge] = []
        self.forced = None
        for step, (left, right, new_id) in enumerate(spec):
            if not self._room(self.created, self.taken):
                return Replay(merges, "done")
            top = self._best(engine)
            if isinstance(top, str):
                self.needs_ship = top == "ship"
                return Replay(merges, top)
            pair, count = top
            if pair != (left, right):
                self.forced = pair
                return Replay(merges, "diverged")
            merge, is_new = engine.merge(left, right, count)
            if merge.new_id != new_id:
                raise RoundMismatch(f"merge {merge} took id {merge.new_id}; the speculation gave {new_id}")
            merges.append(merge)
            self.created += is_new
            self.taken += 1
            if progress is not None:
                progress(len(merges), merge)
            tracked.pop((left << PAIR_SHIFT) | right, None)
            if not self._take_deltas(*deltas.at(step)):
                self.needs_ship = True
                return Replay(merges, "ship")
        return Replay(merges, "held")

    def _take_deltas(self, pairs: np.ndarray, changes: np.ndarray) -> bool:
        """Add one step's exact changes to the tracked pairs; False when a pair of older tokens
        gained (a reused id): its count is no longer known."""
        engine, tracked, born, limit = self.engine, self.tracked, self.born, self.limit
        sure = True
        for key, change in zip(pairs.tolist(), changes.tolist()):
            left, right = key >> PAIR_SHIFT, key & _LOW
            count = tracked.get(key)
            if count is not None:
                count += change
                if count < 0:
                    raise RoundMismatch(f"pair ({left}, {right}) lost more in R than it counted there")
                engine.core.adjust(left, right, change)
                if count:
                    tracked[key] = count
                else:
                    del tracked[key]
            elif left >= born or right >= born:
                if change < 0:
                    raise RoundMismatch(f"pair ({left}, {right}) of a new token lost counts it never had")
                tracked[key] = change
                engine.core.adjust(left, right, change)
            elif change > 0 and (limit is None or limit.visible(self.table, left, right)):
                sure = False  # an older pair untracked in R gained (a reused id)
        return sure
