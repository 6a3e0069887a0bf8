"""Training on Spark gives exactly the core's merges (docs/design.md 1.4, 2.1 step 3; issue 3 acceptance)."""

from __future__ import annotations

import pytest
from tests.conftest import PEERS, corpus_text

from bpe_spark import TrainerConfig
from bpe_spark import train as core_train
from bpe_spark import train_from_counts as core_train_from_counts
from bpe_spark.errors import ConfigError, EmptyCorpusError, OutputExistsError
from bpe_spark.spark import ColumnError, read_documents, train, train_from_counts
from bpe_spark.spark.training.round_tasks import _words_batch, apply_round_batches
from bpe_spark.spark.training.run import resolve_budget
from bpe_spark.bpe.symbols import display_to_bytes
from bpe_spark.training.trainer import build_engine
from bpe_spark.bpe.words import apply_merges, pair_rank_index

pytestmark = pytest.mark.spark


def spread_lines(name: str, target_bytes: int) -> list[str]:
    """About ``target_bytes`` of whole lines taken evenly across the corpus."""
    lines = corpus_text(name).splitlines(keepends=True)
    stride = max(1, sum(len(line.encode("utf-8")) for line in lines) // target_bytes)
    return [line for i, line in enumerate(lines) if i % stride == 0]


def frame(spark, docs, partitions):
    return spark.createDataFrame([(d,) for d in docs], "text string").repartition(partitions)


def assert_same_model(tok, expected):
    assert tok.merges == expected.merges
    assert tok.vocab == expected.vocab
    assert tok.special_tokens == expected.special_tokens
    assert tok.metadata["merge_counts"] == expected.metadata["merge_counts"]


# Every corpus twice; partitions 1, 3, 8, both tie-breaks and both schemes (and both end-of-word
# forms) each several times, without the full cross product.
MATRIX = [
    ("en_books", 1, "hf", "byte", "separate"),
    ("en_books", 8, "lexicographic", "char", "separate"),
    ("zh_classics", 3, "lexicographic", "byte", "separate"),
    ("zh_classics", 8, "hf", "char", "fused"),
    ("multilingual", 3, "hf", "byte", "separate"),
    ("multilingual", 1, "lexicographic", "char", "fused"),
    ("tiny_shakespeare", 8, "hf", "byte", "separate"),
    ("tiny_shakespeare", 3, "lexicographic", "char", "separate"),
]


@pytest.mark.parametrize(("name", "partitions", "tie_break", "scheme", "end_of_word"), MATRIX)
def test_spark_merges_equal_core_merges(spark, name, partitions, tie_break, scheme, end_of_word):
    lines = spread_lines(name, 250_000)
    if scheme == "byte":
        cfg = TrainerConfig(vocab_size=700, tie_break=tie_break, special_tokens=("<|endoftext|>",))
    else:
        cfg = TrainerConfig(vocab_size=100_000, max_merges=400, scheme="char", end_of_word=end_of_word,
                            tie_break=tie_break, pattern="words" if name != "zh_classics" else "gpt2")
    expected = core_train(lines, cfg)
    tok = train(frame(spark, lines, partitions), cfg)
    assert_same_model(tok, expected)
    stats = tok.metadata["stats"]
    assert stats["documents"] == sum(1 for line in lines if line)
    assert stats["bytes"] == sum(len(line.encode("utf-8")) for line in lines)
    assert stats["distinct_pretokens"] == expected.metadata["stats"]["distinct_pretokens"]
    assert stats["pretokens"] == expected.metadata["stats"]["pretokens"]
    assert stats["rounds"] == 1 and tok.metadata["rounds"][0]["merges"] == len(tok.merges)
    assert set(tok.metadata["timings"]) >= {"count_seconds", "collect_seconds", "merge_seconds", "total_seconds"}


# --- distributed rounds --------------------------------------------------------------------------
@pytest.fixture(scope="module")
def small_corpus():
    return spread_lines("tiny_shakespeare", 25_000)


def test_small_driver_budgets_give_the_single_round_merges(spark, small_corpus):
    cfg = TrainerConfig(vocab_size=300)
    expected = core_train(small_corpus, cfg)
    df = frame(spark, small_corpus, 3).cache()
    single = train(df, cfg)
    assert_same_model(single, expected)
    distinct = single.metadata["stats"]["distinct_pretokens"]
    for budget in (0.5, 0.25, 0.1, 0.01):
        tok = train(df, cfg, driver_budget=budget)
        assert_same_model(tok, expected)
        rounds = tok.metadata["rounds"]
        assert tok.metadata["stats"]["mode"] == "rounds"
        assert tok.metadata["stats"]["rounds"] == len(rounds) > 1
        assert sum(r["merges"] for r in rounds) == len(tok.merges)
        # the driver keeps at most half the budget of pretokens, and ships at most the budget of pairs
        assert all(r["frequent"] <= max(1, int(budget * distinct)) // 2 for r in rounds)
        assert all(r["shipped"] <= max(1, int(budget * distinct)) for r in rounds)
        assert rounds[0]["shipped"] > 0 and all(r["merges"] > 0 for r in rounds)
    df.unpersist()


def test_rounds_that_ship_few_pairs_stay_exact(spark, small_corpus, monkeypatch):
    """With room for 3 pairs a shipping, rounds ship again and again (each time the best count
    falls to what was left out), leave the tracked pairs out by a shuffle join, not a broadcast,
    and sum their changes by a shuffle, not on the driver; the merges stay the same."""
    from bpe_spark.spark.training import round_tasks
    from bpe_spark.spark.training import rounds as spark_rounds

    cfg = TrainerConfig(vocab_size=300)
    expected = core_train(small_corpus, cfg)
    df = frame(spark, small_corpus, 2)
    monkeypatch.setattr(spark_rounds, "_MAX_BROADCAST_PAIRS", 3)
    monkeypatch.setattr(spark_rounds, "_MAX_BROADCAST_TRACKED", 0)
    monkeypatch.setattr(spark_rounds, "_MAX_TOP_ROWS", 4)  # and the top-pairs query bound by its tasks
    monkeypatch.setattr(round_tasks, "DRIVER_SUMS", 0)
    tok = train(df, cfg, driver_budget=0.5)
    assert_same_model(tok, expected)
    rounds = tok.metadata["rounds"]
    assert sum(r["shipped"] > 0 for r in rounds) > 3 and all(r["shipped"] <= 3 for r in rounds)
    assert all(r["outside"] > 0 for r in rounds[:3])


@pytest.mark.parametrize("driver_sums", [16, 0])
def test_rounds_under_a_row_budget_cut_their_speculations_and_stay_exact(spark, small_corpus, monkeypatch,
                                                                         driver_sums):
    """At most 60 change rows a round (each partition its share, its first step whole), summed
    on the driver or by a shuffle: speculations are cut, and the merges stay the same."""
    from bpe_spark.spark.training import round_tasks
    from bpe_spark.spark.training import rounds as spark_rounds

    cfg = TrainerConfig(vocab_size=340)
    expected = core_train(small_corpus, cfg)
    df = frame(spark, small_corpus, 2)
    monkeypatch.setattr(spark_rounds, "_MAX_DELTA_ROWS", 60)
    monkeypatch.setattr(round_tasks, "DRIVER_SUMS", driver_sums)
    tok = train(df, cfg, driver_budget=0.3)
    assert_same_model(tok, expected)
    rounds = tok.metadata["rounds"]
    assert len(rounds) > 5 and all(r["merges"] > 0 for r in rounds)
    assert all(r["deltas"] <= 60 or r["speculated"] == 1 for r in rounds)


def test_char_scheme_rounds_take_the_alphabet_from_the_whole_corpus(spark):
    lines = spread_lines("multilingual", 25_000)
    cfg = TrainerConfig(vocab_size=100_000, max_merges=60, scheme="char", end_of_word="fused",
                        tie_break="lexicographic", pattern="words")
    expected = core_train(lines, cfg)
    tok = train(frame(spark, lines, 3), cfg, driver_budget=0.2)
    assert tok.metadata["stats"]["rounds"] > 1
    assert_same_model(tok, expected)


def test_resume_after_an_interruption_gives_the_uninterrupted_result(spark, small_corpus, tmp_path):
    cfg = TrainerConfig(vocab_size=300, tie_break="lexicographic")
    expected = core_train(small_corpus, cfg)
    df = frame(spark, small_corpus, 3)
    checkpoint = str(tmp_path / "ckpt")

    class Interrupted(Exception):
        pass

    def stop_after_two(record):
        if record["round"] == 2:
            raise Interrupted

    with pytest.raises(Interrupted):
        train(df, cfg, driver_budget=0.3, checkpoint_dir=checkpoint, on_round=stop_after_two)
    with pytest.raises(OutputExistsError, match=r"pass resume=True to continue it"):
        train(df, cfg, driver_budget=0.3, checkpoint_dir=checkpoint)
    with pytest.raises(ConfigError, match="another config"):
        train(df, cfg.replace(vocab_size=331), driver_budget=0.3, checkpoint_dir=checkpoint, resume=True)
    seen = []
    tok = train(df, cfg, driver_budget=0.3, checkpoint_dir=checkpoint, resume=True, on_round=seen.append)
    assert_same_model(tok, expected)
    rounds = tok.metadata["rounds"]
    assert [r.get("resumed", False) for r in rounds[:2]] == [True, True]
    assert seen and seen[0]["round"] == 3
    # a finished run resumed (now on the driver) is still the same model
    again = train(df, cfg, checkpoint_dir=checkpoint, resume=True)
    assert_same_model(again, expected)


# --- peers and edge cases ------------------------------------------------------------------------
def test_cs336_corpus_as_one_document_gives_the_reference_merges(spark):
    cs336 = PEERS / "cs336"
    docs = read_documents(spark, str(cs336 / "corpus.en"), document="file")
    cfg = TrainerConfig(vocab_size=500, special_tokens=("<|endoftext|>",), tie_break="lexicographic")
    tok = train(docs, cfg)
    reference = []
    for line in (cs336 / "train-bpe-reference-merges.txt").read_text(encoding="utf-8").splitlines():
        left, right = line.split(" ")
        reference.append((display_to_bytes(left), display_to_bytes(right)))
    assert len(reference) == 243
    assert tok.merges == reference
    assert tok.metadata["stats"]["documents"] == 1


def test_counts_above_32_bits_train_exactly(spark):
    big = 2**31
    counts = {"abcab": 3 * big + 7, "bcd": big + 5, "ab ab": big - 1, "dcba": 5 * big, "cd": 11, "e": 4 * big}
    cfg = TrainerConfig(vocab_size=265, pattern="whitespace")
    expected = core_train_from_counts(counts, cfg)
    df = spark.createDataFrame(list(counts.items()), "pretoken string, count long")
    for budget in (1.0, 2):
        tok = train_from_counts(df, cfg, driver_budget=budget)
        assert_same_model(tok, expected)
        assert tok.metadata["stats"]["pretokens"] == sum(counts.values())
        assert max(tok.metadata["merge_counts"]) > 2**32
    assert tok.metadata["stats"]["rounds"] > 1


def test_bad_inputs_raise_clear_errors(spark):
    cfg = TrainerConfig(vocab_size=300, special_tokens=("<|endoftext|>",))
    empty = spark.createDataFrame([("",), (None,), ("<|endoftext|>",)], "text string")
    with pytest.raises(EmptyCorpusError):
        train(empty, cfg)
    with pytest.raises(ColumnError, match="body"):
        train(empty, cfg, text_col="body")
    counts = spark.createDataFrame([("abc", 3)], "word string, n long")
    with pytest.raises(ColumnError, match="pretoken"):
        train_from_counts(counts, cfg)
    char_cfg = TrainerConfig(vocab_size=3, scheme="char")
    with pytest.raises(ConfigError, match="initial alphabet"):
        train(spark.createDataFrame([("abcdef",)], "text string"), char_cfg)


def test_apply_merges_replays_training_exactly():
    lines = spread_lines("tiny_shakespeare", 20_000)
    cfg = TrainerConfig(vocab_size=400)
    counts = dict(core_train_from_counts.__globals__["count_pretokens"](lines, cfg))
    engine = build_engine(counts, cfg)
    initial = [list(word) for word in engine.core.current_words()]
    merges = engine.run(max_new_tokens=144)
    triples = [(m.left, m.right, m.new_id) for m in merges]
    assert [apply_merges(word, triples) for word in initial] == engine.core.current_words()


def test_a_round_rewrites_only_the_words_holding_its_pairs():
    """apply_round_batches finds the words holding a round's pairs with array operations on the
    batches (sliced batches included) and gives what apply_merges gives word by word, in one
    engine over the partition's changed words as word by word."""
    lines = spread_lines("tiny_shakespeare", 20_000)
    cfg = TrainerConfig(vocab_size=400)
    counts = dict(core_train_from_counts.__globals__["count_pretokens"](lines, cfg))
    engine = build_engine(counts, cfg)
    engine.run(max_new_tokens=60)  # words as a later round holds them
    words = [w for w in engine.core.current_words() if len(w) > 1]
    triples = [(m.left, m.right, m.new_id) for m in engine.run(max_new_tokens=40)]
    ranks = pair_rank_index(triples)
    batch = _words_batch(list(range(len(words))), [7] * len(words), words)
    for table in (None, engine.table):
        for pieces in ([batch], [batch.slice(5, 300)], [batch.slice(0, 40), batch.slice(len(words) - 3)]):
            got = [row for out in apply_round_batches(iter(pieces), triples, table) for row in out.to_pylist()]
            expected = []
            for piece in pieces:
                for wid in piece.column(0).to_pylist():
                    word = apply_merges(words[wid], triples, ranks)
                    if len(word) > 1:
                        expected.append({"wid": wid, "count": 7, "symbols": word})
            assert sorted(got, key=lambda row: row["wid"]) == sorted(expected, key=lambda row: row["wid"])
            assert len(got) < len(expected) or any(row["symbols"] != words[row["wid"]] for row in got)
        unchanged = _words_batch([0], [1], [[1, 2, 3]])
        assert list(apply_round_batches(iter([unchanged]), triples, table)) == [unchanged]


def test_resolve_budget():
    assert resolve_budget("30%", 1000) == 300
    assert resolve_budget(0.001, 10) == 1
    assert resolve_budget("2000000", 5) == 2_000_000
    assert resolve_budget(1.0, 77) == 77
    for bad in (0, -3, "lots", 1.5, "150%"):
        with pytest.raises(ConfigError):
            resolve_budget(bad, 100)
