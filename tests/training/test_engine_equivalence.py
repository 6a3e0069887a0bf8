"""The compiled merge engine (``bpe_spark.native._fastbpe``) gives exactly what the pure-Python engine
gives, and both give ``tokenizers``' BpeTrainer merges: on slices of the real corpora, and on
many random small corpora (both tie-breaks, both schemes, floor / stop_after_reuse / budgets,
runs resumed in steps). A test of the compiled engine fails when it is not built
(compiled_fixtures)."""

from __future__ import annotations

import json
import random

import pytest
from tests.conftest import corpus_lines
from tokenizers import Tokenizer as HfTokenizer
from tokenizers import models, pre_tokenizers, trainers

from bpe_spark import TrainerConfig, train, train_from_counts
from bpe_spark.errors import ConfigError
from bpe_spark.bpe.symbols import bytes_to_display
from bpe_spark.training.engine import MergeEngine, PackedWords
from bpe_spark.training.trainer import build_engine, count_pretokens, initial_table, new_token_budget

pytest_plugins = ("tests.compiled_fixtures",)  # the fastbpe fixture
needs_compiled = pytest.mark.usefixtures("fastbpe")


def _hf_merges(lines: list[str], vocab_size: int) -> list[str]:
    hf = HfTokenizer(models.BPE())
    hf.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size, show_progress=False, initial_alphabet=pre_tokenizers.ByteLevel.alphabet()
    )
    hf.train_from_iterator(lines, trainer)
    merges = json.loads(hf.to_str())["model"]["merges"]
    return [" ".join(m) if isinstance(m, list) else m for m in merges]


def _display(tok) -> list[str]:
    return [f"{bytes_to_display(left)} {bytes_to_display(right)}" for left, right in tok.merges]


def _engines(counts: dict[str, int], cfg: TrainerConfig) -> tuple[MergeEngine, MergeEngine]:
    python = build_engine(counts, cfg)
    python = MergeEngine(python.table, python.core.current_words(), python.counts, backend="python")
    compiled = build_engine(counts, cfg)
    compiled = MergeEngine(compiled.table, compiled.core.current_words(), compiled.counts, backend="compiled")
    return python, compiled


@needs_compiled
def test_the_compiled_engine_is_the_default():
    assert build_engine({"ab": 1}, TrainerConfig(vocab_size=257)).backend == "compiled"


def test_backend_choice(monkeypatch):
    cfg = TrainerConfig(vocab_size=260)
    monkeypatch.setenv("BPE_SPARK_ENGINE", "python")
    assert build_engine({"abc": 2}, cfg).backend == "python"
    monkeypatch.setenv("BPE_SPARK_ENGINE", "fastest")
    with pytest.raises(ConfigError, match="backend must be one of"):
        build_engine({"abc": 2}, cfg)


# --- real text: compiled == python == tokenizers ----------------------------------------------


@needs_compiled
@pytest.mark.parametrize(
    "name, max_bytes, vocab_size",
    [("en_books", 1_000_000, 3000), ("zh_classics", 600_000, 2000), ("multilingual", 600_000, 2000)],
)
def test_real_corpora_three_way(name, max_bytes, vocab_size):
    lines = corpus_lines(name, max_bytes)
    cfg = TrainerConfig(vocab_size=vocab_size, pattern="gpt2", tie_break="hf")
    counts = count_pretokens(lines, cfg)
    python, compiled = _engines(counts, cfg)
    budget = new_token_budget(cfg, python.table)
    python_merges = python.run(max_new_tokens=budget)
    compiled_merges = compiled.run(max_new_tokens=budget)
    assert len(python_merges) == vocab_size - 256
    assert compiled_merges == python_merges
    assert compiled.core.current_words() == python.core.current_words()
    tok = train_from_counts(counts, cfg)
    assert _display(tok) == _hf_merges(lines, vocab_size), name


@needs_compiled
@pytest.mark.parametrize("tie_break", ["hf", "lexicographic"])
def test_real_corpus_char_scheme_and_lexicographic(tie_break):
    lines = corpus_lines("multilingual", 300_000)
    for end_of_word in ("separate", "fused"):
        cfg = TrainerConfig(
            vocab_size=3000, scheme="char", end_of_word=end_of_word, pattern="words", tie_break=tie_break
        )
        counts = count_pretokens(lines, cfg)
        python, compiled = _engines(counts, cfg)
        budget = new_token_budget(cfg, python.table)
        assert compiled.run(max_new_tokens=budget) == python.run(max_new_tokens=budget)
    cfg = TrainerConfig(vocab_size=1500, tie_break=tie_break)
    counts = count_pretokens(lines, cfg)
    python, compiled = _engines(counts, cfg)
    assert compiled.run(max_new_tokens=1244) == python.run(max_new_tokens=1244)


# --- random small corpora ---------------------------------------------------------------------

ALPHABETS = ["ab", "abc", "abcd", "aé中b", "xyz ", "aaab"]


def _random_lines(rng: random.Random) -> list[str]:
    alphabet = rng.choice(ALPHABETS)
    lines = []
    for _ in range(rng.randint(1, 30)):
        words = [
            "".join(rng.choice(alphabet) for _ in range(rng.randint(1, 14)))
            for _ in range(rng.randint(1, 6))
        ]
        lines.append(" ".join(words) + "\n")
    return lines


@needs_compiled
def test_random_corpora_match_tokenizers():
    """Small alphabets make id reuse (``ab+c`` and ``a+bc``) frequent: the rule tokenizers has."""
    for seed in range(120):
        rng = random.Random(seed)
        lines = _random_lines(rng)
        vocab_size = rng.randint(257, 420)
        cfg = TrainerConfig(vocab_size=vocab_size)
        ours = _display(train(lines, cfg))
        assert ours == _hf_merges(lines, vocab_size), f"seed {seed}"


def _random_config(rng: random.Random) -> TrainerConfig:
    scheme = rng.choice(["byte", "char"])
    return TrainerConfig(
        vocab_size=rng.randint(300, 420) if scheme == "byte" else rng.randint(10, 120),
        scheme=scheme,
        end_of_word=rng.choice(["separate", "fused"]),
        pattern=rng.choice(["gpt2", "whitespace"]),
        tie_break=rng.choice(["hf", "lexicographic"]),
        special_tokens=rng.choice([(), ("<|endoftext|>",), ("<s>", "</s>")]),
    )


def _random_plan(rng: random.Random) -> list[dict]:
    """Steps with random floors, merge caps, minimum frequencies and stop_after_reuse, then
    one unrestricted step: the distributed rounds drive the engine this way."""
    plan = [
        {
            "max_merges": rng.choice([None, 1, 3, 10]),
            "floor": rng.choice([None, 0, 1, 2, 5]),
            "min_frequency": rng.choice([0, 0, 2]),
            "stop_after_reuse": rng.random() < 0.5,
        }
        for _ in range(rng.randint(1, 25))
    ]
    return plan + [{}]


def _run_plan(engine: MergeEngine, budget: int, plan: list[dict]) -> list:
    start = len(engine.table)
    taken = []
    for step in plan:
        created = len(engine.table) - start
        taken.append(engine.run(max_new_tokens=budget - created, **step))
    return taken


@needs_compiled
def test_random_corpora_compiled_equals_python():
    for seed in range(150):
        rng = random.Random(1000 + seed)
        cfg = _random_config(rng)
        counts = count_pretokens(_random_lines(rng), cfg)
        if not counts:
            continue
        python, compiled = _engines(counts, cfg)
        budget = new_token_budget(cfg, python.table)
        plan = _random_plan(rng)
        expected = _run_plan(python, budget, plan)
        assert _run_plan(compiled, budget, plan) == expected, f"seed {seed} {cfg}"
        assert compiled.core.current_words() == python.core.current_words(), f"seed {seed}"
        assert compiled.best() == python.best(), f"seed {seed}"
        assert compiled.table.values == python.table.values


@needs_compiled
def test_compiled_core_counts_beyond_64_bits_fall_back_to_python():
    cfg = TrainerConfig(vocab_size=260)
    counts = {"aaaa": 2**62, "ab": 3}
    engine = build_engine(counts, cfg)
    assert engine.backend == "python"  # 3 * 2**62 pair count does not fit the C core
    assert engine.best() == ((97, 97), 3 * 2**62)
    with pytest.raises(OverflowError):
        MergeEngine(engine.table, [[97, 97, 97, 97]], [2**62], backend="compiled")


@needs_compiled
def test_compiled_core_rejects_ids_outside_its_table():
    from bpe_spark.native import _fastbpe

    with pytest.raises(ValueError, match="outside the engine's table"):
        _fastbpe.Engine([[0, 300]], [1], list(range(256)), 0, False)
    engine = _fastbpe.Engine([[0, 1, 0, 1]], [2], list(range(256)), 0, False)
    assert engine.best() == (0, 1, 4)
    with pytest.raises(ValueError, match="outside the engine's table"):
        engine.apply(0, 1, 256)
    assert engine.extend([256]) == 257
    engine.apply(0, 1, 256)
    assert engine.words() == [[256, 256]] and engine.pair_count(256, 256) == 2


@needs_compiled
def test_two_engines_sharing_one_table():
    """Each engine learns the keys of ids the other added to the shared table (as rounds do)."""
    cfg = TrainerConfig(vocab_size=400)
    counts = count_pretokens(corpus_lines("tiny_shakespeare", 20_000), cfg)
    results = []
    for backend in ("python", "compiled"):
        first = build_engine(counts, cfg)
        table = first.table
        one = MergeEngine(table, [list(w) for w in first.core.current_words()], first.counts, backend=backend)
        two = MergeEngine(table, [list(w) for w in first.core.current_words()], first.counts, backend=backend)
        taken = one.run(max_new_tokens=30) + two.run(max_new_tokens=10) + one.run(max_new_tokens=5)
        results.append((taken, one.core.current_words(), two.core.current_words(), list(table.values)))
    assert results[0] == results[1]


@pytest.mark.parametrize("backend", ["python", "compiled"])
def test_byte_words_may_be_given_as_bytes(backend, request):
    if backend == "compiled":
        request.getfixturevalue("fastbpe")
    cfg = TrainerConfig(vocab_size=600)
    counts = count_pretokens(corpus_lines("multilingual", 100_000), cfg)
    reference = build_engine(counts, cfg)
    as_lists = MergeEngine(reference.table, reference.core.current_words(), reference.counts, backend=backend)
    expected = as_lists.run(max_new_tokens=344)
    table = build_engine(counts, cfg).table
    as_bytes = MergeEngine(table, [p.encode("utf-8") for p in counts], list(counts.values()), backend=backend)
    assert as_bytes.run(max_new_tokens=344) == expected
    assert as_bytes.core.current_words() == as_lists.core.current_words()


@needs_compiled
@pytest.mark.parametrize("offset_type", ["int32", "int64"])
@pytest.mark.parametrize("tie_break", ["hf", "lexicographic"])
def test_packed_words_give_the_same_merges(offset_type, tie_break):
    """Byte-scheme words packed as Arrow lays them out (data + offsets buffers, int64 counts
    buffer) give the same merges as lists, in both cores."""
    np = pytest.importorskip("numpy")
    rng = random.Random(7)
    cfg = TrainerConfig(vocab_size=420, tie_break=tie_break)
    words = [bytes(rng.choice(b"abcd e\xc3\xa9") for _ in range(rng.randint(1, 12))) for _ in range(4000)]
    counts = [rng.randint(1, 10**13) for _ in words]
    data = b"".join(words)
    offsets = np.concatenate([[0], np.cumsum([len(w) for w in words])]).astype(offset_type)
    reference = MergeEngine(initial_table(cfg, ()), list(words), list(counts), backend="python").run(max_new_tokens=164)
    for backend in ("compiled", "python"):
        packed = PackedWords(data, offsets)
        got = MergeEngine(initial_table(cfg, ()), packed, np.array(counts, dtype=np.int64), backend=backend)
        assert got.run(max_new_tokens=164) == reference, backend


@needs_compiled
@pytest.mark.parametrize("tie_break", ["hf", "lexicographic"])
def test_packed_ids_give_the_same_merges(tie_break):
    """Words of symbol ids packed as Arrow lays out a list<int32> column (the rounds' collected
    pretokens, some already merged) give the same merges and words as lists, in both cores."""
    np = pytest.importorskip("numpy")
    rng = random.Random(11)
    cfg = TrainerConfig(vocab_size=600, tie_break=tie_break)
    words = [[rng.choice(b"abcd e\xc3\xa9") for _ in range(rng.randint(2, 14))] for _ in range(3000)]
    counts = [rng.randint(1, 10**6) for _ in words]
    # a few merges first, so that the packed words hold ids above 255, as a later round's do
    warm = MergeEngine(initial_table(cfg, ()), [list(w) for w in words], list(counts), backend="python")
    warm.run(max_new_tokens=40)
    merged, table_state = warm.core.current_words(), warm.table
    values = np.array([i for word in merged for i in word], dtype=np.int32)
    offsets = np.concatenate([[0], np.cumsum([len(w) for w in merged])]).astype(np.int32)
    assert values.max() > 255
    expected_engine = MergeEngine(_copy_table(table_state), [list(w) for w in merged], list(counts), backend="python")
    expected = expected_engine.run(max_new_tokens=100)
    for backend in ("compiled", "python"):
        got = MergeEngine(_copy_table(table_state), PackedWords(values, offsets), np.array(counts, dtype=np.int64),
                          backend=backend)
        assert got.run(max_new_tokens=100) == expected, backend
        assert got.core.current_words() == expected_engine.core.current_words(), backend


@needs_compiled
def test_compiled_words_are_compacted_as_they_shrink():
    """The compiled engine keeps every word in one buffer and moves them together once merges
    have freed a quarter of it: the buffer shrinks, and the words stay those of the Python core."""
    counts = count_pretokens(corpus_lines("en_books", 200_000), TrainerConfig(vocab_size=2000))
    cfg = TrainerConfig(vocab_size=2000)
    compiled, reference = build_engine(counts, cfg), build_engine(counts, cfg)
    compiled = MergeEngine(compiled.table, compiled.core.current_words(), compiled.counts, backend="compiled")
    reference = MergeEngine(reference.table, reference.core.current_words(), reference.counts, backend="python")
    before = compiled.core.engine.stats()
    assert compiled.run(max_new_tokens=1700) == reference.run(max_new_tokens=1700)
    after = compiled.core.engine.stats()
    assert after["symbol_capacity"] < before["symbol_capacity"] // 2 + 1
    assert after["symbols"] <= after["symbol_capacity"]
    assert after["heap"] < after["live_pairs"] // 4  # the heap holds the pairs near the top only
    assert compiled.core.current_words() == reference.core.current_words()


@needs_compiled
@pytest.mark.parametrize("planned", [None, 1, 10**9])
def test_a_plan_right_or_wrong_changes_no_merge(planned):
    """run() tells the compiled engine how many merges are left (plan()), so that its holder
    lists reach that far at once; a plan that falls short (unlisted pairs merged: scans, then an
    index) or goes too far (lists as far as memory allows) gives the same merges all the same."""
    counts = count_pretokens(corpus_lines("en_books", 200_000), TrainerConfig(vocab_size=2000))
    cfg = TrainerConfig(vocab_size=2000)
    compiled, reference = build_engine(counts, cfg), build_engine(counts, cfg)
    compiled = MergeEngine(compiled.table, compiled.core.current_words(), compiled.counts, backend="compiled")
    reference = MergeEngine(reference.table, reference.core.current_words(), reference.counts, backend="python")
    if planned is not None:
        compiled.core.plan = lambda merges, lowest=1: compiled.core.engine.plan(planned, 1)
    assert compiled.run(max_new_tokens=1700) == reference.run(max_new_tokens=1700)
    assert compiled.core.current_words() == reference.core.current_words()
    if planned == 1:
        assert compiled.core.engine.stats()["scans"] > 0


@needs_compiled
def test_compiled_engine_lists_an_unlisted_pair_a_reuse_raised():
    """Pairs far below the top keep no holder list; only a merge that reuses an existing token
    can raise one to the top, and the engine then finds its words by a scan."""
    from bpe_spark.native import _fastbpe

    words = [[1, 2]] * 3 + [[3, 1, 2], [3, 5]]
    engine = _fastbpe.Engine(words, [100, 100, 100, 200, 1], list(range(8)), 0, False)
    assert engine.best() == (1, 2, 500)  # (3, 5), at 1, is far below: no list
    engine.apply(1, 2, 5)  # reuses id 5: (3, 5) rises to 201
    assert engine.pair_count(3, 5) == 201 and engine.best() == (3, 5, 201)
    engine.apply(3, 5, 6)
    assert engine.stats()["scans"] == 1
    assert engine.words() == [[5], [5], [5], [6], [6]]
    assert engine.pair_count(3, 5) == 0 and engine.best() is None


@needs_compiled
def test_compiled_symbols_widen_past_65535():
    """The compiled engine keeps ids as uint16 while they fit and widens its buffer the moment a
    merge makes id 65536: the merges and words equal those of an engine wide from the start."""
    from bpe_spark.native import _fastbpe

    rng = random.Random(5)
    words = [[rng.randrange(12) for _ in range(rng.randint(1, 40))] for _ in range(300)]
    counts = [rng.randint(1, 50) for _ in words]

    def run(n_initial: int) -> tuple[list, list]:
        engine = _fastbpe.Engine(words, counts, list(range(n_initial)), 0, False)
        taken, next_id = [], n_initial
        while (top := engine.best()) is not None and len(taken) < 400:
            engine.extend([next_id])
            engine.apply(top[0], top[1], next_id)
            taken.append(top)
            next_id += 1
        # ids from the first merge on, relative to it: comparable across the two engines
        relative = [[i if i < 12 else i - n_initial for i in word] for word in engine.words()]
        return [(left if left < 12 else left - n_initial, right if right < 12 else right - n_initial, count)
                for left, right, count in taken], relative

    narrow_then_wide = run(65_536 - 100)  # merge ids cross 65535 a hundred merges in
    wide = run(70_000)
    assert len(narrow_then_wide[0]) == 400
    assert narrow_then_wide == wide


def _copy_table(table):
    import copy

    return copy.deepcopy(table)


@needs_compiled
def test_empty_words_are_carried_along():
    np = pytest.importorskip("numpy")
    cfg = TrainerConfig(vocab_size=300)
    for backend in ("compiled", "python"):
        for words in ([[], [97, 98]], [b"", b"ab"], PackedWords(b"ab", np.array([0, 0, 2])),
                      PackedWords(np.array([97, 98], dtype=np.int32), np.array([0, 0, 2]))):
            engine = MergeEngine(initial_table(cfg, ()), words, [1, 1], backend=backend)
            assert [m.new_id for m in engine.run(max_new_tokens=3)] == [256], (backend, words)
            assert engine.core.current_words() == [[], [256]]
        engine = MergeEngine(initial_table(cfg, ()), PackedWords(b"", np.array([0, 0, 0])), [1, 1], backend=backend)
        assert engine.run(max_new_tokens=3) == [] and engine.core.current_words() == [[], []]


@needs_compiled
def test_packed_words_are_checked():
    np = pytest.importorskip("numpy")
    cfg = TrainerConfig(vocab_size=300)
    with pytest.raises(ValueError, match="out of the data"):
        MergeEngine(initial_table(cfg, ()), PackedWords(b"ab", np.array([0, 5], dtype=np.int64)), [1], backend="compiled")
    with pytest.raises(ValueError, match="int64"):
        MergeEngine(initial_table(cfg, ()), PackedWords(b"ab", np.array([0, 2], dtype=np.int64)),
                    np.array([1], dtype=np.int32), backend="compiled")
    with pytest.raises(ValueError, match="differ in length"):
        MergeEngine(initial_table(cfg, ()), PackedWords(b"ab", np.array([0, 1, 2], dtype=np.int64)), [1], backend="compiled")
    with pytest.raises(ValueError, match="bytes or int32 ids"):
        MergeEngine(initial_table(cfg, ()), PackedWords(np.array([97, 98], dtype=np.int64), np.array([0, 2])), [1],
                    backend="compiled")
    with pytest.raises(ValueError, match="outside the engine's table"):
        MergeEngine(initial_table(cfg, ()), PackedWords(np.array([97, 4000], dtype=np.int32), np.array([0, 2])), [1],
                    backend="compiled")
