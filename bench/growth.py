"""The worst-case growth of encoding: time against the length of one long pretoken.

:func:`growth_exponent` fits log(time) against log(length) over texts of 10k to 1M characters
of one kind (a run of one letter, of spaces, of digits, random letters, random non-space
characters) and returns the slope: 1.0 is linear, 2.0 quadratic. Each time is the median of a
few runs, with the encoder's pretoken cache emptied before each (a cached pretoken costs a
lookup, not BPE), taken by default as the thread's CPU time (``time.thread_time``): on a
shared machine wall time also measures the scheduler. Even a plain linear pass over the text
that builds a Python list measures about 1.1 here, from the processor's caches (10k characters
fit in L2, 1M do not). ``python -m bench.growth`` prints the exponents of GPT-2 and cl100k in
process (``TIKTOKEN_CACHE_DIR`` names tiktoken's cache, for cl100k's file), and tiktoken's
beside them when ``--peer`` is given.
"""

from __future__ import annotations

import argparse
import hashlib
import math
import os
import random
import statistics
import time
from collections.abc import Callable
from pathlib import Path

SIZES = (10_000, 30_000, 100_000, 300_000, 1_000_000)
KINDS = ("one_letter", "spaces", "digits", "random_letters", "random_nonspace")
PEERS = Path(__file__).resolve().parents[2] / "shared" / "peer-fixtures"
_CL100K_URL = "https://openaipublic.blob.core.windows.net/encodings/cl100k_base.tiktoken"


def long_text(kind: str, n: int, seed: int = 0) -> str:
    """``n`` characters of one worst-case kind."""
    if kind == "one_letter":
        return "a" * n
    if kind == "spaces":
        return " " * n
    if kind == "digits":
        return "7" * n
    rng = random.Random(seed)
    if kind == "random_letters":
        return "".join(rng.choices("abcdefghijklmnopqrstuvwxyz", k=n))
    if kind == "random_nonspace":
        alphabet = [chr(c) for c in range(33, 127)] + list("éßж中文한😀")
        return "".join(rng.choices(alphabet, k=n))
    raise ValueError(f"unknown kind {kind!r}; choose one of {KINDS}")


def exponent(sizes, seconds) -> float:
    """The least-squares slope of log(seconds) against log(sizes)."""
    xs = [math.log(s) for s in sizes]
    ys = [math.log(max(t, 1e-9)) for t in seconds]
    mx, my = statistics.fmean(xs), statistics.fmean(ys)
    return sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sum((x - mx) ** 2 for x in xs)


def uncached(tok) -> Callable[[str], list[int]]:
    """``tok.encode_ordinary`` with its pretoken caches emptied before each call."""

    def encode(text: str) -> list[int]:
        fast = tok._fast_encoder()
        if fast is not None:
            fast.clear_cache()
        tok._cache.clear()
        return tok.encode_ordinary(text)

    return encode


def growth_exponent(encode: Callable[[str], object], kind: str, sizes=SIZES, repeats: int = 3,
                    clock: Callable[[], float] = time.thread_time) -> tuple[float, list[float]]:
    """(exponent, median seconds per size) of ``encode`` over texts of ``kind``."""
    times = []
    for n in sizes:
        text = long_text(kind, n)
        runs = []
        for _ in range(repeats):
            start = clock()
            encode(text)
            runs.append(clock() - start)
        times.append(statistics.median(runs))
    return exponent(sizes, times), times


def models():
    """Our GPT-2 (vocab.json + merges.txt) and cl100k (tiktoken's file), by name."""
    from bpe_spark import Tokenizer

    cache = Path(os.environ.get("TIKTOKEN_CACHE_DIR", PEERS / "tiktoken_cache"))
    cl100k = cache / hashlib.sha1(_CL100K_URL.encode()).hexdigest()
    return {"gpt2": Tokenizer.load(PEERS / "cs336" / "gpt2_vocab.json"), "cl100k": Tokenizer.load(cl100k)}


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--peer", action="store_true", help="also tiktoken's exponents")
    parser.add_argument("--kinds", nargs="*", default=list(KINDS))
    parser.add_argument("--max", type=int, default=SIZES[-1], help="the largest size")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--wall", action="store_true", help="wall time instead of the thread's CPU time")
    args = parser.parse_args(argv)
    os.environ.setdefault("TIKTOKEN_CACHE_DIR", str(PEERS / "tiktoken_cache"))
    sizes = [n for n in SIZES if n <= args.max]
    peers = {}
    if args.peer:
        import tiktoken

        peers = {"gpt2": tiktoken.get_encoding("gpt2"), "cl100k": tiktoken.get_encoding("cl100k_base")}
    for name, tok in models().items():
        for kind in args.kinds:
            clock = time.perf_counter if args.wall else time.thread_time
            ours, times = growth_exponent(uncached(tok), kind, sizes, args.repeats, clock)
            line = f"{name:7} {kind:16} ours {ours:.3f} ({times[-1]:.3f} s at {sizes[-1]:,})"
            if name in peers:
                theirs, peer_times = growth_exponent(peers[name].encode_ordinary, kind, sizes, 1, clock)
                line += f"  tiktoken {theirs:.3f} ({peer_times[-1]:.3f} s)"
            print(line, flush=True)


if __name__ == "__main__":
    main()
