"""Acceptance of training like a model (bpe_spark/training/like.py): ``train_like`` gives what
transformers' ``PreTrainedTokenizerFast.train_new_from_iterator`` gives (merges, vocabulary ids,
added tokens, model options, post-processor, then the ids of 300 lines of each shared corpus
and of the edge cases) for the layouts of published tokenizer.json files, each built here with
``tokenizers``: GPT-2's byte level, chained Splits + ByteLevel (Llama 3 / DeepSeek style, with
non-special added tokens), SentencePiece-style Metaspace and Llama 2's Prepend/Replace (byte
fallback, ``<unk>``), CLIP's (``continuing_subword_prefix: ""``, ``end_of_word_suffix:
"</w>"``), and a ``##`` prefix and a ``</w>`` suffix alone. The export loads in ``tokenizers``
and transformers with our ids; what the base decides is refused."""

from __future__ import annotations

import json
import pickle
from functools import cache

import pytest
from tests.hf_cases import CORPUS_NAMES, DEEPSEEK_V3_PATTERNS, EDGE_CASES, LLAMA3_PATTERN, corpus_lines

from bpe_spark import Tokenizer, TrainerConfig
from bpe_spark.errors import ConfigError
from bpe_spark.models.load import export_model
from bpe_spark.training.like import LikeStart, train_like, train_like_from_counts

tokenizers = pytest.importorskip("tokenizers")
transformers = pytest.importorskip("transformers")
from tokenizers import AddedToken, Regex, decoders, models, normalizers, pre_tokenizers, processors, trainers  # noqa: E402

TRAIN_LINES = 750  # per corpus: 3,000 documents
ENCODE_LINES = 300
CLIP_PATTERN = r"""<\|startoftext\|>|<\|endoftext\|>|'s|'t|'re|'ve|'m|'ll|'d|[\p{L}]+|[\p{N}]|[^\s\p{L}\p{N}]+"""


def _split(pattern: str, behavior: str = "isolated", invert: bool = False):
    return pre_tokenizers.Split(Regex(pattern), behavior=behavior, invert=invert)


def _byte_level_no_regex():
    return pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)


def _metaspace_decoder():
    return decoders.Sequence([decoders.Replace("\u2581", " "), decoders.ByteFallback(), decoders.Fuse(),
                              decoders.Strip(" ", 1, 0)])


def _base(layout: str):
    """A base tokenizer of ``layout``, trained by tokenizers on a few lines: (Tokenizer, its
    BpeTrainer options)."""
    options: dict = {}
    if layout == "gpt2":
        tok = tokenizers.Tokenizer(models.BPE())
        tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
        tok.decoder = decoders.ByteLevel()
        tok.post_processor = processors.ByteLevel(trim_offsets=False)
        specials = ["<|endoftext|>"]
    elif layout == "splits":
        tok = tokenizers.Tokenizer(models.BPE(ignore_merges=True))
        tok.normalizer = normalizers.NFC()
        tok.pre_tokenizer = pre_tokenizers.Sequence(
            [_split(LLAMA3_PATTERN), *(_split(p) for p in DEEPSEEK_V3_PATTERNS[:2]), _byte_level_no_regex()])
        tok.decoder = decoders.ByteLevel()
        specials = ["<|begin_of_text|>", "<|end_of_text|>", "<|eot_id|>"]
    elif layout in ("metaspace", "llama2"):
        tok = tokenizers.Tokenizer(models.BPE(unk_token="<unk>", byte_fallback=True, fuse_unk=True))
        if layout == "metaspace":
            tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement="\u2581", prepend_scheme="first", split=True)
        else:
            tok.normalizer = normalizers.Sequence([normalizers.Prepend("\u2581"), normalizers.Replace(" ", "\u2581")])
        tok.decoder = _metaspace_decoder()
        specials = ["<unk>", "<s>", "</s>"]
    elif layout == "clip":
        tok = tokenizers.Tokenizer(models.BPE(continuing_subword_prefix="", end_of_word_suffix="</w>",
                                              unk_token="<|endoftext|>"))
        tok.normalizer = normalizers.Sequence([normalizers.NFC(), normalizers.Replace(Regex(r"\s+"), " "),
                                               normalizers.Lowercase()])
        tok.pre_tokenizer = pre_tokenizers.Sequence(
            [_split(CLIP_PATTERN, "removed", invert=True), pre_tokenizers.ByteLevel(add_prefix_space=False)])
        tok.decoder = decoders.ByteLevel()
        specials = ["<|startoftext|>", "<|endoftext|>"]
        options = {"continuing_subword_prefix": "", "end_of_word_suffix": "</w>"}
    elif layout == "prefix":
        tok = tokenizers.Tokenizer(models.BPE(continuing_subword_prefix="##", unk_token="[UNK]"))
        tok.pre_tokenizer = pre_tokenizers.Whitespace()
        specials = ["[UNK]", "[CLS]", "[SEP]"]
        options = {"continuing_subword_prefix": "##"}
    elif layout == "suffix":
        tok = tokenizers.Tokenizer(models.BPE(end_of_word_suffix="</w>", unk_token="<unk>"))
        tok.normalizer = normalizers.Lowercase()
        tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
        tok.decoder = decoders.BPEDecoder(suffix="</w>")
        specials = ["<unk>"]
        options = {"end_of_word_suffix": "</w>"}
    else:
        raise AssertionError(layout)
    tok.train_from_iterator(corpus_lines("en_books", 200), trainers.BpeTrainer(
        vocab_size=400, special_tokens=specials, show_progress=False, **options))
    if layout == "splits":  # non-special added tokens, and a nested post-processor
        tok.add_tokens([AddedToken("<tool>", normalized=False), AddedToken(" the end", normalized=True)])
        tok.post_processor = processors.Sequence([
            processors.ByteLevel(trim_offsets=False),
            processors.TemplateProcessing(single="<|begin_of_text|> $A", pair="<|begin_of_text|> $A $B:1",
                                          special_tokens=[("<|begin_of_text|>", 0)]),
        ])
    elif layout in ("metaspace", "llama2"):
        tok.post_processor = processors.TemplateProcessing(
            single="<s> $A", pair="<s> $A <s> $B", special_tokens=[("<s>", tok.token_to_id("<s>"))])
    elif layout == "clip":
        tok.post_processor = processors.RobertaProcessing(  # sep, cls
            ("<|endoftext|>", tok.token_to_id("<|endoftext|>")), ("<|startoftext|>", tok.token_to_id("<|startoftext|>")),
            trim_offsets=False, add_prefix_space=False)
    return tok


LAYOUTS = {  # layout: the vocab_size of the new tokenizer
    "gpt2": 1200, "splits": 1200, "metaspace": 7000, "llama2": 7000, "clip": 1400, "prefix": 9000, "suffix": 9000,
}
AFFIXED = ("clip", "prefix", "suffix")  # tokenizers numbers their affixed symbols in hash-map order


def training_texts() -> list[str]:
    return [line for name in CORPUS_NAMES for line in corpus_lines(name, TRAIN_LINES)]


def encode_texts() -> list[str]:
    return [*EDGE_CASES.values(), *(line for name in CORPUS_NAMES for line in corpus_lines(name, ENCODE_LINES))]


@cache
def _files(layout: str, tmp: str) -> str:
    path = f"{tmp}/{layout}-base.json"
    _base(layout).save(path)
    return path


def _files_post_processor(layout: str, tmp: str):
    with open(_files(layout, tmp), encoding="utf-8") as fh:
        return json.load(fh)["post_processor"]


@cache
def reference(layout: str, tmp: str) -> dict:
    """transformers' train_new_from_iterator of the base, as tokenizer.json content."""
    base = transformers.PreTrainedTokenizerFast(tokenizer_object=tokenizers.Tokenizer.from_file(_files(layout, tmp)))
    new = base.train_new_from_iterator(training_texts(), LAYOUTS[layout])
    return json.loads(new._tokenizer.to_str())


@cache
def ours(layout: str, tmp: str):
    """train_like of the base (affixed symbols in our order)."""
    return train_like(training_texts(), Tokenizer.load(_files(layout, tmp)), TrainerConfig(vocab_size=LAYOUTS[layout]))


def ours_as_reference(layout: str, tmp: str, monkeypatch):
    """train_like of the base, the affixed symbols numbered as tokenizers numbered them."""
    if layout not in AFFIXED:
        return ours(layout, tmp)
    vocab = reference(layout, tmp)["model"]["vocab"]  # tokenizers' order of this run (it varies)
    monkeypatch.setattr(LikeStart, "affixed", lambda self, symbols: sorted(symbols, key=vocab.__getitem__))
    return train_like(training_texts(), Tokenizer.load(_files(layout, tmp)), TrainerConfig(vocab_size=LAYOUTS[layout]))


@pytest.fixture(scope="module")
def tmp(tmp_path_factory) -> str:
    return str(tmp_path_factory.mktemp("like"))


@pytest.mark.parametrize("layout", LAYOUTS)
def test_train_like_is_train_new_from_iterator(layout, tmp, monkeypatch):
    """Merges, vocabulary ids, added tokens, model options and post-processor are transformers',
    and so are the ids of every line of the shared corpora and of the edge cases."""
    want = reference(layout, tmp)
    tok = ours_as_reference(layout, tmp, monkeypatch)
    got = tok.pipeline.spec
    assert len(want["model"]["merges"]) > 300
    assert [list(m) for m in got["model"]["merges"]] == want["model"]["merges"]
    assert got["model"]["vocab"] == want["model"]["vocab"]
    options = {k: v for k, v in want["model"].items() if k not in ("vocab", "merges", "dropout")}
    assert {k: got["model"].get(k) for k in options} == options
    assert got["added_tokens"] == want["added_tokens"]
    if _files_post_processor(layout, tmp) is None:  # transformers' class gives one that adds nothing
        assert got.get("post_processor") is None and not want["post_processor"]["special_tokens"]
    else:
        assert got["post_processor"] == want["post_processor"]
    hf = tokenizers.Tokenizer.from_str(json.dumps(want))
    for text in encode_texts():
        assert tok.encode(text, allowed_special="all") == hf.encode(text, add_special_tokens=False).ids, text[:60]


@pytest.mark.parametrize("layout", ["prefix", "suffix"])
def test_affixed_symbols_in_code_point_order(layout, tmp):
    """Without tokenizers' run-dependent order, the prefixed / suffixed symbols get their ids in
    code-point order after the alphabet; the set of them is tokenizers'."""
    tok = ours(layout, tmp)
    vocab, want = tok.pipeline.spec["model"]["vocab"], reference(layout, tmp)["model"]["vocab"]
    marker = "##" if layout == "prefix" else "</w>"
    mine = sorted((i, t) for t, i in vocab.items() if marker in t and len(t) == len(marker) + 1)
    assert [t for _, t in mine] == sorted(t for _, t in mine)
    assert {t for _, t in mine} == {t for t in want if marker in t and len(t) == len(marker) + 1}
    assert [i for i, _ in mine] == list(range(mine[0][0], mine[0][0] + len(mine)))


@pytest.mark.parametrize("layout", ["gpt2", "metaspace", "splits"])
def test_export_loads_in_tokenizers_and_transformers(layout, tmp, tmp_path):
    tok = ours(layout, tmp)
    path = tmp_path / "tokenizer.json"
    export_model(tok, "tokenizer.json", path)
    hf = tokenizers.Tokenizer.from_file(str(path))
    fast = transformers.PreTrainedTokenizerFast(tokenizer_file=str(path))
    for text in encode_texts()[:600]:
        ids = tok.encode(text, allowed_special="all")
        assert hf.encode(text, add_special_tokens=False).ids == ids, text[:60]
        assert fast.encode(text, add_special_tokens=False) == ids, text[:60]


def test_special_tokens_are_text_while_training(tmp):
    """transformers trains with the added tokens removed: their text is counted as any text."""
    base = Tokenizer.load(_files("gpt2", tmp))
    tok = train_like(["<|endoftext|>"] * 5, base, TrainerConfig(vocab_size=265))
    assert tok.pipeline.spec["model"]["merges"][0] == ["<", "|"]
    assert tok.special_tokens == {"<|endoftext|>": 0}


def test_like_start_pickles(tmp):
    base = Tokenizer.load(_files("suffix", tmp))
    start = LikeStart(base, TrainerConfig(vocab_size=1000))
    counts = start.pretokenizer().count(["Low lower, lowest."])
    again = pickle.loads(pickle.dumps(start))
    table, other = start.table(counts), again.table(counts)
    assert table.values == other.values
    assert [again.words(p, other) for p in counts] == [start.words(p, table) for p in counts]


@pytest.mark.parametrize("setting, name", [
    ({"pattern": "cl100k"}, "pattern"),
    ({"special_tokens": ("<x>",)}, "special_tokens"),
    ({"scheme": "char"}, "scheme"),
    ({"lowercase": True}, "lowercase"),
])
def test_refuses_what_the_base_decides(setting, name, tmp):
    base = Tokenizer.load(_files("gpt2", tmp))
    with pytest.raises(ConfigError, match=rf"^{name}=.* does not apply when training like a model: the base model") as info:
        train_like_from_counts({"Ġab": 2}, base, TrainerConfig(vocab_size=300, **setting))
    assert "\n" not in str(info.value)


def test_refuses_a_vocab_size_below_the_alphabet(tmp):
    base = Tokenizer.load(_files("metaspace", tmp))
    chars = "".join(chr(0x4E00 + i) for i in range(400))  # 3 special tokens + 400 characters
    with pytest.raises(ConfigError, match=r"^vocab_size=300 is below .* \(403 tokens\); set vocab_size >= 403$"):
        train_like_from_counts({chars: 2}, base, TrainerConfig(vocab_size=300))


def test_min_frequency_and_early_stop_as_transformers(tmp):
    """``min_frequency`` is BpeTrainer's (passed through transformers' kwargs); the run stops
    below it and says so."""
    texts = training_texts()[:1500]
    base = transformers.PreTrainedTokenizerFast(tokenizer_object=tokenizers.Tokenizer.from_file(_files("gpt2", tmp)))
    want = json.loads(base.train_new_from_iterator(texts, 5000, min_frequency=40)._tokenizer.to_str())
    tok = train_like(texts, Tokenizer.load(_files("gpt2", tmp)), TrainerConfig(vocab_size=5000, min_frequency=40))
    assert tok.pipeline.spec["model"]["vocab"] == want["model"]["vocab"]
    assert [list(m) for m in tok.pipeline.spec["model"]["merges"]] == want["model"]["merges"]
    assert "min_frequency=40" in tok.metadata["stats"]["stopped_early"]


def test_like_a_model_trained_here(tmp_path):
    """A base bpe-spark trained (no imported pipeline) is retrained as transformers retrains its
    exported tokenizer.json: the special token first, the byte alphabet, then the merges."""
    from bpe_spark import train

    texts = training_texts()[:1500]
    base = train(texts[:300], TrainerConfig(vocab_size=400, pattern="cl100k", special_tokens=("<|endoftext|>",)))
    assert base.pipeline is None
    export_model(base, "tokenizer.json", tmp_path / "tokenizer.json")
    fast = transformers.PreTrainedTokenizerFast(tokenizer_file=str(tmp_path / "tokenizer.json"))
    want = json.loads(fast.train_new_from_iterator(texts, 900)._tokenizer.to_str())
    tok = train_like(texts, base, TrainerConfig(vocab_size=900))
    assert tok.pipeline.spec["model"]["vocab"] == want["model"]["vocab"]
    assert [list(m) for m in tok.pipeline.spec["model"]["merges"]] == want["model"]["merges"]
    assert tok.pipeline.spec["added_tokens"] == want["added_tokens"]
    assert tok.special_tokens == {"<|endoftext|>": 0}


def test_refuses_an_unk_token_that_is_no_special_token():
    """transformers keeps only the special added tokens: a model unk_token that is not one would
    be missing from the new vocabulary (tokenizers then fails on an unknown character)."""
    spec = {"model": {"type": "BPE", "vocab": {"<unk>": 0, "a": 1, "b": 2}, "merges": [], "unk_token": "<unk>"}}
    with pytest.raises(ConfigError, match=r"^the base model's unk_token '<unk>' is not one of its special tokens"):
        train_like_from_counts({"ab": 3}, Tokenizer(pipeline=spec), TrainerConfig(vocab_size=300))
