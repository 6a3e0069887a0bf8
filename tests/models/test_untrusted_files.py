"""Untrusted model files (issue 12, item 5): loading runs no code from a file and every reader
bounds what it reads (bpe_spark/bpe/fields.py: file size, entries, ids, token length, regex
length), with an error naming the file and the field, line or row. Limits too large to reach in
a test (file size, 2**24 entries) are lowered with monkeypatch: the check is the same."""

from __future__ import annotations

import base64
import json
import pickle
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from bpe_spark import ModelFormatError, Tokenizer, TrainerConfig, train
from bpe_spark.models.load import export_model
from bpe_spark.bpe import fields
from bpe_spark.models.huggingface.tokenizer_json_write import to_hf_dict

BIG_ID = 2**31  # one past the largest id
LONG = "a" * (fields.MAX_TOKEN_BYTES + 1)


@pytest.fixture(scope="module")
def tok() -> Tokenizer:
    return train(["ab ab abc abd\n"] * 3, TrainerConfig(vocab_size=262, special_tokens=("<|eot|>",)))


def load_fails(path, message: str, **options):
    with pytest.raises(ModelFormatError, match=message) as caught:
        Tokenizer.load(path, **options)
    assert str(path) in str(caught.value) and "\n" not in str(caught.value)


def test_the_limits_are_documented_values():
    assert (fields.MAX_FILE_BYTES, fields.MAX_TOKENS, fields.MAX_TOKEN_ID, fields.MAX_TOKEN_BYTES) == (
        2**30, 2**24, 2**31 - 1, 4096)
    for name in ("MAX_FILE_BYTES", "MAX_TOKENS", "MAX_TOKEN_ID", "MAX_TOKEN_BYTES", "MAX_PATTERN_CHARS"):
        assert name in fields.__doc__


class Payload:
    """Unpickling this would create ``marker``: no reader may ever do it."""

    def __init__(self, marker: Path):
        self.marker = marker

    def __reduce__(self):
        return (Path.touch, (self.marker,))


@pytest.mark.parametrize("name", ["tokenizer.json", "vocab.json", "model.tiktoken", "bpe_spark.json"])
def test_loading_never_unpickles(tmp_path, name):
    marker = tmp_path / "code-ran"
    path = tmp_path / "m" / name
    path.parent.mkdir()
    path.write_bytes(pickle.dumps(Payload(marker)))
    (tmp_path / "m" / "merges.txt").write_text("")
    with pytest.raises(ModelFormatError):
        Tokenizer.load(path)
    assert not marker.exists()


# --- our model directory ------------------------------------------------------------------------
@pytest.fixture()
def model(tmp_path, tok) -> Path:
    tok.save(tmp_path / "m")
    return tmp_path / "m"


def edit_meta(model: Path, edit) -> None:
    path = model / "bpe_spark.json"
    meta = json.loads(path.read_text())
    edit(meta)
    path.write_text(json.dumps(meta))


def test_model_dir_limits(model, monkeypatch):
    vocab = model / "vocab.parquet"
    table = pq.read_table(vocab)
    rows = table.to_pylist()
    rows[-1]["token_bytes"] = LONG.encode()  # the special token's row
    pq.write_table(pa.Table.from_pylist(rows, schema=table.schema), vocab)
    load_fails(model, r"vocab\.parquet: row \d+ \(id \d+\): field 'token_bytes': the token b'aaaa.*'\.\.\. has 4,097 bytes; tokens of at most 4096")
    pq.write_table(table, vocab)

    special = json.loads((model / "bpe_spark.json").read_text())["special_tokens"][0]
    edit_meta(model, lambda m: m["special_tokens"][0].update(id=BIG_ID))
    load_fails(model, r"bpe_spark\.json: field 'special_tokens\[0\]' is .*2147483648.*; expected .*an integer from 0 to 2147483647")
    edit_meta(model, lambda m: m["special_tokens"][0].update(id=special["id"], token=LONG))
    load_fails(model, r"bpe_spark\.json: field 'special_tokens\[0\]\.token': the token 'aaaa")
    edit_meta(model, lambda m: m.update(special_tokens=[special],
                                        pattern={"regex": "a|" * 5001}, config=None))
    load_fails(model, r"bpe_spark\.json: field 'pattern\.regex': the regex has 10,002 characters; at most 10,000")

    edit_meta(model, lambda m: m.update(pattern={"name": "gpt2"}))
    Tokenizer.load(model)  # repaired
    monkeypatch.setattr(fields, "MAX_TOKENS", 100)
    load_fails(model, r"merges\.parquet: 1?\d\d rows; at most 100 are allowed|vocab\.parquet: 26\d rows; at most 100")
    monkeypatch.setattr(fields, "MAX_FILE_BYTES", 1000)
    load_fails(model, r"bytes; bpe-spark reads model files of at most 1,000 bytes")


# --- tokenizer.json -------------------------------------------------------------------------------
def write_json(path: Path, data) -> Path:
    path.write_text(json.dumps(data))
    return path


def test_tokenizer_json_limits(tmp_path, tok, monkeypatch):
    data = to_hf_dict(tok)
    path = tmp_path / "tokenizer.json"
    key = next(k for k, v in data["model"]["vocab"].items() if v == 256)

    bad = json.loads(json.dumps(data))
    bad["model"]["vocab"][key] = BIG_ID
    load_fails(write_json(path, bad), rf"field 'model\.vocab\[{key!r}\]': id 2147483648 is not an integer from 0 to 2147483647")
    bad = json.loads(json.dumps(data))
    bad["model"]["vocab"][LONG] = 300
    load_fails(write_json(path, bad), r"tokenizer\.json: field 'model\.vocab\['aaaa.*: the token b'aaa.*has 4,097 bytes")
    bad = json.loads(json.dumps(data))
    bad["added_tokens"][0]["id"] = BIG_ID
    load_fails(write_json(path, bad), r"field 'added_tokens\[0\]\.id' is 2147483648; expected an integer from 0")
    bad = json.loads(json.dumps(data))
    bad["added_tokens"][0]["content"] = LONG
    load_fails(write_json(path, bad), r"field 'added_tokens\[0\]\.content': the token 'aaa")
    bad = json.loads(json.dumps(data))
    bad["pre_tokenizer"] = {"type": "Sequence", "pretokenizers": [
        {"type": "Split", "pattern": {"Regex": "a|" * 5001}, "behavior": "Removed", "invert": True},
        {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": False}]}
    load_fails(write_json(path, bad), r"field 'pre_tokenizer\.pretokenizers\[0\]\.pattern': the regex has 10,002")
    bad["pre_tokenizer"]["pretokenizers"][0]["pattern"]["Regex"] = "a|" * 4000 + "b"
    bad["pre_tokenizer"]["pretokenizers"][0].update(behavior="Isolated", invert=False)
    load_fails(write_json(path, bad), r"field 'pre_tokenizer' \(as translated for Python's regex\): the regex has")

    path.write_text('{"model": ' + "[" * 100_000 + "]" * 100_000 + "}")
    load_fails(path, r"tokenizer\.json: JSON nested too deeply to be a model file")

    write_json(path, data)
    monkeypatch.setattr(fields, "MAX_TOKENS", 100)
    load_fails(path, r"tokenizer\.json: field 'model\.vocab': 26\d entries; at most 100 are allowed")
    monkeypatch.setattr(fields, "MAX_FILE_BYTES", 1000)
    load_fails(path, r"tokenizer\.json: [\d,]+ bytes; bpe-spark reads model files of at most 1,000 bytes")


# --- GPT-2, .tiktoken, subword-nmt ----------------------------------------------------------------
def test_gpt2_limits(tmp_path, tok, monkeypatch):
    export_model(tok, "gpt2", tmp_path / "g")
    vocab_path = tmp_path / "g" / "vocab.json"
    vocab = json.loads(vocab_path.read_text())
    write_json(vocab_path, {**vocab, "Ġab": BIG_ID})
    load_fails(vocab_path, r"vocab\.json: field 'Ġab': id 2147483648 is not an integer from 0 to 2147483647")
    write_json(vocab_path, {**vocab, LONG: 300})
    load_fails(vocab_path, r"vocab\.json: field 'aaaa+': the token b'a+'\.\.\. has 4,097 bytes")
    write_json(vocab_path, vocab)
    Tokenizer.load(vocab_path)
    (tmp_path / "g" / "merges.txt").write_text("#version: 0.2\n" + "a b\n" * 300)
    monkeypatch.setattr(fields, "MAX_TOKENS", 280)  # the 262 entries of vocab.json pass
    load_fails(tmp_path / "g", r"merges\.txt: 301 lines \(merges\); at most 280 are allowed")
    monkeypatch.setattr(fields, "MAX_TOKENS", 4)
    load_fails(vocab_path, r"vocab\.json: 26\d vocabulary entries; at most 4 are allowed")


def test_tiktoken_limits(tmp_path, tok, monkeypatch):
    path = tmp_path / "m.tiktoken"
    export_model(tok, "tiktoken", path)
    lines = path.read_text().splitlines()
    path.write_text("\n".join([*lines, f"{base64.b64encode(b'zz').decode()} {BIG_ID}"]) + "\n")
    load_fails(path, rf"m\.tiktoken: line {len(lines) + 1}: rank b'2147483648' is not an integer from 0 to 2147483647", pattern="gpt2")
    path.write_text("\n".join([*lines, f"{base64.b64encode(LONG.encode()).decode()} 300"]) + "\n")
    load_fails(path, rf"m\.tiktoken: line {len(lines) + 1}: the token b'aaa.*has 4,097 bytes", pattern="gpt2")
    monkeypatch.setattr(fields, "MAX_TOKENS", 100)
    load_fails(path, r"m\.tiktoken: 2\d\d lines \(tokens\); at most 100 are allowed", pattern="gpt2")


def test_subword_nmt_limits(tmp_path, monkeypatch):
    from bpe_spark.models.subword_nmt import read_codes

    path = tmp_path / "codes"
    path.write_text(f"#version: 0.2\na b\n{LONG} a</w>\n")
    with pytest.raises(ModelFormatError, match=r"codes, line 3: the token 'aaa.*has 4,097 bytes"):
        read_codes(path)
    # a merge of two allowed units that is too long: a a, aa aa, ... doubles up to 8192 bytes
    doubling = [f"{'a' * 2**k} {'a' * 2**k}" for k in range(13)]
    path.write_text("\n".join(["#version: 0.1", *doubling]) + "\n")
    with pytest.raises(ModelFormatError, match=r"codes, line 14: the token 'aaa.*has 8,192 bytes"):
        read_codes(path)
    path.write_text("#version: 0.2\n" + "".join(f"{c} {c}</w>\n" for c in "abcde"))
    assert len(read_codes(path)["merges"]) == 5
    monkeypatch.setattr(fields, "MAX_TOKENS", 4)
    with pytest.raises(ModelFormatError, match=r"codes: 5 merges; at most 4 are allowed"):
        read_codes(path)
    monkeypatch.setattr(fields, "MAX_FILE_BYTES", 10)
    with pytest.raises(ModelFormatError, match=r"codes: \d+ bytes; bpe-spark reads model files of at most 10 bytes"):
        read_codes(path)
