"""SuperBPE's two stages in process against a reference written here from the paper's definition
(Liu et al. 2025, and its reference scripts): stage 1 is plain BPE (tests/naive_bpe.py) to t
merges; stage 2 splits each text as tokenizers' Split "Isolated" does with SuperBPE's regex
(written here with ``re``-style scanning, not the preset), starts every piece from its bytes,
replays the t merges in order, and continues the naive loop with tokenizers' tie-break. Also the
config's checks and the options that go with it."""

from __future__ import annotations

import itertools
from collections import Counter

import pytest
import regex

from bpe_spark import ConfigError, TrainerConfig, train, train_from_counts
from bpe_spark.bpe.patterns import PRESETS
from bpe_spark.training.superword import count_superwords
from tests.conftest import corpus_lines
from tests.naive_bpe import gpt2_byte_order, naive_train

SPLIT = r"\p{N}{1,3}| ?[^\s\p{L}\p{N}]{2,}[\r\n/]*| +(?!\S)"  # the reference scripts' stage-2 regex_string
SAMPLE = [
    "By the way, I am a fan of the Milky Way.",
    "by the way, it is what it is... and so on and so forth",
    "In 2024, 1,234,567 people said: by the way!!",
    "  spaces   before\twords and the way it is  ",
    "it is what it is, by the way.",
] * 6


def lines(name: str, count: int) -> list[str]:
    """The non-blank lines among a shared corpus's first ``count`` lines."""
    return [line for line in corpus_lines(name, 200_000)[:count] if line.strip()]


def isolated_pieces(text: str) -> list[str]:
    """tokenizers' Split(pattern, "isolated"): each match, and each run of text between matches."""
    out, last = [], 0
    for match in regex.finditer(SPLIT, text):
        if match.start() > last:
            out.append(text[last:match.start()])
        out.append(match.group())
        last = match.end()
    if last < len(text):
        out.append(text[last:])
    return out


def rewrite(symbols: list[bytes], pair: tuple[bytes, bytes]) -> list[bytes]:
    out, i = [], 0
    while i < len(symbols):
        if i + 1 < len(symbols) and (symbols[i], symbols[i + 1]) == pair:
            out.append(symbols[i] + symbols[i + 1])
            i += 2
        else:
            out.append(symbols[i])
            i += 1
    return out


def reference_superbpe(texts: list[str], vocab_size: int, transition: int, pattern: str = "gpt2",
                       max_length: int | None = None):
    """The merges of SuperBPE from its definition: (stage 1 merges, stage 2 merges); with
    ``max_length``, no token longer than that many bytes in either stage."""
    stage1_counts = Counter(p for text in texts for p in regex.findall(PRESETS[pattern], text))
    stage1 = naive_train(dict(stage1_counts), vocab_size=vocab_size, max_merges=transition,
                         max_token_length=max_length)
    pieces = Counter(piece for text in texts for piece in isolated_pieces(text))
    sequences = {piece: [bytes([b]) for b in piece.encode()] for piece in pieces}
    for pair in stage1.merges:  # stage 2 inherits the first t merges, replayed in order
        sequences = {piece: rewrite(symbols, pair) for piece, symbols in sequences.items()}
    # tokenizers' ids: the bytes in its alphabet order, then each token in the order it was made
    key = {bytes([b]): position for position, b in enumerate(gpt2_byte_order())}
    for left, right in stage1.merges:
        key.setdefault(left + right, len(key))
    merges = []
    while len(key) < vocab_size:
        counts: Counter = Counter()
        for piece, symbols in sequences.items():
            for pair in itertools.pairwise(symbols):
                if max_length is None or len(pair[0] + pair[1]) <= max_length:
                    counts[pair] += pieces[piece]
        if not counts:
            break
        best = max(counts.values())
        pair = min((p for p, c in counts.items() if c == best), key=lambda p: (key[p[0]], key[p[1]]))
        key.setdefault(pair[0] + pair[1], len(key))
        merges.append(pair)
        sequences = {piece: rewrite(symbols, pair) for piece, symbols in sequences.items()}
    return stage1.merges, merges


def superword(vocab_size: int, transition: int, **options) -> TrainerConfig:
    return TrainerConfig(vocab_size=vocab_size, superword_transition=transition, **options)


@pytest.mark.parametrize("transition", [10, 40])
def test_both_stages_equal_the_reference_on_a_sample(transition):
    tok = train(SAMPLE, superword(256 + 90, transition))
    first, second = reference_superbpe(SAMPLE, 256 + 90, transition)
    assert tok.merges == first + second
    assert any(b" " in left + right and (left + right).strip(b" ").count(b" ") >= 1 for left, right in second)
    record = tok.metadata["superword"]
    assert record["transition"] == transition and record["stage1_merges"] == transition
    assert record["stage2_pattern"] == "superbpe" and "base" not in tok.metadata
    assert tok.config == superword(256 + 90, transition) and tok.pattern == "superbpe"


@pytest.mark.parametrize("name", ["en_books", "multilingual"])
def test_both_stages_equal_the_reference_on_real_text(name):
    texts = lines(name, 120)
    tok = train(texts, superword(256 + 150, 100))
    first, second = reference_superbpe(texts, 256 + 150, 100)
    assert tok.merges == first + second
    assert [tok.decode(tok.encode(text)) for text in texts] == texts


@pytest.mark.parametrize("max_length", [4, 7])
def test_max_token_length_holds_in_both_stages(max_length):
    texts = lines("en_books", 120)
    tok = train(texts, superword(256 + 150, 100, max_token_length=max_length))
    first, second = reference_superbpe(texts, 256 + 150, 100, max_length=max_length)
    assert tok.merges == first + second
    assert max(len(value) for value in tok.ordinary_vocab.values()) <= max_length


def test_encoding_applies_the_merges_to_whole_superword_pretokens():
    tok = train(SAMPLE, superword(256 + 90, 40))
    ids = tok.encode("by the way, it is what it is")
    pieces = [tok.decode([i]) for i in ids]
    assert any(" " in piece.strip() for piece in pieces)  # a token spans words
    assert "".join(pieces) == "by the way, it is what it is"


def test_counts_give_the_same_model_as_texts():
    cfg = superword(256 + 90, 40)
    first = Counter(p for text in SAMPLE for p in regex.findall(PRESETS["gpt2"], text))
    from_counts = train_from_counts(first, cfg, superword_counts=count_superwords(SAMPLE, cfg))
    assert from_counts.merges == train(SAMPLE, cfg).merges
    with pytest.raises(ConfigError, match="needs superword_counts="):
        train_from_counts(first, cfg)


def test_stage_two_reports_its_count_table():
    tok = train(SAMPLE, superword(256 + 90, 40))
    stage1, stage2 = tok.metadata["superword"]["stage1"], tok.metadata["superword"]["stage2"]
    pieces = Counter(piece for text in SAMPLE for piece in isolated_pieces(text))
    assert stage2.pop("seconds") >= 0 and stage1.pop("seconds") >= 0
    assert stage2 == {"distinct_pretokens": len(pieces), "pretokens": sum(pieces.values()),
                      "pretoken_bytes": sum(len(p.encode()) for p in pieces)}
    assert stage1["distinct_pretokens"] > stage2["distinct_pretokens"] / 10


def test_a_custom_stage_two_pattern_and_special_tokens():
    cfg = superword(256 + 60 + 1, 20, superword_pattern=r"[^.]+\.?|\.", special_tokens=("<|eot|>",))
    texts = [text + "<|eot|>" for text in SAMPLE]
    tok = train(texts, cfg)
    assert tok.pattern == r"[^.]+\.?|\." and tok.special_tokens == {"<|eot|>": tok.vocab_size - 1}
    assert sorted(tok.ordinary_vocab) == list(range(tok.vocab_size - 1))  # the special token last
    assert tok.encode("<|eot|>", allowed_special="all") == [tok.vocab_size - 1]
    assert tok.decode(tok.encode(texts[0], allowed_special="all")) == texts[0]


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"vocab_size": 300, "superword_transition": 44}, "leaves stage 2 no room"),
        ({"vocab_size": 300, "superword_transition": 0}, "integer >= 1"),
        ({"vocab_size": 300, "superword_transition": 10, "scheme": "char"}, "runs on the byte scheme"),
        ({"vocab_size": 300, "superword_transition": 10, "superword_pattern": "superbp"}, "unknown pattern preset"),
    ],
)
def test_bad_superword_settings_are_refused(options, message):
    with pytest.raises(ConfigError, match=message):
        TrainerConfig(**options)


def test_a_config_without_superwords_serializes_as_before():
    assert "superword_transition" not in TrainerConfig().to_dict()
    cfg = superword(1000, 500)
    assert TrainerConfig.from_dict(cfg.to_dict()) == cfg
