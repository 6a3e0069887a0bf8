"""``bpe-spark train --extend MODEL`` (continued training on Spark from the command line) gives the
core's ``train(texts, cfg, base=)``; the model directory records its base; ``inspect`` and
``encode`` read it; a checkpoint is resumed only with its base; the options the base decides,
and a wrong ``--vocab-size`` / ``--add-merges``, fail in one line before Spark starts."""

from __future__ import annotations

import json

import pyarrow.parquet as pq
import pytest
from tests.conftest import PEERS, corpus_lines

from bpe_spark import TrainerConfig, Tokenizer, train
from bpe_spark.cli import main

pytestmark = pytest.mark.spark
EOT = "<|endoftext|>"
GPT2 = PEERS / "cs336" / "gpt2_vocab.json"


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    lines = corpus_lines("en_books", 25_000)
    path = tmp_path_factory.mktemp("extend-corpus") / "corpus.txt"
    path.write_text("".join(lines), encoding="utf-8")
    return path, lines


@pytest.fixture(scope="module")
def base_dir(tmp_path_factory):
    """A model directory of ours: the base to extend."""
    path = tmp_path_factory.mktemp("extend-base") / "base-model"
    train(corpus_lines("tiny_shakespeare", 40_000), TrainerConfig(vocab_size=400, special_tokens=(EOT,))).save(path)
    return path


def one_line_error(capsys) -> str:
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0, err
    return err


def test_extend_add_merges_round_trip_then_inspect_and_encode(spark, corpus, base_dir, tmp_path, capsys):
    path, lines = corpus
    base = Tokenizer.load(base_dir)
    expected = train(lines, TrainerConfig(vocab_size=base.vocab_size + 50, max_merges=50), base=base)
    out = tmp_path / "extended"
    assert main(["train", "--extend", str(base_dir), "--input", str(path), "--add-merges", "50",
                 "--out", str(out), "--progress", "off"]) == 0
    printed = capsys.readouterr().out
    assert f"base: {base_dir} (" in printed and "50 merges added" in printed
    tok = Tokenizer.load(out)
    assert tok.fingerprint == expected.fingerprint and tok.merges == expected.merges
    assert len(tok.merge_ids) == len(base.merge_ids) + 50 and tok.special_tokens == base.special_tokens
    recorded = json.loads((out / "bpe_spark.json").read_text())["metadata"]
    assert recorded["base"] == {**expected.metadata["base"], "file": str(base_dir)}  # the path as given
    assert (recorded["base"]["fingerprint"], recorded["base"]["merges"]) == (base.fingerprint, len(base.merge_ids))
    assert recorded["source"]["extend"] == str(base_dir)

    assert main(["inspect", str(out), "--json", "--text", "the quick brown fox"]) == 0
    summary = json.loads(capsys.readouterr().out)
    extension = summary["extension"]
    assert summary["merges"] == len(base.merge_ids) + 50 and extension["new_merges"] == 50
    assert extension["base"]["fingerprint"] == base.fingerprint and extension["base"]["file"] == str(base_dir)

    encoded = tmp_path / "encoded"
    assert main(["encode", "--model", str(out), "--input", str(path), "--out", str(encoded), "--progress", "off"]) == 0
    ids = pq.read_table(encoded).sort_by("doc_id").column("input_ids").to_pylist()
    assert ids == [tok.encode(line, disallowed_special=()) for line in lines]


def test_extend_gpt2_files_with_a_checkpoint_resumed_only_with_the_same_base(spark, corpus, base_dir, tmp_path,
                                                                             capsys):
    path, lines = corpus
    gpt2 = Tokenizer.load(GPT2)
    expected = train(lines, TrainerConfig(vocab_size=gpt2.vocab_size + 30), base=gpt2)
    checkpoint = tmp_path / "ckpt"
    common = ["train", "--input", str(path), "--vocab-size", str(gpt2.vocab_size + 30),
              "--checkpoint-dir", str(checkpoint), "--progress", "off"]
    assert main([*common, "--extend", str(GPT2), "--out", str(tmp_path / "one")]) == 0
    assert Tokenizer.load(tmp_path / "one").fingerprint == expected.fingerprint
    # the base's own format beside tokenizer.json: GPT-2 files that load to the same model
    assert Tokenizer.load(tmp_path / "one" / "vocab.json").merge_ids == expected.merge_ids
    recorded = json.loads((checkpoint / "training.json").read_text())
    assert recorded["start"] == {"kind": "extend", "fingerprint": gpt2.fingerprint}
    capsys.readouterr()
    # resuming with another base is refused in one line naming both
    assert main([*common, "--extend", str(base_dir), "--resume", "--out", str(tmp_path / "two")]) != 0
    err = one_line_error(capsys)
    assert f"extending the model {gpt2.fingerprint}" in err and "resume with the same base model" in err
    # with the same base, the finished run resumes to the same model
    assert main([*common, "--extend", str(GPT2), "--resume", "--out", str(tmp_path / "three")]) == 0
    assert Tokenizer.load(tmp_path / "three").fingerprint == expected.fingerprint


@pytest.mark.parametrize(("extra", "said"), [
    (["--add-merges", "5", "--scheme", "char", "--pattern", "words"],
     "--scheme does not apply with --extend: the model decides"),  # --pattern P: the new text's
    (["--add-merges", "5", "--special-token", EOT], "--special-token does not apply with --extend"),
    (["--add-merges", "5", "--lowercase", "--normalization", "NFC"], "--lowercase, --normalization do not apply"),
    ([], "--extend needs exactly one of --vocab-size N (the new total vocabulary) and --add-merges N"),
    (["--vocab-size", "600", "--add-merges", "5"], "--extend needs exactly one of --vocab-size N"),
    (["--vocab-size", "300"], "--vocab-size 300 is below the base model's vocabulary (400)"),
    (["--add-merges", "0"], "--add-merges must be at least 1"),
    (["--add-merges", "5", "--max-merges", "3"], "leave out --max-merges"),
])
def test_extend_options_fail_in_one_line_before_spark(no_spark, corpus, base_dir, tmp_path, capsys, extra, said):
    path, _ = corpus
    argv = ["train", "--extend", str(base_dir), "--input", str(path), "--out", str(tmp_path / "m"), *extra]
    assert main(argv) == 2
    assert said in one_line_error(capsys)


def test_extend_like_and_add_merges_misuses_fail_in_one_line(no_spark, corpus, base_dir, tmp_path, capsys):
    path, _ = corpus
    common = ["train", "--input", str(path), "--out", str(tmp_path / "m")]
    assert main([*common, "--vocab-size", "500", "--add-merges", "5"]) == 2
    assert "--add-merges N applies to --extend MODEL" in one_line_error(capsys)
    assert main([*common, "--extend", str(tmp_path / "no-such-model"), "--add-merges", "5"]) == 2
    assert "no-such-model" in one_line_error(capsys)
    with pytest.raises(SystemExit) as exited:  # the parser's own one-line error
        main([*common, "--extend", str(base_dir), "--like", str(base_dir), "--vocab-size", "500"])
    assert exited.value.code == 2 and "argument --like: not allowed with argument --extend" in one_line_error(capsys)
    assert main([*common, "--like", str(base_dir), "--add-merges", "5"]) == 2
    assert "--add-merges applies to --extend" in one_line_error(capsys)
    assert main([*common, "--like", str(base_dir)]) == 2
    assert "--vocab-size N is required" in one_line_error(capsys)
    assert main([*common, "--like", str(base_dir), "--vocab-size", "500", "--pattern", "words"]) == 2
    assert "--pattern does not apply with --like" in one_line_error(capsys)


def test_like_trains_a_new_vocabulary_with_the_models_pipeline(spark, corpus, tmp_path, capsys):
    from tests.spark.training.test_extend_spark import pipeline_base

    from bpe_spark.training.like import train_like

    path, lines = corpus
    base = pipeline_base(tmp_path, None)
    expected = train_like(lines, base, TrainerConfig(vocab_size=400))
    out = tmp_path / "like"
    given = str(tmp_path / "tokenizer.json")
    assert main(["train", "--like", given, "--input", str(path), "--vocab-size", "400", "--out", str(out),
                 "--progress", "off"]) == 0
    tok = Tokenizer.load(out)
    assert tok.fingerprint == expected.fingerprint and tok.merges == expected.merges
    recorded = json.loads((out / "bpe_spark.json").read_text())["metadata"]
    assert recorded["like"]["file"] == given and recorded["like"]["fingerprint"] == base.fingerprint


def test_help_shows_extend_examples(capsys):
    with pytest.raises(SystemExit):
        main(["train", "--help"])
    text = capsys.readouterr().out
    assert "bpe-spark train --extend " in text and "--add-merges 500" in text and "--like " in text
