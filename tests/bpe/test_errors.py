"""Acceptance 8: bad input gets a clear error (an exception of bpe_spark.errors whose message says
what was wrong and what to do), at the earliest point it can be detected."""

from __future__ import annotations

import pytest

from bpe_spark import (
    BpeSparkError,
    ConfigError,
    DisallowedSpecialTokenError,
    EmptyCorpusError,
    ModelFormatError,
    TrainerConfig,
    UnknownCharacterError,
    train,
    train_from_counts,
)
from bpe_spark.models.subword_nmt import read_codes


def test_every_error_is_a_bpe_spark_error_and_a_value_error():
    for error in (
        ConfigError,
        EmptyCorpusError,
        ModelFormatError,
        UnknownCharacterError,
        DisallowedSpecialTokenError,
    ):
        assert issubclass(error, BpeSparkError) and issubclass(error, ValueError)


def test_vocab_size_below_bytes_plus_specials():
    with pytest.raises(ConfigError) as info:
        TrainerConfig(vocab_size=257, special_tokens=("<|endoftext|>", "<|pad|>"))
    assert "256 byte symbols + 2 special tokens = 258; set vocab_size >= 258" in str(info.value)
    assert (
        len(train("ab ab", TrainerConfig(vocab_size=258, special_tokens=("<a>", "<b>"))).merges)
        == 0
    )


def test_vocab_size_below_alphabet_plus_specials_char_scheme():
    # the alphabet is known only once the corpus is read: 5 letters + </w> + 1 special = 7
    cfg = TrainerConfig(vocab_size=6, scheme="char", pattern="words", special_tokens=("<s>",))
    with pytest.raises(ConfigError) as info:
        train("abc de", cfg)
    assert "initial alphabet (6 symbols) + 1 special tokens = 7; set vocab_size >= 7" in str(
        info.value
    )
    fused = cfg.replace(end_of_word="fused")  # a b c d e + c</w> e</w> = 7 symbols
    with pytest.raises(ConfigError, match="set vocab_size >= 8"):
        train("abc de", fused)
    assert train("abc de", fused.replace(vocab_size=8)).vocab_size == 8


def test_unknown_preset_and_invalid_regex():
    with pytest.raises(
        ConfigError, match=r"unknown pattern preset 'gtp2'; choose one of \['cl100k', 'digits-rtl3', 'gpt2'"
    ):
        TrainerConfig(pattern="gtp2")
    with pytest.raises(ConfigError, match=r"invalid pretokenization regex .*unknown property"):
        TrainerConfig(pattern=r"\p{Foo}")
    with pytest.raises(ConfigError, match="matches the empty string"):
        TrainerConfig(pattern=r"\w*")


@pytest.mark.parametrize("texts", [[], "", ["", ""], ["   \n\t"], ["<|endoftext|><|endoftext|>"]])
def test_empty_corpus(texts):
    cfg = TrainerConfig(vocab_size=300, pattern="whitespace", special_tokens=("<|endoftext|>",))
    with pytest.raises(EmptyCorpusError, match="no pretoken to train on"):
        train(texts, cfg)


def test_empty_counts():
    with pytest.raises(EmptyCorpusError):
        train_from_counts({}, TrainerConfig(vocab_size=300))


def test_disallowed_special_token_names_token_and_option():
    tok = train(["hello world"], TrainerConfig(vocab_size=270, special_tokens=("<|endoftext|>",)))
    with pytest.raises(DisallowedSpecialTokenError) as info:
        tok.encode("hello<|endoftext|>")
    message = str(info.value)
    assert "'<|endoftext|>' at offset 5" in message
    assert "allowed_special={'<|endoftext|>'}" in message and "disallowed_special=()" in message
    assert (
        tok.encode("hello<|endoftext|>", allowed_special="all")[-1]
        == tok.special_tokens["<|endoftext|>"]
    )


def test_unknown_character_without_unk_token():
    tok = train(["low lower newest"], TrainerConfig(vocab_size=40, scheme="char", pattern="words"))
    with pytest.raises(UnknownCharacterError) as info:
        tok.encode("lowly")
    message = str(info.value)
    assert "'y' (U+0079) in 'lowly'" in message and "unk_token" in message


def test_known_character_never_seen_at_a_word_end_fused():
    tok = train(
        ["low lower newest"],
        TrainerConfig(vocab_size=40, scheme="char", pattern="words", end_of_word="fused"),
    )
    with pytest.raises(
        UnknownCharacterError, match="'o' .* never ended a word in training, so 'o</w>'"
    ):
        tok.encode("lo")


def test_unk_token_replaces_unknown_characters():
    cfg = TrainerConfig(
        vocab_size=40, scheme="char", pattern="words", special_tokens=("<unk>",), unk_token="<unk>"
    )
    tok = train(["low lower newest"], cfg)
    assert tok.tokens("lowly") == ["lo", "w", "l", "<unk>", "</w>"]
    assert tok.decode(tok.encode("lowly")) == "lowl<unk>"


def test_unk_token_must_be_a_special_token():
    with pytest.raises(ConfigError, match="add it to special_tokens"):
        TrainerConfig(vocab_size=40, scheme="char", unk_token="<unk>")


def test_bad_config_values():
    with pytest.raises(
        ConfigError, match="scheme must be one of \\('byte', 'char'\\), got 'bytes'"
    ):
        TrainerConfig(scheme="bytes")
    with pytest.raises(ConfigError, match="min_frequency must be an integer >= 0, got -2"):
        TrainerConfig(min_frequency=-2)


def test_malformed_codes_file_names_file_and_line(tmp_path):
    path = tmp_path / "codes.bpe"
    path.write_text("#version: 0.2\nt h\nth e</w>\nin\n", encoding="utf-8")
    with pytest.raises(ModelFormatError, match=f"{path}, line 4: expected two subword units"):
        read_codes(path)
