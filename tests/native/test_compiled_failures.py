"""The compiled extensions under failed allocations: every allocation the C code makes can be
made to fail (``_fail_allocations_after(n)``, a test hook of each extension), and these tests
make each one fail in turn. The merge engine then raises MemoryError and refuses every later
call with a clear RuntimeError (never a half-merged engine that goes on giving merges); the
encoder raises MemoryError and, its cache being consistent, encodes correctly afterwards; the
pretoken counter refuses to report partial counts until it is cleared."""

from __future__ import annotations

import random

import pytest

from bpe_spark import TrainerConfig
from bpe_spark.training.engine import MergeEngine
from bpe_spark.training.trainer import build_engine

pytest_plugins = ("tests.compiled_fixtures",)  # the fastbpe and fastenc fixtures

BROKEN = "ran out of memory in the middle of .* and can no longer be used"


def _corpus(seed: int) -> tuple[list[list[int]], list[int]]:
    rng = random.Random(seed)
    words = [[rng.randrange(6) for _ in range(rng.randint(1, 30))] for _ in range(200)]
    return words, [rng.randint(1, 40) for _ in words]


def _merge(engine, next_id: int, n: int, key=int) -> list[tuple[int, int, int]]:
    """Up to n merges, driven as CompiledCore drives the engine."""
    taken = []
    while len(taken) < n and (top := engine.best()) is not None:
        engine.extend([key(next_id)])
        engine.apply(top[0], top[1], next_id)
        taken.append(top)
        next_id += 1
    return taken


def _sweep(module, action, setup=lambda: None):
    """Run action(setup()) with the allocation after the next n of action's failing, for n = 0,
    1, ... until a run makes fewer allocations than that; yield (what setup() made, the
    MemoryError) for each failed run."""
    for n in range(100_000):
        made = setup()
        module._fail_allocations_after(n)
        try:
            action(made)
            error = None
        except MemoryError as caught:
            error = caught
        pending = module._fail_allocations_after(-1)
        if pending >= 0:  # the failure never came: every allocation of the run was tried
            assert error is None
            return
        assert error is not None, f"allocation {n} failed and nothing said so"
        yield made, error
    raise AssertionError("the sweep did not end")


# (lexicographic, ids known before the first merge): 65530 makes the merges' ids cross 65535,
# where the engine widens its symbol buffer.
@pytest.mark.parametrize("lexicographic, n_initial", [(False, 6), (True, 6), (False, 65_530)])
def test_a_failed_allocation_breaks_the_engine_for_good(fastbpe, lexicographic, n_initial):
    words, counts = _corpus(1)
    key = (lambda i: b"%d" % i) if lexicographic else int
    keys = [key(i) for i in range(n_initial)]

    def new_engine():
        return fastbpe.Engine(words, counts, keys, 0, lexicographic)

    expected = _merge(new_engine(), n_initial, 150, key)
    assert len(expected) == 150

    def run(engine):
        assert _merge(engine, n_initial, 150, key) == expected

    failures = list(_sweep(fastbpe, run, new_engine))
    assert len(failures) > 20  # the sweep reached allocations of every kind
    calls = [("best", ()), ("words", ()), ("stats", ()), ("extend", ([key(999)],)),
             ("apply", (0, 1, n_initial)), ("pair_count", (0, 1))]
    for engine, _ in failures:
        for name, args in calls:
            with pytest.raises(RuntimeError, match=BROKEN):
                getattr(engine, name)(*args)


def test_a_failed_construction_raises_memory_error(fastbpe):
    words, counts = _corpus(2)
    built = list(_sweep(fastbpe, lambda _: fastbpe.Engine(words, counts, list(range(6)), 0, False)))
    assert built  # the constructor allocates, and each failure raised MemoryError


def test_merge_engine_reports_the_broken_core(fastbpe):
    """The trainer's MergeEngine passes the MemoryError on, then the clear error."""
    cfg = TrainerConfig(vocab_size=400)
    words = ["".join(random.Random(i).choice("abcde") for _ in range(12)) for i in range(300)]
    counts = {word: i + 1 for i, word in enumerate(words)}
    start = build_engine(counts, cfg)
    engine = MergeEngine(start.table, start.core.current_words(), start.counts, backend="compiled")
    engine.run(max_new_tokens=5)
    fastbpe._fail_allocations_after(3)
    try:
        with pytest.raises(MemoryError):
            engine.run(max_new_tokens=95)
    finally:
        fastbpe._fail_allocations_after(-1)
    with pytest.raises(RuntimeError, match=BROKEN):
        engine.run(max_new_tokens=95)
    with pytest.raises(RuntimeError, match=BROKEN):
        engine.core.current_words()


def test_the_encoder_stays_correct_after_a_failed_allocation(fastenc):
    rng = random.Random(3)
    merges = [(97, 98, 256), (256, 99, 257), (32, 256, 258), (100, 100, 259), (259, 259, 260)]
    texts = ["".join(rng.choice("abcd ") for _ in range(rng.randint(0, 40))) for _ in range(300)]
    texts += ["\u4e2d" * 100 + "dd" * 70]  # a long pretoken: the heap path of the BPE
    expected = fastenc.Encoder(merges, list(range(256)), "gpt2").encode_many(texts)

    def run(encoder):
        assert encoder.encode_many(texts) == expected

    def new_encoder():
        return fastenc.Encoder(merges, list(range(256)), "gpt2", cache_limit=50)

    failures = list(_sweep(fastenc, run, new_encoder))
    assert failures
    for encoder, _ in failures:
        assert encoder.encode_many(texts) == expected  # the cache is consistent
        assert encoder.bpe([100] * 70) == [260] * 17 + [259]


def test_the_counter_refuses_partial_counts(fastenc):
    rng = random.Random(4)
    texts = ["".join(rng.choice("ab cd\n\u00e9") for _ in range(rng.randint(0, 30))) 
             for _ in range(500)]
    reference = fastenc.PretokenCounter("cl100k")
    reference.add(texts)
    expected = reference.items()

    def run(counter):
        counter.add(texts)
        assert counter.items() == expected

    failures = list(_sweep(fastenc, run, lambda: fastenc.PretokenCounter("cl100k")))
    assert failures
    for counter, _ in failures:
        for name, args in (("items", ()), ("add", (["a"],)), ("__len__", ())):
            with pytest.raises(RuntimeError, match="failed in the middle of add"):
                getattr(counter, name)(*args)
        counter.clear()
        counter.add(texts)
        assert counter.items() == expected


FALLBACK_SCRIPT = """
import logging, sys
sys.modules["bpe_spark.native._fastbpe"] = None  # as if it were not built: importing it fails
sys.modules["bpe_spark.native._fastenc"] = None
logging.basicConfig(level=logging.WARNING, format="%(name)s %(message)s", stream=sys.stdout)
from bpe_spark import TrainerConfig, train
for _ in range(3):  # batch after batch: the log says it once
    tok = train(["ab ab abc"] * 3, TrainerConfig(vocab_size=258))
    tok.encode_ordinary_flat(["ab abc", "abc"])
print(tok.merges)
"""


def test_a_missing_extension_is_logged_once_per_process():
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-c", FALLBACK_SCRIPT], capture_output=True, text=True,
                          check=True)
    lines = done.stdout.splitlines()
    assert lines[-1] == "[(b'a', b'b'), (b' ', b'ab')]"  # trained, in pure Python
    logged = [line for line in lines if line.startswith("bpe_spark ")]
    assert len(logged) == 1, done.stdout  # one line for both, with what it costs
    assert "bpe_spark.native._fastbpe and bpe_spark.native._fastenc are not built" in logged[0]
    assert "the merge engine and the pretokenizer, counter, encoder and JSON scanner run in pure Python" in logged[0]
    assert "encoding about 15x" in logged[0] and "pip install -e ." in logged[0]
