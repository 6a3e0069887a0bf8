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

from bpe_spark.errors import BpeSparkError, ConfigError


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
_TRAIN_EXAMPLES = """
examples:
  bpe-spark train --input data/sample/tiny_shakespeare.txt.gz --vocab-size 2000 --out out/sample-model
  bpe-spark train --input corpus/ --vocab-size 32000 --special-token "<|endoftext|>" --out models/en32k \\
      --master local[8] --set spark.driver.memory=8g
  bpe-spark train --input docs.jsonl --input-format jsonl --text-column body --vocab-size 8000 \\
      --scheme char --end-of-word fused --tie-break lexicographic --out models/char8k
  bpe-spark train --counts counts.parquet --vocab-size 50000 --driver-budget 30% \\
      --checkpoint-dir ckpt/ --out models/big      # ... and after an interruption, add --resume
  bpe-spark train --config conf/train-example.json --out out/example-model

The model directory (merges.parquet, vocab.parquet, bpe_spark.json, tokenizer.json) is written
atomically: a failed run leaves none. --config reads training options from a JSON file (keys are
the long option names, e.g. "vocab_size"); options on the command line win.
"""


def _setup_train(parser: argparse.ArgumentParser) -> None:
    parser.epilog = _TRAIN_EXAMPLES
    source = parser.add_mutually_exclusive_group()
    source.add_argument("--input", nargs="+", metavar="PATH",
                        help="documents: files, globs or directories (local, hdfs://, s3a://...; .gz/.bz2 read)")
    source.add_argument("--counts", nargs="+", metavar="PATH",
                        help="pretoken counts instead of documents: Parquet with columns pretoken (string), "
                             "count (integer), e.g. the output of jobs/count_pretokens.py")
    parser.add_argument("--out", metavar="DIR", help="the model directory to write (must not exist unless --overwrite)")
    parser.add_argument("--config", metavar="FILE",
                        help="JSON file of training options (keys: long option names); command-line options win")
    parser.add_argument("--vocab-size", type=int, metavar="N", help="total vocabulary: specials + alphabet + merges")
    parser.add_argument("--scheme", choices=("byte", "char"), help="initial symbols: UTF-8 bytes (default) or characters")
    parser.add_argument("--end-of-word", choices=("separate", "fused"),
                        help="char scheme: </w> as its own symbol (default) or fused onto the last character")
    parser.add_argument("--pattern", metavar="P",
                        help="pretokenizer: gpt2 (default), cl100k, o200k, words, whitespace, or a regex")
    parser.add_argument("--lowercase", action="store_true", default=None, help="lowercase before pretokenizing")
    parser.add_argument("--normalization", choices=("NFC", "NFKC"), help="Unicode normalization before pretokenizing")
    parser.add_argument("--special-token", action="append", metavar="T", dest="special_tokens",
                        help="special token (a hard boundary, never merged), repeatable")
    parser.add_argument("--tie-break", choices=("hf", "lexicographic"),
                        help="hf: tokenizers' BpeTrainer order (default); lexicographic: CS336 / subword-nmt")
    parser.add_argument("--min-frequency", type=int, metavar="N", help="stop when the best pair occurs fewer times")
    parser.add_argument("--max-merges", type=int, metavar="N", help="stop after N merges too")
    parser.add_argument("--unk-token", metavar="T", help="char scheme: the token for characters unseen in training")
    parser.add_argument("--input-format", choices=("text", "jsonl", "parquet"),
                        help="text: one document per line, the newline kept (default); jsonl/parquet: one per row")
    parser.add_argument("--text-column", metavar="C", help="jsonl/parquet column holding the text (default: text)")
    parser.add_argument("--document", choices=("line", "file"), help="text input: one document per line (default) or per file")
    parser.add_argument("--driver-budget", metavar="N|F",
                        help="distinct pretokens the driver may hold: a count (default 2000000) or a fraction "
                             "of the distinct pretokens (0.3 or 30%%); above it, training runs in exact rounds")
    parser.add_argument("--checkpoint-dir", metavar="DIR",
                        help="keep the pretoken counts and each round's merges here (any Hadoop URI)")
    parser.add_argument("--resume", action="store_true", default=None,
                        help="continue the interrupted run in --checkpoint-dir (same settings), to the same result")
    parser.add_argument("--engine", choices=("auto", "jvm", "python"),
                        help="pretokenizer engine: auto (default: Spark SQL's Java regex for the presets, "
                             "Python otherwise), jvm or python")
    parser.add_argument("--sample", metavar="TEXT", help="sentence shown as tokens in the summary")
    _add_common(parser)
    parser.set_defaults(run=_cmd_train)


_TRAIN_DEFAULTS = {
    "vocab_size": None, "scheme": "byte", "end_of_word": "separate", "pattern": "gpt2", "lowercase": False,
    "normalization": None, "special_tokens": [], "tie_break": "hf", "min_frequency": 0, "max_merges": None,
    "unk_token": None, "input_format": "text", "text_column": "text", "document": "line",
    "driver_budget": None, "checkpoint_dir": None, "resume": False, "engine": "auto",
    "sample": "To be, or not to be, that is the question.", "input": None, "counts": None, "out": None,
    "overwrite": False,
}


def _train_options(args: argparse.Namespace) -> dict:
    """Defaults < the --config JSON file < the command line."""
    import json
    from pathlib import Path

    options = dict(_TRAIN_DEFAULTS)
    if args.config:
        path = Path(args.config)
        try:
            loaded = json.loads(path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            raise ConfigError(f"--config file {path} does not exist") from None
        except ValueError as exc:
            raise ConfigError(f"--config file {path} is not valid JSON: {exc}") from None
        if not isinstance(loaded, dict):
            raise ConfigError(f"--config file {path} must hold a JSON object of options")
        loaded = {key.replace("-", "_"): value for key, value in loaded.items()}
        unknown = sorted(set(loaded) - set(options))
        if unknown:
            raise ConfigError(f"--config file {path}: unknown options {unknown}; known: {sorted(options)}")
        for key in ("input", "counts", "special_tokens"):
            if isinstance(loaded.get(key), str):
                loaded[key] = [loaded[key]]
        options.update(loaded)
    for key in options:
        value = getattr(args, key, None)
        if value is not None and value is not False:
            options[key] = value
    return options


def _cmd_train(args: argparse.Namespace) -> int:
    import time
    from pathlib import Path

    from bpe_spark.config import TrainerConfig
    from bpe_spark.errors import OutputExistsError

    options = _train_options(args)
    if not options["out"]:
        raise ConfigError("--out DIR is required: the model directory to write")
    if not options["input"] and not options["counts"]:
        raise ConfigError("give the corpus with --input PATH... (or pretoken counts with --counts PATH...)")
    if options["input"] and options["counts"]:
        raise ConfigError("--input and --counts exclude each other")
    if options["vocab_size"] is None:
        raise ConfigError("--vocab-size N is required")
    if options["resume"] and not options["checkpoint_dir"]:
        raise ConfigError("--resume continues the run kept in --checkpoint-dir DIR; give that directory")
    out = Path(options["out"])
    if out.exists() and not options["overwrite"]:
        raise OutputExistsError(f"output {out} already exists; pass --overwrite to replace it, or choose another --out")
    cfg = TrainerConfig(
        vocab_size=options["vocab_size"], scheme=options["scheme"], end_of_word=options["end_of_word"],
        pattern=options["pattern"], lowercase=bool(options["lowercase"]), normalization=options["normalization"],
        special_tokens=tuple(options["special_tokens"] or ()), tie_break=options["tie_break"],
        min_frequency=options["min_frequency"], max_merges=options["max_merges"], unk_token=options["unk_token"],
    )
    overrides = _spark_properties(args.spark_set)
    if not args.verbose:
        overrides.setdefault("spark.ui.showConsoleProgress", "false")

    from bpe_spark.spark import read_counts, read_documents
    from bpe_spark.spark import train as spark_train
    from bpe_spark.spark import train_from_counts as spark_train_from_counts
    from bpe_spark.spark.io import reads_local_text
    from bpe_spark.spark.session import build_session
    from bpe_spark.spark.training import DEFAULT_DRIVER_BUDGET

    # local text read by the Python tasks: the JVM only coordinates (see build_session). Not when a
    # driver budget is given: that asks for rounds, whose pair counts are JVM work (C2 measured
    # 25% faster there: 53 rounds on 8.6 MB, 136 -> 100 s).
    light = (bool(options["input"]) and options["engine"] != "jvm" and not options["driver_budget"]
             and reads_local_text(options["input"], options["input_format"], options["document"]))
    spark = build_session("bpe-spark train", master=args.master, conf_file=args.conf, overrides=overrides,
                          light_jvm=light)
    if not args.verbose:
        spark.sparkContext.setLogLevel("ERROR")
    on_round = None
    if args.verbose:
        def on_round(record: dict) -> None:
            print(f"round {record['round']}: {record['merges']} merges ({record.get('kind')}, "
                  f"collected {record.get('collected')}, {record['seconds']:.2f} s)", file=sys.stderr)

    common = {
        "driver_budget": options["driver_budget"] or DEFAULT_DRIVER_BUDGET,
        "checkpoint_dir": options["checkpoint_dir"],
        "resume": bool(options["resume"]),
        "on_round": on_round,
    }
    if options["input"]:
        docs = read_documents(spark, options["input"], input_format=options["input_format"],
                              text_col=options["text_column"], document=options["document"])
        tok = spark_train(docs, cfg, text_col=options["text_column"], engine=options["engine"], **common)
    else:
        tok = spark_train_from_counts(read_counts(spark, options["counts"]), cfg, **common)
    started = time.perf_counter()
    tok.metadata["source"] = {
        key: options[key] for key in ("input", "counts", "input_format", "text_column", "document", "engine")
    }
    tok.save(out, overwrite=bool(options["overwrite"]))
    tok.metadata["timings"]["save_seconds"] = round(time.perf_counter() - started, 3)
    print(_train_summary(tok, out, options["sample"]))
    return 0


def _train_summary(tok, out, sample: str | None) -> str:
    stats, timings, rounds = tok.metadata["stats"], tok.metadata["timings"], tok.metadata["rounds"]
    alphabet = tok.vocab_size - len(tok.merge_ids) - len(tok.special_tokens)
    lines = [
        f"model: {out}",
        (
            f"vocabulary: {tok.vocab_size} = {alphabet} {'bytes' if tok.scheme == 'byte' else 'alphabet symbols'}"
            f" + {len(tok.merge_ids)} merges + {len(tok.special_tokens)} special tokens"
            f" (scheme {tok.scheme}, pattern {tok.pattern})"
        ),
    ]
    corpus = [f"{stats['pretokens']:,} pretokens ({stats['distinct_pretokens']:,} distinct)"]
    if stats.get("documents") is not None:
        corpus.insert(0, f"{stats['documents']:,} documents, {stats['bytes']:,} bytes")
    lines.append("corpus: " + ", ".join(corpus))
    per_round = [r["merges"] for r in rounds]
    shown = ", ".join(str(n) for n in per_round[:12]) + (", ..." if len(per_round) > 12 else "")
    lines.append(f"rounds: {len(rounds)} ({stats['mode']}, driver budget {stats['driver_budget']:,} pretokens); "
                 f"merges per round: {shown}")
    phases = [("count", "count_seconds"), ("collect", "collect_seconds"), ("merge", "merge_seconds"),
              ("rounds on Spark", "rounds_spark_seconds"), ("checkpoint", "checkpoint_seconds"),
              ("save", "save_seconds")]
    shown_times = [f"{name} {timings[key]:.2f} s" for name, key in phases if timings.get(key)]
    lines.append("time: " + ", ".join(shown_times) + f"; total {timings.get('total_seconds', 0) + timings.get('save_seconds', 0):.2f} s")
    if sample:
        try:
            lines.append(f"sample: {sample!r} -> {tok.tokens(sample)}")
        except BpeSparkError as exc:  # e.g. a char-scheme model without unk meets an unseen character
            lines.append(f"sample: {sample!r} -> cannot encode: {exc}")
    return "\n".join(lines)


# --- encode -----------------------------------------------------------------------------------
_ENCODE_EXAMPLES = """
examples:
  bpe-spark encode --model models/en32k --input corpus.txt.gz --out ids/ --eos "<|endoftext|>"
  bpe-spark encode --model models/en32k --input docs/ --input-format jsonl --id-column url \\
      --out shards/ --output-format bin --eos "<|endoftext|>"
  bpe-spark encode --model gpt2/vocab.json --input data.parquet --input-format parquet \\
      --text-column content --out gpt2-ids/

output: Parquet parts (id columns or doc_id, input_ids array<int32>, n_tokens) or binary shards
(shard-NNNNN.bin token streams, uint16 when the vocabulary fits, + Megatron-style .idx), in
input order, with _manifest.json written last, only when the job succeeds.
"""


def _setup_encode(parser: argparse.ArgumentParser) -> None:
    parser.epilog = _ENCODE_EXAMPLES
    parser.add_argument("--model", required=True, metavar="PATH",
                        help="the tokenizer: a bpe-spark model directory, tokenizer.json, GPT-2 "
                             "vocab.json (+ merges.txt beside it) or a .tiktoken file")
    parser.add_argument("--input", required=True, nargs="+", metavar="PATH",
                        help="input files, globs or directories (local, hdfs://, s3a://...)")
    parser.add_argument("--out", required=True, metavar="DIR", help="output directory (must not exist unless --overwrite)")
    parser.add_argument("--output-format", choices=("parquet", "bin"), default="parquet",
                        help="Parquet parts or binary token shards (default: parquet)")
    parser.add_argument("--input-format", choices=("text", "jsonl", "parquet"), default="text",
                        help="text: one document per line, the newline kept (default); jsonl/parquet: one per row")
    parser.add_argument("--document", choices=("line", "file"), default="line",
                        help="text input: one document per line (default) or per file")
    parser.add_argument("--text-column", default="text", metavar="C", help="jsonl/parquet column holding the text (default: text)")
    parser.add_argument("--id-column", action="append", default=[], metavar="C",
                        help="jsonl/parquet column to carry to the output as a document id, repeatable "
                             "(default: a doc_id, the position in input order)")
    parser.add_argument("--eos", metavar="T", help="append this token to every document (a special token such as '<|endoftext|>')")
    parser.add_argument("--bos", metavar="T", help="prepend this token to every document")
    parser.add_argument("--allow-special", action="store_true",
                        help="encode special-token text in the data as the special token (default: as ordinary text)")
    parser.add_argument("--dtype", choices=("auto", "uint16", "uint32"), default="auto",
                        help="bin output token type (default auto: uint16 when every id < 65536)")
    parser.add_argument("--shard-tokens", type=int, default=100_000_000, metavar="N",
                        help="about N tokens per output file, cut at document boundaries (default 100000000)")
    _add_common(parser)
    parser.set_defaults(run=_cmd_encode)


def _spark_properties(pairs: Sequence[str]) -> dict[str, str]:
    props = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key.strip():
            raise ConfigError(f"--set expects KEY=VALUE, got {pair!r}")
        props[key.strip()] = value.strip()
    return props


def _cmd_encode(args: argparse.Namespace) -> int:
    import time

    from bpe_spark.shards import token_dtype
    from bpe_spark.tokenizer import Tokenizer

    started = time.time()
    tok = Tokenizer.load(args.model)  # a missing or broken model fails here, before Spark starts
    if args.output_format == "bin":
        token_dtype(tok.max_token_id, args.dtype)
    elif args.dtype != "auto":
        raise ConfigError("--dtype applies to --output-format bin (Parquet stores int32)")
    if args.input_format != "text" and args.document != "line":
        raise ConfigError("--document file applies to --input-format text only")
    overrides = _spark_properties(args.spark_set)
    if not args.verbose:
        overrides.setdefault("spark.ui.showConsoleProgress", "false")
    if args.document == "file":
        # whole files are big documents: fewer per Arrow batch keeps the Python workers' memory small
        overrides.setdefault("spark.sql.execution.arrow.maxRecordsPerBatch", "64")

    from bpe_spark.spark.encoding import encode_dataset
    from bpe_spark.spark.io import read_documents, reads_local_text
    from bpe_spark.spark.session import build_session

    light = not args.id_column and reads_local_text(args.input, args.input_format, args.document)
    spark = build_session("bpe-spark encode", master=args.master, conf_file=args.conf, overrides=overrides,
                          light_jvm=light)
    if not args.verbose:
        spark.sparkContext.setLogLevel("ERROR")
    docs = read_documents(
        spark, args.input, input_format=args.input_format, text_col=args.text_column,
        document=args.document, keep_columns=args.id_column,
    )
    manifest = encode_dataset(
        docs, tok, args.out, output_format=args.output_format, text_col=args.text_column,
        id_cols=args.id_column, eos=args.eos, bos=args.bos,
        special_tokens="allowed" if args.allow_special else "ordinary", dtype=args.dtype,
        shard_tokens=args.shard_tokens, overwrite=args.overwrite,
        source={"model": str(args.model), "input": list(args.input), "input_format": args.input_format,
                "document": args.document},
    )
    bpt = manifest["bytes_per_token"]
    print(
        f"encoded {manifest['documents']} documents ({manifest['bytes']} bytes) to {manifest['tokens']} tokens"
        f"{f' ({bpt:.3f} bytes/token)' if bpt else ''} in {len(manifest['shards'])} "
        f"{'shard' if args.output_format == 'bin' else 'Parquet file'}(s) at {args.out} "
        f"({time.time() - started:.1f} s)"
    )
    return 0


# --- decode -----------------------------------------------------------------------------------
_DECODE_EXAMPLES = """
examples:
  bpe-spark decode --model models/en32k --ids "15496 995"
  bpe-spark decode --model models/en32k --input shards/ --limit 3
  bpe-spark decode --model gpt2/vocab.json --input gpt2-ids/ --limit 10

Each document is printed as its text (special tokens as their text), followed by a newline
when it does not end with one. Runs locally, without Spark.
"""


def _setup_decode(parser: argparse.ArgumentParser) -> None:
    parser.epilog = _DECODE_EXAMPLES
    parser.add_argument("--model", required=True, metavar="PATH", help="the tokenizer (any format bpe-spark loads)")
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--ids", metavar="IDS", help='token ids separated by spaces or commas, e.g. "15496 995"')
    source.add_argument("--input", metavar="PATH",
                        help="an encode output: a Parquet directory or file, or a binary shard directory")
    parser.add_argument("--limit", type=int, metavar="N", help="decode only the first N documents of --input")
    parser.set_defaults(run=_cmd_decode)


def _cmd_decode(args: argparse.Namespace) -> int:
    from bpe_spark.tokenizer import Tokenizer

    tok = Tokenizer.load(args.model)
    if args.limit is not None and args.limit < 0:
        raise ConfigError(f"--limit must be >= 0, got {args.limit}")
    if args.ids is not None:
        if args.limit is not None:
            raise ConfigError("--limit applies to --input")
        documents = [_parse_ids(args.ids)]
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


def _parse_ids(text: str) -> list[int]:
    parts = text.replace(",", " ").split()
    try:
        return [int(part) for part in parts]
    except ValueError:
        raise ConfigError(f"--ids expects integers separated by spaces or commas, got {text!r}") from None


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
