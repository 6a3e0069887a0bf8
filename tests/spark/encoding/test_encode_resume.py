"""``encode_dataset(..., resume=True)`` / ``encode --resume`` (issue 17, acceptance 2): a run
failed after some pieces, then resumed, gives the output of an uninterrupted run and does not
redo the finished pieces; a resume with other input or options is refused."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest

from bpe_spark import ConfigError, TrainerConfig, train
from bpe_spark.cli import main
from bpe_spark.spark import encode_dataset
from bpe_spark.spark.encoding.resume import FAULT_PROPERTY
from bpe_spark.spark.read.documents import read_documents

pytestmark = pytest.mark.spark
EOT = "<|endoftext|>"
RUN_FIELDS = ("seconds", "created", "resumed")  # the manifest's fields that record the run, not the data


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    root = tmp_path_factory.mktemp("resume-inputs")
    texts, rows = [], []
    for f in range(6):
        lines = [f"file {f} line {i}: the {'quick brown fox' if i % 3 else 'lazy dog'} jumps {i * f}\n"
                 for i in range(300)]
        texts += lines
        (root / "text").mkdir(exist_ok=True)
        (root / "text" / f"part{f}.txt").write_text("".join(lines), encoding="utf-8")
        rows += [{"id": f"{f}:{i}", "text": line} for i, line in enumerate(lines)]
    (root / "jsonl").mkdir()
    for f in range(3):
        with open(root / "jsonl" / f"part{f}.jsonl", "w", encoding="utf-8") as fh:
            fh.writelines(json.dumps(row) + "\n" for row in rows[f * 600:(f + 1) * 600])
    tok = train(texts[::2], TrainerConfig(vocab_size=400, special_tokens=(EOT,)))
    model = root / "model"
    tok.save(str(model))
    return root, tok, model


def output_files(directory: Path) -> dict[str, bytes]:
    files = {}
    for path in sorted(Path(directory).rglob("*")):
        if path.is_file():
            data = path.read_bytes()
            if path.name == "_manifest.json":
                data = json.dumps({k: v for k, v in json.loads(data).items() if k not in RUN_FIELDS},
                                  sort_keys=True).encode()
            files[str(path.relative_to(directory))] = data
    return files


def failing_after(spark, pieces: int, run):
    spark.sparkContext.setLocalProperty(FAULT_PROPERTY, str(pieces))
    try:
        with pytest.raises(Exception, match="injected failure after"):
            run()
    finally:
        spark.sparkContext.setLocalProperty(FAULT_PROPERTY, None)
    _quiet(spark)


def _quiet(spark, seconds: float = 30.0) -> None:
    """Until the failed job's other tasks have ended (Spark cancels them after the job fails; a
    task still running may finish its piece meanwhile, as a killed run's zombie would)."""
    tracker, deadline = spark.sparkContext.statusTracker(), time.monotonic() + seconds
    while tracker.getActiveStageIds() and time.monotonic() < deadline:
        time.sleep(0.1)


def records(out: Path) -> set[str]:
    return {p.name for p in (out.parent / f".{out.name}.resume" / "_pieces").glob("*.arrow.json")}


@pytest.mark.parametrize(("fmt", "fail_after"), [("text", 2), ("jsonl", 1)])
def test_a_failed_run_resumed_equals_an_uninterrupted_one(spark, corpus, tmp_path, fmt, fail_after):
    root, tok, _ = corpus
    id_cols = ["id"] if fmt == "jsonl" else None
    keep = ["id"] if fmt == "jsonl" else ()

    def docs():
        return read_documents(spark, str(root / fmt), input_format=fmt, keep_columns=keep)

    options = {"output_format": "bin" if fmt == "text" else "parquet", "eos": EOT, "shard_tokens": 5000,
               "id_cols": id_cols}
    reference = encode_dataset(docs(), tok, str(tmp_path / "ref"), **options)
    assert "resumed" not in reference
    out = tmp_path / "out"
    failing_after(spark, fail_after, lambda: encode_dataset(docs(), tok, str(out), resume=True, **options))
    assert not out.exists()
    finished = records(out)
    assert len(finished) >= fail_after
    manifest = encode_dataset(docs(), tok, str(out), resume=True, **options)
    got = manifest["resumed"]
    assert got["kept_pieces"] == len(finished) and not got["fresh"]
    assert got["encoded_pieces"] >= 1  # only the pieces not finished were encoded
    assert got["kept_pieces"] + got["encoded_pieces"] == (6 if fmt == "text" else 3)
    assert output_files(out) == output_files(tmp_path / "ref")
    assert {k: v for k, v in manifest.items() if k not in RUN_FIELDS} == \
        {k: v for k, v in reference.items() if k not in RUN_FIELDS}
    assert not (tmp_path / ".out.resume").exists()  # done: the resume directory goes


def test_the_kept_pieces_are_not_redone_and_a_corrupt_one_is(spark, corpus, tmp_path):
    root, tok, _ = corpus
    out = tmp_path / "out"

    def run(**kw):
        return encode_dataset(read_documents(spark, str(root / "text")), tok, str(out), resume=True, **kw)

    failing_after(spark, 3, run)
    pieces_dir = tmp_path / ".out.resume" / "_pieces"
    finished = sorted(p for p in pieces_dir.glob("*.arrow") if p.with_name(p.name + ".json").exists())
    assert len(finished) >= 3
    before = {p.name: p.stat().st_mtime_ns for p in finished}
    finished[0].write_bytes(finished[0].read_bytes()[:-8] + b"corrupt!")  # its sha256 no longer matches
    failing_after(spark, len(finished) + 1, run)  # the second run: kept all but the corrupt one
    now = {p.name: p.stat().st_mtime_ns for p in pieces_dir.glob("*.arrow")}
    # the corrupt piece is gone (a late task of the first run may have written it again, whole)
    assert finished[0].name not in now or not finished[0].read_bytes().endswith(b"corrupt!")
    changed = [name for name in list(before)[1:] if now.get(name) != before[name]]
    assert not changed, changed  # untouched
    manifest = run()
    assert manifest["resumed"]["kept_pieces"] >= len(finished) - 1
    encode_dataset(read_documents(spark, str(root / "text")), tok, str(tmp_path / "ref"))
    assert output_files(out) == output_files(tmp_path / "ref")
    assert manifest["resumed"]["kept_pieces"] + manifest["resumed"]["encoded_pieces"] == 6


def test_a_resume_with_other_options_or_input_is_refused(spark, corpus, tmp_path):
    root, tok, _ = corpus
    src = tmp_path / "src"
    src.mkdir()
    for f in (root / "text").iterdir():
        (src / f.name).write_bytes(f.read_bytes())
    out = tmp_path / "out"

    def run(**kw):
        return encode_dataset(read_documents(spark, str(src)), tok, str(out), resume=True, **kw)

    failing_after(spark, 2, lambda: run(eos=EOT))
    with pytest.raises(ConfigError, match=r"cannot resume .*eos_id: \d+ there, None now"):
        run()
    with pytest.raises(ConfigError, match=r"shard_tokens: \d+ there, 7 now"):
        run(eos=EOT, shard_tokens=7)
    os.utime(src / "part3.txt", ns=(1, 1))
    with pytest.raises(ConfigError, match=r"cannot resume .*input files .*part3\.txt"):
        run(eos=EOT)


def test_nothing_to_resume_starts_afresh_and_a_plain_run_removes_a_dead_resume(spark, corpus, tmp_path):
    root, tok, _ = corpus
    out = tmp_path / "out"
    docs = read_documents(spark, str(root / "text"))
    manifest = encode_dataset(docs, tok, str(out), resume=True)
    assert manifest["resumed"] == {"kept_pieces": 0, "encoded_pieces": 6, "fresh": True}
    again = tmp_path / "again"
    failing_after(spark, 1, lambda: encode_dataset(docs, tok, str(again), resume=True))
    assert (tmp_path / ".again.resume").is_dir()
    encode_dataset(docs, tok, str(again))  # without resume: the dead run's pieces go
    assert not (tmp_path / ".again.resume").exists()
    assert output_files(again) == output_files(out)


def test_a_live_resume_lock_refuses_a_second_run(spark, corpus, tmp_path):
    root, tok, _ = corpus
    directory = tmp_path / ".out.resume"
    directory.mkdir()
    from bpe_spark.storage.owners import current_owner

    owner = current_owner()
    (directory / "_LOCK").write_text(json.dumps({"host": owner.host, "pid": owner.pid, "start": owner.start}))
    with pytest.raises(ConfigError, match="is being resumed by pid"):
        encode_dataset(read_documents(spark, str(root / "text")), tok, str(tmp_path / "out"), resume=True)


def test_cli_resume(spark, corpus, tmp_path, capsys):
    root, _, model = corpus
    out = tmp_path / "out"
    args = ["encode", "--model", str(model), "--input", str(root / "text"), "--out", str(out),
            "--output-format", "bin", "--eos", EOT, "--resume"]
    assert main(args) == 0
    assert "resume: nothing to resume, started afresh (6 pieces encoded)" in capsys.readouterr().out
    spark.sparkContext.setLocalProperty(FAULT_PROPERTY, "2")
    try:
        assert main([*args[:6], str(tmp_path / "two"), *args[7:]]) != 0
    finally:
        spark.sparkContext.setLocalProperty(FAULT_PROPERTY, None)
    capsys.readouterr()
    assert main([*args[:6], str(tmp_path / "two"), *args[7:-3], "--resume"]) == 2  # no --eos: refused
    assert "eos_id" in capsys.readouterr().err
    assert main([*args[:6], str(tmp_path / "two"), *args[7:]]) == 0
    printed = capsys.readouterr().out
    assert "resumed: " in printed and " pieces kept, " in printed
    assert output_files(tmp_path / "two") == output_files(out)


def test_a_retried_task_leaves_a_recorded_piece_as_it_is(tmp_path):
    import pyarrow as pa
    import pyarrow.fs as pafs

    from bpe_spark.spark.encoding.output import PieceWriter

    fs = pafs.LocalFileSystem()
    recorded = []

    def record(final, row):
        (Path(final).parent / (Path(final).name + ".json")).write_text("{}")
        recorded.append(final)

    def attempt(tag, value):
        pieces = PieceWriter(fs, str(tmp_path), 3, tag, name_tag="run-", on_piece=record)
        pieces.start(("f", 0, -1))
        pieces.write(pa.record_batch({"n_tokens": pa.array([value], pa.int32())}), tokens=value, text_bytes=1, nulls=0)
        list(pieces.report())

    attempt("a-0", 1)
    piece = tmp_path / "piece-run-00003-00000.arrow"
    before = piece.stat().st_mtime_ns, piece.read_bytes()
    attempt("a-1", 2)  # a retry: its own bytes would differ here only to show which file stayed
    assert (piece.stat().st_mtime_ns, piece.read_bytes()) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == [piece.name, piece.name + ".json"]
    assert recorded == [str(piece)] * 2  # the retry still reports it (and meets the test hook)
