"""The compiled JSON Lines scanner (bpe_spark/native/_jsonl_scan.h, :func:`bpe_spark.spark.read.jsonl.scan_lines`)
gives the pure-Python parse's answer for every line: texts, nulls, blank lines, bad records and
the text rule's replacements, on crafted and generated lines."""

import itertools
import json
import random

import numpy as np
import pytest

from bpe_spark.native import compiled as _compiled
from bpe_spark.spark.read import jsonl
from bpe_spark.bpe.text import InputTally

pytestmark = pytest.mark.skipif(not _compiled.encoder_available(), reason="the compiled encoder is not built")

CRAFTED = [
    b"", b"   ", b"\t\r", b"\xc2\xa0", b'{"text": "plain"}', b'  {"text":"spaced"}  \r', b'{"text": null}',
    b'{"text": "a", "text": "b"}', b'{"text": "a", "text": null}', b'{"text": null, "text": "c"}',
    b'{"text": "a", "text": 5}', b'{"text": 5}', b'{"other": "x"}', b"{}", b"[]", b'"text"', b"null",
    b'{"t\\u0065xt": "escaped key"}', b'{"id": 1, "meta": {"text": "inner", "a": [1, 2.5e-3, true]}, "text": "outer"}',
    b'{"text": "esc \\" \\\\ \\/ \\b \\f \\n \\r \\t \\u00e9 \\ud83d\\ude00 \\u0000"}', b'{"text": "lone \\ud800"}',
    b'{"text": "lone \\udc00 low"}', b'{"text": "pair then \\ud800\\u0041"}', b'{"text": "caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80"}',
    b'{"text": "bad \xff byte"}', b'{"text": "overlong \xc0\xaf"}', b'{"text": "surrogate \xed\xa0\x80"}',
    b'{"text": "cut \xe2\x82"}', b'\xef\xbb\xbf{"text": "bom"}', b'{"text": "ctl \x01"}', b'{"text": "del \x7f"}',
    b'{"text": "x"} trailing', b'{"text": "x"}{"text": "y"}', b'{"text": "x",}', b'{"text": "x" "y"}',
    b'{"text": "x", "n": NaN}', b'{"text": "x", "n": -Infinity}', b'{"text": "x", "n": 01}', b'{"text": "x", "n": 1.}',
    b'{"text": "x", "n": -0.5E+10}', b'{"text": "x", "n": 1' + b"0" * 5000 + b"}", b'{"text": "x", "a": ' + b"[" * 80 + b"]" * 80 + b"}",
    b'{"text": "x", "a": ' + b"[" * 20 + b"]" * 20 + b"}", b'{"text": "unterminated}', b'{"text": "x"', b'{"text" "x"}',
    b'{"text": tru}', b'{"text": "x", "b": nul}', b'{"text": ""}',
]


def generated(seed: int, n: int) -> list[bytes]:
    """Lines of JSON objects and near-JSON, mixed from pieces that reach every branch."""
    rng = random.Random(seed)
    pieces = ['{', '}', '[', ']', '"', '\\', ':', ',', ' ', 'text', '"text"', 'null', 'true', '1', '-0', '1.5e3',
              '\\u00e9', '\\ud83d\\ude00', '\\ud800', '\\n', '\\"', 'é', '😀', '\x01', '"a":', '"text":']
    values = [None, 1, -2.5e10, True, [1, {"x": "y"}], "hi", "déjà \u2028 \U0001f600 \" \\ / \n", "", {"text": "in"}]
    lines = []
    for _ in range(n):
        if rng.random() < 0.6:
            record = {rng.choice(["text", "a", "téxt"]): rng.choice(values) for _ in range(rng.randint(0, 3))}
            line = json.dumps(record, ensure_ascii=rng.random() < 0.5).encode()
        else:
            line = "".join(rng.choice(pieces) for _ in range(rng.randint(0, 10))).encode("utf-8", "surrogatepass")
        if rng.random() < 0.1:
            at = rng.randint(0, len(line))
            line = line[:at] + rng.choice([b"\xff", b"\xed\xa0\x80", b"\xe2\x82"]) + line[at:]
        lines.append(line)
    return lines


def parse_both(lines: list[bytes], monkeypatch) -> tuple:
    block = b"".join(line + b"\n" for line in lines)
    records = jsonl.SplitRecords(jsonl.JsonlSource(None, "text", "fix it"), InputTally())
    fast = records._parse(block)
    with monkeypatch.context() as patch:
        patch.setattr(_compiled, "encoder_available", lambda: False)
        slow = records._parse(block)
    return fast, slow


def summary(parsed: jsonl.ParsedBatch) -> tuple:
    good = parsed.bad[parsed.keep()] == 0
    replaced = parsed.replaced[parsed.keep()][good]
    return parsed.column().to_pylist(), parsed.bad.tolist(), replaced.tolist(), parsed.blank, parsed.problem


@pytest.mark.parametrize("lines", [CRAFTED, generated(1, 4000), generated(2, 4000)], ids=["crafted", "gen1", "gen2"])
def test_the_scanner_gives_the_python_parse(lines, monkeypatch):
    fast, slow = parse_both(lines, monkeypatch)
    assert isinstance(fast.texts, type(fast.column())) and not isinstance(slow.texts, type(fast.column()))
    assert summary(fast) == summary(slow)


def test_the_scanner_answers_plain_records_itself_and_leaves_the_rest_to_python():
    lines = [b'{"text": "a\\u00e9"}', b'{"text": null}', b" ", b'{"text": "\\ud800"}', b'{"t\\u0065xt": "k", "n": 1e5}',
             b'{"text": 5}', b'\xef\xbb\xbf{"text": "bom"}']
    data = b"\n".join(lines)
    ends = np.cumsum([len(line) + 1 for line in lines]) - 1
    answers, offsets, texts = _compiled.jsonl_scanner()(data, ends - [len(line) for line in lines], ends, b"text")
    assert list(answers) == [0, 1, 2, 3, 0, 3, 3]
    offsets = np.frombuffer(offsets, dtype=np.int32)
    assert [texts[a:b].decode() for a, b in itertools.pairwise(offsets)] == ["aé", "", "", "", "k", "", ""]


def test_the_first_bad_record_is_the_one_named(monkeypatch):
    lines = [b'{"text": "ok"}', b"", b'{"text": 1}', b"not json"]
    fast, slow = parse_both(lines, monkeypatch)
    assert fast.problem == slow.problem == (2, 'its "text" field is a number, not a string')


def test_a_spark_reader_batch_takes_the_scanner_without_kept_columns(monkeypatch):
    import pyarrow as pa

    raw = pa.array([b'{"text": "x"}', b'{"text": "\\ud800y", "id": 2}', b"", b'{"text": null}'], pa.binary()).slice(1)
    fast = jsonl.parse_batch(raw, "text", ())
    assert isinstance(fast.texts, pa.Array)
    with monkeypatch.context() as patch:
        patch.setattr(_compiled, "encoder_available", lambda: False)
        slow = jsonl.parse_batch(raw, "text", ())
    assert summary(fast) == summary(slow) == (["\ufffdy", None], [0, 0, 0], [1, 0], [1], None)
