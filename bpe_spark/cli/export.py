"""``bpe-spark export``: write a model in another format (GPT-2 files, tiktoken, tokenizer.json,
subword-nmt codes) and print the files written, without Spark. ``--model`` and ``--out`` may be
local paths or URIs pyarrow reaches (``s3://``, ``s3a://``, ``gs://``...; :mod:`bpe_spark.remote_files`),
``--out`` checked before the model is read.
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
  bpe-spark export --model s3a://bucket/models/en32k --format tiktoken --out s3a://bucket/en32k.tiktoken

URIs are read and written through pyarrow: S3 credentials from its default chain (AWS_* variables,
~/.aws), a custom endpoint from $AWS_ENDPOINT_URL.
"""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from bpe_spark.formats import EXPORT_FORMATS

    parser.add_argument("--model", required=True, metavar="PATH",
                        help="the model to export (any format bpe-spark loads; a path or a URI)")
    parser.add_argument("--format", required=True, choices=EXPORT_FORMATS, dest="export_format",
                        help="gpt2: a directory with vocab.json + merges.txt; tiktoken: a .tiktoken file; "
                             "tokenizer.json: a file (or directory); subword-nmt: a codes file")
    parser.add_argument("--out", required=True, metavar="PATH", help="where to write the export (a path or a URI)")
    add_pattern_for_tiktoken(parser)
    add_overwrite(parser)


def run(args: argparse.Namespace) -> int:
    from bpe_spark.remote_files import prepare_export

    target = prepare_export(args.out, args.export_format, overwrite=args.overwrite,
                            protected={"model": [args.model]}, option="--out")
    tok = load_model(args.model, args.pattern)
    for path in target.write(tok):
        print(path)
    return 0
