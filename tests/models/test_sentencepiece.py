"""SentencePiece BPE ``.model`` files (issue 14): a Tokenizer loaded from one gives
``SentencePieceProcessor.encode(text)``'s ids (sentencepiece itself is the reference), line for
line, on 2,000 lines of each shared corpus and the edge cases, and decodes as its ``decode``
does. Models: one trained here (identity normalization, byte fallback, user-defined pieces
including "aa", which SentencePiece finds before any merge), Mistral's v1 and v3
``tokenizer.model`` as mistral-common ships them (v3: 750 CONTROL and 20 USER_DEFINED pieces),
and trained variants (no byte fallback with remove_extra_whitespaces; no dummy prefix).
Unigram and nmt_nfkc models are refused in one line naming the file, the field and the value."""

from __future__ import annotations

import pickle
import sys
from pathlib import Path

import mistral_common
import pytest
import sentencepiece as spm
from tests.hf_cases import CORPUS_NAMES, EDGE_CASES, corpus_lines

from bpe_spark import Tokenizer
from bpe_spark.errors import ConfigError, ModelFormatError
from bpe_spark.models.load import detect_format

MISTRAL_DATA = Path(mistral_common.__file__).parent / "data"
EXTRA = {
    "user_defined": "<|user|>hi aa <|user|> aab [REF]x",
    "repeats": "aaaa aaaaaaa ....... ———— !!!!",
    "control_text": "<s>x</s> <unk> [INST] hi [/INST]",
    "spaces": "  a  b  ",
    "metaspace_only": "\u2581",
    "after_user_defined": "<|user|></s>",
}
TEXTS = {**EDGE_CASES, **EXTRA}


def train_model(directory: Path, name: str, *, corpora=CORPUS_NAMES, lines: int = 1500,
                vocab_size: int = 3000, **options) -> Path:
    """A BPE model of ``vocab_size`` pieces trained on ``lines`` lines of each of ``corpora``
    (about a second)."""
    corpus = directory / f"{'-'.join(corpora)}-{lines}.txt"
    if not corpus.exists():
        corpus.write_text("".join(line for c in corpora for line in corpus_lines(c, lines)), encoding="utf-8")
    settings = {"input": str(corpus), "model_prefix": str(directory / name), "vocab_size": vocab_size,
                "model_type": "bpe", "byte_fallback": True, "normalization_rule_name": "identity",
                "character_coverage": 0.98, "num_threads": 1, "minloglevel": 2, "remove_extra_whitespaces": False}
    spm.SentencePieceTrainer.train(**{**settings, **options})
    return directory / f"{name}.model"


@pytest.fixture(scope="module")
def models(tmp_path_factory) -> dict[str, Path]:
    directory = tmp_path_factory.mktemp("spm")
    return {
        "trained": train_model(directory, "trained", user_defined_symbols=["<|user|>", "aa"]),
        "no_fallback": train_model(directory, "no_fallback", byte_fallback=False, remove_extra_whitespaces=True),
        "no_prefix": train_model(directory, "no_prefix", add_dummy_prefix=False),
        "mistral_v1": MISTRAL_DATA / "tokenizer.model.v1",
        "mistral_v3": MISTRAL_DATA / "mistral_instruct_tokenizer_240323.model.v3",
    }


def texts(lines: int) -> list[str]:
    return [*TEXTS.values(), *(line for name in CORPUS_NAMES for line in corpus_lines(name, lines))]


def assert_parity(path: Path, lines: int, decode_lines: int, *, decode_skip=()) -> Tokenizer:
    tok = Tokenizer.load(path)
    ref = spm.SentencePieceProcessor(model_file=str(path))
    for text in texts(lines):
        assert tok.encode_ordinary(text) == ref.encode(text), text
    for text in texts(decode_lines):
        ids = ref.encode(text)
        if text not in decode_skip:
            assert tok.decode(ids) == ref.decode(ids), text
    return tok


def test_trained_model_gives_sentencepiece_ids(models):
    tok = assert_parity(models["trained"], 2000, 500)
    assert tok.special_tokens == {"<unk>": 0, "<s>": 1, "</s>": 2}
    assert tok.vocab_size == 3000


def test_mistral_v3_gives_sentencepiece_ids(models):
    tok = assert_parity(models["mistral_v3"], 2000, 150)
    assert len(tok.special_tokens) == 751 and tok.vocab_size == 32768


def test_mistral_v1_gives_sentencepiece_ids(models):
    assert_parity(models["mistral_v1"], 300, 300)


def test_variants_give_sentencepiece_ids(models):
    # subtle: with remove_extra_whitespaces, SentencePiece's decode drops the leading ▁ of every
    # piece until some text is out, so a text that starts with a ▁ of its own loses it
    starts_with_metaspace = {text for text in TEXTS.values() if text.startswith("\u2581")}
    assert_parity(models["no_fallback"], 500, 500, decode_skip=starts_with_metaspace)
    assert_parity(models["no_prefix"], 500, 500)
    tok = Tokenizer.load(models["no_fallback"])
    ref = spm.SentencePieceProcessor(model_file=str(models["no_fallback"]))
    ids = ref.encode("a\t\tb")
    assert tok.encode_ordinary("a\t\tb") == ids and ids.count(ref.unk_id()) == 1  # one <unk> for the run


def test_control_pieces_are_special_tokens(models):
    path = models["mistral_v3"]
    tok = Tokenizer.load(path)
    ref = spm.SentencePieceProcessor(model_file=str(path))
    assert tok.encode("<s>[INST] hi [/INST]", allowed_special="all") == [
        ref.bos_id(), ref.piece_to_id("[INST]"), *ref.encode(" hi "), ref.piece_to_id("[/INST]")
    ]
    assert tok.encode_ordinary("[INST]") == ref.encode("[INST]")  # sentencepiece reads it as text


def test_saved_and_pickled_models_keep_the_ids(models, tmp_path):
    tok = Tokenizer.load(models["trained"])
    tok.save(tmp_path / "model")
    for back in (Tokenizer.load(tmp_path / "model"), pickle.loads(pickle.dumps(tok))):
        for text in texts(50):
            assert back.encode_ordinary(text) == tok.encode_ordinary(text)


def test_recognised_by_content(models, tmp_path):
    renamed = tmp_path / "spiece.bin"
    renamed.write_bytes(models["trained"].read_bytes())
    assert detect_format(renamed) == "sentencepiece"
    folder = tmp_path / "hub"
    folder.mkdir()
    (folder / "tokenizer.model").write_bytes(models["mistral_v1"].read_bytes())
    assert detect_format(folder) == "sentencepiece"
    ref = spm.SentencePieceProcessor(model_file=str(models["mistral_v1"]))
    assert Tokenizer.load(folder).encode_ordinary("Hello world") == ref.encode("Hello world")


@pytest.mark.parametrize(("options", "field", "found"), [
    ({"model_type": "unigram"}, "trainer_spec.model_type", "UNIGRAM"),
    ({"normalization_rule_name": "nmt_nfkc"}, "normalizer_spec.precompiled_charsmap", "nmt_nfkc"),
])
def test_unsupported_models_fail_in_one_line(tmp_path, options, field, found):
    path = train_model(tmp_path, "refused", corpora=("en_books",), lines=300, vocab_size=500, **options)
    with pytest.raises(ModelFormatError) as caught:
        Tokenizer.load(path)
    message = str(caught.value)
    assert "\n" not in message and message.startswith(f"{path}: field '{field}'") and found in message


def test_missing_package_is_one_line(models, monkeypatch):
    monkeypatch.setitem(sys.modules, "sentencepiece", None)
    with pytest.raises(ConfigError, match=r"needs the sentencepiece package \(pip install sentencepiece\)$"):
        Tokenizer.load(models["mistral_v1"])
