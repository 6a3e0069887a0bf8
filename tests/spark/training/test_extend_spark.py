"""Continued training on Spark equals continued training in process (docs/design.md 1.6, 2.1):
``train(df, cfg, base=tok)`` and ``train_from_counts(counts, cfg, base=tok)`` give the core's
extended tokenizer, on the driver and in exact rounds, for a byte-level model trained here, GPT-2
files, cl100k's ``.tiktoken`` file (rank merges) and an imported ``tokenizer.json`` pipeline;
a checkpointed run resumes to the same model, and only with the same base."""

from __future__ import annotations

import json

import pytest
from tests.conftest import PEERS, corpus_lines

from bpe_spark import TrainerConfig, Tokenizer
from bpe_spark import train as core_train
from bpe_spark import train_from_counts as core_train_from_counts
from bpe_spark.errors import CheckpointError, ConfigError
from bpe_spark.spark import train, train_from_counts
from bpe_spark.spark.training.count import choose_engine
from bpe_spark.training.extend import BaseStart, count_with_base

pytestmark = pytest.mark.spark
EOT = "<|endoftext|>"
SAMPLE = "Hello world, the quick brown fox jumps over the lazy dog <|endoftext|> again!"


@pytest.fixture(scope="module")
def lines():
    return corpus_lines("en_books", 25_000)


@pytest.fixture(scope="module")
def docs(spark, lines):
    df = spark.createDataFrame([(line,) for line in lines], "text string").repartition(2).cache()
    yield df
    df.unpersist()


@pytest.fixture(scope="module")
def native():
    """A byte-level model of our own, with a special token."""
    return core_train(corpus_lines("tiny_shakespeare", 50_000), TrainerConfig(vocab_size=400, special_tokens=(EOT,)))


def pipeline_base(tmp_path, added: str | None) -> Tokenizer:
    """An imported tokenizer.json pipeline: Split then ByteLevel(use_regex=False), a special token
    and an ``added`` non-special token (what makes it a pipeline, not the simple byte-level
    layout); None: the longest all-letter token of the model's vocabulary, added again."""
    from tokenizers import AddedToken, Regex, decoders, models, pre_tokenizers, trainers
    from tokenizers import Tokenizer as HfTokenizer

    hf = HfTokenizer(models.BPE())
    hf.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(r"\s?\w+|\s?[^\s\w]+|\s+"), "isolated"),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
    ])
    hf.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=500, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  special_tokens=[EOT], show_progress=False)
    hf.train_from_iterator(corpus_lines("tiny_shakespeare", 30_000), trainer)
    if added is None:
        added = max(sorted(token for token in hf.get_vocab() if token.isascii() and token.isalpha()), key=len)
    hf.add_tokens([AddedToken(added, special=False)])
    path = tmp_path / "tokenizer.json"
    hf.save(str(path))
    return Tokenizer.load(path)


def cl100k_base() -> Tokenizer:
    from tests.peers.test_peer_tiktoken import tiktoken_cache_file

    return Tokenizer.load(tiktoken_cache_file("cl100k_base"))


def assert_same_extension(tok, expected, base):
    assert tok.fingerprint == expected.fingerprint
    assert tok.merges == expected.merges
    assert tok.vocab == expected.vocab
    assert tok.special_tokens == expected.special_tokens
    assert tok.metadata["merge_counts"] == expected.metadata["merge_counts"]
    assert tok.metadata["base"] == expected.metadata["base"]
    assert tok.metadata["base"]["fingerprint"] == base.fingerprint
    assert tok.encode(SAMPLE, allowed_special="all") == expected.encode(SAMPLE, allowed_special="all")
    assert tok.merges[: len(base.merge_ids)] == base.merges  # the base's merges first, kept


def extend_both_ways(spark, docs, lines, base, added=40, rounds_budget=50):
    """Extended in process, then on Spark (``docs``: the ``lines``) on the driver and in rounds
    forced by a small driver budget (a large base ships its table to every round's tasks: a
    larger budget, fewer rounds): the same model each time."""
    cfg = TrainerConfig(vocab_size=base.vocab_size + added)
    expected = core_train(lines, cfg, base=base)
    assert expected.vocab_size == base.vocab_size + added  # merges, and the characters the base lacks
    for budget, mode in (("auto", "driver"), (rounds_budget, "rounds")):
        tok = train(docs, cfg, base=base, driver_budget=budget)
        assert tok.metadata["stats"]["mode"] == mode
        assert_same_extension(tok, expected, base)
    return expected


def test_extending_a_byte_level_model_of_ours_on_spark_equals_in_process(spark, docs, lines, native):
    assert choose_engine(BaseStart(native).pretokenizer()) == "jvm"  # its preset pattern: counted by the JVM
    extend_both_ways(spark, docs, lines, native)


def test_extending_gpt2_files_on_spark_equals_in_process(spark, docs, lines):
    gpt2 = Tokenizer.load(PEERS / "cs336" / "gpt2_vocab.json")
    expected = extend_both_ways(spark, docs, lines, gpt2, rounds_budget=0.5)
    assert expected.metadata["base"]["format"] == "gpt2"


def test_extending_cl100k_ranks_on_spark_equals_in_process(spark, docs, lines):
    cl100k = cl100k_base()
    assert cl100k.merge_rule == "ranks"
    fewer = lines[:300]
    extend_both_ways(spark, spark.createDataFrame([(line,) for line in fewer], "text string"), fewer, cl100k, added=30,
                     rounds_budget=0.5)


@pytest.mark.parametrize("added", [None, " the end"])  # None: a token of model.vocab, its id its own
def test_extending_a_tokenizer_json_pipeline_on_spark_equals_in_process(spark, docs, lines, tmp_path, added):
    base = pipeline_base(tmp_path, added)
    assert base.pipeline is not None
    assert choose_engine(BaseStart(base).pretokenizer()) == "python"
    with pytest.raises(ConfigError, match="engine='python'"):
        choose_engine(BaseStart(base).pretokenizer(), "jvm")
    extended = extend_both_ways(spark, docs, lines, base)
    added = base.pipeline.spec["added_tokens"][-1]["content"]
    assert extended.encode(f"x{added}y") == [*base.encode("x"), *base.encode(added), *base.encode("y")]


def test_characters_a_char_level_base_lacks_are_gathered_on_spark_as_in_process(spark, tmp_path):
    """A pipeline base without byte fallback (Whitespace, characters of English text only)
    extended on multilingual text: the characters it lacks become new tokens, gathered by the
    rounds' tasks (``start.alphabet``) as the core takes them."""
    from tokenizers import Tokenizer as HfTokenizer
    from tokenizers import models, pre_tokenizers, trainers

    hf = HfTokenizer(models.BPE())
    hf.pre_tokenizer = pre_tokenizers.Whitespace()
    hf.train_from_iterator(corpus_lines("tiny_shakespeare", 20_000),
                           trainers.BpeTrainer(vocab_size=200, special_tokens=[EOT], show_progress=False))
    hf.save(str(tmp_path / "tokenizer.json"))
    base = Tokenizer.load(tmp_path / "tokenizer.json")
    assert base.pipeline is not None
    lines = corpus_lines("multilingual", 8_000)
    docs = spark.createDataFrame([(line,) for line in lines], "text string").repartition(2)
    expected = extend_both_ways(spark, docs, lines, base, added=60, rounds_budget=0.5)
    assert len(expected.merge_ids) - len(base.merge_ids) < 60  # new characters took some of the room


def test_train_from_counts_with_a_base_equals_the_core(spark, lines, native):
    counts = count_with_base(lines, native)
    cfg = TrainerConfig(vocab_size=native.vocab_size + 60, min_frequency=2, tie_break="lexicographic")
    expected = core_train_from_counts(counts, cfg, base=native)
    frame = spark.createDataFrame(list(counts.items()), "pretoken string, count long").repartition(3)
    for budget in ("auto", 40):
        assert_same_extension(train_from_counts(frame, cfg, base=native, driver_budget=budget), expected, native)


def test_an_interrupted_extension_resumes_to_the_same_model_and_only_with_its_base(spark, docs, lines, native,
                                                                                 tmp_path):
    cfg = TrainerConfig(vocab_size=native.vocab_size + 60)
    expected = core_train(lines, cfg, base=native)
    checkpoint = str(tmp_path / "ckpt")

    class Interrupted(Exception):
        pass

    def stop_after_one(record):
        raise Interrupted

    with pytest.raises(Interrupted):
        train(docs, cfg, base=native, driver_budget=50, checkpoint_dir=checkpoint, on_round=stop_after_one)
    recorded = json.loads((tmp_path / "ckpt" / "training.json").read_text())
    assert recorded["start"] == {"kind": "extend", "fingerprint": native.fingerprint}
    # another base, or none, is refused in one line naming both
    other = core_train(lines[:200], TrainerConfig(vocab_size=300, special_tokens=(EOT,)))
    for base, said in ((other, f"this run is extending the model {other.fingerprint}"),
                       (None, "this run is training afresh")):
        with pytest.raises(CheckpointError) as caught:
            train(docs, cfg, base=base, driver_budget=50, checkpoint_dir=checkpoint, resume=True)
        message = str(caught.value)
        assert "\n" not in message and said in message and f"extending the model {native.fingerprint}" in message
    seen = []
    tok = train(docs, cfg, base=native, driver_budget=50, checkpoint_dir=checkpoint, resume=True, on_round=seen.append)
    assert_same_extension(tok, expected, native)
    assert tok.metadata["rounds"][0].get("resumed") and seen and seen[0]["round"] == 2


def test_settings_the_base_decides_are_refused_in_one_line(spark, docs, native):
    for cfg, said in ((TrainerConfig(vocab_size=500, pattern="words"), "pattern='words' does not apply"),
                      (TrainerConfig(vocab_size=300), "below the base model's vocabulary")):
        with pytest.raises(ConfigError, match=said) as caught:
            train(docs, cfg, base=native)
        assert "\n" not in str(caught.value)
    with pytest.raises(ConfigError, match="exclude each other"):
        train(docs, TrainerConfig(vocab_size=500), base=native, like=native)


def test_like_on_spark_equals_train_like_in_process(spark, docs, lines, tmp_path):
    from bpe_spark.training.like import train_like

    base = pipeline_base(tmp_path, None)
    cfg = TrainerConfig(vocab_size=400)
    expected = train_like(lines, base, cfg)
    for budget, mode in (("auto", "driver"), (0.5, "rounds")):
        tok = train(docs, cfg, like=base, driver_budget=budget)
        assert tok.metadata["stats"]["mode"] == mode
        assert tok.fingerprint == expected.fingerprint and tok.merges == expected.merges
        assert tok.metadata["like"]["fingerprint"] == base.fingerprint
