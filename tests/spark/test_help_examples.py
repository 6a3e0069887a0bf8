"""Every command's ``--help`` holds a working example (issue 16, item 4): the first example of
each command in COMMANDS runs as written, through ``main(argv)``, from a copy of the
repository's root after ``make train`` (``data/sample/`` and ``out/sample-model``), and writes
its outputs under ``out/``. The Spark commands share the session fixture, whose JVM keeps the
directory pytest started in: the example's ``data/`` and ``out/`` paths are given under the copy."""

from __future__ import annotations

import gzip
import itertools
import shlex
import shutil

import pytest
from tests.conftest import ROOT

from bpe_spark import TrainerConfig, train
from bpe_spark.cli import COMMANDS, main

SAMPLE = ROOT / "data" / "sample" / "tiny_shakespeare.txt.gz"


def first_example(examples: str) -> list[str]:
    """The arguments of the first ``bpe-spark ...`` line of a help's examples (continuation
    lines joined, a ``# comment`` dropped).

    >>> first_example("examples:\\n  bpe-spark decode --ids '1 2' \\\\\\n      --limit 3  # prints\\n")
    ['decode', '--ids', '1 2', '--limit', '3']
    """
    lines = examples.splitlines()
    for index, line in enumerate(lines):
        if line.strip().startswith("bpe-spark "):
            command = line.strip()
            while command.endswith("\\"):
                index += 1
                command = command[:-1] + " " + lines[index].strip()
            return shlex.split(command, comments=True)[1:]
    raise AssertionError(f"no bpe-spark example in {examples!r}")


@pytest.fixture(scope="module")
def after_make_train(tmp_path_factory):
    """What a fresh clone holds after ``make train``: the sample corpus, and a byte-scheme model
    of it in out/sample-model (trained here without Spark, on part of the corpus: quicker)."""
    sample = SAMPLE
    root = tmp_path_factory.mktemp("clone")
    (root / "data" / "sample").mkdir(parents=True)
    shutil.copy(sample, root / "data" / "sample" / SAMPLE.name)
    lines = gzip.decompress(sample.read_bytes()).decode("utf-8").splitlines(keepends=True)[:2000]
    train(lines, TrainerConfig(vocab_size=300)).save(root / "out" / "sample-model")
    return root


@pytest.mark.parametrize("command", COMMANDS, ids=[command.NAME for command in COMMANDS])
def test_the_first_example_of_every_help_works_as_written(command, spark, after_make_train, tmp_path,
                                                          monkeypatch, capsys):
    argv = first_example(command.EXAMPLES)
    assert argv[0] == command.NAME, argv
    root = tmp_path / "clone"
    shutil.copytree(after_make_train, root)
    monkeypatch.chdir(root)
    # subtle: Spark's writers resolve a relative path against the JVM's directory, not this one
    assert main([str(root / arg) if arg.startswith(("data/", "out/")) else arg for arg in argv]) == 0, \
        capsys.readouterr().err
    captured = capsys.readouterr()
    assert captured.out.strip(), "the example printed nothing"
    for option, value in itertools.pairwise(argv):
        if option == "--out":
            assert value.startswith("out/"), f"{value}: examples write under out/"
            assert (root / value).exists(), f"{value} was not written"
    if command.NAME == "decode":
        assert captured.out == "To be\n"  # what its comment says it prints
