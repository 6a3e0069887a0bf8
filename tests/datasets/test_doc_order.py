"""The pure rules of shuffled and split datasets (bpe_spark.datasets.doc_order): seeded order keys,
buckets as ranges of the order, split assignment and the --split syntax."""

from __future__ import annotations

import numpy as np
import pytest

from bpe_spark.datasets.doc_order import (
    bucket_bits,
    buckets,
    check_seed,
    order_keys,
    parse_splits,
    split_names,
    split_of,
)
from bpe_spark.errors import ConfigError


def test_order_keys_are_seeded_and_stable():
    ids = np.arange(1000)
    assert order_keys(ids, 1).tolist() == order_keys(ids, 1).tolist()
    assert order_keys(ids, 1).tolist() != order_keys(ids, 2).tolist()
    assert (order_keys(ids, 1) >= 0).all()
    # a document's key does not depend on which other documents are hashed with it
    assert order_keys(ids[500:], 1).tolist() == order_keys(ids, 1)[500:].tolist()


def test_buckets_are_ranges_of_the_order():
    keys = order_keys(np.arange(5000), 3)
    b = buckets(keys, 4)
    assert set(b.tolist()) == set(range(16))
    order = np.argsort(keys)
    assert (np.diff(b[order]) >= 0).all()
    assert bucket_bits(0, 10) == 0 and bucket_bits(100, 10) == 4


def test_split_of_respects_fractions_and_seed():
    ids = np.arange(100_000)
    splits = parse_splits(["validation=0.01", "test=0.1"])
    got = split_of(ids, 9, splits)
    assert split_names(splits) == ["validation", "test", "train"]
    shares = np.bincount(got, minlength=3) / len(ids)
    assert shares == pytest.approx([0.01, 0.1, 0.89], abs=0.005)
    assert split_of(ids[:10], 9, splits).tolist() == got[:10].tolist()
    assert split_of(ids, 10, splits).tolist() != got.tolist()
    assert (split_of(ids, 9, ()) == 0).all()


@pytest.mark.parametrize("value, message", [
    ("validation=0", "> 0"), ("validation=1", "> 0"), ("a=0.6,b=0.4", "sum to"), ("0.1", "NAME=FRACTION"),
    ("=0.1", "NAME=FRACTION"), ("train=0.1", "train takes the rest"), ("a=x", "not a number"),
    ("a=0.1,a=0.2", "repeat"), ("a/b=0.1", "the name must be"),
])
def test_bad_splits(value, message):
    with pytest.raises(ConfigError, match=message):
        parse_splits([value])


def test_seed():
    assert check_seed(None) == 0 and check_seed(5) == 5
    for bad in (-1, True, "3"):
        with pytest.raises(ConfigError):
            check_seed(bad)
