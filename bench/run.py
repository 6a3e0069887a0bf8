"""``make bench``: bpe-spark against tokenizers / tiktoken / SentencePiece, side by side.

Every measurement runs in a fresh child process watched by :mod:`bench.procmon` (wall
time, and the peak memory of every process it starts: Python, the JVM, Spark's Python workers).
Each case runs ``--repeat`` times, alternating ours and the peer's (ABBA order), and reports
medians and the ratio ours / peer. A case whose outputs differ from the peer's (merges for
training, ids for encoding) fails, whatever its speed.

    python -m bench.run                 # all cases, 3 repeats (tens of minutes)
    python -m bench.run --quick         # each case once, on 4-40 MB inputs
    python -m bench.run --cases T3,T4   # a selection
    python -m bench.run --cases R1      # the scale of one document (bench/scale.py)
    python -m bench.run --cases P1,P2,W1  # the fastest peers side by side, worst-case growth (bench/peers.py)
    python -m bench.run --cases E4      # Spark encode per core, every way in (bench/spark_encode.py)
    python -m bench.run --cases X1      # extend cl100k by 32,000 merges vs transformers (bench/extend.py)
    python -m bench.run --cases S1      # SuperBPE vs plain BPE: bytes/token, encode speed (bench/superword.py)
    python -m bench.run --cases T8      # 4 GB, 10 M+ distinct pretokens (bench/t8.py; an hour)
    python -m bench.run --cases S2      # SuperBPE on Spark, 400 MB, stage 2 in rounds (bench/superword.py; 10-20 min)
    python -m bench.run --cases V1      # evaluate 3 models in one pass over 400 MB vs encode with one (bench/evaluate.py)

Results: bench-results/bench-<time>.json and .md, and bench-results/latest.{json,md}; a run that is
not ``--quick`` (nor ``--no-publish``) also replaces its cases' stored results in bench/results/ and
renders docs/performance.md again (bench/performance_page.py).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from bench import inputs, performance_page
from bench.performance_page import console_line, describe_machine, run_markdown
from bench.procmon import MonitoredRun, monitored
from bench.spark_events import spark_timeline
from bench.workers import RESULT_PREFIX

ROOT = inputs.ROOT
RESULTS = ROOT / "bench-results"
CS336_REFERENCE_SECONDS = 0.38
SPARK_CORES = 2
ALL_CASES = ("T1", "T2", "T3", "T4", "T5", "T6", "T7", "R1", "P1", "P2", "W1", "E4", "E5", "X1", "S1", "T8", "S2", "V1",
             "C1")
# long (S2 10-20 minutes, T8 an hour or more, V1 minutes, C1 20-30 minutes): run only when named (--cases T8)
LONG_CASES = ("T8", "S2", "V1", "C1")
T1_TARGET = 1.0  # ours / tokenizers, end to end with Spark's start


# --- running one measured process ----------------------------------------------------------------


@dataclass
class Sample:
    wall_seconds: float
    peak_mb: dict[str, float]
    result: dict = field(default_factory=dict)  # the worker's BENCH_RESULT (timings, digests)


class BenchError(RuntimeError):
    pass


def _child_env(threads: int = SPARK_CORES) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH", "")]))
    env["PYSPARK_PYTHON"] = sys.executable
    env["PYSPARK_DRIVER_PYTHON"] = sys.executable
    env["RAYON_NUM_THREADS"] = str(threads)  # tokenizers' thread pool
    env.setdefault("TIKTOKEN_CACHE_DIR", str(inputs.private_tiktoken_cache()))
    env["TOKENIZERS_PARALLELISM"] = "true"
    return env


def _check(run: MonitoredRun, what: str) -> None:
    if run.returncode != 0:
        tail = "\n".join((run.stderr or run.stdout).strip().splitlines()[-25:])
        raise BenchError(f"{what} failed (exit {run.returncode}):\n{tail}")


def run_worker(task: str, args: dict, *, threads: int = SPARK_CORES, env: dict | None = None,
               module: str = "bench.workers") -> Sample:
    argv = [sys.executable, "-m", module, task, json.dumps(args)]
    run = monitored(argv, env={**_child_env(threads), **(env or {})}, cwd=str(ROOT))
    _check(run, f"worker {task}")
    lines = [line for line in run.stdout.splitlines() if line.startswith(RESULT_PREFIX)]
    if not lines:
        raise BenchError(f"worker {task} printed no result:\n{run.stdout[-2000:]}\n{run.stderr[-2000:]}")
    return Sample(run.wall_seconds, run.peak_mb, json.loads(lines[-1][len(RESULT_PREFIX):]))


def bpe_spark_command() -> list[str]:
    script = Path(sys.executable).with_name("bpe-spark")
    if script.exists():
        return [str(script)]
    return [sys.executable, "-c", "import sys; from bpe_spark.cli import main; sys.exit(main())"]


def run_cli(argv: list[str], event_dir: Path | None = None) -> Sample:
    if event_dir is not None:
        shutil.rmtree(event_dir, ignore_errors=True)
        event_dir.mkdir(parents=True)
        argv = argv + ["--set", "spark.eventLog.enabled=true", "--set", f"spark.eventLog.dir={event_dir.as_uri()}",
                       "--set", "spark.eventLog.compress=false"]
    run = monitored(bpe_spark_command() + argv, env=_child_env(), cwd=str(ROOT))
    _check(run, "bpe-spark " + " ".join(argv[:1]))
    # keep the CLI's own breakdown ("time: count ..., merge ...") for the notes
    phases = [line for line in run.stdout.splitlines() if line.startswith("time:")]
    timeline = spark_timeline(event_dir) if event_dir is not None else ""
    workers = sorted((mb for pid, (name, mb) in run.processes.items() if pid != run.pid and name != "java"), reverse=True)
    return Sample(run.wall_seconds, run.peak_mb, {"phases": phases[-1] if phases else "", "spark": timeline,
                                                  "worker_peaks_mb": workers[:4]})


def alternate(repeat: int, ours, peer) -> tuple[list, list]:
    """Run ``ours`` and ``peer`` ``repeat`` times each in ABBA order: ours, peer, peer, ours..."""
    mine, theirs = [], []
    for i in range(repeat):
        if i % 2 == 0:
            mine.append(ours())
            theirs.append(peer())
        else:
            theirs.append(peer())
            mine.append(ours())
    return mine, theirs


def median(values) -> float:
    return statistics.median(values)


# --- the report ---------------------------------------------------------------------------------


@dataclass
class Row:
    case: str
    metric: str
    ours: float | None
    peer: float | None
    peer_name: str
    unit: str
    ratio: float | None = None  # ours / peer (for throughput: ours / peer too, higher is better)
    target: str = ""
    passed: bool | None = None  # None: no target (reference only)
    same_output: bool | None = None
    note: str = ""
    samples: dict = field(default_factory=dict)


@dataclass
class Context:
    quick: bool
    repeat: int
    scratch: Path
    rows: list[Row] = field(default_factory=list)
    memory: dict = field(default_factory=dict)  # T1/T2 memory samples, for T6

    def add(self, row: Row) -> Row:
        self.rows.append(row)
        print(console_line(row), flush=True)
        return row


def write_report(ctx: Context, command: str, started: float, machine: dict, *, publish: bool = True,
                 failed=()) -> tuple[Path, Path]:
    """The run's JSON and Markdown under bench-results/; unless the run is ``--quick`` or
    ``publish`` is false, its cases (but those in ``failed``, which keep their stored result) become
    the stored results of bench/results/ and docs/performance.md is rendered again
    (:mod:`bench.performance_page`)."""
    RESULTS.mkdir(parents=True, exist_ok=True)
    stamp = time.strftime("%Y%m%d-%H%M%S", time.localtime(started))
    machine = dict(machine, load_average_end=os.getloadavg() if hasattr(os, "getloadavg") else None)
    data = {
        "command": command,
        "started": time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(started)),
        "seconds": round(time.time() - started, 1),
        "quick": ctx.quick,
        "repeat": ctx.repeat,
        "machine": machine,
        "rows": [asdict(row) for row in ctx.rows],
    }
    markdown = run_markdown(command, ctx.quick, ctx.repeat, machine, ctx.rows)
    json_path = RESULTS / f"bench-{stamp}.json"
    md_path = RESULTS / f"bench-{stamp}.md"
    json_path.write_text(json.dumps(data, indent=1), encoding="utf-8")
    md_path.write_text(markdown, encoding="utf-8")
    shutil.copyfile(json_path, RESULTS / "latest.json")
    shutil.copyfile(md_path, RESULTS / "latest.md")
    if publish and not ctx.quick:
        ran = sorted({row.case for row in ctx.rows} - set(failed), key=ALL_CASES.index)
        stored = performance_page.publish(data, ran)
        print(f"published {', '.join(stored) or 'nothing'} to {performance_page.PAGE.relative_to(performance_page.ROOT)}")
    return json_path, md_path


# --- the cases ----------------------------------------------------------------------------------


def _train_sizes(ctx: Context) -> int:
    return 8000 if ctx.quick else 32000


def _hf_train(files: list[Path], vocab_size: int, merges_out: Path | None = None) -> Sample:
    args = {"files": [str(f) for f in files], "vocab_size": vocab_size}
    if merges_out is not None:
        args["merges_out"] = str(merges_out)
    return run_worker("hf_train", args)


def _spark_train(ctx: Context, case: str, text: Path, vocab_size: int) -> tuple[list[Sample], list[Sample], bool]:
    out = ctx.scratch / f"{case}-model"

    argv = ["train", "--input", str(text), "--vocab-size", str(vocab_size), "--out", str(out),
            "--master", f"local[{SPARK_CORES}]", "--overwrite"]

    def ours() -> Sample:
        sample = run_cli(argv)
        sample.result.update(run_worker("model_merges", {"model": str(out)}).result)
        return sample

    mine, theirs = alternate(ctx.repeat, ours, lambda: _hf_train([text], vocab_size))
    digests = {s.result["digest"] for s in mine} | {s.result["digest"] for s in theirs}
    # Spark's timeline for the notes from one more run, not timed: writing the event log costs
    # 1-1.5 s of a 10 s training here, which users do not pay
    timeline = run_cli(argv, event_dir=ctx.scratch / f"{case}-events").result["spark"]
    for sample in mine:
        sample.result["spark"] = timeline
    return mine, theirs, len(digests) == 1


def _phases_note(mine: list[Sample], theirs: list[Sample]) -> str:
    """The median run's own breakdown, and the peer's in-process training time."""
    middle = sorted(mine, key=lambda s: s.wall_seconds)[len(mine) // 2]
    peer_train = median(s.result["seconds"] for s in theirs)
    return (f"ours {middle.wall_seconds:.1f} s wall, bpe-spark says {middle.result.get('phases') or '?'}; "
            f"Spark event log (one more run): {middle.result.get('spark') or '?'}; "
            f"tokenizers' train() call {peer_train:.1f} s of its {median(s.wall_seconds for s in theirs):.1f} s")


def case_t1(ctx: Context) -> None:
    text = inputs.en_books_text(ctx.quick)
    vocab = _train_sizes(ctx)
    mine, theirs, same = _spark_train(ctx, "T1", text, vocab)
    ctx.memory["T1"] = (mine, theirs)
    ours_s, peer_s = median(s.wall_seconds for s in mine), median(s.wall_seconds for s in theirs)
    ctx.add(Row("T1", f"train {text.name} to {vocab}, local[2], end to end", ours_s, peer_s,
                "tokenizers (2 threads)", "s", ours_s / peer_s, f"<= {T1_TARGET:g}", ours_s / peer_s <= T1_TARGET,
                same, note=_phases_note(mine, theirs),
                samples={"ours": [s.wall_seconds for s in mine], "peer": [s.wall_seconds for s in theirs]}))
    # Spark's floor: the same command on a one-line file (JVM, session, the first Python job,
    # saving the model and its report), against tokenizers' whole training on the corpus
    floor_argv = ["train", "--input", str(inputs.floor_text()), "--vocab-size", "260", "--out", str(ctx.scratch / "T1-floor"),
                  "--master", f"local[{SPARK_CORES}]", "--overwrite"]
    floor = [run_cli(floor_argv) for _ in range(ctx.repeat)]
    floor_s = median(s.wall_seconds for s in floor)
    ctx.add(Row("T1", "floor: the same command on a one-line file (Spark's fixed cost)", floor_s, peer_s,
                f"tokenizers (2 threads) on {text.name}", "s", floor_s / peer_s, "", None, None,
                note="what bpe-spark train costs before any data: JVM and session start, the first Python "
                     "workers, the count, save and report of an empty model; T1's target needs all of "
                     f"{text.name}'s training within tokenizers' time; bpe-spark says "
                     f"{sorted(floor, key=lambda s: s.wall_seconds)[len(floor) // 2].result.get('phases') or '?'}",
                samples={"ours": [s.wall_seconds for s in floor]}))


def case_t2(ctx: Context) -> None:
    text = inputs.big_corpus_text(ctx.quick)
    vocab = _train_sizes(ctx)
    mine, theirs, same = _spark_train(ctx, "T2", text, vocab)
    ctx.memory["T2"] = (mine, theirs)
    ours_s, peer_s = median(s.wall_seconds for s in mine), median(s.wall_seconds for s in theirs)
    size = text.stat().st_size / 1e6
    ctx.add(Row("T2", f"train {size:,.0f} MB (all corpora) to {vocab}, end to end", ours_s, peer_s,
                "tokenizers (2 threads)", "s", ours_s / peer_s, "<= 1.0", ours_s / peer_s <= 1.0, same,
                note=_phases_note(mine, theirs),
                samples={"ours": [s.wall_seconds for s in mine], "peer": [s.wall_seconds for s in theirs]}))


def case_t3(ctx: Context) -> None:
    text = inputs.en_books_text(ctx.quick)
    counts = inputs.pretoken_counts(text)
    vocab = _train_sizes(ctx)
    full, base = [], []

    def peer() -> Sample:
        # tokenizers' merge phase: its training time minus its time for 257 (counting only)
        full.append(_hf_train([text], vocab))
        base.append(_hf_train([text], 257))
        return full[-1]

    mine, _ = alternate(
        ctx.repeat,
        lambda: run_worker("ours_train_from_counts", {"counts": str(counts), "vocab_size": vocab}),
        peer,
    )
    ours_s = median(s.result["seconds"] for s in mine)
    peer_s = median(s.result["seconds"] for s in full) - median(s.result["seconds"] for s in base)
    same = len({s.result["digest"] for s in mine} | {s.result["digest"] for s in full}) == 1
    ratio = ours_s / peer_s if peer_s > 0 else None
    ctx.add(Row("T3", f"merge engine: counts of {text.name} to {vocab}", ours_s, peer_s,
                "tokenizers merge phase", "s", ratio, "<= 2.0", ratio is not None and ratio <= 2.0, same,
                note=f"engine: {mine[0].result['engine']}; tokenizers: {median(s.result['seconds'] for s in full):.2f} s "
                     f"to {vocab} minus {median(s.result['seconds'] for s in base):.2f} s to 257",
                samples={"ours": [s.result["seconds"] for s in mine],
                         "peer_full": [s.result["seconds"] for s in full],
                         "peer_257": [s.result["seconds"] for s in base]}))
    # the pure-Python engine (the fallback without a C compiler), once, for the record
    python = run_worker("ours_train_from_counts", {"counts": str(counts), "vocab_size": vocab},
                        env={"BPE_SPARK_ENGINE": "python"})
    python_s = python.result["seconds"]
    ctx.add(Row("T3", "merge engine, pure-Python fallback (1 run)", python_s, peer_s, "tokenizers merge phase",
                "s", python_s / peer_s if peer_s > 0 else None, "", None,
                python.result["digest"] == full[0].result["digest"]))


def case_t4(ctx: Context) -> None:
    cs336 = inputs.PEERS / "cs336"
    args = {"corpus": str(cs336 / "corpus.en"), "reference": str(cs336 / "train-bpe-reference-merges.txt")}
    mine = [run_worker("cs336", args) for _ in range(max(ctx.repeat, 3))]
    ours_s = median(s.result["seconds"] for s in mine)
    exact = all(s.result["exact"] for s in mine)
    ctx.add(Row("T4", "CS336 corpus.en to 500, in process", ours_s, CS336_REFERENCE_SECONDS,
                "CS336 reference", "s", ours_s / CS336_REFERENCE_SECONDS, "<= 1.0",
                ours_s / CS336_REFERENCE_SECONDS <= 1.0, exact,
                note="merges equal train-bpe-reference-merges.txt" if exact else "merges differ from the reference",
                samples={"ours": [s.result["seconds"] for s in mine]}))


def case_t5(ctx: Context) -> None:
    text = inputs.en_books_text(ctx.quick)
    model, hf_json = inputs.trained_model(text, _train_sizes(ctx))
    megabytes = text.stat().st_size / 1e6
    out = ctx.scratch / "T5-ids"

    events = ctx.scratch / "T5-events"

    def ours() -> Sample:
        shutil.rmtree(events, ignore_errors=True)
        events.mkdir(parents=True)
        sample = run_worker("ours_spark_encode", {"model": str(model), "file": str(text), "out": str(out),
                                                  "warmup_file": str(inputs.warmup_text()), "runs": 3,
                                                  "master": f"local[{SPARK_CORES}]", "event_dir": str(events)})
        sample.result["spark"] = spark_timeline(events)
        return sample

    def tiktoken_run() -> Sample:
        return run_worker("tiktoken_encode", {"model": str(model), "file": str(text)}, threads=1)

    def hf_run() -> Sample:
        return run_worker("hf_encode", {"tokenizer_json": str(hf_json), "file": str(text)})

    runs: dict[str, list[Sample]] = {"ours": [], "tiktoken": [], "tokenizers": [], "inprocess": []}
    for i in range(ctx.repeat):
        order = [("ours", ours), ("tiktoken", tiktoken_run), ("tokenizers", hf_run)]
        for name, fn in order if i % 2 == 0 else reversed(order):
            runs[name].append(fn())
    runs["inprocess"].append(run_worker("ours_encode_inprocess", {"model": str(model), "file": str(text)}))
    digests = {name: {s.result["digest"] for s in samples} for name, samples in runs.items()}
    reference = digests["tiktoken"]

    def per_core(samples: list[Sample], cores: int) -> float:
        return megabytes / median(s.result["seconds"] for s in samples) / cores

    ours_rate = per_core(runs["ours"], SPARK_CORES)
    for peer, cores, target in (("tiktoken", 1, 1.0), ("tokenizers", SPARK_CORES, 2.0)):
        peer_rate = per_core(runs[peer], cores)
        ratio = ours_rate / peer_rate
        ctx.add(Row("T5", f"encode {text.name}: MB/s per core (Spark local[2])", ours_rate, peer_rate,
                    f"{peer} ({cores} thread{'s' if cores > 1 else ''})", "MB/s", ratio, f">= {target}",
                    ratio >= target, digests["ours"] == reference and digests[peer] == reference,
                    note=f"Spark event log (last run): {runs['ours'][-1].result.get('spark') or '?'}" if peer == "tiktoken" else "",
                    samples={"ours": [s.result["seconds"] for s in runs["ours"]],
                             "peer": [s.result["seconds"] for s in runs[peer]]}))
    inproc = per_core(runs["inprocess"], 1)
    peer_rate = per_core(runs["tiktoken"], 1)
    ctx.add(Row("T5", "encode, in process: Tokenizer.encode_ordinary per line", inproc, peer_rate,
                "tiktoken (1 thread)", "MB/s", inproc / peer_rate, "", None,
                digests["inprocess"] == reference,
                note=""))
    session = median(s.result["session_seconds"] for s in runs["ours"])
    first = median(s.result["first_seconds"] for s in runs["ours"])
    first_full = median(s.result["runs"][0] for s in runs["ours"])
    ctx.add(Row("T5", "Spark encode fixed costs, not in the rate above", session + first, None, "", "s", None, "",
                None, None,
                note=f"session start {session:.1f} s + first encode of a 1 MB warm-up file {first:.1f} s "
                     "(Python workers start): paid once per application; the rate above is the median of 3 "
                     f"encodes of the file in one session; the first of them alone: {megabytes / first_full / SPARK_CORES:.1f} "
                     "MB/s per core (JIT still warming)"))


def case_t6(ctx: Context) -> None:
    for case in ("T1", "T2"):
        if case not in ctx.memory:
            {"T1": case_t1, "T2": case_t2}[case](ctx)
    t1_mine, _ = ctx.memory["T1"]
    t2_mine, t2_theirs = ctx.memory["T2"]

    def peak(samples: list[Sample], key: str) -> float:
        return median(s.peak_mb[key] for s in samples)

    t1_driver, t2_driver = peak(t1_mine, "root"), peak(t2_mine, "root")
    hf_t2 = peak(t2_theirs, "root")
    distinct = [_distinct_pretokens(ctx.scratch / f"{case}-model") for case in ("T1", "T2")]
    shown = f", {distinct[1] / distinct[0]:.1f}x distinct pretokens" if all(distinct) else ""
    ctx.add(Row("T6", f"driver Python peak: T2 vs T1 (corpus 10x{shown})", t2_driver, t1_driver, "ours on T1", "MB",
                t2_driver / t1_driver, "<= 1.2", t2_driver / t1_driver <= 1.2,
                note=f"T2 holds {_count(distinct[1])} distinct pretokens (all corpora, CJK included), T1 "
                     f"{_count(distinct[0])}: the driver scales with those; the next row holds them fixed"))
    # The same distinct pretokens at a sixth of the bytes: the corpus size alone, isolated.
    once = inputs.big_corpus_text(ctx.quick, once=True)
    out = ctx.scratch / "T6-model"
    small = [run_cli(["train", "--input", str(once), "--vocab-size", str(_train_sizes(ctx)), "--out", str(out),
                      "--master", f"local[{SPARK_CORES}]", "--overwrite"]) for _ in range(ctx.repeat)]
    once_driver = peak(small, "root")
    size_ratio = inputs.big_corpus_text(ctx.quick).stat().st_size / once.stat().st_size
    ctx.add(Row("T6", f"driver Python peak: T2 vs its corpora once ({size_ratio:.0f}x fewer bytes)", t2_driver,
                once_driver, "ours, corpora once", "MB", t2_driver / once_driver, "<= 1.2",
                t2_driver / once_driver <= 1.2))
    ctx.add(Row("T6", "driver Python peak on T2", t2_driver, hf_t2, "tokenizers peak", "MB",
                t2_driver / hf_t2, "< 1.0", t2_driver < hf_t2))
    for case, (mine, theirs) in (("T1", ctx.memory["T1"]), ("T2", ctx.memory["T2"])):
        ctx.add(Row("T6", f"{case} JVM peak (driver + executors, local mode)", peak(mine, "jvm"), None, "", "MB",
                    note=""))
        ctx.add(Row("T6", f"{case} whole job peak (sum over processes)", peak(mine, "total"), peak(theirs, "root"),
                    "tokenizers peak", "MB", peak(mine, "total") / peak(theirs, "root"), "", None))


def _count(value: int | None) -> str:
    return f"{value:,}" if value is not None else "?"


def _distinct_pretokens(model_dir: Path) -> int | None:
    """The distinct pretokens a training run saw (its bpe_spark.json), or None."""
    try:
        return int(json.loads((model_dir / "bpe_spark.json").read_text(encoding="utf-8"))["stats"]["distinct_pretokens"])
    except (OSError, KeyError, ValueError, TypeError):
        return None


def case_t7(ctx: Context) -> None:
    text = inputs.en_books_text(ctx.quick)
    vocab = _train_sizes(ctx)
    spm = [run_worker("spm_train", {"file": str(text), "vocab_size": vocab,
                                    "model_prefix": str(ctx.scratch / "spm"), "threads": SPARK_CORES})
           for _ in range(1 if ctx.quick else min(ctx.repeat, 2))]
    spm_s = median(s.wall_seconds for s in spm)
    if "T1" in ctx.memory:
        ours_s = median(s.wall_seconds for s in ctx.memory["T1"][0])
    else:
        ours_s = None
    ctx.add(Row("T7", f"SentencePiece BPE on {text.name} to {vocab} (2 threads)", ours_s, spm_s,
                "sentencepiece", "s", None if ours_s is None else ours_s / spm_s, "", None,
                note="ours = T1's median; SentencePiece's merges are not comparable (its own model)",
                samples={"peer": [s.wall_seconds for s in spm]}))


def _module_case(module: str, name: str):
    def run(ctx: Context) -> None:  # these modules build on this one: imported when run
        import importlib

        getattr(importlib.import_module(f"bench.{module}"), f"case_{name.lower()}")(ctx)
    return run


CASE_FUNCTIONS = {"T1": case_t1, "T2": case_t2, "T3": case_t3, "T4": case_t4, "T5": case_t5,
                  "T6": case_t6, "T7": case_t7, "R1": _module_case("scale", "R1"),
                  "P1": _module_case("peers", "P1"), "P2": _module_case("peers", "P2"),
                  "W1": _module_case("peers", "W1"), "E4": _module_case("spark_encode", "E4"),
                  "E5": _module_case("rounds", "E5"),
                  "X1": _module_case("extend", "X1"), "S1": _module_case("superword", "S1"),
                  "T8": _module_case("t8", "T8"), "S2": _module_case("superword", "S2"),
                  "V1": _module_case("evaluate", "V1"), "C1": _module_case("scale_speed", "C1")}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.run", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--cases", default=",".join(c for c in ALL_CASES if c not in LONG_CASES),
                        help="comma-separated cases to run (default: all but T8, S2, V1 and C1, which run only when named)")
    parser.add_argument("--quick", action="store_true", help="each case once, on smaller inputs (4-40 MB)")
    parser.add_argument("--repeat", type=int, default=None, help="runs per side (default 3; 1 with --quick)")
    parser.add_argument("--no-publish", action="store_true",
                        help="leave bench/results/ and docs/performance.md alone (--quick never publishes)")
    args = parser.parse_args(argv)
    cases = [c.strip().upper() for c in args.cases.split(",") if c.strip()]
    unknown = [c for c in cases if c not in CASE_FUNCTIONS]
    if unknown:
        parser.error(f"unknown cases {unknown}; choose from {', '.join(ALL_CASES)}")
    repeat = args.repeat or (1 if args.quick else 3)
    if repeat < 1:
        parser.error("--repeat must be >= 1")
    # the settings of the bench's own environment variables (BPE_SPARK_X1_MODE...) are part of the command
    settings = [f"{name}={value}" for name, value in sorted(os.environ.items()) if name.startswith("BPE_SPARK_")]
    command = " ".join([*settings, "python -m bench.run", *(argv if argv is not None else sys.argv[1:])])
    started = time.time()
    machine = describe_machine()
    scratch = RESULTS / "scratch"
    scratch.mkdir(parents=True, exist_ok=True)
    ctx = Context(quick=args.quick, repeat=repeat, scratch=scratch)
    failures = []
    # subtle: T7 reuses T1's timings and T6 T1's and T2's memory, so they run after them
    for case in sorted(cases, key=ALL_CASES.index):
        try:
            CASE_FUNCTIONS[case](ctx)
        except BenchError as exc:
            failures.append(case)
            ctx.add(Row(case, "could not run", None, None, "", "", note=str(exc).splitlines()[0][:300]))
            print(exc, file=sys.stderr)
    json_path, md_path = write_report(ctx, command.strip(), started, machine, publish=not args.no_publish,
                                      failed=failures)
    print(f"\nwrote {md_path.relative_to(ROOT)} and {json_path.relative_to(ROOT)}")
    bad_output = [row.case for row in ctx.rows if row.same_output is False]
    if bad_output:
        print(f"different outputs from the peer in {sorted(set(bad_output))}", file=sys.stderr)
    return 1 if failures or bad_output else 0


if __name__ == "__main__":
    sys.exit(main())
