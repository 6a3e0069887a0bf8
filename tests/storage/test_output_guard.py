"""The output rules (bpe_spark.storage.output_guard) on real directories: placement, writability, what an
overwrite may replace, the marker, staging owners and the removal of dead runs' staging."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pytest

from bpe_spark import TrainerConfig, train
from bpe_spark.storage import output_guard, owners
from bpe_spark.storage import markers
from bpe_spark.errors import OutputExistsError, OutputRefusedError
from bpe_spark.models.load import export_model


@pytest.fixture(scope="module")
def tok():
    return train(["hello hello world", "low lower lowest"], TrainerConfig(vocab_size=264))


def test_relation_of_paths(tmp_path):
    (tmp_path / "data").mkdir()
    (tmp_path / "link").symlink_to(tmp_path / "data")
    assert output_guard.relation(tmp_path / "data", tmp_path / "data") == "is"
    assert output_guard.relation(tmp_path / "link", tmp_path / "data" / "a.txt") == "holds"  # resolved
    assert output_guard.relation(tmp_path / "data" / "ids", f"file://{tmp_path}/data") == "lies inside"
    assert output_guard.relation(tmp_path / "data2", tmp_path / "data") is None
    assert output_guard.relation("hdfs://nn/x/out", "hdfs://nn/x/out/../out/a") == "holds"
    assert output_guard.relation("hdfs://nn/x", "hdfs://other/x") is None
    (tmp_path / "my dir").mkdir()
    assert output_guard.relation(tmp_path / "my dir", f"file://{tmp_path}/my%20dir/a.txt") == "holds"  # Spark's URIs


def test_placement_refuses_input_model_and_checkpoint(tmp_path):
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    protected = {"input": [str(corpus / "*.txt")], "model": [str(tmp_path / "m")], "checkpoint": [None]}
    for out, word in ((corpus, "is"), (tmp_path, "holds"), (corpus / "ids", "lies inside"), (tmp_path / "m", "is")):
        with pytest.raises(OutputRefusedError, match=f"--out {out} {word} the ") as info:
            output_guard.check_placement(out, protected, option="--out")
        assert "\n" not in str(info.value)
    output_guard.check_placement(tmp_path / "elsewhere", protected)


def test_writable_check(tmp_path):
    (tmp_path / "file.txt").write_text("x")
    with pytest.raises(OutputRefusedError, match="is a file, so nothing can be written under it"):
        output_guard.check_writable(tmp_path / "file.txt" / "x" / "y")
    with pytest.raises(OutputRefusedError, match="cannot write in /proc"):
        output_guard.check_writable("/proc/model")
    output_guard.check_writable(tmp_path / "new" / "deeper")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["file.txt"]  # the probe leaves nothing


def test_overwrite_replaces_only_the_same_kind(tmp_path, tok):
    model, other = tmp_path / "model", tmp_path / "mine"
    tok.save(model)
    assert markers.kind_of(str(model)) == "model"
    assert json.loads((model / markers.MARKER_FILE).read_text())["kind"] == "model"
    tok.save(model, overwrite=True)  # an earlier model: replaced
    other.mkdir()
    (other / "notes.txt").write_text("keep me")
    with pytest.raises(OutputExistsError):
        tok.save(other)
    with pytest.raises(OutputRefusedError, match="not an earlier bpe-spark model output"):
        tok.save(other, overwrite=True)
    assert (other / "notes.txt").read_text() == "keep me"
    export_model(tok, "gpt2", tmp_path / "gpt2")
    with pytest.raises(OutputRefusedError, match="not an earlier bpe-spark model"):
        tok.save(tmp_path / "gpt2", overwrite=True)  # an export is not a model
    export_model(tok, "gpt2", tmp_path / "gpt2", overwrite=True)


def test_model_directory_of_an_older_version_is_ours(tmp_path, tok):
    tok.save(tmp_path / "model")
    (tmp_path / "model" / markers.MARKER_FILE).unlink()
    assert markers.kind_of(str(tmp_path / "model")) == "model"
    tok.save(tmp_path / "model", overwrite=True)
    assert (tmp_path / "model" / markers.MARKER_FILE).is_file()


def test_single_file_exports_replace_only_their_format(tmp_path, tok):
    target = tmp_path / "m.tiktoken"
    export_model(tok, "tiktoken", target)
    export_model(tok, "tiktoken", target, overwrite=True)
    source = tmp_path / "settings.json"
    source.write_text('{"learning_rate": 0.1}\n')
    with pytest.raises(OutputRefusedError, match="is not a tokenizer.json file"):
        export_model(tok, "tokenizer.json", source, overwrite=True)
    (tmp_path / "x.tiktoken").write_text("just some text\n")
    with pytest.raises(OutputRefusedError, match="is not a tiktoken file"):
        export_model(tok, "tiktoken", tmp_path / "x.tiktoken", overwrite=True)
    assert source.read_text() == '{"learning_rate": 0.1}\n'
    export_model(tok, "tokenizer.json", tmp_path / "t.json")
    export_model(tok, "tokenizer.json", tmp_path / "t.json", overwrite=True)


def test_staging_name_records_the_owner():
    name = output_guard.staging_name("out", "tmp")
    owner = output_guard.staging_owner("out", name)
    assert owner == owners.current_owner() and owner.pid == os.getpid()
    assert not owners.owner_is_dead(owner, 0.0)


def _dead_pid() -> int:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return child.pid


def test_remove_stale_takes_dead_runs_only(tmp_path):
    me = owners.current_owner()
    dead = f".out.tmp-{me.host}-{_dead_pid()}-{me.start}-0123abcd"
    alive = output_guard.staging_name("out", "tmp")
    reused = f".out.old-{me.host}-{os.getppid()}-12345-0123abcd"  # a live pid with another start time
    old_remote = ".out.staging-elsewhere-7-1000000000-0123abcd"
    new_remote = f".out.staging-elsewhere-7-{int(time.time())}-0123abcd"
    unrelated = [".outer.tmp-x-1-1-0123abcd", "out", ".out.notes"]
    for name in [dead, alive, reused, old_remote, new_remote, *unrelated]:
        (tmp_path / name).mkdir()
    (tmp_path / dead / "part-0.parquet").write_text("half")
    os.utime(tmp_path / old_remote, (1_000_000_000, 1_000_000_000))  # another host's: judged by age
    removed = output_guard.remove_stale(str(tmp_path), "out")
    assert sorted(removed) == sorted([dead, reused, old_remote])
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([alive, new_remote, *unrelated])


def test_atomic_write_removes_a_dead_runs_staging(tmp_path, tok):
    me = owners.current_owner()
    stale = tmp_path / f".model.tmp-{me.host}-{_dead_pid()}-{me.start}-0123abcd"
    stale.mkdir()
    (stale / "merges.parquet").write_text("half written")
    tok.save(tmp_path / "model")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model"]


def test_checkpoint_claim(tmp_path):
    output_guard.check_checkpoint(tmp_path / "new")
    (tmp_path / "empty").mkdir()
    output_guard.check_checkpoint(tmp_path / "empty")
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "counts.parquet").write_text("the user's")
    with pytest.raises(OutputRefusedError, match="holds files that are not a bpe-spark checkpoint"):
        output_guard.check_checkpoint(tmp_path / "data", option="--checkpoint-dir")
    (tmp_path / "ck").mkdir()
    markers.write_marker(tmp_path / "ck", "checkpoint")
    (tmp_path / "ck" / "training.json").write_text("{}")
    output_guard.check_checkpoint(tmp_path / "ck")
    with pytest.raises(OutputRefusedError, match="lies inside the input"):
        output_guard.check_checkpoint(tmp_path / "data" / "ck", protected={"input": [str(tmp_path / "data")]})
