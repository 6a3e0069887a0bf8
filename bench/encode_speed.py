"""Encoding speed in process, ours beside tiktoken (and gigatoken when installed), same run.

``python -m bench.encode_speed`` encodes the first MB of en_books with GPT-2 and cl100k, one
thread each: ``encode_ordinary`` per line against tiktoken's per line, and our flat path
(``encode_ordinary_flat``, what Spark uses) against tiktoken's ``encode_ordinary_batch`` with
one thread and gigatoken's ``encode_batch_list`` without parallelism. The systems alternate
round by round, each figure is the median of the rounds, and every system's ids are checked
against tiktoken's first. A quick look for the encoder's author; ``make bench`` is the
benchmark of record (fresh processes, every peer).
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import os
import statistics
import tempfile
import time
from pathlib import Path

from bench.growth import PEERS, models

CORPORA = Path(__file__).resolve().parents[2] / "shared" / "corpora"
_CL100K_URL = "https://openaipublic.blob.core.windows.net/encodings/cl100k_base.tiktoken"


def corpus_lines(megabytes: float) -> list[str]:
    with gzip.open(CORPORA / "en_books.txt.gz", "rt", encoding="utf-8", newline="") as fh:
        return fh.read(int(megabytes * 1_000_000)).splitlines(keepends=True)


def _gigatoken(name: str, folder: Path, enc):
    """gigatoken's tokenizer of a model (it picks the pattern by OpenAI's file name), or None."""
    try:
        import gigatoken
    except ImportError:
        return None
    from bpe_spark.formats.tiktoken_file import rank_lines

    path = folder / ("r50k_base.tiktoken" if name == "gpt2" else "cl100k_base.tiktoken")
    if name == "gpt2":
        with path.open("wb") as fh:
            fh.writelines(rank_lines({rank: token for token, rank in enc._mergeable_ranks.items()}))
    else:
        cache = Path(os.environ["TIKTOKEN_CACHE_DIR"])
        path.write_bytes((cache / hashlib.sha1(_CL100K_URL.encode()).hexdigest()).read_bytes())
    return gigatoken.Tokenizer.from_tiktoken(str(path), special_tokens={})


def systems(tok, enc, giga, lines: list[str]) -> dict:
    """name -> (the timed call: the system's own output, the ids it gave as one flat list)."""
    import numpy as np

    def flat(rows) -> list[int]:
        return [i for ids in rows for i in ids]

    out = {
        "ours line": (lambda: [tok.encode_ordinary(line) for line in lines], flat),
        "tiktoken line": (lambda: [enc.encode_ordinary(line) for line in lines], flat),
        "ours flat": (lambda: tok.encode_ordinary_flat(lines), lambda result: result[0].tolist()),
        "tiktoken batch": (lambda: enc.encode_ordinary_batch(lines, num_threads=1), flat),
    }
    if giga is not None:
        out["gigatoken batch"] = (lambda: giga.encode_batch_list(lines, parallel=False),
                                  lambda rows: flat(np.asarray(ids).tolist() for ids in rows))
        out["gigatoken line"] = (lambda: [giga.encode(line) for line in lines],
                                 lambda rows: flat(np.asarray(ids).tolist() for ids in rows))
    return out


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--megabytes", type=float, default=1.0)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--cpu", action="store_true",
                        help="the process's CPU time instead of wall time (a shared machine)")
    args = parser.parse_args(argv)
    os.environ.setdefault("TIKTOKEN_CACHE_DIR", str(PEERS / "tiktoken_cache"))
    import tiktoken

    lines = corpus_lines(args.megabytes)
    size = sum(len(line.encode("utf-8")) for line in lines) / 1e6
    folder = Path(tempfile.mkdtemp(prefix="bpe-spark-speed-"))
    encodings = {"gpt2": "gpt2", "cl100k": "cl100k_base"}
    for name, tok in models().items():
        enc = tiktoken.get_encoding(encodings[name])
        giga = _gigatoken(name, folder, enc)
        calls = systems(tok, enc, giga, lines)
        expected = calls["tiktoken line"][1](calls["tiktoken line"][0]())
        for system, (call, ids_of) in calls.items():
            assert ids_of(call()) == expected, f"{name} {system}: ids differ from tiktoken's"
        seconds: dict[str, list[float]] = {system: [] for system in calls}
        clock = time.process_time if args.cpu else time.perf_counter
        for _ in range(args.rounds):
            for system, (call, _) in calls.items():
                start = clock()
                call()
                seconds[system].append(clock() - start)
        rate = {system: size / statistics.median(times) for system, times in seconds.items()}
        print(f"{name}: {size:.2f} MB, {len(lines):,} lines, {args.rounds} rounds, medians of "
              f"{'CPU' if args.cpu else 'wall'} time")
        for system, mb_s in rate.items():
            print(f"  {system:16} {mb_s:7.1f} MB/s")
        print(f"  ours line / tiktoken line   {rate['ours line'] / rate['tiktoken line']:.2f}x")
        print(f"  ours flat / tiktoken batch  {rate['ours flat'] / rate['tiktoken batch']:.2f}x")
        if giga is not None:
            print(f"  ours flat / gigatoken batch {rate['ours flat'] / rate['gigatoken batch']:.2f}x")
            print(f"  ours line / gigatoken line  {rate['ours line'] / rate['gigatoken line']:.2f}x")


if __name__ == "__main__":
    main()
