"""The order and the splits of an encoded dataset's documents (``encode --shuffle --seed N
--split validation=0.01``): pure rules on document ids, no Spark.

A document is known by its ``doc_id`` (its number in input order). With a seed, two keyed 64-bit
hashes of the doc id decide everything, whatever the partitioning:

- its place: documents are written in order of ``order_keys`` (63 bits of the hash, then the
  doc id: no ties), and ``buckets`` routes them to ``2**bits`` ranges of that order;
- its split: ``split_of`` maps a second hash to [0, 1) and picks the first split whose
  cumulative fraction exceeds it; the rest is ``train``.

The hash is the splitmix64 finalizer of ``doc_id + k``, with ``k`` the first 8 bytes of
``blake2b(seed, purpose)``: vectorised over numpy arrays.

>>> order_keys(np.arange(4), seed=1).tolist() == order_keys(np.arange(4), seed=1).tolist()
True
>>> parse_splits(["validation=0.5"])
(('validation', 0.5),)
>>> share = (split_of(np.arange(10000), seed=0, splits=(("validation", 0.25),)) == 0).mean()
>>> bool(0.23 < share < 0.27)
True
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Sequence

import numpy as np

from bpe_spark.errors import ConfigError

TRAIN = "train"  # the split of the documents no named split takes
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")
_M1, _M2 = np.uint64(0xBF58476D1CE4E5B9), np.uint64(0x94D049BB133111EB)


def _stream_key(seed: int, purpose: str) -> np.uint64:
    digest = hashlib.blake2b(f"{purpose}:{int(seed)}".encode(), digest_size=8).digest()
    return np.uint64(int.from_bytes(digest, "little"))


def doc_hash(doc_ids: np.ndarray, seed: int, purpose: str = "order") -> np.ndarray:
    """The keyed 64-bit hash (uint64) of each doc id."""
    with np.errstate(over="ignore"):
        z = np.asarray(doc_ids, dtype=np.int64).astype(np.uint64) + _stream_key(seed, purpose)
        z = (z ^ (z >> np.uint64(30))) * _M1
        z = (z ^ (z >> np.uint64(27))) * _M2
        return z ^ (z >> np.uint64(31))


def order_keys(doc_ids: np.ndarray, seed: int) -> np.ndarray:
    """The sort key (int64, >= 0) of each document in a shuffled output; ties go by doc id."""
    return (doc_hash(doc_ids, seed, "order") >> np.uint64(1)).astype(np.int64)


def bucket_bits(tokens: int, shard_tokens: int, limit: int = 16) -> int:
    """``bits`` such that ``2**bits`` buckets hold about ``shard_tokens`` tokens or fewer each.

    >>> bucket_bits(10, 100), bucket_bits(1000, 100)
    (0, 4)
    """
    wanted = max(1, -(-int(tokens) // int(shard_tokens)))
    return min(limit, (wanted - 1).bit_length())


def buckets(keys: np.ndarray, bits: int) -> np.ndarray:
    """The bucket of each order key: its top ``bits`` of 63, so buckets are ranges of the order."""
    return (np.asarray(keys, dtype=np.int64) >> np.int64(63 - bits)) if bits else np.zeros(len(keys), np.int64)


def parse_splits(values: Sequence[str] | None) -> tuple[tuple[str, float], ...]:
    """``["validation=0.01", "test=0.01,dev=0.02"]`` as ``(name, fraction)`` pairs (the rest:
    ``train``); a one-line :class:`~bpe_spark.errors.ConfigError` for anything else."""
    pairs: list[tuple[str, float]] = []
    for value in values or ():
        for item in str(value).split(","):
            name, eq, fraction = item.strip().partition("=")
            name = name.strip()
            if not eq or not name:
                raise ConfigError(f"--split {item.strip()!r}: give NAME=FRACTION, e.g. --split validation=0.01")
            if not _NAME.match(name) or name == TRAIN:
                raise ConfigError(f"--split {item.strip()!r}: the name must be letters, digits, '_', '-' or '.' "
                                  f"and not {TRAIN!r} (train takes the rest)")
            try:
                share = float(fraction)
            except ValueError:
                raise ConfigError(f"--split {item.strip()!r}: {fraction!r} is not a number") from None
            if not 0 < share < 1:
                raise ConfigError(f"--split {item.strip()!r}: the fraction must be > 0 and < 1")
            pairs.append((name, share))
    names = [name for name, _ in pairs]
    if len(set(names)) != len(names):
        raise ConfigError(f"--split names repeat: {names}")
    if sum(share for _, share in pairs) >= 1:
        raise ConfigError(f"--split fractions sum to {sum(s for _, s in pairs):g}: they must leave some for train (< 1)")
    return tuple(pairs)


def check_seed(seed) -> int:
    """The seed (default 0): a non-negative integer, else a one-line ConfigError."""
    if seed is None:
        return 0
    if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
        raise ConfigError(f"seed must be a non-negative integer, got {seed!r}")
    return seed


def split_names(splits: Sequence[tuple[str, float]]) -> list[str]:
    """Split names by index: the named splits, then ``train``."""
    return [name for name, _ in splits] + [TRAIN]


def split_of(doc_ids: np.ndarray, seed: int, splits: Sequence[tuple[str, float]]) -> np.ndarray:
    """The split index (into :func:`split_names`) of each document."""
    if not splits:
        return np.zeros(len(doc_ids), np.int64)
    unit = (doc_hash(doc_ids, seed, "split") >> np.uint64(11)).astype(np.float64) / float(1 << 53)
    edges = np.cumsum([share for _, share in splits])
    return np.searchsorted(edges, unit, side="right").astype(np.int64)
