"""The figures of an evaluation without Spark (issue 42): the tally of a batch of documents and
its figures equal a plain computation (tests/evaluate_reference.py), grouped by a column and by
script; tallies of parts add up to the tally of the whole, through their rows too; the report
directory holds valid plots, a table whose figures are the JSON's, and is never overwritten
without ``overwrite``."""

from __future__ import annotations

import json

import pytest
from tests.evaluate_reference import check_figures, plain_script, reference, small_corpus, small_models
from tests.report_checks import ReportPage, check_plot

from bpe_spark.encoding.batch_encoder import BatchEncoder
from bpe_spark.errors import OutputExistsError, OutputRefusedError
from bpe_spark.inspect.evaluate_figures import evaluation_figures
from bpe_spark.inspect.evaluate_report import JSON_FILE, REPORT_FILE, write_evaluation
from bpe_spark.inspect.evaluate_stats import NULL_GROUP, Tally, document_script, tally_texts

RATIO, MINIMUM = 3, 5  # residue thresholds low enough for a small corpus to have some


corpus = pytest.fixture(scope="module", name="corpus")(small_corpus)
models = pytest.fixture(scope="module", name="models")(small_models)


def in_process(models, rows, group, group_by: str = "test") -> dict:
    texts = [text for text, _ in rows]
    groups = [group(text, lang) for text, lang in rows]
    tally = tally_texts([BatchEncoder(tok) for tok in models.values()], texts, groups)
    return evaluation_figures(tally, list(models.values()), list(models), group_by=group_by,
                              residue_ratio=RATIO, residue_min=MINIMUM)


def by_lang(text, lang):
    return NULL_GROUP if lang is None else lang


def by_script(text, lang):
    return NULL_GROUP if text is None else document_script(text)


def test_figures_equal_the_plain_computation_by_column(models, corpus):
    figures = in_process(models, corpus, by_lang)
    expected = reference(models, corpus, by_lang, RATIO, MINIMUM)
    check_figures(figures, expected, list(models))
    assert figures["models"][1]["round_trip_failures"] > 0  # lowercase: never silent
    assert figures["models"][1]["round_trip_example"] is not None
    assert figures["models"][0]["round_trip_failures"] == 0
    assert any(m["vocabulary"]["residue"] for m in figures["models"])
    assert NULL_GROUP in figures["groups"]


def test_the_script_of_a_document(corpus):
    for text, _ in corpus:
        if text is not None:
            assert document_script(text) == plain_script(text), text
    assert document_script("東京は大きい") == "Han"  # 東京大 against は, き, い: three each, Han first by name
    assert document_script("ab ΓΔΕ") == "Greek" and document_script("") == "none"


def test_figures_equal_the_plain_computation_by_script(models, corpus):
    figures = in_process(models, corpus, by_script, group_by="script")
    expected = reference(models, corpus, lambda text, lang: plain_script(text), RATIO, MINIMUM, parity_leaves_out="none")
    assert "none" in figures["groups"]  # documents without letters: a row of their own, out of parity
    check_figures(figures, expected, list(models))
    assert {"Latin", "Han", "Cyrillic"} <= set(figures["groups"])


def test_tallies_of_parts_add_up_to_the_whole(models, corpus):
    encoders = [BatchEncoder(tok) for tok in models.values()]
    texts, langs = [t for t, _ in corpus], [by_lang(t, g) for t, g in corpus]
    whole = tally_texts(encoders, texts, langs)
    parts = Tally(len(encoders))
    for lo in range(0, len(texts), 37):
        part = tally_texts(encoders, texts[lo:lo + 37], langs[lo:lo + 37])
        parts.add(Tally.from_rows(len(encoders), sorted(part.rows(), key=lambda r: r[:4])))
    assert sorted(parts.rows()) == sorted(whole.rows())
    assert parts.documents == whole.documents and parts.failures == whole.failures


@pytest.fixture(scope="module")
def written(models, corpus, tmp_path_factory):
    figures = in_process(models, corpus, by_lang)
    out = tmp_path_factory.mktemp("evaluation") / "eval"
    write_evaluation(figures, out)
    return figures, out


# the rows of the report's table and where the JSON holds them
TABLE = {
    "bytes per token": lambda m: m["bytes_per_token"],
    "characters per token": lambda m: m["characters_per_token"],
    "tokens": lambda m: m["tokens"],
    "tokens per document, mean": lambda m: m["tokens_per_document"]["mean"],
    "tokens per document, p50": lambda m: m["tokens_per_document"]["p50"],
    "tokens per document, p99": lambda m: m["tokens_per_document"]["p99"],
    "round-trip failures": lambda m: m["round_trip_failures"],
    "vocabulary size": lambda m: m["vocabulary"]["size"],
    "tokens never produced": lambda m: m["vocabulary"]["unused"],
    "share never produced": lambda m: m["vocabulary"]["unused_share"],
    "residue tokens": lambda m: m["vocabulary"]["residue"],
    "residue share": lambda m: m["vocabulary"]["residue_share"],
    "parity: Gini of tokens per byte": lambda m: (m["parity"] or {}).get("gini"),
    "parity: worst to best": lambda m: (m["parity"] or {}).get("worst_to_best"),
    "parity: worst group": lambda m: (m["parity"] or {}).get("worst_group"),
}


def _same(shown: str, value) -> bool:
    if value is None:
        return shown == "-"
    if isinstance(value, str):
        return shown == value
    if isinstance(value, int):
        return int(shown.replace(",", "")) == value
    return abs(float(shown) - value) <= 0.5e-4


def test_the_report_holds_real_plots_and_the_json_figures(written):
    figures, out = written
    assert sorted(p.name for p in out.iterdir()) == ["_BPE_SPARK", JSON_FILE, REPORT_FILE]
    saved = json.loads((out / JSON_FILE).read_text(encoding="utf-8"))
    assert saved == json.loads(json.dumps(figures))
    page = ReportPage((out / REPORT_FILE).read_text(encoding="utf-8"))
    assert not page.external
    assert len(page.images) == 3, list(page.images)
    for title, png in page.images.items():
        check_plot(png, title)
    width = 1 + len(saved["models"])
    header = next(row for row in page.grid if row[:1] == ["figure"] and len(row) == width)
    assert header[1:] == [m["name"] for m in saved["models"]]
    table = {row[0]: row[1:] for row in page.grid if len(row) == width}
    checked = 0
    for label, get in TABLE.items():
        for shown, model in zip(table[label], saved["models"]):
            assert _same(shown, get(model)), (label, model["name"], shown, get(model))
            checked += 1
    for group in saved["groups"]:
        for shown, model in zip(table[f"bytes per token: {group}"], saved["models"]):
            assert _same(shown, model["groups"][group]["bytes_per_token"]), (group, shown)
            checked += 1
    assert checked == len(saved["models"]) * (len(TABLE) + len(saved["groups"]))
    assert "Bytes per token by group (test)" in page.images


def test_an_existing_output_is_replaced_only_with_overwrite(written, tmp_path):
    figures, out = written
    with pytest.raises(OutputExistsError, match="overwrite"):
        write_evaluation(figures, out)
    write_evaluation(figures, out, overwrite=True)  # an earlier evaluation: replaced
    other = tmp_path / "other"
    other.mkdir()
    (other / "notes.txt").write_text("mine")
    with pytest.raises(OutputRefusedError, match="not an earlier bpe-spark evaluation"):
        write_evaluation(figures, other, overwrite=True)
    assert (other / "notes.txt").read_text() == "mine"
