"""The driver budget (issue 13 item 6): given budgets parse as before, and ``"auto"`` follows the
driver's memory at the measured bytes per pretoken, bound by whichever limit binds."""

from __future__ import annotations

import pytest

from bpe_spark.training import driver_budget
from bpe_spark.training.driver_budget import (
    DriverMemory,
    absolute_budget,
    available_memory,
    is_auto,
    memory_budget,
    parse_bytes,
    resolve_budget,
)
from bpe_spark.errors import ConfigError

GIB = 1 << 30


def test_given_budgets_parse_and_auto_is_the_default_spelling():
    assert resolve_budget("30%", 1000) == 300 and resolve_budget(1.0, 77) == 77
    assert absolute_budget(2_000_000) == 2_000_000 and absolute_budget("auto") is None
    assert is_auto("auto") and is_auto(" Auto") and not is_auto("30%")
    for bad in (0, -3, "lots", 1.5, "150%", "autos"):
        with pytest.raises(ConfigError):
            resolve_budget(bad, 100)
    with pytest.raises(ValueError, match="memory_budget"):
        resolve_budget("auto", 100)


def test_the_binding_limit_decides_and_is_named():
    big = DriverMemory(jvm_heap=64 * GIB, max_result_size=0, python_available=4 * GIB)
    budget, source = memory_budget(big, mean_pretoken_bytes=10, vocab_size=32000)
    assert source.startswith("the driver's available memory 4.0 GiB at 168 bytes a pretoken")
    room = 0.75 * 4 * GIB - (64 << 20) - 512 * 32000
    assert budget == int(room / 168)
    # twice the Python memory, twice the room; a JVM limit then binds
    assert memory_budget(DriverMemory(64 * GIB, 0, 8 * GIB), mean_pretoken_bytes=10, vocab_size=32000)[0] > 2 * budget
    capped, why = memory_budget(DriverMemory(64 * GIB, GIB, 8 * GIB), mean_pretoken_bytes=10, vocab_size=32000)
    assert capped == int(0.9 * GIB / 52) and why.startswith("spark.driver.maxResultSize 1.0 GiB at 52 bytes")
    small_heap, why = memory_budget(DriverMemory(GIB, 0, None), mean_pretoken_bytes=10, vocab_size=32000)
    assert small_heap == int(0.5 * GIB / 52) and why.startswith("the driver JVM heap 1.0 GiB")
    # longer pretokens, fewer of them
    assert memory_budget(big, mean_pretoken_bytes=20, vocab_size=32000)[0] < budget


def test_a_driver_of_32_gib_holds_a_terabyte_corpus_in_one_round():
    """About 100 M distinct pretokens for 1 TB of text (the issue): a 32 GiB driver (16g heap,
    maxResultSize 8g, 28 GiB available at the start) holds them at 8 bytes each."""
    driver = DriverMemory(jvm_heap=16 * GIB, max_result_size=8 * GIB, python_available=28 * GIB)
    budget, _ = memory_budget(driver, mean_pretoken_bytes=8, vocab_size=50000)
    assert budget > 100_000_000
    # with Spark's default maxResultSize of 1g it is that limit that binds, and the notice says so
    budget, source = memory_budget(DriverMemory(16 * GIB, GIB, 28 * GIB), mean_pretoken_bytes=8, vocab_size=50000)
    assert budget < 30_000_000 and source.startswith("spark.driver.maxResultSize")


def test_no_memory_still_leaves_a_floor():
    assert memory_budget(DriverMemory(0, 0, 0), mean_pretoken_bytes=8, vocab_size=32000)[0] == driver_budget.MIN_BUDGET


def test_sizes_and_available_memory():
    assert parse_bytes("4g") == 4 * GIB and parse_bytes("1536m") == 1536 << 20 and parse_bytes("2048", "m") == 2 * GIB
    assert parse_bytes("1073741824") == GIB and parse_bytes("0") == 0
    with pytest.raises(ConfigError, match="4g"):
        parse_bytes("lots")
    available, what = available_memory()
    assert available is None or available > 0
    assert "memory" in what


def test_all_the_counts_cross_as_text_so_more_of_them_fit():
    """Driver mode collects the counts as text (12 bytes plus the pretoken's); rounds keep their
    pretokens as int32 symbols (12 plus 4 per byte of a byte-scheme pretoken)."""
    heap = DriverMemory(GIB, 0, None)
    text, why = memory_budget(heap, mean_pretoken_bytes=10, vocab_size=32000, as_text=True)
    assert text == int(0.5 * GIB / 22) and why == "the driver JVM heap 1.0 GiB at 22 bytes a pretoken"
    assert text > 2 * memory_budget(heap, mean_pretoken_bytes=10, vocab_size=32000)[0]


def test_a_vocab_size_the_corpus_cannot_fill_does_not_shrink_the_budget():
    """Issue 43, item 5: ``--vocab-size 2147483648`` left a budget of 10,000 pretokens from the
    driver's memory at 512 bytes a token; the merges can need no more than the corpus holds."""
    memory = DriverMemory(jvm_heap=4 << 30, max_result_size=1 << 30, python_available=22 << 30)
    reach = driver_budget.reachable_vocab(2**31, scheme="byte", distinct=30_000, pretoken_bytes=240_000)
    assert reach == 256 + 240_000 - 30_000
    huge = memory_budget(memory, mean_pretoken_bytes=8.0, vocab_size=reach)[0]
    assert huge == memory_budget(memory, mean_pretoken_bytes=8.0, vocab_size=32_000)[0] > 10**7
    assert memory_budget(memory, mean_pretoken_bytes=8.0, vocab_size=2**31)[0] == driver_budget.MIN_BUDGET
    # the char scheme: one symbol a character at most, an end-of-word marker, the merges
    assert driver_budget.reachable_vocab(2**31, scheme="char", distinct=10, pretoken_bytes=50, special_tokens=2) == 103
    assert driver_budget.reachable_vocab(500, scheme="char", distinct=10, pretoken_bytes=10**6) == 500
