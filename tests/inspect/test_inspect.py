"""`bpe-spark inspect` through ``main(argv)`` (issue 16, item 4): the vocabulary by kind, token
lengths, the longest tokens, the first and last merges with their counts, the rounds, a text
shown as its tokens (brackets, or colours with --color always) and --file's bytes per token, on a
model directory, a char-scheme model, GPT-2 files and a .tiktoken file."""

from __future__ import annotations

import gzip
import io
import itertools
import json
import re

import pytest
from tests.conftest import PEERS, ROOT

from bpe_spark import Tokenizer, TrainerConfig, train
from bpe_spark.cli import main
from bpe_spark.inspect.summary import describe_text, length_bars
from bpe_spark.inspect.token_display import readable, show_tokens, use_colour

SAMPLE = ROOT / "data" / "sample" / "tiny_shakespeare.txt.gz"
TEXT = "To be, or not to be: 中文\n"


@pytest.fixture(scope="module")
def lines() -> list[str]:
    return gzip.decompress(SAMPLE.read_bytes()).decode("utf-8").splitlines(keepends=True)[:3000]


@pytest.fixture(scope="module")
def model(lines, tmp_path_factory):
    tok = train(lines, TrainerConfig(vocab_size=500, special_tokens=("<|endoftext|>",)))
    path = tmp_path_factory.mktemp("inspect") / "model"
    tok.save(path)
    return path


def inspect(capsys, *argv: str) -> str:
    code = main(["inspect", *argv])
    out, err = capsys.readouterr()
    assert code == 0, err
    return out


def test_a_model_directory(model, capsys):
    tok = Tokenizer.load(model)
    summary = json.loads(inspect(capsys, str(model), "--json", "--merges", "3"))
    assert summary["kinds"] == {"byte": 256, "merge": 243, "special": 1}
    assert sum(summary["kinds"].values()) == summary["vocab_size"] == tok.vocab_size
    lengths = {len(value) for value in tok.ordinary_vocab.values()}
    assert sum(summary["token_lengths"].values()) == len(tok.ordinary_vocab)
    assert max(map(int, summary["token_lengths"])) == max(lengths)
    token_id, token, size = summary["longest_tokens"][0]
    assert size == max(lengths) and tok.id_to_token(token_id).decode() == token and len(token.encode()) == size
    counts = tok.metadata["merge_counts"]
    assert summary["first_merges"][0][2] == counts[0] and summary["last_merges"][-1][2] == counts[-1]
    assert [m[:2] for m in summary["last_merges"]] == [[a.decode(), b.decode()] for a, b in tok.merges[-3:]]
    assert summary["stopped"] == {"rank": 242, "count": counts[-1],
                                  "reason": "the vocabulary reached its target size (500)"}

    shown = inspect(capsys, str(model), "--merges", "3")
    assert "vocabulary by kind: 256 byte + 243 merge + 1 special = 500" in shown
    assert "first merges (3 of 243):" in shown and "last merges (3 of 243):" in shown
    assert f"training stopped at count {counts[-1]:,} (merge 242)" in shown
    longest = tok.id_to_token(token_id)
    assert re.search(rf"^ +{token_id} +{len(longest)} bytes  {re.escape(readable(longest))}$", shown, re.MULTILINE)
    assert f"  {max(lengths)}  " in shown and "\x1b[" not in shown


def test_text_as_tokens_in_brackets_and_colours(model, capsys):
    tok = Tokenizer.load(model)
    shown = inspect(capsys, str(model), "--text", TEXT, "--color", "never").splitlines()
    ids = tok.encode_ordinary(TEXT)
    assert shown[-2].startswith(f"text as {len(ids)} tokens (each token in [ ]; ␣ space, ↵ line break")
    pieces = re.findall(r"\[([^\]]*)\]", shown[-1])
    assert "".join(f"[{p}]" for p in pieces) == shown[-1] and len(pieces) == len(ids)
    # 中 is no token of an English model: its bytes, each a token, shown as <0xNN>
    assert pieces[-7:] == ["<0xE4>", "<0xB8>", "<0xAD>", "<0xE6>", "<0x96>", "<0x87>", "↵"]
    as_text = "".join(pieces).replace("␣", " ").replace("↵", "\n")
    assert re.sub("(<0x..>)+", "?", as_text) == TEXT.replace("中文", "?")

    coloured = inspect(capsys, str(model), "--text", TEXT, "--color", "always").splitlines()
    assert "tokens in alternating colours" in coloured[-2]
    cells = re.findall(r"\x1b\[30;48;5;(\d+)m(.*?)\x1b\[0m", coloured[-1])
    assert [text for _, text in cells] == pieces
    assert all(a != b for (a, _), (b, _) in itertools.pairwise(cells))  # neighbours differ


def test_a_sample_file(model, tmp_path, capsys):
    tok = Tokenizer.load(model)
    text = "First Citizen:\nBefore we proceed any further, hear me speak.\n" * 50
    sample = tmp_path / "sample.txt.gz"
    sample.write_bytes(gzip.compress(text.encode()))
    shown = inspect(capsys, str(model), "--file", str(sample)).splitlines()
    tokens = len(tok.encode_ordinary(text))
    assert shown[-3] == (f"sample {sample}: {len(text.encode()):,} bytes, {len(text):,} characters, "
                         f"{tokens:,} tokens, {len(text.encode()) / tokens:.3f} bytes per token")
    assert shown[-2].startswith("first line as ")
    assert shown[-1] == show_tokens([tok.id_to_token(i) for i in tok.encode_ordinary("First Citizen:\n")])
    summary = json.loads(inspect(capsys, str(model), "--file", str(sample), "--json"))
    assert summary["sample"]["tokens"] == tokens and summary["text"]["text"] == "First Citizen:\n"


def test_bad_input_is_one_line(model, tmp_path, capsys):
    assert main(["inspect", str(model), "--file", str(tmp_path / "absent.txt")]) == 2
    assert capsys.readouterr().err == f"bpe-spark inspect: error: --file {tmp_path / 'absent.txt'}: no such file; check the path\n"
    assert main(["inspect", str(model), "--merges", "-1"]) == 2
    assert "--merges must be 0 or more" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["inspect", str(model), "--text", "a", "--file", "b"])
    assert "not allowed with argument" in capsys.readouterr().err


def test_a_char_scheme_model_with_rounds(lines, capsys):
    tok = train(lines[:1500], TrainerConfig(vocab_size=200, scheme="char", min_frequency=2))
    tok.metadata["rounds"] = [{"kind": "speculative", "speculated": 4096, "shipped": 2000, "round": 1,
                               "merges": 100, "seconds": 1.5},
                              {"kind": "driver", "collected": 9000, "round": 2, "merges": 40, "seconds": 0.25}]
    shown = describe_text(tok, merges=2).splitlines()
    kinds = tok.vocab_size - len(tok.merge_ids)
    assert f"vocabulary by kind: {kinds} char + {len(tok.merge_ids)} merge = {tok.vocab_size}" in shown
    at = shown.index("rounds: 2")
    assert [line.split() for line in shown[at + 1:at + 4]] == [
        ["round", "kind", "merges", "so", "far", "speculated", "shipped", "seconds"],
        ["1", "speculative", "100", "100", "4,096", "2,000", "1.50"],
        ["2", "driver", "40", "140", "0.25"],
    ]
    assert any(line.endswith("</w>") for line in shown if "bytes  " in line)  # the longest, with the marker


def test_gpt2_files_and_a_tiktoken_file(model, tmp_path, capsys):
    gpt2 = inspect(capsys, str(PEERS / "cs336" / "gpt2_vocab.json"), "--merges", "2", "--text", "hello world")
    assert "vocabulary by kind: 256 byte + 50,000 merge + 1 special = 50,257" in gpt2
    assert "merge counts: not in this model" in gpt2 and "training stopped" not in gpt2
    assert "   35496  128 bytes  ÃÂÃÂ" in gpt2  # GPT-2's longest token, really 128 bytes
    assert gpt2.splitlines()[-1] == "[hello][␣world]"

    main(["export", "--model", str(model), "--format", "tiktoken", "--out", str(tmp_path / "m.tiktoken")])
    capsys.readouterr()
    shown = json.loads(inspect(capsys, str(tmp_path / "m.tiktoken"), "--json"))
    direct = json.loads(inspect(capsys, str(model), "--json"))
    for key in ("kinds", "token_lengths", "longest_tokens"):
        assert shown[key] == direct[key], key
    assert shown["stopped"] is None and shown["first_merges"][0][2] is None


class _Terminal:
    @staticmethod
    def isatty() -> bool:
        return True


def test_colour_only_on_a_terminal_without_no_color(monkeypatch):
    monkeypatch.delenv("NO_COLOR", raising=False)
    monkeypatch.setenv("TERM", "xterm")
    assert use_colour("auto", _Terminal()) and not use_colour("auto", io.StringIO())
    assert use_colour("always", None) and not use_colour("never", _Terminal())
    monkeypatch.setenv("NO_COLOR", "1")
    assert not use_colour("auto", _Terminal())


def test_display_rules():
    assert readable(b"\xe2\x80") == "<0xE2><0x80>" and readable(b"\x80a") == "<0x80>a"
    assert readable("x\x1b[31m") == "x<0x1B>[31m"  # no raw escape reaches the terminal
    assert readable(b" \n\t\r") == "␣↵⇥␍"
    assert show_tokens([b"ab", "c"]) == "[ab][c]"
    assert length_bars({1: 2, 3: 4}, width=4) == ["  1  ██    2", "  2        0", "  3  ████  4"]


def test_an_extended_model_shows_its_base_and_new_tokens(tmp_path, capsys):
    """Issue 37, deliver 4: inspect lists the new tokens with their counts, names the base and
    compares bytes per token of a held-out sample, base against extended; the report too."""
    from tests.hf_cases import corpus_lines

    from bpe_spark.inspect.extension import base_of, new_tokens

    base = train(corpus_lines("en_books", 300), TrainerConfig(vocab_size=600, special_tokens=("<|endoftext|>",)))
    base.save(tmp_path / "base")
    base = Tokenizer.load(tmp_path / "base")  # a base with a file
    lines = corpus_lines("zh_classics", 400)
    ext = train(lines[:300], TrainerConfig(vocab_size=base.vocab_size + 30), base=base)
    assert base_of(ext).merge_ids == base.merge_ids and base_of(ext).vocab == base.vocab
    rows = new_tokens(ext)
    assert [row[0] for row in rows] == list(range(600, 630)) and all(row[2] > 0 for row in rows)
    ext.save(tmp_path / "ext")
    sample = tmp_path / "held_out.txt"
    sample.write_text("".join(lines[300:]), encoding="utf-8")
    assert main(["inspect", str(tmp_path / "ext"), "--file", str(sample), "--json"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["extension"]["inherited_merges"] == 343 and summary["extension"]["new_merges"] == 30
    assert summary["extension"]["base"]["fingerprint"] == base.fingerprint
    assert summary["extension"]["first_new_tokens"][1] == [rows[1][0], rows[1][1], rows[1][2]]
    figures = summary["sample"]
    assert figures["bytes_per_token"] > figures["base_bytes_per_token"] > 1.0
    assert main(["inspect", str(tmp_path / "ext"), "--file", str(sample)]) == 0
    out = capsys.readouterr().out
    assert "343 merges and 600 tokens inherited; 30 new tokens: 30 merges" in out
    assert re.search(r"bytes per token \(the base model: \d\.\d{3}\)", out)
    assert main(["report", str(tmp_path / "ext"), "--sample", str(sample), "--out", str(tmp_path / "r.html")]) == 0
    page = (tmp_path / "r.html").read_text(encoding="utf-8")
    assert "extended from" in page and re.search(r"\d\.\d{3} extended, \d\.\d{3} the base", page)
