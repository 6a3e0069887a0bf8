"""OpenAI's ``.tiktoken`` files recognised by content, and the ``.tiktoken`` export's sidecar
(issue 14).

- ``cl100k_base.tiktoken`` (the shared tiktoken cache's copy) and ``r50k_base.tiktoken`` (written
  here from tiktoken's GPT-2 ranks: byte for byte OpenAI's file, the hash proves it) load with no
  ``pattern=`` and give tiktoken's ids, line for line, on 1,000 lines of each shared corpus and
  the edge cases; a copy with CRLF line ends is still recognised.
- A file that is none of them, without ``pattern=`` or a sidecar, fails in one line.
- A trained model's export reloads through its sidecar with the model's ids, and
  ``tiktoken.Encoding`` built from the sidecar (the line the export's help shows) gives them too.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from pathlib import Path

import pytest
import tiktoken
from tests.conftest import PEERS
from tests.hf_cases import CORPUS_NAMES, EDGE_CASES, corpus_lines

from bpe_spark import Tokenizer, TrainerConfig, train
from bpe_spark.errors import ConfigError, ModelFormatError
from bpe_spark.models.tiktoken_file import (
    KNOWN_FILES,
    encoding_line,
    known_file,
    parse_ranks,
    rank_lines,
    sidecar_path,
    write_tiktoken,
)

CL100K_URL = "https://openaipublic.blob.core.windows.net/encodings/cl100k_base.tiktoken"
SPECIAL_TEXT = "x<|endoftext|>y<|fim_prefix|>z<|endofprompt|> <|fim_suffix|>"


def texts() -> list[str]:
    lines = [*EDGE_CASES.values(), SPECIAL_TEXT]
    for name in CORPUS_NAMES:
        lines.extend(corpus_lines(name))
    return lines


def assert_same_ids(tok: Tokenizer, enc: tiktoken.Encoding) -> None:
    for text in texts():
        ids = tok.encode(text, allowed_special="all")
        assert ids == enc.encode(text, allowed_special="all"), text
        assert tok.decode(ids) == enc.decode(ids), text


@pytest.fixture(scope="module")
def files(tmp_path_factory) -> Path:
    """OpenAI's cl100k_base.tiktoken and r50k_base.tiktoken under their own names."""
    folder = tmp_path_factory.mktemp("openai")
    shutil.copyfile(PEERS / "tiktoken_cache" / "cl100k_base.tiktoken", folder / "cl100k_base.tiktoken")
    ranks = tiktoken.get_encoding("gpt2")._mergeable_ranks  # from GPT-2's encoder.json + vocab.bpe
    with open(folder / "r50k_base.tiktoken", "wb") as fh:
        fh.writelines(rank_lines({rank: token for token, rank in ranks.items()}))
    return folder


@pytest.mark.parametrize(("name", "encoding", "pattern"), [
    ("cl100k_base", "cl100k_base", "cl100k"),
    ("r50k_base", "gpt2", "gpt2"),  # tiktoken's gpt2 encoding: r50k's ranks and pattern
])
def test_openai_files_load_without_pattern(files, name, encoding, pattern):
    path = files / f"{name}.tiktoken"
    tok = Tokenizer.load(path)
    enc = tiktoken.get_encoding(encoding)
    assert tok.metadata["source"]["encoding"] == name and tok.pattern == pattern
    assert tok.special_tokens == enc._special_tokens
    assert hashlib.sha256(path.read_bytes()).hexdigest() in KNOWN_FILES
    assert_same_ids(tok, enc)


def test_recognised_by_content_not_bytes(files, tmp_path):
    crlf = tmp_path / "copy.tiktoken"
    lines = (files / "r50k_base.tiktoken").read_bytes().splitlines()
    crlf.write_bytes(b"\r\n".join(reversed(lines)))  # CRLF, reversed, no final line end
    ranks, digest = parse_ranks(crlf)
    assert digest not in KNOWN_FILES
    assert known_file(ranks, digest) == ("r50k_base", "gpt2", {"<|endoftext|>": 50256})


def test_unknown_file_without_pattern_fails_in_one_line(files, tmp_path):
    path = tmp_path / "mine.tiktoken"
    path.write_bytes(b"".join((files / "cl100k_base.tiktoken").read_bytes().splitlines(True)[:1000]))
    with pytest.raises(ModelFormatError) as caught:
        Tokenizer.load(path)
    message = str(caught.value)
    assert "\n" not in message and message.startswith(f"{path}: field 'pattern' is unknown")
    assert "pass pattern=" in message and "mine.tiktoken.json" in message
    digest = hashlib.sha256(path.read_bytes()).hexdigest()
    assert digest[:16] in message
    tok = Tokenizer.load(path, pattern="cl100k")
    assert tok.vocab_size == 1000 and tok.special_tokens == {}


@pytest.fixture(scope="module")
def trained() -> Tokenizer:
    sample = [line for name in CORPUS_NAMES for line in corpus_lines(name, 300)]
    cfg = TrainerConfig(vocab_size=1200, pattern="cl100k", special_tokens=("<|endoftext|>", "<|pad|>"))
    return train(sample, cfg)


def test_export_reloads_through_its_sidecar(tmp_path, trained):
    path = tmp_path / "ours.tiktoken"
    write_tiktoken(trained, path)
    side = json.loads(sidecar_path(path).read_text(encoding="utf-8"))
    assert side == {
        "name": "ours",
        "pat_str": tiktoken.get_encoding("cl100k_base")._pat_str,
        "special_tokens": {"<|endoftext|>": 1200 - 2, "<|pad|>": 1200 - 1},
    }
    back = Tokenizer.load(path)
    assert back.pattern == "cl100k" and back.special_tokens == trained.special_tokens
    assert back.metadata["source"]["sidecar"] == str(sidecar_path(path))
    scope: dict = {}
    cwd = os.getcwd()
    os.chdir(tmp_path)  # the help's line names the files as the export wrote them
    try:
        exec(encoding_line("ours.tiktoken"), scope)  # noqa: S102 (our own help text, run as a user would)
    finally:
        os.chdir(cwd)
    enc = scope["enc"]
    sample = [*EDGE_CASES.values(), *(line for name in CORPUS_NAMES for line in corpus_lines(name, 500))]
    for text in [*sample, "a<|pad|>b<|endoftext|>"]:
        ids = trained.encode(text, allowed_special="all")
        assert back.encode(text, allowed_special="all") == ids, text
        assert enc.encode(text, allowed_special="all") == ids, text


def test_pattern_argument_wins_over_the_sidecar(tmp_path, trained):
    path = tmp_path / "ours.tiktoken"
    write_tiktoken(trained, path)
    tok = Tokenizer.load(path, pattern="gpt2", special_tokens={"<|x|>": 5000})
    assert tok.pattern == "gpt2" and tok.special_tokens == {"<|x|>": 5000}


@pytest.mark.parametrize(("side", "field"), [
    ({"name": "x", "pat_str": "\\S+", "special_tokens": {}, "lowercase": True}, "'lowercase'"),
    ({"name": "x", "pat_str": "(", "special_tokens": {}}, "'pat_str'"),
    ({"name": "x", "pat_str": "\\S+", "special_tokens": {"<s>": -1}}, "'special_tokens[\"<s>\"]'"),
    ({"name": "x", "special_tokens": {}}, "'pat_str'"),
])
def test_malformed_sidecar_fails_in_one_line(tmp_path, trained, side, field):
    path = tmp_path / "ours.tiktoken"
    write_tiktoken(trained, path)
    sidecar_path(path).write_text(json.dumps(side), encoding="utf-8")
    with pytest.raises(ModelFormatError) as caught:
        Tokenizer.load(path)
    message = str(caught.value)
    assert "\n" not in message and f"ours.tiktoken.json: field {field}" in message


def test_export_refuses_what_tiktoken_cannot_run(tmp_path):
    tok = train(["Hello hello"], TrainerConfig(vocab_size=260, lowercase=True))
    with pytest.raises(ConfigError, match="lowercase, which tiktoken cannot apply"):
        write_tiktoken(tok, tmp_path / "low.tiktoken")
