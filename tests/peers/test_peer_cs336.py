"""Acceptance 1: CS336 assignment 1's training fixture, merge for merge."""

from __future__ import annotations

import json
import time

import pytest
from tests.conftest import PEERS

from bpe_spark import TrainerConfig, train
from bpe_spark.bpe.symbols import display_to_bytes

CS336 = PEERS / "cs336"
CFG = TrainerConfig(
    vocab_size=500,
    scheme="byte",
    pattern="gpt2",
    special_tokens=("<|endoftext|>",),
    tie_break="lexicographic",
)


@pytest.fixture(scope="module")
def trained():
    text = (CS336 / "corpus.en").read_text(encoding="utf-8")
    started = time.perf_counter()
    tok = train(text, CFG)  # the whole file is ONE document, as CS336 reads it
    return tok, time.perf_counter() - started


def reference_merges() -> list[tuple[bytes, bytes]]:
    merges = []
    for line in (CS336 / "train-bpe-reference-merges.txt").read_text(encoding="utf-8").splitlines():
        left, right = line.split(" ")
        merges.append((display_to_bytes(left), display_to_bytes(right)))
    return merges


def test_merges_equal_the_reference_in_order(trained):
    tok, _ = trained
    expected = reference_merges()
    assert len(expected) == 243
    assert tok.merges == expected


def test_vocab_values_equal_the_reference(trained):
    tok, _ = trained
    reference = json.loads((CS336 / "train-bpe-reference-vocab.json").read_text(encoding="utf-8"))
    assert len(tok.vocab) == len(reference) == 500
    assert set(tok.vocab.values()) == {display_to_bytes(token) for token in reference}
    # our layout: bytes 0..255, merges from 256, the special token last
    assert tok.special_tokens == {"<|endoftext|>": 499}
    assert tok.vocab[256] == b" t"


def test_special_token_is_a_boundary_never_merged(trained):
    tok, _ = trained
    assert not any(b"<|" in left + right for left, right in tok.merges)
    assert tok.encode("<|endoftext|>", allowed_special="all") == [499]


def test_within_cs336_time_limit(trained):
    _, seconds = trained
    assert seconds < 1.5, f"CS336 allows 1.5 s; took {seconds:.2f} s"
