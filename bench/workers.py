"""The measured programs of the benchmark, one per child process.

``python -m bench.workers TASK JSON_ARGS`` runs one task and prints one line
``BENCH_RESULT {...}`` with its in-process timings and a digest of its output (merges or ids),
so the parent can check that both sides computed the same thing. Each task imports only what
it measures.
"""

from __future__ import annotations

import hashlib
import json
import os
import statistics
import sys
import time
from pathlib import Path

RESULT_PREFIX = "BENCH_RESULT "


def _emit(result: dict) -> None:
    print(RESULT_PREFIX + json.dumps(result), flush=True)


def _digest_merges(merges: list[str]) -> str:
    return hashlib.sha256("\n".join(merges).encode("utf-8")).hexdigest()


class IdDigest:
    """A running sha256 over documents' ids (length, then int32 values, per document)."""

    def __init__(self) -> None:
        import numpy as np

        self._np = np
        self._hash = hashlib.sha256()
        self.documents = 0
        self.tokens = 0

    def add(self, ids) -> None:
        arr = self._np.asarray(ids, dtype="<i4")
        self._hash.update(len(arr).to_bytes(8, "little"))
        self._hash.update(arr.tobytes())
        self.documents += 1
        self.tokens += len(arr)

    def hexdigest(self) -> str:
        return self._hash.hexdigest()


def _write_merges(path: str | None, merges: list[str]) -> None:
    if path:
        Path(path).write_text("\n".join(merges) + "\n", encoding="utf-8")


def _lines(path: str) -> list[str]:
    with open(path, encoding="utf-8", newline="") as fh:
        return fh.read().splitlines(keepends=True)


# --- training ----------------------------------------------------------------------------------


def hf_train(args: dict) -> dict:
    """tokenizers' BpeTrainer on files (ByteLevel, gpt2 regex), timing ``train`` alone."""
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    trainer = trainers.BpeTrainer(
        vocab_size=args["vocab_size"],
        show_progress=False,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        special_tokens=args.get("special_tokens", []),
    )
    started = time.perf_counter()
    tok.train(args["files"], trainer)
    seconds = time.perf_counter() - started
    merges = json.loads(tok.to_str())["model"]["merges"]
    merges = [" ".join(m) if isinstance(m, list) else m for m in merges]
    _write_merges(args.get("merges_out"), merges)
    if args.get("tokenizer_out"):
        tok.save(args["tokenizer_out"])
    return {"seconds": seconds, "merges": len(merges), "digest": _digest_merges(merges)}


def ours_train_from_counts(args: dict) -> dict:
    """``train_from_counts`` on a JSON file of pretoken counts (the merge engine, T3)."""
    from bpe_spark import TrainerConfig, train_from_counts
    from bpe_spark.bpe.symbols import bytes_to_display
    from bpe_spark.training.engine import compiled_core_available

    with open(args["counts"], encoding="utf-8") as fh:
        counts = json.load(fh)
    cfg = TrainerConfig(vocab_size=args["vocab_size"], pattern="gpt2", tie_break="hf")
    started = time.perf_counter()
    tok = train_from_counts(counts, cfg)
    seconds = time.perf_counter() - started
    merges = [f"{bytes_to_display(a)} {bytes_to_display(b)}" for a, b in tok.merges]
    _write_merges(args.get("merges_out"), merges)
    return {
        "seconds": seconds,
        "merges": len(merges),
        "digest": _digest_merges(merges),
        "engine": "compiled" if compiled_core_available() else "python",
    }


def model_merges(args: dict) -> dict:
    """The merges of a bpe-spark model directory, in tokenizers' display form."""
    from bpe_spark import Tokenizer
    from bpe_spark.bpe.symbols import bytes_to_display

    tok = Tokenizer.load(args["model"])
    merges = [f"{bytes_to_display(a)} {bytes_to_display(b)}" for a, b in tok.merges]
    _write_merges(args.get("merges_out"), merges)
    if args.get("tokenizer_json_out"):
        from bpe_spark.models.load import export_model

        export_model(tok, "tokenizer.json", args["tokenizer_json_out"])
    return {"merges": len(merges), "digest": _digest_merges(merges)}


def cs336(args: dict) -> dict:
    """CS336's training test: corpus.en, vocab 500, <|endoftext|>, lexicographic tie-break."""
    from bpe_spark import TrainerConfig, train
    from bpe_spark.bpe.symbols import bytes_to_display

    text = Path(args["corpus"]).read_text(encoding="utf-8")
    cfg = TrainerConfig(
        vocab_size=500, pattern="gpt2", special_tokens=("<|endoftext|>",), tie_break="lexicographic"
    )
    started = time.perf_counter()
    tok = train(text, cfg)
    seconds = time.perf_counter() - started
    ours = [f"{bytes_to_display(a)} {bytes_to_display(b)}" for a, b in tok.merges]
    reference = [
        line.rstrip("\n") for line in Path(args["reference"]).read_text(encoding="utf-8").splitlines()
        if line.strip()
    ]
    return {"seconds": seconds, "merges": len(ours), "digest": _digest_merges(ours), "exact": ours == reference}


def spm_train(args: dict) -> dict:
    """SentencePiece BPE on a text file (for reference; its merges are not comparable)."""
    import sentencepiece as spm

    prefix = args["model_prefix"]
    started = time.perf_counter()
    spm.SentencePieceTrainer.train(
        input=args["file"],
        model_prefix=prefix,
        model_type="bpe",
        vocab_size=args["vocab_size"],
        num_threads=args.get("threads", 2),
        character_coverage=1.0,
        byte_fallback=True,
        max_sentence_length=1 << 16,
        minloglevel=2,
    )
    return {"seconds": time.perf_counter() - started}


# --- encoding ----------------------------------------------------------------------------------


def _timed_encode(encode_all, lines: list[str], ids_of=lambda row: row) -> dict:
    """Time ``encode_all(lines)`` alone, then digest each row's ids (``ids_of(row)``)."""
    started = time.perf_counter()
    rows = encode_all(lines)
    seconds = time.perf_counter() - started
    digest = IdDigest()
    for row in rows:
        digest.add(ids_of(row))
    return {"seconds": seconds, "digest": digest.hexdigest(), "tokens": digest.tokens, "documents": digest.documents}


def tiktoken_encode(args: dict) -> dict:
    """tiktoken, one thread: encode_ordinary per line, with our model's ranks."""
    import tiktoken

    from bpe_spark import Tokenizer
    from bpe_spark.bpe.patterns import PRESETS

    tok = Tokenizer.load(args["model"])
    ranks = {value: token_id for token_id, value in tok.vocab.items()}
    enc = tiktoken.Encoding("bench", pat_str=PRESETS[tok.pattern], mergeable_ranks=ranks, special_tokens={})
    encode = enc.encode_ordinary
    return _timed_encode(lambda lines: [encode(line) for line in lines], _lines(args["file"]))


def hf_encode(args: dict) -> dict:
    """tokenizers' encode_batch (its threads: RAYON_NUM_THREADS) with our exported tokenizer.json."""
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(args["tokenizer_json"])
    return _timed_encode(
        lambda lines: tok.encode_batch(lines, add_special_tokens=False),
        _lines(args["file"]),
        ids_of=lambda encoding: encoding.ids,
    )


def ours_encode_inprocess(args: dict) -> dict:
    """Our Tokenizer.encode_ordinary per line, in one process (the pure-Python/compiled path)."""
    from bpe_spark import Tokenizer

    tok = Tokenizer.load(args["model"])
    encode = tok.encode_ordinary
    return _timed_encode(lambda lines: [encode(line) for line in lines], _lines(args["file"]))


def ours_spark_encode(args: dict) -> dict:
    """Our Spark encode in local[N]: read the text, encode, write Parquet.

    Throughput is a steady-state figure, as for a long job: the session start, the model load and
    a first encode of a small warm-up file (which starts the Python workers) are timed apart, as
    ``session_seconds`` and ``first_seconds``; then the file is encoded ``runs`` times in the same
    session (the JVM's JIT warms up over the first) and ``seconds`` is the median of ``runs``.
    """
    from bpe_spark import Tokenizer
    from bpe_spark.spark import encode_dataset
    from bpe_spark.spark.read.documents import read_documents
    from bpe_spark.spark.runtime.session import build_session

    started = time.perf_counter()
    overrides = {"spark.ui.enabled": "false", "spark.ui.showConsoleProgress": "false"}
    if args.get("event_dir"):
        overrides.update({"spark.eventLog.enabled": "true", "spark.eventLog.compress": "false",
                          "spark.eventLog.dir": Path(args["event_dir"]).as_uri()})
    spark = build_session("bpe-spark-bench-encode", master=args.get("master", "local[2]"), overrides=overrides)
    tok = Tokenizer.load(args["model"])
    session_seconds = time.perf_counter() - started
    first_seconds = None
    if args.get("warmup_file"):
        started = time.perf_counter()
        encode_dataset(read_documents(spark, args["warmup_file"]), tok, args["out"] + ".warmup",
                       output_format="parquet", overwrite=True)
        first_seconds = time.perf_counter() - started
    runs = []
    for _ in range(int(args.get("runs", 1))):
        started = time.perf_counter()
        docs = read_documents(spark, args["file"])
        encode_dataset(docs, tok, args["out"], output_format="parquet", overwrite=True)
        runs.append(time.perf_counter() - started)
    spark.stop()
    import pyarrow.parquet as pq

    digest = IdDigest()
    for part in sorted(Path(args["out"]).glob("part-*.parquet")):
        table = pq.read_table(part, columns=["doc_id", "input_ids"])
        doc_ids = table.column("doc_id").to_pylist()
        if doc_ids != sorted(doc_ids):
            raise RuntimeError(f"{part} is not in document order")
        for row in table.column("input_ids").to_pylist():
            digest.add(row)
    return {
        "seconds": statistics.median(runs),
        "runs": runs,
        "session_seconds": session_seconds,
        "first_seconds": first_seconds,
        "digest": digest.hexdigest(),
        "tokens": digest.tokens,
        "documents": digest.documents,
    }


TASKS = {
    "hf_train": hf_train,
    "ours_train_from_counts": ours_train_from_counts,
    "model_merges": model_merges,
    "cs336": cs336,
    "spm_train": spm_train,
    "tiktoken_encode": tiktoken_encode,
    "hf_encode": hf_encode,
    "ours_encode_inprocess": ours_encode_inprocess,
    "ours_spark_encode": ours_spark_encode,
}


def run_task(tasks: dict, argv: list[str]) -> int:
    """Run ``tasks[argv[0]]`` on the JSON arguments ``argv[1]`` and print its BENCH_RESULT line."""
    task, raw = argv[0], argv[1] if len(argv) > 1 else "{}"
    result = tasks[task](json.loads(raw))
    result["pid"] = os.getpid()
    _emit(result)
    return 0


def main(argv: list[str]) -> int:
    return run_task(TASKS, argv)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
