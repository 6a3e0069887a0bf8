"""`bpe-spark encode` / `bpe-spark decode` as a user runs them (issue 4, acceptance 4 and 5)."""

from __future__ import annotations

import gzip
import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from tests.conftest import PEERS, ROOT, corpus_lines

from bpe_spark.cli import main
from bpe_spark.datasets.megatron import read_manifest, read_shards
from bpe_spark.encoding.tokenizer import Tokenizer

pytestmark = pytest.mark.spark

SAMPLE = ROOT / "data" / "sample" / "tiny_shakespeare.txt.gz"
EOT = "<|endoftext|>"
CL100K_URL = "https://openaipublic.blob.core.windows.net/encodings/cl100k_base.tiktoken"


def run_cli(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    """The installed ``bpe-spark`` command in a fresh process, as a user runs it."""
    command = [str(Path(sys.executable).parent / "bpe-spark"), *args]
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable, "PYSPARK_DRIVER_PYTHON": sys.executable}
    return subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True, timeout=600, check=False)


@pytest.mark.slow
def not_ours(stderr: str) -> list[str]:
    """The lines of a command's stderr that are not bpe-spark's own (JVM or Spark log lines)."""
    return [line for line in stderr.splitlines() if line.strip() and not line.startswith("bpe-spark ")]


def test_train_then_encode_then_decode_end_to_end(tmp_path):
    sample = SAMPLE  # the sample corpus of the repository
    model, shards = tmp_path / "model", tmp_path / "shards"
    trained = run_cli("train", "--input", str(sample), "--vocab-size", "2000", "--special-token", EOT,
                      "--out", str(model), "--master", "local[2]", cwd=ROOT)
    assert trained.returncode == 0, trained.stderr
    assert (model / "report.html").is_file()  # written while the JVM stopped beside it
    # quiet: no JVM or Spark line on stderr, only the tool's own (a fresh JVM each: separate processes)
    assert not_ours(trained.stderr) == []
    # stderr is no terminal here: progress is logged, one line per phase at least
    assert "bpe-spark train: counting: done, 0.43/0.43 MB in " in trained.stderr
    assert "bpe-spark train: merging: done, 1,743/1,743 merges in " in trained.stderr
    encoded = run_cli("encode", "--model", str(model), "--input", str(sample), "--out", str(shards),
                      "--output-format", "bin", "--eos", EOT, "--master", "local[2]", cwd=ROOT)
    assert encoded.returncode == 0, encoded.stderr
    assert not_ours(encoded.stderr) == []
    assert "bpe-spark encode: encoding: done, 0.43/0.43 MB in " in encoded.stderr
    assert "bpe-spark encode: writing: done, " in encoded.stderr
    assert "encoded 40,000 documents (1,115,394 bytes)" in encoded.stdout

    lines = gzip.decompress(sample.read_bytes()).decode("utf-8").splitlines(keepends=True)
    tok = Tokenizer.load(model)
    eot = tok.special_tokens[EOT]
    dataset = read_shards(shards)
    assert len(dataset) == len(lines) == 40000
    for i in range(0, len(lines), 97):
        assert dataset[i].tolist() == tok.encode(lines[i]) + [eot]
    manifest = read_manifest(shards)
    assert manifest["dtype"] == "uint16" and manifest["tokens"] == dataset.num_tokens
    assert manifest["source"]["input"] == [str(sample)]

    decoded = run_cli("decode", "--model", str(model), "--input", str(shards), "--limit", "4", cwd=ROOT)
    assert decoded.returncode == 0, decoded.stderr
    assert decoded.stderr == ""
    assert decoded.stdout == "".join(line + EOT + "\n" for line in lines[:4])


def test_jsonl_with_ids_to_parquet_then_decode(spark, tmp_path, capsys):
    lines = corpus_lines("multilingual", 40_000)
    source = tmp_path / "docs.jsonl"
    source.write_text("".join(json.dumps({"url": f"u{i}", "body": line}) + "\n" for i, line in enumerate(lines)))
    gpt2 = str(PEERS / "cs336" / "gpt2_vocab.json")
    out = tmp_path / "ids"
    code = main(["encode", "--model", gpt2, "--input", str(source), "--input-format", "jsonl",
                 "--text-column", "body", "--id-column", "url", "--out", str(out), "--bos", EOT])
    assert code == 0
    # the summary: the manifest's figures, with thousands separators, and its seconds
    manifest = read_manifest(out)
    summary = capsys.readouterr().out.splitlines()[0]
    assert summary == (
        f"encoded {len(lines):,} documents ({manifest['bytes']:,} bytes) to {manifest['tokens']:,} tokens "
        f"({manifest['bytes_per_token']:.3f} bytes per token) in 1 Parquet file at {out}: "
        f"{manifest['seconds']:,.1f} s, {manifest['bytes'] / manifest['seconds'] / 1e6:,.2f} MB/s"
    )
    assert manifest["bytes"] == sum(len(line.encode()) for line in lines) > 1000
    table = pq.read_table(out)
    assert table.column_names == ["url", "input_ids", "n_tokens"]
    assert table.column("url").to_pylist() == [f"u{i}" for i in range(len(lines))]
    import tiktoken

    tt = tiktoken.get_encoding("gpt2")
    assert table.column("input_ids").to_pylist() == [[50256] + tt.encode_ordinary(line) for line in lines]
    capsys.readouterr()
    assert main(["decode", "--model", gpt2, "--input", str(out), "--limit", "3"]) == 0
    assert capsys.readouterr().out == "".join(EOT + line for line in lines[:3])

    # a column that is not there: a clear error, no output
    code = main(["encode", "--model", gpt2, "--input", str(source), "--input-format", "jsonl",
                 "--text-column", "content", "--out", str(tmp_path / "nothing")])
    assert code == 2
    assert "column 'content' not found" in capsys.readouterr().err
    assert not (tmp_path / "nothing").exists()


def test_bad_models_and_dtypes_fail_before_spark(tmp_path, capsys):
    out = tmp_path / "out"
    docs = tmp_path / "x.txt"  # the input is checked first: it exists, so the model is what fails
    docs.write_text("hello\n", encoding="utf-8")
    assert main(["encode", "--model", str(tmp_path / "missing"), "--input", str(docs), "--out", str(out)]) == 2
    assert f"{tmp_path / 'missing'}: no such file or directory" in capsys.readouterr().err
    cl100k = Path(os.environ["TIKTOKEN_CACHE_DIR"]) / hashlib.sha1(CL100K_URL.encode()).hexdigest()
    code = main(["encode", "--model", str(cl100k), "--input", str(docs), "--out", str(out),
                 "--output-format", "bin", "--dtype", "uint16"])
    assert code == 2
    assert "largest token id is 100276, which does not fit uint16" in capsys.readouterr().err
    assert main(["encode", "--model", str(cl100k), "--input", str(docs), "--out", str(out), "--dtype", "uint32"]) == 2
    assert "--dtype applies to --output-format bin" in capsys.readouterr().err
    assert not out.exists()


def test_decode_ids(capsys):
    gpt2 = str(PEERS / "cs336" / "gpt2_vocab.json")
    assert main(["decode", "--model", gpt2, "--ids", "31373 995"]) == 0
    assert capsys.readouterr().out == "hello world\n"
    assert main(["decode", "--model", gpt2, "--ids", "31373,995,50256"]) == 0
    assert capsys.readouterr().out == "hello world<|endoftext|>\n"
    assert main(["decode", "--model", gpt2, "--ids", "12 x"]) == 2
    assert "--ids expects integers" in capsys.readouterr().err
    assert main(["decode", "--model", gpt2, "--ids", "50257"]) == 2
    assert "token id 50257 is not in the model's vocabulary" in capsys.readouterr().err
