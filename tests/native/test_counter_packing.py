"""The compiled counter's packing (``bucket_buffers``, ``add_counts``, ``buffers(sort=True)``): what
the count shuffle (bpe_spark/spark/training/count_shuffle.py) hands between tasks. A bucket split
loses and repeats nothing, sums add exactly, and the sorted buffers depend on the keys alone."""

from __future__ import annotations

import random
from collections import Counter

import pyarrow as pa
import pytest

from bpe_spark.native.compiled import encoder_available, new_counter

pytestmark = pytest.mark.skipif(not encoder_available(), reason="the compiled extension is not built")

TEXTS = ["Hello world, hello there 12345 ok", "naïve café ☕ — 東京 tokens", "x" * 300 + " end", "a b c a b c"]


def items(buffers) -> dict[str, int]:
    offsets, data, counts = buffers
    n = len(counts) // 8
    strings = pa.Array.from_buffers(pa.string(), n, [None, pa.py_buffer(offsets), pa.py_buffer(data)])
    values = pa.Array.from_buffers(pa.int64(), n, [None, pa.py_buffer(counts)])
    listed = list(zip(strings.to_pylist(), values.to_pylist()))
    assert len(dict(listed)) == len(listed), "a pretoken listed twice"
    return dict(listed)


def counted(texts) -> dict[str, int]:
    counter = new_counter("gpt2")
    counter.add(texts)
    return dict(zip(*counter.items()))


@pytest.mark.parametrize("buckets", [1, 3, 64])
def test_buckets_split_the_counts_exactly(buckets):
    counter = new_counter("gpt2")
    counter.add(TEXTS)
    parts = [items(b) for b in counter.bucket_buffers(buckets)]
    assert len(parts) == buckets
    merged: dict[str, int] = {}
    for part in parts:
        assert not merged.keys() & part.keys()
        merged.update(part)
    assert merged == counted(TEXTS)
    again = new_counter("gpt2")  # counted in another order: each pretoken in the same bucket
    again.add(TEXTS[::-1])
    assert [items(b) for b in again.bucket_buffers(buckets)] == parts


def test_add_counts_sums_partial_counts():
    texts = TEXTS * 3 + ["more words here", "Hello"]
    total = new_counter("gpt2")
    for start in range(0, len(texts), 4):
        part = new_counter("gpt2")
        part.add(texts[start:start + 4])
        for bucket in part.bucket_buffers(5):
            total.add_counts(*bucket)
    assert dict(zip(*total.items())) == dict(Counter(counted(texts)))


def test_sorted_buffers_depend_on_the_keys_alone():
    words = [f"w{i}" for i in range(5000)] + ["", "é", "é"]
    random.Random(1).shuffle(words)
    orders = []
    for seed in range(3):
        shuffled = list(words)
        random.Random(seed).shuffle(shuffled)
        counter = new_counter("gpt2")
        counter.add_counts(*_packed(shuffled))
        orders.append(counter.buffers(sort=True))
    assert orders[0] == orders[1] == orders[2]
    assert items(orders[0]) == dict(Counter(words))


def test_add_counts_refuses_bad_buffers():
    counter = new_counter("gpt2")
    offsets, data, counts = _packed(["ab", "c"])
    with pytest.raises(ValueError, match="offsets"):
        counter.add_counts(offsets[:-4], data, counts)
    with pytest.raises(ValueError, match="entry 1"):
        counter.add_counts(offsets, data[:2], counts)


def _packed(words: list[str]) -> tuple[bytes, bytes, bytes]:
    strings = pa.array(words, pa.string())
    _, offsets, data = strings.buffers()
    counts = pa.array([1] * len(words), pa.int64()).buffers()[1]
    return offsets.to_pybytes(), (data.to_pybytes() if data is not None else b""), counts.to_pybytes()
