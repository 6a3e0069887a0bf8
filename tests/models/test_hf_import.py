"""Issue 14: tokenizer.json layouts as published, imported by bpe-spark, give ``tokenizers``' ids.

Each layout is built offline: transformers' ``TikTokenConverter`` on the shared cl100k file (the
Llama-3 / Mistral-Nemo layout: ignore_merges and every split of each token), ``tokenizers``' API
(DeepSeek's chained Splits with non-special added tokens of each flag, normalized added tokens
under a Sequence normalizer, CLIP-style end_of_word_suffix), transformers' ``LlamaConverter`` on
a SentencePiece BPE model trained here (byte_fallback, Prepend/Replace or Metaspace, the
ByteFallback/Fuse/Strip decoder). For each: the ids of the edge cases (tests/hf_cases.py) and of
1,000 lines of each shared corpus equal ``tokenizers``' ``encode(text, add_special_tokens=False)``,
line for line, and our ``decode`` equals its ``decode(ids, skip_special_tokens=False)``. What
cannot be reproduced (dropout, Unigram, WordPiece) is refused at load in one line naming the
file, the field and the value.
"""

from __future__ import annotations

import json
import pickle
from pathlib import Path
from types import SimpleNamespace

import pytest
from tests.conftest import PEERS
from tests.hf_cases import CL100K_PATTERN, CORPUS_NAMES, EDGE_CASES, HUB_PRE_TOKENIZERS, corpus_lines
from tokenizers import AddedToken, Regex, decoders, models, normalizers, pre_tokenizers, trainers
from tokenizers import Tokenizer as HfTokenizer

from bpe_spark import Tokenizer, TrainerConfig, train
from bpe_spark.errors import ModelFormatError
from bpe_spark.models.huggingface.tokenizer_json_write import to_hf_dict

CL100K_FILE = PEERS / "tiktoken_cache" / "cl100k_base.tiktoken"
N_LINES = 1000
ADDED_TEXTS = [  # the added tokens of the layouts below, in and out of place
    "a<|fim_hole|>b <|fim_hole|> x<tool>  y  </tool>  z hello world xhello helloworld hello_",
    "<|User|>Hi<|Assistant|>ok<|endoftext|>THE <|user|> ﬁx FIX Fix",
    "  <tool></tool><tool>\n\t</tool>hello",
]


@pytest.fixture(scope="module")
def texts() -> list[str]:
    lines = [line for name in CORPUS_NAMES for line in corpus_lines(name, N_LINES)]
    assert len(lines) == N_LINES * len(CORPUS_NAMES)
    return list(EDGE_CASES.values()) + ADDED_TEXTS + lines


def _train_sample() -> list[str]:
    return [line for name in CORPUS_NAMES for line in corpus_lines(name, 400)]


def _load(hf: HfTokenizer, tmp_path: Path, name: str) -> tuple[HfTokenizer, Tokenizer, Path]:
    """``hf`` written as a tokenizer.json, read back by tokenizers and by bpe-spark."""
    path = tmp_path / f"{name}.json"
    path.write_text(hf.to_str(), encoding="utf-8")
    return HfTokenizer.from_file(str(path)), Tokenizer.load(path), path


def assert_same_ids(hf: HfTokenizer, tok: Tokenizer, texts: list[str]) -> list[list[int]]:
    """Ids equal tokenizers', text for text, and so does the decoded text of the first 100 texts
    (the edge cases) and of every 4th after them (1,000 corpus lines: our decoders run in Python);
    returns the ids."""
    ref = [e.ids for e in hf.encode_batch(texts, add_special_tokens=False)]
    ours = [tok.encode(text, allowed_special="all") for text in texts]
    wrong = [(text[:60], r[:12], o[:12]) for text, r, o in zip(texts, ref, ours) if r != o]
    assert not wrong, f"{len(wrong)} of {len(texts)} texts differ, e.g. {wrong[:3]}"
    sample = [i for i in range(len(texts)) if i < 100 or i % 4 == 0]
    decoded = hf.decode_batch([ref[i] for i in sample], skip_special_tokens=False)
    wrong = [texts[i][:60] for i, d in zip(sample, decoded) if tok.decode(ref[i]) != d]
    assert not wrong, f"{len(wrong)} decodes differ, e.g. {wrong[:3]}"
    return ours


# --- (a) transformers' TikTokenConverter on cl100k ------------------------------------------------
def test_tiktoken_converter_cl100k(tmp_path, texts):
    from transformers.convert_slow_tokenizer import TikTokenConverter

    specials = ["<|endoftext|>", "<|fim_prefix|>", "<|fim_middle|>", "<|fim_suffix|>", "<|endofprompt|>"]
    converter = TikTokenConverter(vocab_file=str(CL100K_FILE), pattern=CL100K_PATTERN, extra_special_tokens=specials)
    hf, tok, path = _load(converter.converted(), tmp_path, "cl100k")
    data = json.loads(path.read_text(encoding="utf-8"))
    assert data["model"]["ignore_merges"] and len(data["model"]["merges"]) == 233_378  # every split
    assert tok.pipeline is not None and tok.vocab_size == hf.get_vocab_size(with_added_tokens=True)
    ours = assert_same_ids(hf, tok, texts)
    assert ours[list(EDGE_CASES).index("digits_1870")] == [972, 2031]  # "18" "70": Oniguruma's \p{N}{1,3}+


# --- (b) tokenizers' API ------------------------------------------------------------------------------
def _byte_level_bpe(pre_tokenizer: dict, *, normalizer=None, vocab_size: int = 1200) -> HfTokenizer:
    spec = json.loads(HfTokenizer(models.BPE()).to_str())
    spec["pre_tokenizer"] = pre_tokenizer
    hf = HfTokenizer.from_str(json.dumps(spec))
    if normalizer is not None:
        hf.normalizer = normalizer
    hf.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size, special_tokens=["<|endoftext|>"], show_progress=False,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    hf.train_from_iterator(_train_sample(), trainer)
    return hf


def test_chained_splits_and_non_special_added_tokens(tmp_path, texts):
    hf = _byte_level_bpe(HUB_PRE_TOKENIZERS["deepseek_v3"])
    hf.add_tokens([
        AddedToken("<|fim_hole|>", special=False, normalized=False),
        AddedToken("<tool>", special=False, normalized=False, lstrip=True),
        AddedToken("</tool>", special=False, normalized=False, rstrip=True),
        AddedToken("hello", special=False, normalized=False, single_word=True),
    ])
    hf.add_special_tokens([AddedToken("<|User|>", special=True, normalized=False)])
    hf, tok, _ = _load(hf, tmp_path, "deepseek")
    assert tok.pipeline is not None and tok.special_tokens == {"<|endoftext|>": 0, "<|User|>": tok.vocab_size - 1}
    assert_same_ids(hf, tok, texts)
    # encode_ordinary: special-token text is ordinary text, non-special added tokens still match
    hf.encode_special_tokens = True
    for text in ADDED_TEXTS + list(EDGE_CASES.values()):
        assert tok.encode_ordinary(text) == hf.encode(text, add_special_tokens=False).ids
    # pickling (Spark broadcasts), to_dict and the model directory rebuild the same tokenizer
    back = pickle.loads(pickle.dumps(tok))
    again = Tokenizer.from_dict(tok.to_dict())
    tok.save(tmp_path / "model")
    loaded = Tokenizer.load(tmp_path / "model")
    assert json.loads((tmp_path / "model" / "bpe_spark.json").read_text())["pipeline"] == tok.to_dict()["pipeline"]
    for other in (back, again, loaded):
        assert other.vocab == tok.vocab and other.special_tokens == tok.special_tokens
        assert [other.encode(t, allowed_special="all") for t in ADDED_TEXTS] == [
            tok.encode(t, allowed_special="all") for t in ADDED_TEXTS
        ]
    assert HfTokenizer.from_file(str(tmp_path / "model" / "tokenizer.json")).encode(ADDED_TEXTS[0]).ids == (
        tok.encode(ADDED_TEXTS[0], allowed_special="all")
    )
    from transformers import AutoTokenizer  # the saved directory is a folder transformers loads

    auto = AutoTokenizer.from_pretrained(str(tmp_path / "model"))
    assert [auto.encode(t, add_special_tokens=False) for t in ADDED_TEXTS] == [
        tok.encode(t, allowed_special="all") for t in ADDED_TEXTS
    ]
    hello = tok.token_to_id(b"hello")
    assert tok.id_to_token(hello) == b"hello" and tok.tokens("hello world")[0] == "hello"


def test_normalized_added_tokens_under_a_sequence_normalizer(tmp_path, texts):
    normalizer = normalizers.Sequence([normalizers.NFKC(), normalizers.Lowercase()])
    hf = _byte_level_bpe(HUB_PRE_TOKENIZERS["llama3"], normalizer=normalizer)
    hf.add_tokens([AddedToken("<|User|>", special=False, normalized=True), AddedToken("ﬁx", normalized=True)])
    hf.add_special_tokens([AddedToken("<|Assistant|>", special=True, normalized=True)])
    hf, tok, _ = _load(hf, tmp_path, "normalized")
    assert_same_ids(hf, tok, texts)
    empty = json.loads(hf.to_str())
    empty["normalizer"] = {"type": "Sequence", "normalizers": []}
    hf, tok, _ = _load(HfTokenizer.from_str(json.dumps(empty)), tmp_path, "empty_sequence")
    assert_same_ids(hf, tok, list(EDGE_CASES.values()) + ADDED_TEXTS)


def test_clip_style_end_of_word_suffix(tmp_path, texts):
    hf = HfTokenizer(models.BPE(end_of_word_suffix="</w>", unk_token="<|endoftext|>"))
    hf.normalizer = normalizers.Sequence(
        [normalizers.NFC(), normalizers.Replace(Regex(r"\s+"), " "), normalizers.Lowercase()]
    )
    hf.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(
            Regex(r"""<\|startoftext\|>|<\|endoftext\|>|'s|'t|'re|'ve|'m|'ll|'d|[\p{L}]+|[\p{N}]|[^\s\p{L}\p{N}]+"""),
            behavior="removed", invert=True,
        ),
        pre_tokenizers.ByteLevel(add_prefix_space=False),
    ])
    hf.decoder = decoders.BPEDecoder(suffix="</w>")
    trainer = trainers.BpeTrainer(
        vocab_size=1500, special_tokens=["<|startoftext|>", "<|endoftext|>"], end_of_word_suffix="</w>",
        show_progress=False, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    hf.train_from_iterator(_train_sample(), trainer)
    hf, tok, path = _load(hf, tmp_path, "clip")
    assert json.loads(path.read_text())["model"]["end_of_word_suffix"] == "</w>"
    assert_same_ids(hf, tok, texts)


# --- (c) SentencePiece-style BPE via transformers' LlamaConverter ----------------------------------
@pytest.fixture(scope="module")
def sentencepiece_model(tmp_path_factory) -> Path:
    import sentencepiece

    folder = tmp_path_factory.mktemp("spm")
    (folder / "train.txt").write_text("".join(_train_sample()), encoding="utf-8")
    sentencepiece.SentencePieceTrainer.train(
        input=str(folder / "train.txt"), model_prefix=str(folder / "bpe"), vocab_size=3000, model_type="bpe",
        byte_fallback=True, normalization_rule_name="identity", character_coverage=0.98, minloglevel=2,
    )
    return folder / "bpe.model"


def _llama_converted(model_file: Path, *, legacy: bool) -> HfTokenizer:
    import sentencepiece
    from transformers.convert_slow_tokenizer import LlamaConverter, SentencePieceExtractor

    class Extractor(SentencePieceExtractor):  # transformers 5.24's LlamaConverter unpacks this pair
        def extract(self, model_type=None, **kwargs):
            found = SentencePieceExtractor.extract(self, None)
            return found["vocab"], found["merges"]

    class Converter(LlamaConverter):
        SpmExtractor = Extractor

    processor = sentencepiece.SentencePieceProcessor(model_file=str(model_file))
    original = SimpleNamespace(
        vocab_file=str(model_file), convert_ids_to_tokens=processor.id_to_piece, legacy=legacy, add_prefix_space=True
    )
    return Converter(original).converted()


@pytest.mark.parametrize("legacy", [True, False], ids=["prepend_replace", "metaspace"])
def test_sentencepiece_style_byte_fallback(tmp_path, texts, sentencepiece_model, legacy):
    hf, tok, path = _load(_llama_converted(sentencepiece_model, legacy=legacy), tmp_path, "llama")
    data = json.loads(path.read_text(encoding="utf-8"))
    assert data["model"]["byte_fallback"] and (data["pre_tokenizer"] is None) == legacy
    assert tok.scheme == "char" and tok.token_to_id("<0x0A>") is not None
    ours = assert_same_ids(hf, tok, texts)
    assert any(tok.token_to_id("<0xE6>") in ids for ids in ours)  # CJK beyond the vocabulary: bytes


# --- what the old importer refused, now read as pipelines --------------------------------------------
@pytest.fixture(scope="module")
def byte_tok() -> Tokenizer:
    cfg = TrainerConfig(vocab_size=400, special_tokens=("<|endoftext|>", "<|pad|>"), pattern="gpt2")
    return train(_train_sample(), cfg)


@pytest.mark.parametrize(
    "edit",
    [
        lambda d: d.update(pre_tokenizer={"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True, "use_regex": True}),
        lambda d: d.update(pre_tokenizer={"type": "Sequence", "pretokenizers": [
            {"type": "Whitespace"}, {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": False}]}),
        lambda d: d["added_tokens"][1].update(special=False),
        lambda d: d["model"]["vocab"].update({"naïve中": len(d["model"]["vocab"]) + 2}),
        lambda d: d["model"]["vocab"].pop("Ā"),
        lambda d: d["model"].update(ignore_merges=True, merges=list(reversed(d["model"]["merges"]))),
        lambda d: d.update(post_processor={"type": "TemplateProcessing", "single": [
            {"SpecialToken": {"id": "<|endoftext|>", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}}],
            "pair": [{"Sequence": {"id": "A", "type_id": 0}}], "special_tokens": {
                "<|endoftext|>": {"id": "<|endoftext|>", "ids": [256], "tokens": ["<|endoftext|>"]}}}),
    ],
    ids=["add_prefix_space", "whitespace", "non_special", "outside_alphabet", "missing_byte", "ignore_merges",
         "template"],
)
def test_once_refused_layouts_give_tokenizers_ids(tmp_path, byte_tok, edit):
    data = to_hf_dict(byte_tok)
    edit(data)
    hf = HfTokenizer.from_str(json.dumps(data))
    hf, tok, _ = _load(hf, tmp_path, "edited")
    assert tok.pipeline is not None
    lines = [line for name in CORPUS_NAMES for line in corpus_lines(name, 100)]
    assert_same_ids(hf, tok, list(EDGE_CASES.values()) + lines)


# --- (d) refusals: one line naming file, field and value ---------------------------------------------
def _write(tmp_path: Path, data: dict) -> Path:
    path = tmp_path / "tokenizer.json"
    path.write_text(json.dumps(data), encoding="utf-8")
    return path


@pytest.mark.parametrize(
    ("model", "field", "value"),
    [
        (models.BPE({"a": 0, "b": 1, "ab": 2}, [("a", "b")], dropout=0.1), "model.dropout", "0.1"),
        (models.Unigram([("<unk>", 0.0), ("a", -1.0)], unk_id=0), "model.type", "'Unigram'"),
        (models.WordPiece({"[UNK]": 0, "a": 1}, unk_token="[UNK]"), "model.type", "'WordPiece'"),
        (models.WordLevel({"[UNK]": 0, "a": 1}, unk_token="[UNK]"), "model.type", "'WordLevel'"),
    ],
    ids=["dropout", "unigram", "wordpiece", "wordlevel"],
)
def test_refusals_name_file_field_and_value(tmp_path, model, field, value):
    path = _write(tmp_path, json.loads(HfTokenizer(model).to_str()))
    with pytest.raises(ModelFormatError) as info:
        Tokenizer.load(path)
    message = str(info.value)
    assert message.startswith(f"{path}: field '{field}': {value}") and "\n" not in message


def test_refusals_of_the_pipeline_name_what_was_found(tmp_path, byte_tok):
    data = to_hf_dict(byte_tok)
    data["added_tokens"][0]["special"] = False  # the pipeline's route
    data["added_tokens"][0]["id"] = 7
    with pytest.raises(ModelFormatError, match=r"field 'added_tokens\[0\]\.id': 7, but tokenizers gives"):
        Tokenizer.load(_write(tmp_path, data))
    data = to_hf_dict(byte_tok)
    data["pre_tokenizer"] = {"type": "Sequence", "pretokenizers": [{"type": "BertPreTokenizer"}]}
    with pytest.raises(ModelFormatError, match=r"field 'pre_tokenizer\.pretokenizers\[0\]\.type'.*BertPreTokenizer"):
        Tokenizer.load(_write(tmp_path, data))
    data = to_hf_dict(byte_tok)
    data["post_processor"] = {"type": "Sequence", "processors": [{"type": "ByteLevel"}, {"type": "Nonesuch"}]}
    with pytest.raises(ModelFormatError, match=r"field 'post_processor\.processors\[1\]\.type': \"Nonesuch\""):
        Tokenizer.load(_write(tmp_path, data))
    data = to_hf_dict(byte_tok)  # a Split + ByteLevel file (the fast layout's shape) whose regex is not ours
    data["pre_tokenizer"] = {"type": "Sequence", "pretokenizers": [
        {"type": "Split", "pattern": {"Regex": r"\X+"}, "behavior": "Isolated", "invert": False},
        {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": False}]}
    with pytest.raises(ModelFormatError) as info:
        Tokenizer.load(path := _write(tmp_path, data))
    assert str(info.value).startswith(f"{path}: field 'pre_tokenizer.pretokenizers[0].pattern") and "\\X" in str(info.value)


# --- the BPE model's options, one at a time and together ---------------------------------------------
@pytest.mark.parametrize(
    "options",
    [
        {"unk_token": "<unk>"},
        {"unk_token": "<unk>", "fuse_unk": True},
        {"unk_token": "<unk>", "fuse_unk": True, "byte_fallback": True},
        {"byte_fallback": True},
        {},  # unknown characters are dropped
        {"continuing_subword_prefix": "##", "unk_token": "<unk>"},
        {"end_of_word_suffix": "</w>", "unk_token": "<unk>", "fuse_unk": True},
        {"end_of_word_suffix": "</w>", "ignore_merges": True},
    ],
    ids=["unk", "fuse_unk", "fuse_unk_bytes", "bytes", "drop", "prefix", "suffix", "suffix_ignore_merges"],
)
def test_model_options_match_tokenizers(options):
    import random

    prefix, suffix = options.get("continuing_subword_prefix", ""), options.get("end_of_word_suffix", "")
    chars = "abcé"
    vocab = {"<unk>": 0, **{f"<0x{b:02X}>": 1 + b for b in range(0xC3, 0xC4)}, **{f"<0x{b:02X}>": 1 + b for b in (0x61, 0xA9, 0x78)}}
    for char in chars:
        for form in (char, prefix + char, char + suffix, prefix + char + suffix):
            vocab.setdefault(form, len(vocab) + 300)
    merges = []
    for left, right in [("a", "b"), ("b", "c"), ("ab", "c"), ("a", "a"), ("c", "é")]:
        for l_form, r_form in ((left, prefix + right), (left, prefix + right + suffix)):
            if l_form in vocab and r_form in vocab:
                merged = l_form + r_form[len(prefix):]
                vocab.setdefault(merged, len(vocab) + 300)
                if prefix:
                    vocab.setdefault(prefix + merged, len(vocab) + 300)
                merges.append(f"{l_form} {r_form}")
    vocab["abc"] = len(vocab) + 300  # ignore_merges takes a whole token as is
    model = {"type": "BPE", "vocab": vocab, "merges": merges, **options}
    spec = json.loads(HfTokenizer(models.BPE()).to_str())
    spec["model"].update(model)
    spec["pre_tokenizer"] = {"type": "WhitespaceSplit"}
    hf = HfTokenizer.from_str(json.dumps(spec))
    tok = Tokenizer(pipeline=spec)
    rng = random.Random(14)
    texts = ["abc", "abcab aabc", "xyz", "axxb", "éé中c", "ab\u00e9", "中国 abc"] + [
        "".join(rng.choice("abcé中x ") for _ in range(rng.randint(1, 12))) for _ in range(300)
    ]
    assert [tok.encode(text) for text in texts] == [hf.encode(text, add_special_tokens=False).ids for text in texts]


def test_inspect_shows_the_pipeline_steps(tmp_path, byte_tok):
    from bpe_spark.inspect.summary import describe

    data = to_hf_dict(byte_tok)
    data["model"]["ignore_merges"] = True  # the pipeline's route
    summary = describe(Tokenizer.load(_write(tmp_path, data)))
    assert summary["merge_rule"] == "tokenizers" and "pattern" not in summary
    assert summary["model_options"] == {"ignore_merges": True}
    assert summary["pre_tokenizer"] == "ByteLevel" or summary["pre_tokenizer"].startswith("Sequence[")
    assert summary["decoder"] == "ByteLevel"


# --- every normalizer and pre-tokenizer of the issue, end to end on 1,000 lines of each corpus ------
_BYTE_LEVEL = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": False}


def _split(behavior: str, invert: bool = False) -> dict:
    return {"type": "Split", "pattern": {"Regex": r"\p{L}+|\p{N}{1,3}+|\s+"}, "behavior": behavior, "invert": invert}


@pytest.mark.parametrize(
    ("normalizer", "pre_tokenizer"),
    [
        ({"type": "NFD"}, None),
        ({"type": "NFKD"}, None),
        ({"type": "Sequence", "normalizers": [{"type": "NFKC"}, {"type": "Lowercase"},
                                              {"type": "Replace", "pattern": {"Regex": r"\s+"}, "content": " "}]}, None),
        ({"type": "Sequence", "normalizers": [{"type": "Strip", "strip_left": True, "strip_right": True},
                                              {"type": "Prepend", "prepend": " "}]}, None),
        (None, _split("MergedWithPrevious")),
        (None, _split("MergedWithNext")),
        (None, _split("Contiguous")),
        (None, _split("Removed", invert=True)),
        (None, {"type": "Metaspace", "replacement": "▁", "prepend_scheme": "first", "split": True}),
        (None, {"type": "Digits", "individual_digits": True}),
        (None, {"type": "Punctuation", "behavior": "Isolated"}),
        (None, {"type": "WhitespaceSplit"}),
    ],
    ids=["nfd", "nfkd", "nfkc_lowercase_replace", "strip_prepend", "merged_previous", "merged_next",
         "contiguous", "removed_inverted", "metaspace", "digits", "punctuation", "whitespace_split"],
)
@pytest.mark.filterwarnings("ignore:pretokenization pattern")  # Removed drops text, in tokenizers too
def test_each_step_end_to_end(tmp_path, byte_tok, texts, normalizer, pre_tokenizer):
    data = to_hf_dict(byte_tok)
    if normalizer is not None:
        data["normalizer"] = normalizer
    if pre_tokenizer is not None:
        data["pre_tokenizer"] = {"type": "Sequence", "pretokenizers": [pre_tokenizer, _BYTE_LEVEL]}
    hf, tok, _ = _load(HfTokenizer.from_str(json.dumps(data)), tmp_path, "step")
    assert_same_ids(hf, tok, texts)
