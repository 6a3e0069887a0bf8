"""The imported pipeline's steps (bpe_spark.pipeline normalizers, pre-tokenizers, decoders) against
tokenizers' own objects, deserialised from the same JSON by ``Tokenizer.from_str``: on the edge
cases and the first lines of each shared corpus; and each refusal, one line naming the field."""

from __future__ import annotations

import json

import pytest
from tests.hf_cases import CORPUS_NAMES, EDGE_CASES, HUB_PRE_TOKENIZERS, corpus_lines

from bpe_spark.pipeline.decoders import build_decoder
from bpe_spark.pipeline.normalizers import build_normalizer
from bpe_spark.pipeline.pre_tokenizers import build_pre_tokenizer
from bpe_spark.bpe.symbols import bytes_to_unicode

tokenizers = pytest.importorskip("tokenizers")

LINES = 300
EXTRA = ["ΣΑΣ Σ", "\x1c a \x1f", "İ", "ǅ", "ẞ", "x\u0345", "xxaxx", "a  \n b  ", "x² ½ ¼ ZW\u200dJ"]


class StepError(Exception):
    pass


def error(field: str, message: str) -> StepError:
    return StepError(f"tokenizer.json: field {field!r} {message}")


def texts() -> list[str]:
    return [*EDGE_CASES.values(), *EXTRA, *(line for n in CORPUS_NAMES for line in corpus_lines(n, LINES))]


def reference(key: str, spec: dict):
    data = {"version": "1.0", "model": {"type": "BPE", "vocab": {}, "merges": []}, key: spec}
    return getattr(tokenizers.Tokenizer.from_str(json.dumps(data)), key)


def split(pattern: str, behavior: str = "Isolated", invert: bool = False, kind: str = "Regex") -> dict:
    return {"type": "Split", "pattern": {kind: pattern}, "behavior": behavior, "invert": invert}


METASPACE = {"type": "Metaspace", "replacement": "\u2581"}
NORMALIZERS = {
    **{k: {"type": k} for k in ("NFC", "NFD", "NFKC", "NFKD", "Lowercase")},
    "replace_string": {"type": "Replace", "pattern": {"String": " "}, "content": "\u2581"},
    "replace_empty_string": {"type": "Replace", "pattern": {"String": ""}, "content": "X"},
    "replace_regex": {"type": "Replace", "pattern": {"Regex": r"\s+"}, "content": " "},
    "replace_empty_match": {"type": "Replace", "pattern": {"Regex": r"x*"}, "content": "_"},
    "replace_line_end": {"type": "Replace", "pattern": {"Regex": r" +$"}, "content": ""},
    "prepend": {"type": "Prepend", "prepend": "\u2581"},
    "strip": {"type": "Strip", "strip_left": True, "strip_right": True},
    "lstrip": {"type": "Strip", "strip_left": True, "strip_right": False},
    "rstrip": {"type": "Strip", "strip_left": False, "strip_right": True},
    "llama2": {
        "type": "Sequence",
        "normalizers": [
            {"type": "Prepend", "prepend": "\u2581"},
            {"type": "Replace", "pattern": {"String": " "}, "content": "\u2581"},
        ],
    },
    "clip": {
        "type": "Sequence",
        "normalizers": [
            {"type": "NFC"},
            {"type": "Replace", "pattern": {"Regex": r"\s+"}, "content": " "},
            {"type": "Lowercase"},
        ],
    },
    "nested": {
        "type": "Sequence",
        "normalizers": [
            {"type": "Sequence", "normalizers": [{"type": "NFKD"}, {"type": "Lowercase"}]},
            {"type": "Sequence", "normalizers": []},
            {"type": "Strip", "strip_left": True, "strip_right": True},
        ],
    },
}
BEHAVIORS = ("Removed", "Isolated", "MergedWithPrevious", "MergedWithNext", "Contiguous")
PRE_TOKENIZERS = {
    **HUB_PRE_TOKENIZERS,
    **{f"split_{b}_{i}": split(r"\s+|\p{N}", b, i) for b in BEHAVIORS for i in (False, True)},
    **{f"split_string_{b}": split(" ", b, kind="String") for b in BEHAVIORS},
    "split_empty_string": split("", kind="String"),
    "split_empty_matches": split(r"x*"),
    **{f"punctuation_{b}": {"type": "Punctuation", "behavior": b} for b in BEHAVIORS},
    "byte_level_prefix": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True},
    "byte_level_prefix_no_regex": {
        "type": "ByteLevel",
        "add_prefix_space": True,
        "trim_offsets": False,
        "use_regex": False,
    },
    "whitespace": {"type": "Whitespace"},
    "whitespace_split": {"type": "WhitespaceSplit"},
    "digits": {"type": "Digits", "individual_digits": False},
    "individual_digits": {"type": "Digits", "individual_digits": True},
    "char_delimiter": {"type": "CharDelimiterSplit", "delimiter": "a"},
    "metaspace_always": {**METASPACE, "prepend_scheme": "always", "split": True},
    "metaspace_never": {**METASPACE, "prepend_scheme": "never", "split": True},
    "metaspace_first": {**METASPACE, "prepend_scheme": "first", "split": True},
    "metaspace_legacy": {**METASPACE, "add_prefix_space": True},
    "metaspace_legacy_never": {**METASPACE, "add_prefix_space": False, "prepend_scheme": "never"},
    "prefix_space_every_piece": {
        "type": "Sequence",
        "pretokenizers": [
            {"type": "WhitespaceSplit"},
            {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True, "use_regex": False},
        ],
    },
    "first_only_at_offset_0": {
        "type": "Sequence",
        "pretokenizers": [
            split("\n", "Removed", kind="String"),
            {**METASPACE, "prepend_scheme": "first", "split": False},
        ],
    },
    "nested": {
        "type": "Sequence",
        "pretokenizers": [
            {"type": "Sequence", "pretokenizers": [{"type": "Digits", "individual_digits": True}]},
            {"type": "Punctuation", "behavior": "Isolated"},
            {"type": "Whitespace"},
        ],
    },
}


@pytest.mark.parametrize("name", NORMALIZERS)
def test_normalizer_matches_tokenizers(name):
    spec = NORMALIZERS[name]
    ours, ref = build_normalizer(spec, "normalizer", error), reference("normalizer", spec)
    assert [ours(t) for t in texts()] == [ref.normalize_str(t) for t in texts()]


@pytest.mark.parametrize("name", PRE_TOKENIZERS)
def test_pre_tokenizer_matches_tokenizers(name):
    spec = PRE_TOKENIZERS[name]
    ours, ref = build_pre_tokenizer(spec, "pre_tokenizer", error), reference("pre_tokenizer", spec)
    for text in texts():
        assert ours.split(text) == [s for s, _ in ref.pre_tokenize_str(text)], text


def test_byte_level_flag():
    assert build_pre_tokenizer(HUB_PRE_TOKENIZERS["llama3"], "pre_tokenizer", error).byte_level
    assert not build_pre_tokenizer(HUB_PRE_TOKENIZERS["mistral_metaspace"], "pre_tokenizer", error).byte_level


def test_metaspace_first_is_the_start_of_the_input_only():
    """After an added token the runtime passes first=False: tokenizers prepends the replacement
    only to the piece at offset 0 of the whole input."""
    spec = {**METASPACE, "prepend_scheme": "first", "split": False}
    ours = build_pre_tokenizer(spec, "pre_tokenizer", error)
    ref = tokenizers.Tokenizer.from_str(
        json.dumps(
            {
                "version": "1.0",
                "model": {"type": "BPE", "vocab": {"<s>": 0, "\u2581": 1, "a": 2, "b": 3}, "merges": []},
                "added_tokens": [
                    {"id": 0, "content": "<s>", "single_word": False, "lstrip": False, "rstrip": False,
                     "normalized": False, "special": True}
                ],
                "pre_tokenizer": spec,
            }
        )
    )
    assert ref.encode("a<s>b", add_special_tokens=False).tokens == ["\u2581", "a", "<s>", "b"]
    assert ours.split("a") + ["<s>"] + ours.split("b", first=False) == ["\u2581a", "<s>", "b"]


START_NORMALIZERS = [
    {"type": "Replace", "pattern": {"Regex": " +"}, "content": ""},
    {"type": "Replace", "pattern": {"Regex": "^ +"}, "content": "x"},
    {"type": "Replace", "pattern": {"String": "ab"}, "content": "b"},
    {"type": "Replace", "pattern": {"String": "a"}, "content": "bb"},
    {"type": "Replace", "pattern": {"String": "a"}, "content": ""},
    {"type": "Replace", "pattern": {"Regex": "^"}, "content": "x"},
    {"type": "Sequence", "normalizers": [NORMALIZERS["strip"], NORMALIZERS["prepend"]]},
    {"type": "Sequence", "normalizers": [NORMALIZERS["prepend"], NORMALIZERS["lstrip"]]},
    NORMALIZERS["rstrip"],
    NORMALIZERS["NFC"],
    NORMALIZERS["NFKD"],
    NORMALIZERS["Lowercase"],
]


@pytest.mark.parametrize("spec", START_NORMALIZERS, ids=lambda s: json.dumps(s, ensure_ascii=True))
def test_normalize_at_start_tells_metaspace_first_as_tokenizers(spec):
    """What tokenizers prepends with prepend_scheme "first" after a normalizer (one token per
    character, so the tokens spell the pre-tokenized text)."""
    inputs = ["  a b", "ab", "Ab ", " a", "e\u0301a", "\ufb01 a", "\u00e9a", "a", "aab"]
    metaspace = {**METASPACE, "prepend_scheme": "first", "split": False}
    ours_n = build_normalizer(spec, "normalizer", error)
    ours_p = build_pre_tokenizer(metaspace, "pre_tokenizer", error)
    chars = sorted({c for t in inputs for c in ours_n(t)} | {"\u2581", *"xb"})
    data = {
        "version": "1.0",
        "model": {"type": "BPE", "vocab": {c: i for i, c in enumerate(chars)}, "merges": []},
        "normalizer": spec,
        "pre_tokenizer": metaspace,
    }
    ref = tokenizers.Tokenizer.from_str(json.dumps(data))
    for text in inputs:
        normalized, starts = ours_n.normalize_at_start(text)
        ours = "".join(ours_p.split(normalized, first=starts))
        assert ours == "".join(ref.encode(text, add_special_tokens=False).tokens), text


def _decoder_inputs() -> list[list[str]]:
    table = bytes_to_unicode()

    def byte_level(text: str) -> str:
        return "".join(table[b] for b in text.encode("utf-8"))

    euro = byte_level("\u20ac")
    lists = [
        ["\u2581Hello", "\u2581world", "\u2581"],
        ["\u2581\u2581a", "\u2581b\u2581"],
        ["Hello\u2581", "\u2581"],
        ["a", "<0x41>", "<0xE2>", "<0x82>", "<0xAC>", "b", "<0xFF>", "<0x41>"],
        ["<0x+1>", "<0xg1>", "<0x4a>", "<0x0A>x", "<0x>"],
        [" a ", "  b  ", " "],
        ["hello</w>", "wor", "ld</w>", "!</w>"],
        ["ab</w>c</w>"],
        [byte_level("h\u00e9llo"), byte_level(" w\u00f6rld"), "\u0100\u0101", "notbytes\u2713"],
        [euro[:1], euro[1:]],
        [],
        ["\u2581"],
    ]
    for name in CORPUS_NAMES:
        for line in corpus_lines(name, 100):
            lists.append([byte_level(w) for w in line.split(" ")])
            lists.append(["\u2581" + w for w in line.split(" ")])
    return lists


DECODERS = {
    "byte_level": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True, "use_regex": True},
    "metaspace_always": {**METASPACE, "prepend_scheme": "always", "split": True},
    "metaspace_first": {**METASPACE, "prepend_scheme": "first", "split": False},
    "metaspace_never": {**METASPACE, "prepend_scheme": "never", "split": True},
    "metaspace_legacy": {**METASPACE, "add_prefix_space": True},
    "byte_fallback": {"type": "ByteFallback"},
    "fuse": {"type": "Fuse"},
    "strip": {"type": "Strip", "content": " ", "start": 1, "stop": 0},
    "strip_both": {"type": "Strip", "content": "\u00a4", "start": 2, "stop": 1},
    "replace": {"type": "Replace", "pattern": {"String": "\u2581"}, "content": " "},
    "replace_regex": {"type": "Replace", "pattern": {"Regex": "\u2581+"}, "content": "_"},
    "bpe_decoder": {"type": "BPEDecoder", "suffix": "</w>"},
    "llama2": {
        "type": "Sequence",
        "decoders": [
            {"type": "Replace", "pattern": {"String": "\u2581"}, "content": " "},
            {"type": "ByteFallback"},
            {"type": "Fuse"},
            {"type": "Strip", "content": " ", "start": 1, "stop": 0},
        ],
    },
}


@pytest.mark.parametrize("name", DECODERS)
def test_decoder_matches_tokenizers(name):
    spec = DECODERS[name]
    ours, ref = build_decoder(spec, "decoder", error), reference("decoder", spec)
    for tokens in _decoder_inputs():
        assert ours(tokens) == ref.decode(tokens), tokens


def test_strip_decoder_fails_where_tokenizers_panics():
    ours = build_decoder({"type": "Strip", "content": "a", "start": 2, "stop": 1}, "decoder", error)
    with pytest.raises(ValueError, match="tokenizers panics"):
        ours(["a"])


REFUSALS = [
    (build_normalizer, {"type": "Precompiled", "precompiled_charsmap": "AAAA"}, "normalizer.type", "Precompiled"),
    (build_normalizer, {"type": "Sequence", "normalizers": [{"type": "NFC"}, {"type": "BertNormalizer"}]},
     "normalizer.normalizers[1].type", "BertNormalizer"),
    (build_normalizer, {"type": "StripAccents"}, "normalizer.type", "StripAccents"),
    (build_normalizer, {"type": "Strip", "strip_left": True}, "normalizer.strip_right", "missing"),
    (build_normalizer, {"type": "Lowercase", "turkish": True}, "normalizer.turkish", "True"),
    (build_normalizer, {"type": "Replace", "pattern": {"Regex": r"\X"}, "content": ""},
     "normalizer.pattern.Regex", "grapheme"),
    (build_pre_tokenizer, {"type": "BertPreTokenizer"}, "pre_tokenizer.type", "BertPreTokenizer"),
    (build_pre_tokenizer, {"type": "Sequence", "pretokenizers": [split("a"), {"type": "UnicodeScripts"}]},
     "pre_tokenizer.pretokenizers[1].type", "UnicodeScripts"),
    (build_pre_tokenizer, split("a", "Dropped"), "pre_tokenizer.behavior", "Dropped"),
    (build_pre_tokenizer, split(r"[a&&b]"), "pre_tokenizer.pattern.Regex", "intersection"),
    (build_pre_tokenizer, {"type": "Split", "pattern": {"Glob": "*"}, "behavior": "Isolated", "invert": False},
     "pre_tokenizer.pattern", "Glob"),
    (build_pre_tokenizer, {"type": "ByteLevel", "add_prefix_space": False}, "pre_tokenizer.trim_offsets", "missing"),
    (build_pre_tokenizer, {**METASPACE, "prepend_scheme": "sometimes"}, "pre_tokenizer.prepend_scheme", "sometimes"),
    (build_pre_tokenizer, {**METASPACE, "add_prefix_space": False}, "pre_tokenizer.add_prefix_space", "false"),
    (build_decoder, {"type": "WordPiece", "prefix": "##", "cleanup": True}, "decoder.type", "WordPiece"),
    (build_decoder, {"type": "Sequence", "decoders": [{"type": "Fuse"}, {"type": "CTC"}]},
     "decoder.decoders[1].type", "CTC"),
    (build_decoder, {"type": "Strip", "content": " ", "start": -1, "stop": 0}, "decoder.start", "-1"),
]


@pytest.mark.parametrize(("build", "spec", "field", "value"), REFUSALS, ids=[r[2] + ":" + r[3] for r in REFUSALS])
def test_refusal_is_one_line_naming_field_and_value(build, spec, field, value):
    key = field.split(".")[0]
    with pytest.raises(StepError) as caught:
        build(spec, key, error)
    message = str(caught.value)
    assert "\n" not in message
    assert f"field {field!r}" in message
    assert value in message
