"""Acceptance 5 and 6: the seed articles' example, Sennrich et al.'s toy vocabulary, and the other
worked examples of tests/fixtures/peers (toy/, hf_tokenizers/) that fit our tie-break policies."""

from __future__ import annotations

import json

import pytest
from tests.conftest import PEERS

from bpe_spark import Tokenizer, TrainerConfig, train, train_from_counts

ALICE = """Alice was beginning to get very tired of sitting by her sister on the bank, and of having
nothing to do: once or twice she had peeped into the book her sister was reading, but it
had no pictures or conversations in it, 'and what is the use of a book,' thought Alice
'without pictures or conversation?' So she was considering in her own mind (as well as she
could, for the hot day made her feel very sleepy and stupid), whether the pleasure of making
a daisy-chain would be worth the trouble of getting up and picking the daisies, when
suddenly a White Rabbit with pink eyes ran close by her."""
QUERY = "Alice thought reading was tiresome without pictures."
SEED_CFG = TrainerConfig(
    vocab_size=10_000,
    scheme="char",
    end_of_word="separate",
    pattern="words",
    lowercase=True,
    max_merges=75,
)
SENNRICH = {"low": 5, "lower": 2, "newest": 6, "widest": 3}
SENNRICH_LEXICOGRAPHIC = [
    "t </w>",
    "s t</w>",
    "e st</w>",
    "o w",
    "l ow",
    "w est</w>",
    "n e",
    "ne west</w>",
    "low </w>",
    "w i",
]
SENNRICH_HF = [
    "e s",
    "t </w>",
    "es t</w>",
    "l o",
    "lo w",
    "e w",
    "n ew",
    "new est</w>",
    "low </w>",
    "d est</w>",
]


def toy_examples() -> dict:
    return json.loads((PEERS / "toy" / "toy_examples.json").read_text(encoding="utf-8"))


def hf_trainer_tests() -> dict:
    return json.loads(
        (PEERS / "hf_tokenizers" / "trainer_rs_tests.json").read_text(encoding="utf-8")
    )


def joined(merges) -> list[str]:
    return [f"{left} {right}" for left, right in merges]


# --- acceptance 5: the seed articles' Alice passage --------------------------------------------


@pytest.mark.parametrize(
    ("tie_break", "expected"),
    [
        (
            "hf",
            [
                "al",
                "ice</w>",
                "th",
                "ou",
                "g",
                "h",
                "t</w>",
                "r",
                "e",
                "ad",
                "ing</w>",
                "was</w>",
                "ti",
                "r",
                "e",
                "s",
                "o",
                "m",
                "e</w>",
                "with",
                "ou",
                "t</w>",
                "pic",
                "tur",
                "es</w>",
                ".",
                "</w>",
            ],
        ),
        (
            "lexicographic",
            [
                "a",
                "lice</w>",
                "th",
                "ou",
                "g",
                "h",
                "t</w>",
                "re",
                "a",
                "d",
                "ing</w>",
                "was</w>",
                "ti",
                "re",
                "s",
                "o",
                "m",
                "e</w>",
                "with",
                "ou",
                "t</w>",
                "pictures</w>",
                ".",
                "</w>",
            ],
        ),
    ],
)
def test_seed_alice_example(tie_break, expected):
    tok = train(ALICE, SEED_CFG.replace(tie_break=tie_break))
    assert len(tok.merges) == 75
    tokens = tok.tokens(QUERY)
    assert tokens == expected
    learned = set(tok.vocab.values())
    assert all(token in learned for token in tokens)
    # every word ends in </w>, and the subwords of each word spell it
    words = "".join(tokens).split("</w>")
    assert words[-1] == "" and words[:-1] == [
        "alice",
        "thought",
        "reading",
        "was",
        "tiresome",
        "without",
        "pictures",
        ".",
    ]
    assert tok.decode(tok.encode(QUERY)) == "alice thought reading was tiresome without pictures ."


def test_seed_alice_frequent_words_become_single_tokens():
    tok = train(ALICE, SEED_CFG)
    assert tok.tokens("the her of") == ["the</w>", "her</w>", "of</w>"]
    assert tok.merges[0] == ("e", "</w>")  # 'e' ends more words than any other pair occurs


# --- acceptance 6: Sennrich et al. (2016) toy vocabulary ------------------------------------------


@pytest.mark.parametrize(
    ("tie_break", "expected"), [("lexicographic", SENNRICH_LEXICOGRAPHIC), ("hf", SENNRICH_HF)]
)
def test_sennrich_toy_vocabulary(tie_break, expected):
    cfg = TrainerConfig(
        vocab_size=1000,
        scheme="char",
        end_of_word="separate",
        pattern="whitespace",
        tie_break=tie_break,
        max_merges=10,
    )
    tok = train_from_counts(SENNRICH, cfg)
    assert joined(tok.merges) == expected
    # the same counts given as text train the same merges
    text = " ".join(word for word, count in SENNRICH.items() for _ in range(count))
    assert train(text, cfg).merges == tok.merges


def test_sennrich_fixture_lexicographic_list_and_final_segmentation():
    example = toy_examples()["sennrich2016_algorithm1"]
    counts = {
        key.replace(" ", "").removesuffix("</w>"): count for key, count in example["vocab"].items()
    }
    assert counts == SENNRICH
    cfg = TrainerConfig(
        vocab_size=1000,
        scheme="char",
        end_of_word="separate",
        pattern="whitespace",
        tie_break="lexicographic",
        max_merges=example["num_merges"],
    )
    tok = train_from_counts(counts, cfg)
    assert [list(merge) for merge in tok.merges] == example[
        "expected_merges_lexicographically_greatest_tiebreak"
    ]
    # the words as the 10 merges leave them (the fixture's first-seen rule agrees here)
    for key in example["final_vocab_both_rules"]:
        word = key.replace(" ", "").removesuffix("</w>")
        assert " ".join(tok.tokens(word)) == key


def test_cs336_handout_training_example():
    example = toy_examples()["cs336_handout_bpe_example"]
    specials = tuple(example["special_tokens"])
    n = len(example["expected_merges"])
    cfg = TrainerConfig(
        vocab_size=256 + len(specials) + n,
        pattern="whitespace",
        special_tokens=specials,
        tie_break="lexicographic",
    )
    tok = train(example["corpus"], cfg)
    assert [f"{a.decode()} {b.decode()}" for a, b in tok.merges] == example["expected_merges"]
    six = train(example["corpus"], cfg.replace(vocab_size=256 + len(specials) + 6))
    assert [six.vocab[256 + i].decode() for i in range(6)] == example[
        "after_6_merges_vocab_additions"
    ]
    assert six.tokens("newest") == example["after_6_merges_encode_newest"]
    # with the GPT-2 pattern instead, the spaces stay attached to words
    gpt2 = train(example["corpus"], cfg.replace(pattern="gpt2"))
    expected = [
        pair.replace("|", " ") for pair in example["note_if_gpt2_regex_used_instead_first_12"]
    ]
    assert [f"{a.decode()} {b.decode()}" for a, b in gpt2.merges] == expected


def test_cs336_handout_encoding_example():
    example = toy_examples()["cs336_handout_encode_example"]
    vocab = {int(i): token for i, token in example["vocab"].items()}
    ids = {token: i for i, token in vocab.items()}
    # a char-level vocabulary without an end-of-word marker, GPT-2 pretokenization
    tok = Tokenizer(
        scheme="char",
        vocab=vocab,
        merges=[(ids[a], ids[b]) for a, b in example["merges"]],
        pattern="gpt2",
        end_of_word=None,
    )
    assert tok.encode(example["text"]) == example["expected_ids"]
    assert tok.decode(example["expected_ids"]) == example["text"]


@pytest.mark.parametrize("tie_break", ["hf", "lexicographic"])
def test_minbpe_wikipedia_example(tie_break):
    example = toy_examples()["minbpe_wikipedia_example"]
    cfg = TrainerConfig(vocab_size=example["vocab_size"], pattern="whitespace", tie_break=tie_break)
    tok = train(example["text"], cfg)
    assert len(tok.merges) == example["num_merges"]
    assert tok.encode(example["text"]) == example["expected_ids_minbpe_layout"]
    assert tok.tokens(example["text"]) == example["expected_token_bytes"]


def test_hf_trainer_word_counts():
    case = hf_trainer_tests()["test_train"]
    counts, expected_vocab = case["word_counts"], case["expected_vocab"]
    expected_merges = [tuple(pair) for pair in case["expected_merges_in_order"]]
    cfg = TrainerConfig(
        vocab_size=case["vocab_size"],
        pattern="whitespace",
        min_frequency=case["min_frequency"],
        tie_break="hf",
    )
    tok = train_from_counts(counts, cfg)
    assert [(a.decode(), b.decode()) for a, b in tok.merges] == expected_merges
    # merged tokens in creation order, after the alphabet, as in the expected vocabulary
    merged = sorted((token for token in expected_vocab if len(token) > 1), key=expected_vocab.get)
    assert [tok.vocab[256 + i].decode() for i in range(len(merged))] == merged
    # lexicographic takes the other side of the 'a re' / 'i s' tie
    lexi = train_from_counts(counts, cfg.replace(tie_break="lexicographic"))
    assert [(a.decode(), b.decode()) for a, b in lexi.merges] == [
        ("r", "e"),
        ("i", "s"),
        ("a", "re"),
    ]


def test_hf_trainer_alphabet_ids_match_char_scheme():
    # Our char scheme numbers the alphabet by code point from 0, as tokenizers does; the rest of
    # its vocabulary differs only because our char scheme always marks word ends.
    case = hf_trainer_tests()["test_train"]
    cfg = TrainerConfig(
        vocab_size=1000, scheme="char", end_of_word="fused", pattern="whitespace", min_frequency=2
    )
    tok = train_from_counts(case["word_counts"], cfg)
    alphabet = {token: i for token, i in case["expected_vocab"].items() if len(token) == 1}
    assert {tok.vocab[i]: i for i in range(len(alphabet))} == alphabet


def test_hf_train_from_iterator_stops_when_pairs_run_out():
    case = hf_trainer_tests()["python_test_train_from_iterator"]
    tok = train(
        case["train_texts"], TrainerConfig(vocab_size=30000, pattern="gpt2", tie_break="hf")
    )
    assert tok.vocab_size < 30000
    assert tok.tokens(case["encode"]) == case["expected_token_bytes"]
