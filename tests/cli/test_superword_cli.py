"""``bpe-spark train --superword-transition T`` (SuperBPE's two stages on Spark from the command
line) gives the core's model; its ``tokenizer.json`` gives our ids line for line in stock
``tokenizers``, and its ``.tiktoken`` export in tiktoken, on 1,000 lines of each shared corpus;
``--extend MODEL --pattern P`` continues a model with another pattern; bad settings fail in one
line before Spark starts."""

from __future__ import annotations

import json

import pytest
from tests.conftest import CORPUS_NAMES, corpus_lines

from bpe_spark import TrainerConfig, Tokenizer, train
from bpe_spark.cli import main

pytestmark = pytest.mark.spark
EOT = "<|endoftext|>"
CFG = TrainerConfig(vocab_size=256 + 700 + 1, superword_transition=450, special_tokens=(EOT,))


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    lines = corpus_lines("en_books", 60_000)
    path = tmp_path_factory.mktemp("superword-corpus") / "corpus.txt"
    path.write_text("".join(lines), encoding="utf-8")
    return path, lines


@pytest.fixture(scope="module")
def trained(corpus, tmp_path_factory):
    path, lines = corpus
    out = tmp_path_factory.mktemp("superword-model") / "model"
    code = main(["train", "--input", str(path), "--vocab-size", str(CFG.vocab_size), "--superword-transition", "450",
                 "--special-token", EOT, "--out", str(out), "--progress", "off", "--no-report"])
    assert code == 0
    return out, train(lines, CFG)


def held_out(name: str) -> list[str]:
    """1,000 lines of a shared corpus, past what the model was trained on."""
    lines = corpus_lines(name, 400_000)
    return lines[-1000:]


def test_the_command_trains_the_cores_superword_model(trained, capsys):
    out, expected = trained
    tok = Tokenizer.load(out)
    assert tok.fingerprint == expected.fingerprint and tok.merges == expected.merges
    stage2 = dict(tok.metadata["superword"]["stage2"])
    assert stage2.pop("seconds") > 0
    assert stage2 == {k: v for k, v in expected.metadata["superword"]["stage2"].items() if k != "seconds"}
    recorded = json.loads((out / "bpe_spark.json").read_text())
    assert recorded["config"]["superword_transition"] == 450 and recorded["pattern"]["name"] == "superbpe"


def test_the_summary_names_both_stages(corpus, tmp_path, capsys):
    path, _ = corpus
    out = tmp_path / "m"
    assert main(["train", "--input", str(path), "--vocab-size", "600", "--superword-transition", "200",
                 "--out", str(out), "--progress", "off", "--no-report"]) == 0
    printed = capsys.readouterr().out
    assert "superword: stage 1 200 merges (pattern gpt2" in printed and "stage 2 144 merges (pattern superbpe" in printed


@pytest.mark.parametrize("name", CORPUS_NAMES)
def test_tokenizers_and_tiktoken_give_our_ids_line_for_line(trained, name, tmp_path):
    import tiktoken
    import tiktoken.load
    from tokenizers import Tokenizer as HfTokenizer

    out, _ = trained
    tok = Tokenizer.load(out)
    hf = HfTokenizer.from_file(str(out / "tokenizer.json"))
    split = json.loads((out / "tokenizer.json").read_text())["pre_tokenizer"]["pretokenizers"][0]
    assert split["pattern"]["Regex"] == r"\p{N}{1,3}| ?[^\s\p{L}\p{N}]{2,}[\r\n/]*| +(?!\S)"
    tok.save(tmp_path / "tk", exports=("tiktoken",))
    side = json.loads((tmp_path / "tk" / "model.tiktoken.json").read_text())
    enc = tiktoken.Encoding(name="sw", pat_str=side["pat_str"], special_tokens=side["special_tokens"],
                            mergeable_ranks=tiktoken.load.load_tiktoken_bpe(str(tmp_path / "tk" / "model.tiktoken")))
    lines = held_out(name)
    ours = [tok.encode(line) for line in lines]
    assert [hf.encode(line, add_special_tokens=False).ids for line in lines] == ours
    assert [enc.encode_ordinary(line) for line in lines] == ours
    assert Tokenizer.load(out / "tokenizer.json").pattern == "superbpe"


def test_extend_with_another_pattern_continues_the_model(corpus, tmp_path):
    path, lines = corpus
    base = train(corpus_lines("tiny_shakespeare", 40_000), TrainerConfig(vocab_size=400, special_tokens=(EOT,)))
    base.save(tmp_path / "base")
    out = tmp_path / "extended"
    assert main(["train", "--extend", str(tmp_path / "base"), "--pattern", "superbpe", "--input", str(path),
                 "--add-merges", "40", "--out", str(out), "--progress", "off", "--no-report"]) == 0
    expected = train(lines, TrainerConfig(vocab_size=base.vocab_size + 40, max_merges=40), base=base,
                     pattern="superbpe")
    tok = Tokenizer.load(out)
    assert tok.merges == expected.merges and tok.pattern == "superbpe"
    assert tok.metadata["base"]["pattern"] == "gpt2"
    assert any(b" " in (left + right).strip() for left, right in tok.merges[-40:])


@pytest.mark.parametrize(
    ("extra", "said"),
    [
        (["--superword-transition", "100", "--scheme", "char"], "runs on the byte scheme"),
        (["--superword-transition", "400"], "leaves stage 2 no room"),
        (["--superword-transition", "100", "--superword-pattern", "superbp"], "unknown pattern preset 'superbp'"),
    ],
)
def test_bad_superword_settings_fail_in_one_line(corpus, tmp_path, capsys, extra, said):
    path, _ = corpus
    code = main(["train", "--input", str(path), "--vocab-size", "600", *extra, "--out", str(tmp_path / "m")])
    err = capsys.readouterr().err.strip()
    assert code != 0 and err.count("\n") == 0 and said in err, err
