"""One very long document: read, counted and encoded in pieces (bpe_spark.bpe.long_documents),
with exactly the pretokens, counts, ids and text-rule replacements of the whole text; and BPE
on one very long pretoken gives the naive BPE's ids (the memory and time figures are in
``make bench``, case R1 / R2)."""

from __future__ import annotations

import gzip
import itertools
import random
from collections import Counter

import pytest
import regex
from tests.conftest import corpus_lines
from tests.naive_bpe import naive_train
from tests.encoding.test_encoder_equivalence import FUZZ_ALPHABET
from tests.native.test_o200k_pretokenizer import O200K_PIECES

from bpe_spark import Tokenizer, TrainerConfig, train_from_counts
from bpe_spark.native import compiled as _compiled
from bpe_spark.bpe.long_documents import LongDocument, count_pieces, encode_pieces
from bpe_spark.bpe.patterns import PRESETS
from bpe_spark.bpe.pretokenize import Pretokenizer
from bpe_spark.spark.read import text_splits
from bpe_spark.spark.read.text_splits import Split, iter_lines
from bpe_spark.bpe.text import InputTally, decode_counted

pytest_plugins = ("tests.compiled_fixtures",)  # the fastenc fixture

PATTERNS = ["gpt2", "cl100k", "o200k", "superbpe", "single-digits", "digits-rtl3"]


def _fuzz_text(seed: int, n: int, alphabet=FUZZ_ALPHABET) -> str:
    rng = random.Random(seed)
    # runs of one class make long pretokens, and cuts inside them
    return "".join(rng.choice(alphabet) * rng.choice([1, 1, 1, 2, 5, 30]) for _ in range(n))


def _pieces(text: str, size: int) -> list[str]:
    return [text[i : i + size] for i in range(0, len(text), size)]


@pytest.mark.usefixtures("fastenc")
@pytest.mark.parametrize("pattern", PATTERNS)
@pytest.mark.parametrize("seed", range(6))
def test_counting_in_pieces_equals_counting_the_whole_text(pattern, seed):
    text = _fuzz_text(seed, 400)
    expected = Counter(regex.findall(PRESETS[pattern], text))
    for size in (1, 2, 3, 7, 16, 17, 50, 333):
        counter = _compiled._fastenc.PretokenCounter(pattern)
        count_pieces(counter, iter(_pieces(text, size)))
        assert dict(zip(*counter.items())) == expected, (pattern, seed, size)


@pytest.mark.usefixtures("fastenc")
@pytest.mark.parametrize("seed", range(4))
def test_o200k_counting_in_pieces_equals_counting_the_whole_text(seed):
    """o200k backtracks: its pretoken may end far before the end of a run it read (after the
    last Lo of "中ABC...", at the last line break of "\\n   ..."), so a cut there must wait
    (STREAM_MARGIN's comment)."""
    text = "\u4e2d" + "A" * 40 + "b \u02b0" + "A" * 40 + "\n" + " " * 40 + "\nx" + _fuzz_text(seed, 300, O200K_PIECES)
    expected = Counter(regex.findall(PRESETS["o200k"], text))
    for size in (1, 2, 3, 7, 16, 17, 50):
        counter = _compiled._fastenc.PretokenCounter("o200k")
        count_pieces(counter, iter(_pieces(text, size)))
        assert dict(zip(*counter.items())) == expected, (seed, size)


@pytest.mark.usefixtures("fastenc")
@pytest.mark.parametrize("seed", range(4))
def test_superbpe_and_digit_presets_counting_in_pieces_equal_the_whole_text(seed):
    """A superbpe gap (everything between digits, runs of two punctuation characters and runs of
    spaces before whitespace) and a digits-rtl3 digit run (its first group depends on where the
    run ends) are longer than the pieces: the cut must wait for them whole (STREAM_MARGIN)."""
    rng = random.Random(seed)
    gap = "".join(rng.choice(["word", " ", ", ", ".", "\n", "\u4e2d", "'s", "\t"]) for _ in range(300))
    digits = "".join(rng.choice("0123456789\u0661") for _ in range(rng.randint(40, 90)))
    text = gap + digits + " !!\n/\r\n" + "  " + gap + " " * 41 + "x" + digits + "\n  " + _fuzz_text(seed, 200)
    for pattern in ("superbpe", "single-digits", "digits-rtl3", "o200k"):
        expected = Counter(regex.findall(PRESETS[pattern], text))
        for size in (1, 2, 3, 7, 16, 17, 50, 1000):
            counter = _compiled._fastenc.PretokenCounter(pattern)
            count_pieces(counter, iter(_pieces(text, size)))
            assert dict(zip(*counter.items())) == expected, (pattern, seed, size)


def test_a_tail_longer_than_the_pieces_is_rescanned_linearly():
    """A pretoken as long as the document (a superbpe gap) comes back whole as the tail; the
    stream calls again only once as much text has come, so the text it rescans stays linear."""
    from bpe_spark.bpe.long_documents import _stream

    for size in (1, 10, 1000):
        seen, calls = [], []

        def step(text, final, seen=seen, calls=calls):
            seen.append(text)
            calls.append(len(text))
            return "" if final else text  # nothing finished: all of it is the tail

        pieces = _pieces("w" * 200_000, size)
        _stream(step, iter(pieces))
        assert seen[-1] == "w" * 200_000
        assert sum(calls) <= 4 * 200_000, size


@pytest.mark.usefixtures("fastenc")
def test_a_superbpe_gap_as_long_as_the_document_counts_and_encodes_whole(en_tokenizer):
    text = "The quick brown fox jumps over the lazy dog, again.\n" * 20_000 + "  12"  # one gap of 1 MB
    tally = Pretokenizer("superbpe").tally()
    tally.add([LongDocument(bytearray(text.encode()), piece_bytes=4096)])
    assert dict(zip(*tally.items())) == Counter(regex.findall(PRESETS["superbpe"], text))
    encoder = _compiled._fastenc.Encoder(en_tokenizer.merge_ids, list(range(256)), "superbpe")
    expected = encoder.encode(text)
    assert encode_pieces(encoder, iter(_pieces(text, 4096))).tolist() == expected


@pytest.mark.usefixtures("fastenc")
@pytest.mark.parametrize("pattern", PATTERNS)
def test_encoding_in_pieces_equals_encoding_the_whole_text(pattern, en_tokenizer):
    encoder = _compiled._fastenc.Encoder(en_tokenizer.merge_ids, list(range(256)), pattern)
    text = _fuzz_text(7, 600) + " the quick brown fox, 12345 jumps" * 20
    expected = encoder.encode(text)
    for size in (1, 5, 16, 64, 1000):
        assert encode_pieces(encoder, iter(_pieces(text, size))).tolist() == expected, size


@pytest.mark.usefixtures("fastenc")
def test_a_long_document_grows_the_pretoken_cache_to_its_cap_only(en_tokenizer, monkeypatch):
    from bpe_spark.bpe import long_documents

    text = _fuzz_text(8, 2000) + " the quick brown fox, 12345 jumps" * 20
    plain = _compiled._fastenc.Encoder(en_tokenizer.merge_ids, list(range(256)), "gpt2")
    expected = plain.encode(text)
    assert plain.cache_size() > 40  # without a cap, every distinct pretoken stays
    for cap in (0, 1, 40):
        monkeypatch.setattr(long_documents, "LONG_CACHE_ENTRIES", cap)
        encoder = _compiled._fastenc.Encoder(en_tokenizer.merge_ids, list(range(256)), "gpt2")
        for size in (7, 1000):
            assert encode_pieces(encoder, iter(_pieces(text, size))).tolist() == expected, (cap, size)
            assert encoder.cache_size() == cap
        assert encoder.encode(text) == expected  # the cap held only while the document was encoded
        assert encoder.cache_size() > cap


@pytest.fixture(scope="module")
def en_tokenizer():
    counts = Pretokenizer("gpt2").count(corpus_lines("tiny_shakespeare")[:3000])
    return train_from_counts(dict(counts), TrainerConfig(vocab_size=600, pattern="gpt2"))


@pytest.mark.parametrize("seed", range(20))
def test_long_document_pieces_decode_as_the_whole_bytes(seed, tmp_path):
    rng = random.Random(seed)
    alphabet = [b"a", b" ", "é".encode(), "中".encode(), "😀".encode(), b"\xef\xbf\xbd", b"\xff", b"\x80",
                b"\xe2\x82", b"\xf0\x9f\x98", b"\xed\xa0\x80", b"\xc0\xaf"]
    data = b"".join(rng.choice(alphabet) for _ in range(300)) + b"\n"
    expected, replaced = decode_counted(data)
    path = tmp_path / "doc.bin"
    path.write_bytes(b"head" + data[:-1] + b"tail")
    for size in (1, 2, 3, 4, 5, 11, 64):
        in_file = LongDocument.in_file(str(path), 4, len(data) + 3, newline_added=True)
        in_file.piece_bytes = size
        for doc in (LongDocument(bytearray(data), piece_bytes=size), in_file):
            doc.tally = tally = InputTally()
            assert "".join(doc.pieces()) == expected
            assert (tally.replaced, tally.affected) == (replaced, 1 if replaced else 0)
            assert len(doc) == len(data)


@pytest.mark.usefixtures("fastenc")
def test_a_long_line_is_read_as_one_long_document(tmp_path, monkeypatch):
    monkeypatch.setattr(text_splits, "LONG_DOCUMENT_BYTES", 1000)
    monkeypatch.setattr(text_splits, "_READ_BYTES", 64)
    long_line = ("word " * 400 + "中文😀 ").encode()
    data = b"short\n" + long_line + b"\nafter\n" + long_line  # the last line lacks its \n
    path = tmp_path / "doc.txt"
    path.write_bytes(data)
    size = len(data)
    whole = [line + "\n" for line in data.decode().split("\n")]
    for cuts in ([0, size], [0, 3, size], [0, 100, 700, size], [0, 1500, size], list(range(0, size, 333)) + [size]):
        got, sizes = [], 0
        for start, end in itertools.pairwise(cuts):
            for lines, nbytes in iter_lines(Split(str(path), start, end), with_bytes=True):
                sizes += nbytes
                for line in lines:
                    got.append(line.text() if isinstance(line, LongDocument) else line)
                    if isinstance(line, LongDocument):
                        assert len(lines) == 1 and len(line) > 1000
        assert got == whole, cuts
        assert sizes == size + 1
    gz = tmp_path / "doc.txt.gz"
    gz.write_bytes(gzip.compress(data))
    got = [line.text() if isinstance(line, LongDocument) else line
           for lines in iter_lines(Split(str(gz), 0, -1)) for line in lines]
    assert got == whole


@pytest.mark.usefixtures("fastenc")
def test_tally_counts_a_long_document_like_its_text():
    text = _fuzz_text(3, 2000)
    for pretokenizer in (Pretokenizer("gpt2"), Pretokenizer("cl100k", lowercase=True), Pretokenizer("words")):
        whole = pretokenizer.tally()
        whole.add([text])
        pieces = pretokenizer.tally()
        pieces.add([LongDocument(bytearray(text.encode()), piece_bytes=37)])
        assert dict(zip(*pieces.items())) == dict(zip(*whole.items()))


# --- one very long pretoken -------------------------------------------------------------------
def _naive_encode(pretoken: str, tok: Tokenizer) -> list[int]:
    """BPE spelled out: merge the lowest-ranked adjacent pair everywhere it occurs (leftmost
    first), until no pair has a rank: the rule the tokenizer's merges were trained with."""
    ranks = {pair: rank for rank, pair in enumerate(tok.merges)}
    symbols = [bytes([b]) for b in pretoken.encode("utf-8")]
    while len(symbols) > 1:
        pairs = [(ranks[p], p) for p in itertools.pairwise(symbols) if p in ranks]
        if not pairs:
            break
        _, (left, right) = min(pairs)
        out, i = [], 0
        while i < len(symbols):
            if i + 1 < len(symbols) and symbols[i] == left and symbols[i + 1] == right:
                out.append(left + right)
                i += 2
            else:
                out.append(symbols[i])
                i += 1
        symbols = out
    return [tok.token_to_id(symbol) for symbol in symbols]


@pytest.fixture(scope="module")
def runs_tokenizer():
    """A model with many merges of runs of one character, spaces and digits (so that a long run
    merges deep), trained by the naive trainer's rules."""
    counts = {"a" * 40: 50, " " * 33: 40, "1234567890" * 3: 30, "ab" * 9: 20, "x!": 5}
    tok = train_from_counts(counts, TrainerConfig(vocab_size=330, pattern="gpt2"))
    naive = naive_train(counts, vocab_size=330)
    assert [tuple(m) for m in tok.merges] == [tuple(m) for m in naive.merges]
    return tok


@pytest.mark.parametrize("pretoken", ["a" * 100_000, " " * 30_001, "1234567890" * 5_000 + "9", "ab" * 25_000 + "a"])
def test_a_100k_pretoken_encodes_as_the_naive_bpe(runs_tokenizer, pretoken, monkeypatch):
    expected = _naive_encode(pretoken, runs_tokenizer)
    assert runs_tokenizer.encode_pretoken(pretoken) == expected  # compiled BPE when built
    monkeypatch.setenv("BPE_SPARK_ENCODER", "python")
    python_tok = Tokenizer.from_dict(runs_tokenizer.to_dict())
    assert python_tok.encode_pretoken(pretoken) == expected  # the pure-Python heap


@pytest.mark.usefixtures("fastenc")
def test_batch_encoder_encodes_a_long_document_like_its_text(en_tokenizer):
    from bpe_spark.encoding.batch_encoder import BatchEncoder
    from bpe_spark.encoding.options import EncodeOptions

    text = _fuzz_text(11, 3000) + "<|endoftext|> tail"
    doc = LongDocument(bytearray(text.encode()), piece_bytes=100)
    for options in ({}, {"eos_id": 5, "bos_id": 7}):
        encoder = BatchEncoder(en_tokenizer, EncodeOptions(**options))
        assert encoder.compiled
        got = [array.tolist() for array in encoder.encode_long(doc)]
        assert got == [array.tolist() for array in encoder.encode_texts([text])]


@pytest.mark.usefixtures("fastenc")
def test_tally_arrow_items_equal_its_items():
    for pattern in ("gpt2", "words"):  # the compiled counter's buffers, and the Counter
        tally = Pretokenizer(pattern).tally()
        tally.add([_fuzz_text(5, 500), "a b a"])
        pretokens, counts = tally.arrow_items()
        assert (pretokens.to_pylist(), counts.to_pylist()) == tuple(map(list, tally.items()))
