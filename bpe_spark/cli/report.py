"""``bpe-spark report``: write a model's training report (one self-contained HTML file of plots
and key figures, :mod:`bpe_spark.inspect.report`) without Spark; and the report ``bpe-spark train``
writes into the model directory it made (:func:`train_report`), with the sample it chooses.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from bpe_spark.cli.arguments import add_overwrite, add_pattern_for_tiktoken, load_model
from bpe_spark.errors import ConfigError

NAME = "report"
SUMMARY = "write a model's training report (report.html: plots and key figures)"
EXAMPLES = """
examples:
  bpe-spark report out/sample-model --sample data/sample/tiny_shakespeare.txt.gz   # out/sample-model/report.html
  bpe-spark report models/en32k --sample held-out.txt.gz --out out/en32k-report.html
  bpe-spark report gpt2/vocab.json --sample held-out.jsonl --out out/gpt2-report.html

The sample (text, .gz/.bz2, .jsonl or .parquet: its --text-column; the first MB is read) gives the
bytes-per-token plot; the plot's title says when it is part of the model's training input.
bpe-spark train writes the report itself (--report-sample FILE, --no-report).
"""
TRAIN_SAMPLE_LIMIT = 256 << 10  # a quarter of a report's default: the report must not slow a training


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("model", metavar="MODEL",
                        help="a model directory, tokenizer.json, GPT-2 vocab.json (or its directory) or .tiktoken file; "
                             "a local path or a URI (s3://, s3a://, gs://...)")
    parser.add_argument("--sample", metavar="FILE",
                        help="local text to measure bytes per token on, as the vocabulary grows (text, .gz/.bz2, "
                             ".jsonl or .parquet); without it that plot is left out")
    parser.add_argument("--text-column", default="text", metavar="C",
                        help="the text column of a .jsonl or .parquet --sample (default: text)")
    parser.add_argument("--out", metavar="FILE",
                        help="the HTML file to write (default: report.html in a local model directory, replaced "
                             "if there; required for any other MODEL)")
    add_pattern_for_tiktoken(parser)
    add_overwrite(parser)


def sample_format(path: str) -> str:
    """The format of a sample file by its name: ``jsonl``, ``parquet`` or ``text``.

    >>> sample_format("held-out.jsonl.gz"), sample_format("x.parquet"), sample_format("a.txt")
    ('jsonl', 'parquet', 'text')
    """
    from bpe_spark.storage.input_format import format_of_name  # the names read_documents goes by

    return format_of_name(path)


def _is_training_input(path: str, tok) -> bool:
    """Whether the local file ``path`` is (or is inside) an input the model was trained on."""
    from bpe_spark.storage.output_guard import is_local, local_path

    given = Path(path).resolve()
    for source in (tok.metadata.get("source") or {}).get("input") or ():
        if is_local(str(source)):
            trained = Path(local_path(str(source))).resolve()
            if given == trained or trained in given.parents:
                return True
    return False


def run(args: argparse.Namespace) -> int:
    import time

    from bpe_spark.storage.output_guard import is_local
    from bpe_spark.inspect.report import REPORT_FILE, Sample, figures_of, read_sample, write_report

    local_dir = is_local(args.model) and Path(args.model).is_dir()
    if args.out is None and not local_dir:
        raise ConfigError(f"--out FILE is required: {args.model} is not a local model directory to write "
                          f"{REPORT_FILE} into")
    if args.sample is not None and not Path(args.sample).is_file():
        raise ConfigError(f"--sample {args.sample}: no such file; give a local text file")
    out = Path(args.out) if args.out is not None else Path(args.model) / REPORT_FILE
    started = time.perf_counter()
    tok = load_model(args.model, args.pattern, option="model")
    sample = None
    if args.sample is not None:
        text = read_sample(args.sample, input_format=sample_format(args.sample), text_column=args.text_column)
        if not text:
            raise ConfigError(f"--sample {args.sample} holds no text")
        sample = Sample(text, Path(args.sample).name, from_training=_is_training_input(args.sample, tok))
    # the model's own report.html is the model's to replace; any other file only with --overwrite
    write_report(tok, out, sample=sample, name=args.model, overwrite=args.overwrite or args.out is None)
    page = out.read_text(encoding="utf-8")
    print(f"report: {out} ({len(figures_of(page))} plots, {len(page.encode()) // 1024:,} KB, "
          f"{time.perf_counter() - started:.1f} s)")
    return 0


# --- the report of bpe-spark train ------------------------------------------------------------
def training_sample(tok, report_sample: str | None, options: dict):
    """The sample of a training's report: ``--report-sample FILE`` (held out, unless it is an
    input), else the start of the first local input file (said to be training data), else None."""
    from bpe_spark.inspect.report import Sample, read_sample

    if report_sample:
        text = read_sample(report_sample, limit=TRAIN_SAMPLE_LIMIT, input_format=sample_format(report_sample),
                           text_column=options.get("text_column") or "text")
        return Sample(text, Path(report_sample).name, from_training=_is_training_input(report_sample, tok)) if text else None
    first = _first_local_file(options.get("input") or ())
    if first is None:
        return None
    text = read_sample(first, limit=TRAIN_SAMPLE_LIMIT, input_format=options.get("input_format") or "text",
                       text_column=options.get("text_column") or "text")
    return Sample(text, f"the first {TRAIN_SAMPLE_LIMIT >> 10} KB of {Path(first).name}", from_training=True) if text else None


def _first_local_file(inputs) -> str | None:
    """The first file (sorted) of the first local input that holds one: a file, a glob or a directory."""
    from bpe_spark.cli.arguments import local_input_files

    for given in inputs:
        if files := local_input_files([str(given)]):
            return files[0]
    return None


def preload_plotting() -> None:
    """Import matplotlib in a daemon thread while Spark trains (the driver mostly waits then), so
    the report after training does not add the second its import takes."""
    import threading

    def load() -> None:
        import contextlib
        import importlib

        with contextlib.suppress(Exception):  # the report says what is missing, later
            for name in ("matplotlib.figure", "matplotlib.backends.backend_agg"):
                importlib.import_module(name)

    threading.Thread(target=load, name="bpe-spark-report-preload", daemon=True).start()


def train_report(spark, tok, out: str, options: dict) -> str | None:
    """Write ``report.html`` into the model directory ``out`` that ``train`` just wrote (any URI
    the session reaches: a remote one gets the file uploaded). A failure is one warning line on
    stderr and None: the model is complete without its report. The path written, else None."""
    import os
    import tempfile
    import time

    from bpe_spark.inspect.report import REPORT_FILE, report_failure, write_report

    started = time.perf_counter()
    try:
        sample = training_sample(tok, options.get("report_sample"), options)
        from bpe_spark.spark.storage.uris import driver_store

        store = driver_store(spark, out, option="--out")
        if store.layer == "local":
            write_report(tok, os.path.join(store.path, REPORT_FILE), sample=sample, name=out, overwrite=True)
            target = os.path.join(out, REPORT_FILE)
        else:
            with tempfile.TemporaryDirectory(prefix="bpe-spark-report-") as scratch:
                local = write_report(tok, os.path.join(scratch, REPORT_FILE), sample=sample, name=out)
                target = store.files.join(store.path, REPORT_FILE)
                store.files.upload(str(local), target)
            target = out.rstrip("/") + "/" + REPORT_FILE
    except Exception as exc:  # noqa: BLE001 - a report never fails a training
        print(f"bpe-spark train: warning: {report_failure(exc)}", file=sys.stderr)
        return None
    tok.metadata.setdefault("timings", {})["report_seconds"] = round(time.perf_counter() - started, 3)
    return target
