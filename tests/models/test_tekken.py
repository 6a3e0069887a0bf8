"""Mistral's tekken JSON (issue 14): a Tokenizer loaded from a tekken file gives mistral-common's
``Tekkenizer`` ids, line for line, on 1,000 lines of each shared corpus and the edge cases, and
decodes as it does. Two files: Mistral-Nemo's ``tekken_240718.json`` as mistral-common ships it
(version v3: no special-token list, 20 deprecated specials and fillers to 1,000, the 150,000-entry
vocabulary cut to 130,072), and a small file of the newer layout written here (v13: a
``special_tokens`` list, fillers, a vocabulary cut). Malformed files fail in one line naming the
file and the field."""

from __future__ import annotations

import base64
import json
import re
from functools import cache
from pathlib import Path

import mistral_common
import pytest
from tests.hf_cases import CORPUS_NAMES, EDGE_CASES, corpus_lines
from mistral_common.tokens.tokenizers.base import SpecialTokenPolicy
from mistral_common.tokens.tokenizers.tekken import Tekkenizer

from bpe_spark import Tokenizer
from bpe_spark.errors import ModelFormatError
from bpe_spark.models.load import detect_format

NEMO = Path(mistral_common.__file__).parent / "data" / "tekken_240718.json"
SMALL_SPECIALS = ["<unk>", "<s>", "</s>", "[INST]", "[/INST]", "[TOOL_CALLS]", "<pad>", "[THINK]"]


@cache
def nemo_head() -> dict:
    """Nemo's config and first 3,500 vocabulary entries (the file is 15 MB: read once)."""
    nemo = json.loads(NEMO.read_text(encoding="utf-8"))
    return {"config": nemo["config"], "vocab": nemo["vocab"][:3500]}


def small_tekken(path: Path, **changes) -> Path:
    """A v13 tekken file: Nemo's first 3,500 vocabulary entries, cut to 3,000 by
    ``default_vocab_size``; 8 listed special tokens and 8 fillers. ``changes`` replace top-level
    keys (a ``config`` dict is merged into the config)."""
    nemo = nemo_head()
    data = {
        "config": {**nemo["config"], "default_vocab_size": 3016, "default_num_special_tokens": 16,
                   "num_vocab_tokens": 3500, "version": "v13"},
        "vocab": nemo["vocab"],
        "special_tokens": [
            {"rank": rank, "token_str": token, "is_control": True}
            for rank, token in enumerate(SMALL_SPECIALS)
        ],
    }
    data["config"].update(changes.pop("config", {}))
    data.update(changes)
    path.write_text(json.dumps(data), encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def small(tmp_path_factory) -> Path:
    return small_tekken(tmp_path_factory.mktemp("tekken") / "tekken.json")


def assert_parity(tok: Tokenizer, ref: Tekkenizer) -> None:
    texts = [*EDGE_CASES.values()]
    for name in CORPUS_NAMES:
        texts.extend(corpus_lines(name))
    for text in texts:
        ids = tok.encode_ordinary(text)
        assert ids == ref.encode(text, bos=False, eos=False), text
        assert tok.decode(ids) == ref.decode(ids), text


def test_nemo_file_gives_tekkenizer_ids():
    tok = Tokenizer.load(NEMO)
    ref = Tekkenizer.from_file(NEMO)
    assert tok.vocab_size == ref.n_words == 131072
    assert tok.metadata["source"]["vocab_cut"] == {"file": 150000, "kept": 130072}
    assert len(tok.special_tokens) == ref.num_special_tokens == 1000
    for token in ("<unk>", "<s>", "</s>", "[INST]", "[TOOL_CONTENT]", "<SPECIAL_20>", "<SPECIAL_999>"):
        assert tok.special_tokens[token] == ref.get_special_token(token)
    assert tok.merge_rule == "ranks"
    assert_parity(tok, ref)


def test_small_v13_file_gives_tekkenizer_ids(small):
    tok = Tokenizer.load(small)
    ref = Tekkenizer.from_file(small)
    assert tok.vocab_size == ref.n_words == 3016
    assert max(tok.ordinary_vocab) == 3015 and min(tok.ordinary_vocab) == 16
    assert tok.special_tokens == {
        **{token: rank for rank, token in enumerate(SMALL_SPECIALS)},
        **{f"<SPECIAL_{i}>": i for i in range(8, 16)},
    }
    assert_parity(tok, ref)


def test_special_tokens_as_tekkenizer_numbers_them(small):
    tok = Tokenizer.load(small)
    ref = Tekkenizer.from_file(small)
    text = "Hello world, [INST] is text here"
    # Tekkenizer.encode reads special-token text as ordinary text, as our encode_ordinary does
    assert tok.encode_ordinary(text) == ref.encode(text, bos=False, eos=False)
    ids = tok.encode("<s>" + "Hello world" + "</s>", allowed_special="all")
    assert ids == ref.encode("Hello world", bos=True, eos=True)
    assert tok.decode(ids) == ref.decode(ids, special_token_policy=SpecialTokenPolicy.KEEP)
    assert tok.id_to_token(9) == b"<SPECIAL_9>" == ref.id_to_byte_piece(9, SpecialTokenPolicy.KEEP)


def test_recognised_by_content(tmp_path, small):
    renamed = tmp_path / "mistral_tokenizer.json"  # not named tekken: the content says what it is
    renamed.write_bytes(small.read_bytes())
    assert detect_format(renamed) == "tekken"
    folder = tmp_path / "model"
    folder.mkdir()
    (folder / "tekken.json").write_bytes(small.read_bytes())
    assert detect_format(folder) == "tekken"
    assert Tokenizer.load(folder).encode_ordinary("hello") == Tokenizer.load(renamed).encode_ordinary("hello")


@pytest.mark.parametrize(
    ("changes", "field", "found"),
    [
        ({"special_tokens": None}, "'special_tokens'", "v13"),
        ({"config": {"version": "13"}}, "'config.version'", '"13"'),
        ({"config": {"default_vocab_size": 4000}}, "'config.default_vocab_size'", "4000"),
        ({"config": {"default_num_special_tokens": 4}}, "'config.default_num_special_tokens'", "4"),
        ({"config": {"pattern": "(unclosed"}}, "'config.pattern'", '"(unclosed"'),
        (
            {"special_tokens": [{"rank": 1, "token_str": "<s>", "is_control": True}]},
            "'special_tokens[0].rank'",
            "1",
        ),
    ],
)
def test_malformed_files_fail_in_one_line(tmp_path, changes, field, found):
    path = small_tekken(tmp_path / "tekken.json", **changes)
    with pytest.raises(ModelFormatError) as caught:
        Tokenizer.load(path)
    message = str(caught.value)
    assert "\n" not in message and str(path) in message
    assert f"field {field}" in message and found in message


def test_malformed_vocab_entries(tmp_path):
    vocab = nemo_head()["vocab"]
    swapped = [dict(entry) for entry in vocab]
    swapped[65]["token_bytes"] = base64.b64encode(b"B").decode()
    for bad_vocab, field in [
        (swapped, "'vocab[65].token_bytes'"),
        ([*vocab[:300], {**vocab[300], "rank": 7}, *vocab[301:]], "'vocab[300].rank'"),
        ([*vocab[:300], {**vocab[300], "token_bytes": "not base64!"}, *vocab[301:]], "'vocab[300].token_bytes'"),
    ]:
        path = small_tekken(tmp_path / "tekken.json", vocab=bad_vocab)
        with pytest.raises(ModelFormatError, match=re.escape(f"field {field}")):
            Tokenizer.load(path)
