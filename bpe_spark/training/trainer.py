"""The exact BPE merge engine and the in-process training entry points.

The engine follows ``tokenizers``' BpeTrainer: pair counts, an index from each pair to the
pretokens (words) holding it, and a lazily updated heap, so each merge touches only the words
that contain its pair. Ties are broken by the :class:`~bpe_spark.bpe.symbols.SymbolTable` keys.

>>> from bpe_spark.bpe.config import TrainerConfig
>>> tok = train_from_counts({"low": 5, "lower": 2}, TrainerConfig(vocab_size=258, pattern="whitespace"))
>>> tok.merges
[(b'l', b'o'), (b'lo', b'w')]
"""

from __future__ import annotations

import heapq
import os
import time
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from itertools import pairwise
from typing import NamedTuple

import numpy as np

from bpe_spark.native.compiled import _fastbpe  # the optional compiled core (None when not built)
from bpe_spark.bpe.config import TrainerConfig
from bpe_spark.errors import ConfigError, EmptyCorpusError
from bpe_spark.bpe.pretokenize import Pretokenizer
from bpe_spark.bpe.symbols import SymbolTable, utf8_bytes
from bpe_spark.bpe.words import word_symbols


class Merge(NamedTuple):
    """One learned merge: ``left`` + ``right`` -> ``new_id``, taken when the pair occurred ``count`` times."""

    left: int
    right: int
    new_id: int
    count: int


# --- the merge engine -------------------------------------------------------------------------

# BPE_SPARK_ENGINE=python forces the pure-Python core (the reference); "compiled" requires the
# extension; the default "auto" uses the extension when it was built.
ENGINE_BACKENDS = ("auto", "compiled", "python")


def compiled_core_available() -> bool:
    """True when the optional C extension ``bpe_spark.native._fastbpe`` is importable."""
    return _fastbpe is not None


def _resolve_backend(backend: str | None) -> str:
    backend = backend or os.environ.get("BPE_SPARK_ENGINE", "auto") or "auto"
    if backend not in ENGINE_BACKENDS:
        raise ConfigError(f"engine backend must be one of {ENGINE_BACKENDS}, got {backend!r}")
    if backend == "compiled" and _fastbpe is None:
        raise ConfigError(
            "the compiled merge engine (bpe_spark.native._fastbpe) is not built; reinstall with a C compiler "
            "and Python headers (pip install -e .), or use backend='python'"
        )
    if backend == "auto":
        return "compiled" if _fastbpe is not None else "python"
    return backend


class PackedWords:
    """Words packed as Arrow lays out a binary or a ``list<int32>`` column: word ``i`` is
    ``data[offsets[i]:offsets[i + 1]]``. ``data``: the UTF-8 bytes of byte-scheme pretokens (a
    bytes-like buffer) or symbol ids (an int32 buffer, e.g. a numpy array); ``offsets``: an
    int32 or int64 buffer of n + 1 entries, counted in items. The compiled engine reads the
    buffers directly: no Python object per word on the driver.

    >>> words = PackedWords(b"abcab", [0, 3, 5])
    >>> len(words), list(words)
    (2, [b'abc', b'ab'])
    """

    def __init__(self, data, offsets):
        self.data = data
        self.offsets = offsets

    def __len__(self) -> int:
        return len(self.offsets) - 1

    def __iter__(self):
        view = memoryview(self.data)
        ids = view.itemsize != 1
        for lo, hi in pairwise(self.offsets):
            piece = view[int(lo):int(hi)]
            yield piece.tolist() if ids else bytes(piece)


class _PythonCore:
    """The reference core: pair counts, pair -> holder words, and a lazily updated heap.

    A merge visits only the words listed for its pair and, inside each, changes only the
    counts of the pairs around each merge position (delta updates), as ``tokenizers`` does.
    The holder lists may hold words that lost the pair since (checked on use).
    """

    def __init__(self, table: SymbolTable, words: list[list[int]], counts: list[int]):
        self.table = table
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
            if count > 0
        ]
        heapq.heapify(self.heap)

    def best(self) -> tuple[int, int, int] | None:
        heap, pair_counts = self.heap, self.pair_counts
        while heap:
            neg_count, key_left, key_right, pair = heap[0]
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

    def adjust_many(self, pairs: np.ndarray, deltas: np.ndarray) -> None:
        for key, delta in zip(pairs.tolist(), deltas.tolist()):
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

    def apply_all(self, merges: np.ndarray) -> None:
        for step, (left, right, new_id) in enumerate(merges.tolist()):
            self.journal_step = step
            self.apply(left, right, new_id)
        self.journal_step = 0

    def packed(self) -> tuple[np.ndarray, np.ndarray]:
        lengths = np.array([len(word) for word in self.words], dtype=np.int64)
        offsets = np.concatenate(([0], np.cumsum(lengths))).astype(np.int64)
        data = np.fromiter((s for word in self.words for s in word), dtype=np.int32, count=int(offsets[-1]))
        return data, offsets


class _CompiledCore:
    """The same core in C (``bpe_spark.native._fastbpe``): flat arrays, in-place merges, int pair keys."""

    def __init__(self, table: SymbolTable, words: list[list[int]], counts: list[int]):
        self.table = table
        self.lexicographic = table.tie_break != "hf"
        keys = [self._key(value, key) for value, key in zip(table.values, table.keys)]
        if isinstance(words, PackedWords):
            words = (words.data, words.offsets)
        self.engine = _fastbpe.Engine(words, counts, keys, table.first_id, self.lexicographic)
        self.known = len(keys)  # ids whose keys the C side holds

    def _key(self, value, key):
        # hf: the integer position; lexicographic: the token's UTF-8 bytes (their order is
        # code-point order for str tokens), compared greatest first in C.
        if not self.lexicographic:
            return key
        return utf8_bytes(value)

    def best(self) -> tuple[int, int, int] | None:
        return self.engine.best()

    def apply(self, left: int, right: int, new_id: int) -> None:
        table = self.table
        if len(table) > self.known:
            # this merge's new token (or tokens another engine on the same table added)
            start = self.known
            self.engine.extend(
                [self._key(v, k) for v, k in zip(table.values[start:], table.keys[start:])]
            )
            self.known = len(table)
        self.engine.apply(left, right, new_id)

    def current_words(self) -> list[list[int]]:
        return self.engine.words()

    def pair_count(self, left: int, right: int) -> int:
        return self.engine.pair_count(left, right)

    def adjust(self, left: int, right: int, delta: int) -> None:
        self.engine.adjust(left, right, delta)

    def set_journal(self, on: bool) -> None:
        self.engine.journal(on)

    def adjust_many(self, pairs: np.ndarray, deltas: np.ndarray) -> None:
        self.engine.adjust_many(pairs, deltas)

    def set_lenient(self, on: bool) -> None:
        self.engine.lenient(on)

    def index_all(self) -> None:
        self.engine.index_all()

    def take_journal(self) -> np.ndarray:
        return np.frombuffer(self.engine.take_journal(), dtype=np.int64).reshape(-1, 4)

    def apply_all(self, merges: np.ndarray) -> None:
        table = self.table
        if len(table) > self.known:
            self.engine.extend([self._key(v, k) for v, k in zip(table.values[self.known:], table.keys[self.known:])])
            self.known = len(table)
        self.engine.apply_all(merges)

    def packed(self) -> tuple[np.ndarray, np.ndarray]:
        data, offsets = self.engine.packed()
        return np.frombuffer(data, dtype=np.int32), np.frombuffer(offsets, dtype=np.int64)


class MergeEngine:
    """Incremental exact BPE over words (symbol-id lists) with their counts.

    ``run`` may be called repeatedly; the state carries over, so a caller can advance in steps
    (the distributed rounds stop at a floor count and go on later with fresh words).

    ``backend``: "auto" (the compiled core when built, else pure Python), "compiled" or
    "python"; the environment variable ``BPE_SPARK_ENGINE`` sets the default. Both cores give
    the same merges (tests/test_engine_equivalence.py).

    ``words`` are lists of symbol ids; in the byte scheme a word may also be its UTF-8
    ``bytes``, which the compiled core reads directly (no list of ints per pretoken on the
    driver). The compiled core copies the words; the Python core merges them in place.
    """

    def __init__(
        self,
        table: SymbolTable,
        words: list[list[int]],
        counts: list[int],
        *,
        backend: str | None = None,
    ):
        if len(words) != len(counts):
            raise ValueError("words and counts differ in length")
        self.table = table
        self.counts = counts
        self.backend = _resolve_backend(backend)
        core = None
        if self.backend == "compiled":
            try:
                core = _CompiledCore(table, words, counts)
            except OverflowError:
                # subtle: counts beyond 64 bits (or ids beyond 32) only fit the Python core
                if backend == "compiled":
                    raise
                self.backend = "python"
        self._core = core if core is not None else _PythonCore(table, words, counts)

    @property
    def words(self) -> list[list[int]]:
        """Every word's current symbol ids (after the merges taken so far)."""
        return self._core.current_words()

    def best(self) -> tuple[tuple[int, int], int] | None:
        """The pair the next merge would take and its count, or None when no pair is left."""
        top = self._core.best()
        if top is None:
            return None
        left, right, count = top
        return (left, right), count

    def pair_count(self, left: int, right: int) -> int:
        """The current count of the pair ``(left, right)`` in the engine's words (0 when absent)."""
        return self._core.pair_count(left, right)

    def apply_all(self, merges) -> None:
        """Replay merges chosen elsewhere, ``(left, right, new_id)`` rows in order (their tokens
        in the table already); the journal names each change's row."""
        self._core.apply_all(np.ascontiguousarray(np.asarray(merges, dtype=np.int32).reshape(-1, 3)))

    def adjust(self, left: int, right: int, delta: int) -> None:
        """Add ``delta`` to the pair's count without a word holding it: a count kept for words
        the engine does not hold (the rounds' pretokens on the executors). It must stay >= 0."""
        self._core.adjust(left, right, delta)

    def adjust_many(self, pairs, deltas) -> None:
        """:meth:`adjust` for each pair key (``left << 32 | right``) and delta, int64 arrays."""
        self._core.adjust_many(np.ascontiguousarray(pairs, dtype=np.int64), np.ascontiguousarray(deltas, dtype=np.int64))

    def lenient(self, on: bool) -> None:
        """Let a count that :meth:`adjust` or a merge would take below one stop at one (an engine
        of guesses, whose counts need not add up), instead of failing."""
        self._core.set_lenient(on)

    def journal(self, on: bool) -> None:
        """Record (``on``) or stop recording every change a merge makes to a pair count."""
        self._core.set_journal(on)

    def index_all(self) -> None:
        """List every pair's holders: an engine that only replays merges (:meth:`apply`, never
        :meth:`best`) would otherwise scan every word for each pair it has not listed yet."""
        self._core.index_all()

    def take_journal(self) -> np.ndarray:
        """The changes recorded since the last call, ``(step, left, right, delta)`` rows (int64;
        ``step``: the merge's row in :meth:`apply_all`, 0 for a merge on its own), one per
        merge and pair it changed (summed, zeros left out); the journal is emptied. Rows for
        the merged pair (a run of one symbol, ``(a, a)``) are beside the point: a merge takes
        all of that pair's count."""
        return self._core.take_journal()

    def packed(self) -> tuple[np.ndarray, np.ndarray]:
        """Every word's current symbols as packed words: int32 ids and int64 offsets."""
        return self._core.packed()

    def merge(self, left: int, right: int, count: int) -> tuple[Merge, bool]:
        """Merge ``(left, right)`` (counted ``count``) now; returns the merge and whether its
        token is new (else its id was reused). ``run`` takes the best pair this way."""
        table = self.table
        new_id, is_new = table.add(table.value(left) + table.value(right))
        self._core.apply(left, right, new_id)
        return Merge(left, right, new_id, count), is_new

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
        core = self._core
        lowest = max(min_frequency, 1)
        while created < max_new_tokens and (max_merges is None or len(merges) < max_merges):
            top = core.best()
            if top is None:
                break
            left, right, count = top
            if count < lowest or (floor is not None and count <= floor):
                break
            merge, is_new = self.merge(left, right, count)
            created += is_new
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
    check_vocab_floor(cfg, table)
    words = [word_symbols(pretoken, table, cfg) for pretoken, _ in items]
    return MergeEngine(table, words, [count for _, count in items])


def check_vocab_floor(cfg: TrainerConfig, table: SymbolTable) -> None:
    """Refuse a ``vocab_size`` below the initial alphabet plus the special tokens."""
    floor = len(cfg.special_tokens) + len(table)
    if cfg.vocab_size < floor:
        raise ConfigError(
            f"vocab_size {cfg.vocab_size} is below the initial alphabet ({len(table)} symbols) + "
            f"{len(cfg.special_tokens)} special tokens = {floor}; set vocab_size >= {floor}"
        )


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
    from bpe_spark.encoding.tokenizer import Tokenizer

    started = time.perf_counter()
    engine = build_engine(counts, cfg)
    merges = engine.run(
        max_new_tokens=new_token_budget(cfg, engine.table),
        max_merges=cfg.max_merges,
        min_frequency=cfg.min_frequency,
        progress=progress,
    )
    stats = {
        "distinct_pretokens": len(engine.counts),
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
    pretokenizer = Pretokenizer.from_config(cfg)
    counts = pretokenizer.count(texts)
    count_seconds = time.perf_counter() - started
    tok = train_from_counts(counts, cfg, **kwargs)
    stats = tok.metadata.setdefault("stats", {})
    stats["count_seconds"] = round(count_seconds, 6)
    if pretokenizer.dropped_characters:  # only a custom pattern leaves text unmatched
        stats["dropped_characters"] = pretokenizer.dropped_characters
    return tok
