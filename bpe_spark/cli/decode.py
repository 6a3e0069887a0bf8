"""``bpe-spark decode``: decode token ids (given on the command line, or an encode output) back
to text, without Spark. ``--model`` and ``--input`` may be local paths or URIs pyarrow reaches
(``s3a://...``): a remote encode output is fetched one part file or shard at a time.
"""

from __future__ import annotations

import argparse
import sys

from bpe_spark.cli.arguments import add_pattern_for_tiktoken, load_model
from bpe_spark.errors import ConfigError

NAME = "decode"
SUMMARY = "decode token ids back to text"
EXAMPLES = """
examples:
  bpe-spark decode --model out/sample-model --ids "84 111 32 98 101"      # prints: To be
  bpe-spark decode --model out/sample-model --input out/ids/ --limit 3
  bpe-spark decode --model models/en32k --ids "15496 995"
  bpe-spark decode --model models/en32k --input shards/ --limit 3
  bpe-spark decode --model gpt2/vocab.json --input gpt2-ids/ --limit 10
  bpe-spark decode --model s3a://bucket/models/en32k --input s3a://bucket/ids/ --limit 3

Each document is printed as its text (special tokens as their text), followed by a newline
when it does not end with one. An --input whose manifest records another model than --model is
refused (--ignore-model-mismatch decodes it anyway). Runs without Spark.
"""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--model", required=True, metavar="PATH", help="the tokenizer (any format bpe-spark loads; a path or a URI)")
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--ids", metavar="IDS", help='token ids separated by spaces or commas, e.g. "15496 995"')
    source.add_argument("--input", metavar="PATH",
                        help="an encode output: a Parquet directory or file, or a binary shard directory (a path or a URI)")
    parser.add_argument("--limit", type=int, metavar="N", help="decode only the first N documents of --input")
    parser.add_argument("--ignore-model-mismatch", action="store_true",
                        help="decode --input even when its manifest records another model than --model")
    add_pattern_for_tiktoken(parser)


def run(args: argparse.Namespace) -> int:
    if args.limit is not None and args.limit < 0:
        raise ConfigError(f"--limit must be >= 0, got {args.limit}")
    if args.ids is not None:
        if args.limit is not None:
            raise ConfigError("--limit applies to --input")
        if args.ignore_model_mismatch:
            raise ConfigError("--ignore-model-mismatch applies to --input")
    if args.ids is not None:
        documents = [parse_ids(args.ids)]
    else:
        from bpe_spark.datasets.remote import encoded_documents

        documents = encoded_documents(  # --input checked here, before any work; the model when reading it
            args.input, limit=args.limit, model=None if args.ignore_model_mismatch else (lambda: tok),
            model_shown=f"--model {args.model}")
    tok = load_model(args.model, args.pattern)
    vocab = tok.vocab
    for ids in documents:  # a closed pipe (| head) ends in main(): bpe_spark.cli.failures
        bad = [i for i in ids if i not in vocab]
        if bad:
            raise ConfigError(f"token id {bad[0]} is not in the model's vocabulary (ids 0..{tok.max_token_id})")
        text = tok.decode(ids)
        sys.stdout.write(text if text.endswith("\n") else text + "\n")
    return 0


def parse_ids(text: str) -> list[int]:
    """``"15496 995"`` or ``"15496,995"`` as ``[15496, 995]``."""
    parts = text.replace(",", " ").split()
    try:
        return [int(part) for part in parts]
    except ValueError:
        raise ConfigError(f"--ids expects integers separated by spaces or commas, got {text!r}") from None
