"""The driver's side of exact rounds (bpe_spark.training.round_replay), with the executors played in
process: rounds over frequent and rare pretokens give the core engine's merges, whatever the
split, the room for shipped pairs, the speculation's length, the scheme and the backend."""

from __future__ import annotations

import random
from collections import Counter
from itertools import pairwise

import numpy as np
import pytest
from tests.conftest import corpus_lines

from bpe_spark.training import round_replay
from bpe_spark.bpe.config import TrainerConfig
from bpe_spark.training.round_replay import (
    MARK,
    PAIR_SHIFT,
    RoundDriver,
    RoundMismatch,
    StepDeltas,
    gathered,
    spec_deltas,
)
from bpe_spark.training.engine import MergeEngine, PackedWords, compiled_core_available
from bpe_spark.training.length_limit import LengthLimit
from bpe_spark.training.trainer import build_engine, count_pretokens
from bpe_spark.bpe.words import apply_merges, pair_rank_index

BACKENDS = ["python"] + (["compiled"] if compiled_core_available() else [])


def _packed(words: list[list[int]]) -> tuple[np.ndarray, np.ndarray]:
    lengths = [len(w) for w in words]
    values = np.array([s for w in words for s in w], dtype=np.int32)
    return values, np.concatenate(([0], np.cumsum(lengths))).astype(np.int64)


def _pair_counts(words, counts) -> Counter:
    out: Counter = Counter()
    for word, count in zip(words, counts):
        for left, right in pairwise(word):
            out[(left << PAIR_SHIFT) | right] += count
    return out


def simulate(counts: dict, cfg: TrainerConfig, frequent: float, *, room: int | None = None, limit: int = 10_000,
             backend: str = "compiled", monkeypatch=None, max_rows: int | None = None,
             ship_invisible: bool = False) -> tuple[list, list[dict]]:
    """Rounds as :mod:`bpe_spark.spark.training.rounds` runs them, the executors' work done here: the
    ``frequent`` share of pretokens (by count) in the driver's engine, at most ``room`` pairs a
    shipping, the rare ones in two partitions sending at most ``max_rows`` rows each. Returns
    the merges and a record per round. With ``cfg.max_token_length`` a shipping leaves out the
    pairs over it, as Spark's does, unless ``ship_invisible``."""
    if monkeypatch is not None:
        monkeypatch.setenv("BPE_SPARK_ENGINE", backend)
    engine = build_engine(counts, cfg)
    table = engine.table
    words = [list(w) for w in engine.core.current_words()]
    weights = [int(c) for c in engine.counts]
    order = sorted(range(len(words)), key=lambda i: -weights[i])
    kept = set(order[:int(frequent * len(words))])
    f_words = [words[i] for i in sorted(kept)]
    f_counts = [weights[i] for i in sorted(kept)]
    r_words = [words[i] for i in range(len(words)) if i not in kept]
    r_counts = [weights[i] for i in range(len(words)) if i not in kept]
    values, offsets = _packed(f_words) if f_words else (np.zeros(0, np.int32), np.zeros(1, np.int64))
    budget = cfg.vocab_size - len(table)
    length_limit = LengthLimit.of(cfg)
    driver = RoundDriver(table, PackedWords(values, offsets), f_counts, max_new_tokens=budget, max_merges=cfg.max_merges,
                         min_frequency=cfg.min_frequency, limit=length_limit)
    merges: list = []
    records: list[dict] = []
    while driver._room(driver.created, driver.taken):
        triples = [(m.left, m.right, m.new_id) for m in merges]
        ranks = pair_rank_index(triples)
        rare_now = [apply_merges(list(w), triples, ranks) for w in r_words]
        record = {"shipped": 0}
        while True:
            if driver.needs_ship:
                all_now = [apply_merges(list(w), triples, ranks) for w in f_words] + rare_now
                totals = _pair_counts(all_now, f_counts + r_counts)
                rare = _pair_counts(rare_now, r_counts)
                untracked = sorted((k for k in rare if rare[k] > 0 and k not in driver.tracked),
                                   key=lambda k: (-totals[k], k))
                if length_limit is not None and not ship_invisible:
                    untracked = [k for k in untracked
                                 if length_limit.visible(table, k >> PAIR_SHIFT, k & ((1 << PAIR_SHIFT) - 1))]
                most = len(untracked) if room is None else room
                shipped = untracked[:most]
                outside = totals[untracked[most]] if len(untracked) > most else 0
                driver.ship(np.array(shipped, dtype=np.int64), np.array([totals[k] for k in shipped], dtype=np.int64),
                            np.array([rare[k] for k in shipped], dtype=np.int64), outside)
                record["shipped"] += len(shipped)
            spec, spec_table, stop = driver.speculate(limit)
            if spec or stop != "ship":
                break
            driver.needs_ship = True
        if not spec:
            break
        rows = []
        for part in (slice(0, None, 2), slice(1, None, 2)):
            words_part = rare_now[part]
            values, offsets = _packed(words_part) if words_part else (np.zeros(0, np.int32), np.zeros(1, np.int64))
            rows.append(spec_deltas(spec_table, values, offsets, np.array(r_counts[part], dtype=np.int64), spec,
                                    max_rows))
        completed, deltas = gathered(*(np.concatenate([r[i] for r in rows]) for i in range(3)), len(spec))
        record["cut"] = completed < len(spec)
        spec = spec[:completed]
        replay = driver.replay(spec, deltas)
        driver.learn(spec, spec_table, deltas)
        merges += replay.merges
        records.append({**record, "merges": len(replay.merges), "status": replay.status})
        if replay.status == "done":
            break
    return merges, records


def _core(counts: dict, cfg: TrainerConfig) -> list[tuple[int, int]]:
    engine = build_engine(counts, cfg)
    return [(m.left, m.right) for m in engine.run(max_new_tokens=cfg.vocab_size - len(engine.table),
                                                 max_merges=cfg.max_merges, min_frequency=cfg.min_frequency)]


@pytest.fixture(scope="module")
def shakespeare_counts():
    return dict(count_pretokens(corpus_lines("tiny_shakespeare", 30_000), TrainerConfig(vocab_size=600)))


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("frequent", [0.0, 0.02, 0.2, 0.6])
def test_rounds_give_the_core_engines_merges(shakespeare_counts, frequent, backend, monkeypatch):
    cfg = TrainerConfig(vocab_size=600)
    merges, records = simulate(shakespeare_counts, cfg, frequent, backend=backend, monkeypatch=monkeypatch)
    assert [(m.left, m.right) for m in merges] == _core(shakespeare_counts, cfg)
    assert len(records) > 1 and all(r["merges"] > 0 for r in records)


def test_short_speculations_and_little_room_ship_again_and_stay_exact(shakespeare_counts):
    cfg = TrainerConfig(vocab_size=500)
    merges, records = simulate(shakespeare_counts, cfg, 0.05, room=5, limit=7)
    assert [(m.left, m.right) for m in merges] == _core(shakespeare_counts, cfg)
    assert sum(r["shipped"] > 0 for r in records) > 3
    assert {"held", "diverged"} <= {r["status"] for r in records}


@pytest.mark.parametrize("backend", BACKENDS)
def test_char_scheme_with_an_end_of_word_marker_and_lexicographic_ties(backend, monkeypatch):
    cfg = TrainerConfig(vocab_size=5000, max_merges=300, scheme="char", end_of_word="separate", tie_break="lexicographic",
                        pattern="words", lowercase=True)
    counts = dict(count_pretokens(corpus_lines("multilingual", 20_000), cfg))
    merges, _ = simulate(counts, cfg, 0.1, backend=backend, monkeypatch=monkeypatch)
    assert [(m.left, m.right) for m in merges] == _core(counts, cfg)


def test_min_frequency_ends_the_rounds_where_the_core_stops(shakespeare_counts):
    cfg = TrainerConfig(vocab_size=5000, min_frequency=40)
    merges, _ = simulate(shakespeare_counts, cfg, 0.1)
    assert [(m.left, m.right) for m in merges] == _core(shakespeare_counts, cfg)
    assert 0 < len(merges) < 5000 - 256


def test_random_small_corpora_stay_exact():
    """Small alphabets: many ties, runs of one symbol, pairs made and lost again; tiny rooms and
    speculations make rounds ship and diverge often."""
    for seed in range(60):
        rng = random.Random(seed)
        alphabet = rng.choice(["ab", "abc", "aab ", "xyz"])
        lines = [" ".join("".join(rng.choice(alphabet) for _ in range(rng.randint(1, 14)))
                          for _ in range(rng.randint(1, 6))) + "\n" for _ in range(rng.randint(5, 30))]
        cfg = TrainerConfig(vocab_size=rng.randint(270, 420))
        counts = dict(count_pretokens(lines, cfg))
        merges, _ = simulate(counts, cfg, rng.choice([0.0, 0.1, 0.3]), room=rng.choice([None, 2]),
                             limit=rng.choice([3, 50]))
        assert [(m.left, m.right) for m in merges] == _core(counts, cfg), f"seed {seed}"


@pytest.mark.parametrize("backend", BACKENDS)
def test_step_changes_sum_to_the_difference_of_the_pair_counts(shakespeare_counts, backend, monkeypatch):
    monkeypatch.setenv("BPE_SPARK_ENGINE", backend)
    cfg = TrainerConfig(vocab_size=400)
    engine = build_engine(shakespeare_counts, cfg)
    words = [list(w) for w in engine.core.current_words()][::3]
    counts = [int(c) for c in engine.counts][::3]
    spec = [(m.left, m.right, m.new_id) for m in engine.run(max_new_tokens=144)]
    values, offsets = _packed(words)
    steps, pairs, deltas = spec_deltas(engine.table, values, offsets, np.array(counts, dtype=np.int64), spec)
    assert (steps[-1], pairs[-1], deltas[-1]) == (MARK, len(spec), 1)  # every step's rows are here
    steps, pairs, deltas = steps[:-1], pairs[:-1], deltas[:-1]
    assert (np.diff(steps) >= 0).all() and (deltas != 0).all()
    assert len(set(zip(steps.tolist(), pairs.tolist()))) == len(steps)  # one row per step and pair
    before = _pair_counts(words, counts)
    merged = {(left << PAIR_SHIFT) | right for left, right, _ in spec}
    after = _pair_counts([apply_merges(w, spec) for w in words], counts)
    change: Counter = Counter()
    for pair, delta in zip(pairs.tolist(), deltas.tolist()):
        change[pair] += delta
    for pair in set(before) | set(after) | set(change):
        if pair not in merged:  # a merged pair takes all its count, and is not in the changes
            assert before[pair] + change[pair] == after[pair], pair


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_speculation_applied_in_chunks_gives_the_same_rows(shakespeare_counts, backend, monkeypatch):
    """spec_deltas takes its journal every SPEC_CHUNK merges: the rows do not depend on it."""
    monkeypatch.setenv("BPE_SPARK_ENGINE", backend)
    engine = build_engine(shakespeare_counts, TrainerConfig(vocab_size=400))
    words = [list(w) for w in engine.core.current_words()][1::2]
    counts = np.array([int(c) for c in engine.counts][1::2], dtype=np.int64)
    spec = [(m.left, m.right, m.new_id) for m in engine.run(max_new_tokens=144)]
    values, offsets = _packed(words)
    whole = spec_deltas(engine.table, values, offsets, counts, spec)
    for chunk in (1, 7, 143):
        monkeypatch.setattr(round_replay, "SPEC_CHUNK", chunk)
        rows = spec_deltas(engine.table, values, offsets, counts, spec)
        assert all(np.array_equal(a, b) for a, b in zip(rows, whole)), chunk
    assert len(whole[0]) > 1000


@pytest.mark.parametrize("max_rows", [1, 40, 700])
def test_a_row_budget_cuts_speculations_and_the_merges_stay_exact(shakespeare_counts, max_rows):
    cfg = TrainerConfig(vocab_size=450)
    merges, records = simulate(shakespeare_counts, cfg, 0.1, max_rows=max_rows)
    assert [(m.left, m.right) for m in merges] == _core(shakespeare_counts, cfg)
    assert any(r["cut"] for r in records)


def test_spec_deltas_under_a_row_budget_keep_whole_steps(shakespeare_counts):
    engine = build_engine(shakespeare_counts, TrainerConfig(vocab_size=400))
    words = [list(w) for w in engine.core.current_words()]
    counts = np.array([int(c) for c in engine.counts], dtype=np.int64)
    spec = [(m.left, m.right, m.new_id) for m in engine.run(max_new_tokens=144)]
    values, offsets = _packed(words)
    whole = [column[:-1] for column in spec_deltas(engine.table, values, offsets, counts, spec)]
    for max_rows in (1, 500, len(whole[0]) // 2):
        steps, pairs, deltas = spec_deltas(engine.table, values, offsets, counts, spec, max_rows)
        completed = int(pairs[-1])
        assert steps[-1] == MARK and 1 <= completed < len(spec)
        assert len(steps) - 1 <= max_rows or completed == 1
        first = whole[0] < completed  # the same rows as without a budget, for the steps it holds
        assert all(np.array_equal(a[:-1], b[first]) for a, b in zip((steps, pairs, deltas), whole))
    assert gathered(np.array([3, MARK, MARK, 0]), np.array([9, 5, 2, 9]), np.array([1, 1, 1, 1]), 6)[0] == 2


def test_rows_from_several_partitions_are_summed():
    d = StepDeltas(np.array([1, 0, 1, 1]), np.array([5, 7, 5, 9]), np.array([2, -1, 3, -4]))
    assert [list(map(list, d.at(s))) for s in range(3)] == [[[7], [-1]], [[5, 9], [5, -4]], [[], []]]


def test_a_shipped_count_that_disagrees_with_the_drivers_is_refused():
    engine = build_engine({"abab": 3}, TrainerConfig(vocab_size=300, pattern="whitespace"))
    values, offsets = _packed([list(w) for w in engine.core.current_words()])
    driver = RoundDriver(engine.table, PackedWords(values, offsets), [3], max_new_tokens=10, max_merges=None,
                         min_frequency=0)
    pair = (ord("a") << PAIR_SHIFT) | ord("b")
    with pytest.raises(RoundMismatch, match="the driver counts 8, the executors 9"):
        driver.ship(np.array([pair]), np.array([9]), np.array([2]), 0)


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_lenient_engine_keeps_a_pair_its_words_hold_when_a_guess_took_its_count(backend):
    """A speculation's engine (T8, round 2): a guess left (a, b) at 1 though two words hold it;
    when one of them loses it the count stays at 1, not 0, so the pair is not recycled under
    the other word before it loses it too."""
    base = build_engine({"abc": 1, "abd": 1}, TrainerConfig(vocab_size=300, pattern="whitespace"))
    a, b, c, d = (ord(x) for x in "abcd")
    engine = MergeEngine(base.table, [[a, b, c], [a, b, d]], [1, 1], backend=backend)
    engine.core.set_lenient(True)
    engine.core.adjust(a, b, -1)
    engine.merge(b, c, 1)
    engine.best()  # a refill: pairs at zero are recycled
    bd, _ = engine.merge(b, d, 1)
    assert engine.core.packed()[0].tolist() == [a, bd.new_id - 1, a, bd.new_id]


def test_engine_extras_agree_across_backends():
    """adjust, the journal, packed and apply, as the rounds use them, in both cores."""
    if not compiled_core_available():
        pytest.skip("the compiled core is not built")
    got = []
    for backend in ("python", "compiled"):
        engine = build_engine({"abcab": 2, "ab": 3, "xy": 1}, TrainerConfig(vocab_size=300, pattern="whitespace"))
        engine = MergeEngine(engine.table, [list(w) for w in engine.core.current_words()], [2, 3, 1], backend=backend)
        engine.core.adjust(ord("x"), ord("y"), 100)
        top = engine.best()
        engine.core.set_journal(True)
        engine.merge(ord("a"), ord("b"), 7)
        journal = sorted(map(tuple, engine.core.take_journal().tolist()))
        ab = engine.table.index[b"ab"]
        bca, _ = engine.table.add(b"bca")  # absent: a merge that changes nothing
        cab, _ = engine.table.add(b"cab")
        engine.core.apply_all([(ord("b"), ca := ord("c"), bca), (ca, ab, cab)])
        steps = sorted(map(tuple, engine.core.take_journal().tolist()))  # step 1: (ab, c) -2, (ab, cab) +2
        engine.core.adjust(ord("x"), ord("y"), -100)
        got.append((top, journal, steps, [a.tolist() for a in engine.core.packed()], engine.best()))
        with pytest.raises(ValueError, match="below zero"):
            engine.core.adjust(ord("x"), ord("y"), -5)
    assert got[0] == got[1]
