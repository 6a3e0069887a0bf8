"""C1, training speed at scale on one machine: counting on Spark against the compiled counter,
the merge phase on millions of distinct pretokens, and ``bpe-spark train`` end to end against
gigatoken's ``train_bpe`` (the fastest single-machine trainer) and ``tokenizers``, on the same
two cores and the same file.

    python -m bench.run --cases C1            # the 1 GB corpus (bench.t8_corpus --gigabytes 1.0)
    BPE_SPARK_C1_GIGABYTES=4 python -m bench.run --cases C1   # T8's 4 GB corpus

- The corpus: :mod:`bench.t8_corpus` at ``BPE_SPARK_C1_GIGABYTES`` (default 1.0: 12.7 M lines,
  3.7 M distinct GPT-2 pretokens), vocabulary 32,000 (64,000 at 4 GB, T8's).
- Each side runs in a fresh process under :mod:`bench.procmon`, ``--repeat`` times, alternating
  (ABBA), medians: ``bpe-spark train --master local[2]`` (its ``time:`` line gives the count and
  merge phases), gigatoken's ``train_bpe`` (2 threads; it prints its pretokenization time, the
  rest is its merging), and the compiled counter on one thread over the same file, read as the
  Spark tasks read it (the rate Spark's counting is held to: MB/s per core at least 0.8 of it).
- ``tokenizers``' BpeTrainer (2 threads) once, under T8's address-space limit and timeout
  (:func:`bench.t8._peer`): its time and peak, or what stopped it; its merges are the reference
  both trainers' digests are compared with.
"""

from __future__ import annotations

import os
import re

from bench.run import SPARK_CORES, Context, Row, alternate, median, run_cli, run_worker
from bench.t8_corpus import t8_corpus

WORKERS = "bench.scale_workers"
GIGABYTES = float(os.environ.get("BPE_SPARK_C1_GIGABYTES", "1.0"))
COUNT_TARGET = 0.8  # Spark's counting, MB/s per core, against the compiled counter on one thread
TRAIN_TARGET = {1.0: 0.6, 4.0: 0.5}  # bpe-spark train's wall time against gigatoken's


def _phases(line: str) -> dict[str, float]:
    """``{"count": s, "merge": s, ...}`` from the CLI's ``time: count 69.02 s, ...`` line."""
    return {name: float(value) for name, value in re.findall(r"(\w+) ([0-9.]+) s", line)}


def case_c1(ctx: Context) -> None:
    gigabytes = 0.2 if ctx.quick else GIGABYTES
    vocab = 8000 if ctx.quick else (64_000 if gigabytes >= 4 else 32_000)
    corpus = t8_corpus(gigabytes=gigabytes)
    size = corpus.stat().st_size
    out = ctx.scratch / "C1-model"

    def ours():
        argv = ["train", "--input", str(corpus), "--vocab-size", str(vocab), "--out", str(out),
                "--master", f"local[{SPARK_CORES}]", "--overwrite", "--no-report"]
        sample = run_cli(argv, event_dir=ctx.scratch / "C1-events")
        sample.result["phases_s"] = _phases(sample.result["phases"])
        sample.result["digest"] = run_worker("model_merges", {"model": str(out)}).result["digest"]
        return sample

    def giga():
        return run_worker("gigatoken_train", {"file": str(corpus), "vocab_size": vocab}, module=WORKERS)

    mine, theirs = alternate(ctx.repeat, ours, giga)
    counters = [run_worker("inprocess_count", {"file": str(corpus)}, threads=1, module=WORKERS)
                for _ in range(ctx.repeat)]
    from bench.t8 import _peer

    hf_run, hf = _peer(corpus, vocab)
    reference = hf.get("digest")

    distinct = counters[0].result["distinct"]
    label = f"{size / 1e9:.1f} GB ({distinct / 1e6:.1f} M distinct)"
    counter_rate = median(size / 1e6 / s.result["seconds"] for s in counters)
    count_s = median(s.result["phases_s"].get("count", 0.0) for s in mine)
    per_core = size / 1e6 / count_s / SPARK_CORES if count_s else None
    ctx.add(Row("C1", f"count {label} on local[{SPARK_CORES}], MB/s per core", per_core, counter_rate,
                "compiled counter, 1 thread", "MB/s", per_core / counter_rate if per_core else None,
                f">= {COUNT_TARGET}", per_core is not None and per_core / counter_rate >= COUNT_TARGET,
                note=f"count phase {count_s:.1f} s (median of {len(mine)}); the counter alone "
                     f"{median(s.result['seconds'] for s in counters):.1f} s on one thread; "
                     f"Spark: {mine[len(mine) // 2].result.get('spark', '')}"))

    merge_s = median(s.result["phases_s"].get("merge", 0.0) for s in mine)
    giga_merge = [s.result["seconds"] - s.result["pretokenize_seconds"] for s in theirs
                  if s.result.get("pretokenize_seconds") is not None]
    giga_merge_s = median(giga_merge) if giga_merge else None
    ctx.add(Row("C1", f"merge phase, {distinct / 1e6:.1f} M distinct to {vocab}", merge_s, giga_merge_s,
                "gigatoken's merging (its total less its pretokenization)", "s",
                merge_s / giga_merge_s if giga_merge_s else None,
                note=f"ours: collect {median(s.result['phases_s'].get('collect', 0.0) for s in mine):.1f} s "
                     f"before it; the engine's words, pairs and merges on the driver"))

    wall = median(s.wall_seconds for s in mine)
    giga_wall = median(s.wall_seconds for s in theirs)
    same = None
    if reference:
        same = all(s.result["digest"] == reference for s in mine)
    giga_same = "gigatoken's merges equal tokenizers'" if reference and all(
        s.result["digest"] == reference for s in theirs) else (
        "gigatoken's merges differ from tokenizers'" if reference else "tokenizers did not finish")
    target = TRAIN_TARGET.get(round(gigabytes, 1))
    ratio = wall / giga_wall if giga_wall else None
    ctx.add(Row("C1", f"train {label} to {vocab}, end to end", wall, giga_wall, "gigatoken train_bpe (2 threads)",
                "s", ratio, f"<= {target}" if target else "", (ratio <= target) if target and ratio else None, same,
                note=f"ours: {mine[len(mine) // 2].result['phases']}; driver peak "
                     f"{median(s.peak_mb['root'] for s in mine):,.0f} MiB, JVM "
                     f"{median(s.peak_mb['jvm'] for s in mine):,.0f} MiB; gigatoken peak "
                     f"{median(s.peak_mb['root'] for s in theirs):,.0f} MiB; {giga_same}"))
    ctx.add(Row("C1", f"tokenizers on the same file to {vocab}", None, hf_run.wall_seconds if reference else None,
                "tokenizers (2 threads)", "s",
                note=f"tokenizers {hf['outcome']} after {hf_run.wall_seconds:.0f} s wall; its peak "
                     f"{hf_run.peak_mb['root']:,.0f} MiB",
                samples={"peak_mb": hf_run.peak_mb, "outcome": hf["outcome"]}))
