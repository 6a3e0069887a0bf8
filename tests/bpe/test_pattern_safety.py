"""A custom pretokenization pattern cannot hang encoding or training (issue 12, item 5), and the
characters a pattern leaves unmatched are counted and warned about (item 6).

Custom patterns, from a model file, a tokenizer.json import or the user, run under a time limit
that grows with the text (bpe_spark.bpe.patterns.match_time_limit); the presets run as before, with
the plain regex findall. The limit's base is lowered here so that the tests stay short; the
pathological pattern takes seconds per extra character, so it meets any limit."""

from __future__ import annotations

import json
import sys
import warnings

import pytest
import regex

from bpe_spark import ConfigError, Tokenizer, TrainerConfig, train
from bpe_spark.bpe import patterns
from bpe_spark.encoding.batch_encoder import BatchEncoder
from bpe_spark.errors import PatternTimeoutError
from bpe_spark.models.huggingface.tokenizer_json_write import to_hf_dict
from bpe_spark.bpe.oniguruma import python_pattern
from bpe_spark.bpe.patterns import COVERING_PRESETS, PRESETS, DroppedTextWarning, match_time_limit, pretoken_finder
from bpe_spark.bpe.pretokenize import Pretokenizer

pytestmark = pytest.mark.filterwarnings("ignore::bpe_spark.bpe.patterns.DroppedTextWarning")

EVIL = r"(?:a|a)+$"
EVIL_TEXT = "a" * 25 + "b"  # 26 characters: about 24 s of backtracking without a limit


@pytest.fixture()
def short_limit(monkeypatch):
    monkeypatch.setattr(patterns, "MATCH_SECONDS", 0.2)


def evil_model(tmp_path):
    """A saved model directory whose bpe_spark.json carries the pathological regex."""
    tok = train(["aaa bbb"], TrainerConfig(vocab_size=258, pattern=r"\S+|\s+"))
    tok.save(tmp_path / "m")
    meta_path = tmp_path / "m" / "bpe_spark.json"
    meta = json.loads(meta_path.read_text(encoding="utf-8"))
    meta["pattern"] = {"regex": EVIL}
    meta["config"] = None
    meta_path.write_text(json.dumps(meta), encoding="utf-8")
    return tmp_path / "m"


def test_a_model_file_with_a_backtracking_regex_loads_and_encoding_stops_naming_the_text(tmp_path, short_limit):
    tok = Tokenizer.load(evil_model(tmp_path))
    assert tok.pattern == EVIL
    assert tok.encode("ab") == tok.encode_ordinary("ab")  # ordinary texts encode
    with pytest.raises(PatternTimeoutError, match=r"took over 0\.2 s on a text of 26 characters starting 'aaaa"):
        tok.encode(EVIL_TEXT)
    encoder = BatchEncoder(tok)
    assert not encoder.compiled
    with pytest.raises(PatternTimeoutError, match="26 characters"):
        encoder.encode_texts(["ok", EVIL_TEXT])


def test_training_with_a_backtracking_pattern_stops_too(short_limit):
    cfg = TrainerConfig(vocab_size=260, pattern=EVIL)
    with pytest.raises(PatternTimeoutError, match="simplify it or use a preset"):
        train(["aa", EVIL_TEXT], cfg)
    with pytest.raises(PatternTimeoutError):
        Pretokenizer(EVIL, special_tokens=["<s>"]).pretokens("x<s>" + EVIL_TEXT)


def test_an_imported_tokenizer_json_custom_regex_loads_without_opt_in_and_is_bounded(tmp_path, short_limit):
    tok = train(["aaa bbb"], TrainerConfig(vocab_size=258))
    data = to_hf_dict(tok)
    data["pre_tokenizer"] = {
        "type": "Sequence",
        "pretokenizers": [
            {"type": "Split", "pattern": {"Regex": EVIL}, "behavior": "Removed", "invert": True},
            {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": False},
        ],
    }
    path = tmp_path / "tokenizer.json"
    path.write_text(json.dumps(data), encoding="utf-8")
    imported = Tokenizer.load(path)
    assert imported.pattern == python_pattern(EVIL)  # Oniguruma's meaning: $ ends a line
    with pytest.raises(PatternTimeoutError):
        imported.encode(EVIL_TEXT)
    data["model"]["ignore_merges"] = True  # the pipeline's route: the file's steps, bounded alike
    path.write_text(json.dumps(data), encoding="utf-8")
    imported = Tokenizer.load(path)
    assert imported.pipeline is not None
    with pytest.raises(PatternTimeoutError, match="backtracks too much"):
        imported.encode(EVIL_TEXT)


def test_the_limit_grows_with_the_text_and_applies_to_custom_patterns_only():
    assert match_time_limit(0) == patterns.MATCH_SECONDS == 1.0
    assert match_time_limit(10_000_000) == pytest.approx(101.0)
    for name, source in PRESETS.items():
        for pattern in (name, source):
            # the presets keep the regex's own findall: no time limit, no per-call overhead
            assert type(pretoken_finder(pattern)).__name__ == "builtin_function_or_method"
            assert type(Pretokenizer(pattern).findall).__name__ == "builtin_function_or_method"
    assert callable(pretoken_finder(r"\S+|\s+")) and hasattr(pretoken_finder(r"\S+|\s+"), "dropped_characters")
    # Java's regex (engine="jvm") has no time limit: tests/spark/test_clear_options_cli.py shows
    # custom patterns refused there


def test_an_overlong_regex_is_refused():
    with pytest.raises(ConfigError, match="has 10001 characters; at most 10000"):
        patterns.compile_pattern("a" * 10_001)


def every_code_point() -> str:
    return "".join(chr(c) for c in range(sys.maxunicode + 1) if not 0xD800 <= c <= 0xDFFF)


@pytest.mark.parametrize("name", sorted(PRESETS))
def test_presets_drop_no_text_but_whitespace_by_design(name):
    every = every_code_point()
    texts = [every, every[::-1], "a\r\n\tb  \n\n 12345 x's'LL ☃\u00a0\u2028z", "  ", "\n"]
    findall = Pretokenizer(name).findall
    for text in texts:
        kept = "".join(findall(text))
        if name in COVERING_PRESETS:
            assert kept == text  # these match every character of any text
        else:
            # exactly the whitespace (the regex's \s) is left out, by design (subword-nmt words)
            assert kept == regex.sub(r"\s", "", text)


def test_a_custom_pattern_that_leaves_text_counts_it_and_warns_once():
    tok = train(["ab ab"], TrainerConfig(vocab_size=257, pattern="[a-z]+"))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert tok.decode(tok.encode("ab, ab!")) == "abab"
        tok.encode("ab ab")  # only whitespace left out: not counted
        tok.encode("x;y")
        BatchEncoder(tok).encode_texts(["ab"])  # covered: nothing more
    assert [w.category for w in caught] == [DroppedTextWarning]
    assert "leaves 2 characters (not whitespace) of a text starting 'ab, ab!' unmatched" in str(caught[0].message)
    assert tok.pretokenizer.dropped_characters == 3
    assert tok.pretokenizer.findall.dropped_texts == 2
    assert Pretokenizer(r"\S+|\s+").dropped_characters == 0
    # a word splitter that drops only whitespace, like the whitespace preset and subword-nmt
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        words = Pretokenizer(r"[^ \r\n]+")
        assert words.pretokens("a b\n\tc  \n") == ["a", "b", "\tc"]
        assert words.dropped_characters == 0


def test_training_reports_the_dropped_characters_in_its_statistics():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DroppedTextWarning)
        tok = train(["ab, ab!", "cd"], TrainerConfig(vocab_size=258, pattern="[a-z]+"))
    assert tok.metadata["stats"]["dropped_characters"] == 2
    assert "dropped_characters" not in train(["ab, ab!"], TrainerConfig(vocab_size=258)).metadata["stats"]
