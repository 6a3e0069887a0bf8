"""``bpe-spark inspect``: print a model's summary (sizes, scheme, pattern, special tokens, first
merges), as text or JSON, without Spark; the model at a local path or a URI (``s3a://...``).
"""

from __future__ import annotations

import argparse

from bpe_spark.cli.arguments import add_pattern_for_tiktoken, load_model

NAME = "inspect"
SUMMARY = "print a model's summary"
EXAMPLES = """
examples:
  bpe-spark inspect out/sample-model
  bpe-spark inspect models/en32k
  bpe-spark inspect gpt2/vocab.json --merges 20
  bpe-spark inspect cl100k_base.tiktoken --json
  bpe-spark inspect s3a://bucket/models/en32k
"""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("model", metavar="MODEL",
                        help="a model directory, tokenizer.json, GPT-2 vocab.json (or its directory) or .tiktoken file; "
                             "a local path or a URI (s3://, s3a://, gs://...)")
    parser.add_argument("--merges", type=int, default=10, metavar="N", help="how many first merges to show (default 10)")
    add_pattern_for_tiktoken(parser)
    parser.add_argument("--json", action="store_true", help="print the summary as JSON")


def run(args: argparse.Namespace) -> int:
    import json

    from bpe_spark.formats import describe, describe_text

    tok = load_model(args.model, args.pattern, option="model")
    if args.json:
        print(json.dumps(describe(tok, first_merges=args.merges), ensure_ascii=False, indent=2))
    else:
        print(f"model: {args.model}")
        print(describe_text(tok, first_merges=args.merges))
    return 0
