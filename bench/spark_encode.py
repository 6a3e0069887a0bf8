"""Case E4 of ``make bench``: the Spark encode path per core against the in-process flat encoder.

Issue 15, item 4: on a warm session, Spark's encode keeps at least half of the in-process flat
rate per core, for every way in. Each way in is measured in a fresh child process
(``python -m bench.spark_encode spark_way JSON``): a ``local[2]`` session, one untimed encode of
the whole input (Python workers start, the encoders' caches and the JIT warm), then ``runs``
timed encodes in the same session, median. The ways in, all on en_books (one document per line):

- ``X -> Y``: ``encode_dataset(read_documents(file of format X), output_format=Y)``, for a text
  file, a Parquet file (one ``text`` row per line, row groups of 32k rows) and a JSON Lines file
  (``{"text": line}``), each read by the encoding tasks themselves, to ``bin`` shards (the way
  in alone) and to Parquet (the output's cost beside it);
- ``encode(df), cached``: ``encode(df, tok)`` of a cached DataFrame of that Parquet file, forced
  by a ``noop`` write (every row's ids built in the JVM, nothing written); in the same session,
  Spark's hand-off alone (the counting pass, and the text handed to Python workers that only count
  rows), against the target's whole budget; at scale also ``encode(df), cached, size check off``,
  with the Spark property a user may set for short rows (:data:`WAY_CONF`).

Beside ``text -> bin``, the same session also times a one-line file (a Spark encode's fixed
cost); both floors are reference rows against the target's whole budget for the input's size.

The peer row is the in-process flat rate of the same run: ``Tokenizer.encode_ordinary_flat``
over the same lines, one thread (``flat`` task, median of ``runs`` after a warm-up call). Every
way's ids are digested (per document: length, then int32 ids, in ``doc_id`` order) and checked
against the flat encoder's. MB/s per core = the text's bytes / seconds / ``SPARK_CORES``.
"""

from __future__ import annotations

import itertools
import json
import shutil
import statistics
import sys
import time
from pathlib import Path

from bench import inputs
from bench.run import SPARK_CORES, Context, Row, Sample, median, run_worker, spark_timeline
from bench.workers import IdDigest, _emit, _lines

TARGET = 0.5  # Spark per core / in-process flat, one thread
# "X -> Y": local files of format X read by read_documents, encoded to output format Y
WAYS = ("text -> bin", "parquet -> bin", "jsonl -> bin", "encode(df), cached", "text -> parquet",
        "parquet -> parquet", "jsonl -> parquet")
# the ways on en_books SCALE times over (403 MB): where a job's fixed costs no longer dominate
SCALE = 10
SCALED_WAYS = ("text -> bin", "parquet -> bin", "jsonl -> bin", "encode(df), cached", "parquet -> parquet",
               "encode(df), cached, size check off")
# ways measured with Spark properties a user may set: Spark sizes the Arrow batch it hands to Python
# after every row (spark.sql.execution.arrow.maxBytesPerBatch, 64 MiB by default); Int.MaxValue
# turns that check off (safe for rows far shorter than the limit / maxRecordsPerBatch)
WAY_CONF = {"encode(df), cached, size check off": {"spark.sql.execution.arrow.maxBytesPerBatch": "2147483647"}}


# --- inputs -------------------------------------------------------------------------------------


def parquet_of(text: Path) -> Path:
    """The lines of ``text`` as a Parquet file (column ``text``, row groups of 32k rows, so that
    Spark's reader splits it across tasks)."""

    def build(path: Path) -> None:
        import pyarrow as pa
        import pyarrow.parquet as pq

        pq.write_table(pa.table({"text": _lines(text)}), path, row_group_size=32_768)
    return inputs._write_once(text.with_suffix(".parquet"), build)


def jsonl_of(text: Path) -> Path:
    """The lines of ``text`` as JSON Lines, ``{"text": line}`` each."""

    def build(path: Path) -> None:
        with open(path, "w", encoding="utf-8") as fh:
            fh.writelines(json.dumps({"text": line}, ensure_ascii=False) + "\n" for line in _lines(text))
    return inputs._write_once(text.with_suffix(".jsonl"), build)


# --- the measured tasks (child processes) ---------------------------------------------------------


def flat(args: dict) -> dict:
    """In process, one thread: ``encode_ordinary_flat`` of every line, median of ``runs`` after
    one untimed call."""
    import numpy as np

    from bpe_spark import Tokenizer

    tok = Tokenizer.load(args["model"])
    lines = _lines(Path(args["text"]))
    ids, lengths = tok.encode_ordinary_flat(lines)  # warm-up: the encoder and its cache
    runs, cpu = [], []
    for _ in range(int(args.get("runs", 3))):
        started, cpu_started = time.perf_counter(), time.process_time()
        ids, lengths = tok.encode_ordinary_flat(lines)
        runs.append(time.perf_counter() - started)
        cpu.append(time.process_time() - cpu_started)
    rows = np.split(ids, np.cumsum(lengths)[:-1])
    digest, scaled = IdDigest(), IdDigest()
    for row in rows:
        digest.add(row)
    for _ in range(int(args.get("scale", 1))):  # the ids of the text that many times over
        for row in rows:
            scaled.add(row)
    return {"seconds": statistics.median(runs), "runs": runs, "cpu_seconds": statistics.median(cpu),
            "digest": digest.hexdigest(), "tokens": digest.tokens, "scaled_digest": scaled.hexdigest()}


def spark_way(args: dict) -> dict:
    """One way in on a warm ``local[N]`` session: an untimed encode, then ``runs`` timed ones."""
    from bpe_spark import Tokenizer
    from bpe_spark.spark import encode, encode_dataset
    from bpe_spark.spark.read.documents import read_documents
    from bpe_spark.spark.runtime.session import build_session

    overrides = {"spark.ui.enabled": "false", "spark.ui.showConsoleProgress": "false"}
    if args.get("event_dir"):
        overrides.update({"spark.eventLog.enabled": "true", "spark.eventLog.compress": "false",
                          "spark.eventLog.dir": Path(args["event_dir"]).as_uri()})
    overrides.update(args.get("conf", {}))
    spark = build_session("bpe-spark-bench-e4", master=args.get("master", f"local[{SPARK_CORES}]"),
                          overrides=overrides)
    tok = Tokenizer.load(args["model"])
    way, out = args["way"], args["out"]
    cached = None
    if way.startswith("encode(df), cached"):
        cached = spark.read.parquet(args["parquet"]).cache()
        cached.count()

    def once() -> None:
        if cached is not None:
            encode(cached, tok).write.format("noop").mode("overwrite").save()
            return
        source, _, output = way.partition(" -> ")
        docs = read_documents(spark, args[source], input_format=source)
        encode_dataset(docs, tok, out, output_format=output, overwrite=True)

    started = time.perf_counter()
    once()
    warmup = time.perf_counter() - started
    runs, cpu = [], []
    for _ in range(int(args.get("runs", 3))):
        before = tree_cpu()
        started = time.perf_counter()
        once()
        runs.append(time.perf_counter() - started)
        after = tree_cpu()
        cpu.append({kind: round(after[kind] - before.get(kind, 0.0), 2) for kind in after})
    floor = {}
    if cached is not None:
        floor["handoff_seconds"] = _handoff_seconds(cached, int(args.get("runs", 3)))
    elif way == "text -> bin":
        floor["fixed_seconds"] = _fixed_seconds(spark, tok, out, int(args.get("runs", 3)))
    digest = _digest(spark, cached, tok, out, way)
    spark.stop()
    return {"seconds": statistics.median(runs), "runs": runs, "warmup_seconds": warmup, "cpu": cpu, **floor,
            **digest}


def _median_seconds(once, runs: int) -> float:
    """The median wall time of ``runs`` calls of ``once`` after an untimed one."""
    once()
    seconds = []
    for _ in range(runs):
        started = time.perf_counter()
        once()
        seconds.append(time.perf_counter() - started)
    return statistics.median(seconds)


def _fixed_seconds(spark, tok, out: str, runs: int) -> float:
    """A Spark encode's fixed cost: ``text -> bin`` of a one-line file in the warm session
    (median of ``runs``): its jobs, the driver's planning, the shards and the manifest."""
    from bpe_spark.spark import encode_dataset
    from bpe_spark.spark.read.documents import read_documents

    def once() -> None:
        encode_dataset(read_documents(spark, str(inputs.floor_text())), tok, f"{out}-one-line",
                       output_format="bin", overwrite=True)

    seconds = _median_seconds(once, runs)
    shutil.rmtree(f"{out}-one-line", ignore_errors=True)
    return seconds


def _handoff_seconds(cached, runs: int) -> float:
    """What ``encode(df)`` costs before any encoding: its document-counting pass, then Spark's
    hand-off of the text to Python workers that only count their rows (median of ``runs``)."""
    import pyarrow as pa

    from bpe_spark.spark.read.segments import segmented
    from bpe_spark.spark.encoding.dataframe import _segment_counts

    def rows(batches):
        for batch in batches:
            yield pa.RecordBatch.from_arrays([pa.array([batch.num_rows], pa.int64())], ["rows"])

    def once() -> None:
        _segment_counts(segmented(cached))
        cached.select("text").mapInArrow(rows, "rows long").write.format("noop").mode("overwrite").save()

    return _median_seconds(once, runs)


def tree_cpu() -> dict[str, float]:
    """CPU seconds (user + system) used so far by this process (``driver``), the JVM (``jvm``)
    and every other descendant (``workers``: Spark's Python workers), from /proc; a process's
    waited-for children count in it. Under load, the CPU a run takes says more than its wall time."""
    import os

    tick = os.sysconf("SC_CLK_TCK")
    children: dict[int, list[int]] = {}
    stats: dict[int, tuple[str, float]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", encoding="ascii", errors="replace") as fh:
                raw = fh.read()
        except OSError:
            continue
        name = raw[raw.index("(") + 1:raw.rindex(")")]
        fields = raw[raw.rindex(")") + 2:].split()
        children.setdefault(int(fields[1]), []).append(int(entry))
        stats[int(entry)] = (name, sum(int(v) for v in fields[11:15]) / tick)
    me = os.getpid()
    out = {"driver": stats[me][1], "jvm": 0.0, "workers": 0.0}
    todo = list(children.get(me, []))
    while todo:
        pid = todo.pop()
        name, seconds = stats.get(pid, ("", 0.0))
        out["jvm" if name == "java" else "workers"] += seconds
        todo += children.get(pid, [])
    return out


def _digest(spark, cached, tok, out: str, way: str) -> dict:
    """The ids of the output, in ``doc_id`` order, digested as :func:`flat` digests its own."""
    import numpy as np
    import pyarrow.parquet as pq

    digest = IdDigest()
    if cached is not None:
        from bpe_spark.spark import encode

        # through Spark's Parquet writer: 100M ids collected to the driver would not fit its heap
        written = f"{out}-df"
        encode(cached, tok).select("doc_id", "input_ids").write.mode("overwrite").parquet(written)
        table = pq.read_table(written).sort_by("doc_id")
        shutil.rmtree(written)
        if not np.array_equal(table.column("doc_id").to_numpy(), np.arange(table.num_rows)):
            raise RuntimeError("encode(df): doc_id is not 0..n-1")
        rows = _rows(table)
    elif way.endswith("bin"):
        from bpe_spark.datasets.megatron import read_shards

        rows = read_shards(out)
    else:
        rows = []
        expected = 0
        for part in sorted(Path(out).glob("part-*.parquet")):
            table = pq.read_table(part, columns=["doc_id", "input_ids"])
            doc_ids = table.column("doc_id").to_numpy()
            if not np.array_equal(doc_ids, np.arange(expected, expected + len(doc_ids))):
                raise RuntimeError(f"{out}: doc_id is not 0..n-1 in file order")
            expected += len(doc_ids)
            rows += _rows(table)
    for row in rows:
        digest.add(np.asarray(row, dtype=np.int32))
    return {"digest": digest.hexdigest(), "tokens": digest.tokens, "documents": digest.documents}


def _rows(table) -> list:
    """The ``input_ids`` of ``table``, one numpy view per row (not a Python int per id)."""
    rows = []
    for chunk in table.column("input_ids").chunks:
        values, offsets = chunk.values.to_numpy(), chunk.offsets.to_numpy()
        rows += [values[a:b] for a, b in itertools.pairwise(offsets)]
    return rows


TASKS = {"flat": flat, "spark_way": spark_way}


def run_task(task: str, args: dict, threads: int = SPARK_CORES) -> Sample:
    """One task of this module in a fresh, watched child process."""
    return run_worker(task, args, threads=threads, module="bench.spark_encode")


# --- the case -----------------------------------------------------------------------------------


def case_e4(ctx: Context) -> None:
    text = inputs.en_books_text(ctx.quick)
    model, _ = inputs.trained_model(text, 8000 if ctx.quick else 32000)
    megabytes = text.stat().st_size / 1e6
    common = {"model": str(model), "text": str(text), "parquet": str(parquet_of(text)),
              "jsonl": str(jsonl_of(text)), "runs": 1 if ctx.quick else 3}
    scaled = {} if ctx.quick else {"text": str(inputs.scaled_text(text, SCALE))}
    if scaled:
        scaled["parquet"] = str(parquet_of(Path(scaled["text"])))
        scaled["jsonl"] = str(jsonl_of(Path(scaled["text"])))
    ways = [*WAYS, *(f"{way} @{SCALE}x" for way in (SCALED_WAYS if scaled else ()))]
    samples: dict[str, list[Sample]] = {"flat": [], **{way: [] for way in ways}}
    events = ctx.scratch / "E4-events"
    for i in range(ctx.repeat):  # alternate the flat encoder with the ways in, in turn
        order = ["flat", *ways]
        for name in order if i % 2 == 0 else reversed(order):
            if name == "flat":
                samples[name].append(run_task("flat", {**common, "scale": SCALE if scaled else 1}, threads=1))
                continue
            shutil.rmtree(events, ignore_errors=True)
            events.mkdir(parents=True)
            way, _, times = name.partition(" @")
            inputs_of = {**common, **scaled} if times else common
            sample = run_task("spark_way", {**inputs_of, "way": way, "out": str(ctx.scratch / "E4-out"),
                                            "event_dir": str(events), "conf": WAY_CONF.get(way, {})})
            sample.result["spark"] = spark_timeline(events)
            samples[name].append(sample)
    flat_rate = megabytes / median(s.result["seconds"] for s in samples["flat"])
    flat_cpu_rate = megabytes / median(s.result["cpu_seconds"] for s in samples["flat"])
    for name in ways:
        times = SCALE if name.endswith(f" @{SCALE}x") else 1
        size = megabytes * times
        reference = {s.result["scaled_digest" if times > 1 else "digest"] for s in samples["flat"]}
        rate = size / median(s.result["seconds"] for s in samples[name]) / SPARK_CORES
        ratio = rate / flat_rate
        same = len(reference) == 1 and {s.result["digest"] for s in samples[name]} == reference
        last = samples[name][-1].result
        cpu_rate = median(size / sum(_median_cpu(s.result).values()) for s in samples[name])
        way = name if times == 1 else f"{name.partition(' @')[0]}, {size:,.0f} MB ({times}x en_books)"
        ctx.add(Row("E4", f"Spark encode {way}: MB per CPU second, all processes", cpu_rate, flat_cpu_rate,
                    "in-process flat, CPU", "MB/s", cpu_rate / flat_cpu_rate, "", None, same,
                    note=f"{way}: the CPU of every process (driver, JVM, Python workers) per MB: what a loaded "
                         "machine changes least"))
        ctx.add(Row("E4", f"Spark encode {way}: MB/s per core (local[{SPARK_CORES}], warm)", rate, flat_rate,
                    "in-process flat, 1 thread", "MB/s", ratio, f">= {TARGET}", ratio >= TARGET, same,
                    note=f"{way}: runs {', '.join(f'{t:.2f}' for t in last['runs'])} s after a "
                         f"{last['warmup_seconds']:.1f} s warm-up encode; CPU of the median run: "
                         f"{_cpu_note(last, size)}; Spark event log (last run): {last.get('spark') or '?'}",
                    samples={"ours": [s.result["seconds"] for s in samples[name]],
                             "peer": [s.result["seconds"] for s in samples["flat"]]}))
        if "fixed_seconds" in last:
            _floor_row(ctx, samples[name], "fixed_seconds", size, flat_rate,
                       f"{way}: a one-line file (a Spark encode's fixed cost)",
                       "the encoding job, the shard job, the driver's planning and the manifest, with no data")
        if "handoff_seconds" in last:
            _floor_row(ctx, samples[name], "handoff_seconds", size, flat_rate,
                       f"{way}: Spark's hand-off alone (counting pass, text to Python workers that encode nothing)",
                       f"the flat encoder's own work on {SPARK_CORES} cores is {size / flat_rate / SPARK_CORES:.2f} s")


def _floor_row(ctx: Context, samples: list[Sample], key: str, megabytes: float, flat_rate: float, what: str,
               note: str) -> None:
    """A reference row: what Spark spends on ``megabytes`` before encoding (``key`` of each sample),
    against the target's whole budget for that size (wall time at :data:`TARGET` of the flat rate)."""
    budget = megabytes / (TARGET * flat_rate * SPARK_CORES)
    seconds = median(s.result[key] for s in samples)
    ctx.add(Row("E4", f"{what}, against the target's whole budget for {megabytes:,.0f} MB", seconds, budget,
                f"wall time at {TARGET} of the flat rate", "s", seconds / budget, "", None, None,
                note=f"{what}: {note}, of the {budget:.2f} s budget",
                samples={"ours": [s.result[key] for s in samples]}))


def _median_cpu(result: dict) -> dict[str, float]:
    """The CPU seconds by process class of the median timed run."""
    return sorted(zip(result["runs"], result["cpu"]), key=lambda pair: pair[0])[len(result["runs"]) // 2][1]


def _cpu_note(result: dict, megabytes: float) -> str:
    """The CPU seconds of the median timed run by process class, and MB per CPU second (what a
    loaded machine changes least)."""
    cpu = _median_cpu(result)
    parts = ", ".join(f"{kind} {seconds:.2f} s" for kind, seconds in cpu.items())
    return f"{parts}, {megabytes / max(sum(cpu.values()), 1e-9):.1f} MB per CPU second"


def main(argv: list[str]) -> int:
    _emit(TASKS[argv[0]](json.loads(argv[1] if len(argv) > 1 else "{}")))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
