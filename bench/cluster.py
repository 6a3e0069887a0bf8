"""The cluster benchmark (issue 13, acceptance 2): en_books trained to 32000 by
``jobs/train_tokenizer.py`` on the two-worker standalone cluster (``tests/cluster/standalone.py``:
two 1-core workers, each in its own mount namespace) against ``local[2]``, both through
spark-submit from the checkout's interpreter, alternated in one sitting; the wall time of each
spark-submit, the median of ``--repeat`` runs; the merges must be the same bytes.

    python -m bench.cluster                        # 3 runs of each setup
    python -m bench.cluster --setups archive,node-shared --repeat 5

Setups: the executors' Python (``tests/cluster/submission.py``): ``archive`` ships
``dist/env.tar.gz`` with every application (each executor unpacks it first), ``node`` runs
bpe-spark installed on the nodes (pyspark too, with ``spark.python.daemon.module`` set to ours,
which imports it instead of Spark's zip); ``-shared`` adds ``--shared-input`` (the shared directory is
mounted alike on every worker: the tasks read the text themselves, as in local mode; without it
Spark's reader reads it). The jobs do not wait for the executors before their first job (the
tests do), so the executors start while the driver does. Needs
``make dist``; brings the cluster up (and down again if it started it). Results:
bench-results/cluster-<time>.json and .md, and bench-results/cluster-latest.{json,md}; the table
also becomes the stored result ``bench/results/cluster.json`` of docs/performance.md
(:mod:`bench.performance_page`; not with ``--no-publish``).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import sys
import time
from pathlib import Path

from bench import inputs, performance_page

sys.path.insert(0, str(inputs.ROOT / "tests" / "cluster"))  # the cluster and how to submit to it
import standalone
import submission

RESULTS = inputs.ROOT / "bench-results"
TRAIN_JOB = inputs.ROOT / "jobs" / "train_tokenizer.py"
WORK = standalone.SHARED / "bench"
LOCAL = "local[2]"


def timed_train(setup: str, text: Path, vocab_size: int, number: int) -> tuple[float, bytes]:
    """One spark-submit of the training job in ``setup``: its wall time and the merges it wrote."""
    out = WORK / f"{setup}-{number}"
    shutil.rmtree(out, ignore_errors=True)
    cwd = WORK / "driver"
    cwd.mkdir(parents=True, exist_ok=True)
    environment, _, reader = setup.partition("-")
    args = ["--input", str(text), "--vocab-size", str(vocab_size), "--out", str(out)]
    if reader == "shared":
        args.append("--shared-input")  # the tasks read the shared files themselves, as in local mode
    if setup == "local":
        options = {"master": LOCAL}
    else:
        options = {"environment": environment, "wait_for_executors": False}
        if environment == "node":  # installed on the nodes, pyspark too: our daemon imports it (no zip)
            options["conf"] = {"spark.python.daemon.module": "bpe_spark.spark.runtime.daemon"}
    started = time.perf_counter()
    submission.submit(TRAIN_JOB, args, name=f"bench-{setup}-{number}", cwd=cwd, **options).check()
    seconds = time.perf_counter() - started
    merges = (out / "merges.parquet").read_bytes()
    shutil.rmtree(out)
    return seconds, merges


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.cluster", description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--vocab-size", type=int, default=32000)
    parser.add_argument("--no-publish", action="store_true",
                        help="leave bench/results/ and docs/performance.md alone")
    parser.add_argument("--setups", default="archive,archive-shared,node-shared",
                        help="comma-separated cluster setups besides local[2]: ENVIRONMENT (archive or node: "
                             "the executors' Python) or ENVIRONMENT-shared (with --shared-input)")
    args = parser.parse_args(argv)
    command = " ".join(["python -m bench.cluster", *(argv if argv is not None else sys.argv[1:])])
    setups = [name.strip() for name in args.setups.split(",") if name.strip()]
    for setup in setups:
        environment, _, reader = setup.partition("-")
        if environment not in submission.ENVIRONMENTS[:2] or reader not in ("", "shared"):
            parser.error(f"--setups: {setup!r} is none of archive, node, archive-shared, node-shared")
    submission.require_dist()
    started = time.strftime("%Y-%m-%d %H:%M:%S")
    started_cluster = not standalone.running("master")
    standalone.up()
    try:
        WORK.mkdir(parents=True, exist_ok=True)
        text = WORK / "en_books.txt"
        if not text.is_file():
            shutil.copyfile(inputs.en_books_text(quick=False), text)
        machine = {"cpus": os.cpu_count(), "python": platform.python_version(),
                   "load_average": os.getloadavg()}
        labels = ["local", *setups]
        walls: dict[str, list[float]] = {label: [] for label in labels}
        merges: dict[str, set[bytes]] = {label: set() for label in labels}
        for number in range(args.repeat):
            order = labels if number % 2 == 0 else labels[::-1]  # alternate: the load drifts
            for label in order:
                seconds, written = timed_train(label, text, args.vocab_size, number)
                walls[label].append(seconds)
                merges[label].add(written)
                print(f"{label} run {number + 1}: {seconds:.1f} s", flush=True)
        machine["load_average_end"] = os.getloadavg()
    finally:
        if started_cluster:
            standalone.down()
    same = len(set().union(*merges.values())) == 1
    local_median = statistics.median(walls["local"])
    rows = [{"setup": "local" if label == "local" else f"cluster, {label}",
             "median_s": statistics.median(walls[label]), "runs_s": walls[label],
             "ratio_to_local": statistics.median(walls[label]) / local_median} for label in labels]
    report = {"case": f"train {text.name} to {args.vocab_size}, spark-submit wall time", "machine": machine,
              "same_merges": same, "rows": rows}
    title = (f"{report['case']}; {machine['cpus']} CPUs, load average {machine['load_average'][0]:.1f} at "
             f"start, {machine['load_average_end'][0]:.1f} at the end; same merges: {'yes' if same else 'NO'}")
    lines = [title, "",
             "| setup | median | runs | ratio to local[2] |", "|---|---:|---|---:|"]
    lines += [f"| {row['setup']} | {row['median_s']:.1f} s | {', '.join(f'{s:.1f}' for s in row['runs_s'])} | "
              f"{row['ratio_to_local']:.2f} |" for row in rows]
    markdown = "\n".join(lines) + "\n"
    RESULTS.mkdir(exist_ok=True)
    stamp = time.strftime("%Y%m%d-%H%M%S")
    for name in (f"cluster-{stamp}", "cluster-latest"):
        (RESULTS / f"{name}.json").write_text(json.dumps(report, indent=2), encoding="utf-8")
        (RESULTS / f"{name}.md").write_text(markdown, encoding="utf-8")
    if not args.no_publish:
        performance_page.publish_markdown("cluster", command, started, machine, markdown)
    print(markdown)
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
