"""The options several commands share, and what they set up: the argument groups for documents,
the pretokenizer, Spark and the output, with their defaults and choices taken from
:class:`TrainerConfig` and the Spark option constants (:mod:`bpe_spark.spark.options`); the one
Spark session set-up of the commands that run on Spark (train, count, encode); loading a model
for the commands that only read one (inspect, export, decode), from a local path or a URI.

Building the parser imports no pyspark (``bpe-spark --help`` stays quick): Spark is imported
when a Spark command runs.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import threading
import weakref
from collections.abc import Mapping, Sequence

from bpe_spark.bpe.config import NORMALIZATIONS, TrainerConfig
from bpe_spark.errors import ConfigError
from bpe_spark.bpe.patterns import PRESETS
from bpe_spark.spark.runtime.progress import OPTION_CHOICES as PROGRESS_CHOICES
from bpe_spark.spark.options import DOCUMENT_UNITS, ENGINES, INPUT_FORMATS, column_name
from bpe_spark.bpe.text import BAD_INPUT_POLICIES

CONFIG_DEFAULTS = {field.name: field.default for field in dataclasses.fields(TrainerConfig)}
# the TrainerConfig fields a command sets (the </w> marker's text is no command-line choice)
CONFIG_OPTIONS = tuple(name for name in CONFIG_DEFAULTS if name != "end_of_word_marker")
TEXT_COLUMN = "text"
DOCUMENT_DEFAULTS = {"input_format": INPUT_FORMATS[0], "text_column": TEXT_COLUMN, "document": DOCUMENT_UNITS[0],
                     "on_bad_input": BAD_INPUT_POLICIES[0], "shared_input": False}
PRETOKENIZER_DEFAULTS = {
    "pattern": CONFIG_DEFAULTS["pattern"],
    "lowercase": CONFIG_DEFAULTS["lowercase"],
    "normalization": CONFIG_DEFAULTS["normalization"],
    "special_tokens": list(CONFIG_DEFAULTS["special_tokens"]),  # a list: --special-token appends
    "engine": ENGINES[0],
}


def add_document_options(parser: argparse.ArgumentParser) -> None:
    """--input-format, --text-column, --document, --on-bad-input, --shared-input, without defaults (``None``:
    not given); a command applies :data:`DOCUMENT_DEFAULTS` with ``parser.set_defaults``, or merges them in."""
    group = parser.add_argument_group("documents")
    group.add_argument("--input-format", choices=INPUT_FORMATS,
                       help="auto (default): from the files' names (.parquet, .jsonl/.json/.ndjson, also compressed; "
                            "else text); text: one document per line, the newline kept; jsonl/parquet: one per row")
    group.add_argument("--text-column", metavar="C", type=column_name,
                       help=f"jsonl/parquet column holding the text (default: {TEXT_COLUMN})")
    group.add_argument("--document", choices=DOCUMENT_UNITS,
                       help="text input: one document per line (default), per file, or per paragraph (lines "
                            "separated by one or more empty lines; e.g. --document paragraph)")
    group.add_argument("--on-bad-input", choices=BAD_INPUT_POLICIES,
                       help="a corrupt compressed file or a bad JSON Lines record (not JSON, no text field, "
                            "a non-string text): error (default: stop, naming file and line) or skip and count it")
    group.add_argument("--shared-input", action="store_true", default=None,
                       help="local --input paths are on a file system every node mounts alike (NFS...): the Python "
                            "tasks read text files themselves on a cluster too (default: only on a local master)")


def input_report(stats: Mapping) -> str | None:
    """The summary line of what reading the input replaced, skipped or found empty (None: nothing).

    >>> input_report({"replaced_sequences": 6, "affected_documents": 3, "skipped_records": 2, "skipped_files": None})
    'input: 6 invalid UTF-8 / lone-surrogate sequences replaced by U+FFFD in 3 documents, 2 bad records skipped'
    """
    parts = []
    if stats.get("replaced_sequences"):
        parts.append(f"{stats['replaced_sequences']:,} invalid UTF-8 / lone-surrogate sequences replaced by U+FFFD "
                     f"in {stats['affected_documents']:,} documents")
    for key, what in (("null_documents", "null documents (no text) left out"),
                      ("skipped_records", "bad records skipped"), ("skipped_files", "corrupt files skipped")):
        if stats.get(key):
            parts.append(f"{stats[key]:,} {what}")
    return "input: " + ", ".join(parts) if parts else None


def add_pretokenizer_options(parser: argparse.ArgumentParser) -> None:
    """--pattern, --lowercase, --normalization, --special-token, --engine: what decides the
    pretokens (and so the counts), without defaults, as :func:`add_document_options`."""
    default = CONFIG_DEFAULTS["pattern"]
    presets = ", ".join(f"{name} (default)" if name == default else name for name in PRESETS)
    group = parser.add_argument_group("pretokenizer")
    group.add_argument("--pattern", metavar="P", help=f"pretokenizer: {presets}, or a regex")
    group.add_argument("--lowercase", action="store_true", default=None, help="lowercase before pretokenizing")
    group.add_argument("--normalization", choices=[n for n in NORMALIZATIONS if n],
                       help="Unicode normalization before pretokenizing")
    group.add_argument("--special-token", action="append", metavar="T", dest="special_tokens",
                       help="special token (a hard boundary, never merged), repeatable")
    group.add_argument("--engine", choices=ENGINES,
                       help="pretokenizer engine: auto (default: Spark SQL's Java regex for the presets, "
                            "Python otherwise), jvm or python")


def add_overwrite(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--overwrite", action="store_true", help="replace an existing output")


def add_spark_options(parser: argparse.ArgumentParser) -> None:
    """--master, --conf, --set, --verbose: for the commands that start Spark, read by :func:`start_spark`."""
    group = parser.add_argument_group("Spark")
    group.add_argument("--master", help="Spark master URL (default: local[*], or $SPARK_MASTER)")
    group.add_argument("--conf", metavar="FILE", help="Spark properties file (e.g. conf/spark-local.conf)")
    group.add_argument(
        "--set", metavar="KEY=VALUE", action="append", default=[], dest="spark_set",
        help="extra Spark property, repeatable (e.g. --set spark.driver.memory=8g)",
    )
    group.add_argument("--verbose", "-v", action="store_true", help="show Spark's log (its warnings) and the full trace of a failure")
    group.add_argument("--progress", choices=PROGRESS_CHOICES, default="auto",
                       help="progress of counting, merging and encoding on stderr: auto (default) draws bars "
                            "on a terminal, else logs a line every 10 s ($BPE_SPARK_PROGRESS_SECONDS); on: the "
                            "same; off: none")


def progress_reporter(args: argparse.Namespace, command: str):
    """The :class:`~bpe_spark.spark.runtime.progress.Progress` reporter of ``--progress`` for ``command``."""
    from bpe_spark.spark.runtime.progress import Progress

    return Progress.from_option(getattr(args, "progress", "auto"), command, every=progress_seconds())


def progress_seconds() -> float:
    """Seconds between two progress log lines: $BPE_SPARK_PROGRESS_SECONDS, default 10."""
    import os

    from bpe_spark.spark.runtime.progress import DEFAULT_EVERY

    value = os.environ.get("BPE_SPARK_PROGRESS_SECONDS", "")
    try:
        seconds = float(value) if value else DEFAULT_EVERY
    except ValueError:
        raise ConfigError(f"BPE_SPARK_PROGRESS_SECONDS must be a number of seconds, got {value!r}") from None
    if seconds <= 0:
        raise ConfigError(f"BPE_SPARK_PROGRESS_SECONDS must be > 0, got {value!r}")
    return seconds


def check_document_options(input_format: str | None, document: str) -> None:
    """Before Spark starts: --document file or paragraph needs text input (``auto``: checked once
    the format is known)."""
    if input_format not in (None, "auto", "text") and document != "line":
        raise ConfigError(f"--document {document} applies to --input-format text only")


def check_input_paths(paths: Sequence[str], option: str = "--input"):
    """Before Spark starts: every local input (a file, a directory, a glob; ``file:`` URIs too)
    names at least one file that Spark would read, by the one walk that ``read_documents`` makes
    too (:mod:`bpe_spark.storage.input_walk`: a name that exists is never a glob, links followed
    once, FIFOs refused). Other URIs (``hdfs://``, ``s3a://``) and Hadoop brace globs are left to
    Spark's reader, which names a missing one. The :class:`~bpe_spark.storage.input_walk.InputPlan`
    of ``paths``, or None when one of them is not local."""
    from bpe_spark.storage.input_walk import is_local_input, plan_inputs

    plan = plan_inputs(paths, option)
    if plan is None:  # some are remote: the local ones are checked one by one
        for given in paths:
            if is_local_input(str(given)):
                plan_inputs([given], option)
    return plan


def check_document_input(paths: Sequence[str], input_format: str | None, document: str, text_column: str,
                         id_columns: Sequence[str] = ()) -> str:
    """Before Spark starts, by one walk of the inputs (:func:`check_input_paths`): the paths, the
    format to read them in (``input_format``, or when it is None or ``auto`` the one the planned
    files' names say: :mod:`bpe_spark.storage.input_format` refuses mixed formats and Parquet read
    as text), ``--document`` against that format, and the columns of local jsonl and parquet
    files (:func:`check_local_columns`). Returns the format."""
    from bpe_spark.storage.input_format import resolve_input_format

    check_document_options(input_format, document)
    plan = check_input_paths(paths)
    files = list(plan.files) if plan is not None else None
    input_format = resolve_input_format(input_format, files, paths)
    check_document_options(input_format, document)
    check_local_columns(files, input_format, text_column, id_columns)
    return input_format


def local_input_files(paths: Sequence[str]) -> list[str] | None:
    """Every file the local ``paths`` name (the one walk's plan), or None when one is not local
    (or a Hadoop brace glob): then Spark's reader is the one to look."""
    from bpe_spark.storage.input_walk import plan_inputs

    plan = plan_inputs(paths)
    return None if plan is None else list(plan.files)


def check_local_columns(files: Sequence[str] | None, input_format: str, text_column: str,
                        id_columns: Sequence[str] = ()) -> None:
    """Before Spark starts: the text column (a string) and the id columns of local jsonl and
    parquet input (``files``: the planned files; None when an input is not local) exist, as ``read_documents`` will check them once Spark runs. Parquet: the
    schema of the first file (pyarrow reads its footer); JSON Lines: the fields of the first
    records, which must name a column in at least one file (a column first seen further into a
    file is left to Spark's reader, which looks at its first records in its own file order).
    Compressed files other than .gz/.bz2 are left to Spark's reader."""
    if input_format not in ("jsonl", "parquet") or not files:
        return
    from bpe_spark.errors import ColumnError, option

    text_column, id_columns = column_name(text_column), [column_name(c) for c in id_columns]
    required = [text_column, *id_columns]
    hint = f"name the text column with {option('text_col')}" + (f" and id columns with {option('id_cols')}"
                                                                 if id_columns else "")
    if input_format == "parquet":
        import pyarrow as pa
        import pyarrow.parquet as pq

        from bpe_spark.spark.read.parquet_splits import holds_text

        names: dict[str, None] = {}
        for path in files:  # the first file that has them all; all are read only when none has
            try:
                schema = pq.read_schema(path)
            except (OSError, pa.ArrowException):  # not Parquet, or damaged: Spark's reader names what is wrong
                return
            names.update(dict.fromkeys(schema.names))
            if all(name in schema.names for name in required):
                found = schema.field(text_column).type
                if not holds_text(found):
                    raise ColumnError.wrong_type(text_column, f"{path} (Parquet)", str(found), "string")
                return
        missing = next(name for name in required if name not in names)
        raise ColumnError.missing(missing, _shown(files), names, hint)
    from bpe_spark.spark.options import JSON_SAMPLE_LINES

    seen: dict[str, None] = {}
    for path in files:
        fields = _jsonl_fields(path, JSON_SAMPLE_LINES)
        if fields is None:
            return
        seen.update(dict.fromkeys(fields))
        if all(name in seen for name in required):
            return
    missing = next(name for name in required if name not in seen)
    raise ColumnError.missing(missing, f"the first {JSON_SAMPLE_LINES} records of {_shown(files)}", seen, hint)


def _shown(files: Sequence[str]) -> str:
    return files[0] if len(files) == 1 else f"{len(files)} files ({files[0]}, ...)"


def _jsonl_fields(path: str, lines: int) -> list[str] | None:
    """The fields of the JSON objects among the first ``lines`` lines of a JSON Lines file, or
    None when it cannot be read here (another codec, damage): what ``read_documents`` looks at."""
    from bpe_spark.spark.read.text_splits import head_lines, record_fields

    found = head_lines([path], lines)
    return None if found is None else record_fields(found)


def check_special_tokens_match(tokens, input_format: str, document: str, option: str) -> None:
    """Before Spark starts: when documents are lines of text, a special token that holds a line
    break before its last character can never match, so it is an error."""
    if input_format != "text" or document != "line":
        return
    for token in tokens:
        if "\n" in token[:-1]:
            raise ConfigError(
                f"{option} {token!r} holds a line break, but each line is a document (--document line), "
                "so it can never match; use --document file, or a token without a line break"
            )


def spark_properties(pairs: Sequence[str]) -> dict[str, str]:
    """The ``--set KEY=VALUE`` pairs as Spark properties."""
    props = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key.strip():
            raise ConfigError(f"--set expects KEY=VALUE, got {pair!r}")
        props[key.strip()] = value.strip()
    return props


def start_spark(
    args: argparse.Namespace,
    command: str,
    *,
    light_input: tuple | None = None,
    properties: Mapping[str, str] | None = None,
    shared_input: bool = False,
):
    """The SparkSession of a Spark command: bpe-spark's defaults < ``--conf`` < the command's
    ``properties`` < ``--set``; the master from ``--master`` (see ``build_session``, which checks
    it before Spark starts). Quiet unless ``--verbose``: no console progress bar of Spark's, no
    JVM or Spark warnings on stderr (``build_session(quiet=True)``; the failure itself is one line
    of :mod:`bpe_spark.cli.failures`).

    ``light_input``: the ``(paths, input_format, document[, tasks_read_jsonl])`` of documents that
    the command's Python tasks read and work on themselves (``io.reads_local_text``); when they are
    local text files (or JSON Lines the tasks read) the JVM only
    coordinates and starts light (``build_session(light_jvm=True)``); with ``shared_input``
    (``--shared-input``) a cluster's executors read them too and start light as well.
    """
    overrides = dict(properties or {})
    overrides.update(spark_properties(args.spark_set))
    if not args.verbose:
        overrides.setdefault("spark.ui.showConsoleProgress", "false")

    from bpe_spark.spark.read.documents import reads_local_text
    from bpe_spark.spark.runtime.session import build_session, running_session

    light = light_input is not None and reads_local_text(*light_input)
    running = running_session()
    spark = build_session(f"bpe-spark {command}", master=args.master, conf_file=args.conf,
                          overrides=overrides, light_jvm=light, shared_input=shared_input,
                          quiet=not args.verbose)
    if not args.verbose:  # a session that was running already (the JVM that build_session starts is quiet)
        spark.sparkContext.setLogLevel("FATAL")
    if running is None:
        _STARTED.add(spark)
    return spark


_STARTED: weakref.WeakSet = weakref.WeakSet()  # the sessions start_spark started (not a caller's)


def stop_spark_early(spark, *uris: str) -> threading.Thread | None:
    """Stop ``spark`` in a background thread, while the command's last, local work runs (a model
    saved and its report written on the driver's disk): the JVM's shutdown, about half a second,
    then overlaps it instead of following it. Only a session this command started (never one
    running before it, such as a caller's), and only when every one of ``uris`` is a local path,
    which needs no Spark to write. The thread to join before the command returns, else None."""
    from bpe_spark.storage.output_guard import is_local

    if spark not in _STARTED or not all(is_local(str(uri)) for uri in uris):
        return None
    _STARTED.discard(spark)

    def stop() -> None:
        with contextlib.suppress(Exception):  # the JVM going away is all that is asked of it
            spark.stop()

    thread = threading.Thread(target=stop, name="bpe-spark-stop", daemon=True)
    thread.start()
    return thread


FOLDER_TOKEN_OPTIONS = ("bos_token", "eos_token", "pad_token", "unk_token")  # = hf_config.ROLES
FOLDER_OPTIONS = (*FOLDER_TOKEN_OPTIONS, "model_max_length")


def add_model_folder_options(parser: argparse.ArgumentParser, *, unk_token: bool = True) -> None:
    """--bos-token, --eos-token, --pad-token, --unk-token (``unk_token=False``: the command has its
    own), --model-max-length: what tokenizer_config.json and special_tokens_map.json say
    (:mod:`bpe_spark.models.huggingface.transformers_config`), without defaults (``None``: not given)."""
    group = parser.add_argument_group(
        "model folder (transformers' tokenizer_config.json and special_tokens_map.json)")
    for name in FOLDER_TOKEN_OPTIONS if unk_token else FOLDER_TOKEN_OPTIONS[:3]:
        role = name.split("_")[0]
        group.add_argument("--" + name.replace("_", "-"), metavar="T", dest=name,
                           help=f"the {role} token transformers reports (a special token of the model)")
    group.add_argument("--model-max-length", type=int, metavar="N",
                       help="transformers' model_max_length, the longest input in tokens (default: no limit, "
                            "as transformers writes it: int(1e30))")


def add_pattern_for_tiktoken(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--pattern", help="pretokenization pattern, for a .tiktoken file that is not OpenAI's")


def load_model(path: str, pattern: str | None = None, *, option: str = "--model"):
    """A model in any format bpe-spark loads (``pattern``: for a .tiktoken file that is not OpenAI's),
    at a local path or a URI pyarrow reaches (``s3://``, ``s3a://``, ``gs://``...: fetched first, see
    :mod:`bpe_spark.storage.remote`)."""
    from bpe_spark.encoding.remote import load_model as load

    return load(path, option=option, **({"pattern": pattern} if pattern else {}))
