"""An evaluation computed the plain way, for the evaluate tests: Python loops over
``Tokenizer.encode`` / ``Tokenizer.decode`` per document, sorted lists for percentiles, pairwise
sums for the Gini coefficient, a recursive walk of merge trees for the residue. Written apart
from bpe_spark.inspect.evaluate_*, so the two check each other. And the small corpus and models
the tests share."""

from __future__ import annotations

import math
import unicodedata
from collections import Counter

from tests.conftest import corpus_lines

SCRIPT_WORDS = {"LATIN": "Latin", "CJK": "Han", "CYRILLIC": "Cyrillic", "GREEK": "Greek", "ARABIC": "Arabic",
                "HIRAGANA": "Hiragana", "KATAKANA": "Katakana", "HANGUL": "Hangul", "DEVANAGARI": "Devanagari",
                "HEBREW": "Hebrew", "THAI": "Thai"}


def small_corpus() -> list[tuple[str | None, str | None]]:
    """``(text, lang)`` rows: lines of three shared corpora, with a null text, an empty one, a
    null language, special-token text and upper case."""
    rows = []
    for name, lang in (("en_books", "en"), ("zh_classics", "zh"), ("multilingual", "multi")):
        rows += [(line, lang) for line in corpus_lines(name, 12_000)[:120]]
    rows += [(None, "en"), ("", "en"), ("<|endoftext|> The END\n", None), ("Привет, мир!\n", "ru"),
             ("Ünïcödé Straße 42\n", "de"), ("1984 -- 42!\n", "en")]  # the last: no letter, script "none"
    return rows


def small_models(corpus) -> dict:
    """Three models of the small corpus: byte-level with a special token, one that lowercases
    (so it decodes upper case wrong: round-trip failures), and a char-scheme one of whole words
    (its spaces are lost: checked by ``tok.decode``, document by document)."""
    from bpe_spark import TrainerConfig, train

    texts = [text for text, _ in corpus if text]
    return {
        "bytelevel": train(texts, TrainerConfig(vocab_size=600, special_tokens=("<|endoftext|>",))),
        "lower": train(texts, TrainerConfig(vocab_size=400, lowercase=True)),
        "chars": train(texts, TrainerConfig(vocab_size=3000, scheme="char", pattern="words")),
    }


def plain_script(text: str) -> str:
    scripts = Counter()
    for ch in text:
        if unicodedata.category(ch).startswith("L"):
            words = unicodedata.name(ch, "").split()
            while words and words[0] in ("FULLWIDTH", "HALFWIDTH"):
                words.pop(0)
            scripts[SCRIPT_WORDS.get(words[0] if words else "", "other")] += 1
    if not scripts:
        return "none"
    best = max(scripts.values())
    return min(name for name, n in scripts.items() if n == best)


def nearest_rank(values: list[int], p: float) -> int:
    ordered = sorted(values)
    return ordered[max(1, math.ceil(p / 100 * len(ordered))) - 1]


def pairwise_gini(values: list[float]) -> float:
    n, mean = len(values), sum(values) / len(values)
    return sum(abs(a - b) for a in values for b in values) / (2 * n * n * mean)


def residue_walk(tok, produced: Counter, ratio: int, minimum: int) -> set[int]:
    first = {}
    for left, right, new in tok.merge_ids:
        first.setdefault(new, (left, right))
    through = Counter()

    def walk(token_id: int, times: int) -> None:
        for part in first.get(token_id, ()):
            through[part] += times
            walk(part, times)

    for token_id, times in produced.items():
        walk(token_id, times)
    made = set(first) | {t for t, v in tok.ordinary_vocab.items() if tok.scheme == "byte" and len(v) > 1}
    return {t for t in made if through[t] >= minimum and produced[t] * ratio <= through[t]}


def reference(tokenizers: dict, rows, group=lambda text, lang: lang, ratio: int = 100, minimum: int = 100,
              parity_leaves_out: str | None = None) -> dict:
    """The figures the tests check, per model name, computed the plain way."""
    docs = [(text, group(text, lang)) for text, lang in rows if text is not None]
    out = {"documents": len(docs), "null_documents": sum(1 for text, _ in rows if text is None)}
    doc_bytes = [len(text.encode("utf-8")) for text, _ in docs]
    out["bytes"] = sum(doc_bytes)
    out["bytes_p50"], out["bytes_p99"] = nearest_rank(doc_bytes, 50), nearest_rank(doc_bytes, 99)
    out["chars_p99"] = nearest_rank([len(text) for text, _ in docs], 99)
    out["groups"], out["models"] = Counter(), {}
    for text, g in docs:
        out["groups"][g] += 1
    for name, tok in tokenizers.items():
        ids = [tok.encode(text, disallowed_special=()) for text, _ in docs]
        lengths = [len(i) for i in ids]
        produced = Counter(t for one in ids for t in one)
        by_group_bytes, by_group_tokens = Counter(), Counter()
        for (text, g), one in zip(docs, ids):
            by_group_bytes[g] += len(text.encode("utf-8"))
            by_group_tokens[g] += len(one)
        rates = {g: by_group_tokens[g] / by_group_bytes[g] for g in by_group_bytes
                 if by_group_bytes[g] and g != parity_leaves_out}
        ordinary = [t for t in tok.ordinary_vocab]
        out["models"][name] = {
            "tokens": sum(lengths),
            "bytes_per_token": out["bytes"] / sum(lengths),
            "mean": sum(lengths) / len(lengths), "p50": nearest_rank(lengths, 50), "p99": nearest_rank(lengths, 99),
            "failures": sum(1 for (text, _), one in zip(docs, ids) if tok.decode(one) != text),
            "group_bpt": {g: by_group_bytes[g] / by_group_tokens[g] for g in by_group_bytes if by_group_tokens[g]},
            "gini": pairwise_gini(list(rates.values())) if len(rates) > 1 else None,
            "worst_to_best": max(rates.values()) / min(rates.values()) if len(rates) > 1 and min(rates.values())
            else None,  # no tokens at all for the best group's bytes: no ratio
            "unused": sum(1 for t in ordinary if not produced[t]),
            "residue": residue_walk(tok, produced, ratio, minimum),
            "most_frequent": [t for t, _ in sorted(produced.items(), key=lambda kv: (-kv[1], kv[0]))[:5]],
        }
    return out


def check_figures(figures: dict, expected: dict, names: list[str]) -> None:
    """The figures of bpe-spark's evaluation equal the plain ones."""
    import pytest

    assert figures["documents"] == expected["documents"]
    assert figures["null_documents"] == expected["null_documents"]
    assert figures["bytes"] == expected["bytes"]
    assert figures["bytes_per_document"]["p50"] == expected["bytes_p50"]
    assert figures["bytes_per_document"]["p99"] == expected["bytes_p99"]
    assert figures["characters_per_document"]["p99"] == expected["chars_p99"]
    assert {g: v["documents"] for g, v in figures["groups"].items()} == dict(expected["groups"])
    assert [m["name"] for m in figures["models"]] == names
    for model in figures["models"]:
        want = expected["models"][model["name"]]
        assert model["tokens"] == want["tokens"]
        assert model["bytes_per_token"] == pytest.approx(want["bytes_per_token"], rel=1e-12)
        stats = model["tokens_per_document"]
        assert (stats["p50"], stats["p99"]) == (want["p50"], want["p99"])
        assert stats["mean"] == pytest.approx(want["mean"], rel=1e-12)
        assert model["round_trip_failures"] == want["failures"]
        assert {g: v["bytes_per_token"] for g, v in model["groups"].items() if v["tokens"]} == \
            pytest.approx(want["group_bpt"], rel=1e-12)
        parity = model["parity"] or {}
        assert parity.get("gini") == (None if want["gini"] is None else pytest.approx(want["gini"], rel=1e-9))
        assert parity.get("worst_to_best") == (None if want["worst_to_best"] is None
                                               else pytest.approx(want["worst_to_best"], rel=1e-12))
        assert model["vocabulary"]["unused"] == want["unused"]
        assert model["vocabulary"]["residue"] == len(want["residue"])
        listed = {row["id"] for row in model["vocabulary"]["residue_tokens"]}
        assert listed <= want["residue"]
        assert [row["id"] for row in model["most_frequent"][:5]] == want["most_frequent"]
