"""The pure helpers of case X1 (bench/extend.py): the held-out split and the quick slice. No
timing here."""

from __future__ import annotations

import doctest

import bench.extend
from bench.extend import head_lines, new_merges, split_lines


def test_split_holds_out_the_last_tenth_of_the_lines():
    data = b"".join(f"line {i}\n".encode() for i in range(100))
    train, held = split_lines(data)
    assert train + held == data
    assert held.count(b"\n") == 10 and held.startswith(b"line 90\n")
    assert split_lines(b"one\n") == (b"", b"one\n")  # at least one line held out


def test_head_lines_keeps_whole_lines():
    data = "一二三\nabc\n四五六\n".encode()
    assert head_lines(data, 100) == data
    assert head_lines(data, len("一二三\nabc\n".encode()) + 2) == "一二三\nabc\n".encode()
    assert head_lines(data, 2) == "一二三\n".encode()  # never empty


def test_sizes_and_docstring_examples():
    assert (new_merges(True), new_merges(False)) == (2_000, 32_000)
    assert doctest.testmod(bench.extend).failed == 0
