"""Acceptance 2: subword-nmt's own test data: learned codes line by line, and its segmentation."""

from __future__ import annotations

import pytest
from tests.conftest import PEERS

from bpe_spark import (
    ConfigError,
    ModelFormatError,
    Tokenizer,
    TrainerConfig,
    UnknownCharacterError,
    train,
    train_from_counts,
)
from bpe_spark.models.subword_nmt import (
    SUBWORD_NMT_WORDS,
    Segmenter,
    read_codes,
    segment_line,
    write_codes,
)

SNMT = PEERS / "subword-nmt"
CFG = TrainerConfig(
    vocab_size=1_000_000,  # only max_merges stops it
    scheme="char",
    end_of_word="fused",
    pattern="whitespace",
    min_frequency=2,
    tie_break="lexicographic",
    max_merges=1000,
)


def load_codes(path, **options) -> Tokenizer:
    return Tokenizer(**read_codes(path, **options))


def corpus_lines() -> list[str]:
    """subword-nmt's tests/data/corpus.en: CS336 copied it as its corpus.en, kept once (there)."""
    with open(PEERS / "cs336" / "corpus.en", encoding="utf-8", newline="") as fh:
        return fh.readlines()


@pytest.fixture(scope="module")
def trained():
    return train(corpus_lines(), CFG)


@pytest.fixture(scope="module")
def reference_codes():
    return load_codes(SNMT / "bpe.ref")


def test_learned_codes_equal_bpe_ref_line_by_line(trained, tmp_path):
    out = tmp_path / "codes.bpe"
    write_codes(trained, out)
    ours = out.read_text(encoding="utf-8").splitlines(keepends=True)
    reference = (SNMT / "bpe.ref").read_text(encoding="utf-8").splitlines(keepends=True)
    assert len(ours) == len(reference) == 1001
    assert ours[0] == "#version: 0.2\n"
    for number, (line, expected) in enumerate(zip(ours, reference), start=1):
        assert line == expected, f"line {number}"
    assert out.read_bytes() == (SNMT / "bpe.ref").read_bytes()


def test_subword_nmt_word_split_learns_the_same_codes():
    # subword-nmt splits lines on single spaces; this corpus has no other whitespace, so the
    # faithful pattern and the `whitespace` preset give the same words here.
    faithful = train(corpus_lines(), CFG.replace(pattern=SUBWORD_NMT_WORDS))
    assert faithful.merges == train(corpus_lines(), CFG).merges


def test_segmenting_corpus_with_our_codes_gives_corpus_bpe_ref(trained):
    expected = (SNMT / "corpus.bpe.ref.en").read_text(encoding="utf-8").splitlines(keepends=True)
    segmenter = Segmenter(trained)
    ours = list(segmenter.segment_lines(corpus_lines()))
    assert len(ours) == len(expected) == 1015
    for number, (line, ref) in enumerate(zip(ours, expected), start=1):
        assert line == ref, f"line {number}"


def test_segmenting_with_bpe_ref_read_back_gives_corpus_bpe_ref(reference_codes):
    expected = (SNMT / "corpus.bpe.ref.en").read_text(encoding="utf-8").splitlines(keepends=True)
    assert list(Segmenter(reference_codes).segment_lines(corpus_lines())) == expected


def test_read_codes_layout(reference_codes, trained):
    tok = reference_codes
    assert tok.scheme == "char" and tok.end_of_word == "fused" and tok.pattern == "whitespace"
    assert tok.metadata["codes_version"] == "0.2"
    assert tok.merges == trained.merges
    assert tok.merges[:2] == [("t", "h"), ("th", "e</w>")]
    alphabet = sorted(v for v in tok.vocab.values() if len(v) == 1)
    assert [tok.vocab[i] for i in range(len(alphabet))] == alphabet  # code-point order first
    assert tok.vocab[len(alphabet)] == alphabet[0] + "</w>"
    # encode agrees with the trained tokenizer on the text (ids differ, token strings do not)
    line = "iron cement protects the ingot against the hot steel casting process\n"
    assert tok.tokens(line) == trained.tokens(line)
    assert tok.tokens(line)[:4] == ["ir", "on</w>", "c", "ement</w>"]
    assert tok.decode(tok.encode(line)) == line.strip()


def test_subword_nmt_whitespace_rules(reference_codes):
    # subword-nmt's own unit tests: leading/trailing spaces kept, runs of spaces collapsed,
    # U+00A0 is an ordinary character, an empty line stays empty.
    segmenter = Segmenter(reference_codes)
    assert segmenter.segment_line("  iron cement  \n") == "  ir@@ on c@@ ement  \n"
    assert segmenter.segment_line("iron  cement\n") == "ir@@ on c@@ ement\n"
    assert segmenter.segment_line("iron\xa0cement\n") == "ir@@ on@@ \xa0@@ c@@ ement\n"
    assert segmenter.segment_line("\n") == "\n"
    assert segmenter.segment_line("   \n") == "   \n"
    assert segmenter.segment_line("iron") == "ir@@ on"
    assert segment_line(reference_codes, "cement", separator="##") == "c## ement"


def test_unknown_characters_pass_through_segmentation_but_not_encode(reference_codes):
    segmenter = Segmenter(reference_codes)
    assert segmenter.subwords("\u2603") == ("\u2603",)
    assert segmenter.subwords("the\u2603the") == ("the", "\u2603", "the")
    with pytest.raises(UnknownCharacterError, match="U\\+2603"):
        reference_codes.encode("the\u2603the")


def test_subword_nmt_pattern_splits_like_subword_nmt(tmp_path):
    codes = tmp_path / "codes"
    codes.write_text("#version: 0.2\na b\nab c</w>\n", encoding="utf-8")
    faithful = load_codes(codes, pattern=SUBWORD_NMT_WORDS)
    assert faithful.pretokenizer.pretokens("abc\tabc  abc\n") == ["abc\tabc", "abc"]
    assert faithful.tokens("abc  abc\n") == ["abc</w>", "abc</w>"]
    assert load_codes(codes).pretokenizer.pretokens("abc\tabc  abc\n") == ["abc", "abc", "abc"]


def test_version_0_1_is_separate_end_of_word_and_round_trips(tmp_path):
    cfg = TrainerConfig(
        vocab_size=100,
        scheme="char",
        end_of_word="separate",
        pattern="whitespace",
        tie_break="lexicographic",
        max_merges=10,
    )
    tok = train_from_counts({"low": 5, "lower": 2, "newest": 6, "widest": 3}, cfg)
    path = tmp_path / "codes"
    write_codes(tok, path)
    text = path.read_text(encoding="utf-8")
    assert text.splitlines()[:3] == ["t </w>", "s t</w>", "e st</w>"]  # no header: version 0.1
    back = load_codes(path)
    assert back.end_of_word == "separate" and back.merges == tok.merges
    assert Segmenter(back).segment_line("lowest newest\n") == Segmenter(tok).segment_line(
        "lowest newest\n"
    )
    assert Segmenter(back).segment_line("lowest newest\n") == "low@@ est newest\n"


def test_fused_round_trip_and_max_merges(trained, tmp_path):
    path = tmp_path / "codes"
    write_codes(trained, path)
    back = load_codes(path)
    assert back.merges == trained.merges
    assert load_codes(path, max_merges=5).merges == trained.merges[:5]
    with pytest.raises(ConfigError, match="max_merges"):
        load_codes(path, max_merges=-1)


def test_duplicate_lines_first_one_counts(tmp_path):
    path = tmp_path / "codes"
    path.write_text("#version: 0.2\na b\nb c</w>\na b\n", encoding="utf-8")
    tok = load_codes(path)
    assert len(tok.merges) == 3
    assert Segmenter(tok).subwords("abc") == ("ab", "c")


def test_write_codes_refuses_what_the_format_cannot_hold(tmp_path):
    byte_tok = train(["aaa bbb"], TrainerConfig(vocab_size=258))
    with pytest.raises(ConfigError, match="byte scheme"):
        write_codes(byte_tok, tmp_path / "codes")
    spaced = train(["ab ab ab"], TrainerConfig(vocab_size=100, scheme="char", pattern=r"[a-z ]+"))
    assert any(" " in left + right for left, right in spaced.merges)
    with pytest.raises(ConfigError, match="space or line break"):
        write_codes(spaced, tmp_path / "codes")
    with pytest.raises(ConfigError, match="char-scheme"):
        Segmenter(byte_tok)


@pytest.mark.parametrize(
    ("content", "line", "what"),
    [
        ("#version: 0.2\na b\nab\n", 3, "two subword units"),
        ("#version: 0.2\na b\n\nab c\n", 3, "two subword units"),
        ("#version: 0.2\na  b\n", 2, "two subword units"),
        ("#version: 0.2\na b\nxy c</w>\n", 3, "'xy', which is neither"),
        ("#version: 0.9\na b\n", 1, "not supported"),
        ("#version: zero\na b\n", 1, "unreadable version"),
    ],
)
def test_read_codes_errors_name_file_and_line(tmp_path, content, line, what):
    path = tmp_path / "bad.codes"
    path.write_text(content, encoding="utf-8")
    with pytest.raises(ModelFormatError) as info:
        load_codes(path)
    message = str(info.value)
    assert f"{path}, line {line}:" in message
    assert what in message


def test_read_codes_rejects_binary(tmp_path):
    path = tmp_path / "codes"
    path.write_bytes(b"\xff\xfe\x00a b\n")
    with pytest.raises(ModelFormatError, match="not UTF-8"):
        load_codes(path)
