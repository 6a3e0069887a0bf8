"""The worker tasks of case C1 (:mod:`bench.scale_speed`), each run in a fresh process by
``python -m bench.scale_workers TASK JSON``:

- ``inprocess_count``: the compiled counter on one thread over the file, read as the Spark tasks
  read it (``text_splits.iter_lines``): the rate counting on Spark is measured against;
- ``gigatoken_train``: gigatoken's ``train_bpe`` (tie-break huggingface) on the file, one
  document per line; its own pretokenization time (it prints it on stderr) and its merges' digest in
  ``tokenizers``' display form.
"""

from __future__ import annotations

import os
import re
import sys
import tempfile
import time

from bench.workers import _digest_merges, run_task


def inprocess_count(args: dict) -> dict:
    from bpe_spark.bpe.pretokenize import Pretokenizer
    from bpe_spark.spark.read import text_splits

    source = text_splits.TextSource(files=(args["file"],))
    started = time.perf_counter()
    tally = Pretokenizer(args.get("pattern", "gpt2")).tally()
    size = 0
    for split in text_splits.plan_splits(source, 1):
        for lines, nbytes in text_splits.iter_lines(split, with_bytes=True, arrow=True):
            tally.add(lines)
            size += nbytes
    seconds = time.perf_counter() - started
    return {"seconds": seconds, "bytes": size, "distinct": len(tally)}


def gigatoken_train(args: dict) -> dict:
    import gigatoken

    from bpe_spark.bpe.symbols import bytes_to_display

    with tempfile.TemporaryFile(mode="w+") as log:  # it prints its phases on stderr (fd 2)
        saved = os.dup(2)
        os.dup2(log.fileno(), 2)
        try:
            started = time.perf_counter()
            _, merges = gigatoken.train_bpe(gigatoken.TextFileSource([args["file"]], separator=b"\n"),
                                            args["vocab_size"], [], tie_breaking="huggingface")
            seconds = time.perf_counter() - started
        finally:
            sys.stderr.flush()
            os.dup2(saved, 2)
            os.close(saved)
        log.seek(0)
        printed = log.read()
    found = re.search(r"Pretokenization took ([0-9.]+)(µs|ms|s)", printed)
    pretokenize = float(found.group(1)) / {"µs": 1e6, "ms": 1e3, "s": 1}[found.group(2)] if found else None
    shown = [f"{bytes_to_display(a)} {bytes_to_display(b)}" for a, b in merges]
    return {"seconds": seconds, "pretokenize_seconds": pretokenize, "merges": len(shown),
            "digest": _digest_merges(shown)}


TASKS = {"inprocess_count": inprocess_count, "gigatoken_train": gigatoken_train}


def main(argv: list[str]) -> int:
    return run_task(TASKS, argv)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
