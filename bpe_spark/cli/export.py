"""``bpe-spark export``: write a model in another format (GPT-2 files, tiktoken, tokenizer.json,
subword-nmt codes) and print the files written, without Spark. ``--model`` and ``--out`` may be
local paths or URIs pyarrow reaches (``s3://``, ``s3a://``, ``gs://``...; :mod:`bpe_spark.storage.remote`),
``--out`` checked before the model is read. The folder options (``--eos-token``...) go into
transformers' config files of the tokenizer.json and gpt2 exports (:mod:`bpe_spark.models.huggingface.transformers_config`).
"""

from __future__ import annotations

import argparse
import textwrap

from bpe_spark.cli.arguments import (
    FOLDER_OPTIONS,
    add_model_folder_options,
    add_overwrite,
    add_pattern_for_tiktoken,
    load_model,
)
from bpe_spark.errors import ConfigError

NAME = "export"
SUMMARY = "export a model to another format"
_EXAMPLES = """
examples:
  tokenizer.json: a folder transformers loads as it is (tokenizer.json, tokenizer_config.json,
  special_tokens_map.json); a char-scheme model too when trained with --end-of-word fused
    bpe-spark export --model out/sample-model --format tokenizer.json --out out/hf-sample/
    bpe-spark export --model models/en32k --format tokenizer.json --out hf/en32k/ \\
        --eos-token "<|endoftext|>" --pad-token "<|endoftext|>" --model-max-length 1024
    bpe-spark export --model gpt2/vocab.json --format tokenizer.json --out gpt2-tokenizer.json  # the file alone
  then, in Python:
    tok = transformers.AutoTokenizer.from_pretrained("hf/en32k")
    tok(["a", "longer text"], padding=True)

  gpt2: vocab.json + merges.txt with the same config files (tokenizer_class GPT2Tokenizer; when
  GPT-2's pipeline would give other ids, as for another pattern, tokenizer.json too)
    bpe-spark export --model models/en32k --format gpt2 --out gpt2-files/

  tiktoken: the ranks, and the sidecar en32k.tiktoken.json (name, pat_str, special_tokens)
    bpe-spark export --model models/en32k --format tiktoken --out en32k.tiktoken
{tiktoken_lines}
  subword-nmt: the codes file of a char-scheme model (subword-nmt apply-bpe -c codes.bpe)
    bpe-spark export --model models/char8k --format subword-nmt --out codes.bpe

  any of them from or to a URI
    bpe-spark export --model s3a://bucket/models/en32k --format tiktoken --out s3a://bucket/en32k.tiktoken

URIs are read and written through pyarrow: S3 credentials from its default chain (AWS_* variables,
~/.aws), a custom endpoint from $AWS_ENDPOINT_URL.
"""


def examples(tiktoken_lines: str = "") -> str:
    """The help's examples; ``tiktoken_lines``: the Python that builds tiktoken's Encoding of the
    tiktoken example (:func:`bpe_spark.models.tiktoken_file.encoding_line`), set with the options."""
    shown = "  then, in Python:\n" + textwrap.indent(tiktoken_lines, "    ") + "\n" if tiktoken_lines else ""
    return _EXAMPLES.format(tiktoken_lines=shown)


EXAMPLES = examples()  # add_arguments puts in the tiktoken lines (it imports the formats anyway)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from bpe_spark.models.load import EXPORT_FORMATS
    from bpe_spark.models.tiktoken_file import encoding_line

    parser.epilog = examples(encoding_line("en32k.tiktoken"))

    parser.add_argument("--model", required=True, metavar="PATH",
                        help="the model to export (any format bpe-spark loads; a path or a URI)")
    parser.add_argument("--format", required=True, choices=EXPORT_FORMATS, dest="export_format",
                        help="gpt2: a directory with vocab.json + merges.txt; tiktoken: a .tiktoken file; "
                             "tokenizer.json: a file (or directory); subword-nmt: a codes file")
    parser.add_argument("--out", required=True, metavar="PATH", help="where to write the export (a path or a URI)")
    add_pattern_for_tiktoken(parser)
    add_model_folder_options(parser)
    add_overwrite(parser)


def run(args: argparse.Namespace) -> int:
    from bpe_spark.errors import option_name
    from bpe_spark.models.load import export_spec
    from bpe_spark.models.huggingface.transformers_config import set_transformers_config
    from bpe_spark.models.remote import prepare_export

    given = {name: getattr(args, name) for name in FOLDER_OPTIONS if getattr(args, name) is not None}
    if given and export_spec(args.export_format).folder is None:
        named = ", ".join(option_name(name) for name in given)
        raise ConfigError(f"{named} apply to --format tokenizer.json and gpt2, not {args.export_format}")
    target = prepare_export(args.out, args.export_format, overwrite=args.overwrite,
                            protected={"model": [args.model]}, option="--out")
    tok = load_model(args.model, args.pattern)
    if given:
        set_transformers_config(tok, **given)  # what the export's config files then say
    for path in target.write(tok):
        print(path)
    return 0
