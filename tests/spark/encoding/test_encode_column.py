"""Encoding tasks hand a text column to the compiled encoder as its Arrow buffers when they can
(bpe_spark.spark.encoding.tasks.encode_column): the same ids as through one str per text, for
every string layout, and the str path for what the buffers cannot carry (nulls, invalid UTF-8)."""

from __future__ import annotations

import gzip
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

from bpe_spark import TrainerConfig, train
from bpe_spark.encoding.batch_encoder import BatchEncoder
from bpe_spark.encoding.options import EncodeOptions
from bpe_spark.spark.encoding.tasks import arrow_text, encode_column, narrowed
from bpe_spark.bpe.text import InputTally, utf8_buffers

SAMPLE = Path(__file__).resolve().parents[3] / "data" / "sample" / "tiny_shakespeare.txt.gz"


@pytest.fixture(scope="module")
def encoder():
    with gzip.open(SAMPLE, "rt", encoding="utf-8") as fh:
        lines = fh.read(100_000).splitlines(keepends=True)
    return BatchEncoder(train(lines, TrainerConfig(vocab_size=600)), EncodeOptions(eos_id=0)), lines


def by_str(encoder, column):
    return encoder.encode_texts(arrow_text(column), nulls=column.is_null().to_numpy(zero_copy_only=False))


@pytest.mark.parametrize("layout", ["string", "large_string", "binary", "slice"])
def test_buffers_give_the_ids_of_one_str_per_text(encoder, layout):
    encoder, lines = encoder
    texts = [*lines[:300], "", "naïve café 😀\n"]
    column = {"string": pa.array(texts, pa.string()), "large_string": pa.array(texts, pa.large_string()),
              "binary": pa.array([t.encode() for t in texts], pa.binary()),
              "slice": pa.array(texts, pa.string()).slice(7, 200)}[layout]
    assert utf8_buffers(column) is not None
    for got, want in zip(encode_column(encoder, column), by_str(encoder, column)):
        assert got.tolist() == want.tolist()


def test_nulls_and_invalid_utf8_take_the_str_path(encoder):
    encoder, _ = encoder
    with_null = pa.array(["a b", None, "c"])
    values, offsets, nulls = encode_column(encoder, with_null)
    assert nulls.tolist() == [False, True, False]
    assert values[offsets[0]:offsets[1]].tolist() == encoder.encode_texts(["a b"])[0].tolist()
    invalid = pa.array([b"ok", b"\xff bad"], pa.binary())
    assert utf8_buffers(invalid) is None
    tally = InputTally()
    got = encode_column(encoder, invalid, tally)
    assert tally.replaced == 1
    for a, b in zip(got, by_str(encoder, invalid)):
        assert a.tolist() == b.tolist()


@pytest.mark.parametrize("n", [0, 1, 2, 3, 1000, 3 * (1 << 20) + 7])
def test_a_long_documents_ids_narrow_over_their_own_buffer(n):
    ids = np.random.default_rng(n).integers(0, 65536, n).astype(np.int32)
    writable = ids.copy()
    out = narrowed(writable, pa.uint16())
    assert out.dtype == np.uint16 and out.tolist() == ids.tolist()
    assert n == 0 or np.shares_memory(out, writable)  # no second copy of a long document's ids
    frozen = ids.copy()
    frozen.flags.writeable = False  # the encoder's usual output (over bytes): copied
    assert narrowed(frozen, pa.uint16()).tolist() == ids.tolist()
    assert narrowed(ids, pa.uint32()).tolist() == ids.tolist() and narrowed(ids, pa.int32()) is ids
