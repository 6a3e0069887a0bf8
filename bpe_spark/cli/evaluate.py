"""``bpe-spark evaluate``: compare tokenizers on a corpus in one Spark pass
(:func:`bpe_spark.spark.evaluation.evaluate`), print a line per model and, with ``--out``, write
``evaluation.json`` and ``report.html`` (:mod:`bpe_spark.inspect.evaluate_report`). Every model
loads, the input is walked and a group column is looked for in local files, and the output is
checked, before Spark starts: each of those failures is one line.
"""

from __future__ import annotations

import argparse
import re

from bpe_spark.cli.arguments import (
    DOCUMENT_DEFAULTS,
    add_document_options,
    add_overwrite,
    add_spark_options,
    check_document_input,
    load_model,
    progress_reporter,
    start_spark,
)
from bpe_spark.errors import ConfigError

NAME = "evaluate"
SUMMARY = "compare tokenizers on a corpus: bytes per token by group, parity, vocabulary use (report.html + JSON)"
EXAMPLES = """
examples:
  bpe-spark evaluate --model out/sample-model --input data/sample/tiny_shakespeare.txt.gz --out out/evaluation
  bpe-spark evaluate --model gpt2=gpt2/vocab.json --model cl100k=cl100k_base.tiktoken --model mine=models/en32k \\
      --input corpus/ --group-by script --out eval/
  bpe-spark evaluate --model models/a --model models/b --input docs.parquet --group-by language --out eval/

--model NAME=PATH names a model in the report (default: the last part of PATH). --group-by COLUMN
groups by a column of jsonl/parquet input; --group-by script by the script most of a document's
letters belong to (Latin, Han, Cyrillic...; "none" without letters); column:NAME names a column
called script. Output: OUT/evaluation.json (every figure) and OUT/report.html; the definitions of
the figures are in docs/guides/evaluate.md.
"""
_NAMED = re.compile(r"([A-Za-z0-9_.+-]+)=(.+)")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--model", required=True, action="append", metavar="[NAME=]PATH",
                        help="a tokenizer to compare, repeatable: a model directory, tokenizer.json, GPT-2 vocab.json "
                             "or .tiktoken file (local or a URI); NAME=PATH names it in the report")
    parser.add_argument("--input", required=True, nargs="+", metavar="PATH",
                        help="the corpus: files, globs or directories (local, hdfs://, s3a://...)")
    parser.add_argument("--group-by", metavar="COLUMN|script",
                        help="figures per group: a jsonl/parquet column (language, domain...), or 'script' (the "
                             "majority script of each document's letters); default: one group")
    parser.add_argument("--out", metavar="DIR",
                        help="a local directory to write evaluation.json and report.html into (must not exist "
                             "unless --overwrite); without it the figures are only printed")
    parser.add_argument("--top", type=int, default=20, metavar="N",
                        help="how many most frequent, longest and residue tokens to list (default 20)")
    parser.add_argument("--residue-ratio", type=int, default=100, metavar="R",
                        help="a merged token is residue when merged through at least R times as often as it is "
                             "produced (default 100)")
    parser.add_argument("--residue-min", type=int, default=100, metavar="N",
                        help="... and merged through at least N times (default 100)")
    add_document_options(parser)
    parser.set_defaults(**DOCUMENT_DEFAULTS)
    add_overwrite(parser)
    add_spark_options(parser)


def model_arguments(given: list[str]) -> list[tuple[str, str]]:
    """``(name, path)`` of each ``--model``: ``NAME=PATH``, else the path's last part; a name
    given twice gets ``#2``, ``#3``...

    >>> model_arguments(["gpt2=a/vocab.json", "models/en32k/", "x/en32k"])
    [('gpt2', 'a/vocab.json'), ('en32k', 'models/en32k/'), ('en32k#2', 'x/en32k')]
    """
    import os

    out, seen = [], {}
    for arg in given:
        match = _NAMED.fullmatch(arg)
        if match and not os.path.exists(arg):
            name, path = match.group(1), match.group(2)
        else:
            name, path = os.path.basename(arg.rstrip("/")) or arg, arg
        seen[name] = seen.get(name, 0) + 1
        out.append((name if seen[name] == 1 else f"{name}#{seen[name]}", path))
    return out


def run(args: argparse.Namespace) -> int:
    from bpe_spark.inspect.evaluate_figures import check_counts
    from bpe_spark.spark.evaluation import SCRIPT, group_column

    check_counts(top=args.top, residue_ratio=args.residue_ratio, residue_min=args.residue_min)
    column = group_column(args.group_by)
    if column is not None and column == args.text_column:
        raise ConfigError(f"--group-by {args.group_by}: that is the text column; name another column, or 'script'")
    args.input_format = check_document_input(args.input, args.input_format, args.document, args.text_column,
                                             [column] if column else [])
    if column is not None and args.input_format == "text":
        raise ConfigError(f"--group-by {args.group_by}: text input has no columns; use jsonl or parquet input, "
                          f"or --group-by {SCRIPT}")
    models = model_arguments(args.model)
    if args.out is not None:
        from bpe_spark.storage.output_guard import check_output, is_local

        if not is_local(args.out):
            raise ConfigError(f"--out {args.out}: give a local directory (the report is written by the driver)")
        check_output(args.out, "evaluation", overwrite=args.overwrite, option="--out",
                     protected={"input": args.input, "model": [path for _, path in models]})
    # every model loads (and fails, in one line) before Spark starts
    tokenizers = {name: load_model(path) for name, path in models}
    # whole files are big documents: fewer per Arrow batch keeps the Python workers' memory small
    properties = {"spark.sql.execution.arrow.maxRecordsPerBatch": "64"} if args.document == "file" else {}
    spark = start_spark(args, NAME, light_input=None if column else (args.input, args.input_format, args.document, True),
                        properties=properties, shared_input=bool(args.shared_input))
    from bpe_spark.spark import evaluate, read_documents

    docs = read_documents(spark, args.input, input_format=args.input_format, text_col=args.text_column,
                          document=args.document, keep_columns=[column] if column else [],
                          on_bad_input=args.on_bad_input, shared_input=args.shared_input)
    figures = evaluate(docs, tokenizers, text_col=args.text_column, group_by=args.group_by, top=args.top,
                       residue_ratio=args.residue_ratio, residue_min=args.residue_min,
                       progress=progress_reporter(args, NAME), sources=[path for _, path in models])
    figures["input"] = list(args.input)
    from bpe_spark.inspect.evaluate_report import summary_lines, write_evaluation

    for line in summary_lines(figures):
        print(line)
    if args.out is not None:
        write_evaluation(figures, args.out, overwrite=args.overwrite)
        print(f"report: {args.out}/report.html, figures: {args.out}/evaluation.json")
    return 0
