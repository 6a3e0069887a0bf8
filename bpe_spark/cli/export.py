"""``bpe-spark export``: write a model in another format (GPT-2 files, tiktoken, tokenizer.json,
subword-nmt codes) and print the files written, locally, without Spark.
"""

from __future__ import annotations

import argparse

from bpe_spark.cli.arguments import add_overwrite, add_pattern_for_tiktoken, load_model

NAME = "export"
SUMMARY = "export a model to another format"
EXAMPLES = """
examples:
  bpe-spark export --model models/en32k --format gpt2 --out gpt2-files/
  bpe-spark export --model models/en32k --format tiktoken --out en32k.tiktoken
  bpe-spark export --model gpt2/vocab.json --format tokenizer.json --out gpt2-tokenizer.json
"""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from bpe_spark.formats import EXPORT_FORMATS

    parser.add_argument("--model", required=True, metavar="PATH",
                        help="the model to export (any format bpe-spark loads)")
    parser.add_argument("--format", required=True, choices=EXPORT_FORMATS, dest="export_format",
                        help="gpt2: a directory with vocab.json + merges.txt; tiktoken: a .tiktoken file; "
                             "tokenizer.json: a file (or directory); subword-nmt: a codes file")
    parser.add_argument("--out", required=True, metavar="PATH", help="where to write the export")
    add_pattern_for_tiktoken(parser)
    add_overwrite(parser)


def run(args: argparse.Namespace) -> int:
    from bpe_spark.formats import export_model
    from bpe_spark.output_guard import check_placement, check_writable

    check_placement(args.out, {"model": [args.model]}, option="--out")  # the rest: export_model's atomic write
    check_writable(args.out, option="--out")
    tok = load_model(args.model, args.pattern)
    for path in export_model(tok, args.export_format, args.out, overwrite=args.overwrite):
        print(path)
    return 0
