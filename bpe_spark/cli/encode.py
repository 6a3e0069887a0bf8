"""``bpe-spark encode``: encode a dataset with a tokenizer on Spark, to Parquet parts or binary
token shards with a manifest, and print what it wrote. A local model loads (and the token type is
checked) before Spark starts; a remote one (``--model s3://...``, ``hdfs://...``) is fetched through
the session's file system (:mod:`bpe_spark.spark.storage.uris`) before any work.
"""

from __future__ import annotations

import argparse
from collections.abc import Mapping

from bpe_spark.cli.arguments import (
    DOCUMENT_DEFAULTS,
    add_document_options,
    add_overwrite,
    add_spark_options,
    check_document_input,
    check_special_tokens_match,
    input_report,
    progress_reporter,
    start_spark,
)
from bpe_spark.errors import ConfigError
from bpe_spark.datasets.formats import DEFAULT_OUTPUT_FORMAT, OUTPUT_FORMATS, TOKEN_STREAM_FORMATS
from bpe_spark.spark.options import DEFAULT_SHARD_TOKENS, column_name

NAME = "encode"
SUMMARY = "encode a dataset to token ids (Parquet or binary shards)"
EXAMPLES = """
examples:
  bpe-spark encode --model out/sample-model --input data/sample/tiny_shakespeare.txt.gz --out out/ids/
  bpe-spark encode --model models/en32k --input corpus.txt.gz --out ids/ --eos "<|endoftext|>"
  bpe-spark encode --model models/en32k --input docs/ --input-format jsonl --id-column url \\
      --out shards/ --output-format bin --eos "<|endoftext|>"
  bpe-spark encode --model models/en32k --input corpus.txt.gz --out ds/ --output-format datatrove \\
      --eos "<|endoftext|>" --shard-tokens 1000000000
  bpe-spark encode --model models/en32k --input books/ --document paragraph --min-tokens 16 \\
      --out shards/ --output-format bin --eos "<|endoftext|>"
  bpe-spark encode --model gpt2/vocab.json --input data.parquet --input-format parquet \\
      --text-column content --out gpt2-ids/
  bpe-spark encode --model models/en32k --input corpus.txt.gz --out shards/ --output-format bin \\
      --shuffle --seed 42 --split validation=0.01   # shards/train/, shards/validation/

output: Parquet parts (id columns or doc_id, input_ids array<int32>, n_tokens) or binary shards
(shard-NNNNN.bin token streams, uint16 when the vocabulary fits, + Megatron-style .idx, and
data_paths.txt: "tokens prefix" a line, for Megatron's --data-args-path) or datatrove's files
(shard-NNNNN.ds + .ds.index + .ds.metadata), in input order, with _manifest.json written last,
only when the job succeeds. With --id-column, binary and datatrove shards have a sidecar
shard-NNNNN.ids.parquet: doc_id, the id columns, offset and length in tokens.
"""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from bpe_spark.datasets.megatron import TOKEN_DTYPES  # numpy: only when this command runs

    parser.add_argument("--model", required=True, metavar="PATH",
                        help="the tokenizer: a bpe-spark model directory, tokenizer.json, GPT-2 "
                             "vocab.json (+ merges.txt beside it) or a .tiktoken file; local, or a URI "
                             "(hdfs://, s3a://, viewfs://...)")
    parser.add_argument("--input", required=True, nargs="+", metavar="PATH",
                        help="input files, globs or directories (local, hdfs://, s3a://...)")
    parser.add_argument("--out", required=True, metavar="DIR",
                        help="output directory (must not exist unless --overwrite): written by the executors, so "
                             "on a cluster s3a://, gs://, abfs:// or a path every node shares")
    parser.add_argument("--output-format", choices=list(OUTPUT_FORMATS), default=DEFAULT_OUTPUT_FORMAT,
                        help="; ".join(f"{name}: {fmt.help}" for name, fmt in OUTPUT_FORMATS.items())
                             + f" (default: {DEFAULT_OUTPUT_FORMAT})")
    add_document_options(parser)
    parser.set_defaults(**DOCUMENT_DEFAULTS)
    parser.add_argument("--id-column", action="append", default=[], metavar="C", type=column_name,
                        help="jsonl/parquet column to carry to the output as a document id, repeatable "
                             "(default: a doc_id, the position in input order)")
    for name, verb in (("eos", "append"), ("bos", "prepend")):
        group = parser.add_mutually_exclusive_group()
        group.add_argument(f"--{name}", metavar="T",
                           help=f"{verb} this token to every document, given by its text: a special token "
                                "such as '<|endoftext|>', or one token of the vocabulary (numeric text is "
                                f"refused: use --{name}-id)")
        group.add_argument(f"--{name}-id", type=int, metavar="N", help=f"{verb} the token of id N to every document")
    parser.add_argument("--allow-special", action="store_true",
                        help="encode special-token text in the data as the special token (default: as ordinary text)")
    parser.add_argument("--dtype", choices=TOKEN_DTYPES, default=TOKEN_DTYPES[0],
                        help="bin/datatrove output token type (default auto: uint16 when every id < 65536)")
    parser.add_argument("--shard-tokens", type=int, default=DEFAULT_SHARD_TOKENS, metavar="N",
                        help=f"about N tokens per output file, cut at document boundaries (default {DEFAULT_SHARD_TOKENS})")
    parser.add_argument("--shuffle", action="store_true",
                        help="write the documents in a pseudo-random order decided by --seed (the same bytes "
                             "whatever the partitioning; doc_id stays the input-order number)")
    parser.add_argument("--seed", type=int, default=None, metavar="N",
                        help="the seed of --shuffle and --split (default 0)")
    parser.add_argument("--split", action="append", default=[], metavar="NAME=FRACTION",
                        help="put about FRACTION of the documents (chosen by a seeded hash of the doc id) in "
                             "the split NAME, written to OUT/NAME/; repeatable or comma-separated "
                             "(e.g. --split validation=0.01,test=0.01); the rest goes to OUT/train/")
    parser.add_argument("--min-tokens", type=int, default=0, metavar="N",
                        help="leave out documents whose text encodes to fewer than N tokens (BOS/EOS not counted; "
                             "counted in the manifest's dropped_short_documents; e.g. --min-tokens 16)")
    add_overwrite(parser)
    parser.add_argument("--resume", action="store_true",
                        help="keep the pieces a killed run with --resume finished and encode only the rest; "
                             "the same input, model and options, else refused (nothing to resume: starts "
                             "afresh and says so), e.g. bpe-spark encode --model m --input corpus/ --out ids/ --resume")
    add_spark_options(parser)


def run(args: argparse.Namespace) -> int:
    from bpe_spark.storage.output_guard import check_output, is_local
    from bpe_spark.encoding.tokenizer import Tokenizer

    args.input_format = check_document_input(args.input, args.input_format, args.document, args.text_column,
                                             args.id_column)
    # before Spark: a bad --split or --seed fails here
    from bpe_spark.datasets.doc_order import check_seed, parse_splits

    check_seed(args.seed)
    parse_splits(args.split)
    if args.min_tokens < 0:
        raise ConfigError(f"--min-tokens must be >= 0, got {args.min_tokens}")
    check_output(args.out, "encoded", overwrite=args.overwrite, option="--out",
                 protected={"input": args.input, "model": [args.model]})
    # a local model loads (and fails) before Spark starts; a remote one through the session's file system
    tok = Tokenizer.load(args.model) if is_local(args.model) else None
    if tok is not None:
        options = _checked_options(tok, args)
    elif args.output_format not in TOKEN_STREAM_FORMATS and args.dtype != "auto":
        raise ConfigError("--dtype applies to --output-format bin or datatrove (Parquet stores int32)")
    # whole files are big documents: fewer per Arrow batch keeps the Python workers' memory small
    properties = {"spark.sql.execution.arrow.maxRecordsPerBatch": "64"} if args.document == "file" else {}
    # local text, and local JSON Lines without id columns (a resume reads them through Spark), are
    # read by the Python tasks: the JVM only coordinates
    light_input = None if args.id_column else (args.input, args.input_format, args.document, not args.resume)
    spark = start_spark(args, NAME, light_input=light_input, properties=properties,
                        shared_input=bool(args.shared_input))
    from bpe_spark.spark import encode_dataset, read_documents

    if tok is None:
        from bpe_spark.spark.storage.uris import load_model

        tok = load_model(spark, args.model)
        options = _checked_options(tok, args)
    docs = read_documents(
        spark, args.input, input_format=args.input_format, text_col=args.text_column,
        document=args.document, keep_columns=args.id_column, on_bad_input=args.on_bad_input,
        shared_input=args.shared_input,
    )
    manifest = encode_dataset(
        docs, tok, args.out, output_format=args.output_format, text_col=args.text_column,
        id_cols=args.id_column, options=options, dtype=args.dtype,
        shard_tokens=args.shard_tokens, overwrite=args.overwrite, min_tokens=args.min_tokens,
        source={"model": str(args.model), "input": list(args.input), "input_format": args.input_format,
                "document": args.document},
        progress=progress_reporter(args, NAME), shuffle=args.shuffle, seed=args.seed, splits=args.split,
        resume=args.resume,
    )
    print(encode_summary(manifest, args.out))
    if args.resume:
        from bpe_spark.spark.encoding.resume import resume_summary

        print(resume_summary(manifest))
    if report := input_report(manifest):
        print(report)
    return 0


def encode_summary(manifest: Mapping, out: str) -> str:
    """The line ``encode`` prints of its manifest: documents, bytes, tokens, bytes per token, the
    files, and the manifest's seconds (the encoding job, from reading to the last file) with the
    input's MB/s (10^6 bytes) in them.

    >>> encode_summary({"documents": 40000, "bytes": 1115394, "tokens": 297833, "bytes_per_token": 3.745,
    ...                 "output_format": "bin", "shards": [{}], "seconds": 12.5}, "ids/")
    'encoded 40,000 documents (1,115,394 bytes) to 297,833 tokens (3.745 bytes per token) in 1 shard at ids/: 12.5 s, 0.09 MB/s'
    """
    files = len(manifest["shards"])
    kind = "shard" if manifest["output_format"] in TOKEN_STREAM_FORMATS else "Parquet file"
    bpt = manifest["bytes_per_token"]
    seconds = manifest["seconds"]
    speed = f", {manifest['bytes'] / seconds / 1e6:,.2f} MB/s" if seconds > 0 else ""
    return (f"encoded {manifest['documents']:,} documents ({manifest['bytes']:,} bytes) to {manifest['tokens']:,} "
            f"tokens{f' ({bpt:.3f} bytes per token)' if bpt else ''} in {files:,} {kind}{'' if files == 1 else 's'} "
            f"at {out}: {seconds:,.1f} s{speed}")


def _checked_options(tok, args: argparse.Namespace):
    """What the model must allow, before any encoding: the token type, the special tokens and
    the end tokens asked for; the encode options the flags ask for, resolved against it (an
    unknown --eos fails here)."""
    from bpe_spark.datasets.megatron import token_dtype
    from bpe_spark.encoding.options import EncodeOptions

    if args.output_format in TOKEN_STREAM_FORMATS:
        token_dtype(tok.max_token_id, args.dtype)
    elif args.dtype != "auto":
        raise ConfigError("--dtype applies to --output-format bin or datatrove (Parquet stores int32)")
    if args.allow_special:
        check_special_tokens_match(tok.special_tokens, args.input_format, args.document,
                                   "--allow-special: the model's special token")
    return EncodeOptions(eos=args.eos, eos_id=args.eos_id, bos=args.bos, bos_id=args.bos_id,
                         allowed_special="all" if args.allow_special else ()).resolved(tok)
