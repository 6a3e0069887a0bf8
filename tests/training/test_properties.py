"""Acceptance 7: property tests (hypothesis). Round trip of any text through a byte-scheme
tokenizer, and the engine against the naive reference trainer, merge for merge."""

from __future__ import annotations

from functools import cache

from tests.conftest import corpus_text
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tests.naive_bpe import naive_train

from bpe_spark import TrainerConfig, train, train_from_counts
from bpe_spark.models.subword_nmt import Segmenter
from bpe_spark.training.engine import MergeEngine
from bpe_spark.training.trainer import initial_table, new_token_budget
from bpe_spark.bpe.words import word_symbols

SPECIALS = ("<|endoftext|>", "<|pad|>", "<|end|>")


@cache
def byte_tokenizer():
    text = corpus_text("multilingual", 150_000)
    return train(
        text.splitlines(keepends=True), TrainerConfig(vocab_size=1200, special_tokens=SPECIALS)
    )


@cache
def fused_tokenizer():
    text = corpus_text("en_books", 150_000)
    cfg = TrainerConfig(
        vocab_size=800,
        scheme="char",
        end_of_word="fused",
        pattern="whitespace",
        tie_break="lexicographic",
    )
    return train(text.splitlines(keepends=True), cfg)


texts = st.text(max_size=200) | st.lists(
    st.sampled_from(
        [
            "<|endoftext|>",
            "<|end",
            "|>",
            "<|pad|>",
            " ",
            "\n",
            "é",
            "東京",
            "👍🏽",
            "the",
            "\r\n",
            "'s",
        ]
    ),
    max_size=30,
).map("".join)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(texts)
def test_decode_encode_round_trip(text):
    tok = byte_tokenizer()
    assert tok.decode(tok.encode(text, disallowed_special=())) == text
    assert tok.decode(tok.encode(text, allowed_special="all")) == text
    assert tok.decode(tok.encode_ordinary(text)) == text
    assert tok.decode_bytes(tok.encode_ordinary(text)) == text.encode("utf-8")


@settings(max_examples=150, deadline=None)
@given(st.lists(st.text(alphabet="abcdefgh ", min_size=1, max_size=40), min_size=1, max_size=5))
def test_segmentation_undoes_with_subword_nmts_rule(lines):
    segmenter = Segmenter(fused_tokenizer())
    for line in lines:
        segmented = segmenter.segment_line(line + "\n")
        if not line.strip():
            assert segmented == line + "\n"
            continue
        lead = line[: len(line) - len(line.lstrip(" "))]
        trail = line[len(line.rstrip(" ")) :]
        assert segmented.replace("@@ ", "") == lead + " ".join(line.split()) + trail + "\n"


# --- engine == naive reference ---------------------------------------------------------------------

# Small alphabets make ties and overlapping pairs common; 'é' and '東' are multi-byte in the byte
# scheme; words that spell '</w>' make char-scheme merges whose result is an end-of-word symbol
# that already exists (the merge reuses its id).
ALPHABETS = ["ab", "abc", "aé東", "marker", "marker"]


@st.composite
def training_cases(draw):
    alphabet = draw(st.sampled_from(ALPHABETS))
    if alphabet == "marker":
        words = st.lists(st.sampled_from(["a", "b", "</w>"]), min_size=1, max_size=4).map("".join)
    else:
        words = st.text(alphabet=alphabet, min_size=1, max_size=8)
    counts = draw(
        st.dictionaries(words, st.integers(1, 30) | st.just(2**33 + 1), min_size=1, max_size=12)
    )
    scheme, end_of_word = draw(
        st.sampled_from([("byte", "separate"), ("char", "separate"), ("char", "fused")])
    )
    tie_break = draw(st.sampled_from(["hf", "lexicographic"]))
    specials = draw(st.sampled_from([(), ("<s>",), ("<s>", "<pad>")]))
    if scheme == "byte":
        alphabet_size = 256
    elif end_of_word == "separate":
        alphabet_size = len({ch for word in counts for ch in word}) + 1
    else:
        alphabet_size = len({ch for word in counts for ch in word}) + len(
            {word[-1] for word in counts}
        )
    vocab_size = alphabet_size + len(specials) + draw(st.integers(0, 40))
    min_frequency = draw(st.sampled_from([0, 0, 1, 2, 5]))
    max_merges = draw(st.sampled_from([None, None, 3, 10]))
    cfg = TrainerConfig(
        vocab_size=vocab_size,
        scheme=scheme,
        end_of_word=end_of_word,
        pattern="whitespace",
        tie_break=tie_break,
        special_tokens=specials,
        min_frequency=min_frequency,
        max_merges=max_merges,
    )
    return counts, cfg


@settings(max_examples=400, deadline=None)
@given(training_cases())
def test_engine_equals_naive_reference(case):
    counts, cfg = case
    tok = train_from_counts(counts, cfg)
    reference = naive_train(
        counts,
        scheme=cfg.scheme,
        end_of_word=cfg.end_of_word,
        tie_break=cfg.tie_break,
        vocab_size=cfg.vocab_size,
        special_tokens=cfg.special_tokens,
        min_frequency=cfg.min_frequency,
        max_merges=cfg.max_merges,
    )
    assert tok.merges == reference.merges  # the default engine (the compiled core when built)
    assert tok.metadata["merge_counts"] == reference.counts
    assert tok.vocab == reference.vocab
    # the pure-Python core, explicitly
    table = initial_table(cfg, counts)
    engine = MergeEngine(
        table,
        [word_symbols(w, table, cfg) for w in counts],
        list(counts.values()),
        backend="python",
    )
    merges = engine.run(
        max_new_tokens=new_token_budget(cfg, table),
        max_merges=cfg.max_merges,
        min_frequency=cfg.min_frequency,
    )
    assert [(table.value(m.left), table.value(m.right)) for m in merges] == reference.merges
    assert [m.count for m in merges] == reference.counts
