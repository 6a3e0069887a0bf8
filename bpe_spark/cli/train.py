"""``bpe-spark train``: train a BPE tokenizer on Spark from documents or from pretoken counts,
write the model directory and print a summary. Options come from defaults (TrainerConfig's and
the Spark functions'), then a ``--config`` JSON file, then the command line. ``--extend MODEL``
continues training a model bpe-spark loads (``--vocab-size``, the new total, or ``--add-merges``);
``--like MODEL`` trains a new vocabulary with a model's pipeline; the options the model decides
are refused (:func:`check_model_options`).
"""

from __future__ import annotations

import argparse
import sys

from bpe_spark.cli.arguments import (
    CONFIG_DEFAULTS,
    CONFIG_OPTIONS,
    DOCUMENT_DEFAULTS,
    FOLDER_OPTIONS,
    PRETOKENIZER_DEFAULTS,
    add_document_options,
    add_model_folder_options,
    add_overwrite,
    add_pretokenizer_options,
    add_spark_options,
    check_document_input,
    check_input_paths,
    check_special_tokens_match,
    input_report,
    load_model,
    progress_reporter,
    start_spark,
    stop_spark_early,
)
from bpe_spark.cli.report import preload_plotting, train_report
from bpe_spark.bpe.config import END_OF_WORD, SCHEMES, TIE_BREAKS, TrainerConfig
from bpe_spark.errors import BpeSparkError, ConfigError
from bpe_spark.spark.options import DEFAULT_DRIVER_BUDGET

NAME = "train"
SUMMARY = "train a BPE tokenizer on a corpus (or on pretoken counts)"
EXAMPLES = """
examples:
  bpe-spark train --input data/sample/tiny_shakespeare.txt.gz --vocab-size 1000 --out out/shakespeare-1k
  bpe-spark train --input corpus/ --vocab-size 32000 --special-token "<|endoftext|>" --out models/en32k \\
      --master local[8] --set spark.driver.memory=8g
  bpe-spark train --input docs.jsonl --input-format jsonl --text-column body --vocab-size 8000 \\
      --scheme char --end-of-word fused --tie-break lexicographic --out models/char8k
  bpe-spark train --counts counts.parquet --vocab-size 50000 --driver-budget 30% \\
      --checkpoint-dir ckpt/ --out models/big      # ... and after an interruption, add --resume
  bpe-spark train --config conf/train-example.json --out out/example-model
  bpe-spark train --extend out/sample-model --input new-text/ --add-merges 500 --out out/sample-model-plus
  bpe-spark train --extend gpt2_vocab.json --input corpus/ --vocab-size 52000 --checkpoint-dir ckpt/ \\
      --out models/gpt2-extended   # also tokenizer.json, .tiktoken, tekken, SentencePiece .model, s3a://...
  bpe-spark train --like tokenizer.json --input corpus/ --vocab-size 32000 --out models/new-vocab
  bpe-spark train --input corpus/ --vocab-size 32000 --superword-transition 28800 --pattern o200k \
      --out models/superbpe-32k     # SuperBPE: 28,800 merges within words, then superwords
  bpe-spark train --extend cl100k_base.tiktoken --pattern superbpe --input corpus/ --add-merges 20000 \
      --out models/cl100k-superwords  # superwords on top of a production tokenizer

The model directory (merges.parquet, vocab.parquet, bpe_spark.json; tokenizer.json with
tokenizer_config.json and special_tokens_map.json, so transformers.AutoTokenizer.from_pretrained
loads it, with --eos-token/--bos-token/--pad-token/--unk-token and --model-max-length, e.g.
  --special-token "<|endoftext|>" --eos-token "<|endoftext|>" --pad-token "<|endoftext|>")
is written atomically: a failed run leaves none. --config reads training options from a JSON file (keys are
the long option names, e.g. "vocab_size"); options on the command line win. --counts reads the
output of bpe-spark count (give the same --special-token options again).

--extend MODEL keeps every id, merge and special token of MODEL and learns new merges after its
own from the input, pretokenized as MODEL pretokenizes; the new model records its base
(bpe_spark.json: metadata.base, with the base's fingerprint, which --resume checks too).
--scheme, --pattern, --lowercase, --normalization, --special-token, --end-of-word and
--unk-token are MODEL's to decide, with --extend and --like alike; --extend also takes --pattern:
the new text is then pretokenized with it, each pretoken starts as MODEL's encoding of it whole,
and the extended model keeps the new pattern.

--superword-transition T trains SuperBPE's two stages (docs/design.md 1.7): T merges with
--pattern, then the rest of --vocab-size over --superword-pattern's pretokens, which span words
(default superbpe, the SuperBPE reference scripts' split); each stage runs on the driver or in
exact rounds as its counts decide, and --checkpoint-dir keeps each stage in a subdirectory.
"""
SAMPLE = "To be, or not to be, that is the question."
DEFAULTS = {
    **{name: CONFIG_DEFAULTS[name] for name in CONFIG_OPTIONS},
    "vocab_size": None,  # required: a command trains to the size it is asked for
    **DOCUMENT_DEFAULTS,
    **PRETOKENIZER_DEFAULTS,
    "driver_budget": None, "checkpoint_dir": None, "resume": False, "sample": SAMPLE,
    "report_sample": None, "no_report": False,
    "input": None, "counts": None, "out": None, "overwrite": False,
    "extend": None, "add_merges": None, "like": None,
    **{name: None for name in FOLDER_OPTIONS if name != "unk_token"},  # unk_token: TrainerConfig's
}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    source = parser.add_mutually_exclusive_group()
    source.add_argument("--input", nargs="+", metavar="PATH",
                        help="documents: files, globs or directories (local, hdfs://, s3a://...; .gz/.bz2 read)")
    source.add_argument("--counts", nargs="+", metavar="PATH",
                        help="pretoken counts instead of documents: Parquet with columns pretoken (string), "
                             "count (integer), e.g. the output of bpe-spark count")
    parser.add_argument("--out", metavar="DIR",
                        help="the model directory to write (must not exist unless --overwrite): local, or any URI "
                             "the session reaches (hdfs://, viewfs://, s3a://, gs://, abfs://)")
    parser.add_argument("--config", metavar="FILE",
                        help="JSON file of training options (keys: long option names); command-line options win")
    parser.add_argument("--vocab-size", type=int, metavar="N", help="total vocabulary: specials + alphabet + merges")
    model = parser.add_mutually_exclusive_group()
    model.add_argument("--extend", metavar="MODEL",
                       help="continue training MODEL (a model directory, tokenizer.json, GPT-2 vocab.json, .tiktoken, "
                            "tekken, SentencePiece .model; local or a URI): its ids, merges and special tokens are "
                            "kept; give --vocab-size (the new total) or --add-merges")
    model.add_argument("--like", metavar="MODEL",
                       help="train a new vocabulary with MODEL's pipeline (its normalization, pretokenization and "
                            "special tokens)")
    parser.add_argument("--add-merges", type=int, metavar="N",
                        help="with --extend: learn N new merges (instead of --vocab-size)")
    parser.add_argument("--superword-transition", type=int, metavar="T",
                        help="SuperBPE: learn T merges within words (--pattern), then superwords to --vocab-size "
                             "(the paper: 0.9 of the vocabulary, e.g. 28800 of 32000; 0.4 compresses most)")
    parser.add_argument("--superword-pattern", metavar="P",
                        help="stage 2's pretokenizer with --superword-transition: superbpe (default) or a regex")
    parser.add_argument("--scheme", choices=SCHEMES, help="initial symbols: UTF-8 bytes (default) or characters")
    parser.add_argument("--end-of-word", choices=END_OF_WORD,
                        help="char scheme: </w> as its own symbol (default) or fused onto the last character")
    parser.add_argument("--tie-break", choices=TIE_BREAKS,
                        help="hf: tokenizers' BpeTrainer order (default); lexicographic: CS336 / subword-nmt")
    parser.add_argument("--min-frequency", type=int, metavar="N", help="stop when the best pair occurs fewer times")
    parser.add_argument("--max-merges", type=int, metavar="N", help="stop after N merges too")
    parser.add_argument("--max-token-length", type=int, metavar="N",
                        help="never make a token longer than N bytes (byte scheme) or characters (char scheme; "
                             "</w> not counted; special tokens are not limited): a pair whose merge would be longer "
                             "is never chosen, e.g. --max-token-length 16; in a --config file: max_token_length")
    parser.add_argument("--unk-token", metavar="T",
                        help="the unknown token, a --special-token: char scheme: the token of characters unseen in "
                             "training; any scheme: transformers' unk_token in tokenizer_config.json")
    parser.add_argument("--driver-budget", metavar="N|F",
                        help="distinct pretokens the driver may hold: a count, a fraction of the distinct "
                             "pretokens (0.3 or 30%%), or auto (default: what the driver's memory holds, from its "
                             "JVM heap, spark.driver.maxResultSize and free memory); above it, training runs in "
                             "exact rounds, and says why")
    parser.add_argument("--checkpoint-dir", metavar="DIR",
                        help="keep the pretoken counts and each round's merges here (any Hadoop URI)")
    parser.add_argument("--resume", action="store_true", default=None,
                        help="continue the interrupted run in --checkpoint-dir (same settings), to the same result")
    parser.add_argument("--sample", metavar="TEXT", help="sentence shown as tokens in the summary")
    parser.add_argument("--report-sample", metavar="FILE",
                        help="local held-out text for the report's bytes-per-token plot (text, .gz/.bz2, .jsonl, "
                             ".parquet; its first 256 KB); default: the start of the first local input file, "
                             "which the plot then says is training data")
    parser.add_argument("--no-report", action="store_true",
                        help="do not write report.html (plots of the training) into the model directory")
    add_pretokenizer_options(parser)
    add_model_folder_options(parser, unk_token=False)
    add_document_options(parser)
    add_overwrite(parser)
    add_spark_options(parser)


def train_options(args: argparse.Namespace) -> dict:
    """Defaults < the --config JSON file < the command line."""
    import json
    from pathlib import Path

    options = dict(DEFAULTS)
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


# what a model given by --extend or --like decides: not to be given with them
MODEL_DECIDES = ("scheme", "end_of_word", "pattern", "lowercase", "normalization", "special_tokens", "unk_token")


def check_model_options(options: dict, args: argparse.Namespace) -> str | None:
    """Before any work: the options of a run from a model (``--extend``, ``--like``; returns
    that option's name, or None for a fresh run). Refuses in one line the options the model
    decides (:data:`MODEL_DECIDES`), and checks --vocab-size / --add-merges."""
    from bpe_spark.errors import option_name

    chosen = "--extend" if options["extend"] else "--like" if options["like"] else None
    if options["extend"] and options["like"]:
        raise ConfigError("--extend and --like exclude each other: extend one model, or train a new vocabulary "
                          "with another's pipeline")
    if chosen is None:
        if options["add_merges"] is not None:
            raise ConfigError("--add-merges N applies to --extend MODEL (N new merges for it); "
                              "train afresh with --vocab-size N")
        return None
    decided = [name for name in MODEL_DECIDES if not (name == "pattern" and chosen == "--extend")]
    given = [name for name in decided
             if getattr(args, name, None) not in (None, False) or options[name] != DEFAULTS[name]]
    if given:
        names = ", ".join(option_name(name) for name in given)
        raise ConfigError(f"{names} {'does' if len(given) == 1 else 'do'} not apply with {chosen}: the model decides "
                          "its scheme, pattern, normalization, special tokens and unknown token; leave "
                          f"{'it' if len(given) == 1 else 'them'} out")
    if chosen == "--like":
        if options["add_merges"] is not None:
            raise ConfigError("--add-merges applies to --extend; --like trains a new vocabulary of --vocab-size N")
        return chosen
    if (options["vocab_size"] is None) == (options["add_merges"] is None):
        raise ConfigError("--extend needs exactly one of --vocab-size N (the new total vocabulary) and "
                          "--add-merges N (N new merges)")
    if options["add_merges"] is not None:
        if options["add_merges"] < 1:
            raise ConfigError(f"--add-merges must be at least 1, got {options['add_merges']}")
        if options["max_merges"] is not None:
            raise ConfigError("--add-merges N caps the new merges itself; leave out --max-merges")
    return chosen


def model_config(options: dict, model) -> TrainerConfig:
    """The config of a run from ``model`` (``--extend``: --add-merges N is N more merges and as
    many more tokens than the model holds; the model decides the rest)."""
    options = dict(options)
    if options["add_merges"] is not None:
        options.update(vocab_size=model.vocab_size + options["add_merges"], max_merges=options["add_merges"])
    return trainer_config(options)


def trainer_config(options: dict) -> TrainerConfig:
    """The TrainerConfig of resolved options (:func:`train_options`)."""
    values = {name: options[name] for name in CONFIG_OPTIONS}
    values.update(lowercase=bool(values["lowercase"]), special_tokens=tuple(values["special_tokens"] or ()))
    if values["scheme"] != "char":
        values["unk_token"] = None  # bytes are never unknown: --unk-token is only transformers' label
    return TrainerConfig(**values)


def folder_options(options: dict, special_tokens) -> dict:
    """The model-folder options of resolved options, checked before any work: each token option
    names a --special-token (the vocabulary is not known before training, and transformers
    makes these tokens special, so an ordinary token would change its ids)."""
    from bpe_spark.errors import option_name
    from bpe_spark.models.huggingface.transformers_config import check_max_length

    chosen = {name: options[name] for name in FOLDER_OPTIONS if options.get(name) is not None}
    for name, value in chosen.items():
        if name == "model_max_length":
            check_max_length(value)
        elif value not in special_tokens:
            raise ConfigError(
                f"{option_name(name)} {value!r} is not one of the --special-token tokens "
                f"{list(special_tokens)}; add --special-token {value!r} (transformers makes it special, so it must be one)"
            )
    return chosen


def run(args: argparse.Namespace) -> int:
    import os
    import time

    from bpe_spark.models.huggingface.transformers_config import set_transformers_config
    from bpe_spark.storage.output_guard import check_checkpoint, check_output

    options = train_options(args)
    if not options["out"]:
        raise ConfigError("--out DIR is required: the model directory to write")
    if not options["input"] and not options["counts"]:
        raise ConfigError("give the corpus with --input PATH... (or pretoken counts with --counts PATH...)")
    if options["input"] and options["counts"]:
        raise ConfigError("--input and --counts exclude each other")
    from_model = check_model_options(options, args)
    if options["vocab_size"] is None and from_model != "--extend":
        raise ConfigError("--vocab-size N is required")
    if options["resume"] and not options["checkpoint_dir"]:
        raise ConfigError("--resume continues the run kept in --checkpoint-dir DIR; give that directory")
    if options["input"]:  # the one walk of the inputs: checks the paths, and the format read is recorded
        options["input_format"] = check_document_input(options["input"], options["input_format"],
                                                       options["document"], options["text_column"])
    else:
        check_input_paths(options["counts"], "--counts")
        options["input_format"] = None  # no documents read: the model's source says counts
    out = str(options["out"])  # a path or a URI (s3a://, hdfs://...): never a Path, which would mangle a URI
    inputs, checkpoint_dir = options["input"] or options["counts"], options["checkpoint_dir"]
    protected = {"input": inputs, "checkpoint": [checkpoint_dir]}
    check_output(out, "model", overwrite=bool(options["overwrite"]), option="--out", protected=protected)
    if checkpoint_dir:
        check_checkpoint(checkpoint_dir, protected={"input": inputs, "model output": [out]}, option="--checkpoint-dir")
    model = extend_pattern = None
    if from_model == "--extend" and (args.pattern is not None or options["pattern"] != DEFAULTS["pattern"]):
        extend_pattern, options["pattern"] = options["pattern"], DEFAULTS["pattern"]  # the new text's, not cfg's
    if from_model is not None:  # loaded before Spark starts: a bad model fails first
        model = load_model(str(options[from_model[2:]]), option=from_model)
        cfg = model_config(options, model)
        folder = folder_options(options, tuple(model.special_tokens))
    else:
        cfg = trainer_config(options)
        if options["input"]:
            check_special_tokens_match(cfg.special_tokens, options["input_format"], options["document"],
                                       "--special-token")
        folder = folder_options(options, cfg.special_tokens)
    if from_model is not None:  # the config against the model, before Spark starts
        from bpe_spark.spark.training.starting import training_start

        training_start(cfg, pattern=extend_pattern, **{"base" if from_model == "--extend" else "like": model})
    if options["report_sample"] and not os.path.isfile(str(options["report_sample"])):
        raise ConfigError(f"--report-sample {options['report_sample']}: no such file; give a local text file")

    # Local text is read by the Python tasks, and the JVM only coordinates; not when a driver
    # budget is given: that asks for rounds, whose pair counts are JVM work.
    if not options["no_report"]:
        preload_plotting()
    light = options["input"] and options["engine"] != "jvm" and not options["driver_budget"]
    spark = start_spark(args, NAME, light_input=(options["input"], options["input_format"], options["document"], True)
                        if light else None, shared_input=bool(options["shared_input"]))
    from bpe_spark.spark import read_counts, read_documents
    from bpe_spark.spark import train as spark_train
    from bpe_spark.spark import train_from_counts as spark_train_from_counts
    from bpe_spark.spark.storage.uris import prepare_output, save_model
    from bpe_spark.training.extend import base_exports

    # before any work: the model's file layer, a probe write there, and what it may replace
    prepare_output(spark, out, "model", overwrite=bool(options["overwrite"]), protected=protected, option="--out")

    on_round = None
    if args.verbose:
        def on_round(record: dict) -> None:
            shown = ", ".join(f"{key} {record[key]:,}" for key in ("speculated", "shipped", "collected") if key in record)
            print(f"round {record['round']}: {record['merges']} merges ({record.get('kind')}, {shown}, "
                  f"{record['seconds']:.2f} s)", file=sys.stderr)

    common = {
        "driver_budget": options["driver_budget"] or DEFAULT_DRIVER_BUDGET,
        "checkpoint_dir": options["checkpoint_dir"],
        "resume": bool(options["resume"]),
        "on_round": on_round,
        "progress": progress_reporter(args, NAME),
        "base": model if from_model == "--extend" else None,
        "like": model if from_model == "--like" else None,
        "pattern": extend_pattern,
    }
    if options["input"]:
        docs = read_documents(spark, options["input"], input_format=options["input_format"],
                              text_col=options["text_column"], document=options["document"],
                              on_bad_input=options["on_bad_input"], shared_input=bool(options["shared_input"]))
        tok = spark_train(docs, cfg, text_col=options["text_column"], engine=options["engine"], **common,
                          read_options={key: options[key] for key in ("input_format", "document", "on_bad_input")})
    else:
        tok = spark_train_from_counts(read_counts(spark, options["counts"]), cfg, **common)
    # the model and its report are all that is left: on the driver's disk, no Spark is needed
    stopping = stop_spark_early(spark, out)
    started = time.perf_counter()
    tok.metadata["source"] = {
        key: options[key]
        for key in ("input", "counts", "input_format", "text_column", "document", "on_bad_input", "engine")
    }
    if from_model is not None:
        name = from_model[2:]
        tok.metadata["source"][name] = str(options[name])  # the model as the user gave it
        recorded = tok.metadata.get("base" if from_model == "--extend" else "like")
        if isinstance(recorded, dict):
            recorded["file"] = str(options[name])
    if folder:
        set_transformers_config(tok, **folder)
    save_model(spark, tok, out, overwrite=bool(options["overwrite"]), option="--out", exports=base_exports(tok))
    tok.metadata["timings"]["save_seconds"] = round(time.perf_counter() - started, 3)
    report = None if options["no_report"] else train_report(spark, tok, out, options)
    print(summary(tok, out, options["sample"]))
    if report is not None:
        print(f"report: {report}")
    if stopping is not None:
        stopping.join()
    return 0


def _short(pattern: str) -> str:
    return pattern if len(pattern) <= 40 else pattern[:37] + "..."


def summary(tok, out, sample: str | None) -> str:
    """What a training run printed: the model, its vocabulary, the corpus, the rounds, the time."""
    stats, timings, rounds = tok.metadata["stats"], tok.metadata["timings"], tok.metadata["rounds"]
    alphabet = tok.vocab_size - len(tok.merge_ids) - len(tok.special_tokens)
    lines = [
        f"model: {out}",
        (
            f"vocabulary: {tok.vocab_size} = {alphabet} {'bytes' if tok.scheme == 'byte' else 'alphabet symbols'}"
            f" + {len(tok.merge_ids)} merges + {len(tok.special_tokens)} special tokens"
            f" (scheme {tok.scheme}, {'an imported pipeline' if tok.pipeline is not None else f'pattern {tok.pattern}'})"
        ),
    ]
    corpus = [f"{stats['pretokens']:,} pretokens ({stats['distinct_pretokens']:,} distinct)"]
    if stats.get("documents") is not None:
        corpus.insert(0, f"{stats['documents']:,} documents, {stats['bytes']:,} bytes")
    if isinstance(base := tok.metadata.get("base"), dict):
        lines.append(f"base: {base.get('file')} ({base.get('format') or 'model'}, {base['vocab_size']:,} tokens, "
                     f"{base['merges']:,} merges), {len(tok.merge_ids) - base['merges']:,} merges added")
    if isinstance(stages := tok.metadata.get("superword"), dict):
        first, second = stages["stage1"], stages["stage2"]
        lines.append(
            f"superword: stage 1 {stages['stage1_merges']:,} merges (pattern {stages['stage1_pattern']}, "
            f"{first['distinct_pretokens']:,} distinct pretokens), stage 2 "
            f"{len(tok.merge_ids) - stages['stage1_merges']:,} merges (pattern {_short(stages['stage2_pattern'])}, "
            f"{second['distinct_pretokens']:,} distinct pretokens of {second['pretoken_bytes']:,} bytes)")
    lines.append("corpus: " + ", ".join(corpus))
    if report := input_report(stats):
        lines.append(report)
    per_round = [r["merges"] for r in rounds]
    shown = ", ".join(str(n) for n in per_round[:12]) + (", ..." if len(per_round) > 12 else "")
    lines.append(f"rounds: {len(rounds)} ({stats['mode']}, driver budget {stats['driver_budget']:,} pretokens); "
                 f"merges per round: {shown}")
    phases = [("count", "count_seconds"), ("collect", "collect_seconds"), ("merge", "merge_seconds"),
              ("rounds on Spark", "rounds_spark_seconds"), ("checkpoint", "checkpoint_seconds"),
              ("save", "save_seconds"), ("report", "report_seconds")]
    shown_times = [f"{name} {timings[key]:.2f} s" for name, key in phases if timings.get(key)]
    total = timings.get("total_seconds", 0) + timings.get("save_seconds", 0) + timings.get("report_seconds", 0)
    lines.append("time: " + ", ".join(shown_times) + f"; total {total:.2f} s")
    if sample:
        try:
            lines.append(f"sample: {sample!r} -> {tok.tokens(sample)}")
        except BpeSparkError as exc:  # e.g. a char-scheme model without unk meets an unseen character
            lines.append(f"sample: {sample!r} -> cannot encode: {exc}")
    return "\n".join(lines)
