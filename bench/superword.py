"""S1 and S2, SuperBPE (superword training, issue deliverables): compression and encode speed
against plain BPE of the same size (S1), and scale on Spark (S2).

``python -m bench.run --cases S1`` (``--quick``: 4,000 and 8,000 on about 2 MB a corpus, a
minute or two; full: 32,000 and 64,000, under ten minutes); ``python -m bench.run --cases S2``
(a long case, like T8: only when named; ``--quick``: 40 MB).

S1, in process, each model trained in a fresh worker process (:mod:`bench.superword_workers`)
under :mod:`bench.procmon`:

- Inputs: en_books and multilingual, each split into its first 90% of lines (training; quick:
  about its first 2 MB) and its last 10% (held out), with X1's :func:`bench.extend.split_lines`.
  multilingual is grouped by source: its last 10% of lines (0.8 MB) hold text its training part
  lacks (e.g. emoji names, more languages' declarations), so its rows measure transfer.
- Per corpus and vocabulary V (32,000 and 64,000; quick 4,000 and 8,000): plain BPE
  ``TrainerConfig(vocab_size=V)`` and SuperBPE ``TrainerConfig(vocab_size=V,
  superword_transition=T)`` with T = round(r * (V - 256)) for r = 0.9 (the paper's ratio) and
  r = 0.4 (its most compressing, t=80k of 200k). Plain BPE is trained at both sizes (seconds
  each); that the smaller is the larger's prefix is checked, not assumed.
- Rows: bytes per token on the held-out part (SuperBPE / plain, same V) beside the paper's
  figures; training time (SuperBPE vs plain, each stage's seconds and count table in the note);
  encode speed of the largest plain and SuperBPE (0.9) models in one process (warm once, median
  of 3; target: SuperBPE >= 0.5 of plain). Checks (``same_output``): every SuperBPE model
  round-trips the held-out lines, and its first T merges equal the plain model's.

S2: ``bpe-spark train`` (local[2], spark.driver.memory=2g) on about 400 MB (every shared corpus,
concatenated and repeated: :func:`bench.inputs.big_corpus_text`, T2's file) to 32,000 with
transition 28,800, at a driver budget of 20% of stage 2's distinct pretokens (counted once in
process on the corpora once, cached), which forces stage 2 into exact rounds. Rows: wall time,
each stage's seconds, stage 2's mode, rounds and count table, the driver's and the JVM's peaks
(target: driver < 2 GB).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from bench import inputs
from bench.extend import head_lines, split_lines
from bench.procmon import monitored
from bench.run import (
    SPARK_CORES,
    BenchError,
    Context,
    Row,
    Sample,
    _child_env,
    bpe_spark_command,
    run_worker,
)

CORPORA = ("en_books", "multilingual")
QUICK_BYTES = 2_000_000  # of each corpus's training part, in quick mode
QUICK_HELD_BYTES = 1_000_000  # of each held-out part, in quick mode
RATIOS = (0.9, 0.4)  # SuperBPE's transition, a fraction of the merges (the paper's t=180k and t=80k of 200k)
ENCODE_TARGET = 0.5  # SuperBPE's encode MB/s / plain's, same vocabulary
WORKERS = "bench.superword_workers"
PAPER = ("the paper (SuperBPE, Liu et al. 2025), 200k vocabulary, 10 GB of OLMo2 training text, 1 GB held out: "
         "BPE 4.457 bytes/token, SuperBPE t=180k 6.092 (-26.8% tokens), t=80k 6.634 (-32.8%)")
HELD_OUT_NOTES = {"multilingual": "multilingual's held-out lines (its last 10%) are sources its training part "
                                   "lacks (emoji names, other languages): out of domain"}
DIFFERENCES = ("here: {train_mb:.0f} MB of training text, not 10 GB; vocabulary {vocab:,}, not 200k; stage 2 "
               "splits with the reference scripts' current regex (bpe-spark's superbpe preset), where the "
               "paper-era one also capped superwords at 4 words and forbade ':␠' inside a token: bpe-spark "
               "applies neither cap")

S2_VOCAB, S2_TRANSITION = 32_000, 28_800
S2_QUICK_VOCAB, S2_QUICK_TRANSITION = 8_000, 7_200
S2_BUDGET_FRACTION = 0.2  # of stage 2's distinct pretokens
DRIVER_LIMIT_MB = 2048
S2_TIMEOUT = float(os.environ.get("BPE_SPARK_S2_TIMEOUT", "3600"))


def vocabularies(quick: bool) -> tuple[int, int]:
    return (4_000, 8_000) if quick else (32_000, 64_000)


def transition(vocab_size: int, ratio: float, alphabet: int = 256) -> int:
    """SuperBPE's transition: ``ratio`` of the merges (the paper's t = 0.9 of the vocabulary).

    >>> transition(32_000, 0.9), transition(64_000, 0.4)
    (28570, 25498)
    """
    return round(ratio * (vocab_size - alphabet))


def reduction(plain_bpt: float, super_bpt: float) -> float:
    """The fraction of tokens SuperBPE saves on the same text: 1 - plain / super bytes per token.

    >>> round(reduction(4.457, 6.092), 3)
    0.268
    """
    return 1 - plain_bpt / super_bpt


def s1_inputs(quick: bool) -> dict[str, tuple[Path, Path]]:
    """Each corpus's training part and held-out part, built once under bench-results/cache/."""
    out = {}
    for name in CORPORA:
        size = "2mb" if quick else "full"
        train = inputs.CACHE / f"s1.train.{name}.{size}.txt"
        held = inputs.CACHE / f"s1.heldout.{name}.{'1mb' if quick else 'full'}.txt"

        def build_train(path: Path, name=name) -> None:
            part = split_lines(inputs._read_corpus(name))[0]
            path.write_bytes(head_lines(part, QUICK_BYTES) if quick else part)

        def build_held(path: Path, name=name) -> None:
            part = split_lines(inputs._read_corpus(name))[1]
            path.write_bytes(head_lines(part, QUICK_HELD_BYTES) if quick else part)

        out[name] = (inputs._write_once(train, build_train), inputs._write_once(held, build_held))
    return out


def _label(vocab: int, ratio: float | None) -> str:
    return f"plain-{vocab}" if ratio is None else f"super{ratio:g}-{vocab}"


def _train(ctx: Context, name: str, text: Path, vocab: int, ratio: float | None) -> tuple[Path, Sample]:
    out = ctx.scratch / f"S1-{name}-{_label(vocab, ratio)}"
    args = {"file": str(text), "vocab_size": vocab, "out": str(out)}
    if ratio is not None:
        args["transition"] = transition(vocab, ratio)
    return out, run_worker("train", args, module=WORKERS)


def _table(stage: dict) -> str:
    return (f"{stage['distinct_pretokens']:,} distinct pretokens ({stage['pretokens']:,} in all, "
            f"{stage['pretoken_bytes'] / 1e6:.1f} MB distinct) in {stage['seconds']:.1f} s")


def case_s1(ctx: Context) -> None:
    files = s1_inputs(ctx.quick)
    vocabs = vocabularies(ctx.quick)
    small, large = vocabs
    speed_runs = []
    for name, (text, held) in files.items():
        train_mb = text.stat().st_size / 1e6
        models: dict[str, dict] = {}
        samples: dict[str, Sample] = {}
        for vocab in vocabs:
            for ratio in (None, *RATIOS):
                label = _label(vocab, ratio)
                path, samples[label] = _train(ctx, name, text, vocab, ratio)
                models[label] = {"model": str(path), "plain": _label(vocab, None),
                                 "transition": None if ratio is None else transition(vocab, ratio)}
        checked = run_worker("check", {"heldout": str(held), "models": models,
                                       "prefix": [_label(small, None), _label(large, None)]}, module=WORKERS).result
        held_mb = checked["bytes"] / 1e6
        prefix = checked["plain_prefix_stable"]
        speed_runs += [{"label": f"{name}/{label}", "model": models[label]["model"], "file": str(held)}
                       for label in (_label(large, None), _label(large, RATIOS[0]))]
        for vocab in vocabs:
            plain = checked["models"][_label(vocab, None)]
            plain_s = samples[_label(vocab, None)].result["seconds"]
            for ratio in RATIOS:
                label, t = _label(vocab, ratio), transition(vocab, ratio)
                row, trained = checked["models"][label], samples[label].result
                ratio_bpt = row["bytes_per_token"] / plain["bytes_per_token"]
                correct = row["round_trips"] and row["stage1_is_plain"] and prefix
                ctx.add(Row(
                    "S1", f"bytes/token, held-out {name} ({held_mb:.1f} MB), {vocab:,}: SuperBPE t={t:,} ({ratio:g})",
                    row["bytes_per_token"], plain["bytes_per_token"], f"plain BPE {vocab:,}", "B/tok", ratio_bpt,
                    "", None, correct,
                    note=(f"{name}, vocabulary {vocab:,}, SuperBPE t={t:,} ({ratio:g} of the merges): "
                          f"{row['bytes_per_token']:.3f} bytes/token vs plain BPE {plain['bytes_per_token']:.3f} "
                          f"(x{ratio_bpt:.3f}, {reduction(plain['bytes_per_token'], row['bytes_per_token']) * 100:.1f}% "
                          f"fewer tokens: {row['tokens']:,} vs {plain['tokens']:,}); "
                          + (HELD_OUT_NOTES[name] + "; " if name in HELD_OUT_NOTES else "")
                          + f"{PAPER}; "
                          + DIFFERENCES.format(train_mb=train_mb, vocab=vocab)
                          + f"; checks: round-trips every held-out line: {row['round_trips']}; first {t:,} merges "
                            f"equal plain BPE's: {row['stage1_is_plain']}; plain {small:,} is plain {large:,}'s "
                            f"prefix: {prefix}"),
                    samples={"super": row, "plain": plain}))
                stages = trained["superword"]
                ctx.add(Row(
                    "S1", f"train {name} ({train_mb:.1f} MB) to {vocab:,}, in process: SuperBPE t={t:,} ({ratio:g})",
                    trained["seconds"], plain_s, f"plain BPE {vocab:,}", "s", trained["seconds"] / plain_s, "", None,
                    note=(f"train() call {trained['seconds']:.1f} s (worker {samples[label].wall_seconds:.1f} s wall, "
                          f"peak {samples[label].peak_mb['root']:,.0f} MB; counting both stages "
                          f"{trained['stats'].get('count_seconds', 0):.1f} s); stage 1 ({stages['stage1_merges']:,} "
                          f"merges, {stages['stage1_pattern']}): {_table(stages['stage1'])}; stage 2 "
                          f"({trained['merges'] - stages['stage1_merges']:,} merges, superbpe): "
                          f"{_table(stages['stage2'])}; plain BPE {vocab:,}: train() {plain_s:.1f} s (worker "
                          f"{samples[_label(vocab, None)].wall_seconds:.1f} s wall), trained at both sizes "
                          f"(cheap), not truncated; engine {trained['engine']}"),
                    samples={"super": trained, "plain": samples[_label(vocab, None)].result}))
    speed = run_worker("encode_speed", {"runs": speed_runs, "repeat": 3}, threads=1, module=WORKERS).result
    for name, (_, held) in files.items():
        plain, sup = speed[f"{name}/{_label(large, None)}"], speed[f"{name}/{_label(large, RATIOS[0])}"]
        ratio = sup["mb_per_s"] / plain["mb_per_s"]
        t = transition(large, RATIOS[0])
        ctx.add(Row(
            "S1", f"encode held-out {name} ({plain['bytes'] / 1e6:.1f} MB), in process: SuperBPE {large:,} t={t:,}",
            sup["mb_per_s"], plain["mb_per_s"], f"plain BPE {large:,}", "MB/s", ratio, f">= {ENCODE_TARGET}",
            ratio >= ENCODE_TARGET,
            note=(f"Tokenizer.encode_ordinary per line in one process (as T5's in-process row), warm once then "
                  f"median of 3: SuperBPE {sup['seconds']:.2f} s ({sup['tokens']:,} tokens), plain "
                  f"{plain['seconds']:.2f} s ({plain['tokens']:,} tokens); runs: SuperBPE "
                  f"{', '.join(f'{s:.2f}' for s in sup['runs'])} s, plain {', '.join(f'{s:.2f}' for s in plain['runs'])} s"
                  + _where(sup, plain)),
            samples={"super": sup, "plain": plain}))


def _where(sup: dict, plain: dict) -> str:
    """Where the encode time goes: the one-call compiled path, and the Python split alone."""
    if "split_seconds" not in sup or "split_seconds" not in plain:
        return ""

    def one(name: str, r: dict) -> str:
        path = "one compiled call (split + encode)" if r["compiled_line"] else "Python regex split + compiled encode"
        return f"{name} (pattern {r['pattern']}): {path}, its Python split alone {r['split_seconds']:.2f} s"

    return "; where the time goes: " + "; ".join((one("SuperBPE", sup), one("plain", plain)))


# --- S2 -------------------------------------------------------------------------------------------


def s2_distinct(quick: bool) -> dict:
    """Both stages' distinct pretokens of the corpora once (the repeated file has the same),
    counted in process once and cached."""
    once = inputs.big_corpus_text(quick, once=True)
    path = once.with_suffix(".superword.distinct.json")
    if not path.exists():
        result = run_worker("count_distinct", {"file": str(once)}, module=WORKERS).result
        inputs._write_once(path, lambda p: p.write_text(json.dumps(result), encoding="utf-8"))
    return json.loads(path.read_text(encoding="utf-8"))


def budget(distinct: dict, fraction: float = S2_BUDGET_FRACTION) -> int:
    """The driver budget that forces stage 2 into rounds: ``fraction`` of its distinct pretokens.

    >>> budget({"stage1": 10, "stage2": 1000})
    200
    """
    return max(1, int(distinct["stage2"] * fraction))


def _model_json(model: Path) -> dict:
    try:
        return json.loads((model / "bpe_spark.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}


def case_s2(ctx: Context) -> None:
    vocab, t = (S2_QUICK_VOCAB, S2_QUICK_TRANSITION) if ctx.quick else (S2_VOCAB, S2_TRANSITION)
    corpus = inputs.big_corpus_text(ctx.quick)
    size_mb = corpus.stat().st_size / 1e6
    distinct = s2_distinct(ctx.quick)
    driver_budget = int(os.environ.get("BPE_SPARK_S2_BUDGET", budget(distinct)))
    out = ctx.scratch / "S2-model"
    argv = ["train", "--input", str(corpus), "--vocab-size", str(vocab), "--superword-transition", str(t),
            "--driver-budget", str(driver_budget), "--set", "spark.driver.memory=2g",
            "--master", f"local[{SPARK_CORES}]", "--out", str(out), "--overwrite", "--no-report"]
    run = monitored(bpe_spark_command() + argv, env=_child_env(), cwd=str(inputs.ROOT), timeout=S2_TIMEOUT)
    if run.returncode != 0:
        tail = "\n".join((run.stderr or run.stdout).strip().splitlines()[-25:])
        raise BenchError(f"bpe-spark train (S2) failed (exit {run.returncode}) after {run.wall_seconds:.0f} s:\n{tail}")
    model = _model_json(out)
    meta = model.get("metadata", model)
    stats, stages = meta.get("stats") or {}, meta.get("superword") or {}
    rounds = meta.get("rounds")
    n_rounds = len(rounds) if isinstance(rounds, list) else stats.get("rounds")
    first, second = stages.get("stage1") or {}, stages.get("stage2") or {}
    in_rounds = run.stderr.count("training in rounds")  # one warning a stage that ran in rounds
    phases = next((line for line in reversed(run.stdout.splitlines()) if line.startswith("time:")), "")
    what = (f"{size_mb:,.0f} MB: every shared corpus ({', '.join(inputs.ALL_CORPORA)}) concatenated and repeated "
            f"({corpus.name}, T2's file)")
    ctx.add(Row("S2", f"SuperBPE train {size_mb:,.0f} MB to {vocab:,} (t={t:,}), local[2], end to end",
                run.wall_seconds, None, "", "s", None, "", None, None,
                note=(f"`bpe-spark train --vocab-size {vocab} --superword-transition {t} --driver-budget "
                      f"{driver_budget} --set spark.driver.memory=2g --master local[2]` on {what}; driver budget = "
                      f"{S2_BUDGET_FRACTION:g} of stage 2's {distinct['stage2']:,} distinct pretokens (stage 1: "
                      f"{distinct['stage1']:,}; counted in process on the corpora once); {in_rounds} of 2 stages "
                      f"said they trained in rounds; bpe-spark's summary (its timings are stage 2's run): {phases or '?'}"),
                samples={"argv": argv, "peak_mb": run.peak_mb, "stats": stats, "superword": stages}))
    s1, s2 = first.get("seconds"), second.get("seconds")
    ctx.add(Row("S2", "stage 1 vs stage 2 seconds (count and merge each)", s1, s2, "stage 2", "s",
                s1 / s2 if s1 and s2 else None, "", None,
                note=(f"stage 1 ({stages.get('stage1_merges', '?'):,} merges, gpt2): "
                      f"{first.get('distinct_pretokens', 0):,} distinct pretokens, {first.get('pretokens', 0):,} in "
                      f"all, {first.get('pretoken_bytes', 0) / 1e6:.1f} MB distinct; stage 2 (superbpe): "
                      f"{second.get('distinct_pretokens', 0):,} distinct, {second.get('pretokens', 0):,} in all, "
                      f"{second.get('pretoken_bytes', 0) / 1e6:.1f} MB distinct")))
    mode = stats.get("mode")
    ctx.add(Row("S2", f"stage 2: mode {mode}, {n_rounds} rounds", n_rounds, None, "", "rounds", None,
                'mode "rounds"', mode == "rounds",
                note=(f"stage 2's run: driver budget {stats.get('driver_budget', '?'):,} "
                      f"({stats.get('driver_budget_from', '?')}), {stats.get('distinct_pretokens', 0):,} distinct "
                      f"pretokens of {stats.get('pretoken_bytes', 0) / 1e6:.1f} MB, {stats.get('merges', '?')} "
                      f"merges; merges per round: {[r.get('merges') for r in rounds][:20] if isinstance(rounds, list) else '?'}")))
    driver = run.peak_mb["root"]
    ctx.add(Row("S2", "peak memory: driver Python (target) and JVM", driver, run.peak_mb["jvm"], "JVM", "MB",
                None, f"driver < {DRIVER_LIMIT_MB}", driver < DRIVER_LIMIT_MB,
                note=(f"driver Python {driver:,.0f} MB, JVM {run.peak_mb['jvm']:,.0f} MB (spark.driver.memory=2g), "
                      f"largest Python worker {run.peak_mb['worker_max']:,.0f} MB, whole job "
                      f"{run.peak_mb['total']:,.0f} MB")))
