"""The plan of the rounds (bpe_spark.training.round_plan): the frequent pretokens' cut and the partitions."""

from __future__ import annotations

import doctest
import random

from bpe_spark.training import round_plan
from bpe_spark.training.round_plan import frequent_cut, partitions_for


def test_docstring_examples():
    result = doctest.testmod(round_plan)
    assert result.attempted and not result.failed


def test_the_cut_keeps_the_most_whole_levels_that_fit():
    rng = random.Random(3)
    for _ in range(500):
        counts = [rng.randint(1, 6) for _ in range(rng.randint(0, 12))]
        levels = sorted({c: counts.count(c) for c in counts}.items(), reverse=True)
        room = rng.randint(0, 14)
        cut = frequent_cut(levels, room)
        kept = sum(c >= cut for c in counts)
        assert kept <= room
        below = [c for c in counts if c < cut]
        if below:  # the next level down would not fit
            assert kept + counts.count(max(below)) > room


def test_no_room_keeps_nothing():
    assert frequent_cut([(5, 1)], 0) == 6


def test_partitions_follow_the_size_and_the_cores():
    assert partitions_for(0, 4) == 1
    assert partitions_for(round_plan.MIN_PARTITION_BYTES * 3, 2) == 2
    assert partitions_for(round_plan.MAX_PARTITION_BYTES * 10, 2) == 10
