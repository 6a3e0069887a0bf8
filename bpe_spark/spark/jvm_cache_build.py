"""The build tool of the JVM class archive (:mod:`bpe_spark.spark.runtime.jvm_cache`): build it by
running a small train + encode in a child process whose JVM writes the classes it loaded as it
exits; show where it is; clear every archive.

Build it once per machine (``make install`` does)::

    python -m bpe_spark.spark.jvm_cache_build build     # runs a small train + encode
    python -m bpe_spark.spark.jvm_cache_build path      # where it is (or would be)
    python -m bpe_spark.spark.jvm_cache_build clear     # every archive (one per Java + Spark install)

A missing archive only costs start-up time, so building never fails (exit status 0): it says
why it built nothing and Spark starts without it.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bpe_spark.spark.runtime.jvm_cache import ENV_DUMP, ENV_SWITCH, QUIET_LOGGING, archive_path, cache_dir

_WARMUP_TEXT = (
    "The quick brown fox jumps over the lazy dog. It's 2026, and we'll encode 1,234 lines!\n"
    "Über café naïve résumé — 東京 北京 上海 Москва Αθήνα 🙂\n"
    "<|endoftext|>def f(x):\n    return x ** 2  # tabs\tand spaces\n"
)


def _warm_up(work: Path) -> None:
    """Run what bpe-spark runs (read, count both ways, train, encode both formats) so that the
    archive holds the classes those jobs load."""
    from bpe_spark.bpe.config import TrainerConfig
    from bpe_spark.spark import encode_dataset, read_documents, train
    from bpe_spark.spark.runtime.session import build_session

    corpus = work / "corpus.txt"
    corpus.write_text(_WARMUP_TEXT * 200, encoding="utf-8")
    jsonl = work / "corpus.jsonl"
    jsonl.write_text("".join(json.dumps({"text": line}) + "\n" for line in _WARMUP_TEXT.splitlines()) * 50)
    spark = build_session("bpe-spark jvm-cache", master="local[2]",
                          overrides={"spark.ui.enabled": "false", "spark.ui.showConsoleProgress": "false"})
    spark.sparkContext.setLogLevel("ERROR")
    docs = read_documents(spark, str(corpus))
    cfg = TrainerConfig(vocab_size=300, special_tokens=("<|endoftext|>",))
    tok = train(docs, cfg)
    train(read_documents(spark, str(jsonl), input_format="jsonl"), TrainerConfig(vocab_size=280, lowercase=True))
    encode_dataset(docs, tok, str(work / "ids"), output_format="parquet")
    encode_dataset(docs, tok, str(work / "shards"), output_format="bin")
    spark.read.parquet(str(work / "ids")).count()
    spark.stop()


def _dump(target: str) -> int:
    """Child process: warm up under ``-XX:ArchiveClassesAtExit`` and let the JVM exit and write."""
    from pyspark import SparkContext

    with tempfile.TemporaryDirectory(prefix="bpe-spark-jvm-cache-") as work:
        _warm_up(Path(work))
    proc = getattr(SparkContext._gateway, "proc", None)
    if proc is not None:  # the JVM exits on EOF on its stdin, and writes the archive as it exits
        proc.stdin.close()
        proc.wait(timeout=120)
    return 0 if Path(target).is_file() else 1


def build_archive(force: bool = False, quiet: bool = False) -> Path | None:
    """Build the archive for this JVM and these Spark jars (if missing, or ``force``)."""
    path = archive_path()
    if path is None:
        if not quiet:
            print("jvm-cache: no java or no Spark jars found; nothing to build", file=sys.stderr)
        return None
    if path.is_file() and not force:
        return path
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    env = dict(os.environ)
    env[ENV_SWITCH] = "off"  # the child must not map the archive it is writing
    env[ENV_DUMP] = f"-XX:ArchiveClassesAtExit={tmp} {QUIET_LOGGING}"
    started = time.perf_counter()
    if not quiet:
        print(f"jvm-cache: building {path} (a small train + encode)", file=sys.stderr)
    try:
        try:
            result = subprocess.run([sys.executable, "-m", "bpe_spark.spark.jvm_cache_build", "_dump", str(tmp)],
                                    check=False, env=env, capture_output=True, text=True, timeout=300)
        except (subprocess.TimeoutExpired, OSError) as exc:
            if not quiet:
                print(f"jvm-cache: not built ({exc}); Spark starts without it", file=sys.stderr)
            return None
        if result.returncode != 0 or not tmp.is_file():
            if not quiet:
                tail = "\n".join((result.stderr or "").splitlines()[-5:])
                print(f"jvm-cache: not built (exit {result.returncode}); Spark starts without it\n{tail}", file=sys.stderr)
            return None
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
    if not quiet:
        size = path.stat().st_size / 2**20
        print(f"jvm-cache: {path} ({size:.0f} MB) in {time.perf_counter() - started:.0f} s", file=sys.stderr)
    return path


def clear() -> None:
    """Remove every archive in the cache directory (one per Java + Spark installation)."""
    for stale in cache_dir().glob("spark-classes-*.jsa"):
        stale.unlink()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bpe_spark.spark.jvm_cache_build",
        description="Build, show or clear the JVM class archive that makes Spark start faster.",
    )
    parser.add_argument("action", choices=["build", "path", "clear", "_dump"])
    parser.add_argument("target", nargs="?")
    parser.add_argument("--force", action="store_true", help="rebuild even if the archive exists")
    parser.add_argument("--quiet", action="store_true")
    parser.add_argument("--quiet-if-present", action="store_true", help="say nothing when it is already built")
    args = parser.parse_args(argv)
    if args.action == "_dump":
        return _dump(args.target)
    if args.action == "path":
        path = archive_path()
        print(f"{path} ({'present' if path and path.is_file() else 'absent'})")
        return 0
    if args.action == "clear":
        clear()
        return 0
    path = archive_path()
    if args.quiet_if_present and not args.force and path is not None and path.is_file():
        return 0
    try:
        built = build_archive(force=args.force, quiet=args.quiet)
    except OSError as exc:  # e.g. an unwritable cache directory
        print(f"jvm-cache: not built ({exc}); Spark starts without it", file=sys.stderr)
        return 0
    if built is not None and not args.quiet:
        print(built)
    return 0  # a missing archive only costs start-up time: never fail an install for it


if __name__ == "__main__":
    sys.exit(main())
