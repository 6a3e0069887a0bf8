"""T8's corpus: about 4 GB of text with a web-like heavy tail of rare pretokens, built once.

The shared corpora (every line of the four, about 67 MB) are written again and again, each
pass with rare words inserted before seeded word boundaries (spaces): numbers of 1 to 12
digits, camelCase identifiers of two or three English words, misspellings (one seeded edit of
an English word: a letter substituted, dropped, doubled or two swapped), random mixed-case
identifiers (session ids, hashes) and URL-like tokens. A pool of ``pool`` rare words is
generated once; every pool word is inserted once (the singletons of the tail) and further
draws from the pool follow a power law (a few rare words recur often, most stay rare), so
the distinct pretokens are the corpora's plus most of the pool's. Everything comes from one
``numpy`` generator seeded with ``seed``: the same arguments give the same bytes.

    python -m bench.t8_corpus                       # /work/bench-data/t8.txt (or $BPE_SPARK_BENCH_DATA)
    python -m bench.t8_corpus --gigabytes 0.2 --out /tmp/t8-small.txt --count

The file sits outside the repository (its location: ``--out``, else ``$BPE_SPARK_BENCH_DATA``,
else /work/bench-data); ``<file>.json`` beside it records how it was built (and, with
``--count``, its exact distinct gpt2 pretokens, counted by the compiled ``PretokenCounter``).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import time
from collections import Counter
from pathlib import Path

import numpy as np

from bench.inputs import ALL_CORPORA, _read_corpus, _write_once

DEFAULT_DIR = Path(os.environ.get("BPE_SPARK_BENCH_DATA", "/work/bench-data"))
GIGABYTES = 4.0
# rare words generated once, each inserted at least once (bar the few whose word boundary another
# took); about 0.82 new distinct pretokens each (short numbers and misspellings repeat): 11 M
# gave 9,743,478 distinct in all (884,531 of them the corpora's), so 13 M for 10 M and more
POOL = 13_000_000
DRAWS = 30_000_000  # further insertions drawn from the pool by a power law
POWER = 4.0  # a draw is pool[floor(len(pool) * u ** POWER)]: the head recurs, the tail stays rare
SEED = 8
LETTERS = np.frombuffer(b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ", dtype=np.uint8)
KINDS = ("number", "camel", "typo", "ident", "url")
KIND_SHARES = (0.25, 0.25, 0.25, 0.15, 0.10)


def default_path(gigabytes: float = GIGABYTES) -> Path:
    return DEFAULT_DIR / f"t8.{gigabytes:g}gb.seed{SEED}.pool{POOL // 1_000_000}m.txt"


def english_words(text: bytes, limit: int = 60_000) -> list[bytes]:
    """The ``limit`` most frequent lowercase ASCII words (3-12 letters) of ``text``."""
    counts = Counter(re.findall(rb"\b[a-z]{3,12}\b", text))
    return sorted(counts, key=lambda w: (-counts[w], w))[:limit]


def _random_letters(rng: np.random.Generator, n: int, lo: int, hi: int) -> list[bytes]:
    """``n`` random mixed-case letter strings of ``lo`` to ``hi`` letters, vectorized."""
    lengths = rng.integers(lo, hi + 1, n)
    flat = LETTERS[rng.integers(0, len(LETTERS), int(lengths.sum()))].tobytes()
    ends = np.cumsum(lengths)
    starts = ends - lengths
    return [flat[s:e] for s, e in zip(starts.tolist(), ends.tolist())]


def _numbers(rng: np.random.Generator, n: int) -> list[bytes]:
    digits = np.minimum(rng.geometric(0.18, n), 12)  # mostly short numbers, a long tail
    values = rng.integers(0, 10 ** 12, n) % (10 ** digits)
    return [str(v).encode() for v in values.tolist()]


def _camel(rng: np.random.Generator, words: list[bytes], n: int) -> list[bytes]:
    caps = [w.capitalize() for w in words]
    a, b, c = (rng.integers(0, len(words), n).tolist() for _ in range(3))
    three = (rng.random(n) < 0.3).tolist()
    return [words[i] + caps[j] + (caps[k] if t else b"") for i, j, k, t in zip(a, b, c, three)]


def _typos(rng: np.random.Generator, words: list[bytes], n: int) -> list[bytes]:
    picks = rng.integers(0, len(words), n).tolist()
    edits = rng.integers(0, 4, n).tolist()
    where = rng.random(n).tolist()
    letters = LETTERS[rng.integers(0, 26, n)].tobytes()
    out = []
    for word_index, edit, w, letter in zip(picks, edits, where, letters):
        word = words[word_index]
        i = int(w * (len(word) - 1))
        if edit == 0:  # substitute
            out.append(word[:i] + bytes([letter]) + word[i + 1:])
        elif edit == 1:  # drop
            out.append(word[:i] + word[i + 1:])
        elif edit == 2:  # double
            out.append(word[:i + 1] + word[i:])
        else:  # swap two neighbours
            out.append(word[:i] + word[i + 1:i + 2] + word[i:i + 1] + word[i + 2:])
    return out


def _urls(rng: np.random.Generator, words: list[bytes], n: int) -> list[bytes]:
    hosts = _camel(rng, words, n)
    paths = _random_letters(rng, n, 4, 10)
    tlds = (b"com", b"org", b"net", b"io", b"de")
    tld = rng.integers(0, len(tlds), n).tolist()
    return [b"https://www." + h.lower() + b"." + tlds[t] + b"/" + p for h, p, t in zip(hosts, paths, tld)]


def rare_pool(rng: np.random.Generator, words: list[bytes], size: int) -> list[bytes]:
    """``size`` rare words of the five kinds, in a seeded shuffled order."""
    counts = [int(size * share) for share in KIND_SHARES]
    pool = (_numbers(rng, counts[0]) + _camel(rng, words, counts[1]) + _typos(rng, words, counts[2])
            + _random_letters(rng, counts[3], 6, 14) + _urls(rng, words, counts[4]))
    order = rng.permutation(len(pool))
    return [pool[i] for i in order.tolist()]


def build(path: Path, gigabytes: float = GIGABYTES, pool_size: int = POOL, draws: int = DRAWS,
          seed: int = SEED, count: bool = False) -> dict:
    """Write the corpus to ``path`` (see the module docstring); its description, as a dict."""
    started = time.perf_counter()
    rng = np.random.default_rng(seed)
    base = b"".join(_read_corpus(name) for name in ALL_CORPORA)
    target = int(gigabytes * 1e9)
    scale = min(1.0, target / 4e9)  # a smaller corpus gets a proportionally smaller tail
    pool_size, draws = int(pool_size * scale), int(draws * scale)
    pool = rare_pool(rng, english_words(base), pool_size)
    inserted_bytes = (sum(map(len, pool)) + 1) * (1 + draws / max(1, pool_size))
    passes = max(1, round((target - inserted_bytes) / len(base)))
    spaces = np.flatnonzero(np.frombuffer(base, dtype=np.uint8) == 0x20)
    drawn = (pool_size * rng.random(draws) ** POWER).astype(np.int64)
    counter = _counter() if count else None
    written = lines = 0
    with open(path, "wb") as fh:
        for p in range(passes):
            ones = np.arange(p * pool_size // passes, (p + 1) * pool_size // passes)
            extra = drawn[p * draws // passes:(p + 1) * draws // passes]
            chosen = rng.permutation(np.concatenate([ones, extra]))
            at = np.unique(rng.integers(0, len(spaces), len(chosen)))
            chosen = chosen[:len(at)] if len(at) < len(chosen) else chosen
            cuts = spaces[at].tolist()
            pieces = []
            previous = 0
            for cut, index in zip(cuts, chosen.tolist()):
                pieces.append(base[previous:cut])
                pieces.append(b" " + pool[index])
                previous = cut
            pieces.append(base[previous:])
            chunk = b"".join(pieces)
            fh.write(chunk)
            written += len(chunk)
            lines += chunk.count(b"\n")
            if counter is not None:
                counter.add(chunk.decode("utf-8").splitlines(keepends=True))
            print(f"t8 corpus: pass {p + 1}/{passes}, {written / 1e9:.2f} GB, "
                  f"{time.perf_counter() - started:.0f} s", file=sys.stderr, flush=True)
    info = {"bytes": written, "lines": lines, "passes": passes, "pool": pool_size, "draws": draws, "power": POWER,
            "seed": seed, "base_bytes": len(base), "build_seconds": round(time.perf_counter() - started, 1)}
    if counter is not None:
        info["distinct_pretokens_gpt2"] = len(counter)
    return info


def _counter():
    from bpe_spark.native import compiled as _compiled

    counter = _compiled.new_counter("gpt2")
    if counter is None:
        raise SystemExit("--count needs the compiled extension (setup.py build_ext --inplace)")
    return counter


def t8_corpus(path: Path | None = None, gigabytes: float = GIGABYTES, count: bool = False) -> Path:
    """The corpus file, built once (its ``.json`` description written beside it)."""
    path = path or default_path(gigabytes)

    def write(staging: Path) -> None:
        info = build(staging, gigabytes, count=count)
        path.with_name(path.name + ".json").write_text(json.dumps(info, indent=1) + "\n", encoding="utf-8")

    return _write_once(path, write)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.t8_corpus", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--gigabytes", type=float, default=GIGABYTES)
    parser.add_argument("--out", type=Path, default=None, help="the file (default: under $BPE_SPARK_BENCH_DATA)")
    parser.add_argument("--count", action="store_true", help="count the distinct gpt2 pretokens exactly (slower)")
    args = parser.parse_args(argv)
    path = t8_corpus(args.out, args.gigabytes, args.count)
    print(path)
    print(path.with_name(path.name + ".json").read_text(encoding="utf-8"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
