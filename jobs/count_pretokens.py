"""spark-submit entry point: count the pretokens of a corpus into Parquet ``(pretoken, count)``.

    spark-submit jobs/count_pretokens.py --input corpus/ --out counts.parquet [--pattern gpt2]
        [--special-token T]... [--lowercase] [--normalization NFC|NFKC]
        [--input-format text|jsonl|parquet] [--text-column C] [--document line|file]

The output trains with ``spark-submit jobs/train_tokenizer.py --counts counts.parquet ...``.
"""

import argparse
import sys

from bpe_spark.config import TrainerConfig
from bpe_spark.errors import BpeSparkError
from bpe_spark.spark import read_documents
from bpe_spark.spark.count import write_pretoken_counts
from bpe_spark.spark.session import build_session


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="count_pretokens.py", description=__doc__.split("\n\n")[0])
    parser.add_argument("--input", nargs="+", required=True, metavar="PATH")
    parser.add_argument("--out", required=True, metavar="DIR", help="Parquet output directory")
    parser.add_argument("--pattern", default="gpt2")
    parser.add_argument("--special-token", action="append", default=[], dest="special_tokens", metavar="T")
    parser.add_argument("--lowercase", action="store_true")
    parser.add_argument("--normalization", choices=("NFC", "NFKC"))
    parser.add_argument("--input-format", choices=("text", "jsonl", "parquet"), default="text")
    parser.add_argument("--text-column", default="text", metavar="C")
    parser.add_argument("--document", choices=("line", "file"), default="line")
    parser.add_argument("--engine", choices=("auto", "jvm", "python"), default="auto")
    parser.add_argument("--master")
    parser.add_argument("--conf", metavar="FILE", help="Spark properties file")
    parser.add_argument("--overwrite", action="store_true")
    args = parser.parse_args(argv)
    try:
        cfg = TrainerConfig(pattern=args.pattern, lowercase=args.lowercase, normalization=args.normalization,
                            special_tokens=tuple(args.special_tokens))
        spark = build_session("bpe-spark count", master=args.master, conf_file=args.conf)
        docs = read_documents(spark, args.input, input_format=args.input_format, text_col=args.text_column,
                              document=args.document)
        stats = write_pretoken_counts(docs, cfg, args.out, text_col=args.text_column, engine=args.engine,
                                      overwrite=args.overwrite)
    except BpeSparkError as exc:
        print(f"count_pretokens: error: {exc}", file=sys.stderr)
        return 2
    print(f"wrote {stats['distinct_pretokens']:,} distinct pretokens ({stats['pretokens']:,} in all, from "
          f"{stats['documents']:,} documents) to {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
