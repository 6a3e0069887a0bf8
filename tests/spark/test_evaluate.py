"""``evaluate`` on Spark and ``bpe-spark evaluate`` (issue 42): the one-pass job's figures equal
a plain computation (tests/evaluate_reference.py) grouped by a column and by script, and are the
same in 1 and 8 partitions; the command writes the report directory, and fails in one line
before Spark starts for an unknown model, a missing group column or an existing output."""

from __future__ import annotations

import json

import pytest
from tests.evaluate_reference import check_figures, plain_script, reference, small_corpus, small_models

from bpe_spark.cli import main
from bpe_spark.spark import evaluate

RATIO, MINIMUM = 3, 5


corpus = pytest.fixture(scope="module", name="corpus")(small_corpus)
models = pytest.fixture(scope="module", name="models")(small_models)


@pytest.fixture(scope="module")
def frame(spark, corpus):
    return spark.createDataFrame(corpus, "text string, lang string")


def test_figures_by_column_equal_the_plain_ones_in_1_and_8_partitions(frame, models, corpus):
    runs = [evaluate(frame.coalesce(1), models, group_by="lang", residue_ratio=RATIO, residue_min=MINIMUM),
            evaluate(frame.repartition(8), models, group_by="lang", residue_ratio=RATIO, residue_min=MINIMUM)]
    assert runs[0] == runs[1]  # every figure, bit for bit
    expected = reference(models, corpus, lambda text, lang: "(null)" if lang is None else lang, RATIO, MINIMUM)
    check_figures(runs[0], expected, list(models))
    assert runs[0]["models"][1]["round_trip_failures"] > 0


def test_figures_by_script_equal_the_plain_ones(frame, models, corpus):
    figures = evaluate(frame.repartition(3), list(models.values()), names=list(models), group_by="script",
                       residue_ratio=RATIO, residue_min=MINIMUM)
    check_figures(figures, reference(models, corpus, lambda text, lang: plain_script(text), RATIO, MINIMUM,
                                     parity_leaves_out="none"),
                  list(models))
    assert {"Latin", "Han", "Cyrillic"} <= set(figures["groups"])


def test_figures_of_texts_from_utf8_buffers_equal_the_plain_ones(frame, models, corpus):
    # no null text, no grouping: the compiled model encodes the Arrow column's buffers as they are
    rows = [(text, lang) for text, lang in corpus if text is not None]
    figures = evaluate(frame.where("text is not null").repartition(4), models, residue_ratio=RATIO,
                       residue_min=MINIMUM)
    check_figures(figures, reference(models, rows, lambda text, lang: "all", RATIO, MINIMUM), list(models))
    assert figures["models"][0]["parity"] is None  # one group: no parity to speak of


def test_a_missing_group_column_is_named(frame, models):
    from bpe_spark.errors import ColumnError

    with pytest.raises(ColumnError, match="'language' not found"):
        evaluate(frame, models, group_by="language")


@pytest.fixture(scope="module")
def files(tmp_path_factory, corpus, models):
    root = tmp_path_factory.mktemp("evaluate-cli")
    docs = root / "docs.jsonl"
    docs.write_text("".join(json.dumps({"text": t, "lang": g}) + "\n" for t, g in corpus if t is not None),
                    encoding="utf-8")
    models["bytelevel"].save(root / "bytelevel")
    models["lower"].save(root / "lower")
    return root


def test_the_command_writes_the_report_and_json(spark, files, corpus, capsys):
    out = files / "eval"
    argv = ["evaluate", "--model", str(files / "bytelevel"), "--model", f"low={files / 'lower'}",
            "--input", str(files / "docs.jsonl"), "--group-by", "lang", "--out", str(out), "--progress", "off"]
    assert main(argv) == 0, capsys.readouterr().err
    printed = capsys.readouterr().out.splitlines()
    documents = sum(1 for text, _ in corpus if text is not None)
    assert printed[0].startswith(f"evaluated {documents} documents") and "groups by lang" in printed[0]
    assert printed[1].startswith("  bytelevel: ") and printed[2].startswith("  low: ")
    figures = json.loads((out / "evaluation.json").read_text(encoding="utf-8"))
    assert [m["name"] for m in figures["models"]] == ["bytelevel", "low"]
    assert figures["models"][1]["round_trip_failures"] > 0 and "round-trip failures" in printed[2]
    assert (out / "report.html").is_file()
    # an existing output: refused before Spark starts unless --overwrite
    assert main(argv) == 2
    assert "already exists; pass --overwrite" in capsys.readouterr().err


def test_errors_are_one_line_before_spark(files, tmp_path, capsys, no_spark):
    docs = str(files / "docs.jsonl")
    cases = [
        (["--model", str(tmp_path / "missing"), "--input", docs], "no such file or directory"),
        (["--model", str(files / "bytelevel"), "--input", docs, "--group-by", "language"], "'language' not found"),
        (["--model", str(files / "bytelevel"), "--input", str(files / "bytelevel" / "bpe_spark.json"),
          "--input-format", "text", "--group-by", "lang"], "text input has no columns"),
        (["--model", str(files / "bytelevel"), "--input", docs, "--top", "0"], "--top must be >= 1"),
        (["--model", str(files / "bytelevel"), "--input", docs, "--out", str(files / "bytelevel")],
         "--out"),
    ]
    for argv, said in cases:
        assert main(["evaluate", *argv]) == 2, argv
        err = capsys.readouterr().err
        assert said in err and err.count("\n") == 1, (argv, err)


def test_the_spark_submit_job_runs_the_command(spark, files, monkeypatch, capsys):
    from tests.spark.test_jobs import run_job

    out = files / "job-eval"
    assert run_job("evaluate_tokenizers", "--model", str(files / "bytelevel"), "--input", str(files / "docs.jsonl"),
                   "--out", str(out), "--progress", "off", monkeypatch=monkeypatch) == 0
    assert capsys.readouterr().out.startswith("evaluated ")
    assert json.loads((out / "evaluation.json").read_text(encoding="utf-8"))["group_by"] is None


def test_the_command_groups_text_by_script_and_reports_progress(spark, files, corpus, capsys):
    text = files / "docs.txt"
    text.write_text("".join(t if t.endswith("\n") else t + "\n" for t, _ in corpus if t), encoding="utf-8")
    out = files / "eval-script"
    assert main(["evaluate", "--model", str(files / "bytelevel"), "--input", str(text), "--group-by", "script",
                 "--out", str(out)]) == 0
    captured = capsys.readouterr()
    assert "bpe-spark evaluate: evaluating: done" in captured.err  # not a terminal: progress logs lines
    figures = json.loads((out / "evaluation.json").read_text(encoding="utf-8"))
    assert figures["group_by"] == "script" and {"Latin", "Han", "Cyrillic"} <= set(figures["groups"])
    assert figures["models"][0]["parity"]["worst_group"] in figures["groups"]
