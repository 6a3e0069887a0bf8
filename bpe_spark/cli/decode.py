"""``bpe-spark decode``: decode token ids (given on the command line, or an encode output) back
to text, locally, without Spark.
"""

from __future__ import annotations

import argparse
import sys

from bpe_spark.errors import ConfigError

NAME = "decode"
SUMMARY = "decode token ids back to text"
EXAMPLES = """
examples:
  bpe-spark decode --model models/en32k --ids "15496 995"
  bpe-spark decode --model models/en32k --input shards/ --limit 3
  bpe-spark decode --model gpt2/vocab.json --input gpt2-ids/ --limit 10

Each document is printed as its text (special tokens as their text), followed by a newline
when it does not end with one. Runs locally, without Spark.
"""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--model", required=True, metavar="PATH", help="the tokenizer (any format bpe-spark loads)")
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--ids", metavar="IDS", help='token ids separated by spaces or commas, e.g. "15496 995"')
    source.add_argument("--input", metavar="PATH",
                        help="an encode output: a Parquet directory or file, or a binary shard directory")
    parser.add_argument("--limit", type=int, metavar="N", help="decode only the first N documents of --input")


def run(args: argparse.Namespace) -> int:
    from bpe_spark.tokenizer import Tokenizer

    tok = Tokenizer.load(args.model)
    if args.limit is not None and args.limit < 0:
        raise ConfigError(f"--limit must be >= 0, got {args.limit}")
    if args.ids is not None:
        if args.limit is not None:
            raise ConfigError("--limit applies to --input")
        documents = [parse_ids(args.ids)]
    else:
        from bpe_spark.shards import iter_encoded_documents

        documents = iter_encoded_documents(args.input, limit=args.limit)
    vocab = tok.vocab
    try:
        for ids in documents:
            bad = [i for i in ids if i not in vocab]
            if bad:
                raise ConfigError(f"token id {bad[0]} is not in the model's vocabulary (ids 0..{tok.max_token_id})")
            text = tok.decode(ids)
            sys.stdout.write(text if text.endswith("\n") else text + "\n")
        sys.stdout.flush()
    except BrokenPipeError:  # e.g. piped into head
        return 0
    return 0


def parse_ids(text: str) -> list[int]:
    """``"15496 995"`` or ``"15496,995"`` as ``[15496, 995]``."""
    parts = text.replace(",", " ").split()
    try:
        return [int(part) for part in parts]
    except ValueError:
        raise ConfigError(f"--ids expects integers separated by spaces or commas, got {text!r}") from None
