"""One long JSON Lines record read in two passes (bpe_spark.bpe.long_records): the record's shape
from its skeleton and its text field in pieces give exactly what ``json.loads`` gives for the
whole line (the text, the text rule's replacements, a bad record), whatever the piece size:
escapes, surrogate pairs and backslash runs cut at every place."""

from __future__ import annotations

import io
import json
import random

import pytest

from bpe_spark.bpe.long_documents import LongDocument
from bpe_spark.bpe.long_records import (BadString, JsonText, escape_cut, read_head_line, scan_record,
                                        skeleton_of)
from bpe_spark.bpe.text import InputTally, clean_counted, decode_counted

_ESCAPES = ["a", " ", "é", "中", "😀", "\\n", '\\"', "\\\\", "\\\\\\\\", "\\u0041", "\\ud83d\\ude00", "\\ud83d",
            "\\ude00", "\\/", "\\u00e9", "\t", "\\x", '"', "\\u12"]
_SHAPES = ['{"id": "%s", "text": "%s"}', '{"text": "%s", "text": "%s"}', '{"text": "%s%s"', '["%s", "%s"]',
           '{"a": ["%s", {"b": 1}], "text": "%s" }', '{"text": null, "b": "%s%s"}', '{"text": 5, "b": "%s%s"}',
           '  {"b": "%s", "text": "%s"}  ']


def _whole(line: bytes):
    """What the whole line gives: ("ok", text, replaced) or ("bad",) or ("blank",)."""
    text, replaced = decode_counted(line)
    text = text.removeprefix("\ufeff")
    if not text.strip():
        return ("blank",)
    try:
        record = json.loads(text)
    except ValueError:
        return ("bad",)
    if not isinstance(record, dict) or "text" not in record:
        return ("bad",)
    value = record["text"]
    if value is None:
        return ("ok", None, replaced)
    if not isinstance(value, str):
        return ("bad",)
    value, surrogates = clean_counted(value)
    return ("ok", value, replaced + surrogates)


def _in_pieces(line: bytes, piece_bytes: int, long_chars: int):
    doc = LongDocument(bytearray(line), piece_bytes=piece_bytes)
    doc.tally = tally = InputTally()
    try:
        scan = scan_record(doc.pieces(), long_chars=long_chars)
    except BadString:
        return ("bad",)
    if not scan.skeleton.strip():
        return ("blank",)
    try:
        record = json.loads(scan.skeleton)
    except ValueError:
        return ("bad",)
    if not isinstance(record, dict) or "text" not in record:
        return ("bad",)
    value = record["text"]
    if value is not None and not isinstance(value, str):
        return ("bad",)
    index = scan.long_index(value)
    if index is None:
        value, surrogates = clean_counted(value) if value is not None else (None, 0)
        return ("ok", value, tally.replaced + surrogates)
    start, end, surrogates = scan.longs[index]
    text = JsonText(doc, start, end)
    pieces = list(text.pieces())
    assert text.text_bytes == len("".join(pieces).encode())
    return ("ok", "".join(pieces), tally.replaced + surrogates)


@pytest.mark.parametrize("seed", range(8))
def test_a_record_in_pieces_is_the_whole_line(seed):
    rng = random.Random(seed)
    for _ in range(150):
        body = "".join(rng.choice(_ESCAPES) if rng.random() < 0.4 else rng.choice("abc ")
                       for _ in range(rng.randint(0, 50)))
        shape = rng.choice(_SHAPES)
        line = (rng.choice(["", "\ufeff", " "]) + shape % (body[:8], body)).encode()
        if rng.random() < 0.2:
            cut = rng.randint(0, len(line))
            line = line[:cut] + rng.choice([b"\xff", b"\xed\xa0\x80", b"\x00"]) + line[cut:]
        expected = _whole(line)
        for piece_bytes in (1, 2, 3, 7, 64):
            for long_chars in (4, 5, 9, 1 << 16):  # "text" (a key) stays short
                assert _in_pieces(line, piece_bytes, long_chars) == expected, (line, piece_bytes, long_chars)


def test_escape_cuts_split_no_escape():
    assert escape_cut("ab") == 2
    assert escape_cut("a\\") == 1  # an escape begun
    assert escape_cut("a\\\\") == 3  # an escaped backslash is whole
    assert escape_cut("a\\\\\\") == 3
    assert escape_cut("a\\u00") == 1
    assert escape_cut("a\\ud83d") == 1 and escape_cut("a\\ud83d\\ude") == 1  # its low surrogate may follow
    assert escape_cut("a\\ud83d\\ude00") == 13 and escape_cut("a\\ud83dxxxxxx") == 13
    assert escape_cut("a\\\\ud83d") == 8  # "\\" then plain text


def test_a_bad_long_string_says_where():
    with pytest.raises(ValueError) as whole:
        json.loads('{"text": "abcd\x01e"}')
    with pytest.raises(BadString) as pieces:
        scan_record(iter(['{"text": "abc', "d\x01e", '"}']), long_chars=2)
    assert str(pieces.value) == str(whole.value) == "Invalid control character at: line 1 column 15 (char 14)"


def test_head_lines_read_a_long_line_as_its_fields():
    data = b'{"a": 1}\n{"text": "' + b"x" * 3000 + b'", "id": 2}\nlast'
    fh = io.BytesIO(data)
    assert read_head_line(fh, 1000) == b'{"a": 1}\n'
    long_line = read_head_line(fh, 1000)
    assert isinstance(long_line, LongDocument) and len(long_line) == 3000 + 22
    assert sorted(json.loads(skeleton_of(long_line))) == ["id", "text"]
    assert read_head_line(fh, 1000) == b"last" and read_head_line(fh, 1000) == b""
    bad = LongDocument(bytearray(b'{"text": "\\q' + b"x" * 70000 + b'"}'))
    with pytest.raises(BadString):
        scan_record(bad.pieces())
    assert list(json.loads(skeleton_of(bad))) == ["text"]  # a look at its fields: the string is not checked
