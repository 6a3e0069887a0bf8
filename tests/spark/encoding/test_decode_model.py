"""``decode`` reads an encode output only with the model it was encoded with (issue 43, item 4):
the manifest's decoding fingerprint against the model given; a mismatch is one line naming
``--ignore-model-mismatch``; the same model in another format (``tokenizer.json``, ``.tiktoken``)
decodes it."""

from __future__ import annotations

import json
import re

import pytest

from bpe_spark import TrainerConfig, train
from bpe_spark.cli import main

pytestmark = pytest.mark.spark

TEXT = "".join(f"the quick brown fox {i} jumps over the lazy dog; low lower lowest\n" for i in range(40))
OTHER = "".join(f"zebra yak xylophone {i} wombat vole\n" for i in range(40))


@pytest.fixture(scope="module")
def encoded(spark, tmp_path_factory):
    """Two models (A and B), A's exports, and A's encoding of TEXT as Parquet and bin shards."""
    root = tmp_path_factory.mktemp("decode-model")
    train([TEXT], TrainerConfig(vocab_size=300)).save(root / "a")
    train([OTHER], TrainerConfig(vocab_size=300)).save(root / "b")
    for fmt, name in (("tokenizer.json", "a.json"), ("tiktoken", "a.tiktoken")):
        assert main(["export", "--model", str(root / "a"), "--format", fmt, "--out", str(root / name)]) == 0
    (root / "docs.txt").write_text(TEXT, encoding="utf-8")
    for fmt in ("parquet", "bin"):
        assert main(["encode", "--model", str(root / "a"), "--input", str(root / "docs.txt"),
                     "--output-format", fmt, "--out", str(root / fmt)]) == 0
    return root


def _decode(capsys, *argv) -> tuple[int, str, str]:
    status = main(["decode", *argv])
    captured = capsys.readouterr()
    return status, captured.out, captured.err


@pytest.mark.parametrize("fmt", ["parquet", "bin"])
def test_decoding_with_another_model_is_refused_in_one_line(encoded, fmt, capsys):
    out = encoded / fmt
    status, printed, err = _decode(capsys, "--model", str(encoded / "b"), "--input", str(out))
    assert status == 2 and printed == ""
    assert re.fullmatch(
        rf"bpe-spark decode: error: {re.escape(str(out))} was encoded with another model \(sha256:[0-9a-f]{{12}}\.\.\., "
        rf"300 tokens, byte\) than --model {re.escape(str(encoded / 'b'))} \(sha256:[0-9a-f]{{12}}\.\.\.\); its ids "
        r"would decode to wrong text: give the model it was encoded with, or pass --ignore-model-mismatch to decode "
        r"anyway\n", err), err
    # forced, it decodes (to B's text of A's ids)
    status, printed, _ = _decode(capsys, "--model", str(encoded / "b"), "--input", str(out), "--ignore-model-mismatch")
    assert status == 0 and printed and printed != TEXT


@pytest.mark.parametrize("model", ["a", "a.json", "a.tiktoken"])
def test_the_same_model_in_any_format_decodes_it(encoded, model, capsys):
    for fmt in ("parquet", "bin"):
        status, printed, err = _decode(capsys, "--model", str(encoded / model), "--input", str(encoded / fmt))
        assert (status, printed) == (0, TEXT), err


def test_a_part_file_is_checked_against_its_directory_and_old_manifests_by_the_model_fingerprint(encoded, tmp_path,
                                                                                                 capsys):
    part = sorted((encoded / "parquet").glob("part-*.parquet"))[0]
    status, _, err = _decode(capsys, "--model", str(encoded / "b"), "--input", str(part))
    assert status == 2 and "was encoded with another model" in err
    # a manifest written before the decoding fingerprint: the model fingerprint decides
    old = tmp_path / "old"
    old.mkdir()
    for item in (encoded / "bin").iterdir():
        (old / item.name).write_bytes(item.read_bytes())
    manifest = json.loads((old / "_manifest.json").read_text())
    del manifest["model"]["decoding_fingerprint"]
    (old / "_manifest.json").write_text(json.dumps(manifest))
    assert _decode(capsys, "--model", str(encoded / "a.json"), "--input", str(old))[:2] == (0, TEXT)
    assert _decode(capsys, "--model", str(encoded / "b"), "--input", str(old))[0] == 2
    # --ids has no manifest to check: the option is refused there
    status, _, err = _decode(capsys, "--model", str(encoded / "a"), "--ids", "1 2", "--ignore-model-mismatch")
    assert status == 2 and "--ignore-model-mismatch applies to --input" in err
