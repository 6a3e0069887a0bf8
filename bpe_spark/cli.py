"""The ``bpe-spark`` command: train, encode, decode, inspect, export.

Examples::

    bpe-spark train --input corpus.txt.gz --vocab-size 32000 --out models/en32k
    bpe-spark encode --model models/en32k --input docs.jsonl --input-format jsonl --out ids/
    bpe-spark decode --model models/en32k --ids "15496 995"
    bpe-spark inspect models/en32k
    bpe-spark export --model models/en32k --format gpt2 --out gpt2-files/

Spark runs in local mode (``local[*]``) unless ``--master`` or the environment says otherwise.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from bpe_spark.errors import BpeSparkError


def _add_common(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--master", help="Spark master URL (default: local[*], or $SPARK_MASTER)")
    parser.add_argument("--conf", metavar="FILE", help="Spark properties file (e.g. conf/spark-local.conf)")
    parser.add_argument(
        "--set", metavar="KEY=VALUE", action="append", default=[], dest="spark_set",
        help="extra Spark property, repeatable (e.g. --set spark.driver.memory=8g)",
    )
    parser.add_argument("--overwrite", action="store_true", help="replace an existing output")
    parser.add_argument("--verbose", "-v", action="store_true", help="log progress and Spark warnings")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="bpe-spark",
        description=__doc__.split("\n\n")[0],
        epilog=__doc__.split("Examples::", 1)[1],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    commands = {
        "train": ("train a BPE tokenizer on a corpus (or on pretoken counts)", _setup_train),
        "encode": ("encode a dataset to token ids (Parquet or binary shards)", _setup_encode),
        "decode": ("decode token ids back to text", _setup_decode),
        "inspect": ("print a model's summary", _setup_inspect),
        "export": ("export a model to another format", _setup_export),
    }
    for name, (help_text, setup) in commands.items():
        command = sub.add_parser(name, help=help_text, description=help_text,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
        setup(command)
    return parser


# --- train ------------------------------------------------------------------------------------
def _setup_train(parser: argparse.ArgumentParser) -> None:
    _add_common(parser)
    parser.set_defaults(run=_cmd_train)


def _cmd_train(args: argparse.Namespace) -> int:
    raise NotImplementedError("bpe-spark train")


# --- encode -----------------------------------------------------------------------------------
def _setup_encode(parser: argparse.ArgumentParser) -> None:
    _add_common(parser)
    parser.set_defaults(run=_cmd_encode)


def _cmd_encode(args: argparse.Namespace) -> int:
    raise NotImplementedError("bpe-spark encode")


# --- decode -----------------------------------------------------------------------------------
def _setup_decode(parser: argparse.ArgumentParser) -> None:
    _add_common(parser)
    parser.set_defaults(run=_cmd_decode)


def _cmd_decode(args: argparse.Namespace) -> int:
    raise NotImplementedError("bpe-spark decode")


# --- inspect / export -------------------------------------------------------------------------
def _setup_inspect(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("model", metavar="MODEL",
                        help="a model directory, tokenizer.json, GPT-2 vocab.json (or its directory) or .tiktoken file")
    parser.add_argument("--merges", type=int, default=10, metavar="N", help="how many first merges to show (default 10)")
    parser.add_argument("--pattern", help="pretokenization pattern, for a .tiktoken file that is not OpenAI's")
    parser.add_argument("--json", action="store_true", help="print the summary as JSON")
    _add_common(parser)
    parser.set_defaults(run=_cmd_inspect)


def _cmd_inspect(args: argparse.Namespace) -> int:
    import json

    from bpe_spark.formats import describe, describe_text, load_any

    options = {"pattern": args.pattern} if args.pattern else {}
    tok = load_any(args.model, **options)
    if args.json:
        print(json.dumps(describe(tok, first_merges=args.merges), ensure_ascii=False, indent=2))
    else:
        print(f"model: {args.model}")
        print(describe_text(tok, first_merges=args.merges))
    return 0


def _setup_export(parser: argparse.ArgumentParser) -> None:
    from bpe_spark.formats import EXPORT_FORMATS

    parser.add_argument("--model", required=True, metavar="PATH",
                        help="the model to export (any format bpe-spark loads)")
    parser.add_argument("--format", required=True, choices=EXPORT_FORMATS, dest="export_format",
                        help="gpt2: a directory with vocab.json + merges.txt; tiktoken: a .tiktoken file; "
                             "tokenizer.json: a file (or directory); subword-nmt: a codes file")
    parser.add_argument("--out", required=True, metavar="PATH", help="where to write the export")
    parser.add_argument("--pattern", help="pretokenization pattern, for a .tiktoken file that is not OpenAI's")
    _add_common(parser)
    parser.set_defaults(run=_cmd_export)


def _cmd_export(args: argparse.Namespace) -> int:
    from bpe_spark.formats import export_model, load_any

    options = {"pattern": args.pattern} if args.pattern else {}
    tok = load_any(args.model, **options)
    for path in export_model(tok, args.export_format, args.out, overwrite=args.overwrite):
        print(path)
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return int(args.run(args) or 0)
    except BpeSparkError as exc:
        print(f"bpe-spark {args.command}: error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
