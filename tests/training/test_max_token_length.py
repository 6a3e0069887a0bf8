"""``TrainerConfig.max_token_length`` in process: the config field, the merges against a naive
reference that drops over-long pairs at every step, both cores, and the two bugs of
``tokenizers``' ``BpeTrainer(max_token_length=...)`` avoided."""

from __future__ import annotations

import pytest
from tests.conftest import corpus_lines
from tests.naive_bpe import naive_train, token_length

from bpe_spark import ConfigError, TrainerConfig, count_pretokens, train, train_from_counts
from bpe_spark.training.length_limit import LengthLimit

def text_lines() -> list[str]:
    """A few hundred lines of tiny Shakespeare."""
    return corpus_lines("tiny_shakespeare", 12_000)


def tokens_of(tok) -> list:
    """Every learned token's value (the merges' results)."""
    return [left + right for left, right in tok.merges]


# --- the config field -------------------------------------------------------------------------
def test_the_field_validates_and_leaves_old_configs_unchanged():
    cfg = TrainerConfig(vocab_size=300)
    assert "max_token_length" not in cfg.to_dict()  # saved configs and checkpoints stay as they were
    assert list(cfg.to_dict())[-1] == "end_of_word_marker"
    limited = cfg.replace(max_token_length=4)
    assert limited.to_dict()["max_token_length"] == 4
    assert TrainerConfig.from_dict(limited.to_dict()) == limited
    assert TrainerConfig.from_dict(cfg.to_dict()) == cfg
    for bad in (0, -1, 2.5, "3", True):
        with pytest.raises(ConfigError, match="max_token_length"):
            TrainerConfig(vocab_size=300, max_token_length=bad)


def test_length_rule_counts_bytes_or_characters_without_the_marker():
    limit = LengthLimit.of(TrainerConfig(vocab_size=300, scheme="char", max_token_length=2))
    assert [limit.length(v) for v in ("ab", "ab</w>", "</w>", "é")] == [2, 2, 0, 1]
    byte_limit = LengthLimit.of(TrainerConfig(vocab_size=300, max_token_length=2))
    assert byte_limit.length("é".encode()) == 2 and byte_limit.marker is None


# --- against the naive reference --------------------------------------------------------------
CASES = [
    ("byte", "separate", "hf", 1),
    ("byte", "separate", "hf", 2),
    ("byte", "separate", "lexicographic", 3),
    ("byte", "separate", "hf", 5),
    ("char", "separate", "hf", 1),
    ("char", "separate", "lexicographic", 2),
    ("char", "fused", "hf", 2),
    ("char", "fused", "lexicographic", 4),
]


@pytest.mark.parametrize(("scheme", "end_of_word", "tie_break", "n"), CASES)
@pytest.mark.parametrize("backend", ["python", "compiled"])
def test_merges_equal_the_naive_reference_with_a_length_filter(monkeypatch, backend, scheme, end_of_word,
                                                               tie_break, n):
    from bpe_spark.training.engine import compiled_core_available

    if backend == "compiled" and not compiled_core_available():
        pytest.skip("the compiled core is not built")
    monkeypatch.setenv("BPE_SPARK_ENGINE", backend)
    vocab = 256 + 120 if scheme == "byte" else 10_000
    cfg = TrainerConfig(vocab_size=vocab, scheme=scheme, end_of_word=end_of_word, tie_break=tie_break,
                        max_merges=None if scheme == "byte" else 120, max_token_length=n)
    counts = dict(count_pretokens(text_lines(), cfg))
    tok = train_from_counts(counts, cfg)
    expected = naive_train(counts, scheme=scheme, end_of_word=end_of_word, tie_break=tie_break,
                           vocab_size=vocab, max_merges=cfg.max_merges, max_token_length=n)
    assert tok.merges == expected.merges
    assert tok.metadata["merge_counts"] == expected.counts
    assert all(token_length(token) <= n for token in tokens_of(tok))
    if n == 1 and scheme == "byte":
        assert tok.merges == []  # no two bytes make a token of one byte
    if n >= 2:
        assert any(token_length(token) == n for token in tokens_of(tok))  # exactly n is allowed


def test_both_cores_give_the_same_merges_on_a_longer_run(monkeypatch):
    from bpe_spark.training.engine import compiled_core_available

    if not compiled_core_available():
        pytest.skip("the compiled core is not built")
    cfg = TrainerConfig(vocab_size=1200, max_token_length=4)
    lines = text_lines()
    runs = []
    for backend in ("python", "compiled"):
        monkeypatch.setenv("BPE_SPARK_ENGINE", backend)
        runs.append(train(lines, cfg))
    assert runs[0].merges == runs[1].merges and runs[0].metadata["merge_counts"] == runs[1].metadata["merge_counts"]
    assert max(len(token) for token in tokens_of(runs[0])) == 4


def test_no_limit_trains_as_before():
    lines = text_lines()
    cfg = TrainerConfig(vocab_size=400)
    plain = train(lines, cfg)
    loose = train(lines, cfg.replace(max_token_length=10_000))
    assert plain.merges == loose.merges
    assert "max_token_length" not in plain.config.to_dict()


# --- tokenizers' BpeTrainer(max_token_length=...) ---------------------------------------------
def hf_vocab(texts: list[str], n: int, vocab_size: int = 300) -> list[str]:
    tokenizers = pytest.importorskip("tokenizers")
    from tokenizers import models, pre_tokenizers, trainers

    tok = tokenizers.Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, max_token_length=n, show_progress=False)
    tok.train_from_iterator(texts, trainer)
    return list(tok.get_vocab())


def ours(texts: list[str], n: int, vocab_size: int = 300):
    cfg = TrainerConfig(vocab_size=vocab_size, scheme="char", end_of_word="fused", end_of_word_marker="",
                        pattern="words", max_token_length=n)
    return train(texts, cfg)


def test_tokenizers_1461_a_limit_of_one_still_makes_two_character_tokens():
    """huggingface/tokenizers#1461: the first pair counts are never filtered, so with
    max_token_length=1 the vocabulary still holds two-character tokens. Ours makes none."""
    texts = ["hello world"]
    assert max(len(token) for token in hf_vocab(texts, 1)) == 2  # the bug, as reported
    tok = ours(texts, 1)
    assert tok.merges == []
    assert max(len(token) for token in tok.vocab.values()) == 1


def test_tokenizers_forbids_tokens_of_exactly_the_limit_made_from_a_longer_part():
    """``tokenizers``' word.rs checks a merge with a neighbour by ``len + new_len < max_length``
    (strictly less), so a token of exactly N from a part longer than one is never made, while
    the first pairs, counted unfiltered, do make tokens of 2 <= N: with N = 3 no 3-character
    token at all. Ours makes tokens of exactly N, and never N + 1."""
    texts = ["the cat sat on the mat, then the hat sat there " * 5] * 20
    hf = hf_vocab(texts, 3)
    assert max(len(token) for token in hf) == 2  # "the" is frequent, yet never made
    tok = ours(texts, 3)
    lengths = [len(token) for token in tokens_of(tok)]
    assert "the" in tokens_of(tok) and max(lengths) == 3
    hf4 = hf_vocab(texts, 4)
    assert max(len(token) for token in hf4) == 3  # one short of the limit again
    assert max(len(token) for token in tokens_of(ours(texts, 4))) == 4


def test_merge_counts_stay_true_with_an_end_of_word_suffix():
    """huggingface/tokenizers#2320: with an end-of-word suffix (or a continuing-subword prefix)
    and max_token_length, ``tokenizers`` takes a neighbour pair's count down without the matching
    gain, a count goes negative and a pair that occurs zero times is merged. Ours never changes
    a count for the limit: every merge's count is its true count when it is taken."""
    corpus = "##c ##cac# #ab c# #### accc#a#a#b a cb"
    cfg = TrainerConfig(vocab_size=244, scheme="char", end_of_word="fused", pattern="whitespace",
                        max_token_length=4)
    counts = dict(count_pretokens([corpus], cfg))
    tok = train_from_counts(counts, cfg)
    expected = naive_train(counts, scheme="char", end_of_word="fused", vocab_size=244, max_token_length=4)
    assert tok.merges == expected.merges and tok.metadata["merge_counts"] == expected.counts
    assert tok.merges and all(count > 0 for count in tok.metadata["merge_counts"])


# --- the exact rounds, their executors played in process ---------------------------------------
@pytest.mark.parametrize("backend", ["python", "compiled"])
@pytest.mark.parametrize(("cfg", "frequent", "room"), [
    (TrainerConfig(vocab_size=500, max_token_length=3), 0.02, 5),
    (TrainerConfig(vocab_size=500, tie_break="lexicographic", max_token_length=2), 0.2, None),
    (TrainerConfig(vocab_size=10_000, max_merges=200, scheme="char", max_token_length=2), 0.0, 8),
    (TrainerConfig(vocab_size=10_000, max_merges=200, scheme="char", end_of_word="fused", max_token_length=4), 0.2, 8),
])
def test_rounds_take_the_limited_core_merges(monkeypatch, backend, cfg, frequent, room):
    from bpe_spark.training.engine import compiled_core_available
    from tests.training.test_round_replay import _core, simulate

    if backend == "compiled" and not compiled_core_available():
        pytest.skip("the compiled core is not built")
    monkeypatch.setenv("BPE_SPARK_ENGINE", backend)
    counts = dict(count_pretokens(text_lines(), cfg))
    expected = _core(counts, cfg)
    merges, records = simulate(counts, cfg, frequent, room=room, backend=backend, monkeypatch=monkeypatch)
    assert [(m.left, m.right) for m in merges] == expected
    assert len(records) > 1
    # shipping the over-long pairs too is only slower (outside then bounds them as well): the same merges
    merges, _ = simulate(counts, cfg, frequent, room=room, backend=backend, monkeypatch=monkeypatch,
                         ship_invisible=True)
    assert [(m.left, m.right) for m in merges] == expected
