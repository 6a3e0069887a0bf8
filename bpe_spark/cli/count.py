"""``bpe-spark count``: count the pretokens of a corpus on Spark and write them as Parquet
``(pretoken, count)``, which ``bpe-spark train --counts`` (``read_counts``) reads back.
"""

from __future__ import annotations

import argparse

from bpe_spark.cli.arguments import (
    DOCUMENT_DEFAULTS,
    PRETOKENIZER_DEFAULTS,
    add_document_options,
    add_overwrite,
    add_pretokenizer_options,
    add_spark_options,
    check_document_input,
    check_special_tokens_match,
    input_report,
    progress_reporter,
    start_spark,
)

NAME = "count"
SUMMARY = "count a corpus's pretokens into Parquet (pretoken, count), for train --counts"
EXAMPLES = """
examples:
  bpe-spark count --input data/sample/tiny_shakespeare.txt.gz --out out/counts.parquet
  bpe-spark count --input corpus/ --out counts.parquet
  bpe-spark count --input docs.jsonl --input-format jsonl --text-column body \\
      --special-token "<|endoftext|>" --out counts.parquet --master local[8]
  bpe-spark train --counts counts.parquet --vocab-size 32000 --special-token "<|endoftext|>" \\
      --out models/c32k

The counts hold one row per distinct pretoken (pretoken string, count long), in no particular
order; special tokens split documents and are never counted. Training on them gives the same
merges as training on the documents with the same pretokenizer options. An empty corpus fails
before anything is written.
"""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--input", required=True, nargs="+", metavar="PATH",
                        help="documents: files, globs or directories (local, hdfs://, s3a://...; .gz/.bz2 read)")
    parser.add_argument("--out", required=True, metavar="DIR",
                        help="the Parquet directory to write (must not exist unless --overwrite)")
    add_pretokenizer_options(parser)
    add_document_options(parser)
    parser.set_defaults(**PRETOKENIZER_DEFAULTS, **DOCUMENT_DEFAULTS)
    add_overwrite(parser)
    add_spark_options(parser)


def run(args: argparse.Namespace) -> int:
    from bpe_spark.bpe.config import TrainerConfig
    from bpe_spark.storage.output_guard import check_output

    cfg = TrainerConfig(pattern=args.pattern, lowercase=args.lowercase, normalization=args.normalization,
                        special_tokens=tuple(args.special_tokens))
    args.input_format = check_document_input(args.input, args.input_format, args.document, args.text_column)
    check_output(args.out, "counts", overwrite=args.overwrite, option="--out", protected={"input": args.input})
    check_special_tokens_match(cfg.special_tokens, args.input_format, args.document, "--special-token")
    # local text is read and counted by the Python tasks unless the JVM's regex counts
    light_input = (args.input, args.input_format, args.document, True) if args.engine != "jvm" else None
    spark = start_spark(args, NAME, light_input=light_input, shared_input=bool(args.shared_input))
    from bpe_spark.spark import read_documents
    from bpe_spark.spark.training.count import write_pretoken_counts

    docs = read_documents(spark, args.input, input_format=args.input_format, text_col=args.text_column,
                          document=args.document, on_bad_input=args.on_bad_input, shared_input=args.shared_input)
    stats = write_pretoken_counts(docs, cfg, args.out, text_col=args.text_column, engine=args.engine,
                                  overwrite=args.overwrite, progress=progress_reporter(args, NAME))
    print(f"wrote {stats['distinct_pretokens']:,} distinct pretokens ({stats['pretokens']:,} in all, from "
          f"{stats['documents']:,} documents) to {args.out}")
    if report := input_report(stats):
        print(report)
    return 0
