"""Clear options (issue 12, item 6), without Spark: --eos/--bos take token text and --eos-id /
--bos-id an id, numeric text is never silently a token; an input path matching no file and a
special token that cannot match in line mode are one-line errors before Spark starts, in every
command. (What needs Spark is in tests/spark/test_clear_options_cli.py.)"""

from __future__ import annotations

import pytest
from tests.conftest import PEERS

from bpe_spark import ConfigError, Tokenizer, TrainerConfig, train
from bpe_spark.bpe.token_options import resolve_token
from bpe_spark.encoding.options import EncodeOptions
from bpe_spark.cli import main
from bpe_spark.cli.arguments import check_input_paths
from bpe_spark.errors import InputError, interface

EOT = "<|endoftext|>"


@pytest.fixture(scope="module")
def gpt2():
    return Tokenizer.load(PEERS / "cs336" / "gpt2_vocab.json")


def test_numeric_eos_text_is_an_error_naming_the_id_option(gpt2):
    assert gpt2.token_to_id(b"100") == 3064  # the text "100" is a GPT-2 token: it used to be taken
    with pytest.raises(ConfigError) as caught, interface("cli"):
        resolve_token(gpt2, "eos", text="100")
    assert str(caught.value) == (
        "--eos '100' looks like a token id, but --eos takes token text; for id 100 use --eos-id 100 "
        "(the text '100' is the ordinary token 3064: --eos-id 3064)"
    )
    with pytest.raises(ConfigError, match=r"for id 7 use eos_id=7"):
        EncodeOptions(eos=" 7").resolved(gpt2)
    with pytest.raises(ConfigError, match=r"bos takes token text \(a string\), got 100; for a token id use bos_id=100"):
        EncodeOptions(bos=100).resolved(gpt2)


def test_eos_text_and_eos_id_resolve(gpt2):
    assert resolve_token(gpt2, "eos", text=EOT) == 50256
    assert resolve_token(gpt2, "eos", text="hello") == gpt2.token_to_id(b"hello")
    assert resolve_token(gpt2, "eos", token_id=100) == 100
    assert resolve_token(gpt2, "eos") is None
    assert EncodeOptions(eos_id=50256, bos=EOT).resolved(gpt2).eos_id == EncodeOptions(bos=EOT).resolved(gpt2).bos_id == 50256
    with pytest.raises(ConfigError, match=r"--eos-id 50257 is not a token id of the model \(ids 0\.\.50256\)"), \
            interface("cli"):
        resolve_token(gpt2, "eos", token_id=50257)
    with pytest.raises(ConfigError, match="give eos .token text. or eos_id .a token id., not both"):
        EncodeOptions(eos=EOT, eos_id=1).resolved(gpt2)
    with pytest.raises(ConfigError, match="eos_id takes a token id"):
        EncodeOptions(eos_id=True).resolved(gpt2)


def test_unknown_eos_text_points_to_the_id_option_that_exists(gpt2):
    with pytest.raises(ConfigError) as caught, interface("cli"):
        resolve_token(gpt2, "eos", text="<|nope|>")
    assert str(caught.value) == (
        "--eos '<|nope|>' is neither a special token of the model (it has: ['<|endoftext|>']) nor a single "
        "token of its vocabulary; give one of those, or an id with --eos-id N"
    )


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    tok = train(["a b\n", "c d\n"], TrainerConfig(vocab_size=260, special_tokens=(EOT, "<|a\nb|>")))
    path = tmp_path_factory.mktemp("model") / "m"
    tok.save(path)
    return path


def run_cli(capsys, *argv) -> str:
    """The one-line error of a command that must fail."""
    assert main(list(argv)) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1, err
    return err.strip()


def inputs(tmp_path):
    """A missing file, an empty directory (only hidden files in it), a glob matching nothing."""
    empty = tmp_path / "empty"
    (empty / "_sub").mkdir(parents=True)
    (empty / ".hidden").write_text("x\n")
    (empty / "_sub" / "y.txt").write_text("y\n")
    (tmp_path / "a.txt").write_text("a\n")
    return {
        str(tmp_path / "nope.txt"): "no such file or directory",
        str(empty): "the directory holds no input file",
        str(tmp_path / "*.nomatch"): "the glob matches no input file",
        "file:" + str(tmp_path / "gone"): "no such file or directory",
    }


def test_an_input_matching_no_file_is_an_error_before_spark_in_every_command(tmp_path, capsys, no_spark, model_dir):
    out = str(tmp_path / "out")
    for path, message in inputs(tmp_path).items():
        commands = {
            "train": ["train", "--input", path, "--vocab-size", "300", "--out", out],
            "train --counts": ["train", "--counts", path, "--vocab-size", "300", "--out", out],
            "count": ["count", "--input", path, "--out", out],
            "encode": ["encode", "--model", str(model_dir), "--input", str(tmp_path / "a.txt"), path, "--out", out],
            "decode": ["decode", "--model", str(model_dir), "--input", path],
            "inspect": ["inspect", path],
            "export": ["export", "--model", path, "--format", "gpt2", "--out", out],
        }
        for name, argv in commands.items():
            err = run_cli(capsys, *argv)
            assert err.startswith(f"bpe-spark {name.split()[0]}: error: ") and path in err, (name, err)
            if name in ("train", "train --counts", "count", "encode"):
                assert message in err, (name, err)
    check_input_paths([str(tmp_path / "a.txt"), str(tmp_path / "*.txt"), str(tmp_path), "hdfs:///x", "s3a://b/{a,b}"])
    with pytest.raises(InputError, match="--counts"):
        check_input_paths([str(tmp_path / "nope")], "--counts")


def test_a_special_token_with_a_line_break_cannot_match_lines(tmp_path, capsys, no_spark, model_dir):
    (tmp_path / "a.txt").write_text("a\n")
    text, out = str(tmp_path / "a.txt"), str(tmp_path / "out")
    for argv in (
        ["train", "--input", text, "--vocab-size", "300", "--out", out, "--special-token", "<s>\n</s>"],
        ["count", "--input", text, "--out", out, "--special-token", "<s>\n</s>"],
    ):
        err = run_cli(capsys, *argv)
        assert "--special-token '<s>\\n</s>' holds a line break, but each line is a document" in err
        assert "use --document file" in err
    err = run_cli(capsys, "encode", "--model", str(model_dir), "--input", text, "--out", out, "--allow-special")
    assert "--allow-special: the model's special token '<|a\\nb|>' holds a line break" in err
    # a token that ends with the line break matches at a line's end: allowed
    from bpe_spark.cli.arguments import check_special_tokens_match

    check_special_tokens_match(["<eot>\n", "x"], "text", "line", "--special-token")
    check_special_tokens_match(["a\nb"], "text", "file", "--special-token")
    check_special_tokens_match(["a\nb"], "jsonl", "line", "--special-token")


def test_numeric_eos_on_the_command_line_fails_before_spark(tmp_path, capsys, no_spark):
    (tmp_path / "a.txt").write_text("a\n")
    gpt2_vocab = str(PEERS / "cs336" / "gpt2_vocab.json")
    err = run_cli(capsys, "encode", "--model", gpt2_vocab, "--input", str(tmp_path / "a.txt"),
                  "--out", str(tmp_path / "o"), "--eos", "100")
    assert err.endswith("for id 100 use --eos-id 100 (the text '100' is the ordinary token 3064: --eos-id 3064)")
    err = run_cli(capsys, "encode", "--model", gpt2_vocab, "--input", str(tmp_path / "a.txt"),
                  "--out", str(tmp_path / "o"), "--bos-id", "60000")
    assert "--bos-id 60000 is not a token id of the model" in err
    with pytest.raises(SystemExit):  # argparse: --eos and --eos-id exclude each other
        main(["encode", "--model", gpt2_vocab, "--input", "x", "--out", "o", "--eos", EOT, "--eos-id", "1"])
    assert "not allowed with argument" in capsys.readouterr().err
