"""Acceptance 3 of issue 2 against Hugging Face ``tokenizers``: on the first 4 MB of en_books,
zh_classics and multilingual (each line a document with its ``\\n``), byte scheme, gpt2 pattern,
vocab 8000, tie-break hf, our merges equal those of its BpeTrainer, in order; and our exported
tokenizer.json, loaded by ``tokenizers.Tokenizer.from_file``, gives the ids our Tokenizer gives."""

from __future__ import annotations

import json

import pytest
from tests.conftest import corpus_lines
from tokenizers import Tokenizer as HfTokenizer
from tokenizers import decoders, models, pre_tokenizers, trainers

from bpe_spark import Tokenizer, TrainerConfig, train
from bpe_spark.models.load import export_model
from bpe_spark.bpe.symbols import bytes_to_display

VOCAB_SIZE = 8000
CORPUS_BYTES = 4_000_000


def _hf_merges(lines: list[str]) -> list[str]:
    hf = HfTokenizer(models.BPE())
    hf.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    hf.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB_SIZE,
        show_progress=False,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    hf.train_from_iterator(lines, trainer)
    merges = json.loads(hf.to_str())["model"]["merges"]
    return [" ".join(m) if isinstance(m, list) else m for m in merges]


@pytest.fixture(scope="module", params=["en_books", "zh_classics", "multilingual"])
def trained(request):
    """One training run per corpus, shared by the tests of this module."""
    lines = corpus_lines(request.param, CORPUS_BYTES)
    cfg = TrainerConfig(vocab_size=VOCAB_SIZE, scheme="byte", pattern="gpt2", tie_break="hf")
    return request.param, lines, train(lines, cfg)


def test_merges_equal_bpe_trainer(trained):
    name, lines, tok = trained
    ours = [f"{bytes_to_display(left)} {bytes_to_display(right)}" for left, right in tok.merges]
    theirs = _hf_merges(lines)
    assert len(ours) == VOCAB_SIZE - 256 == tok.vocab_size - 256
    assert ours == theirs, name


def test_exported_tokenizer_json_gives_our_ids(trained, tmp_path):
    name, lines, tok = trained
    path = export_model(tok, "tokenizer.json", tmp_path / "tokenizer.json")[0]
    hf = HfTokenizer.from_file(str(path))
    ours = tok.encode_batch(lines)
    theirs = [encoding.ids for encoding in hf.encode_batch(lines)]
    assert theirs == ours, name
    assert sum(map(len, ours)) < sum(len(line.encode("utf-8")) for line in lines) / 2
    sample = "".join(lines[:200])
    assert hf.decode(tok.encode(sample)) == sample
    back = Tokenizer.load(path)
    assert back.merge_ids == tok.merge_ids and back.encode(sample) == tok.encode(sample)
