"""TrainerConfig: validated on construction, frozen, plain-data round trip."""

from __future__ import annotations

import dataclasses
import json

import pytest

from bpe_spark import ConfigError, TrainerConfig


def test_defaults():
    cfg = TrainerConfig()
    assert (cfg.vocab_size, cfg.scheme, cfg.pattern, cfg.tie_break, cfg.min_frequency) == (
        32000,
        "byte",
        "gpt2",
        "hf",
        0,
    )
    assert cfg.special_tokens == () and cfg.unk_token is None and cfg.max_merges is None


def test_frozen_and_replace_validates():
    cfg = TrainerConfig(vocab_size=300)
    with pytest.raises(dataclasses.FrozenInstanceError):
        cfg.vocab_size = 400
    assert cfg.replace(vocab_size=400).vocab_size == 400
    with pytest.raises(ConfigError, match="tie_break"):
        cfg.replace(tie_break="random")


def test_special_tokens_normalized_to_a_tuple():
    assert TrainerConfig(vocab_size=300, special_tokens=["<a>", "<b>"]).special_tokens == (
        "<a>",
        "<b>",
    )
    assert TrainerConfig(vocab_size=300, special_tokens="<a>").special_tokens == ("<a>",)


def test_round_trip_through_json():
    cfg = TrainerConfig(
        vocab_size=500,
        scheme="char",
        end_of_word="fused",
        pattern=r"\w+",
        lowercase=True,
        normalization="NFKC",
        special_tokens=("<unk>", "<s>"),
        min_frequency=2,
        tie_break="lexicographic",
        unk_token="<unk>",
        max_merges=100,
    )
    data = json.loads(json.dumps(cfg.to_dict()))
    assert TrainerConfig.from_dict(data) == cfg
    with pytest.raises(ConfigError, match="unknown TrainerConfig fields \\['vocab'\\]"):
        TrainerConfig.from_dict({"vocab": 3})


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"vocab_size": "1000"}, "vocab_size must be an integer"),
        ({"vocab_size": 1000.0}, "vocab_size must be an integer"),
        ({"vocab_size": True}, "vocab_size must be an integer"),
        ({"scheme": "word"}, "scheme must be one of"),
        ({"end_of_word": "suffix"}, "end_of_word must be one of"),
        ({"tie_break": "first"}, "tie_break must be one of"),
        ({"normalization": "NFD"}, "normalization must be one of"),
        ({"min_frequency": -1}, "min_frequency must be an integer >= 0"),
        ({"min_frequency": 1.5}, "min_frequency must be an integer >= 0"),
        ({"max_merges": -3}, "max_merges must be None or an integer >= 0"),
        ({"special_tokens": ("",)}, "non-empty strings"),
        ({"special_tokens": ("<a>", "<a>")}, "duplicates"),
        ({"unk_token": "<unk>"}, "char scheme only"),
        ({"scheme": "char", "unk_token": "<unk>"}, "add it to special_tokens"),
        ({"pattern": "gpt5"}, "unknown pattern preset 'gpt5'"),
        ({"pattern": "[a-"}, "invalid pretokenization regex"),
        ({"vocab_size": 255}, "set vocab_size >= 256"),
        ({"vocab_size": 257, "special_tokens": ("<a>", "<b>")}, "set vocab_size >= 258"),
        ({"scheme": "char", "vocab_size": 2, "special_tokens": ("<a>", "<b>")}, "leaves no room"),
    ],
)
def test_bad_values_say_what_to_change(changes, message):
    with pytest.raises(ConfigError, match=message.replace("[", "\\[")):
        TrainerConfig(**{"vocab_size": 1000, **changes})
