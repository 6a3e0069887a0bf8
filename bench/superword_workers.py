"""The measured programs of cases S1 and S2 (:mod:`bench.superword`), one per child process.

``python -m bench.superword_workers TASK JSON_ARGS`` runs one task and prints one ``BENCH_RESULT``
line, as :mod:`bench.workers` does.

- ``train``: one model in process, ``bpe_spark.train(lines, TrainerConfig(vocab_size=V[,
  superword_transition=T]))`` on a training file, then ``save``; the ``train()`` call's seconds,
  the model's stats and (SuperBPE) its ``metadata["superword"]`` (both stages' seconds and count
  tables).
- ``check``: one corpus's held-out lines against its models (untimed): bytes per token
  (UTF-8 bytes / ``len(tok.encode(line))`` summed), whether each SuperBPE model round-trips every
  line (``decode(encode(x)) == x``) and whether its first T merges equal the plain model's first T
  (stage 1 is plain BPE), and whether plain BPE at the smaller vocabulary is the larger one's prefix.
- ``encode_speed``: in one process, each (corpus, model) pair's held-out text encoded with
  ``Tokenizer.encode_ordinary`` per line (as :func:`bench.workers.ours_encode_inprocess`): once
  to warm up, then the median of 3 timed passes, in MB/s, with the ids' digest; then, untimed
  above, the Python pretokenizer's split of the same lines alone (where SuperBPE's time goes).
- ``count_distinct`` (S2's driver budget): both stages' distinct pretokens of a file, once.
"""

from __future__ import annotations

import statistics
import sys
import time

from bench.workers import IdDigest, _lines, run_task


def train(args: dict) -> dict:
    from bpe_spark import TrainerConfig
    from bpe_spark import train as train_model
    from bpe_spark.training.engine import compiled_core_available

    lines = _lines(args["file"])
    cfg = TrainerConfig(vocab_size=args["vocab_size"], superword_transition=args.get("transition"))
    started = time.perf_counter()
    tok = train_model(lines, cfg)
    seconds = time.perf_counter() - started
    tok.save(args["out"], overwrite=True)
    return {"seconds": seconds, "stats": tok.metadata.get("stats") or {},
            "superword": tok.metadata.get("superword"), "vocab_size": tok.vocab_size, "merges": len(tok.merges),
            "bytes": sum(len(line.encode("utf-8")) for line in lines),
            "engine": "compiled" if compiled_core_available() else "python"}


def check(args: dict) -> dict:
    """``args``: ``heldout`` (a file), ``models`` ({label: {"model": dir, "plain": label of the plain
    model of its vocabulary or None, "transition": T or None}}), ``prefix`` ([small, large] plain labels)."""
    from bpe_spark import Tokenizer

    lines = _lines(args["heldout"])
    size = sum(len(line.encode("utf-8")) for line in lines)
    toks = {label: Tokenizer.load(spec["model"]) for label, spec in args["models"].items()}
    out = {"bytes": size, "lines": len(lines), "models": {}}
    for label, spec in args["models"].items():
        tok = toks[label]
        ids = [tok.encode(line) for line in lines]
        tokens = sum(map(len, ids))
        row = {"tokens": tokens, "bytes_per_token": size / tokens}
        if spec.get("transition") is not None:
            row["round_trips"] = all(tok.decode(x) == line for x, line in zip(ids, lines))
            plain = toks[spec["plain"]]
            first = spec["transition"]
            row["stage1_is_plain"] = (len(tok.merges) >= first and len(plain.merges) >= first
                                      and tok.merges[:first] == plain.merges[:first])
        out["models"][label] = row
    if args.get("prefix"):
        small, large = (toks[label].merges for label in args["prefix"])
        out["plain_prefix_stable"] = large[: len(small)] == small
    return out


def encode_speed(args: dict) -> dict:
    """``args["runs"]``: [{"label", "model", "file"}, ...], each timed in turn in this process."""
    from bpe_spark import Tokenizer

    out = {}
    for spec in args["runs"]:
        tok = Tokenizer.load(spec["model"])
        lines = _lines(spec["file"])
        size = sum(len(line.encode("utf-8")) for line in lines)
        encode = tok.encode_ordinary
        rows = [encode(line) for line in lines]  # warm up (not a sample)
        seconds = []
        for _ in range(int(args.get("repeat", 3))):
            started = time.perf_counter()
            rows = [encode(line) for line in lines]
            seconds.append(time.perf_counter() - started)
        digest = IdDigest()
        for row in rows:
            digest.add(row)
        middle = statistics.median(seconds)
        out[spec["label"]] = {"seconds": middle, "runs": seconds, "bytes": size, "mb_per_s": size / 1e6 / middle,
                              "tokens": digest.tokens, "digest": digest.hexdigest(), "pattern": tok.pattern,
                              **_split_alone(tok, lines)}
    return out


def _split_alone(tok, lines: list[str]) -> dict:
    """Where the time goes, untimed above: whether the tokenizer took its one-call compiled path
    (split and encode in native code) and the pretokenizer's split alone, once (seconds; the
    Python ``regex`` split that path skips). Private attributes: absent ones leave this empty."""
    pretokenizer = getattr(tok, "_pretokenizer", None)
    if pretokenizer is None:
        return {}
    out = {"compiled_line": getattr(tok, "_line", None) is not None}
    split = pretokenizer.split_ordinary
    started = time.perf_counter()
    for line in lines:
        split(line)
    out["split_seconds"] = time.perf_counter() - started
    return out


def count_distinct(args: dict) -> dict:
    """Both stages' distinct pretokens of a file (stage 1: gpt2; stage 2: the superbpe preset)."""
    from bpe_spark import TrainerConfig
    from bpe_spark.bpe.pretokenize import Pretokenizer
    from bpe_spark.training.superword import count_superwords

    lines = _lines(args["file"])
    cfg = TrainerConfig(vocab_size=1000, superword_transition=500)  # only the patterns matter here
    started = time.perf_counter()
    first = len(Pretokenizer.from_config(cfg).count(lines))
    second = len(count_superwords(lines, cfg))
    return {"stage1": first, "stage2": second, "seconds": time.perf_counter() - started}


TASKS = {"train": train, "check": check, "encode_speed": encode_speed, "count_distinct": count_distinct}


def main(argv: list[str]) -> int:
    return run_task(TASKS, argv)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
