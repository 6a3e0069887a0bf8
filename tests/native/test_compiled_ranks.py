"""The compiled encoder for every byte-scheme model gives the pure-Python encoder's ids (the
specification): tiktoken's rank rule (whole-pretoken lookup, then the pair whose concatenation
has the lowest rank) on random vocabularies, well formed or not (a longer token may rank below
its parts), short pretokens and long ones (the bucket queue and its heap fallback, and the
first pairs of a very long one counting sorted by rank); custom
patterns (split by ``regex`` in Python, BPE and cache compiled); and cl100k / GPT-2 give
tiktoken's ids on any text (hypothesis). Every test fails when the extension is not built."""

from __future__ import annotations

import random

import pytest
from tests.conftest import PEERS, corpus_lines
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tests.encoding.test_encoder_equivalence import _python_twin

from bpe_spark import Tokenizer, TrainerConfig, train_from_counts
from bpe_spark.native import compiled as _compiled
from bpe_spark.encoding.batch_encoder import BatchEncoder
from bpe_spark.training.trainer import count_pretokens
from bpe_spark.bpe.words import bpe_merge

pytest_plugins = ("tests.compiled_fixtures",)  # the fastenc fixture
pytestmark = pytest.mark.usefixtures("fastenc")


def _random_rank_vocab(rng: random.Random, alphabet: bytes, n_tokens: int, well_formed: bool) -> dict[int, bytes]:
    """256 single bytes, then tokens made of two earlier ones; ranked in the order made (well
    formed) or shuffled (a token may then rank below the tokens it is made of)."""
    tokens = [bytes([b]) for b in alphabet]
    seen = set(tokens)
    while len(tokens) < len(alphabet) + n_tokens:
        token = rng.choice(tokens) + rng.choice(tokens)
        if token not in seen and len(token) <= 12:
            seen.add(token)
            tokens.append(token)
    made = tokens[len(alphabet):]
    if not well_formed:
        rng.shuffle(made)
    vocab = {b: bytes([b]) for b in range(256)}
    vocab.update({256 + rank: token for rank, token in enumerate(made)})
    return vocab


@pytest.mark.parametrize("well_formed", [True, False])
@pytest.mark.parametrize("pattern", ["gpt2", r"\S+|\s+"])
def test_rank_rule_equals_the_python_encoder(well_formed, pattern, monkeypatch):
    rng = random.Random(7 + well_formed)
    for trial in range(12):
        vocab = _random_rank_vocab(rng, b"ab c", rng.randint(5, 60), well_formed)
        tok = Tokenizer(scheme="byte", vocab=vocab, pattern=pattern, merge_rule="ranks")
        python = _python_twin(tok, monkeypatch)
        assert tok._fast_encoder() is not None
        assert tok.compiled_encoding == (pattern == "gpt2")
        texts = ["".join(rng.choice("ab c") for _ in range(rng.choice([rng.randint(0, 20), rng.randint(60, 400)])))
                 for _ in range(60)]
        texts += ["".join(rng.choice("abc") for _ in range(rng.randint(65, 600))) for _ in range(20)]
        texts += ["a" * 1000, "ab" * 700, " " * 300 + "a"]
        expected = [python.encode_ordinary(text) for text in texts]
        assert [tok.encode_ordinary(text) for text in texts] == expected, trial
        ids, lengths = tok.encode_ordinary_flat(texts + [None])
        assert lengths.tolist() == [len(row) for row in expected] + [0]
        assert ids.tolist() == [i for row in expected for i in row]


@pytest.mark.parametrize("well_formed", [True, False])
def test_very_long_pretokens_equal_bpe_merge(well_formed):
    # from SORTED_FIRST (2048) symbols the first pairs are counting sorted by rank (_bpe_merge.h):
    # lengths on both sides of it, runs of one symbol and random symbols, merges with reused
    # ids and, when not well formed, ranks below their parts' (the heap beside the buckets)
    rng = random.Random(31 + well_formed)
    for trial in range(6):
        n_symbols = rng.randint(2, 5)
        merges, made, n_merges = [], list(range(n_symbols)), rng.randint(5, 80)
        while len(merges) < n_merges:
            left, right = rng.choice(made), rng.choice(made)
            new_id = rng.choice(made[n_symbols:]) if len(made) > n_symbols and rng.random() < 0.1 else len(made)
            if new_id == len(made):
                made.append(new_id)
            merges.append((left, right, new_id))
        if not well_formed:
            rng.shuffle(merges)
        rank = {}
        for r, (left, right, new_id) in enumerate(merges):
            rank.setdefault((left, right), (r, new_id))
        encoder = _compiled._fastenc.Encoder(merges, None, None)
        for length in (2047, 2048, 2049, 5000, 30_000):
            for ids in ([rng.randrange(n_symbols) for _ in range(length)], [0] * length,
                        [rng.choice([0, 1]) for _ in range(length // 2)] + [1] * (length - length // 2)):
                assert encoder.bpe(ids) == bpe_merge(ids, lambda a, b, r=rank: r.get((a, b))), (trial, length)


def test_long_pretokens_merge_leftmost_when_pairs_are_made_right_to_left():
    # the id 10 is made at 4, then 2, then 0 (reused ids, as a trained vocabulary may have), so
    # the pairs (10, 10) reach their bucket right to left; the leftmost must still merge first
    merges = [(4, 5, 10), (2, 3, 10), (0, 1, 10), (10, 10, 11)]
    rank = {(left, right): (r, new_id) for r, (left, right, new_id) in enumerate(merges)}
    encoder = _compiled._fastenc.Encoder(merges, None, None)
    for ids in ([0, 1, 2, 3, 4, 5] + [9] * 70, [9] * 70 + [0, 1, 2, 3, 4, 5] * 20):
        assert encoder.bpe(ids) == bpe_merge(ids, lambda a, b: rank.get((a, b)))
    assert encoder.bpe([0, 1, 2, 3, 4, 5] + [9] * 70)[:2] == [11, 10]


def test_custom_pattern_encodes_compiled_with_the_same_ids(monkeypatch):
    lines = corpus_lines("multilingual", 300_000)
    cfg = TrainerConfig(vocab_size=1200, pattern=r"\w+|[^\w\s]+|\s+")
    tok = train_from_counts(count_pretokens(lines, cfg), cfg)
    python = _python_twin(tok, monkeypatch)
    assert tok._fast_encoder() is not None and tok._fast_pretokens and not tok.compiled_encoding
    texts = lines + ["lone \udc80 surrogate", "\ud83d", ""]
    expected = [python.encode_ordinary(text) for text in texts]
    assert [tok.encode_ordinary(text) for text in texts] == expected
    ids, lengths = tok.encode_ordinary_flat(texts + [None])
    assert lengths.tolist() == [len(row) for row in expected] + [0]
    assert ids.tolist() == [i for row in expected for i in row]
    # the batch encoder (Spark's) takes the flat path, with the slot-cache path's ids
    fast_batch, python_batch = BatchEncoder(tok), BatchEncoder(python)
    assert fast_batch.flat and not python_batch.flat
    for got, want in zip(fast_batch.encode_texts(lines + [None]), python_batch.encode_texts(lines + [None])):
        assert got.tolist() == want.tolist()


@pytest.fixture(scope="module")
def openai_pairs():
    """(ours, tiktoken's) for cl100k (its .tiktoken file) and GPT-2 (vocab.json + merges.txt)."""
    tiktoken = pytest.importorskip("tiktoken")
    from tests.peers.test_peer_tiktoken import tiktoken_cache_file

    return {
        "cl100k": (Tokenizer.load(tiktoken_cache_file("cl100k_base")), tiktoken.get_encoding("cl100k_base")),
        "gpt2": (Tokenizer.load(PEERS / "cs336" / "gpt2_vocab.json"), tiktoken.get_encoding("gpt2")),
    }


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(st.text(alphabet=st.characters(exclude_categories=("Cs",)), max_size=80)
       | st.text(alphabet="aab 1\n'sé中", max_size=300))
def test_openai_models_give_tiktokens_ids(openai_pairs, text):
    for ours, theirs in openai_pairs.values():
        assert ours.compiled_encoding
        assert ours.encode_ordinary(text) == theirs.encode_ordinary(text)


@pytest.mark.parametrize("ignore_merges", [True, False])
def test_pipeline_model_step_compiled_with_the_same_ids(ignore_merges, monkeypatch):
    from bpe_spark.pipeline import Pipeline

    rng = random.Random(4)
    vocab = {"<unk>": 0, "a": 1, "b": 2, "c": 3, "é": 4}
    merges = []
    while len(merges) < 30:
        left, right = rng.choice(list(vocab)[1:]), rng.choice(list(vocab)[1:])
        if left + right not in vocab and len(left + right) <= 6:
            vocab[left + right] = len(vocab)
            merges.append(f"{left} {right}")
    vocab["cbaé"] = len(vocab)  # a token no merge makes: only ignore_merges gives it
    spec = {"model": {"type": "BPE", "vocab": vocab, "merges": merges, "unk_token": "<unk>",
                      "ignore_merges": ignore_merges},
            "pre_tokenizer": {"type": "WhitespaceSplit"}}
    compiled = Pipeline(spec)
    with monkeypatch.context() as patch:
        patch.setenv("BPE_SPARK_ENCODER", "python")
        python = Pipeline(spec)
        texts = ["".join(rng.choice("abcé ") for _ in range(rng.randint(0, 200))) for _ in range(300)]
        texts += ["cbaé abc", "ab x ba", "a" * 300, "\udc80 ab"]  # x: unknown (unk_token)
        expected = [python.encode(text) for text in texts]
    assert python.model._fast is None
    assert [compiled.encode(text) for text in texts] == expected
    assert compiled.model._fast_chars
