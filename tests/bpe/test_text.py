"""The text rule (bpe_spark.bpe.text): one U+FFFD per maximal invalid subpart of UTF-8, one per lone
surrogate in str, counted exactly; and Tokenizer.encode applies it instead of raising."""

from __future__ import annotations

import codecs
import random

import pytest

from bpe_spark import TrainerConfig, train
from bpe_spark.bpe.text import InputTally, clean, clean_counted, decode_counted, decode_lines

# every kind of ill-formed UTF-8, with the U+FFFD count the Unicode Standard's practice gives
CRAFTED = {
    b"\x80": 1, b"\xbf": 1, b"\xc0": 1, b"\xc1\xbf": 2,  # lone continuation; C0/C1 never start a sequence
    b"\xc0\xaf": 2, b"\xe0\x80\xaf": 3, b"\xf0\x80\x80\xaf": 4,  # overlong "/"
    b"\xed\xa0\x80": 3, b"\xed\xbf\xbf": 3, b"\xed\xa0\x80\xed\xb0\x80": 6,  # surrogates, encoded
    b"\xe2\x82": 1, b"\xf0\x9f\x98": 1, b"\xf0\x9f": 1, b"\xe2": 1,  # truncated sequences
    b"\xe2\x82\x41": 1, b"\xf0\x9f\x98\xf0\x9f\x98\x80": 1,  # truncated, then valid
    b"\xf4\x90\x80\x80": 4,  # beyond U+10FFFF
    b"\xf5": 1, b"\xf8\x88\x80\x80\x80": 5, b"\xfc": 1, b"\xfe": 1, b"\xff": 1, b"\xfe\xff": 2,
    b"\xef\xbf\xbd": 0,  # a U+FFFD of the input is text, not a replacement
    b"\xef\xbf\xbd\xff": 1,
}
for byte in range(0x80, 0x100):  # every non-ASCII byte alone, then followed by ASCII
    CRAFTED.setdefault(bytes([byte]), 1)


def _reference(data: bytes) -> tuple[str, int]:
    """bytes.decode's own callback, counting each replacement: the rule by definition."""
    seen = []

    def handler(exc):
        seen.append((exc.start, exc.end))
        return "\ufffd", exc.end

    codecs.register_error("test_text.count", handler)
    return data.decode("utf-8", "test_text.count"), len(seen)


def _random_bytes(rng: random.Random) -> bytes:
    pool = [0x41, 0x0A, 0x80, 0xBF, 0xC2, 0xE0, 0xED, 0xEF, 0xF0, 0xF4, 0xFF, 0xBD]
    return bytes(rng.choice([rng.randrange(256), rng.choice(pool)]) for _ in range(rng.randrange(0, 16)))


@pytest.mark.parametrize("data", sorted(CRAFTED))
def test_each_maximal_invalid_subpart_becomes_one_replacement(data):
    for framed in (data, b"a" + data + b"z"):
        text, replaced = decode_counted(framed)
        assert text == framed.decode("utf-8", "replace")
        assert (text, replaced) == _reference(framed)
        assert replaced == CRAFTED[data]


def test_counts_match_the_reference_on_random_bytes():
    rng = random.Random(12)
    for _ in range(20_000):
        data = _random_bytes(rng)
        assert decode_counted(data) == _reference(data), data


def test_lines_cut_at_newline_only_and_keep_bom_cr_nul():
    data = b"\xef\xbb\xbfbom\r\nx\x00y\rz\n\xed\xa0\x80\n\n\xe2\x80\xa8sep\x0b\x1c\n"
    lines, replaced, affected = decode_lines(data)
    assert lines == ["\ufeffbom\r\n", "x\x00y\rz\n", "\ufffd" * 3 + "\n", "\n", "\u2028sep\x0b\x1c\n"]
    assert (replaced, affected) == (3, 1)
    assert decode_lines(b"ok\n\xc3\xa9\n") == (["ok\n", "\xe9\n"], 0, 0)


def test_lone_surrogates_become_one_replacement_each():
    assert clean_counted("a\ud800b\udfff\ud83d\ude00") == ("a\ufffdb\ufffd\ufffd\ufffd", 4)
    assert clean_counted("\U0001f600 é") == ("\U0001f600 é", 0)
    assert clean("plain") == "plain"
    tally = InputTally()
    assert tally.add_str("\ud800x") == "\ufffdx" and tally.add_str("ok") == "ok"
    assert tally.add_bytes(b"\xff\xfe") == "\ufffd\ufffd"
    assert tally.as_stats() == {"replaced_sequences": 3, "affected_documents": 2, "skipped_files": 0}


@pytest.mark.parametrize("specials", [(), ("<|eot|>",)])
def test_tokenizer_encode_replaces_lone_surrogates(specials):
    tok = train(["ab ab \ufffd\ufffd"], TrainerConfig(vocab_size=262, special_tokens=specials))
    for text in ("\ud800", "ab\udc80 ab", "x\ud83d\ude00"):
        assert tok.encode(text) == tok.encode(clean(text))
        assert tok.encode_ordinary(text) == tok.encode_ordinary(clean(text))
        assert tok.decode(tok.encode(text)) == clean(text)
