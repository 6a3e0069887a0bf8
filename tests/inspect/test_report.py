"""The vocabulary figures (bpe_spark.inspect.vocab_stats) on real models, the training report's page and
plots (bpe_spark.inspect.report), and ``bpe-spark report`` through ``main(argv)`` (issue 16, item 5)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from tests.conftest import PEERS, corpus_lines, corpus_text
from tests.report_checks import ReportPage, check_plot

from bpe_spark import TrainerConfig, train
from bpe_spark.inspect import vocab_stats as vs
from bpe_spark.models.token_kinds import merge_counts
from bpe_spark.cli import main
from bpe_spark.storage.file_systems import LOCAL
from bpe_spark.storage.output_guard import check_replaceable
from bpe_spark.storage.markers import kind_of
from bpe_spark.models.remote import fetch_model
from bpe_spark.storage.remote import Store
from bpe_spark.inspect.report import (
    REPORT_FILE,
    Sample,
    merge_count_plot,
    merge_steps,
    read_sample,
    render_report,
)
from bpe_spark.encoding.tokenizer import Tokenizer


@pytest.fixture(scope="module")
def gpt2():
    return Tokenizer.load(PEERS / "cs336" / "gpt2_vocab.json")


@pytest.fixture(scope="module")
def shakespeare():
    """A byte model of ~1000 tokens trained on tiny_shakespeare, as a model directory."""
    return train(corpus_lines("tiny_shakespeare"), TrainerConfig(vocab_size=1000, special_tokens=("<|eot|>",)))


@pytest.fixture(scope="module")
def model_dir(shakespeare, tmp_path_factory):
    out = tmp_path_factory.mktemp("model") / "shakespeare"
    shakespeare.save(out)
    return out


@pytest.fixture(scope="module")
def held_out(tmp_path_factory):
    """A held-out sample file: the first 200 KB of en_books."""
    path = tmp_path_factory.mktemp("sample") / "en_books_head.txt"
    path.write_text(corpus_text("en_books", 200_000), encoding="utf-8")
    return path


# --- vocab_stats ----------------------------------------------------------------------------------
def test_vocab_stats_of_gpt2(gpt2):
    assert vs.kind_counts(gpt2) == {"byte": 256, "merge": 50000, "special": 1}
    lengths = vs.length_histogram(gpt2)
    assert sum(lengths.values()) == 50256 and lengths[1] == 256 and lengths[2] == 1916 and max(lengths) == 128
    longest = vs.longest_tokens(gpt2, 3)
    assert [token_id for token_id, _ in longest] == [35496, 38093, 16529]
    assert longest[0][1] == "ÃÂ".encode() * 32 and longest[1][1] == b" " + b"=" * 65 and longest[2][1] == b" " + b"-" * 64
    shares = vs.script_shares(gpt2)
    assert sum(shares.values()) == 50256
    assert list(shares)[:4] == ["Latin", "digits", "punctuation", "partial UTF-8"]
    assert shares["Latin"] == 47003 and shares["Han"] == 42 and shares["Cyrillic"] == 17
    assert merge_counts(gpt2) is None  # GPT-2's files hold no counts
    text = (PEERS / "cs336" / "tinystories_sample.txt").read_text(encoding="utf-8")
    assert vs.bytes_per_token(gpt2, text, merges=0) == 1.0
    full = vs.bytes_per_token(gpt2, text)
    assert full == len(text.encode()) / len(gpt2.encode_ordinary(text)) and 3.9 < full < 4.1
    assert 1.0 < vs.bytes_per_token(gpt2, text, merges=1000) < full


def test_token_scripts():
    assert [vs.token_script(t) for t in (b" the", "мир".encode(), "中文".encode(), "ｶﾀ".encode(),
                                          b" 2024", b"\n\n", b"!!", "é".encode()[:1], "aα".encode(), b"\x00")] == [
        "Latin", "Cyrillic", "Han", "Katakana", "digits", "whitespace", "punctuation", "partial UTF-8",
        "mixed", "other"]


def test_vocab_stats_of_a_char_model():
    tok = train(["low lower lowest néw"], TrainerConfig(vocab_size=30, scheme="char", pattern="words"))
    kinds = vs.kind_counts(tok)
    assert kinds == {"char": 10, "merge": tok.vocab_size - 10}
    # the bare </w> is left out; "é" is two bytes; "lowest</w>" counts as "lowest"
    lengths = vs.length_histogram(tok)
    assert sum(lengths.values()) == tok.vocab_size - 1
    # 1 byte: e l n o r s t w, and r</w> w</w>; 2: lo st é; 3: low lowe né; 4: low</w> néw</w> ...
    assert lengths == {1: 10, 2: 3, 3: 3, 4: 2, 5: 1, 6: 2}
    longest = vs.longest_tokens(tok, 2)
    assert [token for _, token in longest] == [b"lowest", b"lowest</w>"]
    assert vs.script_shares(tok) == {"Latin": tok.vocab_size - 1}
    assert merge_counts(tok) == tok.metadata["merge_counts"] and len(merge_counts(tok)) == len(tok.merge_ids)
    # a line with a character the model never saw is skipped, the others count
    assert vs.bytes_per_token(tok, "lower\nzzz\n") == vs.bytes_per_token(tok, "lower\n")


def test_the_first_merges_make_a_tokenizer(shakespeare):
    text = corpus_text("en_books", 50_000)
    for k in (0, 10, 300, len(shakespeare.merge_ids)):
        part = vs.with_merges(shakespeare, k)
        assert part.merge_ids == shakespeare.merge_ids[:k] and part.vocab_size == 257 + k
        ids = part.encode_ordinary(text)
        assert part.decode(ids) == text
        assert vs.bytes_per_token(shakespeare, text, merges=k) == len(text.encode()) / len(ids)
    curve = [vs.bytes_per_token(shakespeare, text, merges=k) for k in merge_steps(len(shakespeare.merge_ids))]
    assert curve == sorted(curve) and curve[0] == 1.0 and curve[-1] > 2.3


def test_the_curve_from_one_encoding_equals_an_encoding_per_step(shakespeare, gpt2):
    """bytes_per_token_at undoes the merges of one encoding: the same figures as a tokenizer
    of the first k merges for each k (byte and char models, GPT-2's file; the rank rule and a
    char model's unknown lines take the encoding per step)."""
    text = corpus_text("en_books", 30_000) + corpus_text("multilingual", 20_000)
    lines = corpus_lines("tiny_shakespeare", 60_000)
    data = shakespeare.to_dict()
    data["merge_rule"] = "ranks"
    models = [shakespeare, gpt2, Tokenizer.from_dict(data)] + [
        train(lines, TrainerConfig(vocab_size=600, scheme="char", pattern="words", end_of_word=eow))
        for eow in ("separate", "fused")]
    for tok in models:
        steps = merge_steps(len(tok.merge_ids))
        assert vs.bytes_per_token_at(tok, text, steps) == [vs.bytes_per_token(tok, text, merges=k) for k in steps]
    assert not vs._nested(models[2], models[2].merge_ids) and vs._nested(gpt2, gpt2.merge_ids)


# --- the page -------------------------------------------------------------------------------------
def test_the_report_of_a_small_model(shakespeare, held_out):
    sample = Sample(held_out.read_text(encoding="utf-8"), held_out.name, from_training=False)
    page = ReportPage(render_report(shakespeare, sample=sample, name="shakespeare"))
    assert not page.external  # self-contained: no script, no linked file
    titles = list(page.images)
    assert titles == ["Training count of each merge, by rank",
                      f"Bytes per token as the vocabulary grows (sample held out: {held_out.name})",
                      "Token length histogram", "Share of the vocabulary by script or byte class"]
    for title, png in page.images.items():
        check_plot(png, title)
    # a model trained in Python holds no timings: the plot is left out, and the page says why
    assert page.headings[-1] == "Time of each phase and round"
    counts = shakespeare.metadata["merge_counts"]
    assert page.rows["vocabulary"] == "1,000 = 256 byte + 743 merge + 1 special"
    assert page.rows["merges"] == "743" and page.rows["special tokens"] == "<|eot|>"
    assert page.rows["merge counts"] == f"first {counts[0]:,}, last {counts[-1]:,} (where training stopped)"
    assert page.rows["pretokens"] == f"{shakespeare.metadata['stats']['pretokens']:,}"
    assert page.rows["sample"] == f"{held_out.name} (held out)"
    assert merge_count_plot(shakespeare).png == page.images[titles[0]]  # deterministic plots


# --- the command, and the model directory with its report ----------------------------------------
def test_report_command_writes_into_the_model_directory(model_dir, held_out, capsys, tmp_path):
    assert main(["report", str(model_dir), "--sample", str(held_out)]) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"report: {model_dir / REPORT_FILE} (4 plots, ")
    page = ReportPage((model_dir / REPORT_FILE).read_text(encoding="utf-8"))
    assert len(page.images) == 4
    assert main(["report", str(model_dir)]) == 0  # its own report.html is replaced; no sample, no curve
    assert len(ReportPage((model_dir / REPORT_FILE).read_text(encoding="utf-8")).images) == 3
    # the directory is still a model everything accepts: loading, the marker, --overwrite, a copy
    assert Tokenizer.load(model_dir).merges == Tokenizer.load(model_dir / "bpe_spark.json").merges
    assert kind_of(str(model_dir), LOCAL) == "model"
    check_replaceable(str(model_dir), "model", overwrite=True)
    copied = fetch_model(Store(str(model_dir), LOCAL, str(model_dir), "local", False), str(tmp_path))
    assert Tokenizer.load(copied).to_dict() == Tokenizer.load(model_dir).to_dict()


def test_report_command_out_file_and_its_errors(model_dir, tmp_path, capsys):
    out = tmp_path / "r.html"
    assert main(["report", str(model_dir), "--out", str(out)]) == 0
    assert len(ReportPage(out.read_text(encoding="utf-8")).images) == 3
    capsys.readouterr()
    cases = [
        (["--out", str(out)], "already exists; pass --overwrite"),
        (["--sample", str(tmp_path / "nothing.txt")], "--sample"),
    ]
    for extra, expected in cases:
        assert main(["report", str(model_dir), *extra]) == 2
        err = capsys.readouterr().err
        assert expected in err and err.count("\n") == 1 and "Traceback" not in err, err
    (tmp_path / "notes.html").write_text("<p>mine</p>", encoding="utf-8")
    assert main(["report", str(model_dir), "--out", str(tmp_path / "notes.html"), "--overwrite"]) == 2
    assert "is not a report.html file" in capsys.readouterr().err
    assert (tmp_path / "notes.html").read_text(encoding="utf-8") == "<p>mine</p>"
    vocab_json = str(PEERS / "cs336" / "gpt2_vocab.json")
    assert main(["report", vocab_json]) == 2
    assert "--out FILE is required" in capsys.readouterr().err
    assert main(["report", vocab_json, "--out", str(tmp_path / "gpt2.html")]) == 0
    page = ReportPage((tmp_path / "gpt2.html").read_text(encoding="utf-8"))
    assert list(page.images) == ["Token length histogram", "Share of the vocabulary by script or byte class"]
    assert page.rows["vocabulary"] == "50,257 = 256 byte + 50,000 merge + 1 special"


def test_a_sample_never_reads_past_its_limit_even_of_one_line(tmp_path):
    """A corpus may be one 100 MB line: the report's sample is its first ``limit`` bytes, cut
    between characters, never the whole line (text, .gz, Parquet); a JSON Lines record is whole
    or left out."""
    import gzip

    import pyarrow as pa
    import pyarrow.parquet as pq

    line = "né " * 400_000  # 1.6 MB, no newline; 'é' is two bytes
    (tmp_path / "one.txt").write_text(line, encoding="utf-8")
    with gzip.open(tmp_path / "one.txt.gz", "wt", encoding="utf-8") as fh:
        fh.write("short\n" + line)
    pq.write_table(pa.table({"text": [line, "more"]}), tmp_path / "one.parquet")
    records = [json.dumps({"text": "first"}), json.dumps({"text": line})]
    (tmp_path / "one.jsonl").write_text("\n".join(records) + "\n", encoding="utf-8")
    for name, fmt in (("one.txt", "text"), ("one.txt.gz", "text"), ("one.parquet", "parquet")):
        for limit in (1000, 1001, 1002, 1003):
            text = read_sample(tmp_path / name, limit=limit, input_format=fmt)
            data = text.encode("utf-8")
            assert limit - 2 <= len(data) <= limit and "\ufffd" not in text, (name, limit)
            assert (line if fmt != "text" or name == "one.txt" else "short\n" + line).startswith(text)
    assert read_sample(tmp_path / "one.jsonl", limit=1000, input_format="jsonl") == "first\n"


def test_help_and_parsing_never_import_matplotlib():
    code = ("import contextlib, io, sys\n"
            "from bpe_spark.cli import main\n"
            "for argv in (['--help'], ['report', '--help'], ['train', '--help']):\n"
            "    with contextlib.redirect_stdout(io.StringIO()), contextlib.suppress(SystemExit):\n"
            "        main(argv)\n"
            "print(sorted(m for m in sys.modules if m.startswith('matplotlib')))\n")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert result.stdout == "[]\n"


def test_a_remote_model_gets_its_report_uploaded(shakespeare, model_dir, tmp_path, monkeypatch):
    """train_report on a model directory reached through a file layer (here pyarrow's local file
    system standing for an object store): the page is made locally, then uploaded beside the model."""
    import shutil

    import pyarrow.fs as pafs

    from bpe_spark.cli.report import train_report
    from bpe_spark.storage.file_systems import ArrowFiles
    from bpe_spark.spark.storage import uris as storage

    remote = tmp_path / "bucket" / "model"
    shutil.copytree(model_dir, remote)
    (remote / REPORT_FILE).unlink(missing_ok=True)
    store = Store("s3a://bucket/model", ArrowFiles(pafs.LocalFileSystem()), str(remote), "pyarrow", True)
    monkeypatch.setattr(storage, "driver_store", lambda spark, uri, option: store)
    tok = Tokenizer.load(remote)
    assert train_report(None, tok, "s3a://bucket/model", {"input": None}) == "s3a://bucket/model/report.html"
    assert len(ReportPage((remote / REPORT_FILE).read_text(encoding="utf-8")).images) == 3  # no sample, no timings
    assert tok.metadata["timings"]["report_seconds"] > 0


def test_a_superword_models_report_plots_both_stages_with_the_transition(held_out):
    from bpe_spark.inspect.superword import stage1_model, superword_curves

    tok = train(corpus_lines("en_books", 300_000), TrainerConfig(vocab_size=1256, superword_transition=700))
    text = held_out.read_text(encoding="utf-8")
    page = ReportPage(render_report(tok, sample=Sample(text, held_out.name, from_training=False)))
    title = f"Bytes per token as the vocabulary grows (sample held out: {held_out.name})"
    check_plot(page.images[title], title)
    record = tok.metadata["superword"]
    assert page.rows["superword stage 1"].startswith(f"700 merges, pattern gpt2: {record['stage1']['distinct_pretokens']:,}")
    assert page.rows["superword stage 2"].startswith("300 merges, pattern superbpe")
    first, second = superword_curves(tok, text, [0, 100, 700])
    # stage 1's curve is the stage-1 model itself: the plain model of its first merges
    plain = train(corpus_lines("en_books", 300_000), TrainerConfig(vocab_size=956))
    assert plain.merges == tok.merges[:700]
    size = len(text.encode())
    assert first[-1] == (700, 956, size / len(plain.encode(text)))
    assert second[-1] == (1000, 1256, size / len(tok.encode(text))) and second[-1][2] > first[-1][2]
    assert stage1_model(tok, record).pattern == "gpt2"
    assert len(tok.metadata["merge_counts"]) == 1000 and None not in tok.metadata["merge_counts"]
