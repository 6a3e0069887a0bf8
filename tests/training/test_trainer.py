"""The exact merge engine (docs/design.md 1.4): counting rules, stopping rules, tie-breaks, id reuse,
determinism, and the floor / stop_after_reuse controls the distributed rounds use."""

from __future__ import annotations

import random

import pytest
from tests.naive_bpe import naive_train

from bpe_spark import (
    ConfigError,
    EmptyCorpusError,
    TrainerConfig,
    count_pretokens,
    train,
    train_from_counts,
)
from bpe_spark.bpe.symbols import SymbolTable
from bpe_spark.training.engine import Merge, MergeEngine
from bpe_spark.training.trainer import build_engine, new_token_budget
from bpe_spark.bpe.words import merge_symbols

A, B, C = ord("a"), ord("b"), ord("c")


def byte_cfg(**changes) -> TrainerConfig:
    return TrainerConfig(**{"vocab_size": 1000, "pattern": "whitespace", **changes})


def test_merge_symbols_is_left_to_right_and_non_overlapping():
    assert merge_symbols([A, A, A], A, A, 300) == [300, A]
    assert merge_symbols([A, A, A, A], A, A, 300) == [300, 300]
    assert merge_symbols([B, A, A, B, A, A], A, A, 300) == [B, 300, B, 300]
    assert merge_symbols([A], A, A, 300) == [A]


def test_overlapping_occurrences_each_count():
    # "aaa" holds (a, a) twice: count 2 from one word of count 1
    engine = build_engine({"aaa": 1}, byte_cfg())
    assert engine.best() == ((A, A), 2)
    tok = train_from_counts({"aaa": 1, "bc": 1}, byte_cfg(vocab_size=257))
    assert tok.merges == [(b"a", b"a")]
    assert tok.metadata["merge_counts"] == [2]
    # after the merge "aaaa" is [aa, aa]: the pair (aa, aa) counts once per word occurrence
    tok = train_from_counts({"aaaa": 3}, byte_cfg(vocab_size=258))
    assert tok.merges == [(b"a", b"a"), (b"aa", b"aa")]
    assert tok.metadata["merge_counts"] == [9, 3]


def test_counts_are_64_bit():
    big = 3 * 2**31 + 7
    tok = train_from_counts({"ab": big, "cd": 2**31 + 1, "ef": 2**40}, byte_cfg(vocab_size=259))
    assert tok.merges == [(b"e", b"f"), (b"a", b"b"), (b"c", b"d")]
    assert tok.metadata["merge_counts"] == [2**40, big, 2**31 + 1]
    # counts summed over words beyond 2**32 stay exact
    tok = train_from_counts(
        {"xy": 2**32 - 1, "xyz": 2**32 - 1, "zz": 2**33 - 3}, byte_cfg(vocab_size=257)
    )
    assert tok.merges == [(b"x", b"y")] and tok.metadata["merge_counts"] == [2**33 - 2]


@pytest.mark.parametrize("tie_break", ["hf", "lexicographic"])
@pytest.mark.parametrize(
    ("scheme", "end_of_word"), [("byte", "separate"), ("char", "separate"), ("char", "fused")]
)
def test_result_does_not_depend_on_input_order(tie_break, scheme, end_of_word):
    rng = random.Random(7)
    # many equal counts, so that every merge after the first few is decided by the tie-break
    words = ["".join(rng.choice("abcdé") for _ in range(rng.randint(1, 7))) for _ in range(60)]
    counts = {word: 1 + i % 3 for i, word in enumerate(words)}
    cfg = TrainerConfig(
        vocab_size=300,
        scheme=scheme,
        end_of_word=end_of_word,
        pattern="whitespace",
        tie_break=tie_break,
    )
    reference = train_from_counts(counts, cfg)
    assert len(reference.merges) > 20
    for seed in range(3):
        items = list(counts.items())
        random.Random(seed).shuffle(items)
        shuffled = train_from_counts(dict(items), cfg)
        assert shuffled.merges == reference.merges
        assert shuffled.vocab == reference.vocab
    docs = [word for word, count in counts.items() for _ in range(count)]
    random.Random(1).shuffle(docs)
    assert train(docs, cfg).merges == reference.merges


def test_tie_break_policies_on_a_plain_tie():
    # (a, b) and (c, d) both occur 3 times
    counts = {"ab": 3, "cd": 3}
    assert train_from_counts(counts, byte_cfg(vocab_size=257, tie_break="hf")).merges == [
        (b"a", b"b")
    ]
    assert train_from_counts(
        counts, byte_cfg(vocab_size=257, tie_break="lexicographic")
    ).merges == [(b"c", b"d")]


def test_hf_byte_order_is_the_gpt2_display_order():
    # byte 0x20 displays as U+0120 (after every printable byte): hf prefers '!' (0x21), though
    # 0x20 is the smaller byte value
    counts = {" a": 2, "!a": 2}
    assert train_from_counts(counts, byte_cfg(vocab_size=257)).merges == [(b"!", b"a")]
    # DEL (0x7f) displays as U+0121: hf takes 'A'; lexicographic takes the greater raw byte 0x7f
    counts = {"\x7fa": 2, "Aa": 2}
    assert train_from_counts(counts, byte_cfg(vocab_size=257)).merges == [(b"A", b"a")]
    lexi = train_from_counts(counts, byte_cfg(vocab_size=257, tie_break="lexicographic"))
    assert lexi.merges == [(b"\x7f", b"a")]


def test_min_frequency_stops_training():
    counts = {"ab": 5, "cd": 2, "ef": 1}
    tok = train_from_counts(counts, byte_cfg(min_frequency=2))
    assert tok.merges == [(b"a", b"b"), (b"c", b"d")]
    assert train_from_counts(counts, byte_cfg(min_frequency=6)).merges == []
    assert len(train_from_counts(counts, byte_cfg(min_frequency=0)).merges) == 3


def test_vocab_size_counts_everything_and_max_merges_caps():
    text = "the quick brown fox jumps over the lazy dog " * 3
    cfg = TrainerConfig(vocab_size=270, special_tokens=("<|a|>", "<|b|>"))
    tok = train(text, cfg)
    assert tok.vocab_size == len(tok.vocab) == 270
    assert len(tok.merges) == 270 - 256 - 2
    assert tok.special_tokens == {"<|a|>": 268, "<|b|>": 269}
    assert len(train(text, cfg.replace(max_merges=5)).merges) == 5
    char = train(
        text, TrainerConfig(vocab_size=40, scheme="char", pattern="words", special_tokens=("<s>",))
    )
    assert char.vocab_size == 40 and char.special_tokens == {"<s>": 0}
    alphabet = sorted(set(text) - {" "})
    assert [char.vocab[1 + i] for i in range(len(alphabet))] == alphabet
    assert char.vocab[1 + len(alphabet)] == "</w>"


def test_stops_cleanly_when_no_pair_is_left():
    tok = train_from_counts({"ab": 1, "c": 9}, byte_cfg(vocab_size=5000))
    assert tok.merges == [(b"a", b"b")] and tok.vocab_size == 257


def test_special_tokens_are_boundaries():
    cfg = TrainerConfig(vocab_size=300, special_tokens=("<|endoftext|>",), pattern="whitespace")
    counts = count_pretokens(["ab<|endoftext|>cd", "<|endoftext|>"], cfg)
    assert counts == {"ab": 1, "cd": 1}
    tok = train(["xy<|endoftext|>xy"] * 3, cfg)
    assert all(b"<" not in a + b and b">" not in a + b for a, b in tok.merges)


def test_merge_ids_and_counts_are_reported():
    seen = []
    tok = train_from_counts(
        {"abab": 2, "ab": 1}, byte_cfg(vocab_size=258), progress=lambda n, m: seen.append((n, m))
    )
    assert seen == [(1, Merge(A, B, 256, 5)), (2, Merge(256, 256, 257, 2))]
    assert tok.merge_ids == [(A, B, 256), (256, 256, 257)]
    assert (
        tok.metadata["stats"]["distinct_pretokens"] == 2 and tok.metadata["stats"]["pretokens"] == 3
    )


def test_a_merge_whose_token_exists_reuses_its_id():
    # Literal "</w>" text in the fused char scheme: merging the characters of "a</w>" (not at a
    # word end) makes the string of the end-of-word symbol "a</w>", which already has an id.
    counts = {"a": 1, "a</w>b": 3, "a</w>c": 3, "a</w>d": 3}
    cfg = TrainerConfig(
        vocab_size=100, scheme="char", end_of_word="fused", pattern="whitespace", tie_break="hf"
    )
    tok = train_from_counts(counts, cfg)
    existing = tok.token_to_id("a</w>")
    assert existing == 8  # alphabet / < > a b c d w = ids 0..7, then a</w>
    reused = [(left, right, new_id) for left, right, new_id in tok.merge_ids if new_id == existing]
    assert len(reused) == 1
    assert tok.merges[tok.merge_ids.index(reused[0])] == ("a</w", ">")
    values = list(tok.vocab.values())
    assert len(values) == len(set(values))  # no token twice
    assert tok.vocab_size == len(tok.vocab) == 8 + 4 + len(tok.merges) - 1
    reference = naive_train(
        counts, scheme="char", end_of_word="fused", tie_break="hf", vocab_size=100
    )
    assert reference.merges == tok.merges and reference.vocab == tok.vocab


def reuse_engine(tie_break: str = "hf") -> MergeEngine:
    """Words already split two ways around "abc": [ab, c] x3 and [a, bc] x2 (as a later round sees them)."""
    table = SymbolTable.for_bytes(tie_break)
    ab, _ = table.add(b"ab")
    bc, _ = table.add(b"bc")
    return MergeEngine(table, [[ab, C], [A, bc], [B, B]], [3, 2, 1])


def test_engine_reuse_keeps_one_id_and_costs_no_vocabulary():
    engine = reuse_engine()
    merges = engine.run(max_new_tokens=2)
    assert merges == [Merge(256, C, 258, 3), Merge(A, 257, 258, 2), Merge(B, B, 259, 1)]
    assert engine.core.current_words() == [[258], [258], [259]]
    assert len(engine.table) == 260  # 256 bytes + ab + bc + abc + bb: abc once


def test_engine_vocabulary_budget_is_checked_before_each_merge():
    merges = reuse_engine().run(max_new_tokens=1)
    assert merges == [Merge(256, C, 258, 3)]  # the budget is spent; even a reusing merge waits


def test_engine_stop_after_reuse():
    engine = reuse_engine()
    first = engine.run(max_new_tokens=10, stop_after_reuse=True)
    assert first == [Merge(256, C, 258, 3), Merge(A, 257, 258, 2)]
    assert engine.run(max_new_tokens=10) == [Merge(B, B, 259, 1)]


def test_engine_floor_stops_at_or_below_the_bound_and_resumes_exactly():
    rng = random.Random(3)
    counts = {
        "".join(rng.choice("abcd") for _ in range(rng.randint(2, 9))): rng.randint(1, 40)
        for _ in range(80)
    }
    cfg = byte_cfg(vocab_size=400)
    whole = build_engine(counts, cfg).run(max_new_tokens=144)
    engine = build_engine(counts, cfg)
    floor = whole[10].count
    head = engine.run(max_new_tokens=144, floor=floor)
    assert head and all(m.count > floor for m in head)
    assert engine.best()[1] <= floor  # it stopped because of the floor, not the budget
    tail = engine.run(max_new_tokens=144 - len(head))
    assert head + tail == whole


def test_engine_max_merges_and_min_frequency_arguments():
    engine = build_engine({"abcabc": 2, "ab": 1}, byte_cfg())
    assert [m.count for m in engine.run(max_new_tokens=100, max_merges=1)] == [5]
    assert engine.run(max_new_tokens=100, min_frequency=5) == []  # (ab, c) occurs 4 times now
    assert [m.count for m in engine.run(max_new_tokens=100)] == [4, 2]  # (ab, c), (abc, abc)


def test_new_token_budget():
    cfg = TrainerConfig(vocab_size=20, scheme="char", special_tokens=("<s>",))
    engine = build_engine({"abc": 1}, cfg)
    assert len(engine.table) == 4  # a b c </w>
    assert new_token_budget(cfg, engine.table) == 20 - 1 - 4


def test_bad_counts():
    with pytest.raises(ConfigError, match="negative count"):
        train_from_counts({"ab": -1}, byte_cfg())
    with pytest.raises(ConfigError, match="keyed by str"):
        train_from_counts({b"ab": 1}, byte_cfg())
    with pytest.raises(EmptyCorpusError):
        train_from_counts({"ab": 0, "": 5}, byte_cfg())
