"""Outputs and models on stores other than the driver's disk (issue 13.4, acceptance 3): an S3
endpoint (a local moto server) written by pyarrow, the tasks and the driver alike, and
``viewfs://`` (Hadoop's ViewFileSystem, a mount table onto a local directory) standing in for HDFS
on the driver. Train and encode write there and read back identical to local output; a run killed
while it replaces an output on S3 leaves nothing that reads as an output; a scheme the encoding
tasks cannot write is refused before any work."""

from __future__ import annotations

import gzip
import json
import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pyarrow.fs as pafs
import pytest
from tests.conftest import ROOT, encode_output_bytes

from bpe_spark.storage import file_systems

from bpe_spark.storage import markers
from bpe_spark.cli import main
from bpe_spark.errors import ModelFormatError, OutputExistsError
from bpe_spark.storage.file_systems import ArrowFiles
from bpe_spark.datasets.megatron import read_shards
from bpe_spark.spark.storage import uris as storage
from bpe_spark.encoding.tokenizer import Tokenizer

pytestmark = pytest.mark.spark

SAMPLE = ROOT / "data" / "sample" / "tiny_shakespeare.txt.gz"
MODEL_FILES = ("merges.parquet", "vocab.parquet", "tokenizer.json", markers.MARKER_FILE)
KEYS = {"fs.s3a.access.key": "testing", "fs.s3a.secret.key": "testing", "fs.s3a.path.style.access": "true",
        "fs.s3a.endpoint.region": "us-east-1"}

pytest_plugins = ("tests.s3_mock",)  # the fixtures endpoint (a moto S3 server) and s3 (pyarrow's view of it)

# --- fixtures -------------------------------------------------------------------------------------
@pytest.fixture
def hadoop(spark, endpoint, tmp_path):
    """The session's Hadoop settings for the mock store (``fs.s3a.*``, which the tasks' pyarrow
    S3 file system takes too) and a viewfs mount table of its own (a new name each time: Hadoop
    caches a viewfs by its name) linking ``viewfs://<name>/data`` to a local directory; restored
    after the test. Yields ``(that directory, "viewfs://<name>/data")``."""
    conf = spark.sparkContext._jsc.hadoopConfiguration()
    mounted = tmp_path / "mounted"
    mounted.mkdir()
    table = f"bpe{uuid.uuid4().hex[:8]}"
    settings = {**KEYS, "fs.s3a.endpoint": endpoint, f"fs.viewfs.mounttable.{table}.link./data": mounted.as_uri()}
    before = {key: conf.get(key) for key in settings}
    for key, value in settings.items():
        conf.set(key, value)
    yield mounted, f"viewfs://{table}/data"
    for key, value in before.items():
        conf.unset(key) if value is None else conf.set(key, value)


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    """Two text files: the first 60 KB of tiny Shakespeare, split."""
    lines = gzip.decompress(SAMPLE.read_bytes()).decode("utf-8")[:60_000].splitlines(keepends=True)
    directory = tmp_path_factory.mktemp("corpus")
    (directory / "a.txt").write_text("".join(lines[: len(lines) // 2]), encoding="utf-8")
    (directory / "b.txt").write_text("".join(lines[len(lines) // 2:]), encoding="utf-8")
    return directory


@pytest.fixture(scope="module")
def local_model(spark, corpus, tmp_path_factory):
    """The model ``bpe-spark train`` writes locally from :func:`corpus`."""
    model = tmp_path_factory.mktemp("trained") / "model"
    assert main(train_args(corpus, model)) == 0
    return model


@pytest.fixture(scope="module")
def local_bin(spark, corpus, local_model, tmp_path_factory):
    """What ``bpe-spark encode --output-format bin`` writes locally with :func:`local_model`."""
    out = tmp_path_factory.mktemp("encoded") / "bin"
    assert main(["encode", "--out", str(out), *bin_args(corpus, local_model)]) == 0
    return out


def bin_args(corpus, model) -> list[str]:
    return ["--model", str(model), "--input", str(corpus), "--output-format", "bin", "--shard-tokens", "4000"]


def fetch_tree(fs, path: str, local: Path) -> Path:
    """Copy what ``fs`` holds under ``path`` to ``local`` (to compare it byte for byte)."""
    for info in fs.get_file_info(pafs.FileSelector(path, recursive=True)):
        if info.type == pafs.FileType.File:
            target = local / info.path[len(path):].lstrip("/")
            target.parent.mkdir(parents=True, exist_ok=True)
            with fs.open_input_stream(info.path) as source:
                target.write_bytes(source.read())
    return local


def output_bytes(directory: Path) -> dict[str, bytes]:
    """:func:`encode_output_bytes` without the manifest's ``source`` (the model's path is in it)."""
    files = encode_output_bytes(directory)
    manifest = json.loads(files["_manifest.json"])
    files["_manifest.json"] = json.dumps({**manifest, "source": {**manifest["source"], "model": None}}).encode()
    return files


def model_bytes(directory: Path) -> dict[str, bytes]:
    return {name: (directory / name).read_bytes() for name in MODEL_FILES}


def train_args(corpus, out, *extra):
    return ["train", "--input", str(corpus), "--vocab-size", "400", "--out", str(out), *extra]


# --- S3 -------------------------------------------------------------------------------------------
def test_train_and_encode_on_s3_read_back_identical_to_local(spark, s3, hadoop, corpus, local_model, tmp_path,
                                                             capsys):
    # s3a:// without hadoop-aws: pyarrow on the driver and in the tasks, the fs.s3a.* settings mapped
    assert main(train_args(corpus, "s3a://bucket/t1/model")) == 0
    assert model_bytes(fetch_tree(s3, "bucket/t1/model", tmp_path / "model")) == model_bytes(local_model)
    assert not [info.path for info in s3.get_file_info(pafs.FileSelector("bucket/t1"))
                if info.base_name.startswith(".")]  # no staging left beside it
    loaded, expected = storage.load_model(spark, "s3://bucket/t1/model"), Tokenizer.load(local_model)
    assert (loaded.merges, loaded.vocab) == (expected.merges, expected.vocab)

    for fmt in ("parquet", "bin"):
        local_out = tmp_path / f"enc-{fmt}"
        common = ["--input", str(corpus), "--output-format", fmt, "--shard-tokens", "5000", "--eos", "\n"]
        assert main(["encode", "--model", str(local_model), "--out", str(local_out), *common]) == 0
        # the model read from S3, the shards written by the tasks (s3a: through the mapped settings)
        assert main(["encode", "--model", "s3a://bucket/t1/model", "--out", f"s3a://bucket/t1/enc-{fmt}",
                     *common]) == 0
        fetched = fetch_tree(s3, f"bucket/t1/enc-{fmt}", tmp_path / "fetched" / fmt)
        assert output_bytes(fetched) == output_bytes(local_out)
        assert len([name for name in encode_output_bytes(local_out) if name.startswith(("part-", "shard-"))]) > 2
    assert [doc.tolist() for doc in read_shards(tmp_path / "fetched" / "bin")] == \
        [doc.tolist() for doc in read_shards(tmp_path / "enc-bin")]
    capsys.readouterr()


def test_a_failed_or_killed_replacement_on_s3_never_reads_as_a_model(spark, s3, endpoint, hadoop, tmp_path):
    from bpe_spark import TrainerConfig, train

    tok = train(["low lower lowest newer wider"] * 4, TrainerConfig(vocab_size=270, pattern="words"))
    other = train(["a bb ccc dddd"] * 4, TrainerConfig(vocab_size=262, pattern="words"))
    uri = "s3://bucket/t2/model"
    storage.save_model(spark, tok, uri)
    with pytest.raises(OutputExistsError):
        storage.save_model(spark, other, uri)

    # a failure after the second file: what was written goes, the earlier model is gone too
    original = ArrowFiles.upload
    calls = []

    def failing(self, local, path):
        calls.append(path)
        if len(calls) == 2:
            raise OSError("injected: the connection broke")
        original(self, local, path)

    ArrowFiles.upload = failing
    try:
        with pytest.raises(OSError, match="injected"):
            storage.save_model(spark, other, uri, overwrite=True)
    finally:
        ArrowFiles.upload = original
    with pytest.raises(ModelFormatError, match="no such file or directory"):
        storage.load_model(spark, uri)

    # a process killed mid-publish: the writing marker stays, and nothing reads it as a model
    storage.save_model(spark, tok, uri)
    local = tmp_path / "other"
    other.save(local)
    killed = subprocess.run([sys.executable, "-c", KILLED_WRITER, endpoint, str(local), "bucket/t2/model"],
                            capture_output=True, text=True, timeout=120, check=False)
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    names = {info.base_name for info in s3.get_file_info(pafs.FileSelector("bucket/t2/model"))}
    assert markers.MARKER_FILE in names and len(names) == 2  # the writing marker and one new file
    with pytest.raises(ModelFormatError, match="an incomplete bpe-spark model output"):
        storage.load_model(spark, uri)
    with pytest.raises(ModelFormatError, match="an incomplete bpe-spark model output"):
        Tokenizer.load(fetch_tree(s3, "bucket/t2/model", tmp_path / "copy"))  # a copy of it too
    storage.save_model(spark, other, uri, overwrite=True)  # --overwrite replaces the half-written one
    assert storage.load_model(spark, uri).to_dict() == other.to_dict()


KILLED_WRITER = """
import os, sys
import pyarrow.fs as pafs
from bpe_spark.storage import output_guard
from bpe_spark.storage.file_systems import ArrowFiles

endpoint, local, target = sys.argv[1:]
fs = pafs.S3FileSystem(access_key="testing", secret_key="testing", endpoint_override=endpoint.split("://")[1],
                       scheme="http", region="us-east-1")
files = ArrowFiles(fs)
original, done = ArrowFiles.upload, []

def upload(self, source, path):
    if len(done) == 1:
        os.kill(os.getpid(), 9)  # killed while publishing: no clean-up runs
    original(self, source, path)
    done.append(path)

ArrowFiles.upload = upload
output_guard.put_directory(local, target, "model", overwrite=True, files=files, in_place=True)
"""


@pytest.mark.slow
def test_an_encode_killed_while_writing_shards_on_s3_leaves_no_output(spark, s3, hadoop, corpus, local_model,
                                                                      local_bin, tmp_path):
    """A run killed in the shard job (after some shards were committed in place) leaves the
    writing marker: nothing reads it, and the next run with --overwrite writes the same bytes."""
    uri, key = "s3://bucket/t3/enc", "bucket/t3/enc"
    assert main(["encode", "--out", uri, *bin_args(corpus, local_model)]) == 0  # an earlier output, to be replaced

    conf = spark.sparkContext._jsc.hadoopConfiguration()
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable, "PYSPARK_DRIVER_PYTHON": sys.executable,
           "BPE_SPARK_FAULT": "shards:stall"}
    sets = [f"--set=spark.hadoop.{key}={conf.get(key)}" for key in [*KEYS, "fs.s3a.endpoint"]]
    run = subprocess.Popen([str(Path(sys.executable).parent / "bpe-spark"), "encode", "--out", uri, "--overwrite",
                            *bin_args(corpus, local_model), "--master", "local[2]", *sets],
                           env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)
    files = ArrowFiles(s3)
    try:
        deadline = time.time() + 240
        while time.time() < deadline and run.poll() is None:
            marker = json.loads(files.read_bytes(f"{key}/{markers.MARKER_FILE}", 4096) or b"{}")
            if marker.get("state") == "writing" and any(name.endswith(".idx") for name, _ in files.list_dir(key)):
                break  # the shard job runs, some shards are committed, one task stalls
            time.sleep(0.5)
        assert run.poll() is None, run.stderr.read().decode()[-2000:]
    finally:
        os.killpg(run.pid, signal.SIGKILL)  # the run (its JVM and workers too), which this test started
        run.wait(timeout=60)
    with pytest.raises(ModelFormatError, match="an incomplete bpe-spark encoded output"):
        markers.check_complete(key, "encoded", files, shown=uri)
    with pytest.raises(ModelFormatError):
        read_shards(fetch_tree(s3, key, tmp_path / "half"))
    assert main(["encode", "--out", uri, *bin_args(corpus, local_model)]) == 2  # only --overwrite replaces it
    assert any(name.startswith(".enc.staging-") for name, _ in files.list_dir("bucket/t3"))  # the killed run's
    assert main(["encode", "--out", uri, "--overwrite", *bin_args(corpus, local_model)]) == 0
    assert encode_output_bytes(fetch_tree(s3, key, tmp_path / "again")) == encode_output_bytes(local_bin)
    assert [name for name, _ in files.list_dir("bucket/t3")] == ["enc"]  # its dead owner's staging removed


def test_a_retried_shard_task_on_s3_changes_nothing(spark, s3, hadoop, corpus, local_model, local_bin, tmp_path):
    spark.sparkContext.setLocalProperty("bpe_spark.fault", "shards")
    try:
        assert main(["encode", "--out", "s3://bucket/t4/enc", *bin_args(corpus, local_model)]) == 0
    finally:
        spark.sparkContext.setLocalProperty("bpe_spark.fault", None)
    fetched = fetch_tree(s3, "bucket/t4/enc", tmp_path / "fetched")
    assert encode_output_bytes(fetched) == encode_output_bytes(local_bin)
    assert not [info.path for info in s3.get_file_info(pafs.FileSelector("bucket/t4", recursive=True))
                if ".tmp-" in info.path or "/." in info.path]  # no attempt's file, no staging left


def test_every_uri_is_checked_before_any_work(spark, s3, hadoop, corpus, tmp_path, capsys):
    assert main(train_args(corpus, "s3://no-such-bucket/model")) == 2
    assert "--out s3://no-such-bucket/model: cannot write in no-such-bucket" in capsys.readouterr().err
    assert main(train_args(corpus, "wasb://c@a.blob.core.windows.net/model")) == 2
    assert "neither Spark's JVM nor pyarrow has a file system for wasb://" in capsys.readouterr().err
    assert main(["encode", "--model", "s3://bucket/none/model", "--input", str(corpus), "--out",
                 str(tmp_path / "x")]) == 2
    assert "s3://bucket/none/model: no such file or directory" in capsys.readouterr().err
    # counts are written by Spark's Parquet writer: a scheme the JVM has no file system for is refused
    assert main(["count", "--input", str(corpus), "--out", "s3a://bucket/counts"]) == 2
    assert "Spark's JVM has no Hadoop file system for s3a:// (for S3, put hadoop-aws" in capsys.readouterr().err
    assert not (tmp_path / "x").exists()


# --- viewfs (Hadoop on the driver) ----------------------------------------------------------------
def test_driver_outputs_on_viewfs_equal_local_and_encode_is_refused_there(spark, s3, hadoop, corpus, local_model,
                                                                          local_bin, tmp_path, capsys, monkeypatch):
    mounted, viewfs = hadoop
    assert main(train_args(corpus, f"{viewfs}/model", "--checkpoint-dir", f"{viewfs}/ckpt")) == 0
    assert model_bytes(mounted / "model") == model_bytes(local_model)
    assert markers.kind_of(str(mounted / "ckpt")) == "checkpoint"
    assert {p.name for p in (mounted / "ckpt").iterdir() if not p.name.startswith(".")} >= {"training.json"}

    assert main(["count", "--input", str(corpus), "--out", str(tmp_path / "counts")]) == 0
    assert main(["count", "--input", str(corpus), "--out", f"{viewfs}/counts"]) == 0
    assert sorted(spark.read.parquet(f"{viewfs}/counts").collect()) == \
        sorted(spark.read.parquet(str(tmp_path / "counts")).collect())
    assert markers.kind_of(str(mounted / "counts")) == "counts"
    # the object-store commit of a Spark-written output, through Hadoop (viewfs taken for an object
    # store): the earlier counts replaced file by file, the complete marker last
    with monkeypatch.context() as patch:
        patch.setattr(file_systems, "OBJECT_STORE_SCHEMES", file_systems.OBJECT_STORE_SCHEMES | {"viewfs"})
        assert main(["count", "--input", str(corpus), "--out", f"{viewfs}/counts", "--overwrite"]) == 0
    assert json.loads((mounted / "counts" / markers.MARKER_FILE).read_text())["kind"] == "counts"
    assert "state" not in json.loads((mounted / "counts" / markers.MARKER_FILE).read_text())
    assert not list(mounted.glob(".counts.*"))
    assert sorted(spark.read.parquet(f"{viewfs}/counts").collect()) == \
        sorted(spark.read.parquet(str(tmp_path / "counts")).collect())

    # the encoding tasks cannot write viewfs:// (pyarrow has no libhdfs here): refused up front, in one line
    capsys.readouterr()  # the progress lines of the runs above
    assert main(["encode", "--model", f"{viewfs}/model", "--input", str(corpus),
                 "--out", f"{viewfs}/enc"]) == 2
    err = capsys.readouterr().err.strip()
    assert f"encode output {viewfs}/enc: pyarrow's viewfs:// needs libhdfs" in err and "\n" not in err
    assert not (mounted / "enc").exists() and not list(mounted.glob(".enc.*"))
    # ... and a --model read through Hadoop on the driver gives the local model's ids
    assert main(["encode", "--out", "s3://bucket/t6/enc", *bin_args(corpus, f"{viewfs}/model")]) == 0
    assert output_bytes(fetch_tree(s3, "bucket/t6/enc", tmp_path / "f")) == output_bytes(local_bin)


def test_shared_input_is_an_option_of_every_command_that_reads_documents():
    from bpe_spark.cli import build_parser
    from bpe_spark.cli.train import train_options

    parser = build_parser()
    for command in (["count", "--out", "c"], ["encode", "--model", "m", "--out", "e"]):
        assert parser.parse_args([*command, "--input", "x"]).shared_input is False
        assert parser.parse_args([*command, "--input", "x", "--shared-input"]).shared_input is True
    assert train_options(parser.parse_args(["train", "--input", "x", "--shared-input"]))["shared_input"] is True
    assert train_options(parser.parse_args(["train", "--input", "x"]))["shared_input"] is False
