"""Clear options and custom patterns on Spark (issue 12, items 5 and 6): --eos-id / --bos-id and
eos_id= / bos_id= put the id they name; numeric --eos text is refused; a custom pattern that
backtracks fails the encode with the one-line error naming the text; custom patterns never run
on Java's regex, which has no time limit."""

from __future__ import annotations

import json

import pyarrow.parquet as pq
import pytest
from tests.conftest import PEERS

from bpe_spark import ConfigError, Tokenizer, TrainerConfig, train
from bpe_spark.cli import main
from bpe_spark.errors import PatternTimeoutError

pytestmark = pytest.mark.spark

EOT = "<|endoftext|>"
GPT2 = PEERS / "cs336" / "gpt2_vocab.json"


def test_eos_id_and_bos_text_on_the_command_line(spark, tmp_path, capsys):
    source = tmp_path / "a.txt"
    source.write_text("hello world\n100 apples\n")
    out = tmp_path / "ids"
    assert main(["encode", "--model", str(GPT2), "--input", str(source), "--out", str(out),
                 "--eos-id", "100", "--bos", EOT]) == 0
    tok = Tokenizer.load(GPT2)
    got = pq.read_table(out).column("input_ids").to_pylist()
    assert got == [[50256, *tok.encode(line), 100] for line in ("hello world\n", "100 apples\n")]
    manifest = json.loads((out / "_manifest.json").read_text())
    assert (manifest["eos_id"], manifest["bos_id"]) == (100, 50256)
    capsys.readouterr()
    assert main(["encode", "--model", str(GPT2), "--input", str(source), "--out", str(tmp_path / "x"),
                 "--eos", "100"]) == 2
    assert "use --eos-id 100" in capsys.readouterr().err
    assert not (tmp_path / "x").exists()


def test_spark_api_takes_ids_by_keyword(spark):
    from bpe_spark.spark import encode

    tok = Tokenizer.load(GPT2)
    df = spark.createDataFrame([("a b",)], "text string")
    row = encode(df, tok, eos_id=7, bos="a").collect()[0]
    assert list(row.input_ids) == [tok.token_to_id(b"a"), *tok.encode("a b"), 7]
    with pytest.raises(ConfigError, match="for id 7 use eos_id=7"):
        encode(df, tok, eos="7")
    with pytest.raises(ConfigError, match="eos takes token text"):
        encode(df, tok, eos=50256)


def test_a_backtracking_custom_pattern_fails_the_encode_naming_the_text(spark, tmp_path):
    from bpe_spark.spark import encode_dataset

    tok = train(["aaa bbb"], TrainerConfig(vocab_size=258, pattern=r"\S+|\s+"))
    data = tok.to_dict()
    data.update(pattern=r"(?:a|a)+$", config=None)
    evil = Tokenizer.from_dict(data)
    df = spark.createDataFrame([("ab",), ("a" * 25 + "b",)], "text string")
    with pytest.raises(PatternTimeoutError, match=r"took over 1 s on a text of 26 characters starting 'aaaa"):
        encode_dataset(df, evil, str(tmp_path / "out"))
    assert not (tmp_path / "out").exists()


def test_custom_patterns_are_refused_on_the_jvm_engine():
    from bpe_spark.spark.training.count import choose_engine

    with pytest.raises(ConfigError, match="Java's regex, which has no time limit"):
        choose_engine(TrainerConfig(pattern=r"\S+|\s+"), "jvm")
    assert choose_engine(TrainerConfig(pattern=r"\S+|\s+")) == "python"
    assert choose_engine(TrainerConfig(pattern="gpt2"), "jvm") == "jvm"
