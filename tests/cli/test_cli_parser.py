"""The user's side of the parser, without Spark (issue 16, items 2 and 3): no abbreviated
options; an unknown option, choice or command is a one-line error naming the nearest one under
the command it was given to, in one line with that command's ``--help`` and no usage block
(issue 43, item 11); ``--version``; the columns of local jsonl and parquet
input are checked before Spark starts; messages name options in the words of the interface in
use (``--overwrite`` on the command line, ``overwrite=True`` in Python)."""

from __future__ import annotations

import json
import subprocess
import sys
import time

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from bpe_spark import TrainerConfig, train
from bpe_spark.cli import build_parser, main
from bpe_spark.errors import ConfigError, OutputExistsError, interface, option
from bpe_spark.models.huggingface.transformers_config import set_transformers_config
from bpe_spark.datasets.megatron import token_dtype


def _fails(argv, capsys) -> str:
    """The stderr of a parse that exits with status 2."""
    with pytest.raises(SystemExit) as exited:
        main(argv)
    assert exited.value.code == 2
    return capsys.readouterr().err


def test_abbreviations_are_refused_and_the_nearest_option_named(capsys):
    err = _fails(["train", "--vocab-siz", "32000", "--input", "x.txt", "--out", "m"], capsys)
    assert err == (  # one line: the command's own --help, not the top-level one; no usage block
        "bpe-spark train: error: unknown option --vocab-siz; did you mean --vocab-size? (see bpe-spark train --help)\n"
    )
    err = _fails(["encode", "--modle=m", "--input", "x", "--out", "o"], capsys)  # before "--model is required"
    assert "bpe-spark encode: error: unknown option --modle; did you mean --model?" in err
    assert "unknown option --zzzz (see bpe-spark decode --help)" in _fails(["decode", "--zzzz"], capsys)
    assert "unexpected argument 'extra'" in _fails(["decode", "--model", "m", "--ids", "1", "extra"], capsys)
    # what argparse takes for a value stays one: a negative number, text with a space, --option=value
    assert build_parser().parse_args(["decode", "--model", "m", "--ids", "-1 2"]).ids == "-1 2"
    assert build_parser().parse_args(["decode", "--model=m", "--ids", "-1", "--limit=-2"]).limit == -2


def test_a_misspelt_command_or_choice_names_the_nearest(capsys):
    err = _fails(["trian", "--input", "x"], capsys)
    assert len(err.splitlines()) == 1 and err.endswith("(see bpe-spark --help)\n")
    assert "unknown command 'trian'; did you mean train? (choose from train, count, encode" in err
    err = _fails(["train", "--scheme", "bytes"], capsys)
    assert len(err.splitlines()) == 1 and err.endswith("(see bpe-spark train --help)\n")
    assert "argument --scheme: unknown choice 'bytes'; did you mean byte? (choose from byte, char)" in err
    assert "unknown option --verison; did you mean --version?" in _fails(["--verison"], capsys)
    assert _fails(["encode", "--model"], capsys) == (
        "bpe-spark encode: error: argument --model: expected one argument (see bpe-spark encode --help)\n")


def test_version_names_every_part_without_starting_a_jvm():
    from bpe_spark._version import __version__

    started = time.perf_counter()
    result = subprocess.run([sys.executable, "-m", "bpe_spark.cli", "--version"], capture_output=True, text=True,
                            check=False, timeout=60)
    assert result.returncode == 0, result.stderr
    line = result.stdout.strip()
    assert line.startswith(f"bpe-spark {__version__} (Python {sys.version.split()[0]}, pyspark ")
    assert ", Java " in line and "unknown" not in line and len(result.stdout.splitlines()) == 1
    assert time.perf_counter() - started < 10  # no JVM: a Spark start alone takes longer here


def test_columns_of_local_files_are_checked_before_spark(tmp_path, no_spark, capsys):
    (tmp_path / "docs.jsonl").write_text(json.dumps({"body": "a b", "url": "u"}) + "\n")
    pq.write_table(pa.table({"text": [1, 2]}), tmp_path / "numbers.parquet")
    (tmp_path / "dir").mkdir()
    pq.write_table(pa.table({"body": ["a b"]}), tmp_path / "dir" / "part-0.parquet")
    model = tmp_path / "model"
    train(["a b"], TrainerConfig(vocab_size=257)).save(model)
    out = str(tmp_path / "out")
    cases = [
        (["train", "--input", str(tmp_path / "docs.jsonl"), "--input-format", "jsonl", "--vocab-size", "300",
          "--out", out],
         (f"column 'text' not found in the first 200 records of {tmp_path}/docs.jsonl; its columns are "
          "['body', 'url']; name the text column with --text-column")),
        (["count", "--input", str(tmp_path / "numbers.parquet"), "--input-format", "parquet", "--out", out],
         f"column 'text' of {tmp_path}/numbers.parquet (Parquet) has type int64, not string"),
        (["encode", "--model", str(model), "--input", str(tmp_path / "dir"), "--input-format", "parquet",
          "--text-column", "body", "--id-column", "id", "--out", out],
         (f"column 'id' not found in {tmp_path}/dir/part-0.parquet; its columns are ['body']; name the text "
          "column with --text-column and id columns with --id-column")),
    ]
    for argv, message in cases:
        started = time.perf_counter()
        assert main(argv) == 2
        assert capsys.readouterr().err == f"bpe-spark {argv[0]}: error: {message}\n"
        assert time.perf_counter() - started < 1.0, argv[0]
    # the right columns pass the check (and get as far as Spark)
    assert main(["encode", "--model", str(model), "--input", str(tmp_path / "docs.jsonl"), "--input-format", "jsonl",
                 "--text-column", "body", "--id-column", "url", "--out", out]) == 1
    assert "Spark started before the error" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


def test_messages_name_options_in_the_words_of_the_interface(tmp_path, capsys):
    assert option("on_bad_input", "skip") == "on_bad_input='skip'"
    with interface("cli"):
        assert option("on_bad_input", "skip") == "--on-bad-input skip" and option("text_col") == "--text-column"
    assert option("text_col") == "text_col="  # the block ended: the Python API's words again
    tok = train(["a b"], TrainerConfig(vocab_size=257))
    tok.save(tmp_path / "model")
    with pytest.raises(OutputExistsError, match=r"already exists; pass overwrite=True to replace it"):
        tok.save(tmp_path / "model")
    with pytest.raises(ConfigError, match=r"use dtype='uint32' or dtype='auto'"):
        token_dtype(70_000, "uint16")
    (tmp_path / "gz").write_text("")
    argv = ["train", "--input", str(tmp_path / "gz"), "--vocab-size", "300", "--out", str(tmp_path / "model")]
    assert main(argv) == 2
    assert "model already exists; pass --overwrite to replace it" in capsys.readouterr().err
    with pytest.raises(ConfigError, match=r"^eos_token '<e>' is neither a special token of the model"):
        set_transformers_config(tok, eos_token="<e>")
    assert main(["export", "--model", str(tmp_path / "model"), "--format", "tokenizer.json", "--out",
                 str(tmp_path / "t"), "--eos-token", "<e>"]) == 2
    assert capsys.readouterr().err.startswith("bpe-spark export: error: --eos-token '<e>' is neither a special token")
