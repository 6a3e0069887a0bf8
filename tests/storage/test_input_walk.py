"""The one walk of local inputs (bpe_spark/storage/input_walk.py) and the input format it leads
to (bpe_spark/storage/input_format.py): links followed once, FIFOs skipped or refused, hidden
names skipped, existing names never globs, a deterministic order; the format from the names,
mixed formats and Parquet read as text refused in one line."""

from __future__ import annotations

import os

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from bpe_spark.errors import InputError, interface
from bpe_spark.storage.input_format import format_of_name, resolve_input_format
from bpe_spark.storage.input_walk import InputNotFoundError, plan_inputs


def corpus(root, names=("a.txt", "b.txt", "c.txt")):
    root.mkdir(parents=True, exist_ok=True)
    for name in names:
        (root / name).write_text(f"{name}\n")
    return root


def test_a_link_loop_is_skipped_and_counted(tmp_path):
    root = corpus(tmp_path / "in")
    os.symlink(".", root / "loop")
    plan = plan_inputs([str(root)])
    assert [os.path.basename(f) for f in plan.files] == ["a.txt", "b.txt", "c.txt"]
    assert plan.links == (str(root / "loop"),)
    assert len(plan.notices) == 1 and "1 symbolic links to a directory already walked (a loop)" in plan.notices[0]


def test_a_link_back_into_a_walked_directory_is_skipped_whatever_the_name_order(tmp_path):
    root = corpus(tmp_path / "in", ())
    corpus(root / "z-real")
    os.symlink("z-real", root / "a-alias")  # sorts first, but the real directory is the one listed
    os.symlink("a.txt", root / "z-real" / "again.txt")  # a second way to a listed file
    os.symlink("..", root / "z-real" / "up")  # a loop through the parent
    plan = plan_inputs([str(root)])
    assert plan.files == tuple(str(root / "z-real" / n) for n in ("a.txt", "b.txt", "c.txt"))
    assert sorted(plan.links) == sorted(str(p) for p in (root / "a-alias", root / "z-real" / "again.txt",
                                                          root / "z-real" / "up"))


def test_a_link_to_a_directory_outside_is_followed_once(tmp_path):
    outside = corpus(tmp_path / "outside", ("x.txt",))
    root = corpus(tmp_path / "in", ("a.txt",))
    os.symlink(outside, root / "more")
    os.symlink(outside, root / "more-again")
    os.symlink(tmp_path / "nowhere", root / "broken")
    plan = plan_inputs([str(root)])
    assert plan.files == (str(root / "a.txt"), str(root / "more" / "x.txt"))
    assert plan.links == (str(root / "more-again"),) and plan.broken == (str(root / "broken"),)


def test_fifos_are_skipped_in_a_directory_and_refused_by_name(tmp_path):
    root = corpus(tmp_path / "in", ("a.txt",))
    os.mkfifo(root / "pipe")
    plan = plan_inputs([str(root)])
    assert plan.files == (str(root / "a.txt"),) and plan.special == (str(root / "pipe"),)
    assert "FIFOs, sockets or devices skipped" in plan.notices[0]
    with pytest.raises(InputError) as raised:
        plan_inputs([str(root / "pipe")])
    message = str(raised.value)
    assert message.startswith(f"--input {root / 'pipe'}: a FIFO (named pipe), not a regular file")
    assert "\n" not in message and "holds no input file" not in message


def test_hidden_names_are_skipped_and_a_directory_of_them_holds_nothing(tmp_path):
    root = corpus(tmp_path / "in", ("a.txt", ".b.txt", "_SUCCESS", "c.txt._COPYING_"))
    corpus(root / "_tmp", ("d.txt",))
    corpus(root / "part=1", ("e.txt",))
    assert plan_inputs([str(root)]).files == (str(root / "a.txt"), str(root / "part=1" / "e.txt"))
    assert plan_inputs([str(root / "_tmp")]).files == (str(root / "_tmp" / "d.txt"),)  # named: read, as by Spark
    corpus(root / "only", (".x", "_y"))
    with pytest.raises(InputNotFoundError, match="the directory holds no input file"):
        plan_inputs([str(root / "only")])
    with pytest.raises(InputError, match="hides files whose names start with . or _"):
        plan_inputs([str(root / "_SUCCESS")])


def test_an_existing_name_is_never_a_glob(tmp_path):
    root = corpus(tmp_path / "in", ("a?b.txt.gz", "axb.txt.gz", "n[1].txt", "n1.txt", "s*.txt", "st.txt"))
    for name in ("a?b.txt.gz", "n[1].txt", "s*.txt"):
        assert plan_inputs([str(root / name)]).files == (str(root / name),)
    assert plan_inputs(["file:" + str(root / "n[1].txt")]).files == (str(root / "n[1].txt"),)
    # no file has the name: a glob, its matches in name order
    assert plan_inputs([str(root / "a?b*")]).files == (str(root / "a?b.txt.gz"), str(root / "axb.txt.gz"))
    with pytest.raises(InputNotFoundError, match="the glob matches no input file"):
        plan_inputs([str(root / "*.nomatch")])


def test_a_glob_matches_names_with_colons_and_the_order_is_the_names(tmp_path):
    root = corpus(tmp_path / "in", ("2024-01-01T10:00:00.txt.gz", "2024-01-01T09:00:00.txt.gz", "b.txt"))
    corpus(root / "sub", ("z.txt", "a.txt"))
    assert plan_inputs([str(root / "2024-*.txt.gz")]).files == (
        str(root / "2024-01-01T09:00:00.txt.gz"), str(root / "2024-01-01T10:00:00.txt.gz"))
    plan = plan_inputs([str(root / "sub"), str(root)])  # each given path's files in name order, none twice
    assert plan.files == (str(root / "sub" / "a.txt"), str(root / "sub" / "z.txt"),
                          str(root / "2024-01-01T09:00:00.txt.gz"), str(root / "2024-01-01T10:00:00.txt.gz"),
                          str(root / "b.txt"))


def test_remote_inputs_are_not_walked(tmp_path):
    assert plan_inputs(["s3a://bucket/x.txt"]) is None
    assert plan_inputs([str(tmp_path / "{a,b}.txt")]) is None


def test_the_format_comes_from_the_names(tmp_path):
    assert [format_of_name(n) for n in ("a.parquet", "b.jsonl.gz", "c.ndjson", "d.json", "e.txt.gz", "f")] == [
        "parquet", "jsonl", "jsonl", "jsonl", "text", "text"]
    root = corpus(tmp_path / "in", ("a.jsonl", "b.jsonl.gz"))
    files = plan_inputs([str(root)]).files
    assert resolve_input_format(None, files) == "jsonl" and resolve_input_format("auto", files) == "jsonl"
    assert resolve_input_format("text", files) == "text"  # asked for: kept
    assert resolve_input_format(None, None, ["s3a://b/x.parquet"]) == "parquet"
    assert resolve_input_format(None, None, ["s3a://b/dir/"]) == "text"


def test_mixed_formats_are_refused_naming_the_option(tmp_path):
    files = plan_inputs([str(corpus(tmp_path / "in", ("a.jsonl", "b.txt")))]).files
    with pytest.raises(InputError) as raised:
        resolve_input_format(None, files)
    assert "mix formats" in str(raised.value) and str(raised.value).endswith("give input_format= to read them all as one")
    with interface("cli"), pytest.raises(InputError, match="give --input-format to read them all as one"):
        resolve_input_format("auto", files)
    assert resolve_input_format("jsonl", files) == "jsonl"


def test_parquet_bytes_are_never_read_as_text(tmp_path):
    pq.write_table(pa.table({"text": ["a"]}), tmp_path / "data.txt")
    files = [str(tmp_path / "data.txt")]
    for given in (None, "text"):
        with interface("cli"), pytest.raises(InputError) as raised:
            resolve_input_format(given, files)
        assert str(raised.value).startswith(f"{files[0]} is a Parquet file (it starts with PAR1), not text; "
                                            "give --input-format parquet")
    assert resolve_input_format("parquet", files) == "parquet"
