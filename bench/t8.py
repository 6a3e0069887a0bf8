"""T8, scale on one machine: ``bpe-spark train`` on about 4 GB with over 10 million distinct
pretokens (:mod:`bench.t8_corpus`) to 64,000, against ``tokenizers`` on the same file.

Three runs, once each (each takes minutes to an hour; ``--repeat`` is not applied):

- ours at the default driver budget (``auto``), ``local[2]``;
- ours at a driver budget that forces exact rounds (:data:`ROUNDS_BUDGET` of the distinct
  pretokens); its merges must equal the first run's;
- ``tokenizers``' BpeTrainer (2 threads) under an address-space limit (``prlimit --as``,
  :data:`PEER_MEMORY_GIB`) and a timeout (:data:`PEER_TIMEOUT`): it may run out of either, and
  the row says which and what it reached; if it completes, its merges must equal ours.

Each run is watched by :mod:`bench.procmon`: wall time, the driver's Python peak (the target:
below :data:`DRIVER_LIMIT_MB`), the JVM's (driver and executors: one JVM in local mode) and the
largest Python worker's. ``--quick`` builds a 0.2 GB corpus and trains to 8,000 (a smoke test).
T8 is not in the default case list: ``python -m bench.run --cases T8``.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
from pathlib import Path

from bench.procmon import MonitoredRun, monitored
from bench.run import (
    SPARK_CORES,
    Context,
    Row,
    _child_env,
    bpe_spark_command,
    run_worker,
    spark_timeline,
)
from bench.t8_corpus import t8_corpus
from bench.workers import RESULT_PREFIX

VOCAB = 64_000
DRIVER_LIMIT_MB = 2048
ROUNDS_BUDGET = os.environ.get("BPE_SPARK_T8_ROUNDS_BUDGET", "0.25")
PEER_MEMORY_GIB = float(os.environ.get("BPE_SPARK_T8_PEER_GIB", "12"))
PEER_TIMEOUT = float(os.environ.get("BPE_SPARK_T8_PEER_TIMEOUT", "1500"))
OURS_TIMEOUT = float(os.environ.get("BPE_SPARK_T8_OURS_TIMEOUT", "3600"))


def _stats(model: Path) -> dict:
    try:
        return json.loads((model / "bpe_spark.json").read_text(encoding="utf-8"))["stats"]
    except (OSError, KeyError, ValueError):
        return {}


def _ours(ctx: Context, name: str, corpus: Path, vocab: int, budget: str | None) -> tuple[MonitoredRun, dict]:
    out = ctx.scratch / f"T8-{name}-model"
    events = ctx.scratch / f"T8-{name}-events"
    shutil.rmtree(events, ignore_errors=True)
    events.mkdir(parents=True)
    argv = ["train", "--input", str(corpus), "--vocab-size", str(vocab), "--out", str(out),
            "--master", f"local[{SPARK_CORES}]", "--overwrite", "--no-report",
            "--set", "spark.eventLog.enabled=true", "--set", f"spark.eventLog.dir={events.as_uri()}",
            "--set", "spark.eventLog.compress=false"]
    if budget is not None:
        argv += ["--driver-budget", budget]
    run = monitored(bpe_spark_command() + argv, env=_child_env(), cwd=str(Path(__file__).resolve().parents[1]),
                    timeout=OURS_TIMEOUT)
    info = {"phases": next((line for line in reversed(run.stdout.splitlines()) if line.startswith("time:")), ""),
            "spark": spark_timeline(events), "stats": _stats(out), "ok": run.returncode == 0,
            "tail": "\n".join((run.stderr or run.stdout).strip().splitlines()[-8:])}
    if run.returncode == 0:
        info["digest"] = run_worker("model_merges", {"model": str(out)}).result["digest"]
    workers = sorted((mb for pid, (comm, mb) in run.processes.items() if pid != run.pid and comm != "java"),
                     reverse=True)
    info["worker_peaks_mb"] = [round(mb) for mb in workers[:4]]
    return run, info


def _peer(corpus: Path, vocab: int) -> tuple[MonitoredRun, dict]:
    args = {"files": [str(corpus)], "vocab_size": vocab}
    limit = int(PEER_MEMORY_GIB * (1 << 30))
    argv = ["prlimit", f"--as={limit}", "--", sys.executable, "-m", "bench.workers", "hf_train", json.dumps(args)]
    run = monitored(argv, env=_child_env(), cwd=str(Path(__file__).resolve().parents[1]), timeout=PEER_TIMEOUT)
    lines = [line for line in run.stdout.splitlines() if line.startswith(RESULT_PREFIX)]
    result = json.loads(lines[-1][len(RESULT_PREFIX):]) if run.returncode == 0 and lines else {}
    if result:
        outcome = "completed"
    elif run.wall_seconds >= PEER_TIMEOUT:
        outcome = f"stopped at the {PEER_TIMEOUT / 60:.0f} min timeout"
    else:
        tail = (run.stderr or run.stdout).strip().splitlines()[-1:] or ["?"]
        outcome = f"failed (exit {run.returncode}, under a {PEER_MEMORY_GIB:g} GiB address-space limit): {tail[0][:160]}"
    return run, {"outcome": outcome, **result}


def _describe(name: str, run: MonitoredRun, info: dict) -> str:
    stats = info["stats"]
    return (f"{name}: {'ok' if info['ok'] else 'FAILED'} in {run.wall_seconds:.0f} s; mode {stats.get('mode', '?')}, "
            f"{stats.get('rounds', '?')} rounds, driver budget {stats.get('driver_budget', '?')} "
            f"({stats.get('driver_budget_from', '?')}); peaks MiB: driver {run.peak_mb['root']:,.0f}, "
            f"JVM {run.peak_mb['jvm']:,.0f}, Python workers {info['worker_peaks_mb']}, whole job "
            f"{run.peak_mb['total']:,.0f}; bpe-spark says {info['phases'] or '?'}; Spark: {info['spark'] or '?'}"
            + ("" if info["ok"] else f"; error: {info['tail']}"))


def case_t8(ctx: Context) -> None:
    gigabytes, vocab = (0.2, 8000) if ctx.quick else (4.0, VOCAB)
    corpus = t8_corpus(gigabytes=gigabytes)
    size_gb = corpus.stat().st_size / 1e9
    runs = {"auto": _ours(ctx, "auto", corpus, vocab, None),
            "rounds": _ours(ctx, "rounds", corpus, vocab, ROUNDS_BUDGET)}
    peer_run, peer = _peer(corpus, vocab)
    distinct = runs["auto"][1]["stats"].get("distinct_pretokens")
    distinct = f"{distinct:,}" if distinct else "?"
    digest = runs["auto"][1].get("digest")
    peer_s = peer_run.wall_seconds if peer.get("digest") else None
    for name, label in (("auto", "default driver budget (auto)"), ("rounds", f"driver budget {ROUNDS_BUDGET}")):
        run, info = runs[name]
        same = None
        if info.get("digest") and name == "rounds" and digest:
            same = info["digest"] == digest
        if info.get("digest") and peer.get("digest"):
            same = (same is not False) and info["digest"] == peer["digest"]
        seconds = run.wall_seconds if info["ok"] else None
        ctx.add(Row("T8", f"train {size_gb:.1f} GB ({distinct} distinct) to {vocab}, {label}", seconds, peer_s,
                    "tokenizers (2 threads)", "s", seconds / peer_s if seconds and peer_s else None, "", None, same,
                    note=_describe(name, run, info),
                    samples={"peak_mb": run.peak_mb, "stats": info["stats"], "worker_peaks_mb": info["worker_peaks_mb"]}))
        driver = run.peak_mb["root"]
        ctx.add(Row("T8", f"driver Python peak, {label}", driver, peer_run.peak_mb["root"], "tokenizers peak", "MB",
                    driver / peer_run.peak_mb["root"] if peer_run.peak_mb["root"] else None, f"< {DRIVER_LIMIT_MB}",
                    info["ok"] and driver < DRIVER_LIMIT_MB,
                    note=f"JVM peak {run.peak_mb['jvm']:,.0f} MiB, largest Python worker "
                         f"{run.peak_mb['worker_max']:,.0f} MiB, whole job {run.peak_mb['total']:,.0f} MiB"))
    ctx.add(Row("T8", f"tokenizers on the same file to {vocab}", None, peer_s, "tokenizers (2 threads)", "s",
                note=f"tokenizers {peer['outcome']} after {peer_run.wall_seconds:.0f} s wall"
                     + (f" (its train() call {peer['seconds']:.0f} s)" if peer.get("seconds") else "")
                     + f"; its peak {peer_run.peak_mb['root']:,.0f} MiB",
                samples={"peak_mb": peer_run.peak_mb, "outcome": peer["outcome"]}))
