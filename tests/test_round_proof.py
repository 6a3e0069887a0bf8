"""The merges an exact round proves (bpe_spark.round_proof), without Spark: rounds played here
on random corpora, as bpe_spark.spark.rounds plays them (the broadcast cut, the collect, the
outside counts, prove_round), give the merges of one engine over all the words."""

from __future__ import annotations

import doctest
import random
from itertools import pairwise

import numpy as np
import pytest

from bpe_spark import round_proof
from bpe_spark.config import TrainerConfig
from bpe_spark.round_plan import broadcast_cut, choose_threshold, outside_counts
from bpe_spark.round_proof import StartCounts, prove_round
from bpe_spark.trainer import Merge, MergeEngine, build_engine, initial_table, new_token_budget
from bpe_spark.words import apply_merges, pair_rank_index, word_symbols

SHIFT = 32


def test_docstring_examples():
    result = doctest.testmod(round_proof)
    assert result.attempted and not result.failed


def corpus(seed: int, n: int = 400) -> dict[str, int]:
    """Words over a small alphabet (overlapping pairs, ids reused), heavy-tailed counts."""
    rng = random.Random(seed)
    letters = "abcdeab"
    counts: dict[str, int] = {}
    for _ in range(n):
        word = "".join(rng.choice(letters) for _ in range(rng.randint(1, 9)))
        counts[word] = counts.get(word, 0) + int(rng.paretovariate(1.2))
    return counts


def levels(values) -> list[tuple[int, int]]:
    found: dict[int, int] = {}
    for value in values:
        found[value] = found.get(value, 0) + 1
    return sorted(found.items(), reverse=True)


def play_rounds(counts, cfg, budget, most_pairs, backend=None):
    """The merges of rounds at ``budget`` pretokens, ``most_pairs`` broadcast; and, per round,
    the merges of pairs also counted outside the collected words."""
    table = initial_table(cfg, counts)
    words = [word_symbols(p, table, cfg) for p in sorted(counts)]
    weights = [counts[p] for p in sorted(counts)]
    merges: list[Merge] = []
    shared_per_round = []
    target = new_token_budget(cfg, table)
    while len(merges) < target:
        totals: dict[int, int] = {}
        for word, count in zip(words, weights):
            for left, right in pairwise(word):
                key = left << SHIFT | right
                totals[key] = totals.get(key, 0) + count
        if not totals:
            break
        cut, outside = broadcast_cut(levels(totals.values()), most_pairs)
        kept = {k: v for k, v in totals.items() if cut is not None and v >= cut}
        highest = [max((kept.get(a << SHIFT | b, 0) for a, b in pairwise(w)), default=0) for w in words]
        chosen = choose_threshold(levels(m for m in highest if m), budget, outside)
        if chosen is None:  # the top pair alone, from the global counts
            best = max(totals.values())
            keys, first = table.keys, table.first_id
            left, right = min((divmod(k, 1 << SHIFT) for k, v in totals.items() if v == best),
                              key=lambda p: (keys[p[0] - first], keys[p[1] - first]))
            new_id, _ = table.add(table.value(left) + table.value(right))
            got = [Merge(left, right, new_id, best)]
            shared_per_round.append(1)
        else:
            picked = [i for i, m in enumerate(highest) if m >= chosen.value]
            values = [s for i in picked for s in words[i]]
            offsets = np.cumsum([0] + [len(words[i]) for i in picked])
            pairs = np.array(sorted(kept), dtype=np.int64)
            start = np.array([kept[k] for k in sorted(kept)], dtype=np.int64)
            left_out, rest = outside_counts(values, offsets, [weights[i] for i in picked], pairs, start)
            outside_words = [list(divmod(int(k), 1 << SHIFT)) for k in left_out]
            engine = MergeEngine(table, [list(words[i]) for i in picked] + outside_words,
                                 [weights[i] for i in picked] + rest.tolist(), backend=backend)
            shared = {divmod(int(k), 1 << SHIFT): int(n) for k, n in zip(left_out, rest)}
            got, _ = prove_round(engine, start=StartCounts(pairs, start), outside_counts=shared, outside=outside,
                                 max_new_tokens=target - len(merges))
            assert got, "a round made no progress"
            shared_per_round.append(sum((m.left, m.right) in shared for m in got))
        merges += got
        triples = [(m.left, m.right, m.new_id) for m in got]
        ranks = pair_rank_index(triples)
        words = [apply_merges(list(w), triples, ranks) for w in words]
    return merges, shared_per_round


@pytest.mark.parametrize("tie_break", ["hf", "lexicographic"])
@pytest.mark.parametrize("seed", [1, 2])
def test_rounds_give_the_merges_of_one_engine(tie_break, seed):
    counts = corpus(seed)
    cfg = TrainerConfig(vocab_size=256 + 150, tie_break=tie_break, pattern="whitespace")
    engine = build_engine(counts, cfg)
    expected = engine.run(max_new_tokens=new_token_budget(cfg, engine.table))
    continued = 0
    for budget in (8, 60):
        for most_pairs in (3, 10_000):
            merges, shared = play_rounds(counts, cfg, budget, most_pairs)
            assert merges == expected, (budget, most_pairs)
            continued += sum(n > 1 for n in shared)
    assert continued  # some rounds proved merges past one that changed the counts outside


def test_the_python_engine_proves_the_same_rounds():
    counts = corpus(7)
    cfg = TrainerConfig(vocab_size=256 + 120, pattern="whitespace")
    compiled = play_rounds(counts, cfg, 30, 10_000)
    assert play_rounds(counts, cfg, 30, 10_000, backend="python") == compiled


@pytest.mark.parametrize("cd_count, proven", [(9, 1), (10, 2)])
def test_a_shared_merge_bounds_the_pairs_its_token_forms(cd_count, proven):
    # collected: "abc" x5, "cd" x cd_count, "ab" x5; outside: "abc" x4. After merging "ab"
    # (counted 4 outside), ("ab", "c") may count up to 9 (5 collected + 4 outside; and at most
    # what ("b", "c") counted at the start): "cd" is proven next only when it counts more.
    table = initial_table(TrainerConfig(vocab_size=300), ())
    a, b, c, d = (ord(x) for x in "abcd")
    outside = {(a, b): 4, (b, c): 4}
    engine = MergeEngine(table, [[a, b, c], [c, d], [a, b], [a, b], [b, c]], [5, cd_count, 5, 4, 4])
    start = StartCounts(np.array([a << SHIFT | b, b << SHIFT | c, c << SHIFT | d]), np.array([14, 9, cd_count]))
    merges, settled = prove_round(engine, start=start, outside_counts=outside, outside=0, max_new_tokens=10)
    assert [(m.left, m.right) for m in merges] == [(a, b), (c, d)][:proven] and not settled
    assert merges[0].count == 14
