"""``bpe-spark train`` writes report.html into the model directory (issue 16, item 5): every plot a
real image, the sample's origin said; --report-sample, --no-report; a report that fails never
fails the training."""

from __future__ import annotations

import pytest
from tests.conftest import corpus_text
from tests.report_checks import ReportPage, check_plot

from bpe_spark.cli import main
from bpe_spark.encoding.tokenizer import Tokenizer

pytestmark = [pytest.mark.spark, pytest.mark.report]


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    folder = tmp_path_factory.mktemp("report-corpus")
    (folder / "train.txt").write_text(corpus_text("tiny_shakespeare", 150_000), encoding="utf-8")
    (folder / "held_out.txt").write_text(corpus_text("en_books", 100_000), encoding="utf-8")
    return folder


def test_train_writes_the_report_with_every_plot(spark, corpus, tmp_path, capsys):
    out = tmp_path / "model"
    assert main(["train", "--input", str(corpus / "train.txt"), "--vocab-size", "1000", "--out", str(out)]) == 0
    printed = capsys.readouterr()
    assert f"report: {out / 'report.html'}" in printed.out and "report " in printed.out  # its time in the summary
    assert "warning" not in printed.err
    page = ReportPage((out / "report.html").read_text(encoding="utf-8"))
    assert list(page.images) == [
        "Training count of each merge, by rank",
        "Bytes per token as the vocabulary grows (sample from the training data: the first 256 KB of train.txt)",
        "Token length histogram", "Share of the vocabulary by script or byte class", "Time of each phase and round"]
    for title, png in page.images.items():
        check_plot(png, title)
    tok = Tokenizer.load(out)  # the model with its report loads as before
    stats = tok.metadata["stats"]
    assert page.rows["vocabulary"] == "1,000 = 256 byte + 744 merge"
    assert page.rows["documents"] == f"{stats['documents']:,}" and page.rows["corpus bytes"] == f"{stats['bytes']:,}"
    assert page.rows["rounds"] == f"1 (driver, driver budget {stats['driver_budget']:,} pretokens)"
    counts = tok.metadata["merge_counts"]
    assert page.rows["merge counts"] == f"first {counts[0]:,}, last {counts[-1]:,} (where training stopped)"


def test_report_sample_no_report_and_a_failing_report(spark, corpus, tmp_path, capsys, monkeypatch):
    out = tmp_path / "model"
    common = ["train", "--input", str(corpus / "train.txt"), "--vocab-size", "300", "--out", str(out),
              "--progress", "off"]
    assert main([*common, "--report-sample", str(corpus / "held_out.txt")]) == 0
    page = ReportPage((out / "report.html").read_text(encoding="utf-8"))
    assert "Bytes per token as the vocabulary grows (sample held out: held_out.txt)" in page.images
    assert main([*common, "--overwrite", "--no-report"]) == 0
    assert not (out / "report.html").exists()
    capsys.readouterr()
    assert main([*common, "--overwrite", "--report-sample", str(tmp_path / "missing.txt")]) == 2
    err = capsys.readouterr().err
    assert err == f"bpe-spark train: error: --report-sample {tmp_path / 'missing.txt'}: no such file; give a local text file\n"

    def broken(*args, **kwargs):
        raise RuntimeError("the plotting library broke")

    monkeypatch.setattr("bpe_spark.inspect.report.render_report", broken)
    assert main([*common, "--overwrite"]) == 0
    printed = capsys.readouterr()
    assert printed.err == "bpe-spark train: warning: no report.html written: RuntimeError: the plotting library broke\n"
    assert "report:" not in printed.out
    assert not (out / "report.html").exists() and Tokenizer.load(out).vocab_size == 300


def test_train_stops_early_only_a_session_it_started(spark, tmp_path):
    """The model and report are written on the driver's disk while the JVM stops beside them:
    only for a session the command started, and only when the model's place is local."""
    from bpe_spark.cli.arguments import _STARTED, stop_spark_early

    assert stop_spark_early(spark, str(tmp_path / "model")) is None  # the suite's session ran before
    assert spark.range(3).count() == 3
    _STARTED.add(spark)
    try:
        assert stop_spark_early(spark, "s3a://bucket/model") is None  # Spark's file layer writes that
        assert spark in _STARTED
    finally:
        _STARTED.discard(spark)
    assert spark.range(3).count() == 3
