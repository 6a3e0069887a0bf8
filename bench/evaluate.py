"""Case V1 of ``make bench`` (issue 42): ``bpe-spark evaluate`` of three models in one pass over
every shared corpus repeated to about 400 MB (T2's file), against ``bpe-spark encode`` of the same
file with one of them, in MB/s per core. Long (minutes): it runs only when named
(``python -m bench.run --cases V1``).

The three models: GPT-2 (the CS336 fixture's vocab.json + merges.txt), cl100k_base (tiktoken's
cached file) and a model trained here (en_books' first 4 MB, vocabulary 8,192: T-cases'
``inputs.trained_model``). Each command runs once, end to end, in a fresh process on
``local[2]`` (the session's start included in both); MB/s per core = the file's bytes / the
wall seconds / ``SPARK_CORES``. The peer is ``encode`` with cl100k to binary shards (the one-model
job a user would otherwise run once per model). The evaluation's figures (bytes per token of
each model) are in the row's note.
"""

from __future__ import annotations

import json

from bench import inputs
from bench.run import SPARK_CORES, Context, Row, run_cli

CL100K_FILE = "9b5ad71b2ce5302211f9c61530b329a4922fc6a4"  # tiktoken's cache name for cl100k_base
TRAINED_VOCAB = 8192


def models() -> list[tuple[str, str]]:
    """``(name, path)`` of the three models compared."""
    trained, _ = inputs.trained_model(inputs.en_books_text(True), TRAINED_VOCAB)
    return [("gpt2", str(inputs.PEERS / "cs336" / "gpt2_vocab.json")),
            ("cl100k", str(inputs.private_tiktoken_cache() / CL100K_FILE)),
            (f"en{TRAINED_VOCAB // 1024}k", str(trained))]


def case_v1(ctx: Context) -> None:
    corpus = inputs.big_corpus_text(ctx.quick)
    megabytes = corpus.stat().st_size / 1e6
    named = models()
    spark = ["--master", f"local[{SPARK_CORES}]", "--progress", "off"]
    out = ctx.scratch / "V1-evaluation"
    evaluate = ["evaluate", *[arg for name, path in named for arg in ("--model", f"{name}={path}")],
                "--input", str(corpus), "--out", str(out), "--overwrite", *spark]
    encode = ["encode", "--model", named[1][1], "--input", str(corpus), "--out", str(ctx.scratch / "V1-ids"),
              "--output-format", "bin", "--overwrite", *spark]
    ours = run_cli(evaluate)
    peer = run_cli(encode)
    figures = json.loads((out / "evaluation.json").read_text(encoding="utf-8"))
    ours_rate = megabytes / ours.wall_seconds / SPARK_CORES
    peer_rate = megabytes / peer.wall_seconds / SPARK_CORES
    said = ", ".join(f"{m['name']} {m['bytes_per_token']:.3f} B/token, {m['round_trip_failures']} round-trip failures"
                     for m in figures["models"])
    ctx.add(Row("V1", f"evaluate 3 models, {megabytes:,.0f} MB: MB/s per core", ours_rate, peer_rate,
                "encode, 1 model (cl100k)", "MB/s", ours_rate / peer_rate, "", None, None,
                note=(f"`bpe-spark {' '.join(evaluate[:1])} --model gpt2=... --model cl100k=... --model "
                      f"{named[2][0]}=... --input {corpus.name} --out ... --master local[2]`: {ours.wall_seconds:.0f} s "
                      f"end to end, against `bpe-spark encode --model cl100k --output-format bin`: "
                      f"{peer.wall_seconds:.0f} s; {figures['documents']:,} documents; {said}"),
                samples={"evaluate_seconds": ours.wall_seconds, "encode_seconds": peer.wall_seconds,
                         "evaluate_peak_mb": ours.peak_mb, "encode_peak_mb": peer.peak_mb}))
