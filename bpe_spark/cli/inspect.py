"""``bpe-spark inspect``: what a model holds, without Spark: its settings, the vocabulary by kind,
token lengths, the longest tokens, the first and last merges with their counts, the rounds
(:mod:`bpe_spark.inspect.summary`); ``--text`` shows a text as its tokens, ``--file`` measures bytes
per token on a sample (an extended model's beside its base's: :mod:`bpe_spark.inspect.extension`;
:mod:`bpe_spark.inspect.token_display` draws the tokens). As text or ``--json``;
the model at a local path or a URI (``s3a://...``).
"""

from __future__ import annotations

import argparse

from bpe_spark.cli.arguments import add_pattern_for_tiktoken, load_model
from bpe_spark.inspect.token_display import COLOUR_CHOICES

NAME = "inspect"
SUMMARY = "show what a model holds, and a text as its tokens"
EXAMPLES = """
examples:
  bpe-spark inspect out/sample-model
  bpe-spark inspect out/sample-model --text "To be, or not to be"
  bpe-spark inspect out/sample-model --file data/sample/tiny_shakespeare.txt.gz
  bpe-spark inspect gpt2/vocab.json --merges 20 --json
  bpe-spark inspect cl100k_base.tiktoken --text "naïve café"
  bpe-spark inspect s3a://bucket/models/en32k

--text shows each token in [brackets] (on a terminal: in alternating colours), with ␣ for a
space, ↵ for a line break and <0xE2> for a byte that is not a whole UTF-8 character.
"""
SAMPLE_LINE_CHARS = 300  # the part of --file's first line shown as tokens


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("model", metavar="MODEL",
                        help="a model directory, tokenizer.json, GPT-2 vocab.json (or its directory), .tiktoken "
                             "file or tekken JSON; a local path or a URI (s3://, s3a://, gs://...)")
    shown = parser.add_mutually_exclusive_group()
    shown.add_argument("--text", metavar="T", help="show this text as its tokens (special-token text as ordinary text)")
    shown.add_argument("--file", metavar="F",
                       help="a local sample text file (.gz/.bz2 read): its bytes per token, and its first line as tokens")
    parser.add_argument("--merges", type=int, default=10, metavar="N",
                        help="how many first and last merges to show (default 10)")
    add_pattern_for_tiktoken(parser)
    parser.add_argument("--color", choices=COLOUR_CHOICES, default="auto",
                        help="colour the tokens of --text/--file: auto (default: on a terminal, unless NO_COLOR "
                             "is set), always or never (brackets)")
    parser.add_argument("--json", action="store_true", help="print the summary as JSON")


def run(args: argparse.Namespace) -> int:
    import json
    import sys

    from bpe_spark.errors import ConfigError
    from bpe_spark.inspect.summary import describe, describe_text
    from bpe_spark.inspect.token_display import json_token

    if args.merges < 0:
        raise ConfigError(f"--merges must be 0 or more, got {args.merges}")
    sample = _read_sample(args.file) if args.file is not None else None  # a missing file fails first
    tok = load_model(args.model, args.pattern, option="model")
    shown = args.text if args.text is not None else _first_line(sample)
    if args.json:
        summary = describe(tok, merges=args.merges)
        if shown is not None:
            ids = tok.encode_ordinary(shown)
            summary["text"] = {"text": shown, "ids": ids, "tokens": [json_token(tok.id_to_token(i)) for i in ids]}
        if sample is not None:
            summary["sample"] = _sample_figures(tok, args.file, sample)
        print(json.dumps(summary, ensure_ascii=False, indent=2))
        return 0
    print(f"model: {args.model}")
    print(describe_text(tok, merges=args.merges))
    if sample is not None:
        figures = _sample_figures(tok, args.file, sample)
        tokens = "" if figures["tokens"] is None else f"{figures['tokens']:,} tokens, "
        base = figures.get("base_bytes_per_token")
        print(f"sample {args.file}: {figures['bytes']:,} bytes, {figures['characters']:,} characters, {tokens}"
              f"{figures['bytes_per_token']:.3f} bytes per token"
              + ("" if base is None else f" (the base model: {base:.3f})"))
    if shown is not None:
        from bpe_spark.inspect.token_display import legend, show_tokens, use_colour

        colour = use_colour(args.color, sys.stdout)
        ids = tok.encode_ordinary(shown)
        what = "text" if args.text is not None else "first line"
        print(f"{what} as {len(ids):,} tokens ({legend(colour=colour)}):")
        print(show_tokens([tok.id_to_token(i) for i in ids], colour=colour))
    return 0


def _read_sample(path: str) -> str:
    """The text of a local sample file (gzip / bzip2 by its name), invalid UTF-8 as U+FFFD."""
    import bz2
    import gzip

    from bpe_spark.errors import InputError

    opener = gzip.open if path.endswith(".gz") else bz2.open if path.endswith(".bz2") else open
    try:
        with opener(path, "rb") as fh:
            data = fh.read()
    except FileNotFoundError:
        raise InputError(f"--file {path}: no such file; check the path") from None
    except IsADirectoryError:
        raise InputError(f"--file {path}: a directory; give one text file") from None
    except (OSError, EOFError) as exc:
        raise InputError(f"--file {path}: cannot be read ({exc})") from None
    text = data.decode("utf-8", errors="replace")
    if not text:
        raise InputError(f"--file {path}: the file is empty")
    return text


def _first_line(sample: str | None) -> str | None:
    if sample is None:
        return None
    line = next((line for line in sample.splitlines(keepends=True) if line.strip()), sample)
    return line[:SAMPLE_LINE_CHARS]


def _sample_figures(tok, path: str, text: str) -> dict:
    """Bytes, characters, tokens (None: a char-scheme model that skips lines of unseen characters)
    and bytes per token of the sample (:func:`bpe_spark.inspect.vocab_stats.bytes_per_token`)."""
    from bpe_spark.errors import UnknownCharacterError
    from bpe_spark.inspect.extension import sample_comparison
    from bpe_spark.inspect.vocab_stats import bytes_per_token

    try:
        tokens = len(tok.encode_ordinary(text))
    except UnknownCharacterError:
        tokens = None
    figures = {"path": path, "bytes": len(text.encode("utf-8")), "characters": len(text), "tokens": tokens,
               "bytes_per_token": round(bytes_per_token(tok, text), 6)}
    compared = sample_comparison(tok, text)
    if compared is not None:  # an extended model: its base's figure beside its own
        figures["base_bytes_per_token"] = compared["base"]
    return figures
