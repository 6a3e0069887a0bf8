"""The ``bpe-spark`` parser without Spark: Spark options appear only on the commands that start
Spark, defaults are TrainerConfig's and the jobs in ``jobs/`` only call the command line (that
``--help`` imports no pyspark is checked in ``test_architecture.py``)."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

from bpe_spark.cli import COMMANDS, build_parser, main
from bpe_spark.cli.train import train_options, trainer_config
from bpe_spark.bpe.config import TrainerConfig

ROOT = Path(__file__).resolve().parents[2]
SPARK_OPTIONS = ("--master", "--conf", "--set")
SPARK_COMMANDS = {"train", "count", "encode", "evaluate"}


def _help(command: str, capsys) -> str:
    with pytest.raises(SystemExit) as exited:
        main([command, "--help"])
    assert exited.value.code == 0
    return capsys.readouterr().out


@pytest.mark.parametrize("command", [module.NAME for module in COMMANDS])
def test_spark_options_only_where_spark_starts(command, capsys):
    text = _help(command, capsys)
    assert "examples:" in text
    for option in SPARK_OPTIONS:
        assert (f"{option} " in text) == (command in SPARK_COMMANDS), (command, option)


def test_every_command_is_listed():
    assert [module.NAME for module in COMMANDS] == ["train", "count", "encode", "decode", "inspect", "export", "report",
                                                 "evaluate"]
    result = subprocess.run([sys.executable, "-m", "bpe_spark.cli", "--help"], capture_output=True, text=True,
                            check=False)
    assert result.returncode == 0, result.stderr
    for module in COMMANDS:
        assert f"    {module.NAME} " in result.stdout


def test_train_defaults_are_the_trainer_configs():
    args = build_parser().parse_args(["train", "--input", "x.txt", "--vocab-size", "300", "--out", "m"])
    options = train_options(args)
    assert trainer_config(options) == TrainerConfig(vocab_size=300)
    assert (options["input_format"], options["document"], options["engine"]) == ("auto", "line", "auto")
    args = build_parser().parse_args(["train", "--input", "x.txt", "--vocab-size", "300", "--out", "m",
                                      "--pattern", "cl100k", "--special-token", "<s>", "--lowercase"])
    expected = TrainerConfig(vocab_size=300, pattern="cl100k", special_tokens=("<s>",), lowercase=True)
    assert trainer_config(train_options(args)) == expected


def test_count_and_encode_defaults():
    count = build_parser().parse_args(["count", "--input", "x.txt", "--out", "c"])
    assert (count.pattern, count.lowercase, count.normalization, count.special_tokens, count.engine) == (
        TrainerConfig().pattern, False, None, [], "auto")
    assert (count.input_format, count.text_column, count.document) == ("auto", "text", "line")
    twice = build_parser().parse_args(["count", "--input", "x", "--out", "c", "--special-token", "a",
                                       "--special-token", "b"])
    assert twice.special_tokens == ["a", "b"]
    assert build_parser().parse_args(["count", "--input", "x", "--out", "c"]).special_tokens == []
    encode = build_parser().parse_args(["encode", "--model", "m", "--input", "x", "--out", "o"])
    assert (encode.output_format, encode.dtype, encode.shard_tokens) == ("parquet", "auto", 100_000_000)
    assert (encode.input_format, encode.text_column, encode.document) == ("auto", "text", "line")


def test_bad_options_fail_before_spark(tmp_path, capsys):
    assert main(["count", "--input", "x.jsonl", "--input-format", "jsonl", "--document", "file",
                 "--out", str(tmp_path / "c")]) == 2
    assert "--document file applies to --input-format text only" in capsys.readouterr().err
    (tmp_path / "x.txt").write_text("a\n")  # an input that exists: the input check comes first
    assert main(["count", "--input", str(tmp_path / "x.txt"), "--out", str(tmp_path / "c"), "--set", "nokey"]) == 2
    assert "--set expects KEY=VALUE" in capsys.readouterr().err
    assert main(["count", "--input", "x.txt", "--out", str(tmp_path / "c"), "--pattern", "("]) == 2
    assert "bpe-spark count: error:" in capsys.readouterr().err


@pytest.mark.parametrize("path", sorted((ROOT / "jobs").glob("*.py")), ids=lambda p: p.name)
def test_jobs_only_call_the_command_line(path):
    tree = ast.parse(path.read_text(encoding="utf-8"))
    imported = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            imported.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            imported.update(f"{node.module}.{alias.name}" for alias in node.names)
    assert imported == {"sys", "bpe_spark.cli.main"}, imported
    assert not [node for node in tree.body if isinstance(node, (ast.FunctionDef, ast.ClassDef))]
