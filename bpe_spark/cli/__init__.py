"""The ``bpe-spark`` command: train, count, encode, decode, inspect, export, report, evaluate.

Examples::

    bpe-spark train --input corpus.txt.gz --vocab-size 32000 --out models/en32k
    bpe-spark count --input corpus/ --out counts.parquet
    bpe-spark encode --model models/en32k --input docs.jsonl --input-format jsonl --out ids/
    bpe-spark decode --model models/en32k --ids "15496 995"
    bpe-spark inspect models/en32k
    bpe-spark export --model models/en32k --format gpt2 --out gpt2-files/
    bpe-spark evaluate --model models/en32k --model gpt2=gpt2/vocab.json --input corpus/ --out eval/
    bpe-spark --version

Spark runs in local mode (``local[*]``) unless ``--master`` or the environment says otherwise.

This package owns the parser (one module per command, each with its options, examples and
``run``; the options several share in :mod:`bpe_spark.cli.arguments`; the strict parsing, with
its "did you mean", and ``--version`` in :mod:`bpe_spark.cli.parser`) and :func:`main`: the
dispatch to a command and its error handling (one line and an exit status for every failure a
user can cause: :mod:`bpe_spark.cli.failures`).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from bpe_spark.cli import count, decode, encode, evaluate, export, inspect, report, train
from bpe_spark.cli.failures import run_command
from bpe_spark.cli.parser import Parser, VersionAction
from bpe_spark.errors import speaks_cli

COMMANDS = (train, count, encode, decode, inspect, export, report, evaluate)
_HELP = __doc__.split("\n\nThis package owns", 1)[0].replace("``", "")  # what bpe-spark --help shows


def build_parser(only: str | None = None) -> argparse.ArgumentParser:
    """The parser of every command; ``only``: set up that command's options alone (the others'
    imports, numpy's for one, then never load: ``bpe-spark --help`` stays quick)."""
    parser = Parser(
        prog="bpe-spark",
        description=_HELP.split("\n\n")[0],
        epilog=_HELP.split("Examples::", 1)[1],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action=VersionAction,
                        help="print the versions of bpe-spark, Python, pyspark and Java, and exit")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for command in COMMANDS:
        subparser = sub.add_parser(command.NAME, help=command.SUMMARY, description=command.SUMMARY,
                                   epilog=command.EXAMPLES, formatter_class=argparse.RawDescriptionHelpFormatter)
        if only is None or only == command.NAME:
            command.add_arguments(subparser)
        subparser.set_defaults(run=command.run)
    return parser


@speaks_cli  # its messages name options as --overwrite, not overwrite=True
def main(argv: Sequence[str] | None = None) -> int:
    """Run ``bpe-spark`` with ``argv`` (default: the process's arguments); the exit status."""
    argv = sys.argv[1:] if argv is None else list(argv)
    args = build_parser(argv[0] if argv else "").parse_args(argv)
    return run_command(args.command, lambda: args.run(args), args)
