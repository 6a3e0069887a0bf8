"""The commands that run without Spark (export, decode, inspect) on an S3 endpoint (a local moto
server reached through pyarrow, as a user's ``$AWS_ENDPOINT_URL`` and ``AWS_*`` variables give
it): ``--model`` in every format, ``export --out`` (a file, a directory) and decode's ``--input``
read and written there give byte for byte what the local paths give; a URI that cannot work is
refused in one line before any work."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq
import pytest

from bpe_spark import TrainerConfig, train
from bpe_spark.storage import markers
from bpe_spark.cli import main
from bpe_spark.storage.file_systems import ArrowFiles
from bpe_spark.datasets.megatron import ShardWriter

TEXT = ("low lower lowest newer wider new wide <|endoftext|> the quick brown fox jumps over the lazy dog\n"
        "hello world, hello spark; élan naïve café\n") * 6

pytest_plugins = ("tests.s3_mock",)  # the fixtures endpoint (a moto S3 server) and s3 (pyarrow's view of it)

# --- fixtures -------------------------------------------------------------------------------------
@pytest.fixture
def aws(endpoint, monkeypatch):
    """The environment a user of S3 sets: credentials, region and the endpoint (pyarrow's chain)."""
    for key, value in {"AWS_ENDPOINT_URL": endpoint, "AWS_ACCESS_KEY_ID": "testing",
                       "AWS_SECRET_ACCESS_KEY": "testing", "AWS_DEFAULT_REGION": "us-east-1"}.items():
        monkeypatch.setenv(key, value)
    for key in ("AWS_PROFILE", "AWS_SESSION_TOKEN", "AWS_ENDPOINT_URL_S3"):
        monkeypatch.delenv(key, raising=False)


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    """A trained model saved locally with its exports: {format name: local path}."""
    root = tmp_path_factory.mktemp("models")
    tok = train([TEXT], TrainerConfig(vocab_size=300, special_tokens=("<|endoftext|>",)))
    tok.save(root / "model")
    paths = {"model_dir": root / "model"}
    for fmt, name in (("tokenizer.json", "tok.json"), ("tiktoken", "m.tiktoken"), ("gpt2", "gpt2")):
        assert main(["export", "--model", str(root / "model"), "--format", fmt, "--out", str(root / name)]) == 0
        paths[fmt] = root / name
    paths["vocab.json"] = root / "gpt2" / "vocab.json"
    return paths


def put_tree(fs, local: Path, key: str) -> None:
    """Copy the local file or directory ``local`` to ``key`` on ``fs``."""
    files = ArrowFiles(fs)
    for path in [local] if local.is_file() else sorted(p for p in local.rglob("*") if p.is_file()):
        files.upload(str(path), key if path == local else f"{key}/{path.relative_to(local).as_posix()}")


def get_tree(fs, key: str) -> dict[str, bytes]:
    """What ``fs`` holds under ``key``: {relative path: bytes} (a file: {"": bytes})."""
    if fs.get_file_info(key).type == pafs.FileType.File:
        with fs.open_input_stream(key) as fh:
            return {"": fh.read()}
    found = {}
    for info in fs.get_file_info(pafs.FileSelector(key, recursive=True)):
        if info.type == pafs.FileType.File:
            with fs.open_input_stream(info.path) as fh:
                found[info.path[len(key):].lstrip("/")] = fh.read()
    return found


def local_tree(path: Path) -> dict[str, bytes]:
    if path.is_file():
        return {"": path.read_bytes()}
    return {p.relative_to(path).as_posix(): p.read_bytes() for p in path.rglob("*") if p.is_file()}


def run(capsys, *argv) -> tuple[int, str, str]:
    status = main(list(argv))
    captured = capsys.readouterr()
    return status, captured.out, captured.err


# --- tests ----------------------------------------------------------------------------------------
def test_export_to_s3_equals_the_local_export_byte_for_byte(s3, aws, models, tmp_path, capsys):
    put_tree(s3, models["model_dir"], "bucket/e/model")
    for scheme in ("s3", "s3a"):
        for fmt, name in (("tiktoken", "m.tiktoken"), ("tokenizer.json", "tok.json"), ("gpt2", "gpt2")):
            local = tmp_path / scheme / name
            assert run(capsys, "export", "--model", str(models["model_dir"]), "--format", fmt,
                       "--out", str(local))[0] == 0
            uri = f"{scheme}://bucket/e/{scheme}/{name}"
            status, out, err = run(capsys, "export", "--model", f"{scheme}://bucket/e/model", "--format", fmt,
                                   "--out", uri)
            assert status == 0, err
            expected = {"gpt2": [f"{uri}/{file}" for file in ("vocab.json", "merges.txt", "tokenizer_config.json",
                                                              "special_tokens_map.json")],
                        "tiktoken": [uri, f"{uri}.json"]}
            assert out.split() == expected.get(fmt, [uri])
            assert get_tree(s3, f"bucket/e/{scheme}/{name}") == local_tree(local)
            if fmt == "tiktoken":
                assert get_tree(s3, f"bucket/e/{scheme}/{name}.json") == local_tree(local.with_name(name + ".json"))
    marker = json.loads(get_tree(s3, "bucket/e/s3/gpt2")[markers.MARKER_FILE])
    assert (marker["kind"], marker["format"], "state" in marker) == ("export", "gpt2", False)
    # nothing but the outputs: no probe, no staging
    assert sorted(info.base_name for info in s3.get_file_info(pafs.FileSelector("bucket/e/s3"))) == \
        ["gpt2", "m.tiktoken", "m.tiktoken.json", "tok.json"]

    # an existing output: refused without --overwrite; with it, only one of the same format is replaced
    status, _, err = run(capsys, "export", "--model", str(models["model_dir"]), "--format", "tiktoken",
                         "--out", "s3://bucket/e/s3/m.tiktoken")
    assert status == 2 and err.strip().endswith("or choose another --out") and "\n" not in err.strip()
    status, _, err = run(capsys, "export", "--model", str(models["model_dir"]), "--format", "tiktoken",
                         "--out", "s3://bucket/e/s3/tok.json", "--overwrite")
    assert status == 2 and "--out s3://bucket/e/s3/tok.json exists and is not a tiktoken file" in err
    assert run(capsys, "export", "--model", str(models["model_dir"]), "--format", "tiktoken",
               "--out", "s3://bucket/e/s3/m.tiktoken", "--overwrite")[0] == 0
    assert run(capsys, "export", "--model", str(models["model_dir"]), "--format", "gpt2",
               "--out", "s3://bucket/e/s3/gpt2", "--overwrite")[0] == 0
    assert get_tree(s3, "bucket/e/s3/gpt2") == local_tree(tmp_path / "s3" / "gpt2")
    # tokenizer.json into an existing directory: tokenizer.json inside it, as locally, with transformers'
    # config files beside it, which replace the GPT-2 folder's only with --overwrite
    status, _, err = run(capsys, "export", "--model", str(models["model_dir"]), "--format", "tokenizer.json",
                         "--out", "s3://bucket/e/s3/gpt2/")
    assert status == 2 and "s3/gpt2/tokenizer_config.json already exists" in err
    assert "tokenizer.json" not in get_tree(s3, "bucket/e/s3/gpt2")
    status, out, _ = run(capsys, "export", "--model", str(models["model_dir"]), "--format", "tokenizer.json",
                         "--out", "s3://bucket/e/s3/gpt2/", "--overwrite")
    assert status == 0 and out.split() == [f"s3://bucket/e/s3/gpt2/{name}" for name in (
        "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json")]
    assert get_tree(s3, "bucket/e/s3/gpt2/tokenizer.json") == local_tree(tmp_path / "s3" / "tok.json")
    config = json.loads(get_tree(s3, "bucket/e/s3/gpt2/tokenizer_config.json")[""])
    assert config["tokenizer_class"] == "PreTrainedTokenizerFast"
    # the output is never the model, nor inside it
    status, _, err = run(capsys, "export", "--model", "s3://bucket/e/model", "--format", "tiktoken",
                         "--out", "s3a://bucket/e/model/x.tiktoken")
    assert status == 2 and "lies inside the model (s3://bucket/e/model)" in err


def test_inspect_and_decode_of_s3_models_equal_the_local_ones(s3, aws, models, capsys):
    ids = " ".join(map(str, range(0, 300, 7)))
    for fmt, local in models.items():
        key = f"bucket/m/{fmt}/{local.name}"
        if fmt == "vocab.json":
            key = "bucket/m/gpt2/gpt2/vocab.json"  # the merges.txt beside it comes along
        else:
            put_tree(s3, local, key)
        if fmt == "tiktoken":  # its sidecar (pattern, special tokens) comes along
            put_tree(s3, local.with_name(local.name + ".json"), key + ".json")
        pattern = ["--pattern", "gpt2"] if fmt == "tiktoken" else []
        for argv in (["inspect", "{}", "--json", *pattern], ["inspect", "{}", "--merges", "5", *pattern],
                     ["decode", "--model", "{}", "--ids", ids, *pattern]):
            status, expected, err = run(capsys, *[str(local) if a == "{}" else a for a in argv])
            assert status == 0, err
            uri = f"s3a://{key}"
            status, out, err = run(capsys, *[uri if a == "{}" else a for a in argv])
            assert status == 0, err
            # the same, but the paths: an imported file's path (metadata "source") is the URI
            assert out == expected.replace(str(local.parent), uri.rpartition("/")[0]), (fmt, argv)
            assert str(local.parent) not in out and "bpe-spark-model-" not in out


def test_decode_of_an_encode_output_on_s3_equals_the_local_one(s3, aws, models, tmp_path, capsys):
    from bpe_spark import Tokenizer

    tok = Tokenizer.load(models["model_dir"])
    documents = [tok.encode(line, allowed_special="all") for line in TEXT.splitlines(keepends=True)]
    documents += [[], tok.encode("the end")]
    # a binary output (with its manifest and marker), loose shards, and a Parquet output in two parts
    bin_dir, loose, parquet = tmp_path / "bin", tmp_path / "loose", tmp_path / "parquet"
    for directory in (bin_dir, loose, parquet):
        directory.mkdir()
    halves = (documents[:5], documents[5:])
    for index, half in enumerate(halves):
        for directory in (bin_dir, loose):
            with ShardWriter(directory / f"shard-{index:05d}", np.uint16) as writer:
                writer.add_documents(np.concatenate([np.asarray(d, np.int32) for d in half]),
                                     np.cumsum([0, *map(len, half)]))
        pq.write_table(pa.table({"doc_id": list(range(len(half))), "input_ids": half}),
                       parquet / f"part-{index:05d}.parquet")
    (bin_dir / markers.MANIFEST_NAME).write_text(json.dumps({
        "format": markers.MANIFEST_FORMAT, "output_format": "bin", "dtype": "uint16",
        "shards": [{"name": f"shard-{i:05d}", "documents": len(half)} for i, half in enumerate(halves)]}))
    markers.write_marker(bin_dir, "encoded")
    for directory in (bin_dir, loose, parquet):
        put_tree(s3, directory, f"bucket/d/{directory.name}")
    put_tree(s3, models["tokenizer.json"], "bucket/d/tok.json")

    for name in ("bin", "loose", "parquet", "parquet/part-00001.parquet"):
        for limit in ([], ["--limit", "3"], ["--limit", "7"]):
            status, expected, err = run(capsys, "decode", "--model", str(models["tokenizer.json"]),
                                        "--input", str(tmp_path / name), *limit)
            assert status == 0 and expected.count("\n") >= 2, err
            status, out, err = run(capsys, "decode", "--model", "s3://bucket/d/tok.json",
                                   "--input", f"s3a://bucket/d/{name}", *limit)
            assert status == 0, err
            assert out == expected, (name, limit)

    # an output encoded with another model is refused before any document (issue 43, item 4)
    manifest = json.loads((bin_dir / markers.MANIFEST_NAME).read_text())
    manifest["model"] = {"fingerprint": "sha256:" + "0" * 64, "decoding_fingerprint": "sha256:" + "0" * 64,
                         "vocab_size": 300, "scheme": "byte"}
    (tmp_path / "manifest.json").write_text(json.dumps(manifest))
    put_tree(s3, tmp_path / "manifest.json", "bucket/d/other/" + markers.MANIFEST_NAME)
    for name in (markers.MARKER_FILE, "shard-00000.idx", "shard-00000.bin", "shard-00001.idx", "shard-00001.bin"):
        put_tree(s3, bin_dir / name, f"bucket/d/other/{name}")
    status, out, err = run(capsys, "decode", "--model", str(models["model_dir"]), "--input", "s3://bucket/d/other")
    assert (status, out) == (2, "") and "s3://bucket/d/other was encoded with another model (sha256:000000000000..." in err
    status, out, _ = run(capsys, "decode", "--model", str(models["model_dir"]), "--input", "s3://bucket/d/other",
                         "--ignore-model-mismatch")
    assert status == 0 and out == run(capsys, "decode", "--model", str(models["model_dir"]), "--input", str(bin_dir))[1]

    # an output still being written in place is refused, as a reader refuses it locally
    markers.write_marker("bucket/d/bin", "encoded", ArrowFiles(s3), complete=False)
    status, _, err = run(capsys, "decode", "--model", str(models["model_dir"]), "--input", "s3://bucket/d/bin")
    assert status == 2 and "s3://bucket/d/bin: an incomplete bpe-spark encoded output" in err


def test_a_uri_that_cannot_work_fails_in_one_line_before_any_work(s3, aws, models, capsys):
    model = str(models["model_dir"])
    cases = [
        (["export", "--model", model, "--format", "tiktoken", "--out", "wasb://c@a.blob.core.windows.net/x.tiktoken"],
         "--out wasb://c@a.blob.core.windows.net/x.tiktoken: no file system for wasb:// here"),
        (["export", "--model", model, "--format", "gpt2", "--out", "s3://no-such-bucket/gpt2"],
         "--out s3://no-such-bucket/gpt2: cannot write in no-such-bucket"),
        (["export", "--model", model, "--format", "tiktoken", "--out", "s3://no-such-bucket/m.tiktoken"],
         "--out s3://no-such-bucket/m.tiktoken: cannot write in no-such-bucket"),
        (["export", "--model", "s3://bucket/none/model", "--format", "tiktoken", "--out", "s3://bucket/x.tiktoken"],
         "s3://bucket/none/model: no such file or directory"),
        (["inspect", "s3a://no-such-bucket/model"], "s3a://no-such-bucket/model: no such bucket 'no-such-bucket'"),
        (["inspect", "foo://bucket/model"], "model foo://bucket/model: no file system for foo:// here"),
        (["decode", "--model", model, "--input", "s3://bucket/none/ids"],
         "--input s3://bucket/none/ids: no such file or directory"),
        (["decode", "--model", "s3://bucket/none/model", "--input", "gopher://x/ids"],
         "--input gopher://x/ids: no file system for gopher:// here"),
    ]
    for argv, message in cases:
        status, out, err = run(capsys, *argv)
        assert status == 2 and out == "", argv
        assert message in err and err.count("\n") == 1, (argv, err)
    # nothing was written: no export, no probe file left
    assert not [info.path for info in s3.get_file_info(pafs.FileSelector("bucket", recursive=True))
                if info.base_name.startswith(".") or info.path == "bucket/x.tiktoken"]


def test_a_file_export_off_object_stores_is_staged_and_renamed(models, tmp_path):
    """Where a directory can be renamed (HDFS through pyarrow: here pyarrow's local file system),
    a file export goes up into a hidden staging sibling first and is renamed into place."""
    from bpe_spark.errors import OutputExistsError
    from bpe_spark.storage.remote import put_file

    files = ArrowFiles(pafs.LocalFileSystem())
    target = str(tmp_path / "out" / "m.tiktoken")
    put_file(str(models["tiktoken"]), target, "tiktoken", overwrite=False, files=files, in_place=False)
    assert Path(target).read_bytes() == models["tiktoken"].read_bytes()
    assert [p.name for p in (tmp_path / "out").iterdir()] == ["m.tiktoken"]
    with pytest.raises(OutputExistsError):
        put_file(str(models["tiktoken"]), target, "tiktoken", overwrite=False, files=files, in_place=False)
    assert [p.name for p in (tmp_path / "out").iterdir()] == ["m.tiktoken"]  # the staged copy removed


def test_an_export_the_store_fails_midway_is_one_line_and_leaves_no_export(s3, aws, models, capsys, monkeypatch):
    original, calls = ArrowFiles.upload, []

    def failing(self, local, path):
        calls.append(path)
        if len(calls) == 2:
            raise OSError("injected: the connection broke")
        original(self, local, path)

    monkeypatch.setattr(ArrowFiles, "upload", failing)
    status, _, err = run(capsys, "export", "--model", str(models["model_dir"]), "--format", "gpt2",
                         "--out", "s3://bucket/f/gpt2")
    assert status == 2 and err.count("\n") == 1
    assert "s3://bucket/f/gpt2: cannot write it (injected: the connection broke)" in err
    assert s3.get_file_info("bucket/f/gpt2").type == pafs.FileType.NotFound  # the first file removed too
