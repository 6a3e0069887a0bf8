"""Acceptance 4 of issue 2: a Tokenizer loaded from GPT-2's vocab.json + merges.txt, and one loaded
from the cl100k_base .tiktoken file, give tiktoken's ids (and decode restores the text) on the
CS336 encode inputs, minbpe's taylorswift.txt, the public vectors and the first MB of every
shared corpus. tiktoken itself runs offline from the files in tests/fixtures/peers (conftest)."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import pytest
import tiktoken
from tests.conftest import CORPUS_NAMES, PEERS, corpus_text

from bpe_spark import DisallowedSpecialTokenError, Tokenizer
from bpe_spark.models.load import export_model

CL100K_SPECIALS = {
    "<|endoftext|>": 100257,
    "<|fim_prefix|>": 100258,
    "<|fim_middle|>": 100259,
    "<|fim_suffix|>": 100260,
    "<|endofprompt|>": 100276,
}
_URLS = {"cl100k_base": "https://openaipublic.blob.core.windows.net/encodings/cl100k_base.tiktoken"}


def tiktoken_cache_file(encoding: str) -> Path:
    """tiktoken names a cached file by the SHA-1 of its URL."""
    cache = Path(os.environ["TIKTOKEN_CACHE_DIR"])
    return cache / hashlib.sha1(_URLS[encoding].encode()).hexdigest()


@pytest.fixture(scope="module")
def gpt2() -> Tokenizer:
    return Tokenizer.load(PEERS / "cs336" / "gpt2_vocab.json")


@pytest.fixture(scope="module")
def cl100k() -> Tokenizer:
    return Tokenizer.load(tiktoken_cache_file("cl100k_base"))


@pytest.fixture(scope="module")
def tt_gpt2():
    return tiktoken.get_encoding("gpt2")


@pytest.fixture(scope="module")
def tt_cl100k():
    return tiktoken.get_encoding("cl100k_base")


def _allowed(value) -> set[str] | str:
    if value in (None, "none", []):
        return set()
    return "all" if value == "all" else set(value)


def test_files_are_recognised(gpt2, cl100k):
    assert gpt2.special_tokens == {"<|endoftext|>": 50256} and gpt2.vocab_size == 50257
    assert gpt2.merge_rule == "pairs" and len(gpt2.merges) == 50000
    assert cl100k.pattern == "cl100k" and cl100k.special_tokens == CL100K_SPECIALS
    assert cl100k.merge_rule == "ranks" and cl100k.metadata["source"]["encoding"] == "cl100k_base"
    # Every multi-byte cl100k token got the merge that builds it from lower ranks.
    assert len(cl100k.merges) == 100256 - 256
    assert "tokens_without_merge" not in cl100k.metadata["source"]
    assert all(new_id > max(left, right) for left, right, new_id in cl100k.merge_ids)


def test_cs336_encode_cases(gpt2, tt_gpt2):
    cases = json.loads((PEERS / "cs336" / "expected_gpt2_ids.json").read_text())["cases"]
    names = {case["name"] for case in cases}
    assert {
        "tinystories_sample.txt",
        "address.txt",
        "german.txt",
        "special_token_trailing_newlines.txt",
        "special_token_double_newlines_non_whitespace.txt",
    } <= names
    for case in cases:
        text = case["text"]
        if case["source"].startswith("file:"):
            text = (PEERS / "cs336" / case["source"][len("file:") :]).read_text(encoding="utf-8")
            assert text == case["text"]
        allowed = _allowed(case["allowed_special"])
        ids = gpt2.encode(text, allowed_special=allowed)
        assert ids == case["expected_ids"], case["name"]
        assert ids == tt_gpt2.encode(text, allowed_special=allowed), case["name"]
        assert [bytes.hex(gpt2.decode_bytes([i])) for i in ids] == case["expected_token_bytes_hex"]
        assert gpt2.decode(ids) == text


def test_minbpe_cl100k_cases(cl100k, tt_cl100k):
    cases = json.loads((PEERS / "minbpe" / "expected_cl100k_ids.json").read_text())["cases"]
    taylor = (PEERS / "minbpe" / "taylorswift.txt").read_text(encoding="utf-8")
    assert any(case["name"] == "FILE:taylorswift.txt" for case in cases)
    for case in cases:
        text = taylor if case["name"] == "FILE:taylorswift.txt" else case["text"]
        assert text == case["text"]
        if "special_tokens" in case:
            assert case["special_tokens"] == cl100k.special_tokens
        allowed = _allowed(case["allowed_special"])
        ids = cl100k.encode(text, allowed_special=allowed)
        assert ids == case["expected_ids"], case["name"][:40]
        assert cl100k.decode(ids) == text


def test_taylorswift_gpt2(gpt2, tt_gpt2):
    taylor = (PEERS / "minbpe" / "taylorswift.txt").read_text(encoding="utf-8")
    ids = gpt2.encode(taylor)
    assert ids == tt_gpt2.encode(taylor) and gpt2.decode(ids) == taylor


def test_public_vectors(gpt2, cl100k):
    vectors = json.loads((PEERS / "public_vectors" / "gpt2_cl100k_vectors.json").read_text())
    checked = 0
    for key, tok in (("gpt2", gpt2), ("cl100k_base", cl100k)):
        for vector in vectors[key]:
            if "text" not in vector:
                # tiktoken's _encode_bytes case: bytes that are one whole token.
                assert tok.token_to_id(bytes.fromhex(vector["bytes_hex"])) == vector["ids"][0]
                assert len(vector["ids"]) == 1
                continue
            ids = tok.encode(
                vector["text"], allowed_special=_allowed(vector.get("allowed_special"))
            )
            assert ids == vector["ids"], (key, vector["text"])
            assert tok.decode(ids) == vector["text"]
            checked += 1
    assert checked == 35


def test_special_token_policy_matches_tiktoken(gpt2, cl100k, tt_cl100k):
    with pytest.raises(DisallowedSpecialTokenError, match="allowed_special"):
        gpt2.encode("a <|endoftext|>")
    text = "x<|fim_prefix|>y<|endofprompt|>"
    assert cl100k.encode(text, disallowed_special=()) == tt_cl100k.encode(
        text, disallowed_special=()
    )
    assert cl100k.encode(
        text, allowed_special={"<|fim_prefix|>"}, disallowed_special=()
    ) == tt_cl100k.encode(text, allowed_special={"<|fim_prefix|>"}, disallowed_special=())
    assert cl100k.encode_ordinary(text) == tt_cl100k.encode_ordinary(text)


@pytest.mark.parametrize("corpus", CORPUS_NAMES)
def test_first_megabyte_of_each_corpus(corpus, gpt2, cl100k, tt_gpt2, tt_cl100k):
    text = corpus_text(corpus, 1_000_000)
    for tok, enc in ((gpt2, tt_gpt2), (cl100k, tt_cl100k)):
        ids = tok.encode_ordinary(text)
        assert ids == enc.encode_ordinary(text), (corpus, enc.name)
        assert tok.decode(ids) == text


def test_exports_reproduce_openai_files(tmp_path, gpt2, cl100k):
    """GPT-2 files exported as .tiktoken give OpenAI's r50k_base file byte for byte (the hash
    tiktoken checks), and cl100k exports back to the very file it came from."""
    r50k = export_model(gpt2, "tiktoken", tmp_path / "r50k.tiktoken")[0]
    assert hashlib.sha256(r50k.read_bytes()).hexdigest() == (
        "306cd27f03c1a714eca7108e03d66b7dc042abe8c258b44c199a7ed9838dd930"
    )
    reread = Tokenizer.load(r50k)  # recognised by content: gpt2 pattern and <|endoftext|>
    assert reread.special_tokens == gpt2.special_tokens and reread.merges == gpt2.merges
    again = export_model(cl100k, "tiktoken", tmp_path / "cl100k.tiktoken")[0]
    assert again.read_bytes() == tiktoken_cache_file("cl100k_base").read_bytes()


def test_cl100k_as_tokenizer_json(tmp_path, cl100k, tt_cl100k):
    """cl100k exported to tokenizer.json (derived merges, ignore_merges for the whole-pretoken
    lookup, the pattern's possessive interval rewritten for Oniguruma) gives tiktoken's ids in
    ``tokenizers``, and imports back as a pipeline (an ``ignore_merges`` file runs as tokenizers
    runs it) with the same vocabulary, specials and ids."""
    from tokenizers import Tokenizer as HfTokenizer

    path = export_model(cl100k, "tokenizer.json", tmp_path / "tokenizer.json")[0]
    hf = HfTokenizer.from_file(str(path))
    lines = corpus_text("multilingual", 1_000_000).splitlines(keepends=True)
    assert [e.ids for e in hf.encode_batch(lines)] == tt_cl100k.encode_batch(lines)
    text = "<|fim_prefix|>def f():<|fim_suffix|>\n    return 1<|fim_middle|>"
    assert hf.encode(text).ids == tt_cl100k.encode(text, allowed_special="all")
    back = Tokenizer.load(path)
    assert back.special_tokens == CL100K_SPECIALS
    assert back.encode(text, allowed_special="all") == tt_cl100k.encode(text, allowed_special="all")
    sample = lines[::50]
    assert [back.encode_ordinary(line) for line in sample] == tt_cl100k.encode_ordinary_batch(sample)
    assert back.merge_ids == cl100k.merge_ids and back.vocab == cl100k.vocab
