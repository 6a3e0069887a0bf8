"""The exact BPE merge engine: :class:`MergeEngine` takes the best pair, merge after merge, over a
:class:`~bpe_spark.training.core.Core` (pure Python or compiled, chosen by ``backend``), and
records each :class:`Merge`. The engine follows ``tokenizers``' BpeTrainer: pair counts, an index
from each pair to the words holding it, and a lazily updated heap, so each merge touches only the
words that contain its pair. Ties are broken by the :class:`~bpe_spark.bpe.symbols.SymbolTable` keys;
an optional :class:`~bpe_spark.training.length_limit.LengthLimit` hides the pairs whose token
would be too long (``TrainerConfig.max_token_length``).
:class:`PackedWords` hands the engine words as Arrow lays them out.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from itertools import pairwise
from typing import NamedTuple

from bpe_spark.bpe.symbols import SymbolTable
from bpe_spark.errors import ConfigError
from bpe_spark.native.compiled import _fastbpe  # the optional compiled core (None when not built)
from bpe_spark.training.core import CompiledCore, Core, PythonCore
from bpe_spark.training.length_limit import LengthLimit


class Merge(NamedTuple):
    """One learned merge: ``left`` + ``right`` -> ``new_id``, taken when the pair occurred ``count`` times."""

    left: int
    right: int
    new_id: int
    count: int


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


class MergeEngine:
    """Incremental exact BPE over words (symbol-id lists) with their counts.

    ``run`` may be called repeatedly; the state carries over, so a caller can advance in steps
    (the distributed rounds stop at a floor count and go on later with fresh words).

    ``backend``: "auto" (the compiled core when built, else pure Python), "compiled" or
    "python"; the environment variable ``BPE_SPARK_ENGINE`` sets the default. Both cores give
    the same merges (tests/training/test_engine_equivalence.py). What else a core does (replaying merges,
    counts kept for words it does not hold, the journal) is asked of :attr:`core` directly: the
    :class:`~bpe_spark.training.core.Core` contract.

    ``words`` are lists of symbol ids; in the byte scheme a word may also be its UTF-8
    ``bytes``, which the compiled core reads directly (no list of ints per pretoken on the
    driver), as it reads :class:`PackedWords`. The compiled core copies the words; the Python
    core merges them in place. ``core.current_words()`` gives them after the merges so far.

    ``limit``: a :class:`~bpe_spark.training.length_limit.LengthLimit` (``LengthLimit.of(cfg)``),
    or None; :meth:`best` and :meth:`run` never take a pair whose token would pass it.
    """

    def __init__(
        self,
        table: SymbolTable,
        words: list[list[int]],
        counts: list[int],
        *,
        backend: str | None = None,
        limit: LengthLimit | None = None,
    ):
        if len(words) != len(counts):
            raise ValueError("words and counts differ in length")
        self.table = table
        self.counts = counts
        self.limit = limit
        self.backend = _resolve_backend(backend)
        core = None
        if self.backend == "compiled":
            try:
                packed = (words.data, words.offsets) if isinstance(words, PackedWords) else words
                core = CompiledCore(table, packed, counts, limit)
            except OverflowError:
                # subtle: counts beyond 64 bits (or ids beyond 32) only fit the Python core
                if backend == "compiled":
                    raise
                self.backend = "python"
        self.core: Core = core if core is not None else PythonCore(table, words, counts, limit)

    def best(self) -> tuple[tuple[int, int], int] | None:
        """The pair the next merge would take and its count, or None when no pair is left."""
        top = self.core.best()
        if top is None:
            return None
        left, right, count = top
        return (left, right), count

    def merge(self, left: int, right: int, count: int) -> tuple[Merge, bool]:
        """Merge ``(left, right)`` (counted ``count``) now; returns the merge and whether its
        token is new (else its id was reused). ``run`` takes the best pair this way."""
        table = self.table
        new_id, is_new = table.add(table.join(table.value(left), table.value(right)))
        self.core.apply(left, right, new_id)
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
        core = self.core
        lowest = max(min_frequency, 1)
        if isinstance(core, CompiledCore):  # a hint: how far the holder lists must reach
            budget = max_new_tokens if max_merges is None else min(max_new_tokens, max_merges)
            core.plan(budget, max(lowest, floor + 1) if floor is not None else lowest)
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
