"""Spark Connect sessions (issue 13, item 8): the readers give their DataFrames, and every entry
point that works on the executors refuses one up front, in one line, before any Spark job runs
(bpe-spark drives its executors through the SparkContext)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

pytest.importorskip("grpc", reason="Spark Connect's client needs grpcio (the dev extras)")

SCRIPT = textwrap.dedent("""
    import json, sys
    from pyspark.sql import SparkSession
    from bpe_spark import Tokenizer, TrainerConfig
    from bpe_spark import train as core_train
    from bpe_spark.spark import (count_pretokens, encode, encode_dataset, read_counts, read_documents, train,
                                 train_from_counts)

    corpus, counts_file, out = sys.argv[1], sys.argv[2], sys.argv[3]
    spark = SparkSession.builder.remote("local[1]").getOrCreate()
    docs = spark.createDataFrame([("hello world",)], ["text"])
    counts = spark.createDataFrame([("hello", 3)], ["pretoken", "count"])
    cfg = TrainerConfig(vocab_size=260)
    tok = core_train(["hello world"], cfg)
    read = {"read_documents": read_documents(spark, corpus).columns,
            "read_counts": read_counts(spark, counts_file).columns}
    calls = {
        "count_pretokens": lambda: count_pretokens(docs, cfg),
        "train": lambda: train(docs, cfg),
        "train_checkpointed": lambda: train(docs, cfg, checkpoint_dir=out + "/ckpt"),
        "train_from_counts": lambda: train_from_counts(counts, cfg),
        "encode": lambda: encode(docs, tok),
        "encode_dataset": lambda: encode_dataset(docs, tok, out + "/enc"),
    }
    seen = {}
    for name, call in calls.items():
        try:
            call()
            seen[name] = "no error"
        except Exception as exc:
            seen[name] = f"{type(exc).__name__}: {exc}"
    print("READ " + json.dumps(read))
    print("SEEN " + json.dumps(seen))
    spark.stop()
""")


def test_every_entry_point_refuses_a_connect_session_up_front(tmp_path):
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("hello world\n", encoding="utf-8")
    import pyarrow as pa
    import pyarrow.parquet as pq

    counts = tmp_path / "counts.parquet"
    pq.write_table(pa.table({"pretoken": ["hello"], "count": [3]}), counts)
    script = tmp_path / "connect_probe.py"
    script.write_text(SCRIPT, encoding="utf-8")
    env = dict(os.environ, PYSPARK_PYTHON=sys.executable, PYSPARK_DRIVER_PYTHON=sys.executable)
    result = subprocess.run([sys.executable, str(script), str(corpus), str(counts), str(tmp_path)], capture_output=True,
                            text=True, env=env, cwd=tmp_path, timeout=600, check=False)
    assert result.returncode == 0, result.stderr[-3000:]
    lines = result.stdout.splitlines()
    read = json.loads(next(line for line in lines if line.startswith("READ "))[5:])
    assert read == {"read_documents": ["text"], "read_counts": ["pretoken", "count"]}
    seen = json.loads(next(line for line in lines if line.startswith("SEEN "))[5:])
    for name, outcome in seen.items():
        assert outcome.startswith("ConfigError: bpe-spark needs a classic Spark session"), (name, outcome)
        assert "\n" not in outcome
    assert not (tmp_path / "ckpt").exists() and not (tmp_path / "enc").exists()
