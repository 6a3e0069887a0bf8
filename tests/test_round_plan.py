"""The plan of an exact round (bpe_spark.round_plan): the broadcast cut and the threshold."""

from __future__ import annotations

import doctest

import pytest

from bpe_spark import round_plan
from bpe_spark.round_plan import Threshold, broadcast_cut, choose_threshold, top_cut


def test_docstring_examples():
    result = doctest.testmod(round_plan)
    assert result.attempted and not result.failed


# --- broadcast_cut ---------------------------------------------------------------------------------
def test_cut_of_no_levels_keeps_nothing_and_leaves_nothing_out():
    assert broadcast_cut([], 10) == (None, 0)


def test_cut_keeps_whole_levels_only():
    levels = [(9, 1), (5, 2), (2, 4)]
    assert broadcast_cut(levels, 1) == (9, 5)
    assert broadcast_cut(levels, 2) == (9, 5)  # level 5 would not fit whole
    assert broadcast_cut(levels, 6) == (5, 2)


def test_cut_at_an_exact_fit_keeps_the_level():
    assert broadcast_cut([(9, 1), (5, 2), (2, 4)], 3) == (5, 2)
    assert broadcast_cut([(9, 1), (5, 2), (2, 4)], 7) == (2, 0)


def test_cut_when_the_top_level_is_too_big():
    assert broadcast_cut([(9, 4), (1, 1)], 3) == (None, 9)


@pytest.mark.parametrize("most", [0, 1])
def test_cut_with_room_for_zero_or_one_pair(most):
    assert broadcast_cut([(9, 1), (5, 1)], most) == ((9, 5) if most else (None, 9))


# --- choose_threshold ----------------------------------------------------------------------------
def test_no_levels_give_no_threshold():
    assert choose_threshold([], budget=100, outside=0) is None


def test_top_level_too_big_gives_no_threshold():
    assert choose_threshold([(9, 6), (3, 1)], budget=5, outside=0) is None


def test_the_lowest_threshold_that_fits_is_chosen():
    levels = [(9, 2), (7, 3), (4, 10), (2, 1)]
    assert choose_threshold(levels, budget=5, outside=0) == Threshold(7, 4, 5)
    assert choose_threshold(levels, budget=14, outside=0) == Threshold(7, 4, 5)


def test_an_exact_fit_takes_the_level_and_the_next_sets_the_floor():
    levels = [(9, 2), (7, 3), (4, 10)]
    assert choose_threshold(levels, budget=15, outside=0) == Threshold(4, 0, 15)
    assert choose_threshold(levels, budget=2, outside=0) == Threshold(9, 7, 2)


def test_outside_above_the_next_level_sets_the_floor():
    levels = [(9, 2), (7, 3), (4, 10)]
    assert choose_threshold(levels, budget=5, outside=6) == Threshold(7, 6, 5)
    # every level kept: the floor is what the broadcast left out
    assert choose_threshold(levels, budget=100, outside=3) == Threshold(4, 3, 15)


def test_outside_below_the_next_level_leaves_the_floor_at_the_level():
    assert choose_threshold([(9, 2), (7, 3)], budget=2, outside=5) == Threshold(9, 7, 2)


def test_budget_zero_collects_nothing():
    assert choose_threshold([(9, 1)], budget=0, outside=0) is None


def test_budget_one():
    assert choose_threshold([(9, 1), (7, 1)], budget=1, outside=0) == Threshold(9, 7, 1)
    assert choose_threshold([(9, 2)], budget=1, outside=0) is None


def test_the_floor_is_always_below_the_threshold_when_the_levels_come_from_the_kept_pairs():
    """The pretokens' levels are counts of broadcast pairs, so all above ``outside``: T > U."""
    pair_levels = [(40, 1), (30, 2), (25, 3), (10, 50)]
    for most in range(8):
        cut, outside = broadcast_cut(pair_levels, most)
        if cut is None:
            continue
        word_levels = [(level, 3 * n) for level, n in pair_levels if level >= cut]
        for budget in range(20):
            chosen = choose_threshold(word_levels, budget, outside)
            if chosen is not None:
                assert chosen.value > chosen.floor >= outside
                assert chosen.pretokens <= budget


def test_the_cut_from_the_top_counts_is_the_cut_from_the_histogram():
    import random

    rng = random.Random(3)
    for _ in range(500):
        counts = sorted((rng.randint(1, 6) for _ in range(rng.randint(0, 12))), reverse=True)
        most = rng.randint(0, 14)
        histogram = sorted({c: counts.count(c) for c in counts}.items(), reverse=True)
        cut, outside, kept = top_cut(counts[:most + 1], most)
        assert (cut, outside) == broadcast_cut(histogram, most)
        assert kept == sum(c >= cut for c in counts) if cut is not None else kept == 0
