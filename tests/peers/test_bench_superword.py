"""The pure helpers of cases S1 and S2 (bench/superword.py): the transition, the token saving,
the sizes and S2's driver budget. No timing here."""

from __future__ import annotations

import doctest

import bench.superword
from bench.superword import RATIOS, budget, reduction, transition, vocabularies


def test_transition_is_a_fraction_of_the_merges():
    assert transition(32_000, 0.9) == 28_570  # round(0.9 * 31,744)
    assert transition(64_000, 0.9) == 57_370
    assert transition(64_000, 0.4) == 25_498
    assert transition(200_000, 0.9) == 179_770  # the paper's t=180k of 200k, near enough
    assert RATIOS == (0.9, 0.4)


def test_reduction_matches_the_papers_figures():
    assert round(reduction(4.457, 6.092) * 100, 1) == 26.8
    assert round(reduction(4.457, 6.634) * 100, 1) == 32.8
    assert reduction(3.0, 3.0) == 0


def test_sizes_budget_and_docstring_examples():
    assert vocabularies(True) == (4_000, 8_000) and vocabularies(False) == (32_000, 64_000)
    assert budget({"stage1": 5, "stage2": 1_000_000}) == 200_000
    assert budget({"stage1": 0, "stage2": 1}) == 1
    assert doctest.testmod(bench.superword).failed == 0
