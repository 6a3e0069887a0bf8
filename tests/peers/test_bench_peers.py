"""The pure helpers of the peers benchmark (bench/peers.py, bench/peer_workers.py): where two
merge lists part, whether that is a tie, the growth exponent. No timing here."""

from __future__ import annotations

import pytest

from bench.peer_workers import best_split, classify, first_difference, pair_counts, pathological
from bench.peers import growth_exponent


def test_first_difference():
    assert first_difference([b"ab", b"cd"], [b"ab", b"cd"]) is None
    assert first_difference([b"ab", b"cd", b"ef"], [b"ab", b"ce", b"ef"]) == 1
    assert first_difference([b"ab"], [b"ab", b"cd"]) == 1  # one list ends first


def test_tie_or_not_from_pair_counts():
    # words "abab" x2 and "cd" x4: (a, b) occurs 4 times, (b, a) 2, (c, d) 4
    words, counts = [[0, 1, 0, 1], [2, 3]], [2, 4]
    totals = pair_counts(words, counts)
    assert totals == {(0, 1): 4, (1, 0): 2, (2, 3): 4}
    values = {0: b"a", 1: b"b", 2: b"c", 3: b"d"}.__getitem__
    ours, peer = best_split(b"ab", totals, values), best_split(b"cd", totals, values)
    assert ours == ((0, 1), 4) and peer == ((2, 3), 4)
    assert classify(ours[1], peer[1]) == "tie"
    assert classify(4, best_split(b"ba", totals, values)[1]) == "not a tie"
    assert best_split(b"xy", totals, values) == (None, 0)  # no pair makes it


def test_growth_exponent():
    lengths = [10_000, 100_000, 1_000_000]
    assert growth_exponent(lengths, [1e-3, 1e-2, 1e-1]) == pytest.approx(1.0)
    assert growth_exponent(lengths, [1e-3, 1e-1, 1e1]) == pytest.approx(2.0)
    assert growth_exponent(lengths[:1], [1e-3]) is None


def test_pathological_texts_differ_per_variant():
    for kind in ("one_char", "spaces", "digits", "random"):
        first, second = pathological(kind, 1000, 0), pathological(kind, 1000, 1)
        assert first != second and abs(len(first) - 1000) <= 1
        assert not any(c.isspace() for c in first) or kind == "spaces"
